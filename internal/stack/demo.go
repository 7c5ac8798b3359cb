package stack

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// DemoResult is what a demo achieved.
type DemoResult struct {
	RTO      time.Duration
	RPO      time.Duration
	RPOKnown bool
	// LostInFailover are writes east acknowledged after its last sync:
	// the loss the RPO allows. LostInFailback must be zero.
	LostInFailover, LostInFailback int
	Writers                        map[string]WriteCounts
	Report                         *sim.Report
}

// Demo starts the stack, runs the demo plan through protection, a drill,
// the loss of east with a failover to west, east's return with a
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
		ps, err := workflows.ReadProtect(ctx, c, "demo")
		return err == nil && len(ps.Groups) == 2 && !ps.LastSync().IsZero() && writers[east.Name].Counts().Acked >= 20
	}); err != nil {
		return nil, err
	}
	if err := run("status", "demo"); err != nil {
		return nil, err
	}
	section("rehearse first: a drill checks everything and changes nothing")
	if err := run("drill", plan, "--to", west.Name, "--wait"); err != nil {
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
	if err := c.GetWorkflow(ctx, workflows.ActionID("demo"), "").Get(ctx, &fo); err != nil {
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

	res = &DemoResult{RTO: fo.RTO, RPO: fo.RPO, RPOKnown: fo.RPOKnown, Writers: map[string]WriteCounts{}}
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
	for _, site := range o.Layout.Sites {
		fmt.Fprintf(out, "writes on %-5s %v\n", site.Name+":", res.Writers[site.Name])
	}
	fmt.Fprintf(out, "invariants:     %v\n", strings.TrimSpace(res.Report.String()))
	if err := checkMetrics(o.Layout.Metrics); err != nil {
		return res, err
	}
	fmt.Fprintf(out, "metrics:        http://%s/metrics has drover_action_duration and drover_replication_lag_seconds\n", o.Layout.Metrics)
	if !res.Report.OK() || res.LostInFailback > 0 {
		return res, fmt.Errorf("the storage invariants do not hold:\n%v", res.Report)
	}
	return res, nil
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
