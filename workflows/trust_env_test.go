package workflows_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// TestTrustedPlanGetsItsDefaults: an action on a plan that came without
// its defaults (through the API, not drctl) runs on them once the worker
// trusts it, and its result says why the worker trusts it (here, the
// warning of a worker that checks no signature). Without the defaults, a
// drill of a failover would say the workloads stop "within 0s", and every
// replication would miss an RPO target of 0.
func TestTrustedPlanGetsItsDefaults(t *testing.T) {
	f := newFixture(t)
	p := *f.plan
	p.Policy = plans.Policy{}
	var res workflows.DrillResult
	_, err := f.run(t, workflows.Drill, workflows.DrillInput{Plan: &p, Action: "failover", From: "east", To: "west"}, &res)
	mustOK(t, err)
	if res.Trust != activities.UnsignedWarning {
		t.Fatalf("the result's trust note is %q, want the unsigned-plan warning", res.Trust)
	}
	if want := "stop the workloads of east, best effort within 30s"; !slices.Contains(res.Would, want) {
		t.Fatalf("the drill's plan lacks %q (the default stop deadline):\n%s", want, strings.Join(res.Would, "\n"))
	}
	if !res.OK {
		t.Fatalf("the drill of a healthy plan on its defaults failed: %v", res.Failures)
	}
}

// TestRefusalIsTheActionsFailure: when the worker refuses the plan, the
// action fails with the refusal itself, a non-retryable UntrustedPlan
// error naming the reason (not the error of the activity that checked),
// before any call. Any other failure of the check is passed on as it is:
// it is not reported as an untrusted plan.
func TestRefusalIsTheActionsFailure(t *testing.T) {
	f := newFixture(t)
	env, calls := f.env(t)
	refusal := temporal.NewNonRetryableApplicationError(`Drill refused plan "shop": the plan is not signed`, activities.ErrUntrustedPlan, nil)
	env.OnActivity("VerifyPlan", mock.Anything, mock.Anything).Return(activities.PlanTrustResult{}, refusal)
	env.ExecuteWorkflow(workflows.Drill, workflows.DrillInput{Plan: f.plan, Action: "failover", From: "east", To: "west"})
	err := env.GetWorkflowError()
	var ae *temporal.ApplicationError
	var act *temporal.ActivityError
	if !errors.As(err, &ae) || ae.Type() != activities.ErrUntrustedPlan || !ae.NonRetryable() || !strings.Contains(ae.Error(), "the plan is not signed") {
		t.Fatalf("error %v, want a non-retryable %s error naming the reason", err, activities.ErrUntrustedPlan)
	}
	if errors.As(err, &act) {
		t.Fatalf("error %v: the refusal comes wrapped in the checking activity's error", err)
	}
	if len(*calls) != 0 {
		t.Fatalf("a refused plan made calls: %v", *calls)
	}

	env, calls = f.env(t)
	env.OnActivity("VerifyPlan", mock.Anything, mock.Anything).Return(activities.PlanTrustResult{},
		temporal.NewNonRetryableApplicationError("trusted keys unreadable", "KeysUnreadable", nil))
	env.ExecuteWorkflow(workflows.Drill, workflows.DrillInput{Plan: f.plan, Action: "failover", From: "east", To: "west"})
	err = env.GetWorkflowError()
	if !errors.As(err, &ae) || ae.Type() != "KeysUnreadable" || !strings.Contains(err.Error(), "trusted keys unreadable") {
		t.Fatalf("error %v, want the check's own failure, KeysUnreadable", err)
	}
	if len(*calls) != 0 {
		t.Fatalf("a plan whose check failed made calls: %v", *calls)
	}
}
