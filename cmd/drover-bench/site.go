package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/csiaddons/identity"
	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/internal/stack"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// The site rows: a site failover (SiteFailover, as drctl failover --site
// starts it) of many plans at once, tier by tier, against a plain
// program that makes the same calls at the same concurrency.

// Temporal's stores a site row can run on.
const (
	storeDev = "dev" // the dev server on its SQLite file, as make demo and the per-plan rows
	storeSQL = "sql" // the Temporal server on PostgreSQL, as make e2e-sql sets it up
)

// siteSize is one site row's configuration.
type siteSize struct {
	store   string
	plans   int // plans of the site
	atOnce  int // the site action's plans at once (--plans-at-once)
	groups  int // volume groups per plan
	tiers   int
	latency time.Duration
}

// siteRow is one measured site failover.
type siteRow struct {
	siteSize
	measured    time.Duration // the start request to the site action's result, as the client sees it
	direct      time.Duration // the same calls by a plain program at the same concurrency
	rto         time.Duration // the site-wide RTO the site action reports
	events      int64         // history events of the site action and every plan's failover
	workerRSS   int64         // the worker's VmHWM, bytes
	temporalRSS int64         // the Temporal server's VmHWM, bytes
	warnings    int           // the server's history and payload size warnings
	server      string        // the Temporal server's version
	floor       time.Duration // a workflow starting children that do nothing, as many, tier by tier, as many at once
	turns       time.Duration // a workflow taking the design's turns of a site failover, without a storage call
	shaped      time.Duration // the same turns, each child carrying what its plan's failover carried (planShape)
	temporalCPU time.Duration // the CPU time the Temporal server process used during the site failover
	workerCPU   time.Duration // the CPU time the worker used during the site failover
	machine     machineTimes  // the machine's CPU times during the site failover, every process's
	runs        []time.Duration
}

func (r siteRow) eventsPerPlan() float64 { return float64(r.events) / float64(r.plans) }

// tierOf spreads a site's plans over its tiers in blocks: the first
// plans tier 0, the last tier tiers-1.
func tierOf(i, plans, tiers int) int { return i * tiers / plans }

// sitePlanName names the site's plan i (from 0).
func sitePlanName(i int) string { return fmt.Sprintf("site-bench-%03d", i+1) }

// sitePlanText is the site's plan i: groups of its own (the site's
// groups i*perPlan+1 … (i+1)*perPlan), its tier, one exec workload.
func sitePlanText(i int, sz siteSize, all []sim.GroupSpec, parallelism int) string {
	var b strings.Builder
	head := stack.PlanHead(sitePlanName(i), 30*time.Second)
	// The tier goes in the metadata, after the name.
	head = strings.Replace(head, "\nsites:\n", fmt.Sprintf("\n  tier: %d\nsites:\n", tierOf(i, sz.plans, sz.tiers)), 1)
	b.WriteString(head)
	b.WriteString("volumeGroups:\n")
	for _, g := range all[i*sz.groups : (i+1)*sz.groups] {
		fmt.Fprintf(&b, "  - {name: %q, sites: {east: {groupID: %s}, west: {groupID: %s}}}\n", strings.TrimPrefix(g.ID, "vg-"), g.ID, g.ID)
	}
	fmt.Fprintf(&b, `workloads:
  - name: app
    sites:
      east: {exec: {start: "true", stop: "true", health: "true"}}
      west: {exec: {start: "true", stop: "true", health: "true"}}
policy:
  parallelism: %d
`, parallelism)
	return b.String()
}

// startSiteStack starts a fresh stack holding every group of the site's
// plans, replication enabled and synced, the latency on every call, and
// loads the plans with the stack's endpoints. A stack that does not
// start is started once more on other ports, as a per-plan row's.
func startSiteStack(ctx context.Context, o options, sz siteSize, storageOnly bool) (*stack.Stack, []*plans.Plan, error) {
	st, ps, err := setUpSite(ctx, o, sz, storageOnly)
	if err != nil && ctx.Err() == nil {
		fmt.Printf("   the stack did not start (%v); once more on other ports\n", err)
		st, ps, err = setUpSite(ctx, o, sz, storageOnly)
	}
	return st, ps, err
}

