package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/nomad/api"
	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/nomadfake"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
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
	addTestHooks(f)
	return f
}

// addTestHooks gives the workloads test hooks on west that log the
// copies they get.
func addTestHooks(f *fixture) {
	for _, w := range f.plan.Workloads {
		h := w.Sites["west"].Exec
		h.TestStart = fmt.Sprintf(`echo "%s test-start $DROVER_SITE $DROVER_WORKLOAD v1=$DROVER_COPY_V1 solo=$DROVER_COPY_SOLO" >> %s`, w.Name, f.hooks)
		h.TestStop = fmt.Sprintf(`echo "%s test-stop $DROVER_SITE" >> %s`, w.Name, f.hooks)
	}
}

// TestTestRecoveryLeavesProductionAlone: a test recovery at west, while
// east stays primary and replicates, snapshots west's replicas (a group
// snapshot per storage group, the loose volume on its own), starts the
// test hooks as NAME-test with each copy named in DROVER_COPY_<VOLUME>,
// and waits for the operator. A write to a copy meanwhile lands on the
// copy only. Once approved, it stops the test workloads and deletes every
// copy and snapshot. No fence, promotion, demotion or real hook ran; the
// replicas' roles and history are unchanged and hold the primary's data;
// and nothing went to the plan's record, neither the test's start and end
// nor any change, so the record still says what the DR actions left.
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
	if res.Progress.State != workflows.StateCompleted {
		t.Fatalf("a test recovery that ended well is %s", res.Progress.State)
	}
	// Four copies, two group snapshots (their members' snapshots go with
	// them) and the loose volume's snapshot: each deletion counted once.
	if s := stepOf(t, res.Progress, "cleanup/west"); s.Output != "7 copies and snapshots deleted" {
		t.Fatalf("the cleanup says %q", s.Output)
	}

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
	// An action's changes reach the record by the worker's signal
	// (SendRecordChange), which has no client here, or by the workflow's
	// own: either way the fixture keeps them.
	f.recordMu.Lock()
	sent := slices.Clone(f.record)
	f.recordMu.Unlock()
	if len(sent) != 0 {
		t.Fatalf("a test recovery sent the plan's record %d change(s): %+v", len(sent), sent)
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

// TestTestRecoveryEndsAtItsTimeLimit: a test recovery nobody ends runs
// its workloads on the copies for policy.testTimeLimit (an hour by
// default), then stops them and deletes every copy and snapshot, as an
// approval would: test copies do not run on for ever.
func TestTestRecoveryEndsAtItsTimeLimit(t *testing.T) {
	for _, c := range []struct {
		name  string
		limit time.Duration
		says  string
	}{{"default", 0, "time limit of 1h0m0s reached: cleaning up"}, {"plan's", 3 * time.Hour, "time limit of 3h0m0s reached: cleaning up"}} {
		t.Run(c.name, func(t *testing.T) {
			f := testRecoveryFixture(t)
			f.plan.Policy.TestTimeLimit = plans.Duration(c.limit)
			env, _ := f.env(t)
			var during *sim.State
			want := c.limit
			if want == 0 {
				want = time.Hour
			}
			env.RegisterDelayedCallback(func() { during = f.west.Snapshot() }, want-time.Minute)
			start := env.Now()
			env.ExecuteWorkflow(workflows.TestRecovery, workflows.TestRecoveryInput{Plan: f.plan, At: "west"})
			mustOK(t, env.GetWorkflowError())
			var res workflows.TestRecoveryResult
			mustOK(t, env.GetWorkflowResult(&res))
			if took := env.Now().Sub(start); took < want || took > want+time.Hour {
				t.Fatalf("the test ended after %v, want its limit of %v", took, want)
			}
			if s := stepOf(t, res.Progress, "approve/"+workflows.GateEndTest); s.State != workflows.StateDone || s.Output != c.says {
				t.Fatalf("the end of the test is %s, %q; want done, %q", s.State, s.Output, c.says)
			}
			if during == nil || len(during.Clones) != 4 {
				t.Fatalf("a minute before the limit west held %v, want the test's four copies", during)
			}
			after := f.west.Snapshot()
			if n := len(after.Snapshots) + len(after.GroupSnapshots) + len(after.Clones); !res.Cleaned || n != 0 {
				t.Fatalf("cleaned %v, %d copies or snapshots left on west", res.Cleaned, n)
			}
		})
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
	var asked workflows.TestRecoveryResult
	var made *sim.State
	ended := cancelWithAnswersLost(t, f, "CreateVolumeGroupSnapshot", func(env *testsuite.TestWorkflowEnvironment) {
		v, err := env.QueryWorkflow(workflows.QueryTestCopies)
		mustOK(t, err)
		mustOK(t, v.Get(&asked))
		made = f.west.Snapshot()
	})
	// The first group's snapshot (two members, one group snapshot) was
	// made and its answer lost; the test never went further.
	if s := stepOf(t, ended.Progress, "cleanup/west"); s.Output != "1 copies and snapshots deleted (2 asked for again by name: their create had no answer)" {
		t.Fatalf("the cleanup says %q", s.Output)
	}
	// Each member's copy learned its own volume's snapshot.
	found := 0
	for _, c := range ended.Copies {
		if c.Snapshot == "" {
			continue
		}
		found++
		if i := slices.IndexFunc(made.Snapshots, func(sn sim.SnapshotState) bool { return sn.ID == c.Snapshot }); i < 0 || made.Snapshots[i].Volume != c.Volume {
			t.Fatalf("copy of %s learned snapshot %s: %+v", c.Volume, c.Snapshot, made.Snapshots)
		}
	}
	if found != 2 {
		t.Fatalf("%d copies learned their snapshot, want 2: %+v", found, ended.Copies)
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
}

// cancelWithAnswersLost runs a test recovery at west whose calls of
// method lose their answers, and cancels it after a minute, once before
// has run and the fault is cleared. It checks that answers were lost,
// that the cancellation ended it and that nothing is left on west, and
// returns what the test-copies query answers at the end.
func cancelWithAnswersLost(t *testing.T, f *fixture, method string, before func(env *testsuite.TestWorkflowEnvironment)) workflows.TestRecoveryResult {
	t.Helper()
	mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: method, Code: "UNAVAILABLE", Probability: 1, Lost: true}}))
	env, _ := f.env(t)
	env.RegisterDelayedCallback(func() {
		if before != nil {
			before(env)
		}
		mustOK(t, f.west.SetFaults(nil))
		env.CancelWorkflow()
	}, time.Minute)
	env.ExecuteWorkflow(workflows.TestRecovery, workflows.TestRecoveryInput{Plan: f.plan, At: "west"})
	var ce *temporal.CanceledError
	if err := env.GetWorkflowError(); !errors.As(err, &ce) {
		t.Fatalf("error %v, want the cancellation", err)
	}
	if f.west.FaultCounts()[method+":Unavailable:LOST"] == 0 {
		t.Fatalf("no answer was lost: the test tests nothing (%v)", f.west.FaultCounts())
	}
	after := f.west.Snapshot()
	if n := len(after.Snapshots) + len(after.GroupSnapshots) + len(after.Clones); n != 0 {
		t.Fatalf("%d copies or snapshots left on west after the cancellation: %+v", n, after)
	}
	v, err := env.QueryWorkflow(workflows.QueryTestCopies)
	mustOK(t, err)
	var ended workflows.TestRecoveryResult
	mustOK(t, v.Get(&ended))
	return ended
}

