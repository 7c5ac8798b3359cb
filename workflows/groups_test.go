package workflows_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// count is how many calls of name were made.
func count(calls []call, name string) int {
	n := 0
	for _, c := range calls {
		if c.name == name {
			n++
		}
	}
	return n
}

// allRoles checks that every unit of a site has the role.
func allRoles(t *testing.T, s *simtest.Site, want sim.Role) {
	t.Helper()
	for _, u := range s.Snapshot().Units {
		if u.Role != want {
			t.Fatalf("%s %s is %s, want %s", u.Kind, u.ID, u.Role, want)
		}
	}
}

// TestFailoverFansOut: a plan of more than GroupsPerChild groups promotes
// them in child workflows, one step per batch and priority; a batch that
// failed on some groups pauses, and its retry promotes only those.
func TestFailoverFansOut(t *testing.T) {
	f := newFixtureN(t, 150) // 153 groups: 2 at priority 0, 1 at 1, 75 at 2 and at 3
	f.east.Down()
	mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "PromoteVolume", Code: "INVALID_ARGUMENT", Count: 2, Message: "pool busy"}}))
	env, calls := f.env(t)
	var paused string
	env.RegisterDelayedCallback(func() {
		if s := pausedStep(t, env); s != nil {
			paused = s.Name + ": " + s.LastError
			send(t, env, workflows.UpdateResolve, workflows.Decision{Step: s.Name, Action: workflows.DecisionRetry}, nil, nil)
		}
	}, time.Hour)
	env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, env.GetWorkflowError())
	var res workflows.FailoverResult
	mustOK(t, env.GetWorkflowResult(&res))
	allDone(t, res.Progress)

	if !strings.Contains(paused, "failed on 2 of") || !strings.Contains(paused, "pool busy") {
		t.Fatalf("paused step %q; want a batch naming its 2 failed groups", paused)
	}
	var batches []string
	for _, s := range res.Steps {
		if strings.HasPrefix(s.Name, "promote ") {
			batches = append(batches, s.Name)
		}
	}
	want := []string{
		"promote db … logs on west (2 groups)",
		"promote loose on west (a batch of 1)",
		"promote vg-0001 … vg-0149 on west (75 groups)",
		"promote vg-0002 … vg-0150 on west (75 groups)",
	}
	if strings.Join(batches, "\n") != strings.Join(want, "\n") {
		t.Fatalf("promotion steps:\n%s\nwant:\n%s", strings.Join(batches, "\n"), strings.Join(want, "\n"))
	}
	// Every group once, and the two failed ones once more.
	// Each group promoted, and the failed ones again: at least one call
	// a group and one per failed attempt. Not exactly so many: a batch's
	// local attempt stops starting calls after its report time, and a
	// regular batch makes what it left (or all of it, the local attempt
	// cut under load), so how many calls the batches hold depends on the
	// machine's speed; the roles are the outcome.
	if n := count(*calls, "PromoteVolume"); n < 153+2 {
		t.Fatalf("%d PromoteVolume calls, want at least 155", n)
	}
	allRoles(t, f.west, sim.RolePrimary)
	mustOK(t, f.east.Up())
	if r := sim.Check(f.east.Snapshot(), f.west.Snapshot()); !r.OK() {
		t.Fatalf("invariants: %s", r)
	}
}

// TestFailbackRollsBackBatches: in a plan that fans out, a group that
// cannot be promoted on the target (it names a volume of another group,
// which the storage refuses) rolls the failback back: the groups already
// promoted there are demoted again, in batches, and the source is primary
// again everywhere.
func TestFailbackRollsBackBatches(t *testing.T) {
	f := newFixtureN(t, 150)
	f.plan.VolumeGroups = append(f.plan.VolumeGroups, plans.VolumeGroup{Name: "broken", Priority: 9,
		Sites: map[string]plans.GroupRef{"east": {}, "west": {Volumes: []string{"v1"}}}})
	env, calls := f.env(t)
	env.ExecuteWorkflow(workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "east", To: "west"})
	var ae *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &ae) || ae.Type() != workflows.ErrRolledBack || !strings.Contains(ae.Error(), "replicate the group") {
		t.Fatalf("error %v, want a rollback naming the cause", err)
	}
	// 153 promoted on west, then demoted with force; all promoted on east.
	// At least so many calls: a local attempt cut at its budget under
	// load is asked again, which adds calls, not outcomes; the roles
	// below are the outcome.
	if p, d := count(*calls, "PromoteVolume"), count(*calls, "DemoteVolume"); p < 153+1+153 || d < 153+153 {
		t.Fatalf("%d promotions and %d demotions; want at least 307 and 306", p, d)
	}
	allRoles(t, f.east, sim.RolePrimary)
	allRoles(t, f.west, sim.RoleSecondary)
	if r := sim.Check(f.east.Snapshot(), f.west.Snapshot()); !r.OK() {
		t.Fatalf("invariants: %s", r)
	}
}

