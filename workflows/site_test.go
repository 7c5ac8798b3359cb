package workflows_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// sitePlans splits the fixture's plan into three plans over the same pair
// of sites, one group each: shop (db and the workloads) and logs in tier
// 0, loose in tier 1. shop and logs list east's CIDRs; loose lists none,
// and protection recorded a client for it.
func sitePlans(t *testing.T, f *fixture) []workflows.SitePlan {
	t.Helper()
	one := func(name string, tier int, group string, eastCIDRs []string, workloads bool) *plans.Plan {
		p := *f.plan
		p.Metadata = plans.Metadata{Name: name, Tier: tier}
		p.Sites = slices.Clone(f.plan.Sites)
		p.Sites[0].Fence = plans.Fence{CIDRs: eastCIDRs}
		i := slices.IndexFunc(f.plan.VolumeGroups, func(g plans.VolumeGroup) bool { return g.Name == group })
		p.VolumeGroups = []plans.VolumeGroup{f.plan.VolumeGroups[i]}
		if !workloads {
			p.Workloads = nil
		}
		return &p
	}
	return []workflows.SitePlan{
		// Listed out of order: the site action orders them by tier.
		{Plan: one("loose", 1, "loose", nil, false), Clients: []string{"127.0.0.10/32"}},
		{Plan: one("shop", 0, "db", []string{simtest.NodeA + "/32"}, true)},
		{Plan: one("logs", 0, "logs", []string{"127.0.0.9/32"}, false)},
	}
}

// siteEnv is the test environment of a site action over sitePlans: the
// records of logs and loose (shop's is the fixture's) take its signals.
func siteEnv(t *testing.T, f *fixture) (*testsuite.TestWorkflowEnvironment, *[]call) {
	t.Helper()
	env, calls := f.env(t)
	for _, name := range []string{"logs", "loose"} {
		env.OnSignalExternalWorkflow(mock.Anything, workflows.RecordID(name), "", workflows.SignalRecord, mock.Anything).Return(nil)
	}
	return env, calls
}

