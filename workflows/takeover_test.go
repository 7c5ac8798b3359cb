package workflows_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
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
