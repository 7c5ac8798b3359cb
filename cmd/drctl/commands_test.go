package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// eastWest starts a pair of simulated sites named east and west that
// replicate every 50 ms.
func eastWest(t *testing.T) (east, west *simtest.Site) {
	return simtest.StartPair(t, simtest.Options{Interval: 50 * time.Millisecond,
		TweakA: func(c *sim.Config) { c.Name = "east" }, TweakB: func(c *sim.Config) { c.Name = "west" }})
}

// cli runs the built drctl against one Temporal address.
type cli struct {
	t    *testing.T
	bin  string
	addr string
	env  []string // more of drctl's environment
}

// run runs drctl with args (stdin empty) and returns its exit code,
// stdout and stderr.
func (c cli) run(args ...string) (int, string, string) {
	return c.runIn("", args...)
}

func (c cli) runIn(stdin string, args ...string) (int, string, string) {
	c.t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Env = append(append(os.Environ(), "TEMPORAL_ADDRESS="+c.addr, "TEMPORAL_NAMESPACE=default"), c.env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return bintest.ExitCode(err), out.String(), errb.String()
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		c.t.Fatalf("drctl %v did not end within 3 minutes:\n%s\n%s", args, out.String(), errb.String())
		return 0, "", ""
	}
}

// ok runs drctl -o json, wants exit 0, and decodes its output into v.
func (c cli) ok(v any, args ...string) {
	c.t.Helper()
	code, out, errs := c.run(append([]string{"-o", "json"}, args...)...)
	if code != 0 {
		c.t.Fatalf("drctl %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errs)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(out), v); err != nil {
			c.t.Fatalf("drctl %v: output is not JSON: %v\n%s", args, err, out)
		}
	}
}

// declined runs drctl answering "no" to its question: exit 2, and the
// caller's next steps show that nothing was done.
func declined(t *testing.T, c cli, args ...string) {
	t.Helper()
	if code, out, errs := c.runIn("no\n", args...); code != 2 || !strings.Contains(errs, "not confirmed; nothing was done") {
		t.Fatalf("drctl %v answered no: exit %d, stderr %q (stdout %q); want exit 2, not confirmed", args, code, errs, out)
	}
}

// want runs drctl and wants the exit code and a message on stderr.
func (c cli) want(code int, msg string, args ...string) {
	c.t.Helper()
	got, out, errs := c.run(args...)
	if got != code || !strings.Contains(errs, msg) {
		c.t.Errorf("drctl %v: exit %d, stderr %q (stdout %q); want exit %d and %q", args, got, errs, out, code, msg)
	}
}

type step struct{ ID, Name, State, Output string }

type progress struct {
	Action, Plan, State string
	Steps               []step
}

type statusOut struct {
	Plan   string
	Action *struct {
		Type, Status string
		Progress     *progress
	}
	Protection *struct {
		Primary string
		Polls   int
		Groups  map[string]struct{ LastSync time.Time }
	}
}

type outcome struct {
	WorkflowID, Status, Error string
	Result                    json.RawMessage
	Progress                  *workflows.Progress
}

// eventually polls drctl status until cond holds.
func (c cli) eventually(what, plan string, cond func(statusOut) bool) {
	c.t.Helper()
	var last statusOut
	simtest.Eventually(c.t, 2*time.Minute, what, func() bool {
		code, out, _ := c.run("-o", "json", "status", plan)
		last = statusOut{}
		return code == 0 && json.Unmarshal([]byte(out), &last) == nil && cond(last)
	})
}

func stepIn(s statusOut, state string) bool {
	if s.Action == nil || s.Action.Progress == nil {
		return false
	}
	return slices.ContainsFunc(s.Action.Progress.Steps, func(st step) bool { return st.State == state })
}

