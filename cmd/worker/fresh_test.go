package main

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/uber-go/tally/v4"
	"github.com/uber-go/tally/v4/prometheus"
	"go.temporal.io/sdk/client"
	sdktally "go.temporal.io/sdk/contrib/tally"

	"github.com/drover-dr/drover/workflows"
)

// countingHandler counts the gauges asked of it: what freshGauges leaves
// to tally.
type countingHandler struct {
	client.MetricsHandler
	gauges *int
}

func (h countingHandler) WithTags(map[string]string) client.MetricsHandler { return h }
func (h countingHandler) Gauge(string) client.MetricsGauge {
	*h.gauges++
	return client.MetricsNopHandler.Gauge("")
}

// TestFreshGauges: a Protect gauge set through the worker's metrics
// handler is on /metrics with every tag (named as tally names
// the others) until ttl has passed since it was last set, then gone,
// and back once set again; other gauges go to tally as before.
func TestFreshGauges(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	f := newFreshGauges(time.Minute)
	f.now = func() time.Time { return now }
	reg := prom.NewPedanticRegistry()
	reg.MustRegister(f)
	others := 0
	h := f.wrap(countingHandler{MetricsHandler: client.MetricsNopHandler, gauges: &others}).
		WithTags(map[string]string{"namespace": "default", "workflow_type": "Protect"})
	plan := h.WithTags(map[string]string{"plan": "site-east"})
	plan.Gauge(workflows.MetricOutOfRPO).Update(1)
	plan.WithTags(map[string]string{"group": "db"}).Gauge(workflows.MetricReplicationLag).Update(2.5)
	h.Gauge("temporal_sticky_cache_size").Update(3)
	if others != 1 {
		t.Fatalf("%d other gauge(s) reached tally, want 1", others)
	}

	want := `
# HELP drover_out_of_rpo 1 while a protected plan's replication is behind its RPO target.
# TYPE drover_out_of_rpo gauge
drover_out_of_rpo{namespace="default",plan="site-east",workflow_type="Protect"} 1
# HELP drover_replication_lag_seconds Seconds since a protected group's last completed sync, as the plan's Protect workflow last saw it.
# TYPE drover_replication_lag_seconds gauge
drover_replication_lag_seconds{group="db",namespace="default",plan="site-east",workflow_type="Protect"} 2.5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}

	// Within ttl of its last update a gauge stays; past it, it is gone.
	now = now.Add(50 * time.Second)
	plan.Gauge(workflows.MetricOutOfRPO).Update(0)
	now = now.Add(20 * time.Second)
	want = `
# HELP drover_out_of_rpo 1 while a protected plan's replication is behind its RPO target.
# TYPE drover_out_of_rpo gauge
drover_out_of_rpo{namespace="default",plan="site-east",workflow_type="Protect"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("%d gauge(s) (%v) a minute past the last update, want none", n, err)
	}
	if len(f.vals) != 0 {
		t.Fatalf("%d stale gauge(s) kept", len(f.vals))
	}
	plan.Gauge(workflows.MetricOutOfRPO).Update(1)
	if n, err := testutil.GatherAndCount(reg, workflows.MetricOutOfRPO); err != nil || n != 1 {
		t.Fatalf("%d gauge(s) (%v) once set again, want 1", n, err)
	}

	// A lag set to NaN (a plan a failover left with no replica) is gone
	// at once, not a ttl later; the plan's other gauges stay.
	lag := plan.WithTags(map[string]string{"group": "db"}).Gauge(workflows.MetricReplicationLag)
	lag.Update(0.058)
	if n, err := testutil.GatherAndCount(reg, workflows.MetricReplicationLag); err != nil || n != 1 {
		t.Fatalf("%d lag gauge(s) (%v), want 1", n, err)
	}
	lag.Update(math.NaN())
	if n, err := testutil.GatherAndCount(reg, workflows.MetricReplicationLag); err != nil || n != 0 {
		t.Fatalf("%d lag gauge(s) (%v) once set to NaN, want none", n, err)
	}
	if n, err := testutil.GatherAndCount(reg, workflows.MetricOutOfRPO); err != nil || n != 1 {
		t.Fatalf("%d out-of-RPO gauge(s) (%v) after the lag's NaN, want 1", n, err)
	}
}