func setUpSite(ctx context.Context, o options, sz siteSize, storageOnly bool) (*stack.Stack, []*plans.Plan, error) {
	dir := filepath.Join(o.dir, fmt.Sprintf("site-p%d-x%d-g%d-l%v-%s", sz.plans, sz.atOnce, sz.groups, sz.latency, sz.store))
	if storageOnly {
		dir = filepath.Join(o.dir, fmt.Sprintf("site-p%d-x%d-g%d-l%v-direct", sz.plans, sz.atOnce, sz.groups, sz.latency))
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	all := sim.GenerateGroups(sz.plans*sz.groups, 1)
	texts := make([]string, sz.plans)
	for i := range texts {
		texts[i] = sitePlanText(i, sz, all, o.parallelism)
	}
	template := filepath.Join(dir, "plan-template.yaml")
	if err := os.WriteFile(template, []byte(texts[0]), 0o644); err != nil {
		return nil, nil, err
	}
	layout, err := freeLayout()
	if err != nil {
		return nil, nil, err
	}
	st, err := stack.Start(ctx, stack.Options{Dir: dir, Bin: o.bin, Plan: template, Groups: all,
		Layout: layout, StorageOnly: storageOnly, SQL: sz.store == storeSQL})
	if err != nil {
		return nil, nil, err
	}
	ps := make([]*plans.Plan, sz.plans)
	var groups []plans.VolumeGroup
	for i, text := range texts {
		// The stack's endpoints, as it writes its own copy of the template.
		for _, site := range layout.Sites {
			text = strings.ReplaceAll(text, site.Endpoint, site.GRPC)
		}
		f := filepath.Join(dir, sitePlanName(i)+".yaml")
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			st.Stop()
			return nil, nil, err
		}
		if ps[i], err = plans.Load(f); err != nil {
			st.Stop()
			return nil, nil, err
		}
		groups = append(groups, ps[i].VolumeGroups...)
	}
	if err := enable(ctx, ps[0].Site("east").Storage.Endpoint, groups, layout); err != nil {
		st.Stop()
		return nil, nil, err
	}
	if err := setLatency(ctx, layout, sz.latency); err != nil {
		st.Stop()
		return nil, nil, err
	}
	return st, ps, nil
}

