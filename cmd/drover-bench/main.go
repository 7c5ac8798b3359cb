// Command drover-bench measures failover time against plan size and plugin
// latency, and writes the table to BENCHMARKS.md.
//
// For each plan size and latency it starts a fresh local stack (the
// Temporal dev server, two drover-sim sites holding the plan's groups with
// every CSI-Addons call delayed by the latency, the worker), runs a
// failover from east to west through the Temporal client as drctl does,
// and reports:
//
//   - ideal: the critical path the plan allows, fence + ceil(groups /
//     parallelism) promotion rounds at the latency each, + the workload's
//     start and health hooks as timed here;
//   - measured: start request to completed failover, seen by the client;
//   - ratio: measured / ideal (shown where the latency is not zero);
//   - sequential: a naive baseline on its own fresh sites, without a
//     workflow engine: the fence, then one PromoteVolume after another,
//     then the hooks, over the same gRPC sockets;
//   - the worker's peak resident memory (VmHWM) after the failover.
//
// Usage:
//
//	drover-bench [--sizes 1,10,100,1000,5000] [--latencies 0,50ms]
//	             [--extra 20000@0s] [--sequential-limit 90s]
//	             [--parallelism 10] [--bin bin] [--out BENCHMARKS.md]
//	             [--chart docs/bench.svg] [--steps]
//	             [--repeat 1] [--repeat-max 0]
//
// The site rows (--site-plans 10,100,300, make bench-sql): a site
// failover (SiteFailover, as drctl failover --site starts it) of that
// many plans of --site-groups groups over --site-tiers tiers, at each of
// --plans-at-once, on each of --stores (dev: the dev server; sql: the
// Temporal server on PostgreSQL, as make e2e-sql sets it up), against a
// plain program making the same calls at the same concurrency, and three
// floors on the same server: a workflow running as many children that
// do nothing, one taking the design's turns without a storage call
// (each plan's record stand-in asked to accept a version, then children
// whose checks' task ends on a settle), and the same turns with each
// child shaped like its plan's failover of the run, carrying what it
// carried (shape.go). The CPU the Temporal server and
// the worker used during the site failover is read from /proc. The rows
// go into their own section of --out (--site-only leaves the per-plan
// section as it is), and the chart draws both sections.
//
//	drover-bench --site-only --site-plans 10,100,300 --plans-at-once 10,50
//	             [--site-groups 10] [--site-tiers 3] [--site-latency 50ms]
//	             [--stores dev,sql]
//
// With --repeat N each row (up to --repeat-max groups) is measured N
// times, each on fresh stacks, and the table gives medians: the failover
// of the median run, the median of each baseline; every run's failover
// time is listed below the table.
//
// A row's stack that does not start (a port picked free and taken by
// another program before the stack's process binds it) is started once
// more on other ports; a second failure, or any failure once the stack
// runs, ends the command.
//
// It also counts the history events of each failover and its children
// per group, reads the server's log for history and payload size
// warnings, checks the figures against the performance targets, and
// draws failover time against plan size as an SVG chart.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
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