// TestSiteFailoverFencesOncePerStorageInTiers: a site failover of three
// plans whose surviving copies live on one storage system fences the
// lost site's clients there once, for the union of the plans' CIDRs
// (listed or recorded), verifies it, and fails the plans over tier by
// tier: no promotion of the tier-1 plan starts before tier 0's plans are
// promoted and their workloads healthy. Each plan's own failover finds its CIDRs fenced
// without fencing again, and every plan completes with its RTO.
func TestSiteFailoverFencesOncePerStorageInTiers(t *testing.T) {
	f := newFixture(t)
	f.east.Down()
	sps := sitePlans(t, f)
	env, calls := siteEnv(t, f)
	env.ExecuteWorkflow(workflows.SiteFailover, workflows.SiteFailoverInput{From: "east", To: "west", Plans: sps})
	mustOK(t, env.GetWorkflowError())
	var res workflows.SiteFailoverResult
	mustOK(t, env.GetWorkflowResult(&res))
	allDone(t, res.Progress)
	// The action's own trust says the worker runs unsigned plans, once.
	if strings.Count(res.Trust, activities.UnsignedWarning) != 1 || !strings.Contains(res.Trust, "shop") || !strings.Contains(res.Trust, "logs") || !strings.Contains(res.Trust, "loose") {
		t.Errorf("the site failover's trust %q: want the unsigned warning once, for shop, logs and loose", res.Trust)
	}

	union := []string{simtest.NodeA + "/32", "127.0.0.10/32", "127.0.0.9/32"}
	fences := 0
	for _, c := range *calls {
		if c.name == "FenceClusterNetwork" {
			fences++
		}
	}
	got := f.west.FencedCIDRs()
	slices.Sort(got)
	slices.Sort(union)
	if fences != 1 || !slices.Equal(got, union) {
		t.Fatalf("%d fence call(s), west lists %v: want one call fencing %v", fences, got, union)
	}
	// Tier 0 ends with shop's workloads started and healthy.
	lastTier0 := max(lastIndexOfSubject(*calls, "PromoteVolume", "vg-1"), lastIndexOfSubject(*calls, "PromoteVolume", "vg-2"),
		lastIndexOfSubject(*calls, "WaitHealthy", "web"), lastIndexOfSubject(*calls, "WaitHealthy", "pg"))
	firstTier1 := indexOf(*calls, "PromoteVolume", "west", "solo")
	if lastTier0 < 0 || firstTier1 < 0 || firstTier1 < lastTier0 {
		t.Fatalf("tier 1 promoted at call %d, tier 0's last promotion at %d: %v", firstTier1, lastTier0, *calls)
	}
	// One storage system: its fence and verification are steps of their
	// own, numbered from 1, saying what they did.
	if s := stepOf(t, res.Progress, "site-fence/west/1"); !strings.HasPrefix(s.Output, "fenced ") || !strings.HasSuffix(s.Output, " for 3 plan(s): logs, shop, loose") {
		t.Errorf("the site fence says %q", s.Output)
	}
	if s := stepOf(t, res.Progress, "site-verify-fence/west/1"); s.Output != "3 CIDRs fenced" {
		t.Errorf("the fence's verification says %q", s.Output)
	}
	for _, name := range []string{"logs", "shop", "loose"} {
		if s := stepOf(t, res.Progress, "plan-failover/"+name); s.Attempts != 1 || !strings.HasPrefix(s.Output, "completed as workflow "+workflows.ActionID(name)+", RTO ") {
			t.Errorf("plan step %s: %d attempt(s), %q", name, s.Attempts, s.Output)
		}
	}
	if len(res.Plans) != 3 {
		t.Fatalf("outcomes %+v, want three", res.Plans)
	}
	for i, want := range []string{"logs", "shop", "loose"} {
		o := res.Plans[i]
		if o.Plan != want || o.State != workflows.StateCompleted || o.RTO < 0 || o.RTO > res.RTO || o.Workflow != workflows.ActionID(want) {
			t.Errorf("outcome %d: %+v, want %s completed with an RTO within the site's %v", i, o, want, res.RTO)
		}
	}
	for _, key := range []string{"vg/vg-1", "vg/vg-2", "vol/solo"} {
		if u := f.west.Snapshot().Unit(key); u == nil || u.Role != sim.RolePrimary {
			t.Fatalf("%s on west: %+v, want primary", key, u)
		}
	}
	// The shop plan's record learned its own CIDRs as fenced.
	f.recordMu.Lock()
	defer f.recordMu.Unlock()
	i := slices.IndexFunc(f.record, func(c workflows.RecordChange) bool { return c.Fenced != nil })
	if i < 0 || !slices.Equal(f.record[i].Fenced.CIDRs, []string{simtest.NodeA + "/32"}) {
		t.Fatalf("shop's record changes %+v, want its CIDR fenced", f.record)
	}
}

