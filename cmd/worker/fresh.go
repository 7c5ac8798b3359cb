package main

import (
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/uber-go/tally/v4"
	"go.temporal.io/sdk/client"
	sdktally "go.temporal.io/sdk/contrib/tally"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/workflows"
)

// freshGauges are the gauges a Protect workflow sets on each round
// (replication lag, out of RPO, primary unreachable, unprotected, the
// points in time's age and the age allowed, the time left to the plan's
// signature), which /metrics
// shows only while they are fresh: one not set again within ttl is
// dropped, and one set to NaN at once. Through tally a gauge keeps its last value until the worker
// exits, so after protect stop a plan went on reporting what it last
// saw (DroverProtectionSilent could never fire, a stale 1 kept
// DroverOutOfRPO firing), and where a Protect workflow moved to another
// worker the first kept its old value beside the new one's.
//
// The end of a protection on its own (drover_protection_ended, set as
// its workflow ends) is the exception: it is an alert, not a silence, so
// it stays past the workflow's end and the ttl, until the plan's
// protection sets a gauge here again.
type freshGauges struct {
	ttl time.Duration
	now func() time.Time

	mu   sync.Mutex
	vals map[string]*freshValue // by name and labels
	kept map[string]*freshValue // freshKept's, by name and labels
}

type freshValue struct {
	name          string
	labels, names []string // label values, in the order of names
	v             float64
	at            time.Time
}

// freshNames are the gauges freshGauges keeps.
var freshNames = []string{workflows.MetricReplicationLag, workflows.MetricOutOfRPO, workflows.MetricPrimaryUnreachable, workflows.MetricUnprotected,
	workflows.MetricPointAge, workflows.MetricPointMaxAge, workflows.MetricSignatureEnds, workflows.MetricProtectionEnded}

// freshKept are the gauges of freshNames kept past their workflow's end
// and the ttl, until the plan's protection sets another gauge.
var freshKept = []string{workflows.MetricProtectionEnded}

var freshHelp = map[string]string{
	workflows.MetricReplicationLag:     "Seconds since a protected group's last completed sync, as the plan's Protect workflow last saw it.",
	workflows.MetricOutOfRPO:           "1 while a protected plan's replication is behind its RPO target.",
	workflows.MetricPrimaryUnreachable: "1 while a protected plan's primary site's storage does not answer.",
	workflows.MetricUnprotected:        "Seconds since a failover left the plan without a replica (until a reprotect); 0 while it is protected.",
	workflows.MetricPointAge:           "Seconds since the plan's newest point in time was cut (policy.pointsInTime), or since its protection first looked for one.",
	workflows.MetricPointMaxAge:        "The age the plan's policy.pointsInTime allows its newest point: every, plus the poll interval.",
	workflows.MetricSignatureEnds:      "Seconds until the signature of a protected plan ends, when it has an end: its protection ends then.",
	workflows.MetricProtectionEnded:    "1 once a plan's protection ended on its own (reason signature: the plan's signature ended), until its protection reports again.",
}

// sanitizeOptions are tally's Prometheus rules for metric and label
// names, with label values left as they are: Prometheus takes any value,
// and replacing characters made distinct plans, sites or groups ("a-b"
// and "a_b") one series.
var sanitizeOptions = tally.SanitizeOptions{
	NameCharacters:       sdktally.PrometheusSanitizeOptions.NameCharacters,
	KeyCharacters:        sdktally.PrometheusSanitizeOptions.KeyCharacters,
	ValueCharacters:      tally.ValidCharacters{Ranges: []tally.SanitizeRange{{0, utf8.MaxRune}}},
	ReplacementCharacter: sdktally.PrometheusSanitizeOptions.ReplacementCharacter,
}

// sanitize makes names and labels what tally makes of the worker's other
// metrics: label names as Prometheus takes them, label values unchanged
// (a plan "site-east" is plan="site-east" on all of them).
var sanitize = tally.NewSanitizer(sanitizeOptions)

func newFreshGauges(ttl time.Duration) *freshGauges {
	return &freshGauges{ttl: ttl, now: time.Now, vals: map[string]*freshValue{}, kept: map[string]*freshValue{}}
}

// wrap is h with Drover's Protect gauges kept here.
func (f *freshGauges) wrap(h client.MetricsHandler) client.MetricsHandler {
	return freshHandler{MetricsHandler: h, f: f}
}

