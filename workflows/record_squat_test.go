package workflows_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// TestSquattedRecordIsNamed: someone who may start workflows holds the
// ID of a plan's record: a PlanRecorder on a task queue no worker polls,
// started with no sealed change, or a workflow of another type on
// Drover's queue. An action of the plan does not wait on it to its
// deadline without a word: it ends with RecordNotDrovers, naming the
// workflow at the record's ID, why it is not Drover's and how to remove
// it.
func TestSquattedRecordIsNamed(t *testing.T) {
	srv, f, key := trustingWorker(t)
	f.plan.ApplyDefaults()
	sig, err := plans.Sign(f.plan, key, time.Now().Add(-time.Minute), 0)
	mustOK(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, c := range []struct {
		name, queue, wfType, want string
	}{
		{"an unpolled queue", "nobody-polls-this", "PlanRecorder", `it runs on task queue "nobody-polls-this", which no Drover worker polls`},
		{"another type", "drover-squat", "Squatter", `it is a "Squatter" workflow, not a PlanRecorder`},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := workflows.RecordID("shop")
			_, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: c.queue}, c.wfType, workflows.PlanRecordInput{Plan: "shop"})
			mustOK(t, err)
			defer func() { _ = srv.Client.TerminateWorkflow(context.Background(), id, "", "test over") }()
			err = signedDrill(t, ctx, srv, "drill-beside-a-squatter-"+c.wfType, f.plan, sig)
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || ae.Type() != workflows.ErrRecordNotDrovers || !strings.Contains(err.Error(), c.want) ||
				!strings.Contains(err.Error(), "no Drover worker started it") || !strings.Contains(err.Error(), "temporal workflow terminate -w "+id) {
				t.Fatalf("a drill beside a squatted record: %v; want %s naming why (%s) and how to remove it", err, workflows.ErrRecordNotDrovers, c.want)
			}
		})
	}
}
