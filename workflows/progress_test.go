package workflows_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestProgressWhileCallsRetry: while every PromoteVolume on the taking
// site fails for 60 s, each attempt after 2 s (a call that runs long and
// retries), the progress query keeps answering (invariant 10), the
// promote steps show their failed attempts and the last error, and the
// failover completes once the storage answers again. It prints the
// median and the longest query latency; it fails past a generous 5 s
// (the target is 1 s median, 2 s max), or when no step showed a retry.
func TestProgressWhileCallsRetry(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for over a minute")
	}
	srv := devserver.Start(t, nil)
	f := newFixture(t)
	f.plan.Policy.Retry.MaximumInterval = plans.Duration(5 * time.Second)
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	const faultFor = 60 * time.Second
	mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "PromoteVolume", Code: "UNAVAILABLE", Probability: 1,
		Latency: 2 * time.Second, Message: "the storage cluster is rebalancing"}}))
	f.east.Down()
	faultEnd := time.Now().Add(faultFor)
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, err)

	var (
		lat     []time.Duration
		retried *workflows.Step
		cleared bool
		failed  int
	)
	for time.Now().Before(faultEnd.Add(2 * time.Minute)) {
		if !cleared && time.Now().After(faultEnd) {
			mustOK(t, f.west.SetFaults(nil))
			cleared = true
		}
		t0 := time.Now()
		v, err := srv.Client.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), workflows.QueryProgress)
		took := time.Since(t0)
		if !cleared {
			lat = append(lat, took)
		}
		if err != nil { // the server gave up waiting for the workflow task
			failed++
			t.Logf("query after %v: %v", took.Round(time.Millisecond), err)
			continue
		}
		var p workflows.Progress
		mustOK(t, v.Get(&p))
		for _, s := range p.Steps {
			if s.State == workflows.StateRunning && s.Retries > 0 && strings.Contains(s.LastError, "rebalancing") && retried == nil {
				c := *s
				retried = &c
			}
		}
		if p.State != workflows.StateRunning {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	var res workflows.FailoverResult
	mustOK(t, run.Get(ctx, &res))
	allDone(t, res.Progress)
	if !cleared {
		t.Fatalf("the failover ended while promotion still failed: %+v", res.Progress)
	}

	slices.Sort(lat)
	median, longest := lat[len(lat)/2], lat[len(lat)-1]
	t.Logf("progress query while PromoteVolume failed for %v: %d queries, median %v, max %v",
		faultFor, len(lat), median.Round(time.Millisecond), longest.Round(time.Millisecond))
	if longest > 5*time.Second || failed > 0 {
		t.Errorf("a progress query took %v while a call retried (median %v); want well under 5 s; %d queries failed", longest, median, failed)
	}
	if retried == nil {
		t.Fatal("no running step showed a failed attempt and its error while PromoteVolume retried")
	}
	t.Logf("retrying step: %q: %d failed attempts, last error %q, note %q", retried.Name, retried.Retries, retried.LastError, retried.Note)
}

// TestStepKey: a step is named to drctl resolve (and in drctl status's
// hint) by its ID, and by its name only in the progress of an action
// from before steps had IDs.
func TestStepKey(t *testing.T) {
	for _, c := range []struct {
		step workflows.Step
		want string
	}{
		{workflows.Step{ID: "fence/east", Name: "fence east"}, "fence/east"},
		{workflows.Step{Name: "fence east"}, "fence east"},
	} {
		if got := c.step.Key(); got != c.want {
			t.Errorf("key of %+v: %q, want %q", c.step, got, c.want)
		}
	}
}