// TestPlansWithSimilarNamesKeepTheirSeries: plans "a-b" and "a_b" are
// two series on /metrics, on the Protect gauges as on the metrics tally
// reports (drover_action_duration, drover_step_failures): a label value
// is kept as it is, not made one by replacing its characters.
func TestPlansWithSimilarNamesKeepTheirSeries(t *testing.T) {
	f := newFreshGauges(time.Minute)
	reg := prom.NewPedanticRegistry()
	reg.MustRegister(f)
	reporter := prometheus.NewReporter(prometheus.Options{Registerer: reg, Gatherer: reg})
	scope, closer := tally.NewRootScope(tally.ScopeOptions{CachedReporter: reporter, Separator: prometheus.DefaultSeparator,
		SanitizeOptions: &sanitizeOptions}, time.Second)
	h := f.wrap(sdktally.NewMetricsHandler(sdktally.NewPrometheusNamingScope(scope)))
	for i, plan := range []string{"a-b", "a_b", "a.b"} {
		p := h.WithTags(map[string]string{"plan": plan})
		p.Gauge(workflows.MetricOutOfRPO).Update(float64(i))
		p.Counter("drover_step_failures").Inc(1)
	}
	closer.Close() // reports what the scope holds
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	plans := map[string][]string{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "plan" {
					plans[mf.GetName()] = append(plans[mf.GetName()], l.GetValue())
				}
			}
		}
	}
	for _, name := range []string{workflows.MetricOutOfRPO, "drover_step_failures_total"} {
		if got := plans[name]; len(got) != 3 || !slices.Contains(got, "a-b") || !slices.Contains(got, "a_b") || !slices.Contains(got, "a.b") {
			t.Errorf("%s: plans %q, want a-b, a_b and a.b apart", name, got)
		}
	}
}

// TestProtectionEndedStays: a plan's protection that ended because of its
// signature leaves drover_protection_ended at 1 on /metrics past its
// workflow's end (when the worker forgets the plan's other gauges) and
// past the ttl, so that the alert fires rather than protection going
// quiet; it leaves once the plan's protection reports again. Another
// plan's reports do not end it.
func TestProtectionEndedStays(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	f := newFreshGauges(time.Minute)
	f.now = func() time.Time { return now }
	reg := prom.NewPedanticRegistry()
	reg.MustRegister(f)
	h := f.wrap(client.MetricsNopHandler)
	shop := h.WithTags(map[string]string{"plan": "shop"})
	shop.Gauge(workflows.MetricSignatureEnds).Update(60)
	shop.WithTags(map[string]string{"reason": workflows.EndedBySignature}).Gauge(workflows.MetricProtectionEnded).Update(1)
	f.forget("shop") // its workflow ended
	now = now.Add(time.Hour)
	h.WithTags(map[string]string{"plan": "logs"}).Gauge(workflows.MetricOutOfRPO).Update(0)
	want := `
# HELP drover_protection_ended 1 once a plan's protection ended on its own (reason signature: the plan's signature ended), until its protection reports again.
# TYPE drover_protection_ended gauge
drover_protection_ended{plan="shop",reason="signature"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), workflows.MetricProtectionEnded); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, workflows.MetricSignatureEnds); err != nil || n != 0 {
		t.Fatalf("%d signature gauge(s) (%v) after protection ended, want none", n, err)
	}
	shop.Gauge(workflows.MetricOutOfRPO).Update(0) // protected again
	if n, err := testutil.GatherAndCount(reg, workflows.MetricProtectionEnded); err != nil || n != 0 {
		t.Fatalf("%d drover_protection_ended (%v) once the plan's protection reports again, want none", n, err)
	}
}