// TestSiteFailoverLeavesOutPlansThatDoNotFit: a plan of the site action
// that does not have both sites is refused before anything is done, and
// its CIDRs are not fenced; the others fail over.
func TestSiteFailoverLeavesOutPlansThatDoNotFit(t *testing.T) {
	f := newFixture(t)
	f.east.Down()
	sps := sitePlans(t, f)
	odd := *sps[2].Plan
	odd.Sites = slices.Clone(odd.Sites)
	odd.Sites[1].Name = "north" // logs: east and north, no west
	for i := range odd.VolumeGroups {
		g := odd.VolumeGroups[i]
		g.Sites = map[string]plans.GroupRef{"east": g.Sites["east"], "north": g.Sites["west"]}
		odd.VolumeGroups = []plans.VolumeGroup{g}
	}
	sps[2].Plan = &odd
	env, calls := f.env(t)
	env.OnSignalExternalWorkflow(mock.Anything, workflows.RecordID("loose"), "", workflows.SignalRecord, mock.Anything).Return(nil)
	env.ExecuteWorkflow(workflows.SiteFailover, workflows.SiteFailoverInput{From: "east", To: "west", Plans: sps})
	mustOK(t, env.GetWorkflowError())
	var res workflows.SiteFailoverResult
	mustOK(t, env.GetWorkflowResult(&res))
	var logs workflows.PlanOutcome
	for _, o := range res.Plans {
		if o.Plan == "logs" {
			logs = o
		} else if o.State != workflows.StateCompleted {
			t.Errorf("plan %s: %+v, want completed", o.Plan, o)
		}
	}
	if logs.State != workflows.OutcomeRefused || !strings.Contains(logs.Error, `"north"`) && !strings.Contains(logs.Error, "west") {
		t.Fatalf("logs: %+v, want refused for want of site west", logs)
	}
	if slices.Contains(f.west.FencedCIDRs(), "127.0.0.9/32") {
		t.Fatalf("the refused plan's CIDR was fenced: %v", f.west.FencedCIDRs())
	}
	if indexOf(*calls, "PromoteVolume", "west", "vg-2") >= 0 {
		t.Fatalf("the refused plan's group was promoted: %v", *calls)
	}
}

func lastIndexOfSubject(calls []call, name, subject string) int {
	last := -1
	for i, c := range calls {
		if c.name == name && c.subject == subject {
			last = i
		}
	}
	return last
}

// TestSiteFailoverTierPausesAndSkips: a plan of tier 0 whose own failover
// ends aborted (its workload cannot start, its policy aborts) pauses the
// site action at tier 0 before tier 1 starts; resolve --skip goes on to
// tier 1, and the result names the aborted plan with its error.
func TestSiteFailoverTierPausesAndSkips(t *testing.T) {
	f := newFixture(t)
	f.east.Down()
	sps := sitePlans(t, f)
	logs := sps[2].Plan
	logs.Policy.OnFailure = "abort"
	broken := plans.ExecHooks{Start: "echo cannot start >&2; exit 1", Stop: "true"}
	logs.Workloads = []plans.Workload{{Name: "ingest", Sites: map[string]plans.WorkloadRef{"east": {Exec: &broken}, "west": {Exec: &broken}}}}
	// Protection's last syncs before the loss; loose, of tier 1, starts
	// an hour later (tier 0 pauses that long), and lost no more for it.
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	sps[0].LastSync, sps[1].LastSync = t0.Add(-3*time.Second), t0.Add(-6*time.Second)
	sps[2].File = "plans/logs.yaml"
	env, calls := siteEnv(t, f)
	env.SetStartTime(t0)
	var paused *workflows.Step
	promotedWhilePaused := false
	env.RegisterDelayedCallback(func() {
		paused = pausedStep(t, env)
		promotedWhilePaused = indexOf(*calls, "PromoteVolume", "west", "solo") >= 0
		send(t, env, workflows.UpdateResolve, workflows.Decision{Step: "tier/0", Action: workflows.DecisionSkip}, nil, nil)
	}, time.Hour)
	env.ExecuteWorkflow(workflows.SiteFailover, workflows.SiteFailoverInput{From: "east", To: "west", Plans: sps})
	mustOK(t, env.GetWorkflowError())
	if paused == nil || paused.ID != "tier/0" || !strings.Contains(paused.LastError, "logs aborted") {
		t.Fatalf("paused step %+v, want tier 0 paused naming logs", paused)
	}
	if promotedWhilePaused {
		t.Fatal("tier 1 was promoted while tier 0 was paused")
	}
	var res workflows.SiteFailoverResult
	mustOK(t, env.GetWorkflowResult(&res))
	want := map[string]string{"logs": workflows.StateAborted, "shop": workflows.StateCompleted, "loose": workflows.StateCompleted}
	for _, o := range res.Plans {
		if o.State != want[o.Plan] {
			t.Errorf("plan %s: %+v, want %s", o.Plan, o, want[o.Plan])
		}
	}
	if indexOf(*calls, "PromoteVolume", "west", "solo") < 0 {
		t.Fatal("tier 1 never ran after the skip")
	}
	// logs was left behind: the action is partial, not completed, and
	// says how to move logs.
	if res.State != workflows.StatePartial || !slices.Equal(res.LeftBehind, []string{"logs"}) {
		t.Errorf("site action %s, left behind %v; want partial with logs left behind", res.State, res.LeftBehind)
	}
	rpo := map[string]time.Duration{"loose": 3 * time.Second, "shop": 6 * time.Second}
	for _, o := range res.Plans {
		switch o.Plan {
		case "logs":
			if o.Recover != "drctl failover plans/logs.yaml --to west" {
				t.Errorf("logs: recover %q, want its own failover from its plan file", o.Recover)
			}
		default:
			if o.Recover != "" || !o.RPOKnown || o.RPO != rpo[o.Plan] {
				t.Errorf("plan %s: RPO %v (known %v), recover %q; want %v from the action's start to the last sync, nothing to recover",
					o.Plan, o.RPO, o.RPOKnown, o.Recover, rpo[o.Plan])
			}
		}
	}
	if i := slices.IndexFunc(res.Steps, func(s *workflows.Step) bool { return s.ID == "tier/0" }); i < 0 || res.Steps[i].Decided != workflows.DecisionSkip || res.Steps[i].DecidedAt.IsZero() {
		t.Errorf("tier 0 does not record the skip decided on it: %+v", res.Steps)
	}
}

