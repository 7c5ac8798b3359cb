package workflows_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// signedProtection is a fixture whose plan is signed at the start for
// validFor, a test environment whose worker trusts the key and whose
// plan check reads the time from clock, and the signature. The plan's
// record accepts the version (it is a workflow of its own, elsewhere).
func signedProtection(t *testing.T, validFor time.Duration, clock func() time.Time) (*fixture, *testsuite.TestWorkflowEnvironment, *plans.Signature, *gauges) {
	t.Helper()
	f := newFixture(t)
	pub, key, err := plans.GenerateKey()
	mustOK(t, err)
	m := &gauges{vals: map[string]float64{}}
	f.metrics = m
	f.trust = &activities.PlanTrust{Keys: []ed25519.PublicKey{pub}, Now: clock}
	env, _ := f.testEnv(t)
	var rs *workflows.RecordSender
	env.OnActivity(rs.AcceptPlanVersion, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in workflows.VersionRequest) (workflows.PlanVersion, error) {
			v := in.Version
			v.View = &workflows.RecordView{}
			return v, nil
		}).Maybe()
	sig, err := plans.Sign(f.plan, key, env.Now(), validFor)
	mustOK(t, err)
	return f, env, sig, m
}

// lastProtection is the last protection entry sent to the plan's record.
func (f *fixture) lastProtection() *workflows.ProtectionEntry {
	f.recordMu.Lock()
	defer f.recordMu.Unlock()
	var last *workflows.ProtectionEntry
	for _, c := range f.record {
		if c.Protection != nil {
			last = c.Protection
		}
	}
	return last
}

// TestProtectionAnnouncesItsSignaturesEnd: protection of a plan whose
// signature ends in 5 hours sets drover_plan_signature_expiry_seconds to
// the time left at each poll (4 h after an hour, 2 h after three) and
// says when in its state; at the first poll past the end it ends, and
// says so: its state and the plan's record say "protection ended: the
// plan's signature ended at …" with what to do, drover_protection_ended
// is 1, and the workflow fails with the same words as UntrustedPlan,
// not silently at a later check. An unsigned plan has no signature
// gauge.
func TestProtectionAnnouncesItsSignaturesEnd(t *testing.T) {
	const validFor = 5 * time.Hour
	f, env, sig, m := signedProtection(t, validFor, time.Now)
	ends := sig.ExpiresAt
	left := map[time.Duration]float64{}
	for _, at := range []time.Duration{65 * time.Minute, 185 * time.Minute} {
		env.RegisterDelayedCallback(func() { left[at] = m.get(workflows.MetricSignatureEnds, "shop") }, at)
	}
	mid := stateAt(t, env, 185*time.Minute, nil)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Origin: workflows.Origin{Signature: sig}, Plan: f.plan, Primary: "east", Interval: 10 * time.Minute})

	// The polls at 1 h and 3 h set the time left then.
	for at, want := range map[time.Duration]float64{65 * time.Minute: (4 * time.Hour).Seconds(), 185 * time.Minute: (2 * time.Hour).Seconds()} {
		if v := left[at]; math.Abs(v-want) > 5 {
			t.Errorf("%v in: drover_plan_signature_expiry_seconds %v, want %v", at, v, want)
		}
	}
	if s := *mid; s == nil || !s.SignatureEnds.Equal(ends) || s.Ended != "" {
		t.Fatalf("state 3 h in: %+v, want the signature's end %v and protection running", s, ends)
	}
	err := env.GetWorkflowError()
	said := "protection ended: the plan's signature ended at " + ends.UTC().Format(time.RFC3339) + "; sign it again and drctl protect start shop"
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != activities.ErrUntrustedPlan || !strings.Contains(err.Error(), said) {
		t.Fatalf("protection ended with %v, want UntrustedPlan saying %q", err, said)
	}
	if took := env.Now().Sub(ends); took < 0 || took > 10*time.Minute {
		t.Errorf("protection ended %v after its signature, want at the first poll past it", took)
	}
	if v := m.get(workflows.MetricProtectionEnded, "shop"); v != 1 {
		t.Errorf("drover_protection_ended %v, want 1", v)
	}
	if last := f.lastProtection(); last == nil || last.Running || last.Ended != said || !last.SignatureEnds.Equal(ends) {
		t.Errorf("the record was last told %+v, want protection ended by its signature", last)
	}
	v, err := env.QueryWorkflow(workflows.QueryProtect)
	mustOK(t, err)
	var s workflows.ProtectState
	mustOK(t, v.Get(&s))
	if s.Ended != said {
		t.Errorf("the state says it ended %q, want %q", s.Ended, said)
	}

	// Unsigned: no signature gauge.
	f = newFixture(t)
	m = &gauges{vals: map[string]float64{}}
	f.metrics = m
	env, _ = f.testEnv(t)
	got := stateThenStop(t, env, 25*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	mustOK(t, env.GetWorkflowError())
	m.mu.Lock()
	_, set := m.vals[workflows.MetricSignatureEnds+"|shop"]
	m.mu.Unlock()
	if s := *got; s == nil || s.Polls < 2 || !s.SignatureEnds.IsZero() || set {
		t.Errorf("an unsigned plan's protection: state %+v, signature gauge set %v; want polls and no signature end", s, set)
	}
}

// TestProtectionEndedBySignatureAtItsCheck: a run of protection that
// continued as new after its plan's signature ended (its worker's clock
// ahead, or the worker down across the end) is refused by its check, and
// says it ended because of the signature, as at a poll; a client's start
// with that signature is only refused, with no word to the record.
func TestProtectionEndedBySignatureAtItsCheck(t *testing.T) {
	for _, continued := range []bool{true, false} {
		name := map[bool]string{true: "continued", false: "started"}[continued]
		t.Run(name, func(t *testing.T) {
			var sig *plans.Signature
			f, env, sig, m := signedProtection(t, time.Hour, func() time.Time { return sig.ExpiresAt.Add(time.Minute) })
			if continued {
				env.SetContinuedExecutionRunID("the-previous-run")
			}
			env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Origin: workflows.Origin{Signature: sig}, Plan: f.plan, Primary: "east", Interval: 10 * time.Minute})
			err := env.GetWorkflowError()
			said := "protection ended: the plan's signature ended at " + sig.ExpiresAt.UTC().Format(time.RFC3339)
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || ae.Type() != activities.ErrUntrustedPlan {
				t.Fatalf("protection ended with %v, want UntrustedPlan", err)
			}
			last := f.lastProtection()
			ended := m.get(workflows.MetricProtectionEnded, "shop")
			if continued && (!strings.Contains(err.Error(), said) || last == nil || !strings.HasPrefix(last.Ended, said) || ended != 1) {
				t.Errorf("a continued run: %v; the record told %+v, drover_protection_ended %v; want %q in each", err, last, ended, said)
			}
			if !continued && (!strings.Contains(err.Error(), "has expired") || last != nil || ended != 0) {
				t.Errorf("a client's start: %v; the record told %+v, drover_protection_ended %v; want a refusal only", err, last, ended)
			}
		})
	}
}