func main() {
	var (
		sizes, latencies, extra string
		o                       options
	)
	flag.StringVar(&sizes, "sizes", "1,10,100,1000,5000", "plan sizes: volume groups per plan")
	flag.StringVar(&latencies, "latencies", "0,50ms", "plugin latencies: the delay of every CSI-Addons call")
	flag.IntVar(&o.parallelism, "parallelism", plans.DefaultParallelism, "the plan's policy.parallelism")
	flag.StringVar(&o.bin, "bin", "", "directory holding temporal, worker and drover-sim (default: this program's directory)")
	flag.StringVar(&o.out, "out", "", "write the results into this Markdown file, between its bench markers (default: print only)")
	flag.StringVar(&o.dir, "dir", ".run/bench", "working directory for the stacks")
	flag.StringVar(&extra, "extra", "20000@0s", "more rows, as GROUPS@LATENCY, comma separated (empty: none)")
	flag.DurationVar(&o.seqLimit, "sequential-limit", 90*time.Second, "skip the sequential baseline where it would take longer than this (groups × latency)")
	flag.StringVar(&o.chart, "chart", "", "write the SVG chart here (default: docs/bench.svg beside --out)")
	flag.BoolVar(&o.steps, "steps", false, "print each failover's steps and how long each took")
	flag.IntVar(&o.repeat, "repeat", 1, "measure each row this many times, each on fresh stacks, and report the medians")
	flag.IntVar(&o.repeatMax, "repeat-max", 0, "repeat only rows of at most this many groups (0: every row)")
	var sitePlans, atOnce, stores string
	flag.StringVar(&sitePlans, "site-plans", "", "site rows: a site failover of this many plans, comma separated (empty: no site rows)")
	flag.StringVar(&atOnce, "plans-at-once", "10,50", "site rows: the site action's plans at once (drctl failover --site --plans-at-once), comma separated")
	flag.IntVar(&o.siteGroups, "site-groups", 10, "site rows: volume groups per plan")
	flag.IntVar(&o.siteTiers, "site-tiers", 3, "site rows: tiers the plans are spread over")
	flag.DurationVar(&o.siteLatency, "site-latency", 50*time.Millisecond, "site rows: the plugin latency")
	flag.StringVar(&stores, "stores", storeDev, "site rows: Temporal's stores, comma separated: dev (the dev server, SQLite), sql (the Temporal server on PostgreSQL)")
	flag.BoolVar(&o.siteOnly, "site-only", false, "measure the site rows only: the per-plan section of --out is left as it is")
	flag.Parse()
	var err error
	if o.sizes, err = ints(sizes); err != nil {
		fail(2, "--sizes: %v", err)
	}
	if o.latencies, err = durations(latencies); err != nil {
		fail(2, "--latencies: %v", err)
	}
	if o.extra, err = extraRows(extra); err != nil {
		fail(2, "--extra: %v", err)
	}
	if sitePlans != "" {
		if o.sitePlans, err = ints(sitePlans); err != nil {
			fail(2, "--site-plans: %v", err)
		}
	}
	if o.siteAtOnce, err = ints(atOnce); err != nil {
		fail(2, "--plans-at-once: %v", err)
	}
	if o.stores, err = storeList(stores); err != nil {
		fail(2, "--stores: %v", err)
	}
	if o.siteGroups < 1 || o.siteTiers < 1 || o.siteLatency < 0 {
		fail(2, "--site-groups and --site-tiers must be at least 1, --site-latency not negative")
	}
	if o.siteOnly && len(o.sitePlans) == 0 {
		fail(2, "--site-only needs --site-plans")
	}
	if o.chart == "" && o.out != "" {
		o.chart = filepath.Join(filepath.Dir(o.out), "docs", "bench.svg")
	}
	if o.parallelism < 1 {
		fail(2, "--parallelism must be at least 1")
	}
	if o.repeat < 1 || o.repeatMax < 0 {
		fail(2, "--repeat must be at least 1 and --repeat-max at least 0")
	}
	if o.bin == "" {
		exe, err := os.Executable()
		if err != nil {
			fail(1, "%v", err)
		}
		o.bin = filepath.Dir(exe)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		if ctx.Err() != nil {
			fail(130, "interrupted")
		}
		fail(1, "%v", err)
	}
}

func fail(code int, format string, a ...any) {
	fmt.Fprintf(os.Stderr, "drover-bench: "+format+"\n", a...)
	os.Exit(code)
}

type options struct {
	sizes       []int
	latencies   []time.Duration
	extra       []size
	parallelism int
	bin, out    string
	dir, chart  string
	seqLimit    time.Duration
	steps       bool
	// repeat: each row up to repeatMax groups (0: every row) is measured
	// this many times, each on fresh stacks, and its figures are medians.
	repeat, repeatMax int
	// The site rows: a site failover of each of sitePlans plans of
	// siteGroups groups over siteTiers tiers, at each of siteAtOnce plans
	// at once, on each of stores; siteOnly skips the per-plan rows.
	sitePlans, siteAtOnce []int
	siteGroups, siteTiers int
	siteLatency           time.Duration
	stores                []string
	siteOnly              bool
}

// storeList reads "dev,sql".
func storeList(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f != storeDev && f != storeSQL {
			return nil, fmt.Errorf("%q is not a store: give dev or sql", f)
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// size is one row's plan size and plugin latency.
type size struct {
	groups  int
	latency time.Duration
}

// extraRows reads "20000@0s,…".
func extraRows(s string) ([]size, error) {
	var out []size
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, l, ok := strings.Cut(f, "@")
		if !ok {
			return nil, fmt.Errorf("%q is not GROUPS@LATENCY", f)
		}
		g, err := ints(n)
		if err != nil {
			return nil, err
		}
		d, err := durations(l)
		if err != nil {
			return nil, err
		}
		out = append(out, size{g[0], d[0]})
	}
	return out, nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func durations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		d, err := time.ParseDuration(f)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%q is not a duration", f)
		}
		out = append(out, d)
	}
	return out, nil
}

// row is one measured configuration.
type row struct {
	groups      int
	latency     time.Duration
	rounds      int
	hooks       time.Duration
	ideal       time.Duration
	measured    time.Duration
	rto         time.Duration
	sequential  time.Duration
	direct      time.Duration // the design's path run by a plain program, policy.parallelism calls in flight
	peakRSS     int64         // bytes
	workflows   int
	steps       []*workflows.Step
	parallelism int
	events      int64                           // history events of the failover and its children
	warnings    int                             // the server's history and payload size warnings
	empty       time.Duration                   // median start-to-result of a workflow that does nothing, on the same server
	tasks       int                             // workflow tasks of the failover itself
	turn        time.Duration                   // median time from one of its workflow tasks to the next
	checks      time.Duration                   // from its first workflow task's start to its first step: the plan's signature and version check
	settle      time.Duration                   // from the Settle activity's scheduling to the next workflow task's start
	shaped      time.Duration                   // median start-to-result of a workflow taking the failover's turns, carrying what it carried, without a storage call
	eventAt     map[enumspb.EventType]time.Time // the time of the failover's first event of each type
	runs        []time.Duration                 // each run's failover time, when the row was measured more than once
}