// TestTestRecoveryFindsLostSnapshotsAndCopies: as above for the loose
// volume's snapshot, cut after the groups', and for a copy: the answers to
// its creates are lost, the test recovery is cancelled while it retries,
// and the cleanup asks for the one it named again, by that name, and
// deletes it; the copies it never asked for are not made.
func TestTestRecoveryFindsLostSnapshotsAndCopies(t *testing.T) {
	for _, method := range []string{"CreateSnapshot", "CreateVolume"} {
		t.Run(method, func(t *testing.T) {
			ended := cancelWithAnswersLost(t, testRecoveryFixture(t), method, nil)
			// CreateSnapshot: the two group snapshots and the loose volume's
			// snapshot, asked for again; CreateVolume: the first copy,
			// asked for again, and the three snapshots.
			want := map[string]string{"CreateSnapshot": "3", "CreateVolume": "4"}[method] + " copies and snapshots deleted (1 asked for again by name: their create had no answer)"
			if s := stepOf(t, ended.Progress, "cleanup/west"); s.Output != want {
				t.Fatalf("the cleanup says %q", s.Output)
			}
		})
	}
}

// TestTestRecoveryOnNomad: at a Nomad site, the volumes Nomad knows are
// copied through Nomad's CSI API and the jobs are copied too: pg's job,
// which mounts Nomad volume pg-data (storage volume v1, a member of group
// db), and web's, which mounts solo-vol (the loose volume solo), run as
// pg-test and web-test in the test namespace on volume copies Nomad
// registered there; the group is still cut with one group snapshot, the
// loose volume through Nomad's snapshot API. Once approved, the copies'
// jobs are purged, the copies deleted through Nomad and the snapshots
// deleted: nothing is left on west's storage or in its Nomad, and the
// replicas are as they were.
func TestTestRecoveryOnNomad(t *testing.T) {
	f := testRecoveryFixture(t)
	_, west := f.nomadSites(t, "/bin/sleep")
	west.AddPlugin("sim", f.west.Endpoint())
	west.AddVolume(api.CSIVolumeListStub{ID: "pg-data", Name: "pg-data", ExternalID: "v1", PluginID: "sim", Schedulable: true})
	west.AddVolume(api.CSIVolumeListStub{ID: "solo-vol", Name: "solo-vol", ExternalID: "solo", PluginID: "sim", Schedulable: true})
	f.plan.Sites[1].Orchestrator.Nomad.TestNamespace = "drtest"
	for i := range f.plan.Workloads {
		w := &f.plan.Workloads[i]
		j := nomadfake.ServiceJob(w.Name, 1, "/bin/sleep")
		src := map[string]string{"pg": "pg-data", "web": "solo-vol"}[w.Name]
		j.TaskGroups[0].Volumes = map[string]*api.VolumeRequest{"data": {Name: "data", Type: "csi", Source: src, AccessMode: "single-node-writer", AttachmentMode: "file-system"}}
		w.Sites["west"].Nomad.JobFile = nomadfake.WriteJobFile(t, j)
	}
	before := f.west.Snapshot()
	env, calls := f.env(t)
	var during *sim.State
	var pgTest *api.Job
	var pgCopy *api.CSIVolume
	env.RegisterDelayedCallback(func() {
		during = f.west.Snapshot()
		pgTest = west.Job("drtest", "pg-test")
		if pgTest != nil && len(pgTest.TaskGroups) == 1 && pgTest.TaskGroups[0].Volumes["data"] != nil {
			pgCopy = west.Volume("drtest", pgTest.TaskGroups[0].Volumes["data"].Source)
		}
		send(t, env, workflows.UpdateApprove, workflows.Approval{Gate: workflows.GateEndTest, By: "tester"}, nil, nil)
	}, time.Minute)
	env.ExecuteWorkflow(workflows.TestRecovery, workflows.TestRecoveryInput{Plan: f.plan, At: "west"})
	mustOK(t, env.GetWorkflowError())
	var res workflows.TestRecoveryResult
	mustOK(t, env.GetWorkflowResult(&res))
	allDone(t, res.Progress)

	if pgTest == nil || pgCopy == nil || !strings.HasPrefix(pgCopy.ID, "pg-data-test-") || pgCopy.PluginID != "sim" || pgCopy.SnapshotID == "" {
		t.Fatalf("while the test ran, west's Nomad held job pg-test %+v on copy %+v", pgTest, pgCopy)
	}
	// The copy's Nomad id ends in the last eight characters of the run's
	// id, not the whole of it.
	// (The test environment's run id is longer than eight.)
	if run := strings.TrimPrefix(pgCopy.ID, "pg-data-test-"); len(run) != 8 {
		t.Fatalf("Nomad's copy is %q", pgCopy.ID)
	}
	// Two copies deleted through Nomad, two through the storage, the two
	// group snapshots and the loose volume's snapshot (through Nomad).
	if s := stepOf(t, res.Progress, "cleanup/west"); s.Output != "7 copies and snapshots deleted" {
		t.Fatalf("the cleanup says %q", s.Output)
	}
	if s := stepOf(t, res.Progress, "preflight/west"); !strings.HasSuffix(s.Output, "; 2 of 4 volume(s) are Nomad CSI volumes, copied through Nomad") {
		t.Fatalf("the preflight says %q", s.Output)
	}
	if during == nil || !slices.ContainsFunc(during.Clones, func(c sim.CloneState) bool { return c.ID == pgCopy.ExternalID }) {
		t.Fatalf("Nomad's copy %+v is not a copy on west's storage: %v", pgCopy, during)
	}
	if len(during.GroupSnapshots) != 2 || len(during.Clones) != 4 {
		t.Fatalf("while the test ran west held %d group snapshots and %d copies, want 2 and 4", len(during.GroupSnapshots), len(during.Clones))
	}
	nomadCalls := west.Calls()
	for _, want := range []string{"PUT /v1/volumes/snapshot", "PUT /v1/volume/csi/" + pgCopy.ID + "/create", "DELETE /v1/volume/csi/" + pgCopy.ID + "/delete", "DELETE /v1/volumes/snapshot"} {
		if !slices.Contains(nomadCalls, want) {
			t.Errorf("west's Nomad saw no %q: %v", want, nomadCalls)
		}
	}
	if west.Job("drtest", "pg-test") != nil || west.Job("drtest", "web-test") != nil || west.Volume("drtest", pgCopy.ID) != nil {
		t.Fatalf("test copies left in west's Nomad: %v", nomadCalls)
	}
	if west.Job("", "pg") != nil || west.Job("", "web") != nil {
		t.Fatalf("a production job was registered on west: %v", nomadCalls)
	}
	after := f.west.Snapshot()
	if n := len(after.Snapshots) + len(after.GroupSnapshots) + len(after.Clones); n != 0 {
		t.Fatalf("%d copies or snapshots left on west", n)
	}
	if d := sim.ReplicasUnchanged(before, after, false); len(d) != 0 {
		t.Fatalf("the replicas changed: %v", d)
	}
	for _, c := range *calls {
		if c.name == "PromoteVolume" || c.name == "DemoteVolume" || c.name == "FenceClusterNetwork" {
			t.Fatalf("a test recovery called %s", c.name)
		}
	}
	if _, ok := res.RTO["pg"]; len(res.RTO) != 2 || !ok {
		t.Fatalf("RTO %v", res.RTO)
	}
}