// TestWarnsWhenNoWorkerPolls: an action started with no worker polling
// the queues it needs starts, and drctl says which queue waits and how
// to serve it.
func TestWarnsWhenNoWorkerPolls(t *testing.T) {
	bins := bintest.Build(t, "drctl")
	srv := devserver.Start(t, nil)
	path := filepath.Join(t.TempDir(), "idle.yaml")
	body := fmt.Sprintf(`apiVersion: drover.dev/v1alpha1
kind: FailoverPlan
metadata: {name: idle}
sites:
  - name: east
    storage: {endpoint: %q}
    fence: {cidrs: [%s/32]}
    orchestrator: {exec: {}}
  - name: west
    storage: {endpoint: %q}
    fence: {cidrs: [%s/32]}
    orchestrator: {exec: {}}
    taskQueue: drover-site-west
volumeGroups:
  - name: db
    sites: {east: {groupID: vg-1}, west: {groupID: vg-1}}
`, simtest.FreeAddr(t), simtest.NodeA, simtest.FreeAddr(t), simtest.NodeB)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	c := cli{t: t, bin: filepath.Join(bins, "drctl"), addr: srv.Address()}
	code, out, errs := c.run("drill", path, "--to", "west")
	if code != 0 || !strings.Contains(out, "drill of plan \"idle\" started") {
		t.Fatalf("drill without a worker: exit %d\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{
		`warning: no worker has polled task queue "drover" (the workflows)`,
		`task queue "drover-site-west" (site west's calls)`,
		"start one (bin/worker --site west)",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("drctl's warning lacks %q:\n%s", want, errs)
		}
	}
	t.Logf("drctl said:\n%s", errs)
	if strings.Contains(errs, "site east") {
		t.Errorf("drctl warns of a queue for east, which has none of its own:\n%s", errs)
	}

	// Following the action, drctl says which of the two keeps it from
	// progress: no worker on its queue, then the server gone.
	watch := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + srv.Address(), "TEMPORAL_NAMESPACE=default"}, c.bin, "watch", "idle")
	noWorker := `(no worker polls task queue "drover": drover-action-idle waits until one does`
	simtest.Eventually(t, time.Minute, "drctl watch to say no worker polls", func() bool { return strings.Contains(watch.Log.String(), noWorker) })
	if strings.Contains(watch.Log.String(), "unreachable") {
		t.Errorf("drctl watch calls a running server unreachable:\n%s", watch.Log)
	}
	// The server stops (the dev server keeps nothing): the action is gone
	// with it, but drctl cannot know that and must say it cannot reach it.
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	simtest.Eventually(t, time.Minute, "drctl watch to say Temporal is unreachable", func() bool {
		return strings.Contains(watch.Log.String(), "(Temporal is unreachable: ")
	})
	if ended, _ := watch.Wait(0); ended {
		t.Errorf("drctl watch gave up while the server was away:\n%s", watch.Log)
	}
	t.Logf("drctl watch said:\n%s", watch.Log)
}