// measureSite runs one site failover of east's plans to west through
// Temporal, as drctl failover --site east --to west --plans-at-once N
// starts it, on a fresh stack.
func measureSite(ctx context.Context, o options, r *siteRow) (err error) {
	st, ps, err := startSiteStack(ctx, o, r.siteSize, false)
	if err != nil {
		return err
	}
	defer func() {
		if serr := st.Stop(); err == nil {
			err = serr
		}
	}()
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	// Every plan's record runs, as once Protect has watched the plans.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, p := range ps {
		g.Go(func() error { return startRecord(gctx, st, c, p) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	in := workflows.SiteFailoverInput{Origin: workflows.Origin{By: "drover-bench"}, From: "east", To: "west", Parallelism: r.atOnce}
	for _, p := range ps {
		sig, err := st.Sign(p)
		if err != nil {
			return err
		}
		in.Plans = append(in.Plans, workflows.SitePlan{Plan: p, Signature: sig})
	}
	pids := st.PIDs()
	cpu := func() (temporal, worker time.Duration, err error) {
		if temporal, err = cpuTime(pids["temporal"]); err == nil {
			worker, err = cpuTime(pids["worker"])
		}
		return temporal, worker, err
	}
	temporal0, worker0, err := cpu()
	if err != nil {
		return err
	}
	machine0, err := machineCPU()
	if err != nil {
		return err
	}
	t0 := time.Now()
	wr, err := workflows.StartSite(ctx, c, in)
	if err != nil {
		return err
	}
	var res workflows.SiteFailoverResult
	if err := wr.Get(ctx, &res); err != nil {
		return err
	}
	r.measured = time.Since(t0)
	temporal1, worker1, err := cpu()
	if err != nil {
		return err
	}
	r.temporalCPU, r.workerCPU = temporal1-temporal0, worker1-worker0
	machine1, err := machineCPU()
	if err != nil {
		return err
	}
	r.machine = machine1.since(machine0)
	r.rto = res.RTO
	if res.State != workflows.StateCompleted || len(res.LeftBehind) > 0 {
		return fmt.Errorf("the site failover ended %s, %d plan(s) left behind: %s", res.State, len(res.LeftBehind), strings.Join(res.LeftBehind, ", "))
	}
	if o.steps {
		for _, s := range res.Steps {
			if _, plan := workflows.IsPlanStep(s); !plan {
				fmt.Printf("   %-70s %v\n", s.Name, s.End.Sub(s.Start).Round(time.Millisecond))
			}
		}
	}
	if o.steps && len(res.Plans) > 0 {
		var rtos []time.Duration
		for _, p := range res.Plans {
			rtos = append(rtos, p.RTO)
		}
		slices.Sort(rtos)
		fmt.Printf("   the plans' own RTO: least %v, median %v, most %v\n", ms(rtos[0]), ms(rtos[len(rtos)/2]), ms(rtos[len(rtos)-1]))
		// The site action's history and its first plan's, on the
		// client's clock from the start request.
		fmt.Println("   the site action's history:")
		if err := printTimeline(ctx, c, wr.GetID(), wr.GetRunID(), t0, 80); err != nil {
			return err
		}
		fmt.Printf("   %s's history:\n", res.Plans[0].Workflow)
		if err := printTimeline(ctx, c, res.Plans[0].Workflow, res.Plans[0].RunID, t0, 60); err != nil {
			return err
		}
		// The first plan's own failover, step by step.
		p := res.Plans[0]
		var fr workflows.FailoverResult
		if err := c.GetWorkflow(ctx, p.Workflow, p.RunID).Get(ctx, &fr); err != nil {
			return err
		}
		fmt.Printf("   plan %s: RTO %v\n", p.Plan, ms(p.RTO))
		for _, s := range fr.Steps {
			fmt.Printf("      %-60s %v (from %v)\n", s.Name, ms(s.End.Sub(s.Start)), ms(s.Start.Sub(fr.Start)))
		}
	}
	d, err := c.DescribeWorkflowExecution(ctx, wr.GetID(), wr.GetRunID())
	if err != nil {
		return err
	}
	r.events = d.GetWorkflowExecutionInfo().GetHistoryLength()
	type span struct{ start, end, took time.Duration }
	tiers := map[int][]span{}
	for _, p := range res.Plans {
		d, err := c.DescribeWorkflowExecution(ctx, p.Workflow, p.RunID)
		if err != nil {
			return err
		}
		info := d.GetWorkflowExecutionInfo()
		r.events += info.GetHistoryLength()
		start, end := info.GetStartTime().AsTime().Sub(t0), info.GetCloseTime().AsTime().Sub(t0)
		tiers[p.Tier] = append(tiers[p.Tier], span{start, end, end - start})
	}
	if o.steps {
		// Per tier, on the client's clock: when its plans' failovers
		// started and ended, and how long each took (start to close).
		for t := range r.tiers {
			ss := tiers[t]
			q := func(get func(span) time.Duration) string {
				var ds []time.Duration
				for _, s := range ss {
					ds = append(ds, get(s))
				}
				slices.Sort(ds)
				return fmt.Sprintf("%v…%v (median %v)", ms(ds[0]), ms(ds[len(ds)-1]), ms(ds[len(ds)/2]))
			}
			fmt.Printf("   tier %d: %d failovers started %s, ended %s, each took %s\n", t, len(ss),
				q(func(s span) time.Duration { return s.start }), q(func(s span) time.Duration { return s.end }), q(func(s span) time.Duration { return s.took }))
		}
	}
	if r.floor, err = emptySite(ctx, c, ps, r.atOnce, floorNothing, nil); err != nil {
		return fmt.Errorf("children that do nothing: %w", err)
	}
	if r.turns, err = emptySite(ctx, c, ps, r.atOnce, floorTurns, nil); err != nil {
		return fmt.Errorf("the design's turns: %w", err)
	}
	// The same turns, each child carrying what its plan's failover
	// carried.
	shapes := make([]planShape, len(ps))
	byPlan := map[string]string{}
	for _, p := range res.Plans {
		byPlan[p.Plan] = p.RunID
	}
	for i, p := range ps {
		if shapes[i], err = readShape(ctx, c, p.Metadata.Name, byPlan[p.Metadata.Name]); err != nil {
			return err
		}
	}
	if o.steps {
		fmt.Printf("   %s's failover, as the third floor's child takes it: %+v\n", ps[0].Metadata.Name, shapes[0])
	}
	if r.shaped, err = emptySite(ctx, c, ps, r.atOnce, floorShaped, shapes); err != nil {
		return fmt.Errorf("the design's turns carrying the plans' histories: %w", err)
	}
	r.warnings = serverWarnings(st)
	if info, err := c.WorkflowService().GetSystemInfo(ctx, &workflowservice.GetSystemInfoRequest{}); err == nil {
		r.server = info.GetServerVersion()
	}
	if r.workerRSS, err = peakRSS(pids["worker"]); err != nil {
		return err
	}
	r.temporalRSS, err = peakRSS(pids["temporal"])
	return err
}

// startRecord starts a plan's record, as a worker would with a first
// change sealed by its record key, and waits until it answers: a plan's
// very first action would start it itself, two more turns. Set-up, not
// measured.
func startRecord(ctx context.Context, st *stack.Stack, c client.Client, p *plans.Plan) error {
	recordKey, err := workflows.ReadRecordKey(st.RecordKeyFile())
	if err != nil {
		return err
	}
	first, err := (&workflows.RecordSender{Key: recordKey}).SealAt(p.Metadata.Name, workflows.RecordChange{At: time.Now()}, time.Now())
	if err != nil {
		return err
	}
	if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.RecordID(p.Metadata.Name), TaskQueue: workflows.TaskQueue},
		workflows.PlanRecorder, workflows.PlanRecordInput{Plan: p.Metadata.Name, First: &first}); err != nil {
		return fmt.Errorf("start the record of %s: %w", p.Metadata.Name, err)
	}
	if _, err := workflows.ReadRecord(ctx, c, p.Metadata.Name); err != nil {
		return fmt.Errorf("read the record of %s: %w", p.Metadata.Name, err)
	}
	return nil
}

