package workflows_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/workflows"
)

// TestRecordHoldsEveryChangeWhenTheActionEnds: an action sends its
// changes to the plan's record aside, while it goes on, and waits for
// them all before it ends. The plan's first action is the hard case: the
// record does not exist yet, so each change first fails to reach it and
// then starts it, or waits while another change of the run starts it and
// sends to it then.
// The plan has no workloads, so the last change (west as primary) goes
// aside just before the action ends. The moment the failover's result is
// in, the record holds east's fence, west as primary and the completed
// failover.
func TestRecordHoldsEveryChangeWhenTheActionEnds(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := newFixture(t)
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if rec, err := workflows.ReadRecord(ctx, srv.Client, "shop"); err == nil && rec != nil {
		t.Fatalf("the plan has a record before its first action: %+v", rec)
	}
	f.plan.Workloads = nil
	f.east.Down()
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, err)
	var res workflows.FailoverResult
	mustOK(t, run.Get(ctx, &res))
	allDone(t, res.Progress)
	// The changes start the record once between them: none failed and
	// needed sending again.
	for _, st := range res.Steps {
		if st.Name == "record the plan's state" {
			t.Errorf("a change was sent again: %+v", st)
		}
	}
	rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
	mustOK(t, err)
	cidrs, via := rec.FencedOf("east")
	switch {
	case rec.Primary != "west":
		t.Errorf("record primary %q, want west: %+v", rec.Primary, rec)
	case via != "west" || !slices.Equal(cidrs, f.plan.Sites[0].Fence.CIDRs):
		t.Errorf("record holds %v fenced through %q, want %v through west", cidrs, via, f.plan.Sites[0].Fence.CIDRs)
	case rec.LastAction == nil || rec.LastAction.RunID != run.GetRunID() || rec.LastAction.Outcome != workflows.StateCompleted:
		t.Errorf("record's last action %+v, want this failover completed", rec.LastAction)
	}
}

// startWorker runs a worker of the fixture's activities, with trust as
// its plan check, until the test ends.
func (f *fixture) startWorker(t *testing.T, srv *devserver.Server, trust *activities.PlanTrust) {
	t.Helper()
	w := worker.New(srv.Client, workflows.TaskQueue, worker.Options{})
	workflows.Register(w)
	w.RegisterActivity(trust)
	w.RegisterActivity(f.storage)
	w.RegisterActivity(f.workloads)
	mustOK(t, w.Start())
	t.Cleanup(w.Stop)
}
