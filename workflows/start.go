package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/plans"
)

// TaskQueue is the main worker's task queue.
const TaskQueue = names.TaskQueue

// ActionID is the workflow id of a plan's DR action. Every action of a
// plan (failover, reprotect, failback, drill) shares it, so that only one
// runs at a time.
func ActionID(plan string) string { return names.ActionID(plan) }

// Register registers every workflow on a worker (or a replayer, or a test
// environment), each with its Worker Versioning behaviour (used when the
// worker runs as a Worker Deployment Version, ignored otherwise).
//
// The actions, drills, test recoveries, site actions and their children
// are pinned: a run finishes on the worker build it started on, so a
// change of what they do needs no patch (no workflow.GetVersion). Runs
// of a build that is no longer current still need that build's workers
// until they end.
//
// Protect and PlanRecorder live as long as the plan and continue as new,
// and they auto-upgrade: each run moves to the current build at its next
// workflow task. Pinned, they would never leave their first build:
// Temporal server 1.29.1 ignores the upgrade a continue-as-new asks for
// (GetTargetWorkerDeploymentVersionChanged stays false), so a pinned
// Protect would keep the build it started on alive for as long as the
// plan is protected; the override a run can be given during a delayed
// continue-as-new works, but needs an operator's command per run and
// leaves a gap in protection and in the record. Moving at the next task
// means the new build replays what the run recorded so far: a change of
// the code those two run (protect.go, record.go and what they call) goes
// behind workflow.GetVersion, and testdata/upgrade/ keeps their histories
// from before it, which TestReplay replays. Such a patch retires, with
// those histories, once no run of theirs started before its build became
// current (Protect continues as new every 100 polls, a record every 500
// changes or at its history cap, which for a quiet plan can take weeks):
// docs/guides/upgrades.md has the query that tells.
func Register(w interface {
	RegisterWorkflowWithOptions(any, workflow.RegisterOptions)
}) {
	for _, wf := range []any{Failover, Reprotect, Failback, Drill, Release, GroupBatch, Verify, SiteFailover, TestRecovery, TestCleanup, RecordLater, Scheduled} {
		w.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{VersioningBehavior: workflow.VersioningBehaviorPinned})
	}
	for _, wf := range []any{Protect, PlanRecorder} {
		w.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{VersioningBehavior: workflow.VersioningBehaviorAutoUpgrade})
	}
	// The activity that ends a workflow task (settle), on every worker
	// that runs the workflows (a replayer runs no activity).
	if a, ok := w.(interface {
		RegisterActivityWithOptions(any, activity.RegisterOptions)
	}); ok {
		a.RegisterActivityWithOptions(settleActivity, activity.RegisterOptions{Name: SettleActivity})
	}
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
	action, site := actionOf(in)
	var o Origin
	if oi, ok := in.(interface{ origin() Origin }); ok {
		o = oi.origin()
	}
	run, started, err := startOnce(ctx, c, id, o, Attributes(plan, action, site), wf, in)
	if started != nil {
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

// startOnce starts wf under id, unless a run under that id is open: then
// it returns no run and the refusal, which names the open run.
func startOnce(ctx context.Context, c client.Client, id string, o Origin, attrs temporal.SearchAttributes, wf, in any) (client.WorkflowRun, *serviceerror.WorkflowExecutionAlreadyStarted, error) {
	run, err := withAttributes(ctx, c, client.StartWorkflowOptions{
		ID:                                       id,
		Memo:                                     o.memo(),
		TaskQueue:                                TaskQueue,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
	}, attrs, wf, in)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return nil, started, err
	}
	return run, nil, err
}