// design is the path the design prescribes: the ideal plus the preflight
// of the surviving site and the fence verification, one call each.
func (r row) design() time.Duration { return r.ideal + 2*r.latency }

func (r row) ratio() float64 { return float64(r.measured) / float64(r.ideal) }

func run(ctx context.Context, o options) error {
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	hooks, err := timeHooks()
	if err != nil {
		return err
	}
	fmt.Printf("workload hooks (start, then health) take %v here\n", hooks)
	var all []size
	for _, n := range o.sizes {
		for _, lat := range o.latencies {
			all = append(all, size{n, lat})
		}
	}
	all = append(all, o.extra...)
	if o.siteOnly {
		all = nil
	}
	var rows []row
	for _, sz := range all {
		n, lat := sz.groups, sz.latency
		rounds := int(math.Ceil(float64(n) / float64(o.parallelism)))
		ideal := lat + time.Duration(rounds)*lat + hooks
		fmt.Printf("== %d groups, latency %v: ideal %v\n", n, lat, ideal.Round(time.Millisecond))
		reps := o.repeat
		if o.repeatMax > 0 && n > o.repeatMax {
			reps = 1
		}
		var runs []row
		for k := range reps {
			r := row{groups: n, latency: lat, parallelism: o.parallelism, hooks: hooks, rounds: rounds, ideal: ideal}
			if reps > 1 {
				fmt.Printf("   run %d of %d\n", k+1, reps)
			}
			if err := measure(ctx, o, &r); err != nil {
				return fmt.Errorf("%d groups at %v: %w", n, lat, err)
			}
			if time.Duration(n)*lat <= o.seqLimit {
				if err := sequential(ctx, o, &r, false); err != nil {
					return fmt.Errorf("%d groups at %v, sequential: %w", n, lat, err)
				}
			}
			if err := sequential(ctx, o, &r, true); err != nil {
				return fmt.Errorf("%d groups at %v, direct: %w", n, lat, err)
			}
			fmt.Printf("   measured %v (RTO in the workflow %v), direct %v, sequential %v, empty workflow %v, worker peak %d MiB, %.3f history events per group\n",
				r.measured.Round(time.Millisecond), r.rto.Round(time.Millisecond), r.direct.Round(time.Millisecond), r.sequential.Round(time.Millisecond),
				r.empty.Round(time.Millisecond), r.peakRSS>>20,
				float64(r.events)/float64(n))
			runs = append(runs, r)
		}
		r := medianRow(runs)
		rows = append(rows, r)
	}
	var siteRows []siteRow
	if len(o.sitePlans) > 0 {
		if siteRows, err = runSites(ctx, o); err != nil {
			return err
		}
	}
	if o.chart != "" {
		// The chart shows both sections of --out: a run that measured
		// only one takes the other's figures from its table.
		chartRows, chartSites := rows, siteRows
		if o.out != "" {
			old, err := os.ReadFile(o.out)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			if o.siteOnly {
				chartRows = parseRows(section(string(old), beginMarker, endMarker))
			}
			if len(o.sitePlans) == 0 {
				chartSites = parseSiteRows(section(string(old), siteBeginMarker, siteEndMarker))
			}
		}
		if err := os.MkdirAll(filepath.Dir(o.chart), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(o.chart, []byte(chart(chartRows, chartSites)), 0o644); err != nil {
			return err
		}
		fmt.Printf("wrote %s\n", o.chart)
	}
	if !o.siteOnly {
		report := render(o, rows)
		fmt.Println()
		fmt.Print(report)
		if o.out != "" {
			if err := splice(o.out, report, beginMarker, endMarker); err != nil {
				return err
			}
		}
	}
	if len(siteRows) > 0 {
		report := renderSite(o, siteRows)
		fmt.Println()
		fmt.Print(report)
		if o.out != "" {
			return splice(o.out, report, siteBeginMarker, siteEndMarker)
		}
	}
	return nil
}

// medianRow is one row from several runs of it: the run of the median
// failover time, with the median of each baseline (direct, sequential,
// the empty workflow) and every run's failover time (runs).
func medianRow(runs []row) row {
	if len(runs) == 1 {
		return runs[0]
	}
	med := func(get func(row) time.Duration) time.Duration {
		var ds []time.Duration
		for _, r := range runs {
			ds = append(ds, get(r))
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	byTime := slices.Clone(runs)
	slices.SortFunc(byTime, func(a, b row) int { return cmp.Compare(a.measured, b.measured) })
	r := byTime[len(byTime)/2]
	r.direct = med(func(x row) time.Duration { return x.direct })
	r.sequential = med(func(x row) time.Duration { return x.sequential })
	r.empty = med(func(x row) time.Duration { return x.empty })
	r.runs = nil
	for _, x := range runs {
		r.runs = append(r.runs, x.measured)
	}
	return r
}

// timeHooks runs the workload's start and health hooks as the exec
// adapter does (sh -c) and keeps the median of seven runs.
func timeHooks() (time.Duration, error) {
	var runs []time.Duration
	for range 7 {
		t0 := time.Now()
		for _, c := range []string{"true", "true"} {
			if err := exec.Command("/bin/sh", "-c", c).Run(); err != nil {
				return 0, err
			}
		}
		runs = append(runs, time.Since(t0))
	}
	slices.Sort(runs)
	return runs[len(runs)/2], nil
}

// planFor writes the bench plan: n groups of one volume, one workload
// with exec hooks, east and west as the stack lays them out.
func planFor(path string, n, parallelism int) error {
	var b strings.Builder
	b.WriteString(stack.PlanHead("bench", 30*time.Second))
	b.WriteString("volumeGroups:\n")
	for _, g := range sim.GenerateGroups(n, 1) {
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
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// startStack starts a fresh stack for n groups with every storage call
// delayed by lat.
func startStack(ctx context.Context, o options, n int, lat time.Duration, storageOnly bool) (*stack.Stack, *plans.Plan, error) {
	st, p, err := setUp(ctx, o, n, lat, storageOnly)
	if err != nil && ctx.Err() == nil {
		// Set-up, not measurement: a port picked free can be taken by
		// another program before the stack's process binds it. Once
		// more, on other ports.
		fmt.Printf("   the stack did not start (%v); once more on other ports\n", err)
		st, p, err = setUp(ctx, o, n, lat, storageOnly)
	}
	return st, p, err
}

// freeLayout picks the stack's addresses (a test takes one first).
var freeLayout = stack.Free

// setUp starts a fresh stack for a row on free addresses, with
// replication enabled and synced and the row's latency on every call.
func setUp(ctx context.Context, o options, n int, lat time.Duration, storageOnly bool) (*stack.Stack, *plans.Plan, error) {
	dir := filepath.Join(o.dir, fmt.Sprintf("g%d-l%v", n, lat))
	if storageOnly {
		dir += "-seq"
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	planFile := filepath.Join(dir, "plan-template.yaml")
	if err := planFor(planFile, n, o.parallelism); err != nil {
		return nil, nil, err
	}
	layout, err := freeLayout()
	if err != nil {
		return nil, nil, err
	}
	st, err := stack.Start(ctx, stack.Options{Dir: dir, Bin: o.bin, Plan: planFile, Groups: sim.GenerateGroups(n, 1),
		Layout: layout, StorageOnly: storageOnly})
	if err != nil {
		return nil, nil, err
	}
	p, err := plans.Load(st.PlanFile)
	if err != nil {
		st.Stop()
		return nil, nil, err
	}
	if err := enable(ctx, p.Site("east").Storage.Endpoint, p.VolumeGroups, layout); err != nil {
		st.Stop()
		return nil, nil, err
	}
	if err := setLatency(ctx, layout, lat); err != nil {
		st.Stop()
		return nil, nil, err
	}
	return st, p, nil
}

// setLatency delays every CSI-Addons call of both sites by lat.
func setLatency(ctx context.Context, layout stack.Layout, lat time.Duration) error {
	if lat <= 0 {
		return nil
	}
	for _, site := range layout.Sites {
		if err := sim.NewControl(site.Control).SetFaults(ctx, []sim.FaultRule{{Method: "*", Latency: lat}}); err != nil {
			return err
		}
	}
	return nil
}

// enable turns replication on for every group on east (at its storage
// endpoint), as drctl protect start does, and waits until west holds a
// synced copy of each: the state a failover starts from. It is set-up,
// not measured.
func enable(ctx context.Context, east string, groups []plans.VolumeGroup, layout stack.Layout) error {
	conn, err := grpc.NewClient(east, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rc := replication.NewControllerClient(conn)
	for _, g := range groups {
		if _, err := rc.EnableVolumeReplication(ctx, &replication.EnableVolumeReplicationRequest{
			ReplicationSource: groupSource(g.Sites["east"].GroupID), Parameters: g.Parameters}); err != nil {
			return fmt.Errorf("enable replication of %s: %w", g.Name, err)
		}
	}
	west := sim.NewControl(layout.Sites[1].Control)
	deadline := time.Now().Add(5 * time.Minute)
	for {
		s, err := west.State(ctx)
		if err != nil {
			return err
		}
		synced := 0
		for _, u := range s.Units {
			if u.Enabled && u.InSync {
				synced++
			}
		}
		if synced == len(groups) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("west holds %d of %d synced groups after 5 minutes", synced, len(groups))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func groupSource(id string) *replication.ReplicationSource {
	return &replication.ReplicationSource{Type: &replication.ReplicationSource_Volumegroup{
		Volumegroup: &replication.ReplicationSource_VolumeGroupSource{VolumeGroupId: id}}}
}

// measure runs one failover through Temporal on a fresh stack.
func measure(ctx context.Context, o options, r *row) (err error) {
	st, p, err := startStack(ctx, o, r.groups, r.latency, false)
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
	// A failover that pauses for the operator would wait for ever.
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	// The plan's record exists, as it does once Protect has watched the
	// plan; a plan's very first action starts it itself, two more turns.
	// Started as a worker would, with a first change sealed by the
	// worker's record key.
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
		return fmt.Errorf("start the plan's record: %w", err)
	}
	if _, err := workflows.ReadRecord(ctx, c, p.Metadata.Name); err != nil {
		return fmt.Errorf("read the plan's record: %w", err)
	}
	t0 := time.Now()
	sig, err := st.Sign(p)
	if err != nil {
		return err
	}
	wr, err := workflows.Start(ctx, c, p.Metadata.Name, workflows.Failover, workflows.FailoverInput{Plan: p, From: "east", To: "west",
		Origin: workflows.Origin{Signature: sig, By: "drover-bench"}})
	if err != nil {
		return err
	}
	var res workflows.FailoverResult
	if err := wr.Get(ctx, &res); err != nil {
		return err
	}
	r.measured = time.Since(t0)
	r.rto = res.RTO
	r.steps = res.Steps
	progressStart := res.Start
	if o.steps {
		for _, s := range res.Steps {
			fmt.Printf("   %-50s %v\n", s.Name, s.End.Sub(s.Start).Round(time.Millisecond))
		}
	}
	if res.State != workflows.StateCompleted {
		return fmt.Errorf("the failover ended %s", res.State)
	}
	if r.workflows, r.events, err = historyCost(ctx, c, wr, o.steps && r.groups <= 10, r); err != nil {
		return err
	}
	if t, ok := r.eventAt[enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED]; ok && progressStart.After(t) {
		r.checks = progressStart.Sub(t)
	}
	if o.steps && r.tasks == 1 {
		if err := breakdown(ctx, c, p.Metadata.Name, t0, r); err != nil {
			return err
		}
	}
	if log, err := os.ReadFile(filepath.Join(st.Dir, "temporal.log")); err == nil {
		for _, line := range strings.Split(string(log), "\n") {
			if strings.Contains(line, "exceeds warn limit") || strings.Contains(line, "exceeds the warning limit") {
				r.warnings++
			}
		}
	}
	if r.peakRSS, err = peakRSS(st.PIDs()["worker"]); err != nil {
		return err
	}
	if r.empty, err = emptyWorkflow(ctx, c); err != nil {
		return err
	}
	shape, err := readShape(ctx, c, p.Metadata.Name, wr.GetRunID())
	if err != nil {
		return err
	}
	r.shaped, err = shapedWorkflow(ctx, c, shape)
	return err
}

// shapedWorkflow is the failover's own turns on this server, without its
// storage calls and checks: the median, over three runs, from the start
// request to the result of a workflow shaped like it (shapedChild), its
// record's changes signalled to a stand-in, on a worker in this process.
func shapedWorkflow(ctx context.Context, c client.Client, s planShape) (time.Duration, error) {
	const queue, record = "drover-bench-shaped", "drover-bench-stand-in-record-shaped"
	w := worker.New(c, queue, worker.Options{})
	registerFloors(w, c)
	if err := w.Start(); err != nil {
		return 0, err
	}
	defer w.Stop()
	if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: record, TaskQueue: queue}, "StandInRecord"); err != nil {
		return 0, err
	}
	defer c.TerminateWorkflow(context.Background(), record, "", "the bench's floor measured")
	return medianRun(ctx, c, 3, func(i int) (client.WorkflowRun, error) {
		return c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("drover-bench-shaped-%d", i), TaskQueue: queue},
			"ShapedChild", s, shapedInput(s, record), record)
	})
}

// medianRun is the median, over n runs, from start's request to the
// run's result; a first run before them warms the worker's poller up.
func medianRun(ctx context.Context, c client.Client, n int, start func(i int) (client.WorkflowRun, error)) (time.Duration, error) {
	var took []time.Duration
	for i := range n + 1 {
		t0 := time.Now()
		run, err := start(i)
		if err != nil {
			return 0, err
		}
		if err := run.Get(ctx, nil); err != nil {
			return 0, err
		}
		if i > 0 {
			took = append(took, time.Since(t0))
		}
	}
	slices.Sort(took)
	return took[len(took)/2], nil
}

// emptyWorkflow is the floor of any durable action on this server: the
// median, over five runs, from the start request to the result of a
// workflow that does nothing, on a worker in this process. One turn
// through the server, and the client's two calls.
func emptyWorkflow(ctx context.Context, c client.Client) (time.Duration, error) {
	const queue = "drover-bench-empty"
	w := worker.New(c, queue, worker.Options{})
	empty := func(workflow.Context) error { return nil }
	w.RegisterWorkflowWithOptions(empty, workflow.RegisterOptions{Name: "Empty"})
	if err := w.Start(); err != nil {
		return 0, err
	}
	defer w.Stop()
	return medianRun(ctx, c, 5, func(i int) (client.WorkflowRun, error) {
		return c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("drover-bench-empty-%d", i), TaskQueue: queue}, "Empty")
	})
}

// historyCost counts the failover and the children its history started,
// and the history events of them all.
// It also counts the failover's own workflow tasks and the median time
// between the starts of two in a row: each is a turn through the server,
// which persists the step before the next one starts.
//
// With timeline it prints the failover's events with their times.
func historyCost(ctx context.Context, c client.Client, wr client.WorkflowRun, timeline bool, r *row) (int, int64, error) {
	ids := []string{wr.GetID()}
	it := c.GetWorkflowHistory(ctx, wr.GetID(), wr.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var (
		first, settled time.Time
		started        []time.Time
	)
	r.eventAt = map[enumspb.EventType]time.Time{}
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return 0, 0, err
		}
		if first.IsZero() {
			first = e.GetEventTime().AsTime()
		}
		if timeline {
			fmt.Printf("   %6dms %s\n", e.GetEventTime().AsTime().Sub(first).Milliseconds(), e.GetEventType())
		}
		if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED {
			started = append(started, e.GetEventTime().AsTime())
			if !settled.IsZero() && r.settle == 0 {
				r.settle = e.GetEventTime().AsTime().Sub(settled)
			}
		}
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == "Settle" && settled.IsZero() {
			settled = e.GetEventTime().AsTime()
		}
		if _, ok := r.eventAt[e.GetEventType()]; !ok {
			r.eventAt[e.GetEventType()] = e.GetEventTime().AsTime()
		}
		if a := e.GetChildWorkflowExecutionStartedEventAttributes(); a != nil {
			ids = append(ids, a.GetWorkflowExecution().GetWorkflowId())
		}
	}
	r.tasks = len(started)
	if len(started) > 1 {
		gaps := make([]time.Duration, 0, len(started)-1)
		for i := 1; i < len(started); i++ {
			gaps = append(gaps, started[i].Sub(started[i-1]))
		}
		slices.Sort(gaps)
		r.turn = gaps[len(gaps)/2]
	}
	var events int64
	for _, id := range ids {
		d, err := c.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			return 0, 0, err
		}
		events += d.GetWorkflowExecutionInfo().GetHistoryLength()
	}
	return len(ids), events, nil
}

