package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestActionsOnDevServer runs failover, reprotect and failback of a plan
// with several groups through the real Temporal dev server and a real
// worker, against simulated sites over sockets. A second action started
// while the first waits at an approval gate is refused with the name of
// the running one. The storage invariants hold at the end and a write
// made during the outage survives the trip back.
//
// It runs twice: with 8 groups, one step per group, and with 153, which
// fan out to child workflows in batches. After the first, Verify finds
// the plan's record and its storage agree. With DROVER_RECORD_HISTORIES
// set (make histories) it records the history of each workflow it runs
// for TestReplay.
func TestActionsOnDevServer(t *testing.T) {
	srv := devserver.Start(t, nil)
	for _, c := range []struct {
		name   string
		extra  int
		suffix string
	}{{"8 groups", 5, ""}, {"153 groups in batches", 150, "-batches"}} {
		t.Run(c.name, func(t *testing.T) { actionsOnDevServer(t, srv, c.extra, c.suffix) })
	}
}

func actionsOnDevServer(t *testing.T, srv *devserver.Server, extra int, suffix string) {
	f := newFixtureN(t, extra) // extra groups at priorities 2 and 3
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Protect records the groups' syncs and east's clients; the failover
	// fences the recorded clients (the plan lists none for east).
	f.plan.Sites[0].Fence.CIDRs = nil
	prot, err := workflows.StartProtect(ctx, srv.Client, f.plan, "east", 100*time.Millisecond, workflows.Origin{})
	mustOK(t, err)
	var ps *workflows.ProtectState
	deadline := time.Now().Add(time.Minute)
	for ps == nil || ps.LastSync().IsZero() || len(ps.Clients["east"]) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("protect never recorded the plan: %+v", ps)
		}
		time.Sleep(100 * time.Millisecond)
		ps, _ = workflows.ReadProtect(ctx, srv.Client, "shop")
	}
	// A drill of the healthy plan: every check passes and nothing changes.
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Drill, workflows.DrillInput{Plan: f.plan, Action: "failover", From: "east", To: "west"})
	mustOK(t, err)
	var dr workflows.DrillResult
	mustOK(t, run.Get(ctx, &dr))
	record(t, ctx, srv.Client, run, "drill"+suffix)
	if !dr.OK {
		t.Fatalf("the drill of a healthy plan failed: %+v", dr.Steps)
	}

	f.east.Down()
	gated := *f.plan
	gated.Policy.Approvals = []string{"beforePromote"}
	run, err = workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Plan: &gated, From: "east", To: "west",
		LastSync: ps.LastSync(), Clients: ps.Clients["east"]})
	mustOK(t, err)

	// The failover waits at its gate; a second action is refused.
	waitFor(t, ctx, srv.Client, run, "approve beforePromote", workflows.StateWaiting)
	_, err = workflows.Start(ctx, srv.Client, "shop", workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "west", To: "east"})
	var busy *workflows.BusyError
	if !errors.As(err, &busy) || busy.Running != "Failover" || busy.RunID != run.GetRunID() {
		t.Fatalf("second action: %v; want a refusal naming the running Failover", err)
	}
	t.Logf("refusal: %v", err)
	h, err := srv.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), RunID: run.GetRunID(),
		UpdateName: workflows.UpdateApprove, Args: []any{workflows.Approval{Gate: "beforePromote", By: "test"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	mustOK(t, err)
	mustOK(t, h.Get(ctx, nil))
	var fo workflows.FailoverResult
	mustOK(t, run.Get(ctx, &fo))
	record(t, ctx, srv.Client, run, "failover"+suffix)
	allDone(t, fo.Progress)
	if fo.Trust != activities.UnsignedWarning {
		t.Errorf("failover on a worker that does not check plans: trust %q, want the warning %q", fo.Trust, activities.UnsignedWarning)
	}
	if !fo.RPOKnown || !slices.Equal(fo.Fenced, []string{"127.0.0.2/32"}) {
		t.Fatalf("failover fenced %v, RPO known %v; want the clients Protect recorded and an RPO", fo.Fenced, fo.RPOKnown)
	}
	// Protection follows the failover: unprotected on west, with no
	// poll of east, fenced and lost, and the record says so.
	simtest.Eventually(t, time.Minute, "protection unprotected on west", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		return err == nil && ps.Primary == "west" && ps.Unprotected != nil && ps.Unprotected.Lost == "east" && ps.Polls > 0 && !ps.OutOfRPO
	})
	simtest.Eventually(t, time.Minute, "the record to say the plan is unprotected", func() bool {
		rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
		return err == nil && rec.Primary == "west" && rec.Protection != nil && rec.Protection.Primary == "west" && rec.Protection.Unprotected != nil
	})
	uh, err := srv.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: prot.GetID(), UpdateName: workflows.UpdateStopProtect,
		Args: []any{workflows.StopProtect{}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	mustOK(t, err)
	mustOK(t, uh.Get(ctx, nil))
	mustOK(t, prot.Get(ctx, nil))
	record(t, ctx, srv.Client, prot, "protect"+suffix)
	// The run before it took the failover's word and continued as new.
	it := srv.Client.GetWorkflowHistory(ctx, prot.GetID(), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	first, err := it.Next()
	mustOK(t, err)
	recordRun(t, ctx, srv.Client, prot.GetID(), first.GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId(), "protect-failover"+suffix)
	t.Logf("failover of %d groups: RTO %v, RPO estimate %v, %d steps", len(f.plan.VolumeGroups), fo.RTO, fo.RPO, len(fo.Steps))

	west, err := sim.NewClient(f.west.DataAddr(), simtest.NodeB, "west-node")
	mustOK(t, err)
	defer west.Close()
	_, err = west.Write(ctx, "v3", 0, []byte("written during the outage"))
	mustOK(t, err)

	mustOK(t, f.east.Up())
	run, err = workflows.Start(ctx, srv.Client, "shop", workflows.Reprotect, workflows.ReprotectInput{Plan: f.plan, From: "east", To: "west", Fenced: fo.Fenced})
	mustOK(t, err)
	var rp workflows.ReprotectResult
	mustOK(t, run.Get(ctx, &rp))
	record(t, ctx, srv.Client, run, "reprotect"+suffix)
	if suffix != "" {
		recordChild(t, ctx, srv.Client, run, "GroupBatch", "group-batch")
	}
	allDone(t, rp.Progress)

	run, err = workflows.Start(ctx, srv.Client, "shop", workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "west", To: "east"})
	mustOK(t, err)
	var fb workflows.FailbackResult
	mustOK(t, run.Get(ctx, &fb))
	record(t, ctx, srv.Client, run, "failback"+suffix)
	allDone(t, fb.Progress)

	f.homeAgain(t, "v3", 0, "written during the outage")

	// The reprotect started protection from west (Protect was stopped
	// after the failover); the failback moved it back to east.
	simtest.Eventually(t, time.Minute, "protection from east", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		return err == nil && ps.Primary == "east" && ps.Polls > 0
	})
	uh, err = srv.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: workflows.ProtectID("shop"), UpdateName: workflows.UpdateStopProtect,
		Args: []any{workflows.StopProtect{}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	mustOK(t, err)
	mustOK(t, uh.Get(ctx, nil))
	if suffix != "" {
		return
	}

	// The record says what storage says: east primary, nothing fenced.
	rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
	mustOK(t, err)
	run, err = workflows.StartVerify(ctx, srv.Client, f.plan, rec, workflows.Origin{})
	mustOK(t, err)
	var vr workflows.VerifyResult
	mustOK(t, run.Get(ctx, &vr))
	record(t, ctx, srv.Client, run, "verify")
	if len(vr.Drift) > 0 || len(vr.Checked) == 0 {
		t.Errorf("verify after the failback: checked %q, drift %q; want checks and no drift", vr.Checked, vr.Drift)
	}
	recordRun(t, ctx, srv.Client, workflows.RecordID("shop"), "", "record")
}

// waitFor polls the progress query until the named step is in state.
func waitFor(t *testing.T, ctx context.Context, c client.Client, run client.WorkflowRun, step, state string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var p workflows.Progress
	for time.Now().Before(deadline) {
		v, err := c.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), workflows.QueryProgress)
		if err == nil {
			if v.Get(&p) == nil {
				for _, s := range p.Steps {
					if s.Name == step && s.State == state {
						return
					}
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	var seen []string
	for _, s := range p.Steps {
		seen = append(seen, fmt.Sprintf("%s: %s %s%s", s.Name, s.State, s.Output, s.LastError))
	}
	t.Fatalf("step %q never reached %q; the run stood at:\n%s", step, state, strings.Join(seen, "\n"))
}