func (f *freshGauges) set(name string, tags map[string]string, v float64) {
	clean := make(map[string]string, len(tags))
	for k, v := range tags {
		clean[sanitize.Key(k)] = sanitize.Value(v)
	}
	names := slices.Sorted(maps.Keys(clean))
	labels := make([]string, len(names))
	for i, n := range names {
		labels[i] = clean[n]
	}
	key := name + "\x00" + strings.Join(names, "\x00") + "\x00\x00" + strings.Join(labels, "\x00")
	f.mu.Lock()
	defer f.mu.Unlock()
	vals := f.vals
	if slices.Contains(freshKept, name) {
		vals = f.kept
	} else if i := slices.Index(names, "plan"); i >= 0 && len(f.kept) > 0 {
		// The plan's protection reports again: its end is over.
		f.forgetIn(f.kept, labels[i])
	}
	if math.IsNaN(v) {
		// A gauge with nothing to tell (the lag of a plan with no
		// replica) is dropped at once.
		delete(vals, key)
		return
	}
	vals[key] = &freshValue{name: name, names: names, labels: labels, v: v, at: f.now()}
}

// Describe sends nothing: the labels of these gauges are known only as
// they are set, which makes freshGauges an unchecked collector.
func (f *freshGauges) Describe(chan<- *prom.Desc) {}

// Collect sends each fresh gauge and forgets the others.
func (f *freshGauges) Collect(ch chan<- prom.Metric) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	for key, e := range f.vals {
		if now.Sub(e.at) > f.ttl {
			delete(f.vals, key)
			continue
		}
		ch <- prom.MustNewConstMetric(prom.NewDesc(e.name, freshHelp[e.name], e.names, nil), prom.GaugeValue, e.v, e.labels...)
	}
	for _, e := range f.kept {
		ch <- prom.MustNewConstMetric(prom.NewDesc(e.name, freshHelp[e.name], e.names, nil), prom.GaugeValue, e.v, e.labels...)
	}
}

type freshHandler struct {
	client.MetricsHandler
	f    *freshGauges
	tags map[string]string
}

func (h freshHandler) WithTags(tags map[string]string) client.MetricsHandler {
	merged := maps.Clone(h.tags)
	if merged == nil {
		merged = map[string]string{}
	}
	maps.Copy(merged, tags)
	return freshHandler{MetricsHandler: h.MetricsHandler.WithTags(tags), f: h.f, tags: merged}
}

func (h freshHandler) Gauge(name string) client.MetricsGauge {
	if !slices.Contains(freshNames, name) {
		return h.MetricsHandler.Gauge(name)
	}
	return freshGauge{f: h.f, name: name, tags: h.tags}
}

type freshGauge struct {
	f    *freshGauges
	name string
	tags map[string]string
}

func (g freshGauge) Update(v float64) { g.f.set(g.name, g.tags, v) }

// forget drops the gauges of plan at once, but for freshKept's.
func (f *freshGauges) forget(plan string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgetIn(f.vals, sanitize.Value(plan))
}

// forgetIn drops the gauges of vals labelled plan (a sanitized value).
func (f *freshGauges) forgetIn(vals map[string]*freshValue, plan string) {
	for key, e := range vals {
		if i := slices.Index(e.names, "plan"); i >= 0 && e.labels[i] == plan {
			delete(vals, key)
		}
	}
}

// protectEnds forgets a plan's gauges when its Protect workflow ends on
// this worker (failed, as when its plan's signature ended, or stopped)
// other than by continuing as new: the ttl is for a protection that ends
// where the worker cannot see it (terminated, or moved to another
// worker), not for one it saw end.
type protectEnds struct {
	interceptor.WorkerInterceptorBase
	f *freshGauges
}

func (p *protectEnds) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	i := &protectEndsInbound{f: p.f}
	i.Next = next
	return i
}

type protectEndsInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	f *freshGauges
}

func (i *protectEndsInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	res, err := i.Next.ExecuteWorkflow(ctx, in)
	if workflow.GetInfo(ctx).WorkflowType.Name != names.Protect || workflow.IsContinueAsNewError(err) || workflow.IsReplaying(ctx) {
		return res, err
	}
	plan := strings.TrimPrefix(workflow.GetInfo(ctx).WorkflowExecution.ID, names.ProtectIDPrefix)
	if len(in.Args) > 0 {
		if pi, ok := in.Args[0].(workflows.ProtectInput); ok && pi.Plan != nil {
			plan = pi.Plan.Metadata.Name
		}
	}
	i.f.forget(plan)
	return res, err
}
