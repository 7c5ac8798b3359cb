package e2e_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/internal/stack"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// bin holds worker, drover-sim, drctl and a link to the Temporal CLI,
// built once for the package; buildErr says why they are missing.
var (
	bin      string
	buildErr error
)

// sqlBin, from DROVER_E2E_SQL (make e2e-sql), is the directory of the
// Temporal server and its SQL tool: the stacks then run Temporal on
// PostgreSQL, set up as in production, instead of the dev server.
var sqlBin = os.Getenv("DROVER_E2E_SQL")

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "drover-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	buildErr = bintest.BuildInto(dir, "worker", "drover-sim", "drctl")
	if buildErr == nil {
		buildErr = bintest.LinkTemporal(dir)
	}
	for _, name := range []string{"temporal-server", "temporal-sql-tool"} {
		if buildErr == nil && sqlBin != "" {
			buildErr = os.Symlink(filepath.Join(sqlBin, name), filepath.Join(dir, name))
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// planText is the plan the tests drive: two sites as the stack lays them
// out, n groups of one volume each, one workload whose exec hooks keep a
// marker file per site (so a test sees where the application runs), and
// deadlines short enough that a call lost with a killed worker is retried
// within seconds.
func planText(dir string, groups []sim.GroupSpec, parallelism int) string {
	var b strings.Builder
	b.WriteString(stack.PlanHead("e2e", 10*time.Second))
	b.WriteString("volumeGroups:\n")
	var names []string
	for i, g := range groups {
		name := strings.TrimPrefix(g.ID, "vg-")
		names = append(names, name)
		fmt.Fprintf(&b, `  - name: %q
    priority: %d
    sites: {east: {groupID: %s}, west: {groupID: %s}}
    parameters: {mirroringMode: snapshot, schedulingInterval: 1s}
`, name, i%2, g.ID, g.ID)
	}
	fmt.Fprintf(&b, "workloads:\n  - name: app\n    volumeGroups: [%s]\n    healthTimeout: 30s\n    sites:\n", strings.Join(names, ", "))
	for _, site := range []string{"east", "west"} {
		marker := filepath.Join(dir, "app-running."+site)
		fmt.Fprintf(&b, "      %s:\n        exec: {start: \"touch %s\", stop: \"rm -f %s\", health: \"test -f %s\"}\n", site, marker, marker, marker)
	}
	fmt.Fprintf(&b, `policy:
  parallelism: %d
  rpoTarget: 30s
  retry: {initialInterval: 200ms, maximumInterval: 2s, timeLimit: 3m}
  deadlines: {default: 2s, PromoteVolume: 3s, DemoteVolume: 3s, ResyncVolume: 3s}
`, parallelism)
	return b.String()
}

// harness is one running stack and the applications writing to it.
type harness struct {
	t    *testing.T
	st   *stack.Stack
	c    client.Client
	ctl  map[string]*sim.Control
	dir  string
	plan string // the stack's copy of the plan
	vols []string

	mu      sync.Mutex
	writers map[string]*writer
}

type writer struct {
	*stack.Writer
	stop func()
}

// logTo sends the stack's progress lines to the test log.
type logTo struct{ t *testing.T }

func (l logTo) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// start brings up a stack with n groups; it stops when the test ends.
func start(t *testing.T, n, parallelism int) *harness {
	t.Helper()
	return startWith(t, n, parallelism, nil, nil)
}

// startWith is start with the plan text edited by edit and the stack's
// options by opts (either may be nil).
func startWith(t *testing.T, n, parallelism int, edit func(string) string, opts func(*stack.Options)) *harness {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	dir := t.TempDir()
	groups := sim.GenerateGroups(n, 1)
	planFile := filepath.Join(dir, "e2e.yaml")
	text := planText(dir, groups, parallelism)
	if edit != nil {
		text = edit(text)
	}
	if err := os.WriteFile(planFile, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	layout, err := stack.Free()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o := stack.Options{Dir: filepath.Join(dir, "run"), Bin: bin, Plan: planFile, Groups: groups, Layout: layout, Out: logTo{t}, SQL: sqlBin != ""}
	if opts != nil {
		opts(&o)
	}
	st, err := stack.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, st: st, dir: dir, plan: st.PlanFile, ctl: map[string]*sim.Control{}, writers: map[string]*writer{}}
	t.Cleanup(func() {
		h.stopWriters()
		if t.Failed() {
			if ended := st.Ended(); ended != nil {
				t.Logf("processes of the stack that ended on their own: %v", ended)
			}
		}
		if err := st.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			h.dumpLogs()
		}
	})
	for _, g := range groups {
		h.vols = append(h.vols, g.Volumes[0])
	}
	for _, site := range layout.Sites {
		h.ctl[site.Name] = sim.NewControl(site.Control)
	}
	h.c, err = st.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// dumpLogs prints the end of each process's log, for a failed test.
func (h *harness) dumpLogs() {
	for name := range h.st.PIDs() {
		b, _ := os.ReadFile(filepath.Join(h.st.Dir, name+".log"))
		if len(b) > 6000 {
			b = b[len(b)-6000:]
		}
		h.t.Logf("---- the end of %s.log:\n%s", name, b)
	}
}

// drctl runs the drctl binary against the stack: its output and exit
// code.
func (h *harness) drctl(args ...string) (string, int) {
	h.t.Helper()
	return h.drctlWithin(5*time.Minute, args...)
}

// drctlWithin is drctl for a command that may take up to limit.
func (h *harness) drctlWithin(limit time.Duration, args ...string) (string, int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "drctl"), args...)
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+h.st.Layout.Temporal, "TEMPORAL_NAMESPACE=default")
	out, err := cmd.CombinedOutput()
	code := bintest.ExitCode(err)
	h.t.Logf("$ drctl %s  (exit %d)\n%s", strings.Join(args, " "), code, out)
	return string(out), code
}