// TestTestRecoveryOnDevServer runs a test recovery, and a cleanup after
// it, through the real dev server and a worker: the test waits at its
// gate, the update ends it, everything it made is deleted, and the
// cleanup of its (already clean) copies runs again without error. With
// DROVER_RECORD_HISTORIES set it records both histories for TestReplay.
func TestTestRecoveryOnDevServer(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := testRecoveryFixture(t)
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := workflows.StartTestRecovery(ctx, srv.Client, workflows.TestRecoveryInput{Plan: f.plan, At: "west"})
	mustOK(t, err)
	waitFor(t, ctx, srv.Client, run, "approve "+workflows.GateEndTest, workflows.StateWaiting)
	h, err := srv.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), RunID: run.GetRunID(),
		UpdateName: workflows.UpdateApprove, Args: []any{workflows.Approval{Gate: workflows.GateEndTest, By: "test"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	mustOK(t, err)
	mustOK(t, h.Get(ctx, nil))
	var res workflows.TestRecoveryResult
	mustOK(t, run.Get(ctx, &res))
	record(t, ctx, srv.Client, run, "test-recovery")
	if !res.Cleaned || len(res.Copies) != 4 {
		t.Fatalf("test recovery: cleaned %v, copies %+v", res.Cleaned, res.Copies)
	}
	after := f.west.Snapshot()
	if n := len(after.Snapshots) + len(after.GroupSnapshots) + len(after.Clones); n != 0 {
		t.Fatalf("%d copies or snapshots left on west", n)
	}

	run, err = workflows.StartTestCleanup(ctx, srv.Client, workflows.TestCleanupInput{Plan: f.plan, At: "west", Run: run.GetRunID(), Copies: res.Copies})
	mustOK(t, err)
	var cr workflows.TestCleanupResult
	mustOK(t, run.Get(ctx, &cr))
	record(t, ctx, srv.Client, run, "test-cleanup")
	if !cr.Cleaned {
		t.Fatalf("the cleanup again: %+v", cr)
	}
	if cr.Progress.State != workflows.StateCompleted {
		t.Fatalf("a cleanup that ended well is %s", cr.Progress.State)
	}
}

// stepOf is the step of p with the given id; the test fails without one.
func stepOf(t *testing.T, p workflows.Progress, id string) *workflows.Step {
	t.Helper()
	for _, s := range p.Steps {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("%s has no step %s", p.Action, id)
	return nil
}

// TestCleanupDeletesOnlyWhatTheRunMade: a TestCleanup deletes what its
// test recovery run reports it made, never the copies its input names:
// anyone who may start a workflow could name a production volume there.
// After a run killed at its gate (its copies left behind), a cleanup
// given that run and, beside its copies, a volume of west no test made
// deletes the run's copies and leaves that volume. A cleanup naming no
// such run, or a run that is not a test recovery, is refused before any
// call to the storage.
func TestCleanupDeletesOnlyWhatTheRunMade(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := testRecoveryFixture(t)
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	victim, err := csi.NewControllerClient(dial(t, f.west)).CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "orders-archive",
		VolumeCapabilities: []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}}})
	mustOK(t, err)
	id := victim.GetVolume().GetVolumeId()
	kept := func(when string) {
		t.Helper()
		if !slices.ContainsFunc(f.west.Snapshot().Clones, func(c sim.CloneState) bool { return c.ID == id }) {
			t.Fatalf("%s: west's volume %s, which no test made, was deleted", when, id)
		}
	}

	run, err := workflows.StartTestRecovery(ctx, srv.Client, workflows.TestRecoveryInput{Plan: f.plan, At: "west"})
	mustOK(t, err)
	waitFor(t, ctx, srv.Client, run, "approve "+workflows.GateEndTest, workflows.StateWaiting)
	mustOK(t, srv.Client.TerminateWorkflow(ctx, run.GetID(), run.GetRunID(), "killed at the gate"))
	v, err := srv.Client.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), workflows.QueryTestCopies)
	mustOK(t, err)
	var made workflows.TestRecoveryResult
	mustOK(t, v.Get(&made))
	if len(made.Copies) == 0 || len(f.west.Snapshot().Clones) < 2 {
		t.Fatalf("the killed run left %d copies, west has %d volumes; want its copies and the victim", len(made.Copies), len(f.west.Snapshot().Clones))
	}
	forged := append(slices.Clone(made.Copies), workflows.TestCopy{Group: "db", Volume: "v1", Copy: id})

	cleanupWith := func(p *plans.Plan, runID string) (workflows.TestCleanupResult, error) {
		c, err := workflows.StartTestCleanup(ctx, srv.Client, workflows.TestCleanupInput{Plan: p, At: "west", Run: runID, Copies: forged})
		mustOK(t, err)
		var res workflows.TestCleanupResult
		err = c.Get(ctx, &res)
		return res, err
	}
	cleanup := func(runID string) (workflows.TestCleanupResult, error) { return cleanupWith(f.plan, runID) }
	for _, runID := range []string{"", "00000000-0000-0000-0000-000000000000"} {
		if _, err := cleanup(runID); err == nil || !strings.Contains(err.Error(), "cannot read what test recovery run") {
			t.Fatalf("a cleanup of run %q: %v, want a refusal", runID, err)
		}
		kept(fmt.Sprintf("a cleanup of run %q", runID))
	}
	// Another version of the plan naming other storage for west (here
	// east's): the run's ids deleted there would leave its copies on west
	// and report them cleaned. Refused; the copies stay for the cleanup
	// with the plan the test ran with.
	var other plans.Plan
	b, err := json.Marshal(f.plan)
	mustOK(t, err)
	mustOK(t, json.Unmarshal(b, &other))
	other.Site("west").Storage.Endpoint = f.east.Endpoint()
	copiesBefore := len(f.west.Snapshot().Clones)
	if _, err := cleanupWith(&other, run.GetRunID()); err == nil || !strings.Contains(err.Error(), "made its copies through west's storage at "+f.west.Endpoint()) {
		t.Fatalf("a cleanup with another storage endpoint for west: %v, want a refusal", err)
	}
	if n := len(f.west.Snapshot().Clones); n != copiesBefore {
		t.Fatalf("west held %d volumes before the refused cleanup, %d after", copiesBefore, n)
	}
	res, err := cleanup(run.GetRunID())
	mustOK(t, err)
	if !res.Cleaned {
		t.Fatalf("the cleanup: %+v", res)
	}
	kept("the cleanup of the killed run")
	if n := len(f.west.Snapshot().Clones) + len(f.west.Snapshot().Snapshots); n != 1 {
		t.Fatalf("west holds %d volumes and snapshots after the cleanup, want only the victim", n)
	}
	// The cleanup's own run is not a test recovery.
	d, err := srv.Client.DescribeWorkflowExecution(ctx, workflows.TestRecoveryID(f.plan.Metadata.Name), "")
	mustOK(t, err)
	if _, err := cleanup(d.GetWorkflowExecutionInfo().GetExecution().GetRunId()); err == nil || !strings.Contains(err.Error(), "TestCleanup, not a test recovery") {
		t.Fatalf("a cleanup of a cleanup's run: %v, want a refusal", err)
	}
	kept("a cleanup of a cleanup's run")
}

