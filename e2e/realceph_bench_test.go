package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/internal/stack"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// TestRealCephBench (make bench-ceph) measures a failover on real Ceph
// through the real ceph-csi against the same calls made directly. For
// each size N (DROVER_CEPH_BENCH_SIZES, default 10,50) it creates 2N
// volumes on east through its CSI controller: N for a plan of N volume
// groups of one volume each, N for the direct program. Replication is
// enabled on both sets with the same parameters (the plan's through
// Protect, stopped once every group has synced; the direct set's with
// EnableVolumeReplication) and waited for. Then, east running and
// nothing cut, the direct program makes the design's critical path on
// its set (Probe of west, the fence of a CIDR nothing uses,
// ListClusterFence, a forced PromoteVolume of every volume with the
// plan's parallelism in flight, the workload's start and health hooks),
// and Drover fails the plan over to west, as drctl failover --wait
// does. The direct program runs first; each on volumes of its own and a
// fence of its own, so neither finds the other's work done.
//
// It prints one "ceph-bench:" line per size and writes the table to
// .run/bench-ceph.md for BENCHMARKS.md.
func TestRealCephBench(t *testing.T) {
	envFile := os.Getenv("DROVER_CEPH_ENV")
	if envFile == "" || os.Getenv("DROVER_CEPH_BENCH") == "" {
		t.Skip("no real Ceph bench: make bench-ceph brings the clusters up and sets DROVER_CEPH_ENV and DROVER_CEPH_BENCH")
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	sizes := []int{10, 50}
	if v := os.Getenv("DROVER_CEPH_BENCH_SIZES"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				t.Fatalf("DROVER_CEPH_BENCH_SIZES: %q is not a size", f)
			}
			sizes = append(sizes, n)
		}
	}
	e := readCephEnv(t, envFile)
	dir := t.TempDir()
	secrets, secretFile := e.csiSecrets(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()

	var rows []cephBenchRow
	for i, n := range sizes {
		// Each size fences a CIDR of its own from TEST-NET-1, which no
		// client of either cluster uses: the direct program .2i+1, Drover
		// .2i+2.
		rows = append(rows, cephBenchSize(t, ctx, e, secrets, secretFile, dir, n, fmt.Sprintf("192.0.2.%d/32", 2*i+1), fmt.Sprintf("192.0.2.%d/32", 2*i+2)))
	}
	var b strings.Builder
	// ceph-csi --version prints "Cephcsi Version: V", "Git Commit: C", ...
	csi := map[string]string{}
	out, _ := exec.Command(e["DROVER_CEPHCSI_BIN"], "--version").CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			csi[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	ceph := strings.Fields(e.cli(t, "east", "ceph", "version"))
	fmt.Fprintf(&b, "Measured %s with `CEPH_CSI=... make bench-ceph`: Ceph %s, ceph-csi %s (commit %.7s), policy.parallelism 10.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), ceph[min(2, len(ceph)-1)], csi["Cephcsi Version"], csi["Git Commit"])
	b.WriteString("| volumes | direct | Drover RTO | ratio to direct | drctl start to end | direct promotions | Drover promotions |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %d | %v | %v | %.2f | %v | %v | %v |\n", r.n, r.direct.Round(time.Millisecond), r.rto.Round(time.Millisecond),
			float64(r.rto)/float64(r.direct), r.wall.Round(time.Millisecond), r.directPromote.Round(time.Millisecond), r.promote.Round(time.Millisecond))
	}
	if err := os.MkdirAll(filepath.Join("..", ".run"), 0o755); err == nil {
		_ = os.WriteFile(filepath.Join("..", ".run", "bench-ceph.md"), []byte(b.String()), 0o644)
	}
	t.Logf("ceph-bench: the table (also in .run/bench-ceph.md):\n%s", b.String())
}

type cephBenchRow struct {
	n                     int
	direct, directPromote time.Duration
	rto, wall, promote    time.Duration
}

// cephBenchSize measures one size: the direct program on its volumes,
// then Drover's failover of a plan of the others.
func cephBenchSize(t *testing.T, ctx context.Context, e cephEnv, secrets map[string]string, secretFile, dir string, n int, directCIDR, droverCIDR string) cephBenchRow {
	t.Helper()
	row := cephBenchRow{n: n}
	// 2n volumes through east's CSI controller, four at a time.
	names := func(set string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("drover-bench-%d-%s-%03d", n, set, i)
		}
		return out
	}
	created := time.Now()
	vols := map[string][]string{"direct": make([]string, n), "drover": make([]string, n)}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for set, ns := range map[string][]string{"direct": names("direct"), "drover": names("drover")} {
		for i, name := range ns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				vols[set][i] = cephCreateVolume(t, ctx, e.site("east", "CSI_ENDPOINT"), name, e, secrets)
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("ceph-bench: %d volumes: %d created on east in %v", n, 2*n, time.Since(created).Round(time.Millisecond))

	planFile := filepath.Join(dir, fmt.Sprintf("bench-%d.yaml", n))
	directPlan := cephBenchPlan(e, secretFile, fmt.Sprintf("bench%d-direct", n), vols["direct"], directCIDR)
	if err := os.WriteFile(planFile, []byte(cephBenchPlan(e, secretFile, fmt.Sprintf("bench%d", n), vols["drover"], droverCIDR)), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := plans.Parse(planFile, []byte(directPlan))
	if err != nil {
		t.Fatal(err)
	}
	st := activities.NewStorage()
	defer st.Close()
	parallelism := p.Policy.Parallelism

	// The direct set: replication on, as Protect would turn it on, and
	// a sync of each reported by east.
	enabled := time.Now()
	each(t, p, parallelism, func(g *plans.VolumeGroup) error {
		ins, err := activities.GroupInputs(p, "east", g, activities.RPCEnableVolumeReplication, false)
		if err != nil {
			return err
		}
		for _, in := range ins {
			if err := retryCall(ctx, func() error { return st.EnableVolumeReplication(ctx, in) }); err != nil {
				return err
			}
		}
		return nil
	})
	for _, v := range vols["direct"] {
		simtest.Eventually(t, 5*time.Minute, "east to report a sync of "+v, func() bool { return lastSyncAfter(t, e, secrets, v, time.Time{}) })
	}
	t.Logf("ceph-bench: %d volumes: the direct set replicated and synced in %v", n, time.Since(enabled).Round(time.Millisecond))

	// Drover's set: protection turns replication on; once every group
	// has synced it is stopped, so that the failover runs alone, as the
	// direct program does.
	layout, err := stack.Free()
	if err != nil {
		t.Fatal(err)
	}
	layout.Sites = nil
	s, err := stack.Start(ctx, stack.Options{Dir: filepath.Join(dir, fmt.Sprintf("run-%d", n)), Bin: bin, Plan: planFile, Layout: layout, Out: logTo{t}})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, st: s, dir: dir, plan: s.PlanFile, writers: map[string]*writer{}}
	t.Cleanup(func() {
		if t.Failed() {
			h.dumpLogs()
		}
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	if h.c, err = s.Client(ctx); err != nil {
		t.Fatal(err)
	}
	plan := fmt.Sprintf("bench%d", n)
	protected := time.Now()
	h.must("protect", "start", h.plan, "--primary", "east", "--interval", "5s")
	simtest.Eventually(t, 5*time.Minute, "protection to record a sync of every group", func() bool {
		ps, err := workflows.ReadProtect(ctx, h.c, plan)
		if err != nil || ps == nil || len(ps.Groups) != n {
			return false
		}
		for _, g := range ps.Groups {
			if g.LastSync.IsZero() {
				return false
			}
		}
		return true
	})
	h.must("protect", "stop", plan)
	t.Logf("ceph-bench: %d volumes: Drover's set protected and synced in %v", n, time.Since(protected).Round(time.Millisecond))

	// The direct program: the design's critical path, timed.
	west := func(rpc string) activities.Endpoint {
		ep, err := activities.EndpointFor(p, "west", rpc)
		if err != nil {
			t.Fatal(err)
		}
		return ep
	}
	start := time.Now()
	if _, err := st.Probe(ctx, activities.IdentityInput{Endpoint: west(activities.RPCProbe)}); err != nil {
		t.Fatalf("direct: Probe of west: %v", err)
	}
	if err := st.FenceClusterNetwork(ctx, activities.FenceInput{Endpoint: west(activities.RPCFenceClusterNetwork), CIDRs: []string{directCIDR}}); err != nil {
		t.Fatalf("direct: fence: %v", err)
	}
	// The fence's verification: ceph-csi's ListClusterFence panics (the
	// recorded deviation ceph-csi/list-fence-panics, read as
	// unimplemented), which Drover's verification takes as "cannot
	// list"; the call is made all the same.
	var ae *temporal.ApplicationError
	if l, err := st.ListClusterFence(ctx, activities.FenceListInput{Endpoint: west(activities.RPCListClusterFence)}); err != nil && !(errors.As(err, &ae) && ae.Type() == "NotImplemented") {
		t.Fatalf("direct: ListClusterFence: %v", err)
	} else if err == nil && len(l.CIDRs) == 0 {
		t.Fatalf("direct: west lists no fence after fencing %s", directCIDR)
	}
	promoteStart := time.Now()
	each(t, p, parallelism, func(g *plans.VolumeGroup) error {
		ins, err := activities.GroupInputs(p, "west", g, activities.RPCPromoteVolume, true)
		if err != nil {
			return err
		}
		for _, in := range ins {
			// As Drover's attempts do: the same call again while ceph-csi
			// answers that another holds the volume's lock.
			if err := retryCall(ctx, func() error { return st.PromoteVolume(ctx, in) }); err != nil {
				return err
			}
		}
		return nil
	})
	row.directPromote = time.Since(promoteStart)
	for _, hook := range []string{"true", "true"} { // the workload's start and health
		if err := exec.CommandContext(ctx, "sh", "-c", hook).Run(); err != nil {
			t.Fatal(err)
		}
	}
	row.direct = time.Since(start)
	t.Logf("ceph-bench: %d volumes: direct %v (promotions %v)", n, row.direct.Round(time.Millisecond), row.directPromote.Round(time.Millisecond))

	// Drover's failover of the plan, as drctl runs it.
	wallStart := time.Now()
	cephAction(t, h, "failover", h.plan, "--to", "west", "--yes", "--wait")
	row.wall = time.Since(wallStart)
	var fo workflows.FailoverResult
	if err := h.c.GetWorkflow(ctx, workflows.ActionID(plan), "").Get(ctx, &fo); err != nil {
		t.Fatal(err)
	}
	allDone(t, fo.Progress)
	row.rto = fo.RTO
	var first, last time.Time
	for _, s := range fo.Progress.Steps {
		if s.Kind() != workflows.StepKind(workflows.OpPromote) {
			continue
		}
		if first.IsZero() || s.Start.Before(first) {
			first = s.Start
		}
		if s.End.After(last) {
			last = s.End
		}
	}
	row.promote = last.Sub(first)
	t.Logf("ceph-bench: %d volumes: direct %v, Drover RTO %v (ratio %.2f; promotions %v against %v), drctl start to end %v",
		n, row.direct.Round(time.Millisecond), row.rto.Round(time.Millisecond), float64(row.rto)/float64(row.direct),
		row.promote.Round(time.Millisecond), row.directPromote.Round(time.Millisecond), row.wall.Round(time.Millisecond))
	return row
}

// cephBenchPlan is a plan of one volume group per volume, east primary,
// a workload whose hooks do nothing, fencing east's cidr.
func cephBenchPlan(e cephEnv, secretFile, name string, vols []string, cidr string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: drover.dev/v1alpha1\nkind: FailoverPlan\nmetadata: {name: %s}\nsites:\n", name)
	for _, site := range []string{"east", "west"} {
		c := "192.0.2.250/32"
		if site == "east" {
			c = cidr
		}
		fmt.Fprintf(&b, "  - name: %s\n    storage:\n      endpoint: %q\n      csi: %q\n      secret: {file: %q}\n      parameters: {clusterID: %s}\n    fence: {cidrs: [%s]}\n    orchestrator: {exec: {timeout: 60s}}\n",
			site, e.site(site, "CSIADDONS_ENDPOINT"), e.site(site, "CSI_ENDPOINT"), secretFile, e["DROVER_CEPH_CLUSTER_ID"], c)
	}
	b.WriteString("volumeGroups:\n")
	for i, v := range vols {
		fmt.Fprintf(&b, "  - name: g%03d\n    sites: {east: {volumes: [%s]}, west: {volumes: [%s]}}\n    parameters: {mirroringMode: snapshot, schedulingInterval: 1m}\n", i, v, v)
	}
	b.WriteString("workloads:\n  - name: app\n    volumeGroups: [")
	for i := range vols {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "g%03d", i)
	}
	b.WriteString("]\n    sites:\n")
	for _, site := range []string{"east", "west"} {
		fmt.Fprintf(&b, "      %s:\n        exec: {start: \"true\", stop: \"true\", stopped: \"true\", health: \"true\"}\n", site)
	}
	b.WriteString("policy:\n  parallelism: 10\n  retry: {initialInterval: 1s, maximumInterval: 15s, timeLimit: 8m}\n")
	return b.String()
}

// each runs fn on every group of p, at most parallelism at a time, and
// fails the test on the first error.
func each(t *testing.T, p *plans.Plan, parallelism int, fn func(g *plans.VolumeGroup) error) {
	t.Helper()
	sem := make(chan struct{}, max(parallelism, 1))
	errs := make(chan error, len(p.VolumeGroups))
	var wg sync.WaitGroup
	for i := range p.VolumeGroups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := fn(&p.VolumeGroups[i]); err != nil {
				errs <- fmt.Errorf("%s: %w", p.VolumeGroups[i].Name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// retryCall makes a storage call again, for at most two minutes, while
// it fails with an error the spec says to retry (ceph-csi's "an
// operation with the given Volume ID already exists" is ABORTED).
func retryCall(ctx context.Context, call func() error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := call()
		if err == nil || !activities.Retryable(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Second)
	}
}