// TestSiteFailoverLeavesOutUntrustedPlans: on a worker that trusts one
// key, a site failover whose input holds a plan without a valid
// signature (anyone who can start a workflow could send one) refuses that
// plan before using any of its endpoints: its CIDRs are not fenced and
// its groups not promoted; the signed plans fail over.
func TestSiteFailoverLeavesOutUntrustedPlans(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := newFixture(t)
	trusted, key, err := plans.GenerateKey()
	mustOK(t, err)
	f.startWorker(t, srv, &activities.PlanTrust{Keys: []ed25519.PublicKey{trusted}})
	f.east.Down()
	sps := sitePlans(t, f) // loose (unsigned here), shop, logs
	for i := 1; i < len(sps); i++ {
		sps[i].Plan.ApplyDefaults()
		sps[i].Signature, err = plans.Sign(sps[i].Plan, key, time.Now(), 0)
		mustOK(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := workflows.StartSite(ctx, srv.Client, workflows.SiteFailoverInput{From: "east", To: "west", Plans: sps})
	mustOK(t, err)
	var res workflows.SiteFailoverResult
	mustOK(t, run.Get(ctx, &res))
	record(t, ctx, srv.Client, run, "site-failover")
	recordChild(t, ctx, srv.Client, run, "Failover", "failover-in-site")
	// Started without an action, it is a failover, and its search
	// attributes say so.
	desc, err := srv.Client.DescribeWorkflowExecution(ctx, run.GetID(), run.GetRunID())
	mustOK(t, err)
	var action string
	mustOK(t, converter.GetDefaultDataConverter().FromPayload(desc.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[names.AttrAction], &action))
	if action != "site-failover" {
		t.Fatalf("the site failover's action attribute is %q", action)
	}
	for _, o := range res.Plans {
		want := workflows.StateCompleted
		if o.Plan == "loose" {
			want = workflows.OutcomeRefused
		}
		if o.State != want {
			t.Errorf("plan %s: %+v, want %s", o.Plan, o, want)
		}
		if n := strings.Count(o.Error, "type: "+activities.ErrUntrustedPlan); n > 1 {
			t.Errorf("plan %s's refusal names its type %d times: %s", o.Plan, n, o.Error)
		}
	}
	if slices.Contains(f.west.FencedCIDRs(), "127.0.0.10/32") {
		t.Fatalf("the untrusted plan's CIDR was fenced: %v", f.west.FencedCIDRs())
	}
	// The action's trust names the signatures of the plans it ran.
	if !strings.Contains(res.Trust, "plan signed by key ") || !strings.Contains(res.Trust, "shop") || !strings.Contains(res.Trust, "logs") || strings.Contains(res.Trust, "loose") {
		t.Errorf("the site failover's trust %q: want shop's and logs' signatures, nothing of loose", res.Trust)
	}
	if u := f.west.Snapshot().Unit("vol/solo"); u == nil || u.Role == sim.RolePrimary {
		t.Fatalf("the untrusted plan's volume was promoted: %+v", u)
	}
	// Each plan's own failover checks its plan again when it starts,
	// after the site action's check: the plan's record accepted the
	// version from the site action, and the same again from the child.
	for _, o := range res.Plans {
		if o.State != workflows.StateCompleted {
			continue
		}
		var fr workflows.FailoverResult
		mustOK(t, srv.Client.GetWorkflow(ctx, workflows.ActionID(o.Plan), o.RunID).Get(ctx, &fr))
		if !strings.HasPrefix(fr.Trust, "checked by the site action "+run.GetID()+", and again at its start: plan signed by key ") {
			t.Errorf("plan %s's failover has the trust %q", o.Plan, fr.Trust)
		}
		rec, err := workflows.ReadRecord(ctx, srv.Client, o.Plan)
		mustOK(t, err)
		if rec.Version == nil || rec.Version.WorkflowID != run.GetID() {
			t.Errorf("plan %s's record took its version from %+v, want the site action", o.Plan, rec.Version)
		}
	}
}

// TestSiteDrillReportsWithoutPausing: a site drill runs each plan's own
// drill, tier by tier, from the input drctl prepared for it. With both
// sites up every check passes and each tier says its plans were drilled;
// with east down each plan's drill fails checks, and the tier reports
// which instead of waiting for the operator: the site drill completes.
func TestSiteDrillReportsWithoutPausing(t *testing.T) {
	for _, eastDown := range []bool{false, true} {
		t.Run(map[bool]string{false: "both up", true: "east down"}[eastDown], func(t *testing.T) {
			f := newFixture(t)
			if eastDown {
				f.east.Down()
			}
			sps := sitePlans(t, f)
			for i := range sps {
				sps[i].Drill = &workflows.DrillInput{Action: "failover", From: "east", To: "west"}
			}
			env, calls := siteEnv(t, f)
			env.ExecuteWorkflow(workflows.SiteFailover, workflows.SiteFailoverInput{Action: workflows.SiteDrillAction, From: "east", To: "west", Plans: sps})
			mustOK(t, env.GetWorkflowError())
			var res workflows.SiteFailoverResult
			mustOK(t, env.GetWorkflowResult(&res))
			if res.Progress.Action != "site drill" || res.Progress.State != workflows.StateCompleted {
				t.Fatalf("the site drill is %q, %s", res.Progress.Action, res.Progress.State)
			}
			wantPlan, wantTier := workflows.StateCompleted, map[string]string{"tier/0": "2 plan(s): drill done", "tier/1": "1 plan(s): drill done"}
			if eastDown {
				wantPlan = workflows.StateFailed
				wantTier = map[string]string{"tier/0": "2 plan(s) drilled, 2 with failed checks: ", "tier/1": "1 plan(s) drilled, 1 with failed checks: loose failed"}
			}
			for id, want := range wantTier {
				if s := stepOf(t, res.Progress, id); s.State != workflows.StateDone || !strings.HasPrefix(s.Output, want) {
					t.Errorf("step %s: %s, %q; want done, %q", id, s.State, s.Output, want)
				}
			}
			if len(res.Plans) != 3 {
				t.Fatalf("outcomes %+v, want three", res.Plans)
			}
			for _, o := range res.Plans {
				if o.State != wantPlan {
					t.Errorf("plan %s: %+v, want %s", o.Plan, o, wantPlan)
				}
			}
			for _, c := range *calls {
				if slices.Contains([]string{"FenceClusterNetwork", "PromoteVolume", "DemoteVolume"}, c.name) {
					t.Fatalf("a site drill called %s", c)
				}
			}
		})
	}
}

// TestSiteFailoverBoundsPlansAtOnce: the plans of a tier fail over at
// most Parallelism at a time (drctl's --plans-at-once): with three plans
// in one tier, one at a time with a bound of one, two with two, all
// three with the default of four. Each plan's own failover (a stand-in
// here that takes a minute) counts how many run together.
func TestSiteFailoverBoundsPlansAtOnce(t *testing.T) {
	for _, c := range []struct{ bound, want int }{{1, 1}, {2, 2}, {0, 3}} {
		t.Run(fmt.Sprintf("bound %d", c.bound), func(t *testing.T) {
			f := newFixture(t)
			f.east.Down()
			sps := sitePlans(t, f)
			for i := range sps {
				sps[i].Plan.Metadata.Tier = 0
			}
			env, _ := f.env(t)
			var mu sync.Mutex
			running, most, ran := 0, 0, 0
			env.OnWorkflow(workflows.Failover, mock.Anything, mock.Anything).Return(
				func(ctx workflow.Context, in workflows.FailoverInput) (*workflows.FailoverResult, error) {
					mu.Lock()
					running++
					ran++
					most = max(most, running)
					mu.Unlock()
					err := workflow.Sleep(ctx, time.Minute)
					mu.Lock()
					running--
					mu.Unlock()
					return &workflows.FailoverResult{}, err
				})
			env.ExecuteWorkflow(workflows.SiteFailover, workflows.SiteFailoverInput{From: "east", To: "west", Plans: sps, Parallelism: c.bound})
			mustOK(t, env.GetWorkflowError())
			var res workflows.SiteFailoverResult
			mustOK(t, env.GetWorkflowResult(&res))
			if ran != 3 || most != c.want {
				t.Fatalf("%d plan failovers, at most %d at once; want 3, at most %d", ran, most, c.want)
			}
			for _, o := range res.Plans {
				if o.State != workflows.StateCompleted {
					t.Errorf("plan %s: %+v", o.Plan, o)
				}
			}
		})
	}
}

// TestSiteFenceSkippedLeavesPlansToFence: when the operator skips a site
// failover's fence, or its verification, with --override, no plan is
// told its clients were fenced by the site action: each plan fences and
// verifies its own CIDRs before it promotes. (Told otherwise, on storage
// that cannot list its fences every plan would be promoted unfenced
// while its record said fenced.)
func TestSiteFenceSkippedLeavesPlansToFence(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault sim.FaultRule
		step  string
	}{
		{"fence", sim.FaultRule{Method: "FenceClusterNetwork", Code: "INVALID_ARGUMENT", Count: 1000, Message: "fence domain unreachable"}, "site-fence/west/1"},
		// Acknowledged but not applied: the verification fails.
		{"verify", sim.FaultRule{Method: "FenceClusterNetwork", Discard: true, Probability: 1}, "site-verify-fence/west/1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.east.Down()
			sps := sitePlans(t, f)
			for _, sp := range sps {
				sp.Plan.Policy.OnFailure = "abort"
			}
			mustOK(t, f.west.SetFaults([]sim.FaultRule{tc.fault}))
			env, calls := siteEnv(t, f)
			var paused, stuck *workflows.Step
			atSkip := -1
			env.RegisterDelayedCallback(func() {
				paused = pausedStep(t, env)
				mustOK(t, f.west.SetFaults(nil))
				atSkip = len(*calls)
				send(t, env, workflows.UpdateResolve, workflows.Decision{Step: tc.step, Action: workflows.DecisionSkip, Override: true}, nil, nil)
			}, time.Hour)
			// Anything still paused later is the failure under test: end it.
			env.RegisterDelayedCallback(func() {
				if stuck = pausedStep(t, env); stuck != nil {
					send(t, env, workflows.UpdateResolve, workflows.Decision{Step: stuck.ID, Action: workflows.DecisionAbort}, nil, nil)
				}
			}, 3*time.Hour)
			env.ExecuteWorkflow(workflows.SiteFailover, workflows.SiteFailoverInput{From: "east", To: "west", Plans: sps})
			if paused == nil || paused.ID != tc.step {
				t.Fatalf("paused step %+v, want %s", paused, tc.step)
			}
			if stuck != nil {
				t.Fatalf("after the site's %s was skipped, %s paused: %s", tc.name, stuck.ID, stuck.LastError)
			}
			mustOK(t, env.GetWorkflowError())
			var res workflows.SiteFailoverResult
			mustOK(t, env.GetWorkflowResult(&res))
			if s := stepOf(t, res.Progress, tc.step); s.State != workflows.StateSkipped {
				t.Errorf("%s is %s, want skipped", tc.step, s.State)
			}
			for _, o := range res.Plans {
				if o.State != workflows.StateCompleted {
					t.Errorf("plan %s: %+v, want completed", o.Plan, o)
				}
			}
			// One fence call per plan after the skip, each for its own
			// CIDRs; west ends fencing all of them.
			fences := 0
			for _, c := range (*calls)[atSkip:] {
				if c.name == "FenceClusterNetwork" {
					fences++
				}
			}
			union := []string{simtest.NodeA + "/32", "127.0.0.10/32", "127.0.0.9/32"}
			got := f.west.FencedCIDRs()
			slices.Sort(got)
			slices.Sort(union)
			if fences != 3 || !slices.Equal(got, union) {
				t.Fatalf("after the skip %d fence call(s), west lists %v: want each of 3 plans fencing, %v in all", fences, got, union)
			}
		})
	}
}