// serverWarnings counts the history and payload size warnings in the
// Temporal server's log.
func serverWarnings(st *stack.Stack) int {
	n := 0
	if log, err := os.ReadFile(filepath.Join(st.Dir, "temporal.log")); err == nil {
		for _, line := range strings.Split(string(log), "\n") {
			if strings.Contains(line, "exceeds warn limit") || strings.Contains(line, "exceeds the warning limit") {
				n++
			}
		}
	}
	return n
}

// directSite makes the site failover's calls as a plain Go program on
// fresh sites, no workflow engine: the site's fence and its read-back
// once, then tier by tier, at most atOnce plans at a time, each plan's
// own sequence as its failover makes it on the critical path (Probe of
// west, ListClusterFence, its promotions with policy.parallelism calls
// in flight, the start and health hooks). The role check, which the
// failover runs beside the Probe, and the lost site's stop, a local
// hook, are left out, as in the per-plan direct program.
func directSite(ctx context.Context, o options, r *siteRow) (err error) {
	st, ps, err := startSiteStack(ctx, o, r.siteSize, true)
	if err != nil {
		return err
	}
	defer func() {
		if serr := st.Stop(); err == nil {
			err = serr
		}
	}()
	conn, err := grpc.NewClient(ps[0].Site("west").Storage.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	fc, rc, ic := fence.NewFenceControllerClient(conn), replication.NewControllerClient(conn), identity.NewIdentityClient(conn)
	var tiers [][]*plans.Plan
	for i, p := range ps {
		if i == 0 || p.Metadata.Tier != ps[i-1].Metadata.Tier {
			tiers = append(tiers, nil)
		}
		tiers[len(tiers)-1] = append(tiers[len(tiers)-1], p)
	}
	t0 := time.Now()
	var cidrs []*fence.CIDR
	for _, c := range ps[0].Site("east").Fence.CIDRs {
		cidrs = append(cidrs, &fence.CIDR{Cidr: c})
	}
	if _, err := fc.FenceClusterNetwork(ctx, &fence.FenceClusterNetworkRequest{Cidrs: cidrs}); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	if _, err := fc.ListClusterFence(ctx, &fence.ListClusterFenceRequest{}); err != nil {
		return fmt.Errorf("list fences: %w", err)
	}
	plan := func(ctx context.Context, p *plans.Plan) error {
		if _, err := ic.Probe(ctx, &identity.ProbeRequest{}); err != nil {
			return fmt.Errorf("%s: probe: %w", p.Metadata.Name, err)
		}
		if _, err := fc.ListClusterFence(ctx, &fence.ListClusterFenceRequest{}); err != nil {
			return fmt.Errorf("%s: list fences: %w", p.Metadata.Name, err)
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(p.Policy.Parallelism)
		for _, vg := range p.VolumeGroups {
			g.Go(func() error {
				if _, err := rc.PromoteVolume(gctx, &replication.PromoteVolumeRequest{Force: true,
					ReplicationSource: groupSource(vg.Sites["west"].GroupID), Parameters: vg.Parameters}); err != nil {
					return fmt.Errorf("%s: promote %s: %w", p.Metadata.Name, vg.Name, err)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		for _, c := range []string{"true", "true"} {
			if err := exec.CommandContext(ctx, "/bin/sh", "-c", c).Run(); err != nil {
				return err
			}
		}
		return nil
	}
	for _, tier := range tiers {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(r.atOnce)
		for _, p := range tier {
			g.Go(func() error { return plan(gctx, p) })
		}
		if err := g.Wait(); err != nil {
			return err
		}
	}
	r.direct = time.Since(t0)
	return nil
}

// siteSizes are the site rows to measure: each plan count and plans at
// once, on each store.
func siteSizes(o options) []siteSize {
	var out []siteSize
	for _, n := range o.sitePlans {
		for _, x := range o.siteAtOnce {
			for _, store := range o.stores {
				out = append(out, siteSize{store: store, plans: n, atOnce: x, groups: o.siteGroups, tiers: o.siteTiers, latency: o.siteLatency})
			}
		}
	}
	return out
}

// runSites measures the site rows.
func runSites(ctx context.Context, o options) ([]siteRow, error) {
	var rows []siteRow
	for _, sz := range siteSizes(o) {
		fmt.Printf("== site failover of %d plans of %d groups, %d tiers, %d plans at once, latency %v, %s store\n",
			sz.plans, sz.groups, sz.tiers, sz.atOnce, sz.latency, sz.store)
		var runs []siteRow
		for k := range o.repeat {
			if o.repeat > 1 {
				fmt.Printf("   run %d of %d\n", k+1, o.repeat)
			}
			r := siteRow{siteSize: sz}
			if err := measureSite(ctx, o, &r); err != nil {
				return nil, fmt.Errorf("site failover of %d plans, %d at once, %s store: %w", sz.plans, sz.atOnce, sz.store, err)
			}
			if err := directSite(ctx, o, &r); err != nil {
				return nil, fmt.Errorf("site failover of %d plans, %d at once, direct: %w", sz.plans, sz.atOnce, err)
			}
			fmt.Printf("   measured %v (site-wide RTO %v), direct %v, ratio %.2f, children that do nothing %v, the design's turns %v, carrying the plans' histories %v, %.1f history events per plan, CPU of Temporal %v and of the worker %v, the machine busy %.0f%% (I/O wait %.0f%%), worker peak %d MiB, Temporal peak %d MiB\n",
				ms(r.measured), ms(r.rto), ms(r.direct), float64(r.measured)/float64(r.direct), ms(r.floor), ms(r.turns), ms(r.shaped), r.eventsPerPlan(), ms(r.temporalCPU), ms(r.workerCPU), r.machine.percent(r.machine.busy), r.machine.percent(r.machine.iowait), r.workerRSS>>20, r.temporalRSS>>20)
			runs = append(runs, r)
		}
		rows = append(rows, medianSiteRow(runs))
	}
	return rows, nil
}

// medianSiteRow is one site row from several runs: the run of the median
// measured time, with the median direct time, and every run's time.
func medianSiteRow(runs []siteRow) siteRow {
	if len(runs) == 1 {
		return runs[0]
	}
	var pr []row
	for _, r := range runs {
		pr = append(pr, row{measured: r.measured, direct: r.direct})
	}
	m := medianRow(pr)
	var out siteRow
	for _, r := range runs {
		if r.measured == m.measured {
			out = r
			break
		}
	}
	out.direct, out.runs = m.direct, m.runs
	return out
}

// printTimeline prints up to max events of a run's history, each with
// its time from t0.
func printTimeline(ctx context.Context, c client.Client, id, runID string, t0 time.Time, max int) error {
	it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for n := 0; it.HasNext() && n < max; n++ {
		e, err := it.Next()
		if err != nil {
			return err
		}
		what := ""
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
			what = a.GetActivityType().GetName()
		}
		if a := e.GetMarkerRecordedEventAttributes(); a != nil {
			what = a.GetMarkerName()
		}
		fmt.Printf("      %6dms %s %s\n", e.GetEventTime().AsTime().Sub(t0).Milliseconds(), strings.TrimPrefix(e.GetEventType().String(), "EVENT_TYPE_"), what)
	}
	return nil
}

// The floors of a site action emptySite measures.
const (
	floorNothing = "empty"  // children that do nothing
	floorTurns   = "turns"  // the design's turns
	floorShaped  = "shaped" // the design's turns carrying the plans' histories
)

// emptySite is the floor of a site action on this server: from the start
// request to the result of a workflow that runs, tier by tier, as many
// children as the site has plans in each tier, at most atOnce at a time,
// each child doing nothing; on a worker in this process, on a task queue
// of its own. What the server takes to start children, hand their ends
// to the parent and wake it, without a storage call or a check.
//
// With floorTurns, the workflow and its children take the turns through
// the server that a site failover's design asks for, still without a
// storage call: the parent first has a stand-in of each plan's record
// accept a version, atOnce at a time (an update from a local activity,
// as the site action's check of each plan); each child then ends its
// first task on a local activity and a regular one (the checks and their
// settle) and ends in its second task. The stand-ins are started first,
// not measured.
//
// With floorShaped, each child takes instead the turns its plan's
// failover took in the measured run (shapes, in the plans' order),
// carrying as many bytes: its input, each task's markers, timers and
// activities, its record's changes (signals to the stand-in) and its
// result (shapedChild).
func emptySite(ctx context.Context, c client.Client, ps []*plans.Plan, atOnce int, floor string, shapes []planShape) (time.Duration, error) {
	queue := "drover-bench-" + floor + "-site"
	id := queue
	var tiers []int
	for i, p := range ps {
		if i == 0 || p.Metadata.Tier != ps[i-1].Metadata.Tier {
			tiers = append(tiers, 0)
		}
		tiers[len(tiers)-1]++
	}
	w := worker.New(c, queue, worker.Options{})
	registerFloors(w, c)
	if err := w.Start(); err != nil {
		return 0, err
	}
	defer w.Stop()
	var records []string
	if floor != floorNothing {
		for i := range ps {
			record := fmt.Sprintf("drover-bench-stand-in-record-%s-%d", floor, i)
			if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: record, TaskQueue: queue}, "StandInRecord"); err != nil {
				return 0, err
			}
			records = append(records, record)
		}
		defer func() {
			for _, record := range records {
				_ = c.TerminateWorkflow(context.Background(), record, "", "the bench's floor measured")
			}
		}()
		// Each answers before the measure starts.
		for _, record := range records {
			h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: record, UpdateName: "accept", WaitForStage: client.WorkflowUpdateStageCompleted})
			if err != nil {
				return 0, err
			}
			if err := h.Get(ctx, nil); err != nil {
				return 0, err
			}
		}
	}
	t0 := time.Now()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, "EmptyParent", tiers, atOnce, records, shapes)
	if err != nil {
		return 0, err
	}
	if err := run.Get(ctx, nil); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// registerFloors registers on w the workflows and activities of the
// floors emptySite measures.
func registerFloors(w worker.Worker, c client.Client) {
	w.RegisterWorkflowWithOptions(func(workflow.Context) error { return nil }, workflow.RegisterOptions{Name: "EmptyChild"})
	w.RegisterWorkflowWithOptions(emptyParent, workflow.RegisterOptions{Name: "EmptyParent"})
	w.RegisterWorkflowWithOptions(turnsChild, workflow.RegisterOptions{Name: "TurnsChild"})
	w.RegisterWorkflowWithOptions(shapedChild, workflow.RegisterOptions{Name: "ShapedChild"})
	w.RegisterWorkflowWithOptions(standInRecord, workflow.RegisterOptions{Name: "StandInRecord"})
	w.RegisterActivityWithOptions(func(context.Context) error { return nil }, activity.RegisterOptions{Name: "Nothing"})
	w.RegisterActivityWithOptions(answer, activity.RegisterOptions{Name: "Answer"})
	w.RegisterActivityWithOptions(func(ctx context.Context, record string, n, answer int) (any, error) {
		return answerOf(answer), c.SignalWorkflow(ctx, record, "", "change", padding("c", n))
	}, activity.RegisterOptions{Name: "Change"})
	w.RegisterActivityWithOptions(func(ctx context.Context, record string) error {
		h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: record, UpdateName: "accept", WaitForStage: client.WorkflowUpdateStageCompleted})
		if err != nil {
			return err
		}
		return h.Get(ctx, nil)
	}, activity.RegisterOptions{Name: "Accept"})
}