// TestTestRecoveryFromNoPointStartsNothing (issue 56): a test recovery
// from a point in time that does not exist pauses at the point step.
// That step guards the rest: a skip without --override is refused; with
// it, the test has no copy to run its workloads on, and ends there
// without starting any.
func TestTestRecoveryFromNoPointStartsNothing(t *testing.T) {
	f := testRecoveryFixture(t)
	env, _ := f.env(t)
	// No point to hold; the cleanup's release finds none held, as the
	// record answers it.
	env.OnActivity("HoldPoint", mock.Anything, mock.Anything).Return(func(_ context.Context, in workflows.PointUse) (workflows.PointInTime, error) {
		if in.Release {
			return workflows.PointInTime{}, nil
		}
		return workflows.PointInTime{}, temporal.NewNonRetryableApplicationError(`plan "shop" has no point in time at west at or before then`, workflows.ErrNoPoint, nil)
	})
	var point *workflows.Step
	var refused error
	var skipped bool
	env.RegisterDelayedCallback(func() {
		point = pausedStep(t, env)
		if point == nil {
			return
		}
		send(t, env, workflows.UpdateResolve, workflows.Decision{Step: point.ID, Action: workflows.DecisionSkip, By: "operator"},
			func() { t.Error("a skip of the point step without override was accepted") }, func(err error) { refused = err })
		send(t, env, workflows.UpdateResolve, workflows.Decision{Step: point.ID, Action: workflows.DecisionSkip, Override: true, By: "operator"},
			func() { skipped = true }, nil)
	}, time.Hour)
	env.ExecuteWorkflow(workflows.TestRecovery, workflows.TestRecoveryInput{Plan: f.plan, At: "west", PointAt: env.Now().Add(-time.Hour)})
	if point == nil || !strings.HasPrefix(point.ID, string(workflows.KindPoint)+"/") {
		t.Fatalf("paused at %+v, want the point step", point)
	}
	if refused == nil || !strings.Contains(refused.Error(), "needs --override") {
		t.Fatalf("a skip of the point step without override: %v, want it refused", refused)
	}
	if !skipped {
		t.Fatal("the skip with override was not taken")
	}
	var ae *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &ae) || ae.Type() != workflows.ErrNoCopies || !strings.Contains(err.Error(), "the test ends without starting its workloads") {
		for _, s := range progressOf(t, env).Steps {
			t.Logf("%s: %s %d %s %s", s.ID, s.State, s.Attempts, s.Output, s.LastError)
		}
		t.Fatalf("the test after the skip ended with %v, want %s", err, workflows.ErrNoCopies)
	}
	if log, _ := os.ReadFile(f.hooks); strings.Contains(string(log), "test-start") {
		t.Fatalf("a test workload started with no copies:\n%s", log)
	}
}
