package workflows

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/plans"
)

// TaskQueue is the main worker's task queue.
const TaskQueue = names.TaskQueue

// ActionID is the workflow id of a plan's DR action. Every action of a
// plan (failover, reprotect, failback, drill) shares it, so that only one
// runs at a time.
func ActionID(plan string) string { return names.ActionID(plan) }

// Register registers every action on a worker (or a replayer, or a test
// environment).
func Register(w interface{ RegisterWorkflow(any) }) {
	w.RegisterWorkflow(Failover)
	w.RegisterWorkflow(Reprotect)
	w.RegisterWorkflow(Failback)
	w.RegisterWorkflow(Drill)
	w.RegisterWorkflow(Protect)
	w.RegisterWorkflow(GroupBatch)
	w.RegisterWorkflow(PlanRecorder)
	w.RegisterWorkflow(Verify)
}

// BusyError refuses an action because another one of the plan runs.
type BusyError struct {
	Plan      string
	Running   string // the running action's workflow type
	RunID     string
	StartedAt time.Time
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("plan %q already has a DR action running: %s (workflow %s, run %s, started %s); wait for it, or resolve it with drctl",
		e.Plan, e.Running, ActionID(e.Plan), e.RunID, e.StartedAt.UTC().Format(time.RFC3339))
}

// Start starts a DR action (wf, one of the workflows above) for a plan,
// or refuses with a *BusyError naming the action that is running.
func Start(ctx context.Context, c client.Client, plan string, wf, in any) (client.WorkflowRun, error) {
	id := ActionID(plan)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                                       id,
		TaskQueue:                                TaskQueue,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
	}, wf, in)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		busy := &BusyError{Plan: plan, RunID: started.RunId}
		if d, derr := c.DescribeWorkflowExecution(ctx, id, ""); derr == nil {
			info := d.GetWorkflowExecutionInfo()
			busy.Running = info.GetType().GetName()
			busy.RunID = info.GetExecution().GetRunId()
			busy.StartedAt = info.GetStartTime().AsTime()
		}
		return nil, busy
	}
	return run, err
}

// StartProtect starts a plan's Protect polling every interval (zero: the
// default), or leaves the running one be. o carries the plan's signature
// and who asked.
func StartProtect(ctx context.Context, c client.Client, p *plans.Plan, primary string, interval time.Duration, o Origin) (client.WorkflowRun, error) {
	return c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       ProtectID(p.Metadata.Name),
		TaskQueue:                TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, Protect, ProtectInput{Origin: o, Plan: p, Primary: primary, Interval: interval})
}

// ReadProtect returns what a plan's Protect last recorded, for a failover
// to fence the recorded clients and report its RPO estimate.
func ReadProtect(ctx context.Context, c client.Client, plan string) (*ProtectState, error) {
	v, err := c.QueryWorkflow(ctx, ProtectID(plan), "", QueryProtect)
	if err != nil {
		return nil, fmt.Errorf("read the protection state of plan %q: %w", plan, err)
	}
	var s ProtectState
	if err := v.Get(&s); err != nil {
		return nil, err
	}
	return &s, nil
}