// TestBatchRetriesShowOnTheStep: in a plan that fans out, promotions that
// fail with a retryable code are tried again after the plan's back-off,
// and while the step waits for that, it shows the failed round (its
// retries, the storage's error, what comes next) to the progress query;
// then every group ends primary, each failed group called again.
func TestBatchRetriesShowOnTheStep(t *testing.T) {
	f := newFixtureN(t, 150)
	f.east.Down()
	mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "PromoteVolume", Code: "UNAVAILABLE", Count: 2, Message: "pool rebalancing"}}))
	env, calls := f.env(t)
	var seen *workflows.Step
	env.RegisterDelayedCallback(func() {
		for _, s := range progressOf(t, env).Steps {
			if s.State == workflows.StateRunning && strings.HasPrefix(s.Name, "promote ") {
				c := *s
				seen = &c
			}
		}
	}, 500*time.Millisecond)
	env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, env.GetWorkflowError())
	var res workflows.FailoverResult
	mustOK(t, env.GetWorkflowResult(&res))
	allDone(t, res.Progress)
	if seen == nil || seen.Retries == 0 || !strings.Contains(seen.LastError, "pool rebalancing") || !strings.Contains(seen.Note, "2 groups failed attempt 1, next in") {
		t.Fatalf("the retrying step showed %+v; want its retries, the storage's error and the next attempt", seen)
	}
	t.Logf("while retrying: %s: %d retries, %q, %q", seen.Name, seen.Retries, seen.LastError, seen.Note)
	// Each group promoted, and the failed ones again: at least one call
	// a group and one per failed attempt. Not exactly so many: a batch's
	// local attempt stops starting calls after its report time, and a
	// regular batch makes what it left (or all of it, the local attempt
	// cut under load), so how many calls the batches hold depends on the
	// machine's speed; the roles are the outcome.
	if n := count(*calls, "PromoteVolume"); n < 153+2 {
		t.Fatalf("%d PromoteVolume calls, want at least 155", n)
	}
	allRoles(t, f.west, sim.RolePrimary)
}

// TestBatchHonoursMaximumAttempts: in a plan that fans out, a group whose
// promotion keeps failing with a retryable code is tried exactly
// policy.retry.maximumAttempts times, then the step fails naming it; the
// other groups are promoted once each.
func TestBatchHonoursMaximumAttempts(t *testing.T) {
	f := newFixtureN(t, 150)
	f.east.Down()
	f.plan.Policy.Retry.MaximumAttempts = 3
	f.plan.Policy.OnFailure = "abort"
	mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "PromoteVolume", Code: "UNAVAILABLE", Probability: 1, Subject: "vg-0001", Message: "pool offline"}}))
	env, calls := f.env(t)
	env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	var ae *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &ae) || !strings.Contains(ae.Error(), "vg-0001") || !strings.Contains(ae.Error(), "pool offline") {
		t.Fatalf("error %v, want the step to fail naming vg-0001", err)
	}
	per := map[string]int{}
	for _, c := range *calls {
		if c.name == "PromoteVolume" {
			per[c.subject]++
		}
	}
	// vg-0003 shares vg-0001's priority (vg-0002's comes after the
	// failure).
	if per["vg-0001"] != 3 || per["vg-0003"] != 1 {
		t.Fatalf("vg-0001 tried %d times, vg-0003 %d; want maximumAttempts (3) and 1", per["vg-0001"], per["vg-0003"])
	}
}

// TestBatchStopsAtTheTimeLimit: a group that keeps failing is tried
// again only while the next try would start before the call's time limit
// is spent; then the step fails, naming the group.
func TestBatchStopsAtTheTimeLimit(t *testing.T) {
	f := newFixtureN(t, 150)
	f.east.Down()
	f.plan.Policy.Retry = plans.Retry{InitialInterval: plans.Duration(time.Second), MaximumInterval: plans.Duration(time.Second),
		BackoffCoefficient: 1, TimeLimit: plans.Duration(5 * time.Second)}
	f.plan.Policy.OnFailure = "abort"
	mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "PromoteVolume", Code: "UNAVAILABLE", Probability: 1, Subject: "vg-0001", Message: "pool offline"}}))
	env, _ := f.env(t)
	// When (in the workflow's time) each batch holding vg-0001 started:
	// a local attempt cut under load and the regular batch that takes
	// over start at the same time, one try of the plan's.
	var at []time.Duration
	var first time.Time
	f.onCall = func(c call) {
		if c.name == "PromoteVolume" && c.subject == "vg-0001" {
			if first.IsZero() {
				first = env.Now()
			}
			if d := env.Now().Sub(first).Round(time.Second); !slices.Contains(at, d) {
				at = append(at, d)
			}
		}
	}
	env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	var ae *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &ae) || !strings.Contains(ae.Error(), "vg-0001") {
		t.Fatalf("error %v, want the step to fail naming vg-0001", err)
	}
	// Tries at 0 s, 1 s, 2 s, 3 s and 4 s start within the 5 s limit;
	// a sixth would start at 5 s, when the limit is spent.
	if want := []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}; !slices.Equal(at, want) {
		t.Fatalf("vg-0001 tried at %v within a 5 s limit at 1 s intervals, want %v", at, want)
	}
}