// must runs drctl and fails the test unless it exits 0.
func (h *harness) must(args ...string) string {
	h.t.Helper()
	out, code := h.drctl(args...)
	if code != 0 {
		h.t.Fatalf("drctl %s exited %d:\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// startWriters starts an application writing on each site, every 20ms,
// to one volume of each group in turn.
func (h *harness) startWriters() {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, site := range h.st.Layout.Sites {
		w, err := stack.NewWriter(site, h.vols)
		if err != nil {
			h.t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); w.Run(ctx, 20*time.Millisecond) }()
		h.writers[site.Name] = &writer{Writer: w, stop: func() { cancel(); <-done }}
	}
}

func (h *harness) stopWriters() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, w := range h.writers {
		w.stop()
		delete(h.writers, name)
	}
}

// counts are what the application on site saw so far.
func (h *harness) counts(site string) stack.WriteCounts {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.writers[site]; w != nil {
		return w.Counts()
	}
	return stack.WriteCounts{}
}

// waitWrites waits until the application on site saw more of what
// field picks than it had.
func (h *harness) waitWrites(site, what string, field func(stack.WriteCounts) int, more int) {
	h.t.Helper()
	from := field(h.counts(site))
	simtest.Eventually(h.t, 30*time.Second, fmt.Sprintf("%d more writes %s on %s", more, what, site), func() bool { return field(h.counts(site)) >= from+more })
}

func acked(c stack.WriteCounts) int    { return c.Acked }
func fenced(c stack.WriteCounts) int   { return c.Fenced }
func readOnly(c stack.WriteCounts) int { return c.ReadOnly }

// states reads every site's state through its control API.
func (h *harness) states() []*sim.State {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := h.st.States(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// check runs the simulator's invariant checker over both sites and fails
// the test on a violation; it returns the report.
func (h *harness) check() *sim.Report {
	h.t.Helper()
	r := sim.Check(h.states()...)
	h.t.Log(r)
	if !r.OK() {
		h.t.Fatalf("invariants violated:\n%v", r)
	}
	return r
}

// lostOn counts the report's lost writes that site acknowledged.
func lostOn(r *sim.Report, site string) int {
	n := 0
	for _, l := range r.Lost {
		if l.Site == site {
			n++
		}
	}
	return n
}

// baseFaults leaves both sites with only the given standing faults.
func (h *harness) baseFaults(rules ...sim.FaultRule) {
	h.t.Helper()
	for _, site := range h.st.Layout.Sites {
		h.faults(site.Name, rules...)
	}
}

// faults sets a site's injected faults.
func (h *harness) faults(site string, rules ...sim.FaultRule) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.ctl[site].SetFaults(ctx, rules); err != nil {
		h.t.Fatalf("faults on %s: %v", site, err)
	}
}

// siteDown and siteUp take a storage site down and back.
func (h *harness) siteDown(site string) {
	h.t.Helper()
	if err := h.ctl[site].Down(context.Background()); err != nil {
		h.t.Fatalf("take %s down: %v", site, err)
	}
}

// sitePowerLoss takes a storage site down as a power cut does; siteUp
// restarts it.
func (h *harness) sitePowerLoss(site string) {
	h.t.Helper()
	if err := h.ctl[site].PowerLoss(context.Background()); err != nil {
		h.t.Fatalf("cut %s's power: %v", site, err)
	}
}

func (h *harness) siteUp(site string) {
	h.t.Helper()
	if err := h.ctl[site].Up(context.Background()); err != nil {
		h.t.Fatalf("bring %s up: %v", site, err)
	}
}

// actionStatus is the status of the plan's last action, read from the
// server (strongly consistent); UNSPECIFIED while the server cannot be
// reached.
func (h *harness) actionStatus() enumspb.WorkflowExecutionStatus {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := h.c.DescribeWorkflowExecution(ctx, workflows.ActionID("e2e"), "")
	if err != nil {
		return enumspb.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED
	}
	return d.GetWorkflowExecutionInfo().GetStatus()
}

// progress asks the running action for its timeline.
func (h *harness) progress() (*workflows.Progress, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := h.c.QueryWorkflow(ctx, workflows.ActionID("e2e"), "", "progress")
	if err != nil {
		return nil, err
	}
	var p workflows.Progress
	return &p, v.Get(&p)
}

// waitProtected waits until the protection of plan has recorded a
// completed sync of each of its groups: before that, a group's copy on
// the other site may not replicate yet, and the storage rightly refuses
// to promote it (FAILED_PRECONDITION), which an action would pause on.
func (h *harness) waitProtected(plan string, groups int) {
	h.t.Helper()
	simtest.Eventually(h.t, 30*time.Second, "protection of "+plan+" to record a sync of every group", func() bool {
		ps, err := workflows.ReadProtect(context.Background(), h.c, plan)
		return err == nil && ps != nil && len(ps.Groups) == groups && !ps.LastSync().IsZero()
	})
}

// syncedAndIdle waits until every primary copy's peer holds all of its
// writes, with no application writing, so the storage state stops
// changing.
func (h *harness) syncedAndIdle() {
	h.t.Helper()
	simtest.Eventually(h.t, 30*time.Second, "every peer copy to catch up", func() bool {
		for _, s := range h.states() {
			for _, u := range s.Units {
				if u.Role == sim.RolePrimary && u.PeerSeq != u.Seq {
					return false
				}
			}
		}
		return true
	})
	// A sync that was in flight lands within one interval.
	time.Sleep(1500 * time.Millisecond)
}

// stateFiles hashes every persisted state file of both sites.
func (h *harness) stateFiles() map[string]string {
	h.t.Helper()
	out := map[string]string{}
	for _, site := range h.st.Layout.Sites {
		root := h.st.StateDir(site.Name)
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".tmp-") {
				return err
			}
			b, err := os.ReadFile(p)
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			rel, _ := filepath.Rel(h.st.Dir, p)
			out[rel] = hex.EncodeToString(sum[:])
			return nil
		})
		if err != nil {
			h.t.Fatal(err)
		}
	}
	return out
}

// runningOn reports whether the application's marker says it runs on
// site.
func (h *harness) runningOn(site string) bool {
	_, err := os.Stat(filepath.Join(h.dir, "app-running."+site))
	return err == nil
}