// breakdown prints where a failover that ran in one workflow task spent
// its time, from the client's clock (t0 before signing the plan, the
// result r.measured later) and the event times of the failover's history
// (read by historyCost) and the record's (the same machine's clock): the
// client's start, the wait for the worker, the task before its first
// step, the steps, the record's signal (from the last step's end to the
// record's signal event, then to the task's end), the server's handling
// of the completed task, and the result's way back to the client.
func breakdown(ctx context.Context, c client.Client, plan string, t0 time.Time, r *row) error {
	var signalled time.Time
	it := c.GetWorkflowHistory(ctx, workflows.RecordID(plan), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return err
		}
		if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED && e.GetEventTime().AsTime().After(t0) {
			signalled = e.GetEventTime().AsTime()
		}
	}
	if len(r.steps) == 0 || signalled.IsZero() {
		return nil
	}
	first, last := r.steps[0].Start, r.steps[0].End
	for _, s := range r.steps {
		if s.Start.Before(first) {
			first = s.Start
		}
		if s.End.After(last) {
			last = s.End
		}
	}
	at := r.eventAt
	started := at[enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED]
	taskStarted := at[enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED]
	taskDone := at[enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED]
	closed := at[enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED]
	ms := func(a, b time.Time) int64 { return b.Sub(a).Milliseconds() }
	fmt.Printf("   breakdown: client start %dms, to the worker %dms, before the steps %dms, steps %dms, "+
		"record's signal %dms + %dms to the task's end, server %dms, result %dms\n",
		ms(t0, started), ms(started, taskStarted), ms(taskStarted, first), ms(first, last),
		ms(last, signalled), ms(signalled, taskDone), ms(taskDone, closed), ms(closed, t0.Add(r.measured)))
	return nil
}

