package main

import (
	"strings"
	"testing"

	"github.com/drover-dr/drover/workflows"
)

// TestActionPageState: the dashboard's action page names what an action
// waits for, not Temporal's "running": a paused guard step (a fence) is
// paused, with the resolve command that skips it only with --override;
// a gate is waiting for approval, with the approve command; a site
// action that left plans behind, completed in Temporal, is partial; an
// action that ended on a failed step (Temporal's failed, the run's
// aborted) failed at that step, one the operator aborted aborted at it.
func TestActionPageState(t *testing.T) {
	fence := &workflows.Step{ID: "fence/east", Name: "fence east", State: workflows.StatePaused, Attempts: 1, Guard: true}
	gate := &workflows.Step{ID: "approve/beforePromote", Name: "approve beforePromote", State: workflows.StateWaiting}
	cases := []struct {
		name, id, status string
		p                *workflows.Progress
		shown            string
		next             []string
	}{
		{"paused fence", workflows.ActionID("shop"), "running", &workflows.Progress{Action: "failover", Steps: []*workflows.Step{fence}},
			workflows.StatePaused, []string{"drctl resolve shop --retry", "--skip --override"}},
		{"gate", workflows.ActionID("shop"), "running", &workflows.Progress{Action: "failover", Steps: []*workflows.Step{gate}},
			workflows.StateWaiting, []string{"drctl approve shop"}},
		{"partial site action", workflows.SiteActionID("east"), "completed", &workflows.Progress{Action: workflows.ActionSiteFailover, State: workflows.StatePartial},
			workflows.StatePartial, nil},
		{"failed at a step (policy abort)", workflows.ActionID("shop"), "failed", &workflows.Progress{Action: "failover", State: workflows.StateAborted,
			Steps: []*workflows.Step{{ID: "fence/east", Name: "fence east", State: workflows.StateDone}, {ID: "promote/west/data", Name: "promote data on west", State: workflows.StateFailed}}},
			`failed at step "promote data on west"`, nil},
		{"aborted by the operator", workflows.ActionID("shop"), "failed", &workflows.Progress{Action: "failover", State: workflows.StateAborted,
			Steps: []*workflows.Step{{ID: "fence/east", Name: "fence east", State: workflows.StateAborted, Decided: workflows.DecisionAbort}}},
			`aborted at step "fence east"`, nil},
		{"running", workflows.ActionID("shop"), "running", &workflows.Progress{Action: "failover", Steps: []*workflows.Step{{ID: "promote/west/data", State: workflows.StateRunning}}},
			"running", nil},
	}
	for _, c := range cases {
		v := &stepsView{ID: c.id, Status: c.status, Progress: c.p}
		v.shown()
		next := strings.Join(v.Next, "\n")
		if v.Shown != c.shown {
			t.Errorf("%s: shown %q, want %q", c.name, v.Shown, c.shown)
		}
		for _, w := range c.next {
			if !strings.Contains(next, w) {
				t.Errorf("%s: commands %q lack %q", c.name, next, w)
			}
		}
		if c.next == nil && len(v.Next) > 0 {
			t.Errorf("%s: commands %q for an action that waits for none", c.name, next)
		}
	}
}
