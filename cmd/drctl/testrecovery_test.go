package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// testRecoveryStack is the site stack with plan shop protected from east:
// group data is storage group vg-1 with member v1, and west's workload
// app has test hooks that log to the file returned.
func testRecoveryStack(t *testing.T) (*siteStack, string, string) {
	st := newSiteStack(t)
	hooks := filepath.Join(t.TempDir(), "hooks.log")
	shop := st.plan(t, "", "shop", "west", 0, "{groupID: vg-1, members: [v1]}", simtest.NodeA+"/32", fmt.Sprintf(`workloads:
  - name: app
    volumeGroups: [data]
    sites:
      east: {exec: {start: "true", stop: "true"}}
      west: {exec: {start: "echo real >> %[1]s", stop: "true", testStart: "echo test $DROVER_WORKLOAD $DROVER_COPY_V1 >> %[1]s", testStop: "echo test-stop >> %[1]s"}}
`, hooks))
	st.protect(shop)
	return st, shop, hooks
}

// leftOn counts the snapshots, group snapshots and copies on a site.
func leftOn(s *simtest.Site) int {
	st := s.Snapshot()
	return len(st.Snapshots) + len(st.GroupSnapshots) + len(st.Clones)
}

// TestTestRecoveryCommand: drctl test-recovery starts the plan's test
// recovery at west while east replicates to it; the test workload runs on
// the copy and waits; drctl approve ends it; drctl watch shows it
// completed with everything deleted. West's replicas are as they were,
// and the real start hook never ran.
func TestTestRecoveryCommand(t *testing.T) {
	st, shop, hooks := testRecoveryStack(t)
	c := st.c
	before := st.west.Snapshot()

	c.ok(nil, "test-recovery", shop, "--at", "west")
	id := workflows.TestRecoveryID("shop")
	c.want(1, "has a test recovery running already", "test-recovery", shop, "--at", "west")
	simtest.Eventually(t, time.Minute, "the test workload to run", func() bool {
		code, out, _ := c.run("-o", "json", "status", id)
		var s statusOut
		return code == 0 && json.Unmarshal([]byte(out), &s) == nil && stepIn(s, "waiting for approval")
	})
	if n := len(st.west.Snapshot().Clones); n != 1 {
		t.Fatalf("%d copies on west while the test runs, want 1", n)
	}
	c.ok(nil, "approve", id, "--yes")
	var o outcome
	c.ok(&o, "watch", id)
	var res workflows.TestRecoveryResult
	if err := json.Unmarshal(o.Result, &res); err != nil || o.Status != "completed" || !res.Cleaned || len(res.Copies) != 1 || res.RTO["app"] <= 0 {
		t.Fatalf("test recovery: %v %+v %+v", err, o, res)
	}
	after := st.west.Snapshot()
	if n := len(after.Snapshots) + len(after.GroupSnapshots) + len(after.Clones); n != 0 {
		t.Fatalf("%d copies or snapshots left", n)
	}
	if d := sim.ReplicasUnchanged(before, after, false); len(d) != 0 {
		t.Fatalf("the replicas changed: %v", d)
	}
	log, err := os.ReadFile(hooks)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(log); !strings.Contains(s, "test app-test clone-") || !strings.Contains(s, "test-stop") || strings.Contains(s, "real") {
		t.Fatalf("hooks log:\n%s", s)
	}
	// The text summary.
	code, out, errs := c.run("watch", id)
	if code != 0 || !strings.Contains(out, "1 volume(s) copied, every copy and snapshot deleted") || !strings.Contains(out, "app healthy on its copies") {
		t.Fatalf("watch: exit %d\n%s%s", code, out, errs)
	}
}

