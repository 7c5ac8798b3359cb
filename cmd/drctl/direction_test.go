package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestActionAgainstTheRecordedStateIsRefused: with east the healthy
// primary, a failover (or failback, or drill) to east, and a reprotect
// that would demote east, are refused before any side effect with exit
// 2 and a word on the state: by the storage's own answer when nothing
// is recorded, by the recorded state (the plan's protection) once it is.
// --override-state lets the operator go on; an action running meanwhile
// refuses a second one, whatever the record says. A plan edited after it
// was signed is refused (exit 2) before its action starts, and a drill
// whose checks fail exits 1.
func TestActionAgainstTheRecordedStateIsRefused(t *testing.T) {
	bins := bintest.Build(t, "drctl", "worker")
	srv := devserver.Start(t, nil)
	east, west := eastWest(t)
	dir := t.TempDir()
	plan := func(file, name, extra string) string {
		return onePlan(t, filepath.Join(dir, file), name, east, west, fmt.Sprintf("{cidrs: [%s/32]}", simtest.NodeA), extra)
	}
	shop := plan("shop.yaml", "shop", "")
	gated := plan("gated.yaml", "shop", "  approvals: [beforeFence]\n")
	// A second plan over the same storage, with nothing recorded.
	other := plan("other.yaml", "other", "")
	c := cli{t: t, bin: filepath.Join(bins, "drctl"), addr: srv.Address()}
	worker := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + srv.Address()}, filepath.Join(bins, "worker"), "--allow-unsigned-plans")
	simtest.Eventually(t, 30*time.Second, "the worker to start", func() bool { return strings.Contains(worker.Log.String(), "worker started") })
	untouched := func(when string) {
		t.Helper()
		if f := west.FencedCIDRs(); len(f) != 0 {
			t.Fatalf("%s: fenced %v", when, f)
		}
		if u := east.Snapshot().Unit("vg/vg-1"); u.Role != sim.RolePrimary {
			t.Fatalf("%s: east's vg-1 is %s", when, u.Role)
		}
	}

	// Replication on, east primary, recorded by the protection of shop.
	var started map[string]string
	c.ok(&started, "protect", "start", shop, "--primary", "east", "--interval", "200ms")
	c.eventually("protection from east", "shop", func(s statusOut) bool {
		return s.Protection != nil && s.Protection.Primary == "east" && !s.Protection.Groups["db"].LastSync.IsZero()
	})

	// Nothing is recorded for plan other, so only the storage can tell:
	// the failover asks it and ends before any side effect.
	c.want(2, "the storage of east reports its copies as primary already", "failover", other, "--to", "east", "--yes", "--wait")
	untouched("failover refused by the storage")

	// A signature that no longer fits its plan (the plan edited after
	// drctl plan sign) is refused before anything starts.
	key := filepath.Join(dir, "ops")
	c.ok(nil, "plan", "keygen", key)
	c.ok(nil, "plan", "sign", other, "--key", key+".key")
	b, err := os.ReadFile(other)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(b), simtest.NodeA+"/32", "10.9.0.0/16", 1)
	if edited == string(b) {
		t.Fatal("the plan has no fence CIDR to edit")
	}
	if err := os.WriteFile(other, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	lastRun := func() string {
		d, err := srv.Client.DescribeWorkflowExecution(context.Background(), workflows.ActionID("other"), "")
		if err != nil {
			t.Fatal(err)
		}
		return d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	}
	before := lastRun() // the failover the storage refused, above
	c.want(2, "other.yaml.sig does not fit plan", "failover", other, "--to", "west", "--yes")
	if lastRun() != before {
		t.Fatal("a failover with a stale signature started its workflow")
	}
	untouched("a failover with a stale signature")

	// The recorded state: protection replicates from east.
	const recorded = `plan "shop": east is already the primary (the plan's record, updated `
	c.want(2, recorded, "failover", shop, "--to", "east", "--yes")
	c.want(2, recorded, "failback", shop, "--to", "east", "--yes")
	c.want(2, recorded, "drill", shop, "--to", "east")
	// A reprotect of the healthy primary would demote it with force and
	// resync it from west, throwing away its writes.
	c.want(2, `plan "shop": east is the primary (the plan's record, updated `, "reprotect", shop, "--from", "east", "--yes")
	untouched("actions refused by the recorded state")

	// The operator who means it: the failover starts (and waits at its
	// gate before the fence; cancelled here).
	code, out, errs := c.run("failover", gated, "--to", "east", "--yes", "--override-state")
	if code != 0 || !strings.Contains(errs, "going on because of --override-state") {
		t.Fatalf("failover with --override-state: exit %d\n%s\n%s", code, out, errs)
	}
	c.eventually("the gate", "shop", func(s statusOut) bool { return stepIn(s, "waiting for approval") })
	// While it runs, a second action is refused as such, not by the
	// record, which hears of the running action only within a second.
	c.want(1, `plan "shop" already has a DR action running: Failover`, "failback", shop, "--to", "east", "--yes")
	c.ok(nil, "cancel", "shop", "--yes")
	untouched("an overridden failover cancelled at its gate")

	// A drill whose checks fail exits 1 and names every failed check, so
	// that a drill run from a schedule does not pass silently.
	if err := west.SetFaults([]sim.FaultRule{{Method: "Probe", Code: "INVALID_ARGUMENT", Count: 1000, Message: "plugin misconfigured"}}); err != nil {
		t.Fatal(err)
	}
	simtest.Eventually(t, 30*time.Second, "a drill once the cancelled failover has ended", func() bool {
		code, out, errs = c.run("drill", shop, "--to", "west", "--wait")
		return !strings.Contains(errs, "already has a DR action running")
	})
	if code != 1 || !strings.Contains(out, "check(s) failed:") || !strings.Contains(out, "storage ready on west: ") || !strings.Contains(out, "plugin misconfigured") {
		t.Fatalf("drill to a site whose plugin refuses its Probe: exit %d, want 1 and the failed checks named\n%s\n%s", code, out, errs)
	}
}

// onePlan writes a plan of one group, db, over the sites east and west to
// path: eastFence is east's fence in YAML, extra goes under policy.
func onePlan(t *testing.T, path, name string, east, west *simtest.Site, eastFence, extra string) string {
	t.Helper()
	body := fmt.Sprintf(`apiVersion: drover.dev/v1alpha1
kind: FailoverPlan
metadata: {name: %s}
sites:
  - name: east
    storage: {endpoint: %q}
    fence: %s
    orchestrator: {exec: {}}
  - name: west
    storage: {endpoint: %q}
    fence: {cidrs: [%s/32]}
    orchestrator: {exec: {}}
volumeGroups:
  - name: db
    sites: {east: {groupID: vg-1}, west: {groupID: vg-1}}
policy:
  retry: {initialInterval: 50ms, maximumInterval: 200ms}
%s`, name, east.Endpoint(), eastFence, west.Endpoint(), simtest.NodeB, extra)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
