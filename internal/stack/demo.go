package stack

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/names"

	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// DemoResult is what a demo achieved.
type DemoResult struct {
	// Plan is the name of the plan the demo ran.
	Plan     string
	RTO      time.Duration
	RPO      time.Duration
	RPOKnown bool
	// LostInFailover are writes east acknowledged after its last sync:
	// the loss the RPO allows. LostInFailback must be zero.
	LostInFailover, LostInFailback int
	Writers                        map[string]WriteCounts
	Report                         *sim.Report
	// Test is what the test recovery at west did.
	Test TestOutcome
	// Build is the worker build (Worker Deployment Version) the failover
	// was pinned to.
	Build string
}

// TestOutcome is the demo's test recovery: the copies it made and deleted,
// the write it made on one and whether a replica saw it.
type TestOutcome struct {
	Copies      int
	Copy        string // the copy written on (of db-data)
	ReplicaSaw  bool   // a replica of either site holds the test's write
	Left        int    // snapshots and copies left at the end
	WorkloadRTO time.Duration
}

// Demo starts the stack, runs the demo plan through protection, a drill,
// a test recovery at west (a write on a copy that no replica sees), the
// loss of east with a failover to west, east's return with a
// reprotect, and a failback to east, while an application writes on each
// site; it prints the achieved RTO, the RPO and the simulator's
// invariant check, and stops the stack whatever happens.
func Demo(ctx context.Context, o Options, drctl string) (res *DemoResult, err error) {
	out := o.Out
	st, err := Start(ctx, o)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if ended := st.Ended(); ended != nil && !strings.Contains(err.Error(), ended.Error()) {
				err = fmt.Errorf("%w\n%v", err, ended)
			}
		}
		fmt.Fprintln(out, "\n== stopping the stack")
		if serr := st.Stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	east, west := o.Layout.Sites[0], o.Layout.Sites[1]
	c, err := st.Client(ctx)
	if err != nil {
		return nil, err
	}
	plan := st.PlanFile
	p, err := plans.Load(plan)
	if err != nil {
		return nil, fmt.Errorf("the demo plan: %w", err)
	}
	name := p.Metadata.Name
	run := func(args ...string) error {
		fmt.Fprintf(out, "\n$ drctl %s\n", strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, drctl, args...)
		cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+o.Layout.Temporal, "TEMPORAL_NAMESPACE=default")
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("drctl %s: %v", args[0], err)
		}
		return nil
	}
	section := func(format string, a ...any) { fmt.Fprintf(out, "\n== "+format+"\n", a...) }

	if err := run("plan", "validate", plan); err != nil {
		return nil, err
	}
	section("an application writes on each site: east's from %s (east is primary), west's from %s (refused while west is a secondary)", east.Client, west.Client)
	wctx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopWriters(); wg.Wait() }()
	writers := map[string]*Writer{}
	for _, site := range o.Layout.Sites {
		w, err := NewWriter(site, []string{"db-data", "web-assets"})
		if err != nil {
			return nil, err
		}
		writers[site.Name] = w
		wg.Add(1)
		go func() { defer wg.Done(); w.Run(wctx, 50*time.Millisecond) }()
	}
	if err := run("protect", "start", plan, "--primary", east.Name, "--interval", "1s"); err != nil {
		return nil, err
	}
	if err := st.waitFor(ctx, time.Minute, "protection to record a sync of every group", func() bool {
		ps, err := workflows.ReadProtect(ctx, c, name)
		return err == nil && len(ps.Groups) == 2 && !ps.LastSync().IsZero() && writers[east.Name].Counts().Acked >= 20
	}); err != nil {
		return nil, err
	}
	if err := run("status", name); err != nil {
		return nil, err
	}
	section("rehearse first: a drill checks everything and changes nothing")
	if err := run("drill", plan, "--to", west.Name, "--wait"); err != nil {
		return nil, err
	}

	section("a test recovery at %s: the workloads on copies of its replicas, while replication carries on", west.Name)
	test, err := demoTestRecovery(ctx, st, c, run, name, west)
	if err != nil {
		return nil, err
	}

	section("site %s is lost", east.Name)
	eastCtl := sim.NewControl(east.Control)
	if err := eastCtl.Down(ctx); err != nil {
		return nil, err
	}
	if err := run("failover", plan, "--to", west.Name, "--yes", "--wait"); err != nil {
		return nil, err
	}
	var fo workflows.FailoverResult
	if err := c.GetWorkflow(ctx, workflows.ActionID(name), "").Get(ctx, &fo); err != nil {
		return nil, err
	}
	build, err := PinnedBuild(ctx, c, workflows.ActionID(name))
	if err != nil {
		return nil, err
	}
	before := writers[west.Name].Counts().Acked
	if err := st.waitFor(ctx, 30*time.Second, "west's application to write", func() bool { return writers[west.Name].Counts().Acked >= before+20 }); err != nil {
		return nil, err
	}

	section("site %s is back: its clients stay fenced until the reprotect", east.Name)
	if err := eastCtl.Up(ctx); err != nil {
		return nil, err
	}
	fenced := writers[east.Name].Counts().Fenced
	if err := st.waitFor(ctx, 30*time.Second, "the fence to refuse east's application", func() bool { return writers[east.Name].Counts().Fenced > fenced }); err != nil {
		return nil, err
	}
	if err := run("reprotect", plan, "--yes", "--wait"); err != nil {
		return nil, err
	}
	section("fail back to %s, with no write lost", east.Name)
	if err := run("failback", plan, "--to", east.Name, "--yes", "--wait"); err != nil {
		return nil, err
	}
	before = writers[east.Name].Counts().Acked
	if err := st.waitFor(ctx, 30*time.Second, "east's application to write again", func() bool { return writers[east.Name].Counts().Acked >= before+10 }); err != nil {
		return nil, err
	}
	stopWriters()
	wg.Wait()

	res = &DemoResult{Plan: name, RTO: fo.RTO, RPO: fo.RPO, RPOKnown: fo.RPOKnown, Writers: map[string]WriteCounts{}, Test: *test, Build: build}
	for name, w := range writers {
		res.Writers[name] = w.Counts()
	}
	states, err := st.States(ctx)
	if err != nil {
		return nil, err
	}
	res.Report = sim.Check(states...)
	for _, l := range res.Report.Lost {
		if l.Site == east.Name {
			res.LostInFailover++
		} else {
			res.LostInFailback++
		}
	}
	section("results")
	rpo := "unknown"
	if fo.RPOKnown {
		rpo = fo.RPO.Round(time.Millisecond).String()
	}
	fmt.Fprintf(out, "failover RTO:   %v (loss of east to west's workloads healthy)\n", fo.RTO.Round(time.Millisecond))
	fmt.Fprintf(out, "RPO estimate:   %s (the failover's start minus the last sync Protect saw); %d write(s) east acknowledged after its last sync were lost, as the RPO allows\n", rpo, res.LostInFailover)
	fmt.Fprintf(out, "failback:       %d write(s) lost\n", res.LostInFailback)
	fmt.Fprintf(out, "test recovery:  %d copies, app-test healthy after %v; a write on copy %s reached no replica; %d left after the cleanup\n",
		test.Copies, test.WorkloadRTO.Round(time.Millisecond), test.Copy, test.Left)
	for _, site := range o.Layout.Sites {
		fmt.Fprintf(out, "writes on %-5s %v\n", site.Name+":", res.Writers[site.Name])
	}
	fmt.Fprintf(out, "versioning:     the failover ran pinned to build %s of Worker Deployment %s\n", build, names.Deployment)
	fmt.Fprintf(out, "invariants:     %v\n", strings.TrimSpace(res.Report.String()))
	if err := checkMetrics(o.Layout.Metrics); err != nil {
		return res, err
	}
	fmt.Fprintf(out, "metrics:        http://%s/metrics has drover_action_duration and drover_replication_lag_seconds\n", o.Layout.Metrics)
	if test.ReplicaSaw || test.Left > 0 {
		return res, fmt.Errorf("the test recovery touched production: a replica saw its write (%v), or %d snapshots and copies were left", test.ReplicaSaw, test.Left)
	}
	if !res.Report.OK() || res.LostInFailback > 0 {
		return res, fmt.Errorf("the storage invariants do not hold:\n%v", res.Report)
	}
	return res, nil
}