// TestCommandsAgainstDevServer drives the built drctl and worker against
// the real Temporal dev server and simulated sites over gRPC sockets:
// every command, JSON output parsed, exit codes checked, bad input
// refused with exit 2 and a message, and the storage invariants holding
// at the end of a failover, reprotect and failback cycle.
func TestCommandsAgainstDevServer(t *testing.T) {
	bins := bintest.Build(t, "drctl", "worker")
	srv := devserver.Start(t, nil)
	east, west := eastWest(t)
	dir := t.TempDir()
	hooks := filepath.Join(dir, "hooks.log")
	plan := func(name, extra string) string {
		path := filepath.Join(dir, name)
		body := fmt.Sprintf(`apiVersion: drover.dev/v1alpha1
kind: FailoverPlan
metadata: {name: shop}
sites:
  - name: east
    storage: {endpoint: %q}
    fence: {cidrs: [%s/32]}
    orchestrator: {exec: {timeout: 10s}}
  - name: west
    storage: {endpoint: %q}
    fence: {cidrs: [%s/32]}
    orchestrator: {exec: {timeout: 10s}}
volumeGroups:
  - name: db
    sites: {east: {groupID: vg-1}, west: {groupID: vg-1}}
  - name: logs
    priority: 1
    sites: {east: {groupID: vg-2}, west: {groupID: vg-2}}
workloads:
  - name: web
    sites:
      east: {exec: {start: "echo start east >> %[5]s", stop: "echo stop east >> %[5]s", health: "true"}}
      west: {exec: {start: "echo start west >> %[5]s", stop: "echo stop west >> %[5]s", health: "true"}}
policy:
  rpoTarget: 30s
  retry: {initialInterval: 50ms, maximumInterval: 200ms}
%s`, east.Endpoint(), simtest.NodeA, west.Endpoint(), simtest.NodeB, hooks, extra)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	shop := plan("shop.yaml", "")
	gated := plan("gated.yaml", "  approvals: [beforeFence]\n")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: drover.dev/v1alpha1\nkind: FailoverPlan\nmetadata: {name: shop}\nsites: []\n"), 0o644)

	c := cli{t: t, bin: filepath.Join(bins, "drctl"), addr: srv.Address()}
	metrics := simtest.FreeAddr(t)
	worker := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + srv.Address()}, filepath.Join(bins, "worker"), "--metrics", metrics, "--allow-unsigned-plans")
	simtest.Eventually(t, 30*time.Second, "the worker to start", func() bool { return strings.Contains(worker.Log.String(), "worker started") })

	// Bad input: exit 2 and a message naming what to do.
	c.want(2, "give the site that takes over with --to", "failover", shop, "--yes")
	c.want(2, `plan "shop" has no site "mars"; its sites are east, west`, "failover", shop, "--to", "mars", "--yes")
	c.want(2, "a plan has exactly two sites", "failover", bad, "--to", "west", "--yes")
	c.want(2, "fix the plan (drctl plan validate", "drill", bad, "--to", "west")
	c.want(2, "requires at least 1 arg(s), only received 0", "reprotect")
	c.want(2, `-o "xml": want text or json`, "-o", "xml", "list")
	c.want(2, "unknown flag: --frobnicate", "list", "--frobnicate")
	c.want(2, `unknown command "frob"`, "frob")
	c.want(2, "give exactly one of --retry, --skip or --abort", "resolve", "shop", "--retry", "--skip")
	c.want(2, "the last action is none; reprotect follows a completed failover", "reprotect", shop, "--yes")
	c.want(2, "Temporal knows no action or protection of plan \"nosuch\"", "status", "nosuch")
	c.want(2, "Temporal knows no action of plan \"nosuch\"", "watch", "nosuch")
	c.want(3, "cannot reach Temporal at", "--address", simtest.FreeAddr(t), "list")
	// A namespace the server lacks: exit 3 and how to create it, before
	// anything else (no note on the protection state it could not read).
	c.want(3, `has no namespace "nosuch": create it (temporal operator namespace create --namespace nosuch`, "--namespace", "nosuch", "list")
	if code, _, errs := c.run("--namespace", "nosuch", "failover", shop, "--to", "west", "--yes"); code != 3 || strings.Contains(errs, "note:") || !strings.Contains(errs, `has no namespace "nosuch"`) {
		t.Errorf("failover in a missing namespace: exit %d, stderr %q; want exit 3, the namespace named, no note", code, errs)
	}
	if code, out, _ := c.run("completion", "bash"); code != 0 || !strings.Contains(out, "bash completion") {
		t.Errorf("completion bash: exit %d", code)
	}
	var valid []struct{ Valid bool }
	c.ok(&valid, "plan", "validate", shop, gated)
	if len(valid) != 2 || !valid[0].Valid || !valid[1].Valid {
		t.Fatalf("plan validate: %+v", valid)
	}
	var shown struct {
		Policy struct{ Parallelism int }
	}
	c.ok(&shown, "plan", "show", shop)
	var schema map[string]any
	c.ok(&schema, "plan", "schema")
	if shown.Policy.Parallelism != 10 || schema["$schema"] == nil {
		t.Fatalf("plan show: %+v; schema keys: %d", shown, len(schema))
	}
	var none []any
	c.ok(&none, "list")
	if len(none) != 0 {
		t.Fatalf("list before any action: %v", none)
	}

	// Protection enables replication and records the syncs.
	var started map[string]string
	c.ok(&started, "protect", "start", shop, "--primary", "east", "--interval", "200ms")
	if started["workflowId"] != "drover-protect-shop" {
		t.Fatalf("protect start: %v", started)
	}
	c.eventually("protection to record a sync of every group", "shop", func(s statusOut) bool {
		if s.Protection == nil || s.Protection.Primary != "east" || len(s.Protection.Groups) != 2 {
			return false
		}
		for _, g := range s.Protection.Groups {
			if g.LastSync.IsZero() {
				return false
			}
		}
		return true
	})
	w, err := sim.NewClient(west.DataAddr(), simtest.NodeB, "west-node")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	// A drill changes nothing and passes.
	var drill outcome
	code, out, errs := c.run("-o", "json", "drill", shop, "--to", "west", "--wait")
	if code != 0 || json.Unmarshal([]byte(out), &drill) != nil {
		t.Fatalf("drill: exit %d\n%s\n%s", code, out, errs)
	}
	if strings.Contains(errs, "no worker") {
		t.Errorf("drill with a worker running warns of none: %s", errs)
	}
	var dr struct {
		OK     bool
		Failed int
		Would  []string
	}
	if err := json.Unmarshal(drill.Result, &dr); err != nil || drill.Status != "completed" || !dr.OK || len(dr.Would) == 0 {
		t.Fatalf("drill: %+v %+v %v", drill, dr, err)
	}

	// A declined confirmation does nothing.
	if code, _, errs := c.runIn("no\n", "failover", shop, "--to", "west"); code != 2 || !strings.Contains(errs, "not confirmed; nothing was done") {
		t.Fatalf("declined failover: exit %d, %s", code, errs)
	}
	c.want(2, "Pass --yes to go on without asking", "failover", shop, "--to", "west")

	// Cancel: a failover waiting at its first gate is cancelled.
	c.ok(&started, "failover", gated, "--to", "west", "--yes")
	c.eventually("the gate", "shop", func(s statusOut) bool { return stepIn(s, "waiting for approval") })
	c.ok(nil, "cancel", "shop", "--yes")
	code, out, _ = c.run("-o", "json", "watch", "shop")
	var o outcome
	if code != 1 || json.Unmarshal([]byte(out), &o) != nil || o.Status != "canceled" {
		t.Fatalf("watch of a cancelled failover: exit %d %s", code, out)
	}

	// The real failover: east is lost. It waits at its gate; a second
	// action is refused; approve lets it through; watch shows the end.
	east.Down()
	c.ok(&started, "failover", gated, "--to", "west", "--yes")
	c.eventually("the gate", "shop", func(s statusOut) bool { return stepIn(s, "waiting for approval") })
	c.want(1, `plan "shop" already has a DR action running: Failover`, "failback", shop, "--to", "east", "--yes")
	c.ok(nil, "approve", "shop", "--yes", "--by", "test")
	code, out, errs = c.run("watch", "shop")
	if code != 0 || !strings.Contains(out, `failover of plan "shop" completed`) || !strings.Contains(out, "RTO ") || !strings.Contains(out, "promote db on west") {
		t.Fatalf("watch failover: exit %d\n%s\n%s", code, out, errs)
	}
	t.Logf("watch:\n%s", out)
	// Unprotected, protection cuts no point in time: drctl points says
	// why, and what protects the plan again.
	simtest.Eventually(t, time.Minute, "drctl points to say why no point is cut", func() bool {
		_, out, _ := c.run("points", "shop")
		return strings.Contains(out, "no points are cut: the plan has no replica since ") && strings.Contains(out, "(east was lost); drctl reprotect shop once east is back")
	})
	// Who did what: the action says who started it (drctl's identity)
	// and how the worker trusts its plan; the gate, who opened it.
	for _, want := range []string{"started by ", activities.UnsignedWarning, "(by test)"} {
		if !strings.Contains(out, want) {
			t.Errorf("watch of the failover lacks %q:\n%s", want, out)
		}
	}
	if _, err := w.Write(t.Context(), "v1", 0, []byte("written during the outage")); err != nil {
		t.Fatal(err)
	}

	// Reprotect pauses on a demotion the storage refuses once; resolve
	// --retry lets it finish.
	if err := east.Up(); err != nil {
		t.Fatal(err)
	}
	if err := east.SetFaults([]sim.FaultRule{{Method: "DemoteVolume", Code: "INVALID_ARGUMENT", Count: 1, Message: "injected"}}); err != nil {
		t.Fatal(err)
	}
	declined(t, c, "reprotect", shop)
	c.ok(&started, "reprotect", shop, "--yes")
	c.eventually("a paused demotion", "shop", func(s statusOut) bool { return stepIn(s, "paused") })
	// The text status of the paused action says it is paused (as its
	// table and the dashboard do), shows its steps, the paused one with
	// its error, and what to run next.
	code, out, errs = c.run("status", "shop")
	for _, want := range []string{"last action: Reprotect, paused", "STATE", "TRIES", "done     stop web on east",
		"paused   demote db on east", `paused for the operator: step "demote db on east"`, "injected", "next: drctl resolve shop --retry",
		// The plan is still unprotected, and the reprotect that ends it
		// runs: status says so, not to start one.
		"protection: running from west, UNPROTECTED", "; a reprotect runs (drctl watch drover-action-shop)\n"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("status of a paused reprotect: exit %d, lacks %q\n%s%s", code, want, out, errs)
		}
	}
	if strings.Contains(out, "next: drctl reprotect") {
		t.Errorf("status of a running reprotect says to start one:\n%s", out)
	}
	c.want(2, `refused: no step "nothing" in this action`, "resolve", "shop", "--skip", "--step", "nothing", "--yes")
	// Followed through a pipe, the action is logged to its end, also
	// after the resolve.
	piped := make(chan string, 1)
	go func() {
		code, out, errs := c.run("watch", "shop")
		piped <- fmt.Sprintf("exit %d\n%s%s", code, out, errs)
	}()
	time.Sleep(time.Second) // the watch's first look: the paused step
	var resolved map[string]string
	c.ok(&resolved, "resolve", "shop", "--retry")
	if resolved["step"] != "demote/east/db" { // the step's ID
		t.Fatalf("resolve: %v", resolved)
	}
	c.ok(&o, "watch", "shop")
	if o.Status != "completed" {
		t.Fatalf("reprotect: %+v", o)
	}
	log := <-piped
	paused := strings.Index(log, "paused    demote db on east")
	done := strings.Index(log, "done      demote db on east")
	resync := strings.LastIndex(log, "done      resync db on east")
	if paused < 0 || done < paused || resync < done {
		t.Errorf("the piped watch did not log the reprotect after the resolve:\n%s", log)
	}

	// Failback moves everything home with nothing lost.
	declined(t, c, "failback", shop, "--to", "east")
	c.ok(&o, "failback", shop, "--to", "east", "--yes", "--wait")
	if o.Status != "completed" {
		t.Fatalf("failback: %+v", o)
	}
	c.want(2, "the last action is a Failback (completed", "reprotect", shop, "--yes")
	var st statusOut
	c.ok(&st, "status", shop)
	if st.Action == nil || st.Action.Type != "Failback" || st.Action.Status != "completed" {
		t.Fatalf("status after failback: %+v", st)
	}
	code, out, _ = c.run("status", "shop")
	if code != 0 || !strings.Contains(out, "last action: Failback, completed") || !strings.Contains(out, "protection: running") {
		t.Fatalf("status text: exit %d\n%s", code, out)
	}
	// list reads Temporal's visibility, which learns of a run's end (and
	// of the Protect run the failback's retarget continued as new) a
	// moment after the run itself: ask until it has.
	var list []struct{ Type, Status, By string }
	var types []string
	wanted := []string{"Failover canceled", "Failover completed", "Reprotect completed", "Failback completed", "Drill completed", "Protect running"}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		list, types = nil, nil
		c.ok(&list, "list")
		for _, x := range list {
			types = append(types, x.Type+" "+x.Status)
		}
		if !slices.ContainsFunc(wanted, func(w string) bool { return !slices.Contains(types, w) }) || time.Now().After(deadline) {
			break
		}
	}
	for _, x := range list {
		if x.Type != "GroupBatch" && x.Type != "PlanRecorder" && x.Type != "Verify" && x.By == "" {
			t.Errorf("list does not say who started the %s", x.Type)
		}
	}
	for _, want := range wanted {
		if !slices.Contains(types, want) {
			t.Errorf("list lacks %q: %v", want, types)
		}
	}
	var plansNow []struct{ Plan, Type, Status string }
	c.ok(&plansNow, "status")
	if len(plansNow) != 2 || plansNow[0].Plan != "shop" {
		t.Fatalf("status of all plans: %+v", plansNow)
	}
	// The worker's metrics show Drover's own after these actions, the
	// protection's gauges while it runs (they leave when it stops).
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// Under the names deploy/prometheus/drover-rules.yaml alerts on.
	for _, want := range []string{"drover_action_duration_seconds_count{", `action="failback"`, "drover_step_failures_total{", "drover_replication_lag_seconds{", "drover_out_of_rpo{", "drover_unprotected{"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Protected again after the failover's unprotected spell: 0.
	if m := regexp.MustCompile(`\ndrover_unprotected\{[^}]*plan="shop"[^}]*\} (\S+)\n`).FindSubmatch(body); m == nil || string(m[1]) != "0" {
		t.Errorf("drover_unprotected of the reprotected plan: %q, want 0", m)
	}
	declined(t, c, "protect", "stop", "shop", "--disable")
	c.ok(nil, "protect", "stop", "shop")
	c.want(2, "has ended; there is nothing to resolve", "resolve", "shop", "--retry", "--step", "nothing")

	// The write made on west during the outage is on east now, and the
	// simulator's checker finds no broken invariant.
	home, err := sim.NewClient(east.DataAddr(), simtest.NodeA, "east-node")
	if err != nil {
		t.Fatal(err)
	}
	defer home.Close()
	got, err := home.Read(t.Context(), "v1", 0)
	if err != nil || !strings.HasPrefix(string(got), "written during the outage") {
		t.Fatalf("east after the failback: %q %v", got, err)
	}
	if r := sim.Check(east.Snapshot(), west.Snapshot()); !r.OK() {
		t.Fatalf("invariants: %v", r)
	}

}