// emptyParent runs tiers[i] children for each tier in turn, at most
// atOnce at a time: children that do nothing, or, given the stand-ins
// of the plans' records, children taking a failover's turns after each
// record has accepted a version, atOnce at a time; given the plans'
// shapes too, children taking each its plan's turns (shapedChild).
func emptyParent(ctx workflow.Context, tiers []int, atOnce int, records []string, shapes []planShape) error {
	child := "EmptyChild"
	if len(records) > 0 {
		child = "TurnsChild"
		if len(shapes) > 0 {
			child = "ShapedChild"
		}
		lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute})
		slots := workflow.NewBufferedChannel(ctx, atOnce)
		wg := workflow.NewWaitGroup(ctx)
		for _, record := range records {
			slots.Send(ctx, true)
			wg.Add(1)
			workflow.Go(ctx, func(ctx workflow.Context) {
				defer wg.Done()
				_ = workflow.ExecuteLocalActivity(lctx, "Accept", record).Get(ctx, nil)
				slots.Receive(ctx, nil)
			})
		}
		wg.Wait(ctx)
	}
	n := 0
	var failed error // a floor of children that failed would be no floor
	for _, plans := range tiers {
		slots := workflow.NewBufferedChannel(ctx, atOnce)
		wg := workflow.NewWaitGroup(ctx)
		for range plans {
			n++
			id, k := fmt.Sprintf("drover-bench-%s-child-%d", child, n), n-1
			slots.Send(ctx, true)
			wg.Add(1)
			workflow.Go(ctx, func(ctx workflow.Context) {
				defer wg.Done()
				cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: id})
				var err error
				if len(shapes) > 0 {
					s := shapes[k]
					err = workflow.ExecuteChildWorkflow(cctx, child, s, shapedInput(s, records[k]), records[k]).Get(ctx, nil)
				} else {
					err = workflow.ExecuteChildWorkflow(cctx, child).Get(ctx, nil)
				}
				if err != nil && failed == nil {
					failed = err
				}
				slots.Receive(ctx, nil)
			})
		}
		wg.Wait(ctx)
	}
	return failed
}

// turnsChild takes a plan's failover's turns without a storage call: its
// checks (a local activity) end with their settle (a regular activity),
// and it ends in the task that follows.
func turnsChild(ctx workflow.Context) error {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute})
	if err := workflow.ExecuteLocalActivity(lctx, "Nothing").Get(ctx, nil); err != nil {
		return err
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	return workflow.ExecuteActivity(actx, "Nothing").Get(ctx, nil)
}

// standInRecord stands in for a plan's record: it accepts every version
// and takes every change at once, until terminated.
func standInRecord(ctx workflow.Context) error {
	if err := workflow.SetUpdateHandler(ctx, "accept", func(workflow.Context) error { return nil }); err != nil {
		return err
	}
	// It takes every change sent it (shapedChild's).
	changes := workflow.GetSignalChannel(ctx, "change")
	for {
		changes.Receive(ctx, nil)
	}
}
