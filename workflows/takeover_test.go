package workflows_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// TestRecordOutlivesItsTermination: the record of a plan holds v2 (and
// the refusal of v1) when a namespace writer terminates it, then starts
// a PlanRecorder of their own under its ID on a task queue nobody polls
// and terminates that too. The next action, a drill with the older v1,
// is refused all the same: the new record took over the last run a
// Drover worker made (not the writer's), says it was rebuilt and from
// which run, and what it passed over.
func TestRecordOutlivesItsTermination(t *testing.T) {
	srv, f, key := trustingWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	v1 := *f.plan
	v1.Policy.Parallelism = 3
	v1.ApplyDefaults()
	v2 := f.plan
	v2.ApplyDefaults()
	sig1, err := plans.Sign(&v1, key, time.Now().Add(-2*time.Hour), 0)
	mustOK(t, err)
	sig2, err := plans.Sign(v2, key, time.Now().Add(-time.Hour), 0)
	mustOK(t, err)
	drill := func(name string, p *plans.Plan, sig *plans.Signature) error {
		return signedDrill(t, ctx, srv, "drill-"+name, p, sig)
	}
	refused := func(err error) bool {
		var ae *temporal.ApplicationError
		return errors.As(err, &ae) && ae.Type() == activities.ErrUntrustedPlan && strings.Contains(err.Error(), "a newer version of the plan")
	}
	mustOK(t, drill("v2", v2, sig2))
	if err := drill("v1", &v1, sig1); !refused(err) {
		t.Fatalf("v1 after v2: %v, want refused", err)
	}
	id := workflows.RecordID("shop")
	d, err := srv.Client.DescribeWorkflowExecution(ctx, id, "")
	mustOK(t, err)
	drovers := d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	mustOK(t, srv.Client.TerminateWorkflow(ctx, id, "", "a writer ends the record"))
	squat, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: "nobody-polls-this"}, "PlanRecorder", workflows.PlanRecordInput{Plan: "shop"})
	mustOK(t, err)
	mustOK(t, srv.Client.TerminateWorkflow(ctx, id, squat.GetRunID(), "the writer ends theirs"))

	if err := drill("v1-again", &v1, sig1); !refused(err) {
		t.Fatalf("v1 after the record's termination: %v, want refused as before", err)
	}
	rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
	mustOK(t, err)
	if rec.Version == nil || !rec.Version.SignedAt.Equal(sig2.SignedAt) || rec.RefusedCount < 2 {
		t.Fatalf("the new record: version %+v, %d refusals; want v2 and both refusals of v1", rec.Version, rec.RefusedCount)
	}
	if b := rec.Rebuilt; b == nil || b.From != drovers || b.Status != "terminated" || !strings.Contains(b.Note, "passed over run "+squat.GetRunID()) {
		t.Fatalf("the new record says it was rebuilt %+v; want from %s (terminated), passing over the writer's run %s", b, drovers, squat.GetRunID())
	}
}

// trustingWorker starts a dev server and, on it, a worker of f's fixture
// that trusts one new key, whose private half it returns to sign plans.
func trustingWorker(t *testing.T) (*devserver.Server, *fixture, ed25519.PrivateKey) {
	t.Helper()
	srv := devserver.Start(t, nil)
	f := newFixture(t)
	trusted, key, err := plans.GenerateKey()
	mustOK(t, err)
	f.startWorker(t, srv, &activities.PlanTrust{Keys: []ed25519.PublicKey{trusted}})
	return srv, f, key
}

// signedDrill runs a drill of a failover east to west of p, signed by
// sig, under id, and returns how it ended.
func signedDrill(t *testing.T, ctx context.Context, srv *devserver.Server, id string, p *plans.Plan, sig *plans.Signature) error {
	t.Helper()
	run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue},
		workflows.Drill, workflows.DrillInput{Plan: p, Action: "failover", From: "east", To: "west", Origin: workflows.Origin{Signature: sig, By: "alice@ops"}})
	mustOK(t, err)
	return run.Get(ctx, nil)
}

// deleteRun deletes a closed run's history as the namespace's retention
// would, and waits until the listing no longer shows it.
func deleteRun(t *testing.T, ctx context.Context, srv *devserver.Server, id, run string) {
	t.Helper()
	_, err := srv.Client.WorkflowService().DeleteWorkflowExecution(ctx, &workflowservice.DeleteWorkflowExecutionRequest{
		Namespace: "default", WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: run}})
	mustOK(t, err)
	simtest.Eventually(t, time.Minute, "run "+run+" of "+id+" to be deleted", func() bool {
		res, err := srv.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = '%s' AND RunId = '%s'", id, run)})
		return err == nil && len(res.GetExecutions()) == 0
	})
}

// unproven tells an action's end by a record that found nothing it can
// trust, saying what and how to restore it.
func unproven(err error, found string) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == workflows.ErrRecordUnproven && strings.Contains(err.Error(), "found nothing it can trust") &&
		strings.Contains(err.Error(), found) && strings.Contains(err.Error(), "sign the plan again (drctl plan sign") &&
		strings.Contains(err.Error(), "drctl status shop --verify")
}

