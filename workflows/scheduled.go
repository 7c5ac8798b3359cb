package workflows

import (
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// A schedule (drctl schedule, on Temporal Schedules) runs a plan's drill
// or test recovery on a cadence. Temporal starts each run of a schedule
// under a workflow id of its own (the schedule's id and the time), which
// would escape the one-action-per-plan rule (invariant 2) if the
// schedule started the drill itself. So the schedule starts Scheduled,
// which starts the drill under the plan's action id (the test recovery
// under its test id) as its child, and waits for it: a plan busy with
// another action (a failover, say) refuses the child, and this run
// fails, naming it. The child carries the plan's signature as the
// schedule was made with it (signed plans only: the worker checks it as
// for any action) and, as who started it, the schedule and its creator.

// The kinds of run a schedule makes.
const (
	ScheduledDrill = "drill"
	ScheduledTest  = "test-recovery"
)

// ScheduledInput is what a schedule starts each time: a drill or a test
// recovery (unattended, with its time limit) of one plan.
type ScheduledInput struct {
	Schedule  string             `json:"schedule"`
	CreatedBy string             `json:"createdBy"`
	Kind      string             `json:"kind"`
	Drill     *DrillInput        `json:"drill,omitempty"`
	Test      *TestRecoveryInput `json:"test,omitempty"`
}

// ScheduledBy is who a scheduled run is recorded as started by.
func ScheduledBy(schedule, createdBy string) string {
	return fmt.Sprintf("schedule %s (created by %s)", schedule, createdBy)
}

// ScheduledResult names the run the schedule started and how it ended.
type ScheduledResult struct {
	WorkflowID string `json:"workflowId"`
	RunID      string `json:"runId"`
	// OK: the drill's checks all passed, or the test's workloads came up
	// and were cleaned away.
	OK bool `json:"ok"`
}

// ErrScheduledBusy fails a scheduled run whose plan was busy.
const ErrScheduledBusy = "PlanBusy"

// Scheduled runs one scheduled drill or test recovery as a child under
// the plan's own id, and fails when the child could not start or did
// not succeed.
func Scheduled(ctx workflow.Context, in ScheduledInput) (*ScheduledResult, error) {
	by := ScheduledBy(in.Schedule, in.CreatedBy)
	var id, plan, action, site string
	var wf, arg any
	switch {
	case in.Kind == ScheduledDrill && in.Drill != nil && in.Drill.Plan != nil:
		d := *in.Drill
		d.By = by
		plan, action, site, wf, arg = d.Plan.Metadata.Name, "drill", d.To, Drill, d
		id = ActionID(plan)
	case in.Kind == ScheduledTest && in.Test != nil && in.Test.Plan != nil:
		t := *in.Test
		t.By, t.Unattended = by, true
		plan, action, site, wf, arg = t.Plan.Metadata.Name, "test-recovery", t.At, TestRecovery, t
		id = TestRecoveryID(plan)
	default:
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("schedule %s: a %q run without its input", in.Schedule, in.Kind), "BadInput", nil)
	}
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            id,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		// The drill or test goes on (and a test cleans up) if this run
		// is ended.
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		TypedSearchAttributes: Attributes(plan, action, site),
		Memo:                  Origin{By: by}.memo(),
	})
	f := workflow.ExecuteChildWorkflow(cctx, wf, arg)
	var exec workflow.Execution
	err := f.GetChildWorkflowExecution().Get(ctx, &exec)
	var busy *temporal.ChildWorkflowExecutionAlreadyStartedError
	if errors.As(err, &busy) {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"plan %q is busy: workflow %s runs already, so the scheduled %s did not start", plan, id, action), ErrScheduledBusy, nil)
	}
	if err != nil {
		return nil, err
	}
	res := &ScheduledResult{WorkflowID: exec.ID, RunID: exec.RunID}
	switch in.Kind {
	case ScheduledDrill:
		var dr DrillResult
		if err := f.Get(ctx, &dr); err != nil {
			return res, err
		}
		if res.OK = dr.OK; !dr.OK {
			return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("the scheduled drill of %s failed %d check(s)", plan, dr.Failed), "DrillFailed", nil)
		}
	default:
		var tr TestRecoveryResult
		if err := f.Get(ctx, &tr); err != nil {
			return res, err
		}
		if res.OK = tr.Cleaned; !tr.Cleaned {
			return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("the scheduled test recovery of %s left copies behind (drctl test-recovery --cleanup)", plan), "TestNotCleaned", nil)
		}
	}
	return res, nil
}
