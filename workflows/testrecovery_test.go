package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// testRecoveryFixture is the fixture with the members of west's storage
// groups listed and test hooks on west that log the copies they get.
func testRecoveryFixture(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	for i, g := range f.plan.VolumeGroups {
		ref := g.Sites["west"]
		switch ref.GroupID {
		case "vg-1":
			ref.Members = []string{"v1", "v2"}
		case "vg-2":
			ref.Members = []string{"v3"}
		}
		f.plan.VolumeGroups[i].Sites["west"] = ref
	}
	for _, w := range f.plan.Workloads {
		h := w.Sites["west"].Exec
		h.TestStart = fmt.Sprintf(`echo "%s test-start $DROVER_SITE $DROVER_WORKLOAD v1=$DROVER_COPY_V1 solo=$DROVER_COPY_SOLO" >> %s`, w.Name, f.hooks)
		h.TestStop = fmt.Sprintf(`echo "%s test-stop $DROVER_SITE" >> %s`, w.Name, f.hooks)
	}
	return f
}

// TestTestRecoveryLeavesProductionAlone: a test recovery at west, while
// east stays primary and replicates, snapshots west's replicas (a group
// snapshot per storage group, the loose volume on its own), starts the
// test hooks as NAME-test with each copy named in DROVER_COPY_<VOLUME>,
// and waits for the operator. A write to a copy meanwhile lands on the
// copy only. Once approved, it stops the test workloads and deletes every
// copy and snapshot. No fence, promotion, demotion or real hook ran; the
// replicas' roles and history are unchanged and hold the primary's data.
func TestTestRecoveryLeavesProductionAlone(t *testing.T) {
	f := testRecoveryFixture(t)
	before := f.west.Snapshot()
	env, calls := f.env(t)
	var during *sim.State
	var copyErr error
	env.RegisterDelayedCallback(func() {
		during = f.west.Snapshot()
		if len(during.Clones) > 0 {
			c, err := sim.NewClient(f.west.DataAddr(), simtest.NodeB, "west-node")
			if err == nil {
				_, copyErr = c.Write(context.Background(), during.Clones[0].ID, 0, []byte("written in the test"))
				c.Close()
			} else {
				copyErr = err
			}
		}
		send(t, env, workflows.UpdateApprove, workflows.Approval{Gate: workflows.GateEndTest, By: "tester"}, nil, nil)
	}, time.Minute)
	env.ExecuteWorkflow(workflows.TestRecovery, workflows.TestRecoveryInput{Plan: f.plan, At: "west"})
	mustOK(t, env.GetWorkflowError())
	var res workflows.TestRecoveryResult
	mustOK(t, env.GetWorkflowResult(&res))
	allDone(t, res.Progress)

	if during == nil || len(during.Clones) != 4 || len(during.Snapshots) != 4 || len(during.GroupSnapshots) != 2 {
		t.Fatalf("while the test ran west held %v", during)
	}
	mustOK(t, copyErr)
	if !res.Cleaned || len(res.Copies) != 4 || res.RTO["web"] < 0 || res.RTO["pg"] < 0 || len(res.RTO) != 2 {
		t.Fatalf("result: cleaned %v, copies %+v, RTO %v", res.Cleaned, res.Copies, res.RTO)
	}
	for _, c := range *calls {
		if slices.Contains([]string{"FenceClusterNetwork", "UnfenceClusterNetwork", "PromoteVolume", "DemoteVolume", "ResyncVolume", "DisableVolumeReplication"}, c.name) {
			t.Fatalf("a test recovery called %s: %v", c, *calls)
		}
	}
	after := f.west.Snapshot()
	if n := len(after.Snapshots) + len(after.GroupSnapshots) + len(after.Clones); n != 0 {
		t.Fatalf("%d copies or snapshots left on west", n)
	}
	if d := sim.ReplicasUnchanged(before, after, false); len(d) != 0 {
		t.Fatalf("the replicas changed: %v", d)
	}
	if r := sim.Check(f.east.Snapshot(), after); !r.OK() {
		t.Fatalf("invariants: %s", r)
	}
	if u := after.Unit("vg/vg-1"); string(u.Blocks["v1"][0].Data) != "order 1" {
		t.Fatalf("the replica holds %q: the test's write reached it", u.Blocks["v1"][0].Data)
	}
	log, err := os.ReadFile(f.hooks)
	mustOK(t, err)
	lines := string(log)
	for _, want := range []string{"pg test-start west pg-test v1=clone-", "web test-start west web-test v1=clone-", "pg test-stop west", "web test-stop west"} {
		if !strings.Contains(lines, want) {
			t.Errorf("hooks log lacks %q:\n%s", want, lines)
		}
	}
	if strings.Contains(lines, "solo=\n") || strings.Contains(lines, " start west") || strings.Contains(lines, " stop west") {
		t.Errorf("a copy was not named, or a real hook ran:\n%s", lines)
	}
	if strings.Index(lines, "pg test-start") > strings.Index(lines, "web test-start") {
		t.Errorf("web started before pg, against their priorities:\n%s", lines)
	}
}

