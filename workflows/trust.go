package workflows

import (
	"errors"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/plans"
)

// Origin is where an action's request came from: the signature of its
// plan, and who asked. Every action's and Protect's input carries it.
type Origin struct {
	// Signature is the plan's signature (plans.Sign); the worker refuses
	// a plan without a valid one from a key it trusts.
	Signature *plans.Signature `json:"signature,omitempty"`
	// By is who started the action: drctl's identity (user@host), or its
	// --by.
	By string `json:"by,omitempty"`
}

// MemoBy is the memo field where Start and StartProtect record who
// started a workflow, for listings (drctl list).
const MemoBy = "by"

// who is the memo of a workflow started for o.
func (o Origin) memo() map[string]any {
	if o.By == "" {
		return nil
	}
	return map[string]any{MemoBy: o.By}
}

// origin returns the Origin an action's input carries.
func (o Origin) origin() Origin { return o }

// trust is the first thing every action and Protect do (invariant 9): the
// worker checks the plan's signature against the keys it trusts, in the
// VerifyPlan local activity, before any storage call or hook. A refusal
// ends the workflow with a non-retryable UntrustedPlan error naming the
// reason. It returns the note the result shows: the signer, or the
// warning of a worker that does not check.
func trust(ctx workflow.Context, p *plans.Plan, o Origin) (string, error) {
	note, err := verifyPlan(ctx, p, o)
	if err == nil && p != nil {
		// The plan's defaults, applied here once for the whole run (a
		// plan from drctl has them already; one started through the API
		// may not). Signatures cover the plan with its defaults. Its one map
		// loop fills missing keys: the order does not matter.
		//workflowcheck:ignore
		p.ApplyDefaults()
	}
	return note, err
}

func verifyPlan(ctx workflow.Context, p *plans.Plan, o Origin) (string, error) {
	var t *activities.PlanTrust
	var res activities.PlanTrustResult
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, activities.VerifyPlanOptions()), t.VerifyPlan,
		activities.VerifyPlanInput{Plan: p, Signature: o.Signature, Workflow: workflow.GetInfo(ctx).WorkflowType.Name}).Get(ctx, &res)
	if err != nil {
		var ae *temporal.ApplicationError
		if errors.As(err, &ae) && ae.Type() == activities.ErrUntrustedPlan {
			return "", temporal.NewNonRetryableApplicationError(ae.Message(), activities.ErrUntrustedPlan, nil)
		}
		return "", err
	}
	return res.Note, nil
}

// trustParent is GroupBatch's check: it acts only as the child of an
// action or Protect, which checked the whole plan before starting it. A
// client cannot start a workflow as another's child, so a GroupBatch
// started from outside (with a forged sub-plan) is refused.
func trustParent(ctx workflow.Context) error {
	if workflow.GetInfo(ctx).ParentWorkflowExecution == nil {
		return temporal.NewNonRetryableApplicationError(
			"GroupBatch refused: it runs only as the child of a DR action or of Protect, which check the plan's signature; it was started on its own",
			activities.ErrUntrustedPlan, nil)
	}
	return nil
}
