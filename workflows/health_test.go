package workflows_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// TestStartWaitsUntilHealthyWithItsOwnTimeout: a workload that is not
// healthy at the first look is waited for until it is (the start step
// ends saying so, after a second check), one healthy at the first look
// is not looked at again, and each look has that workload's own
// healthTimeout, not another workload's.
func TestStartWaitsUntilHealthyWithItsOwnTimeout(t *testing.T) {
	f := newFixture(t)
	checked := filepath.Join(t.TempDir(), "checked")
	own := map[string]time.Duration{"pg": 7 * time.Minute, "web": 3 * time.Minute}
	for i := range f.plan.Workloads {
		w := &f.plan.Workloads[i]
		w.HealthTimeout = plans.Duration(own[w.Name])
		if w.Name == "pg" {
			// Unhealthy at the first check, healthy from the second.
			e := *w.Sites["west"].Exec
			e.Health = "test -f " + checked + " || { touch " + checked + "; exit 1; }"
			w.Sites["west"] = plans.WorkloadRef{Exec: &e}
		}
	}
	f.east.Down()
	env, _ := f.env(t)
	got := map[string][]time.Duration{}
	seen := func(in activities.HealthInput) { got[in.Workload.Name] = append(got[in.Workload.Name], in.Timeout) }
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		var in activities.HealthInput
		if info.ActivityType.Name == "WaitHealthy" && args.Get(&in) == nil {
			seen(in)
		}
	})
	env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, args []any) {
		if info.ActivityType.Name != "WaitHealthy" || len(args) == 0 {
			return
		}
		if in, ok := args[0].(activities.HealthInput); ok {
			seen(in)
		}
	})
	env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	var res workflows.FailoverResult
	mustOK(t, env.GetWorkflowError())
	mustOK(t, env.GetWorkflowResult(&res))
	allDone(t, res.Progress)
	if _, err := os.Stat(checked); err != nil {
		t.Fatalf("pg's health was never checked unhealthy: %v", err)
	}
	if len(got["pg"]) < 2 {
		t.Errorf("pg's health was looked at %d times, want a first look and a wait after it", len(got["pg"]))
	}
	// web is healthy at the first look: no wait after it.
	if len(got["web"]) != 1 {
		t.Errorf("web's health was looked at %d times, want once", len(got["web"]))
	}
	for name, timeouts := range got {
		for _, d := range timeouts {
			if d != own[name] {
				t.Errorf("%s's health wait had a timeout of %v, want its own %v", name, d, own[name])
			}
		}
	}
	for _, s := range res.Steps {
		if s.Name == "start pg on west" && !strings.Contains(s.Output, "healthy:") {
			t.Errorf("pg's start ended without saying it is healthy: %q", s.Output)
		}
	}
}