// recordOut is the record in drctl status -o json.
type recordOut struct {
	Record *struct {
		Primary string
		Fences  []struct {
			Site, Via, By string
			CIDRs         []string
		}
		LastAction *struct{ Action, Outcome, From, To string }
	}
	Verify *struct{ Checked, Drift []string }
}

// TestRecordOutlivesHistories: a plan's record keeps what a failover
// fenced after the failover's history is gone (as after the namespace's
// retention); reprotect is aimed by it and lifts exactly that fence;
// status --verify names drift between the record and storage; and
// without a record, a failover's result or the plan's CIDRs, reprotect
// refuses with exit 2 instead of reporting an unfence it did not make.
func TestRecordOutlivesHistories(t *testing.T) {
	bins := bintest.Build(t, "drctl", "worker")
	srv := devserver.Start(t, nil)
	east, west := eastWest(t)
	dir := t.TempDir()
	plan := func(name, eastFence string) string {
		return onePlan(t, filepath.Join(dir, name+".yaml"), name, east, west, eastFence, "")
	}
	// east lists no fence CIDRs: the failover fences the clients
	// protection saw, and only the record knows them afterwards.
	shop := plan("shop", "{}")
	c := cli{t: t, bin: filepath.Join(bins, "drctl"), addr: srv.Address()}
	worker := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + srv.Address()}, filepath.Join(bins, "worker"), "--metrics", "", "--allow-unsigned-plans")
	simtest.Eventually(t, 30*time.Second, "the worker to start", func() bool { return strings.Contains(worker.Log.String(), "worker started") })

	// A client of east writes, so that east's storage reports it.
	writer, err := sim.NewClient(east.DataAddr(), simtest.NodeA, "east-node")
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	if _, err := writer.Write(t.Context(), "v1", 0, []byte("before the outage")); err != nil {
		t.Fatal(err)
	}
	var o outcome
	c.ok(&o, "protect", "start", shop, "--primary", "east", "--interval", "100ms")
	c.eventually("protection to record a sync", "shop", func(s statusOut) bool {
		return s.Protection != nil && len(s.Protection.Groups) == 1 && !s.Protection.Groups["db"].LastSync.IsZero()
	})
	simtest.Eventually(t, time.Minute, "protection to record east's clients", func() bool {
		ps, err := workflows.ReadProtect(t.Context(), srv.Client, "shop")
		return err == nil && slices.Contains(ps.Clients["east"], simtest.NodeA+"/32")
	})
	east.Down()
	c.ok(&o, "failover", shop, "--to", "west", "--yes", "--wait")
	if o.Status != "completed" {
		t.Fatalf("failover: %+v", o)
	}
	// Every workflow carries the plan's search attributes: the failover,
	// protection and the record are found by them.
	for q, want := range map[string]string{
		"DroverPlan = 'shop' AND DroverAction = 'failover' AND DroverSite = 'west'": workflows.ActionID("shop"),
		"DroverPlan = 'shop' AND DroverAction = 'protect' AND DroverSite = 'east'":  workflows.ProtectID("shop"),
		"DroverPlan = 'shop' AND DroverAction = 'record'":                           workflows.RecordID("shop"),
	} {
		simtest.Eventually(t, 30*time.Second, q, func() bool {
			resp, err := srv.Client.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{Namespace: "default", Query: q})
			return err == nil && len(resp.GetExecutions()) > 0 && resp.GetExecutions()[0].GetExecution().GetWorkflowId() == want
		})
	}
	var listed []struct{ Plan, Type string }
	c.ok(&listed, "list", "--plan", "shop")
	if len(listed) != 2 || listed[0].Plan != "shop" {
		t.Fatalf("list --plan shop: %+v", listed)
	}
	c.ok(&listed, "list", "--plan", "other")
	if len(listed) != 0 {
		t.Fatalf("list --plan other: %+v", listed)
	}
	var st recordOut
	c.ok(&st, "status", shop)
	fenced := simtest.NodeA + "/32"
	if st.Record == nil || st.Record.Primary != "west" || len(st.Record.Fences) != 1 || st.Record.Fences[0].Site != "east" ||
		st.Record.Fences[0].Via != "west" || !slices.Equal(st.Record.Fences[0].CIDRs, []string{fenced}) ||
		!strings.HasPrefix(st.Record.Fences[0].By, "drover-action-shop run ") || st.Record.LastAction == nil ||
		st.Record.LastAction.Action != "failover" || st.Record.LastAction.Outcome != "completed" {
		t.Fatalf("record after the failover: %+v", st.Record)
	}
	code, out, errs := c.run("status", "shop")
	if code != 0 || !strings.Contains(out, "primary: west") || !strings.Contains(out, "fenced: east's clients "+fenced+" through west's storage") {
		t.Fatalf("status text: exit %d\n%s%s", code, out, errs)
	}

	// Storage agrees with the record; then someone lifts the fence by
	// hand, and --verify names it.
	if err := east.Up(); err != nil {
		t.Fatal(err)
	}
	code, out, errs = c.run("status", shop, "--verify")
	if code != 0 || !strings.Contains(out, "no drift") {
		t.Fatalf("verify after the failover: exit %d\n%s%s", code, out, errs)
	}
	conn, err := grpc.NewClient(west.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fc := fence.NewFenceControllerClient(conn)
	cidr := []*fence.CIDR{{Cidr: fenced}}
	if _, err := fc.UnfenceClusterNetwork(t.Context(), &fence.UnfenceClusterNetworkRequest{Cidrs: cidr}); err != nil {
		t.Fatal(err)
	}
	code, out, errs = c.run("-o", "json", "status", shop, "--verify")
	if err := json.Unmarshal([]byte(out), &st); code != 1 || err != nil || st.Verify == nil || len(st.Verify.Drift) != 1 ||
		!strings.Contains(st.Verify.Drift[0], "west does not list "+fenced) {
		t.Fatalf("verify after a hand unfence: exit %d %+v\n%s%s", code, st.Verify, out, errs)
	}
	if _, err := fc.FenceClusterNetwork(t.Context(), &fence.FenceClusterNetworkRequest{Cidrs: cidr}); err != nil {
		t.Fatal(err)
	}
	// Someone demotes the recorded primary's copy of db by hand: --verify
	// names west as not replicating from there.
	rc := replication.NewControllerClient(conn)
	db := &replication.ReplicationSource{Type: &replication.ReplicationSource_Volumegroup{
		Volumegroup: &replication.ReplicationSource_VolumeGroupSource{VolumeGroupId: "vg-1"}}}
	if _, err := rc.DemoteVolume(t.Context(), &replication.DemoteVolumeRequest{ReplicationSource: db, Force: true}); err != nil {
		t.Fatal(err)
	}
	code, out, errs = c.run("-o", "json", "status", shop, "--verify")
	if err := json.Unmarshal([]byte(out), &st); code != 1 || err != nil || st.Verify == nil || len(st.Verify.Drift) != 1 ||
		!strings.Contains(st.Verify.Drift[0], "the record names west as primary, but its storage says it does not replicate from there for 1 group(s): db") {
		t.Fatalf("verify after a hand demotion: exit %d %+v\n%s%s", code, st.Verify, out, errs)
	}
	// east, never demoted since the failover, holds the only primary copy
	// of db now: the drift says so, and the fix.
	if want := "The storage of east reports every copy asked (1) as primary: the record is wrong, the storage is the truth. Fix: drctl reprotect PLAN --from west, PLAN the file of plan shop"; !strings.Contains(st.Verify.Drift[0], want) {
		t.Fatalf("verify after a hand demotion: %q, want it to say %q", st.Verify.Drift[0], want)
	}
	if _, err := rc.PromoteVolume(t.Context(), &replication.PromoteVolumeRequest{ReplicationSource: db, Force: true}); err != nil {
		t.Fatal(err)
	}
	// West's storage cannot be reached: nothing of it is verified, which
	// is no drift; status says so and exits 3.
	west.Down()
	code, out, errs = c.run("status", shop, "--verify")
	if code != 3 || strings.Contains(out, "DRIFT") || !strings.Contains(out, "NOT VERIFIED: the storage of west did not list its fences") {
		t.Fatalf("verify with west's storage down: exit %d, want 3, not verified and no drift\n%s%s", code, out, errs)
	}
	if err := west.Up(); err != nil {
		t.Fatal(err)
	}

	// The failover's history goes, as retention would take it.
	d, err := srv.Client.DescribeWorkflowExecution(t.Context(), workflows.ActionID("shop"), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client.WorkflowService().DeleteWorkflowExecution(t.Context(), &workflowservice.DeleteWorkflowExecutionRequest{
		Namespace: "default", WorkflowExecution: d.GetWorkflowExecutionInfo().GetExecution()}); err != nil {
		t.Fatal(err)
	}
	simtest.Eventually(t, time.Minute, "the failover's history to be gone", func() bool {
		_, err := srv.Client.DescribeWorkflowExecution(t.Context(), workflows.ActionID("shop"), "")
		return err != nil && strings.Contains(err.Error(), "not found")
	})
	// Reprotect, aimed by the record alone, lifts the recorded fence.
	c.ok(&o, "reprotect", shop, "--yes", "--wait")
	var rp struct {
		Steps []struct{ Name, State, Output string }
	}
	if o.Status != "completed" || json.Unmarshal(o.Result, &rp) != nil {
		t.Fatalf("reprotect: %+v", o)
	}
	unfenced := ""
	for _, s := range rp.Steps {
		if s.Name == "unfence east" {
			unfenced = s.Output
		}
	}
	if !strings.HasPrefix(unfenced, "unfenced "+fenced+" through west") {
		t.Fatalf("reprotect's unfence step said %q", unfenced)
	}
	if got := west.FencedCIDRs(); len(got) != 0 {
		t.Fatalf("west still fences %v after the reprotect", got)
	}
	c.ok(&st, "status", shop)
	if st.Record == nil || len(st.Record.Fences) != 0 || st.Record.LastAction.Action != "reprotect" {
		t.Fatalf("record after the reprotect: %+v", st.Record)
	}

	// Protection (polling every 100ms) has continued as new by now; list
	// shows its running run only.
	simtest.Eventually(t, time.Minute, "a Protect run that continued as new", func() bool {
		resp, err := srv.Client.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{Namespace: "default",
			Query: "WorkflowId = '" + workflows.ProtectID("shop") + "' AND ExecutionStatus = 'ContinuedAsNew'"})
		return err == nil && len(resp.GetExecutions()) > 0
	})
	// Visibility learns of each continue-as-new's two halves (the old
	// run's end, the new run's start) a moment apart: ask until a list
	// falls between none.
	var rows []struct{ Type, Status string }
	protects := 0
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		rows, protects = nil, 0
		c.ok(&rows, "list", "--limit", "100")
		for _, r := range rows {
			if r.Status == "continued as new" {
				t.Fatalf("list shows a run that continued as new: %+v", rows)
			}
			if r.Type == "Protect" {
				protects++
			}
		}
		if protects == 1 || time.Now().After(deadline) {
			break
		}
	}
	if protects != 1 {
		t.Errorf("list shows %d Protect rows, want the running one: %+v", protects, rows)
	}

	// A plan with no fence CIDRs of its own, no record and no failover:
	// reprotect cannot know what is fenced, and says so.
	bare := plan("bare", "{}")
	code, _, errs = c.run("reprotect", bare, "--from", "east", "--yes")
	if code != 2 || !strings.Contains(errs, "cannot know which of east's clients are fenced") {
		t.Fatalf("reprotect without knowledge of the fence: exit %d\n%s", code, errs)
	}
	if _, err := srv.Client.DescribeWorkflowExecution(t.Context(), workflows.ActionID("bare"), ""); err == nil {
		t.Fatal("the refused reprotect started anyway")
	}
}