// peakRSS reads a process's peak resident set size.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmHWM in /proc status")
}

// cpuTime is the CPU time (user and system) a process has used so far,
// from /proc (in clock ticks of 1/100 s, as Linux reports them there).
// machineTimes are the machine's CPU times, all its CPUs together, as
// /proc/stat counts them: busy (every process, the kernel's work
// included), waiting on I/O, and in all.
type machineTimes struct{ busy, iowait, total time.Duration }

// since is what the machine spent from then to t.
func (t machineTimes) since(then machineTimes) machineTimes {
	return machineTimes{t.busy - then.busy, t.iowait - then.iowait, t.total - then.total}
}

// percent is d as a percentage of the total.
func (t machineTimes) percent(d time.Duration) float64 {
	if t.total <= 0 {
		return 0
	}
	return 100 * float64(d) / float64(t.total)
}

// machineCPU reads the machine's CPU times.
func machineCPU() (machineTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineTimes{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return machineTimes{}, errors.New("no CPU line in /proc/stat")
	}
	// user nice system idle iowait irq softirq steal ...; guest time is
	// in user's already.
	var t machineTimes
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return machineTimes{}, err
		}
		d := time.Duration(n) * 10 * time.Millisecond
		t.total += d
		switch i {
		case 3: // idle
		case 4:
			t.iowait += d
		default:
			t.busy += d
		}
	}
	return t, nil
}