// TestFailoverIsNotHeldUpByATest: a test recovery runs under an id of its
// own, so that a real failover started while a test runs at the same
// site goes ahead at once and completes; the test, ended afterwards,
// still deletes every copy and snapshot. Each records who started it:
// DROVER_BY when set, else user@host.
func TestFailoverIsNotHeldUpByATest(t *testing.T) {
	st, shop, _ := testRecoveryStack(t)
	c := st.c
	id := workflows.TestRecoveryID("shop")
	c.ok(nil, "test-recovery", shop, "--at", "west")
	simtest.Eventually(t, time.Minute, "the test workload to run", func() bool {
		code, out, _ := c.run("-o", "json", "status", id)
		var s statusOut
		return code == 0 && json.Unmarshal([]byte(out), &s) == nil && stepIn(s, "waiting for approval")
	})

	st.east.Down()
	var o outcome
	t.Setenv("DROVER_BY", "oncall@example")
	c.ok(&o, "failover", shop, "--to", "west", "--yes", "--wait")
	var fr workflows.FailoverResult
	if err := json.Unmarshal(o.Result, &fr); err != nil || o.Status != workflows.StateCompleted || o.WorkflowID != workflows.ActionID("shop") {
		t.Fatalf("the failover during a test: %v %+v", err, o)
	}
	// Who acted: DROVER_BY when set, else user@host (the test's start).
	if fr.By != "oncall@example" {
		t.Errorf("the failover records %q as who started it, want DROVER_BY's oncall@example", fr.By)
	}
	if u := st.west.Snapshot().Unit("vg/vg-1"); u.Role != sim.RolePrimary {
		t.Fatalf("west's vg-1 is %s after the failover", u.Role)
	}

	c.ok(nil, "approve", id, "--yes")
	var end outcome
	c.ok(&end, "watch", id)
	var res workflows.TestRecoveryResult
	if err := json.Unmarshal(end.Result, &res); err != nil || end.Status != workflows.StateCompleted || !res.Cleaned {
		t.Fatalf("the test after the failover: %v %+v %+v", err, end, res)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if want := u.Username + "@" + host; res.By != want {
		t.Errorf("the test recovery records %q as who started it, want %s", res.By, want)
	}
	if n := leftOn(st.west); n != 0 {
		t.Fatalf("%d copies or snapshots left on west", n)
	}
}

// TestTestRecoveryCleanupFindsLeftovers: a test recovery whose workflow
// is terminated while its workload runs on the copy leaves the copy, the
// snapshots and the running test workload behind; drctl test-recovery
// --cleanup finds that run, stops its workload and deletes all of it,
// and a second --cleanup finds nothing more to do. West's replicas are
// untouched throughout.
func TestTestRecoveryCleanupFindsLeftovers(t *testing.T) {
	st, shop, hooks := testRecoveryStack(t)
	c := st.c
	before := st.west.Snapshot()
	id := workflows.TestRecoveryID("shop")
	if code, out, errs := c.run("test-recovery", shop, "--cleanup"); code != 0 || !strings.Contains(out, "left anything behind (0 run(s) looked at)") {
		t.Fatalf("cleanup with nothing left: exit %d\n%s%s", code, out, errs)
	}
	c.want(2, "takes no --at", "test-recovery", shop, "--cleanup", "--at", "west")

	c.ok(nil, "test-recovery", shop, "--at", "west")
	simtest.Eventually(t, time.Minute, "the test workload to run", func() bool {
		code, out, _ := c.run("-o", "json", "status", id)
		var s statusOut
		return code == 0 && json.Unmarshal([]byte(out), &s) == nil && stepIn(s, "waiting for approval")
	})
	c.want(1, "is running", "test-recovery", shop, "--cleanup")
	if err := st.srv.Client.TerminateWorkflow(t.Context(), id, "", "the test's workflow is lost"); err != nil {
		t.Fatal(err)
	}
	if n := leftOn(st.west); n != 3 {
		t.Fatalf("%d snapshots and copies on west after the termination, want 3 (group snapshot, snapshot, copy)", n)
	}

	code, out, errs := c.run("test-recovery", shop, "--cleanup")
	if code != 0 || !strings.Contains(out, "(terminated) left 1 copy record(s) at west") || !strings.Contains(out, "every copy and snapshot deleted") {
		t.Fatalf("cleanup: exit %d\n%s%s", code, out, errs)
	}
	if n := leftOn(st.west); n != 0 {
		t.Fatalf("%d snapshots and copies left on west after the cleanup", n)
	}
	log, err := os.ReadFile(hooks)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "test-stop") {
		t.Fatalf("the test workload was not stopped:\n%s", log)
	}
	if code, out, errs := c.run("test-recovery", shop, "--cleanup"); code != 0 || !strings.Contains(out, "left anything behind (2 run(s) looked at)") {
		t.Fatalf("cleanup with nothing left: exit %d\n%s%s", code, out, errs)
	}
	if d := sim.ReplicasUnchanged(before, st.west.Snapshot(), false); len(d) != 0 {
		t.Fatalf("the replicas changed: %v", d)
	}
}

// TestTestRecoveryCancelFindsLostCopies: west's storage makes the copy but
// every answer to CreateVolume is lost, so the test recovery never learns
// the copy's id; cancelled there, its cleanup asks for the copy again by
// the name it recorded before the call, and deletes it with the
// snapshots. Nothing is left on west.
func TestTestRecoveryCancelFindsLostCopies(t *testing.T) {
	st, shop, _ := testRecoveryStack(t)
	c := st.c
	id := workflows.TestRecoveryID("shop")
	if err := st.west.SetFaults([]sim.FaultRule{{Method: "CreateVolume", Code: "UNAVAILABLE", Probability: 1, Lost: true}}); err != nil {
		t.Fatal(err)
	}
	c.ok(nil, "test-recovery", shop, "--at", "west")
	simtest.Eventually(t, time.Minute, "the copy to be made, its answer lost", func() bool {
		return len(st.west.Snapshot().Clones) == 1 && st.west.FaultCounts()["CreateVolume:Unavailable:LOST"] >= 2
	})
	c.ok(nil, "cancel", id, "--yes")
	simtest.Eventually(t, time.Minute, "the cleanup to run", func() bool {
		code, out, _ := c.run("-o", "json", "status", id)
		var s statusOut
		return code == 0 && json.Unmarshal([]byte(out), &s) == nil && s.Action != nil && s.Action.Progress != nil &&
			slices.ContainsFunc(s.Action.Progress.Steps, func(x step) bool { return strings.HasPrefix(x.ID, "cleanup/") && x.State != "pending" })
	})
	// The storage answers again.
	if err := st.west.SetFaults(nil); err != nil {
		t.Fatal(err)
	}
	var o outcome
	code, out, errs := c.run("-o", "json", "watch", id)
	if code != 1 || json.Unmarshal([]byte(out), &o) != nil || o.Status != "canceled" || o.Progress == nil {
		t.Fatalf("watch: exit %d\n%s%s", code, out, errs)
	}
	if n := leftOn(st.west); n != 0 {
		t.Fatalf("%d snapshots and copies left on west: %+v", n, st.west.Snapshot().Clones)
	}
	i := slices.IndexFunc(o.Progress.Steps, func(x *workflows.Step) bool { return x.Kind() == workflows.KindCleanup })
	if i < 0 || !strings.Contains(o.Progress.Steps[i].Output, "1 asked for again by name") {
		t.Fatalf("cleanup step: %+v", o.Progress)
	}
}
