package workflows

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/plans"
)

// An emergency failover must not wait on a plan's record that does not
// answer: a workflow that is not Drover's record holding its ID (a
// namespace writer's), or a record whose worker is away. With the
// operator's override (drctl failover --override REASON,
// Origin.RecordOverride) the failover goes on without the record's
// answer: the worker still checks the plan's signature, and its version
// against the one the newest run of the record a Drover worker made had
// accepted, read from that run's history (checkWithoutRecord: an older
// version is refused), but cannot ask which volumes stand in for the
// plan's (it acts on the plan's own). Its first step says so, with the
// operator's reason and the version it runs; its
// changes (fences made, the primary, its start and end, each carrying
// the reason and the version) are kept, not sent to whatever holds the
// record's ID, and at its end go to RecordLater, a child that outlives
// it and hands them to the record once a record of Drover's answers:
// when the workflow at the ID is Drover's record (or none runs, and it
// starts one, which takes over the last Drover run), sealed when sent.
// Drills, test recoveries, failbacks and reprotects take no override:
// without the record's answer they end with RecordNotDrovers.

// goWithoutRecord notes, as the run's first step, that the failover goes
// on without its record's answer (why), by the operator's reason and
// with the plan version its signature alone vouches for.
func (r *run) goWithoutRecord(ctx workflow.Context, p *plans.Plan, why string) {
	v := "an unsigned plan"
	if s := r.origin.Signature; s != nil {
		v = fmt.Sprintf("the plan version signed at %s by key %s", s.SignedAt.UTC().Format(time.RFC3339), s.KeyID())
		// The canonical JSON's digest, as acceptVersion's.
		//workflowcheck:ignore
		d, err := planDigest(p)
		if err == nil {
			v += " (digest " + d[:12] + ")"
		}
	}
	r.without = fmt.Sprintf("run without the plan's record by the operator's override (%q), with %s: the record did not answer: %s",
		r.origin.RecordOverride, v, why)
	s := r.add(withoutRecordStep(), false)
	now := workflow.Now(ctx)
	s.State, s.Start, s.End, s.Attempts, s.By = StateDone, now, now, 1, r.origin.By
	s.Output = r.without + "; what it does is kept for the record and goes there once one answers (" +
		recordLaterID(p.Metadata.Name, workflow.GetInfo(ctx).WorkflowExecution.RunID) + ")"
	r.progress.Trust += "; WITHOUT THE PLAN'S RECORD, by the operator's override: " + r.origin.RecordOverride
}

// recordLaterID is the workflow id of the hand-over of a run's kept
// changes to its plan's record.
func recordLaterID(plan, run string) string { return RecordID(plan) + "-later-" + run }

// RecordLaterInput is what a failover run without its record did, for
// the record.
type RecordLaterInput struct {
	Plan    string         `json:"plan"`
	Changes []RecordChange `json:"changes"`
}

// recordLater starts the hand-over of the run's kept changes, which
// outlives the run.
func (r *run) recordLater(ctx workflow.Context) {
	if len(r.held) == 0 {
		return
	}
	if ctx.Err() != nil {
		ctx, _ = workflow.NewDisconnectedContext(ctx)
	}
	plan := r.plan.Metadata.Name
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: recordLaterID(plan, workflow.GetInfo(ctx).WorkflowExecution.RunID),
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_ABANDON})
	err := workflow.ExecuteChildWorkflow(cctx, RecordLater, RecordLaterInput{Plan: plan, Changes: r.held}).GetChildWorkflowExecution().Get(ctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Error("the changes made without the plan's record were not handed over", "plan", plan, "error", err)
	}
}

// recordLaterOptions: the hand-over asks again, at most every five
// minutes, for as long as no record of Drover's answers.
var recordLaterOptions = workflow.ActivityOptions{
	StartToCloseTimeout: time.Minute,
	RetryPolicy: &temporal.RetryPolicy{InitialInterval: 5 * time.Second, BackoffCoefficient: 2, MaximumInterval: 5 * time.Minute,
		NonRetryableErrorTypes: []string{"NoRecordClient"}},
}

// RecordLater hands a failover's changes, made without its plan's
// record, to the record once one of Drover's answers. It runs only as a
// failover's child (a client cannot start a workflow under a parent):
// started on its own, it is refused, as its changes would be sealed by
// the worker.
func RecordLater(ctx workflow.Context, in RecordLaterInput) error {
	if workflow.GetInfo(ctx).ParentWorkflowExecution == nil {
		return temporal.NewNonRetryableApplicationError("RecordLater refused: it runs only as the child of a failover run without its record; it was started on its own",
			activities.ErrUntrustedPlan, nil)
	}
	if len(in.Changes) == 0 {
		return nil
	}
	c := in.Changes[0]
	c.More = in.Changes[1:]
	var rs *RecordSender
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, recordLaterOptions), rs.SendWhenRecordAnswers, RecordSend{Plan: in.Plan, Change: c}).Get(ctx, nil)
}

// SendWhenRecordAnswers sends a change, sealed, to the plan's record
// when the workflow at its ID is Drover's record and answers its query
// (to that run), or, when none runs, starts the record with it (the new
// run takes over the last one a Drover worker made). A workflow at the
// ID that is not Drover's, or a record that does not answer, is a
// retryable error: the caller asks again.
func (s *RecordSender) SendWhenRecordAnswers(ctx context.Context, in RecordSend) error {
	if s == nil || s.Client == nil {
		return temporal.NewNonRetryableApplicationError("this worker has no client to reach records", "NoRecordClient", nil)
	}
	id := RecordID(in.Plan)
	run := ""
	d, err := s.Client.DescribeWorkflowExecution(ctx, id, "")
	switch {
	case err != nil && !isNotFound(err):
		return fmt.Errorf("look at %s: %w", id, err)
	case err == nil && d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		if why := s.notDrovers(ctx, in.Plan, id); why != "" {
			return fmt.Errorf("the workflow at %s is not Drover's record: %s", id, why)
		}
		run = d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		qctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := s.Client.QueryWorkflow(qctx, id, run, QueryRecord)
		cancel()
		if err != nil {
			return fmt.Errorf("the record %s (run %s) does not answer: %w", id, run, err)
		}
	}
	now := time.Now()
	c, err := s.SealAt(in.Plan, in.Change, now)
	if err != nil {
		return err
	}
	if run != "" {
		// To the run that answered: not to whatever holds the ID by now.
		return s.Client.SignalWorkflow(ctx, id, run, SignalRecord, c)
	}
	first, err := s.SealAt(in.Plan, RecordChange{At: now}, now)
	if err != nil {
		return err
	}
	_, err = s.Client.SignalWithStartWorkflow(ctx, id, SignalRecord, c, client.StartWorkflowOptions{ID: id, TaskQueue: TaskQueue},
		PlanRecorder, PlanRecordInput{Plan: in.Plan, First: &first})
	if err != nil {
		return fmt.Errorf("start %s with the changes: %w", id, err)
	}
	return nil
}
