package activities

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/plans"
)

// ErrUntrustedPlan is the error type of a plan the worker refuses: not
// signed, signed by a key it does not trust, changed since signing, or
// expired. It is never retried.
const ErrUntrustedPlan = "UntrustedPlan"

// UnsignedWarning is the note an action carries when the worker runs it
// without checking its plan's signature.
const UnsignedWarning = "WARNING: this worker runs with --allow-unsigned-plans: plans are not checked, anyone who can start a workflow in the namespace can run any plan"

// PlanTrust decides whether the worker acts on a plan: a signature by one
// of Keys (plans.Verify), checked as the first thing every action and
// Protect do, before any storage call or hook. AllowUnsigned accepts a
// plan without a signature, for development; a signature that is there
// is checked all the same.
type PlanTrust struct {
	Keys          []ed25519.PublicKey
	AllowUnsigned bool
	// Now, when set, replaces time.Now (for tests).
	Now func() time.Time
}

// VerifyPlanInput is the plan an action was started with and its
// signature.
type VerifyPlanInput struct {
	Plan      *plans.Plan      `json:"plan"`
	Signature *plans.Signature `json:"signature,omitempty"`
	Workflow  string           `json:"workflow"`
}

// PlanTrustResult says why the plan is trusted, for the action's result.
type PlanTrustResult struct {
	// Signer is the key id of the signature; empty when unsigned.
	Signer string `json:"signer,omitempty"`
	// Note is what the action shows: who signed and when, or the
	// development-mode warning.
	Note string `json:"note"`
}

// VerifyPlan checks the plan against the worker's trusted keys. It runs
// as a local activity: its answer is recorded in the history, so that a
// replay on a worker whose keys changed since does not take another path.
func (t *PlanTrust) VerifyPlan(_ context.Context, in VerifyPlanInput) (PlanTrustResult, error) {
	if in.Plan == nil {
		return PlanTrustResult{}, untrusted(in, errors.New("the input has no plan"))
	}
	now := time.Now()
	if t.Now != nil {
		now = t.Now()
	}
	if in.Signature == nil && t.AllowUnsigned {
		return PlanTrustResult{Note: UnsignedWarning}, nil
	}
	if len(t.Keys) == 0 && !t.AllowUnsigned {
		return PlanTrustResult{}, untrusted(in, errors.New("this worker trusts no plan key: start it with --trusted-plan-key FILE"))
	}
	if err := plans.Verify(in.Plan, in.Signature, t.Keys, now); err != nil {
		return PlanTrustResult{}, untrusted(in, err)
	}
	s := in.Signature
	note := fmt.Sprintf("plan signed by key %s at %s", s.KeyID(), s.SignedAt.UTC().Format(time.RFC3339))
	if !s.ExpiresAt.IsZero() {
		note += fmt.Sprintf(", good until %s", s.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return PlanTrustResult{Signer: s.KeyID(), Note: note}, nil
}

func untrusted(in VerifyPlanInput, err error) error {
	hint := ""
	switch {
	case errors.Is(err, plans.ErrUnsigned):
		hint = ": sign it (drctl plan sign, or drctl --sign-key) with a key the worker trusts"
	case errors.Is(err, plans.ErrUnknownKey):
		hint = ": add the signer's public key to the worker's --trusted-plan-key, or sign with a trusted key"
	case errors.Is(err, plans.ErrTampered):
		hint = ": sign the plan as it is now"
	}
	name := ""
	if in.Plan != nil {
		name = in.Plan.Metadata.Name
	}
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("%s refused plan %q: %v%s", in.Workflow, name, err, hint), ErrUntrustedPlan, nil)
}

// VerifyPlanOptions are the options of the VerifyPlan local activity:
// a few seconds, no retry (the answer will not change).
func VerifyPlanOptions() workflow.LocalActivityOptions {
	return workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1, NonRetryableErrorTypes: []string{ErrUntrustedPlan}},
	}
}