// TestRecordWithNothingToTrustRefuses: the record of a plan held v2; a
// namespace writer terminates it, starts a PlanRecorder of their own
// under its ID and ends it, and deletes the Drover run's history (as
// the namespace's retention would, while the writer's run stays
// listed). The next record does not start empty, where the older v1
// would run again: it refuses v1 and v2 alike (signed before it found
// nothing to trust), naming what it found and how to restore it. A v2
// signed again restores it, named in the record, and v1 is then older.
func TestRecordWithNothingToTrustRefuses(t *testing.T) {
	srv, f, key := trustingWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	v1 := *f.plan
	v1.Policy.Parallelism = 3
	v1.ApplyDefaults()
	v2 := f.plan
	v2.ApplyDefaults()
	sig1, err := plans.Sign(&v1, key, time.Now().Add(-2*time.Hour), 0)
	mustOK(t, err)
	sig2, err := plans.Sign(v2, key, time.Now().Add(-time.Hour), 0)
	mustOK(t, err)
	// A new plan's record starts empty: v2 is its first version.
	mustOK(t, signedDrill(t, ctx, srv, "drill-v2", v2, sig2))
	id := workflows.RecordID("shop")
	d, err := srv.Client.DescribeWorkflowExecution(ctx, id, "")
	mustOK(t, err)
	drovers := d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	mustOK(t, srv.Client.TerminateWorkflow(ctx, id, "", "a writer ends the record"))
	squat, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: "nobody-polls-this"}, "PlanRecorder", workflows.PlanRecordInput{Plan: "shop"})
	mustOK(t, err)
	mustOK(t, srv.Client.TerminateWorkflow(ctx, id, squat.GetRunID(), "the writer ends theirs"))
	deleteRun(t, ctx, srv, id, drovers)

	if err := signedDrill(t, ctx, srv, "drill-v1", &v1, sig1); !unproven(err, "passed over run "+squat.GetRunID()) {
		t.Fatalf("v1 once the record's history is gone: %v; want %s naming the writer's run and how to restore", err, workflows.ErrRecordUnproven)
	}
	if err := signedDrill(t, ctx, srv, "drill-v2-again", v2, sig2); !unproven(err, "passed over run "+squat.GetRunID()) {
		t.Fatalf("v2 under its signature from before: %v; want %s", err, workflows.ErrRecordUnproven)
	}
	rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
	mustOK(t, err)
	if b := rec.Rebuilt; b == nil || !b.Unproven || rec.Version != nil || rec.RefusedCount != 2 {
		t.Fatalf("the record with nothing to trust: rebuilt %+v, version %+v, %d refusals; want unproven, no version, both refused", b, rec.Version, rec.RefusedCount)
	}

	sig3, err := plans.Sign(v2, key, time.Now(), 0)
	mustOK(t, err)
	mustOK(t, signedDrill(t, ctx, srv, "drill-v2-signed-again", v2, sig3))
	rec, err = workflows.ReadRecord(ctx, srv.Client, "shop")
	mustOK(t, err)
	if b := rec.Rebuilt; b == nil || b.Unproven || b.Restored == nil || b.Restored.By != "alice@ops" || !b.Restored.SignedAt.Equal(sig3.SignedAt) ||
		rec.Version == nil || !rec.Version.SignedAt.Equal(sig3.SignedAt) {
		t.Fatalf("the record restored: rebuilt %+v, version %+v; want restored by alice@ops with the new signature", b, rec.Version)
	}
	var ae *temporal.ApplicationError
	if err := signedDrill(t, ctx, srv, "drill-v1-after", &v1, sig1); !errors.As(err, &ae) || ae.Type() != activities.ErrUntrustedPlan {
		t.Fatalf("v1 after the restore: %v; want refused as older", err)
	}
}

// TestDeletedRecordIsNotANewPlan: every run of a plan's record is
// deleted (or outlived the retention) while the plan's drill, which
// told the record, is still listed as completed: the next record does
// not take the plan for a new one, and refuses the older v1.
func TestDeletedRecordIsNotANewPlan(t *testing.T) {
	srv, f, key := trustingWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	v1 := *f.plan
	v1.Policy.Parallelism = 3
	v1.ApplyDefaults()
	v2 := f.plan
	v2.ApplyDefaults()
	sig1, err := plans.Sign(&v1, key, time.Now().Add(-2*time.Hour), 0)
	mustOK(t, err)
	sig2, err := plans.Sign(v2, key, time.Now().Add(-time.Hour), 0)
	mustOK(t, err)
	mustOK(t, signedDrill(t, ctx, srv, workflows.ActionID("shop"), v2, sig2))
	id := workflows.RecordID("shop")
	d, err := srv.Client.DescribeWorkflowExecution(ctx, id, "")
	mustOK(t, err)
	mustOK(t, srv.Client.TerminateWorkflow(ctx, id, "", "a writer ends the record"))
	deleteRun(t, ctx, srv, id, d.GetWorkflowExecutionInfo().GetExecution().GetRunId())

	if err := signedDrill(t, ctx, srv, "drill-v1", &v1, sig1); !unproven(err, "no run is left under the record's ID, yet the plan's Drill "+workflows.ActionID("shop")) {
		t.Fatalf("v1 once every run of the record is deleted: %v; want %s naming the plan's drill", err, workflows.ErrRecordUnproven)
	}
}