// TestTestRecoveryCleansUpWhenCancelled: a test recovery cancelled while
// its workloads run on the copies still stops them and deletes every copy
// and snapshot.
func TestTestRecoveryCleansUpWhenCancelled(t *testing.T) {
	f := testRecoveryFixture(t)
	env, _ := f.env(t)
	env.RegisterDelayedCallback(func() { env.CancelWorkflow() }, time.Minute)
	env.ExecuteWorkflow(workflows.TestRecovery, workflows.TestRecoveryInput{Plan: f.plan, At: "west"})
	var ce *temporal.CanceledError
	if err := env.GetWorkflowError(); !errors.As(err, &ce) {
		t.Fatalf("error %v, want the cancellation", err)
	}
	after := f.west.Snapshot()
	if n := len(after.Snapshots) + len(after.GroupSnapshots) + len(after.Clones); n != 0 {
		t.Fatalf("%d copies or snapshots left on west after the cancellation", n)
	}
	log, err := os.ReadFile(f.hooks)
	mustOK(t, err)
	if !strings.Contains(string(log), "web test-stop west") || !strings.Contains(string(log), "pg test-stop west") {
		t.Fatalf("the test workloads were not stopped:\n%s", log)
	}
}

// TestTestRecoveryNeedsGroupMembers: a storage group whose members the
// plan does not list cannot be snapshotted; the test stops there, and
// what it made before is deleted.
func TestTestRecoveryNeedsGroupMembers(t *testing.T) {
	f := testRecoveryFixture(t)
	for i, g := range f.plan.VolumeGroups {
		if g.Name == "logs" {
			ref := g.Sites["west"]
			ref.Members = nil
			f.plan.VolumeGroups[i].Sites["west"] = ref
		}
	}
	f.plan.Policy.OnFailure = "abort"
	env, _ := f.env(t)
	env.ExecuteWorkflow(workflows.TestRecovery, workflows.TestRecoveryInput{Plan: f.plan, At: "west"})
	if err := env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), "list its volumes under members") {
		t.Fatalf("error %v, want the missing members named", err)
	}
	after := f.west.Snapshot()
	if n := len(after.Snapshots) + len(after.GroupSnapshots) + len(after.Clones); n != 0 {
		t.Fatalf("%d copies or snapshots left on west", n)
	}
}

// TestTestRecoveryFindsLostGroupSnapshots: west cuts the group snapshots
// but every answer is lost, so the test recovery never learns their ids;
// cancelled while it retries, its cleanup asks for each again by the name
// it recorded before the call, with the members, and deletes them: no
// snapshot is left. The answer to the test-copies query names them.
func TestTestRecoveryFindsLostGroupSnapshots(t *testing.T) {
	f := testRecoveryFixture(t)
	mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "CreateVolumeGroupSnapshot", Code: "UNAVAILABLE", Probability: 1, Lost: true}}))
	env, _ := f.env(t)
	var asked workflows.TestRecoveryResult
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(workflows.QueryTestCopies)
		mustOK(t, err)
		mustOK(t, v.Get(&asked))
		mustOK(t, f.west.SetFaults(nil))
		env.CancelWorkflow()
	}, time.Minute)
	env.ExecuteWorkflow(workflows.TestRecovery, workflows.TestRecoveryInput{Plan: f.plan, At: "west"})
	var ce *temporal.CanceledError
	if err := env.GetWorkflowError(); !errors.As(err, &ce) {
		t.Fatalf("error %v, want the cancellation", err)
	}
	if f.west.FaultCounts()["CreateVolumeGroupSnapshot:Unavailable:LOST"] == 0 {
		t.Fatal("no answer was lost: the test tests nothing")
	}
	named := 0
	for _, c := range asked.Copies {
		if c.SnapshotName != "" && c.Snapshot == "" {
			named++
		}
	}
	if named == 0 {
		t.Fatalf("the query named no snapshot asked for and unanswered: %+v", asked.Copies)
	}
	after := f.west.Snapshot()
	if n := len(after.Snapshots) + len(after.GroupSnapshots) + len(after.Clones); n != 0 {
		t.Fatalf("%d copies or snapshots left on west after the cancellation: %+v", n, after.GroupSnapshots)
	}
}
