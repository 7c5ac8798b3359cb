package workflows_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// TestFailoverGoesOnWithoutARecordByOverride: a namespace writer ended
// the plan's record and holds its ID with a PlanRecorder on a task queue
// nobody polls. A failover ends with RecordNotDrovers, as a drill does
// even with the override; with the override, an older signed version
// is still refused (read from the last Drover run's history); the
// current version with the operator's override goes on, its
// first step saying it runs without the record, why, the operator's
// reason and the version it ran, and promotes west. Nothing of it goes
// to the writer's workflow; once that is gone, the record (a new run,
// which takes over the last one Drover made) holds the failover: west
// primary, east fenced, the run with the reason.
func TestFailoverGoesOnWithoutARecordByOverride(t *testing.T) {
	defer workflows.SetRecordLaterRetry(time.Second, 3*time.Second)()
	srv, f, key := trustingWorker(t)
	old := *f.plan
	old.Policy.Parallelism = 3
	old.ApplyDefaults()
	f.plan.ApplyDefaults()
	sig, err := plans.Sign(f.plan, key, time.Now().Add(-time.Minute), 0)
	mustOK(t, err)
	oldSig, err := plans.Sign(&old, key, time.Now().Add(-time.Hour), 0)
	mustOK(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mustOK(t, signedDrill(t, ctx, srv, "drill-first", f.plan, sig))
	id := workflows.RecordID("shop")
	d, err := srv.Client.DescribeWorkflowExecution(ctx, id, "")
	mustOK(t, err)
	drovers := d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	mustOK(t, srv.Client.TerminateWorkflow(ctx, id, "", "a writer ends the record"))
	squat, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: "nobody-polls-this"}, "PlanRecorder", workflows.PlanRecordInput{Plan: "shop"})
	mustOK(t, err)
	defer func() { _ = srv.Client.TerminateWorkflow(context.Background(), id, squat.GetRunID(), "test over") }()

	const reason = "east burned down, ticket 4711"
	notDrovers := func(err error) bool {
		var ae *temporal.ApplicationError
		return errors.As(err, &ae) && ae.Type() == workflows.ErrRecordNotDrovers
	}
	run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "drill-overridden", TaskQueue: workflows.TaskQueue},
		workflows.Drill, workflows.DrillInput{Plan: f.plan, Action: "failover", From: "east", To: "west", Origin: workflows.Origin{Signature: sig, By: "alice@ops", RecordOverride: reason}})
	mustOK(t, err)
	if err := run.Get(ctx, nil); !notDrovers(err) {
		t.Fatalf("a drill with the override beside a squatted record: %v; want %s", err, workflows.ErrRecordNotDrovers)
	}
	f.east.Down()
	failover := func(o workflows.Origin) (workflows.FailoverResult, client.WorkflowRun, error) {
		var res workflows.FailoverResult
		p := f.plan
		if o.Signature == oldSig {
			p = &old
		}
		run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Plan: p, From: "east", To: "west", Origin: o})
		if err != nil {
			return res, nil, err
		}
		return res, run, run.Get(ctx, &res)
	}
	if _, _, err := failover(workflows.Origin{Signature: sig, By: "alice@ops"}); !notDrovers(err) {
		t.Fatalf("a failover without the override beside a squatted record: %v; want %s", err, workflows.ErrRecordNotDrovers)
	}
	var ae *temporal.ApplicationError
	if _, _, err := failover(workflows.Origin{Signature: oldSig, By: "mallory", RecordOverride: reason}); !errors.As(err, &ae) || ae.Type() != activities.ErrUntrustedPlan ||
		!strings.Contains(err.Error(), "the last run of its record a Drover worker made (run "+drovers+") had accepted a version signed at") {
		t.Fatalf("an older version with the override: %v; want refused, naming the version the record's last Drover run had accepted", err)
	}
	fo, foRun, err := failover(workflows.Origin{Signature: sig, By: "alice@ops", RecordOverride: reason})
	mustOK(t, err)
	record(t, ctx, srv.Client, foRun, "failover-without-record")
	allDone(t, fo.Progress)
	s := stepOf(t, fo.Progress, "without-record")
	if !strings.Contains(s.Output, `by the operator's override ("`+reason+`")`) || !strings.Contains(s.Output, "is not Drover's record") ||
		!strings.Contains(s.Output, "by key "+sig.KeyID()) || !strings.Contains(fo.Trust, "WITHOUT THE PLAN'S RECORD") ||
		!strings.Contains(s.Output, "its version is not older than the one the last run of the record a Drover worker made (run "+drovers+")") {
		t.Fatalf("the failover's step without the record: %q, trust %q", s.Output, fo.Trust)
	}
	if got := stepOf(t, fo.Progress, "promote/west/db"); got.State != workflows.StateDone {
		t.Fatalf("west's db not promoted: %+v", got)
	}

	mustOK(t, srv.Client.TerminateWorkflow(ctx, id, squat.GetRunID(), "the writer's workflow is removed"))
	var rec *workflows.PlanRecord
	simtest.Eventually(t, 3*time.Minute, "the failover in the plan's record", func() bool {
		rec, err = workflows.ReadRecord(ctx, srv.Client, "shop")
		return err == nil && rec.LastAction != nil && rec.LastAction.Action == "failover" && rec.LastAction.Outcome == workflows.StateCompleted
	})
	later := srv.Client.GetWorkflow(ctx, workflows.RecordLaterID("shop", foRun.GetRunID()), "")
	mustOK(t, later.Get(ctx, nil))
	record(t, ctx, srv.Client, later, "later-record")
	fenced, via := rec.FencedOf("east")
	if rec.Primary != "west" || via != "west" || !slices.Contains(fenced, simtest.NodeA+"/32") || !strings.Contains(rec.LastAction.WithoutRecord, reason) ||
		rec.Rebuilt == nil || rec.Rebuilt.From != drovers || rec.Version == nil || !rec.Version.SignedAt.Equal(sig.SignedAt) {
		t.Fatalf("the record after the hand-over: primary %q, east fenced %v via %q, last action %+v, rebuilt %+v, version %+v; "+
			"want west, east's CIDR through west, the reason, taken over from %s with the drill's version", rec.Primary, fenced, via, rec.LastAction, rec.Rebuilt, rec.Version, drovers)
	}
}