func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's name, which is in parentheses and
	// may hold spaces: utime and stime are the 12th and 13th.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, errors.New("no CPU times in /proc stat")
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// sequential is the naive baseline: on fresh sites, fence east's clients
// through west, promote every group on west one call after another, then
// run the hooks; no workflow engine, no parallelism, no retries.
//
// With direct it runs the design's path instead, as a plain program would
// at best: west's Probe, the fence, ListClusterFence, then the promotions
// with policy.parallelism calls in flight, then the hooks. What the
// storage, the sockets and the machine cost at that parallelism is in it;
// what Drover adds over it is the engine's.
func sequential(ctx context.Context, o options, r *row, direct bool) (err error) {
	st, p, err := startStack(ctx, o, r.groups, r.latency, true)
	if err != nil {
		return err
	}
	defer func() {
		if serr := st.Stop(); err == nil {
			err = serr
		}
	}()
	west := p.Site("west")
	conn, err := grpc.NewClient(west.Storage.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	fc, rc := fence.NewFenceControllerClient(conn), replication.NewControllerClient(conn)
	t0 := time.Now()
	var cidrs []*fence.CIDR
	for _, c := range p.Site("east").Fence.CIDRs {
		cidrs = append(cidrs, &fence.CIDR{Cidr: c})
	}
	promote := func(g plans.VolumeGroup) error {
		if _, err := rc.PromoteVolume(ctx, &replication.PromoteVolumeRequest{Force: true, ReplicationSource: groupSource(g.Sites["west"].GroupID), Parameters: g.Parameters}); err != nil {
			return fmt.Errorf("promote %s: %w", g.Name, err)
		}
		return nil
	}
	if direct {
		if _, err := identity.NewIdentityClient(conn).Probe(ctx, &identity.ProbeRequest{}); err != nil {
			return fmt.Errorf("probe: %w", err)
		}
	}
	if _, err := fc.FenceClusterNetwork(ctx, &fence.FenceClusterNetworkRequest{Cidrs: cidrs}); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	if direct {
		if _, err := fc.ListClusterFence(ctx, &fence.ListClusterFenceRequest{}); err != nil {
			return fmt.Errorf("list fences: %w", err)
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(o.parallelism)
		for _, vg := range p.VolumeGroups {
			g.Go(func() error {
				if gctx.Err() != nil {
					return gctx.Err()
				}
				return promote(vg)
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
	} else {
		for _, g := range p.VolumeGroups {
			if err := promote(g); err != nil {
				return err
			}
		}
	}
	for _, c := range []string{"true", "true"} {
		if err := exec.CommandContext(ctx, "/bin/sh", "-c", c).Run(); err != nil {
			return err
		}
	}
	if direct {
		r.direct = time.Since(t0)
	} else {
		r.sequential = time.Since(t0)
	}
	return nil
}

// render writes the results as Markdown.
func render(o options, rows []row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s with `%s`.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), command(o))
	fmt.Fprintf(&b, "Machine: %s.\n\n", machine())
	b.WriteString("| groups | latency | rounds | ideal | design path | direct | measured | ratio to design | ratio to direct | sequential | speed-up | workflows | events per group | worker peak RSS |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		ratio := "—"
		if r.latency > 0 {
			ratio = fmt.Sprintf("%.2f", float64(r.measured)/float64(r.design()))
		}
		seq, speedup := "not run", "—"
		if r.sequential > 0 {
			seq = ms(r.sequential)
			x := float64(r.sequential) / float64(r.measured)
			prec := 1
			if x < 1 {
				prec = 2
			}
			speedup = fmt.Sprintf("%.*f×", prec, x)
		}
		direct, toDirect := "not run", "—"
		if r.direct > 0 {
			direct, toDirect = ms(r.direct), fmt.Sprintf("%.2f", float64(r.measured)/float64(r.direct))
		}
		fmt.Fprintf(&b, "| %d | %v | %d | %v | %v | %s | %v | %s | %s | %s | %s | %d | %.3f | %d MiB |\n", r.groups, r.latency, r.rounds,
			ms(r.ideal), ms(r.design()), direct, ms(r.measured), ratio, toDirect, seq, speedup, r.workflows, float64(r.events)/float64(r.groups), r.peakRSS>>20)
	}
	b.WriteString("\nSequential runs are skipped where they would take longer than " + o.seqLimit.String() + " (groups × latency).\n")
	b.WriteString(runsNote(rows))
	b.WriteString(targets(rows))
	if o.chart != "" {
		rel := o.chart
		if o.out != "" {
			if r, err := filepath.Rel(filepath.Dir(o.out), o.chart); err == nil {
				rel = r
			}
		}
		fmt.Fprintf(&b, "\n![Failover time against plan size: measured, ideal, sequential and direct, at each latency; and a site failover against its plans](%s)\n", filepath.ToSlash(rel))
	}
	for _, r := range rows {
		if r.groups == 100 && r.latency == 50*time.Millisecond {
			fmt.Fprintf(&b, "\nAt 100 groups and 50 ms: measured %v against an ideal of %v (ratio %.2f) and the design's path of %v (ratio %.2f).\n",
				ms(r.measured), ms(r.ideal), r.ratio(), ms(r.design()), float64(r.measured)/float64(r.design()))
			fmt.Fprintf(&b, "\nWhere that failover's time went (from its own timeline; the client saw %v from start request to result):\n\n", ms(r.measured))
			b.WriteString("| step | took |\n|---|---:|\n")
			var first, last time.Time
			promotions := 0
			for _, s := range r.steps {
				if s.End.IsZero() || s.Start.IsZero() {
					continue
				}
				if s.Kind() == workflows.StepKind(workflows.OpPromote) {
					if promotions == 0 || s.Start.Before(first) {
						first = s.Start
					}
					if s.End.After(last) {
						last = s.End
					}
					promotions++
					continue
				}
				if promotions > 0 && !last.IsZero() {
					fmt.Fprintf(&b, "| promote %d groups, %d at a time | %v |\n", promotions, r.parallelism, ms(last.Sub(first)))
					promotions, last = 0, time.Time{}
				}
				fmt.Fprintf(&b, "| %s | %v |\n", s.Name, ms(s.End.Sub(s.Start)))
			}
		}
	}
	return b.String()
}

// runsNote lists the failover time of each run of the rows measured
// more than once, whose figures in the table are medians.
func runsNote(rows []row) string {
	var b strings.Builder
	for _, r := range rows {
		if len(r.runs) < 2 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\nRows measured more than once give medians: the failover of the median run (its history, steps and memory), and the median of each baseline. Each run's failover time:\n\n")
		}
		var each []string
		for _, d := range r.runs {
			each = append(each, ms(d))
		}
		fmt.Fprintf(&b, "- %d groups at %v: %s\n", r.groups, r.latency, strings.Join(each, ", "))
	}
	return b.String()
}

func ms(d time.Duration) string {
	if d < 10*time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

func command(o options) string {
	var lats []string
	for _, l := range o.latencies {
		lats = append(lats, l.String())
	}
	var sizes []string
	for _, n := range o.sizes {
		sizes = append(sizes, strconv.Itoa(n))
	}
	var extra []string
	for _, e := range o.extra {
		extra = append(extra, fmt.Sprintf("%d@%v", e.groups, e.latency))
	}
	rep := ""
	if o.repeat > 1 {
		rep = fmt.Sprintf(" --repeat %d", o.repeat)
		if o.repeatMax > 0 {
			rep += fmt.Sprintf(" --repeat-max %d", o.repeatMax)
		}
	}
	return fmt.Sprintf("make bench BENCH_FLAGS='--sizes %s --latencies %s --extra %s --parallelism %d%s'", strings.Join(sizes, ","), strings.Join(lats, ","), strings.Join(extra, ","), o.parallelism, rep)
}

// machine describes the machine: CPU model and count, memory, kernel, Go.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				mem = fmt.Sprintf(", %d GiB memory", (kb+(1<<19))>>20)
			}
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = ", Linux " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%d × %s%s%s, %s", runtime.NumCPU(), model, mem, kernel, runtime.Version())
}

// The markers of the per-plan section and of the site section.
const (
	beginMarker, endMarker         = "<!-- bench:begin -->", "<!-- bench:end -->"
	siteBeginMarker, siteEndMarker = "<!-- bench-sites:begin -->", "<!-- bench-sites:end -->"
)

// section is the text between a file's markers ("" without them).
func section(text, beginMarker, endMarker string) string {
	i, j := strings.Index(text, beginMarker), strings.Index(text, endMarker)
	if i < 0 || j < i {
		return ""
	}
	return text[i+len(beginMarker) : j]
}

// splice puts the report between the file's markers, keeping the text
// around them; a file without them gets them at its end.
func splice(path, report, beginMarker, endMarker string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	text := string(old)
	i, j := strings.Index(text, beginMarker), strings.Index(text, endMarker)
	block := beginMarker + "\n" + report + endMarker
	if i < 0 || j < i {
		text = strings.TrimRight(text, "\n") + "\n\n" + block + "\n"
	} else {
		text = text[:i] + block + text[j+len(endMarker):]
	}
	if err := os.WriteFile(path, []byte(strings.TrimLeft(text, "\n")), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s\n", path)
	return nil
}
