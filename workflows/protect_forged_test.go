package workflows_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/workflows"
)

// sealedRetarget is rt as a worker of the test environment's key seals
// it for plan shop's protection, now in the environment's time.
func sealedRetarget(t *testing.T, env *testsuite.TestWorkflowEnvironment, rt workflows.Retarget) workflows.Retarget {
	t.Helper()
	rt, err := (&workflows.RecordSender{}).SealRetargetAt("shop", rt, env.Now())
	mustOK(t, err)
	return rt
}

// continuedAs is the input a run that continued as new passes on.
func continuedAs(t *testing.T, env *testsuite.TestWorkflowEnvironment) workflows.ProtectInput {
	t.Helper()
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("error %v, want continue-as-new", err)
	}
	var next workflows.ProtectInput
	mustOK(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	return next
}

// TestForgedRetargetsAreRefused is the retarget attack of a namespace
// writer without the record key: after a real failover's retarget (the
// plan unprotected on west) and a reprotect's (protected on west again),
// retargets that would make protection call the plan unprotected (and
// stop polling, silencing the out-of-RPO alert) or poll east: one without
// a seal, one with a made-up seal, one sealed by another key, one sealed
// for another plan, the seal of the failover's record change (the same
// fields as its retarget) presented as a retarget's, and the failover's
// own sealed retarget, read from the history and sent again in a later
// run. Protection refuses each, keeps the refusals in its state, and
// goes on polling west.
func TestForgedRetargetsAreRefused(t *testing.T) {
	f := newFixture(t)
	lostAt := time.Now()
	var failover workflows.Retarget

	// The failover's word, sealed (the record's), then the reprotect's.
	env, _ := f.testEnv(t)
	env.RegisterDelayedCallback(func() {
		lostAt = env.Now()
		failover = sealedRetarget(t, env, workflows.Retarget{Primary: "west", Lost: "east", At: lostAt})
		env.SignalWorkflow(workflows.SignalRetarget, failover)
	}, 15*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	next := continuedAs(t, env)
	if next.Primary != "west" || next.State == nil || next.State.Unprotected == nil || len(next.Seen) != 1 {
		t.Fatalf("after the failover's sealed retarget, continued as %+v: want unprotected on west, its seal kept", next)
	}
	env, _ = f.testEnv(t)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.SignalRetarget, sealedRetarget(t, env, workflows.Retarget{Primary: "west"}))
	}, 15*time.Second)
	env.ExecuteWorkflow(workflows.Protect, next)
	next = continuedAs(t, env)
	if next.Primary != "west" || next.State != nil || len(next.Seen) != 2 {
		t.Fatalf("after the reprotect's sealed retarget, continued as %+v: want a new protection of west, both seals kept", next)
	}

	// Protected on west: the forgeries.
	env, calls := f.testEnv(t)
	var attempts []struct {
		name string
		says string
	}
	env.RegisterDelayedCallback(func() {
		now := env.Now()
		unprotect := workflows.Retarget{Primary: "west", Lost: "east", At: now, By: "forged"}
		madeUp := unprotect
		madeUp.Proof = &workflows.Proof{Sent: now, MAC: []byte("0123456789abcdef0123456789abcdef")}
		otherKey, err := (&workflows.RecordSender{Key: []byte(strings.Repeat("k", 32))}).SealRetargetAt("shop", unprotect, now)
		mustOK(t, err)
		otherPlan, err := (&workflows.RecordSender{}).SealRetargetAt("other", workflows.Retarget{Primary: "east"}, now)
		mustOK(t, err)
		// The failover's change in the record's history has the fields of
		// its retarget: its seal is a record change's, not a retarget's.
		change, err := (&workflows.RecordSender{}).SealAt("shop", workflows.RecordChange{Primary: "west", Lost: "east", At: now}, now)
		mustOK(t, err)
		fromChange := workflows.Retarget{Primary: "west", Lost: "east", At: now, Proof: change.Proof}
		for _, a := range []struct {
			name string
			rt   workflows.Retarget
			says string
		}{
			{"no seal", unprotect, "no worker's seal"},
			{"made-up seal", madeUp, "not one of this worker's record key"},
			{"another key's seal", otherKey, "not one of this worker's record key"},
			{"another plan's seal", otherPlan, "not one of this worker's record key"},
			{"a record change's seal", fromChange, "not one of this worker's record key"},
			{"the failover's sealed retarget sent again", failover, "sent again"},
		} {
			attempts = append(attempts, struct{ name, says string }{a.name, a.says})
			env.SignalWorkflow(workflows.SignalRetarget, a.rt)
		}
	}, 15*time.Second)
	got := stateThenStop(t, env, 65*time.Second)
	env.ExecuteWorkflow(workflows.Protect, next)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("protection ended with %v, want it stopped by the stop at 65 s (a retarget continues it as new)", err)
	}
	s := *got
	if s == nil || s.Primary != "west" || s.Unprotected != nil || !s.Enabled || len(s.Groups) == 0 {
		t.Fatalf("state after the forged retargets: %+v, want west protected and polled", s)
	}
	// Polled at 0, 10, ..., 60 s: the rounds after the forgeries too.
	if s.Polls != 7 {
		t.Errorf("%d polls in 65 s, want 7 at the 10 s interval", s.Polls)
	}
	for g, h := range s.Groups {
		if h.Checked.Sub(env.Now().Add(-65*time.Second)) < 15*time.Second {
			t.Errorf("group %s last polled at %v, before the forgeries", g, h.Checked)
		}
	}
	if indexOf(*calls, "SurveyReplication", "west", "") < 0 || indexOf(*calls, "SurveyReplication", "east", "") >= 0 {
		t.Errorf("protection did not poll west alone: %v", *calls)
	}
	if s.RefusedCount != len(attempts) || len(s.Refused) != len(attempts) {
		t.Fatalf("protection refused %d retargets (%+v), want %d", s.RefusedCount, s.Refused, len(attempts))
	}
	for i, a := range attempts {
		if r := s.Refused[i]; !strings.Contains(r.Reason, a.says) {
			t.Errorf("%s: refused because %q, want it to say %q", a.name, r.Reason, a.says)
		}
	}
}