// PinnedBuild is the build of Worker Deployment drover the workflow's
// latest run is pinned to; an error when it runs unversioned or is not
// pinned (the worker runs with Worker Versioning, as in production).
func PinnedBuild(ctx context.Context, c client.Client, id string) (string, error) {
	d, err := c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return "", err
	}
	vi := d.GetWorkflowExecutionInfo().GetVersioningInfo()
	v := vi.GetDeploymentVersion()
	if vi.GetBehavior() != enums.VERSIONING_BEHAVIOR_PINNED || v.GetDeploymentName() != names.Deployment || v.GetBuildId() == "" {
		return "", fmt.Errorf("%s did not run pinned to a build of Worker Deployment %s (behaviour %v, version %q:%q): the worker runs without Worker Versioning",
			id, names.Deployment, vi.GetBehavior(), v.GetDeploymentName(), v.GetBuildId())
	}
	return v.GetBuildId(), nil
}

func checkMetrics(addr string) error {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	for _, m := range []string{"drover_action_duration", "drover_replication_lag_seconds"} {
		if !strings.Contains(string(b), m) {
			return fmt.Errorf("the worker's metrics lack %s", m)
		}
	}
	return nil
}

// testWrite is what the demo writes on the copy during its test recovery.
const testWrite = "written during the test recovery"

