package workflows

import (
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/plans"
)

// TestOutOfRPONamesTheSideThatStopped: a group out of RPO says which side
// stopped. A primary that answers with a sync too old blames the replica
// (its mirror daemon, the link, its storage), never the primary; a
// primary that did not answer is blamed itself; a group within its
// target has no reason.
func TestOutOfRPONamesTheSideThatStopped(t *testing.T) {
	p := &plans.Plan{Sites: []plans.Site{{Name: "east"}, {Name: "west"}}}
	p.Policy.RPOTarget = plans.Duration(2 * time.Minute)
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	old := now.Add(-3 * time.Minute)

	h := health(GroupHealth{LastSync: old, Lag: 3 * time.Minute}, GroupHealth{}, now, p, "east")
	if !h.OutOfRPO || !strings.Contains(h.Why, "west (the replica) has taken no sync since") || !strings.Contains(h.Why, "east (the primary) answers") {
		t.Errorf("the primary answers, the replica takes no syncs: %+v", h)
	}
	h = health(GroupHealth{LastSync: old, Lag: 3 * time.Minute}, GroupHealth{}, now, p, "west")
	if !strings.Contains(h.Why, "east (the replica)") {
		t.Errorf("after a failover the replica is east: %q", h.Why)
	}
	h = health(GroupHealth{Error: "unreachable"}, GroupHealth{LastSync: old}, now, p, "east")
	if !h.OutOfRPO || !strings.Contains(h.Why, "the storage of east (the primary) did not answer") || strings.Contains(h.Why, "replica") {
		t.Errorf("the primary did not answer: %+v", h)
	}
	h = health(GroupHealth{Error: "x", Recovering: true}, GroupHealth{LastSync: old}, now, p, "east")
	if !h.OutOfRPO || !strings.Contains(h.Why, "east (the primary) answers") || !strings.Contains(h.Why, "west's mirror daemon is down or restarting") {
		t.Errorf("the primary answers that the replica's status is missing: %+v", h)
	}
	s := &ProtectState{Primary: "east", Groups: map[string]GroupHealth{"db": h}}
	s.reachable(now)
	if s.Unreachable != "" {
		t.Errorf("a primary that answered it is recovering is called unreachable: %q", s.Unreachable)
	}
	h = health(GroupHealth{Error: "NotFound: no sync to the peer has completed yet", NoSync: true}, GroupHealth{}, now, p, "east")
	if !h.OutOfRPO || !strings.Contains(h.Why, "east (the primary) answers that no sync of it has completed to west") {
		t.Errorf("the primary answers NOT_FOUND: %+v", h)
	}
	s = &ProtectState{Primary: "east", Groups: map[string]GroupHealth{"db": h}}
	s.reachable(now)
	if s.Unreachable != "" {
		t.Errorf("a primary that answered NOT_FOUND is called unreachable: %q", s.Unreachable)
	}
	h = health(GroupHealth{Error: "FailedPrecondition: image is not in primary state", NotPrimary: true}, GroupHealth{LastSync: old}, now, p, "west")
	if !h.OutOfRPO || !strings.Contains(h.Why, "the storage of west answers that its copy is not primary") {
		t.Errorf("the primary answers FAILED_PRECONDITION: %+v", h)
	}
	s = &ProtectState{Primary: "west", Groups: map[string]GroupHealth{"db": h}}
	s.reachable(now)
	if s.Unreachable != "" {
		t.Errorf("a primary that answered its copy is not primary is called unreachable: %q", s.Unreachable)
	}
	h = health(GroupHealth{}, GroupHealth{}, now, p, "east")
	if !h.OutOfRPO || !strings.Contains(h.Why, "no sync has reached west yet") {
		t.Errorf("no sync yet: %+v", h)
	}
	h = health(GroupHealth{LastSync: now.Add(-time.Minute), Lag: time.Minute}, GroupHealth{Why: "stale"}, now, p, "east")
	if h.OutOfRPO || h.Why != "" {
		t.Errorf("within the target: %+v", h)
	}
}

// siteGauges keeps the last value of drover_primary_unreachable by site.
type siteGauges struct {
	vals map[string]float64
	site string
}

func (g *siteGauges) WithTags(tags map[string]string) client.MetricsHandler {
	return &siteGauges{vals: g.vals, site: tags["site"]}
}
func (g *siteGauges) Counter(string) client.MetricsCounter {
	return client.MetricsNopHandler.Counter("")
}
func (g *siteGauges) Timer(string) client.MetricsTimer { return client.MetricsNopHandler.Timer("") }
func (g *siteGauges) Gauge(name string) client.MetricsGauge {
	return gaugeUpdate(func(v float64) {
		if name == MetricPrimaryUnreachable {
			g.vals[g.site] = v
		}
	})
}

type gaugeUpdate func(float64)

func (f gaugeUpdate) Update(v float64) { f(v) }

// TestUnreachableSeriesFollowsThePrimary: once the primary moves (a
// failback), the old primary's drover_primary_unreachable series goes to
// 0 at the next report, where it kept its last value (1, from the
// demotion's refusals) for the metrics' ttl.
func TestUnreachableSeriesFollowsThePrimary(t *testing.T) {
	p := &plans.Plan{Metadata: plans.Metadata{Name: "shop"}, Sites: []plans.Site{{Name: "east"}, {Name: "west"}}}
	g := &siteGauges{vals: map[string]float64{}}
	var ts testsuite.WorkflowTestSuite
	ts.SetMetricsHandler(g)
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		(&ProtectState{Primary: "west", Unreachable: "a poll went unanswered"}).report(ctx, p)
		(&ProtectState{Primary: "east"}).report(ctx, p)
		return nil
	}, workflow.RegisterOptions{Name: "reports"})
	env.ExecuteWorkflow("reports")
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if g.vals["west"] != 0 || g.vals["east"] != 0 {
		t.Fatalf("after the primary moved from an unreachable west to east: %v, want both 0", g.vals)
	}
}
