package workflows_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/codec"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestProtectDeadPrimary: when the primary dies, protection does not go
// quiet. Against a 2 s RPO target, within a few seconds the lag (now
// minus the last sync known) grows past the target and keeps growing
// from one look to the next, the plan is out of RPO, the primary is
// reported unreachable, and drover_out_of_rpo and
// drover_primary_unreachable turn 1. It runs for a primary that refuses
// connections and for one that never answers (every call runs to its
// 30 s deadline, longer than the whole check).
func TestProtectDeadPrimary(t *testing.T) {
	srv := devserver.Start(t, nil)
	for _, c := range []struct {
		name string
		kill func(f *fixture)
	}{
		{"refusing", func(f *fixture) { f.east.Down() }},
		{"silent", func(f *fixture) {
			mustOK(t, f.east.SetFaults([]sim.FaultRule{{Method: "*", Latency: time.Hour}}))
		}},
	} {
		t.Run(c.name, func(t *testing.T) { deadPrimary(t, srv, c.kill) })
	}
}

func deadPrimary(t *testing.T, srv *devserver.Server, kill func(f *fixture)) {
	f := newFixture(t)
	const target = 2 * time.Second
	f.plan.Policy.RPOTarget = plans.Duration(target)
	m, read := watchedProtect(t, srv, f)
	deadline := time.Now().Add(time.Minute)
	for ps := read(); ps.Polls < 2 || ps.OutOfRPO || ps.LastSync().IsZero(); ps = read() {
		if time.Now().After(deadline) {
			t.Fatalf("protection never saw the plan fresh: %+v", ps)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if m.get(workflows.MetricOutOfRPO, "shop") != 0 {
		t.Fatal("out of RPO while fresh")
	}

	kill(f)
	killed := time.Now()
	var (
		lags  []time.Duration
		rises int
		last  *workflows.ProtectState
	)
	for time.Since(killed) < 15*time.Second {
		time.Sleep(500 * time.Millisecond)
		last = read()
		h := last.Groups["db"]
		lags = append(lags, h.Lag)
		if n := len(lags); n >= 2 && lags[n-2] > target && lags[n-1] > lags[n-2] {
			rises++ // past the target and still growing
		}
		if rises >= 2 && last.OutOfRPO && last.Unreachable != "" &&
			m.get(workflows.MetricOutOfRPO, "shop") == 1 && m.getSite(workflows.MetricPrimaryUnreachable, "shop", "east") == 1 && m.getSite(workflows.MetricPrimaryUnreachable, "shop", "west") == 0 {
			t.Logf("%v after the loss: lag %v (last sync known %v ago), unreachable: %s", time.Since(killed).Round(time.Millisecond),
				h.Lag.Round(time.Millisecond), time.Since(h.LastSync).Round(time.Millisecond), last.Unreachable)
			return
		}
	}
	t.Fatalf("15 s after the primary died: lags seen %v (target %v), out of RPO %v, unreachable %q, metrics out_of_rpo %v unreachable %v",
		lags, target, last.OutOfRPO, last.Unreachable, m.get(workflows.MetricOutOfRPO, "shop"), m.getSite(workflows.MetricPrimaryUnreachable, "shop", "east"))
}

// watchedProtect starts a worker of its own on srv, whose gauges m keeps,
// and the protection of f's plan from east, polled every 300 ms; read
// reads its state. Both end with the test.
func watchedProtect(t *testing.T, srv *devserver.Server, f *fixture) (m *gauges, read func() *workflows.ProtectState) {
	m = &gauges{vals: map[string]float64{}}
	c, err := client.NewClientFromExisting(srv.Client, client.Options{MetricsHandler: m, DataConverter: codec.Converter(),
		Logger: log.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	mustOK(t, err)
	w := worker.New(c, workflows.TaskQueue, worker.Options{})
	workflows.Register(w)
	w.RegisterActivity(&workflows.RecordSender{Client: c})
	w.RegisterActivity(&activities.PlanTrust{AllowUnsigned: true})
	w.RegisterActivity(f.storage)
	w.RegisterActivity(f.workloads)
	mustOK(t, w.Start())
	t.Cleanup(w.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	prot, err := workflows.StartProtect(ctx, srv.Client, f.plan, "east", 300*time.Millisecond, workflows.Origin{})
	mustOK(t, err)
	t.Cleanup(func() {
		_ = srv.Client.TerminateWorkflow(context.Background(), prot.GetID(), "", "test over")
	})
	return m, func() *workflows.ProtectState {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		mustOK(t, err)
		return ps
	}
}

// TestProtectBlamesOnlyTheSiteThatHangs: the standby (west) stops
// answering GetFenceClients (a partitioned standby) while the primary
// (east) answers every poll. Protection goes on polling the primary at
// its interval and never says it is unreachable, nor the plan out of RPO:
// asking west for its clients does not hold up the rounds, whose watch
// took east for silent while west hung.
func TestProtectBlamesOnlyTheSiteThatHangs(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := newFixture(t)
	f.plan.Policy.RPOTarget = plans.Duration(2 * time.Second)
	m, read := watchedProtect(t, srv, f)
	deadline := time.Now().Add(time.Minute)
	ps := read()
	for ; ps.Polls < 2 || ps.OutOfRPO || ps.LastSync().IsZero(); ps = read() {
		if time.Now().After(deadline) {
			t.Fatalf("protection never saw the plan fresh: %+v", ps)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "GetFenceClients", Latency: time.Hour}}))
	hung, polls := time.Now(), ps.Polls
	for time.Since(hung) < 6*time.Second {
		time.Sleep(200 * time.Millisecond)
		ps = read()
		if ps.Unreachable != "" || ps.OutOfRPO || m.getSite(workflows.MetricPrimaryUnreachable, "shop", "east") != 0 {
			t.Fatalf("%v after west hung: east taken for unreachable (%q) or the plan out of RPO (%v: %s); drover_primary_unreachable{east} %v",
				time.Since(hung).Round(time.Millisecond), ps.Unreachable, ps.OutOfRPO, ps.Groups["db"].Why, m.getSite(workflows.MetricPrimaryUnreachable, "shop", "east"))
		}
	}
	// At 300 ms, some 20 polls in 6 s; a round held by west's hang would
	// make none.
	if ps.Polls-polls < 5 {
		t.Errorf("%d polls of east in the 6 s west hung, want rounds at the interval", ps.Polls-polls)
	}
}

// gauges is a metrics handler that keeps the last value of each gauge by
// name and plan tag; counters and timers are dropped.
type gauges struct {
	mu   sync.Mutex
	vals map[string]float64
	tags map[string]string
	root *gauges
}

func (g *gauges) top() *gauges {
	if g.root != nil {
		return g.root
	}
	return g
}

func (g *gauges) get(name, plan string) float64 {
	r := g.top()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.vals[name+"|"+plan]
}

// getSite is the value of a gauge tagged with a plan and a site.
func (g *gauges) getSite(name, plan, site string) float64 {
	return g.get(name, plan+"|"+site)
}

func (g *gauges) WithTags(tags map[string]string) client.MetricsHandler {
	merged := map[string]string{}
	for k, v := range g.tags {
		merged[k] = v
	}
	for k, v := range tags {
		merged[k] = v
	}
	return &gauges{tags: merged, root: g.top()}
}

func (g *gauges) Counter(string) client.MetricsCounter { return client.MetricsNopHandler.Counter("") }
func (g *gauges) Timer(string) client.MetricsTimer     { return client.MetricsNopHandler.Timer("") }
func (g *gauges) Gauge(name string) client.MetricsGauge {
	return gaugeFunc(func(v float64) {
		r := g.top()
		r.mu.Lock()
		defer r.mu.Unlock()
		key := fmt.Sprintf("%s|%s", name, g.tags["plan"])
		if site, ok := g.tags["site"]; ok {
			key += "|" + site
		}
		r.vals[key] = v
	})
}

type gaugeFunc func(float64)

func (f gaugeFunc) Update(v float64) { f(v) }