// TestSiteFailoverFencesNothingForPlansWhenBusyIsUnknown: a site failover
// that cannot learn which plans run an action of their own fences none
// on their behalf (a busy plan's clients would be fenced unrecorded):
// each plan fences, verifies and records its own, and all complete.
func TestSiteFailoverFencesNothingForPlansWhenBusyIsUnknown(t *testing.T) {
	f := newFixture(t)
	f.running = func([]string) ([]string, error) {
		return nil, temporal.NewNonRetryableApplicationError("the frontend does not answer", "Unavailable", nil)
	}
	f.east.Down()
	sps := sitePlans(t, f)
	env, calls := siteEnv(t, f)
	env.ExecuteWorkflow(workflows.SiteFailover, workflows.SiteFailoverInput{From: "east", To: "west", Plans: sps})
	mustOK(t, env.GetWorkflowError())
	var res workflows.SiteFailoverResult
	mustOK(t, env.GetWorkflowResult(&res))
	for _, s := range res.Steps {
		if strings.HasPrefix(s.ID, "site-fence/") || strings.HasPrefix(s.ID, "site-verify-fence/") {
			t.Errorf("the site action made step %s though it could not tell the busy plans", s.ID)
		}
	}
	fences := 0
	for _, c := range *calls {
		if c.name == "FenceClusterNetwork" {
			fences++
		}
	}
	for _, o := range res.Plans {
		if o.State != workflows.StateCompleted {
			t.Errorf("plan %s: %+v, want completed", o.Plan, o)
		}
	}
	if fences != 3 {
		t.Fatalf("%d fence calls, want one per plan", fences)
	}
}