// demoTestRecovery runs a test recovery of the demo plan at site: once
// its workload runs on the copies, it writes on db-data's copy from the
// site's node, shows the replica without that write, ends the test with
// drctl approve, and checks that the copies are gone.
func demoTestRecovery(ctx context.Context, st *Stack, c client.Client, run func(...string) error, plan string, site SiteLayout) (*TestOutcome, error) {
	id := workflows.TestRecoveryID(plan)
	if err := run("test-recovery", st.PlanFile, "--at", site.Name); err != nil {
		return nil, err
	}
	var res workflows.TestRecoveryResult
	if err := st.waitFor(ctx, time.Minute, "the test workloads to run on the copies", func() bool {
		v, err := c.QueryWorkflow(ctx, id, "", workflows.QueryTestCopies)
		if err != nil || v.Get(&res) != nil {
			return false
		}
		return slices.ContainsFunc(res.Progress.Steps, func(s *workflows.Step) bool { return s.State == workflows.StateWaiting })
	}); err != nil {
		return nil, err
	}
	if err := run("status", id); err != nil {
		return nil, err
	}
	out := &TestOutcome{Copies: len(res.Copies)}
	for _, cp := range res.Copies {
		if cp.Volume == "db-data" {
			out.Copy = cp.Copy
		}
	}
	if out.Copy == "" {
		return nil, fmt.Errorf("the test recovery made no copy of db-data: %+v", res.Copies)
	}
	cl, err := sim.NewClient(site.Data, site.Client, site.Name+"-test")
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if _, err := cl.Write(ctx, out.Copy, 0, []byte(testWrite)); err != nil {
		return nil, fmt.Errorf("write on the copy %s: %w", out.Copy, err)
	}
	got, err := cl.Read(ctx, out.Copy, 0)
	if err != nil || string(got) != testWrite {
		return nil, fmt.Errorf("read the copy back: %q, %v", got, err)
	}
	fmt.Fprintf(st.Out, "wrote %q on %s's copy %s of db-data from %s\n", testWrite, site.Name, out.Copy, site.Client)
	states, err := st.States(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range states {
		for _, u := range s.Units {
			for _, blocks := range u.Blocks {
				for _, b := range blocks {
					out.ReplicaSaw = out.ReplicaSaw || string(b.Data) == testWrite
				}
			}
		}
	}
	fmt.Fprintf(st.Out, "the replicas of both sites hold that write: %v\n", out.ReplicaSaw)
	if err := run("approve", id, "--yes"); err != nil {
		return nil, err
	}
	if err := run("watch", id); err != nil {
		return nil, err
	}
	var done workflows.TestRecoveryResult
	if err := c.GetWorkflow(ctx, id, "").Get(ctx, &done); err != nil {
		return nil, err
	}
	out.WorkloadRTO = done.RTO["app"]
	if states, err = st.States(ctx); err != nil {
		return nil, err
	}
	for _, s := range states {
		out.Left += len(s.Snapshots) + len(s.GroupSnapshots) + len(s.Clones)
	}
	return out, nil
}
