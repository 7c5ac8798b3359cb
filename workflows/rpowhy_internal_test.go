package workflows

import (
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/internal/wftest"
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
	// Answers that are the storage's own: the group is out of RPO with
	// their reason, and the primary is not called unreachable.
	for _, c := range []struct {
		what, primary string
		h             GroupHealth
		why           []string
	}{
		{"the primary answers that the replica's status is missing", "east", GroupHealth{Error: "x", Recovering: true, LastSync: old},
			[]string{"east (the primary) answers", "west's mirror daemon is down or restarting"}},
		{"the primary answers NOT_FOUND", "east", GroupHealth{Error: "NotFound: no sync to the peer has completed yet", NoSync: true},
			[]string{"east (the primary) answers that no sync of it has completed to west"}},
		{"the primary answers FAILED_PRECONDITION", "west", GroupHealth{Error: "FailedPrecondition: image is not in primary state", NotPrimary: true, LastSync: old},
			[]string{"the storage of west answers that its copy is not primary"}},
	} {
		prev := GroupHealth{LastSync: c.h.LastSync}
		c.h.LastSync = time.Time{}
		h := health(c.h, prev, now, p, c.primary)
		for _, w := range c.why {
			if !h.OutOfRPO || !strings.Contains(h.Why, w) {
				t.Errorf("%s: %+v, want out of RPO saying %q", c.what, h, w)
			}
		}
		s := &ProtectState{Primary: c.primary, Groups: map[string]GroupHealth{"db": h}}
		s.reachable(now)
		if s.Unreachable != "" {
			t.Errorf("%s: the primary is called unreachable: %q", c.what, s.Unreachable)
		}
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
	env := wftest.New(&ts)
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