// TestSiteChildChecksItsPlanWhenItStarts: a site failover checks every
// plan in its first step, then waits at tier 0 (shop's failover waits
// for an approval). Meanwhile a newer version of loose (tier 1) is
// signed and accepted by its record. When tier 0 is approved, loose's
// own failover, started with the version the site action checked, checks
// it again and is refused as older: loose's volume is not promoted.
func TestSiteChildChecksItsPlanWhenItStarts(t *testing.T) {
	srv, f, key := trustingWorker(t)
	var err error
	f.east.Down()
	sps := sitePlans(t, f) // loose (tier 1), shop, logs (tier 0)
	sps[1].Plan.Policy.Approvals = []string{"beforePromote"}
	for i := range sps {
		sps[i].Plan.ApplyDefaults()
		sps[i].Signature, err = plans.Sign(sps[i].Plan, key, time.Now().Add(-2*time.Hour), 0)
		mustOK(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run, err := workflows.StartSite(ctx, srv.Client, workflows.SiteFailoverInput{From: "east", To: "west", Plans: sps})
	mustOK(t, err)
	shop := workflows.ActionID("shop")
	simtest.Eventually(t, time.Minute, "shop's failover to wait at its gate", func() bool {
		v, err := srv.Client.QueryWorkflow(ctx, shop, "", workflows.QueryProgress)
		var p workflows.Progress
		return err == nil && v.Get(&p) == nil && slices.ContainsFunc(p.Steps, func(s *workflows.Step) bool { return s.State == workflows.StateWaiting })
	})

	// A newer loose, signed and accepted by its record (a drill).
	newer := *sps[0].Plan
	newer.Policy.Retry.TimeLimit = plans.Duration(2 * time.Second)
	sig, err := plans.Sign(&newer, key, time.Now().Add(-time.Hour), 0)
	mustOK(t, err)
	_ = signedDrill(t, ctx, srv, "drill-of-the-newer-loose", &newer, sig) // its checks of the lost east fail; its version is taken first
	rec, err := workflows.ReadRecord(ctx, srv.Client, "loose")
	mustOK(t, err)
	if rec == nil || rec.Version == nil || !rec.Version.SignedAt.Equal(sig.SignedAt) {
		t.Fatalf("loose's record did not take the newer version: %+v", rec)
	}

	_, err = srv.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: shop, UpdateName: workflows.UpdateApprove,
		Args: []any{workflows.Approval{Gate: "beforePromote", By: "operator"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	mustOK(t, err)
	// Tier 1 did not complete: the site action pauses there; skipped.
	var paused *workflows.Step
	simtest.Eventually(t, time.Minute, "the site action to pause at tier 1", func() bool {
		v, err := srv.Client.QueryWorkflow(ctx, run.GetID(), "", workflows.QueryProgress)
		var p workflows.Progress
		if err != nil || v.Get(&p) != nil {
			return false
		}
		i := slices.IndexFunc(p.Steps, func(s *workflows.Step) bool { return s.State == workflows.StatePaused })
		if i >= 0 {
			paused = p.Steps[i]
		}
		return i >= 0
	})
	if paused.ID != "tier/1" || !strings.Contains(paused.LastError, "a newer version of the plan") {
		t.Fatalf("the site action paused at %+v, want tier 1 with loose refused for the newer version", paused)
	}
	_, err = srv.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), UpdateName: workflows.UpdateResolve,
		Args: []any{workflows.Decision{Step: paused.ID, Action: workflows.DecisionSkip, By: "operator"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	mustOK(t, err)
	var res workflows.SiteFailoverResult
	mustOK(t, run.Get(ctx, &res))
	for _, o := range res.Plans {
		switch o.Plan {
		case "loose":
			if o.State == workflows.StateCompleted || !strings.Contains(o.Error, "a newer version of the plan") {
				t.Errorf("loose: %+v; want its failover refused for the newer version", o)
			}
		default:
			if o.State != workflows.StateCompleted {
				t.Errorf("plan %s: %+v, want completed", o.Plan, o)
			}
		}
	}
	if u := f.west.Snapshot().Unit("vol/solo"); u == nil || u.Role == sim.RolePrimary {
		t.Fatalf("the superseded loose's volume was promoted on west: %+v", u)
	}
}