// StartProtect starts a plan's Protect polling every interval (zero: the
// default), or leaves the running one be. o carries the plan's signature
// and who asked.
func StartProtect(ctx context.Context, c client.Client, p *plans.Plan, primary string, interval time.Duration, o Origin) (client.WorkflowRun, error) {
	return withAttributes(ctx, c, client.StartWorkflowOptions{
		ID:                       ProtectID(p.Metadata.Name),
		TaskQueue:                TaskQueue,
		Memo:                     o.memo(),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, Attributes(p.Metadata.Name, "protect", primary), Protect, ProtectInput{Origin: o, Plan: p, Primary: primary, Interval: interval, Promote: true})
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

// The search attributes every Drover workflow carries (registered on the
// namespace as Keyword; see docs/guides/deploy-nomad.md, step 3): its plan, its action (failover,
// reprotect, failback, drill, protect, record, verify) and the site it
// acts towards (the site taking over, or protection's primary).
var (
	AttrPlan   = temporal.NewSearchAttributeKeyKeyword(names.AttrPlan)
	AttrAction = temporal.NewSearchAttributeKeyKeyword(names.AttrAction)
	AttrSite   = temporal.NewSearchAttributeKeyKeyword(names.AttrSite)
)

// Attributes are the search attributes of a plan's workflow.
func Attributes(plan, action, site string) temporal.SearchAttributes {
	updates := []temporal.SearchAttributeUpdate{AttrPlan.ValueSet(plan), AttrAction.ValueSet(action)}
	if site != "" {
		updates = append(updates, AttrSite.ValueSet(site))
	}
	return temporal.NewSearchAttributes(updates...)
}

// actionOf names the action and its target site from an action's input.
func actionOf(in any) (action, site string) {
	switch v := in.(type) {
	case FailoverInput:
		return "failover", v.To
	case ReprotectInput:
		return "reprotect", v.To
	case FailbackInput:
		return "failback", v.To
	case DrillInput:
		return "drill", v.To
	case *FailoverInput:
		return actionOf(*v)
	case *ReprotectInput:
		return actionOf(*v)
	case *FailbackInput:
		return actionOf(*v)
	case *DrillInput:
		return actionOf(*v)
	}
	return "", ""
}

// withAttributes starts a workflow with Drover's search attributes, or,
// on a namespace where they are not registered, without them: an action
// must not be refused for want of an index. MissingAttributes tells the
// operator how to register them.
func withAttributes(ctx context.Context, c client.Client, o client.StartWorkflowOptions, attrs temporal.SearchAttributes, wf any, args ...any) (client.WorkflowRun, error) {
	o.TypedSearchAttributes = attrs
	run, err := c.ExecuteWorkflow(ctx, o, wf, args...)
	if err != nil && unregistered(err) {
		o.TypedSearchAttributes = temporal.SearchAttributes{}
		return c.ExecuteWorkflow(ctx, o, wf, args...)
	}
	return run, err
}

// unregistered tells a refusal for search attributes the namespace lacks.
func unregistered(err error) bool {
	var ia *serviceerror.InvalidArgument
	return errors.As(err, &ia) && strings.Contains(strings.ToLower(ia.Error()), "search attribute")
}

// MissingAttributes lists Drover's search attributes the namespace lacks.
func MissingAttributes(ctx context.Context, c client.Client, namespace string) ([]string, error) {
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, name := range names.SearchAttributes {
		if _, ok := resp.GetCustomAttributes()[name]; !ok {
			missing = append(missing, name)
		}
	}
	return missing, nil
}

// childAttributes are the search attributes of a child of the running
// workflow: its plan, with action and site as given. None when the
// running workflow has none (a namespace without them, an older run).
func childAttributes(ctx workflow.Context, action, site string) temporal.SearchAttributes {
	plan, ok := workflow.GetTypedSearchAttributes(ctx).GetKeyword(AttrPlan)
	if !ok {
		return temporal.SearchAttributes{}
	}
	if action == "" {
		action, _ = workflow.GetTypedSearchAttributes(ctx).GetKeyword(AttrAction)
	}
	if site == "" {
		site, _ = workflow.GetTypedSearchAttributes(ctx).GetKeyword(AttrSite)
	}
	return Attributes(plan, action, site)
}
