package workflows_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/codec"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// link is a site worker's TCP path to Temporal that a test cuts, as a
// site's lost link would: every connection through it is closed and no
// new one is taken, so the worker can neither poll nor answer for a call
// it holds.
type link struct {
	ln    net.Listener
	to    string
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

// newLink listens on a loopback port of its own and forwards to to until
// cut or the end of the test.
func newLink(t *testing.T, to string) *link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	mustOK(t, err)
	l := &link{ln: ln, to: to}
	go l.serve()
	t.Cleanup(l.Cut)
	return l
}

func (l *link) serve() {
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", l.to, 5*time.Second)
		l.mu.Lock()
		if err != nil || l.cut {
			l.mu.Unlock()
			in.Close()
			if out != nil {
				out.Close()
			}
			continue
		}
		l.conns = append(l.conns, in, out)
		l.mu.Unlock()
		go func() { _, _ = io.Copy(out, in); out.Close() }()
		go func() { _, _ = io.Copy(in, out); in.Close() }()
	}
}

// Addr is where the worker dials Temporal.
func (l *link) Addr() string { return l.ln.Addr().String() }

// Cut closes the link for good.
func (l *link) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		return
	}
	l.cut = true
	l.ln.Close()
	for _, c := range l.conns {
		c.Close()
	}
}

// startSiteWorker runs a worker of a site's own task queue, as
// `worker --site` does, under identity, recording what it runs in r; with
// a link, it reaches Temporal through it.
func startSiteWorker(t *testing.T, srv *devserver.Server, site, identity string, r *ranBy, through *link) {
	t.Helper()
	c := srv.Client
	if through != nil {
		var err error
		c, err = client.Dial(client.Options{HostPort: through.Addr(), DataConverter: codec.Converter(),
			Logger: log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))})
		mustOK(t, err)
		t.Cleanup(c.Close)
	}
	w := worker.New(c, names.SiteTaskQueue(site), worker.Options{Identity: identity, Interceptors: []interceptor.WorkerInterceptor{r}})
	st := activities.NewStorage()
	t.Cleanup(func() { st.Close() })
	w.RegisterActivity(st)
	w.RegisterActivity(activities.NewWorkloads())
	mustOK(t, w.Start())
	t.Cleanup(w.Stop)
}

// TestSiteWorkerCutOffMidAction: a failover whose surviving site, west,
// has a worker of its own loses that worker's link to Temporal in the
// middle of a promotion: west's storage has taken the call, and the
// worker cannot answer for it. That attempt ends at its deadline and is
// tried again; the new attempt, and the promotions after it, sit in
// west's task queue. The step running them says, with no failure and no
// pause, that it waits for site west's worker, naming the queue and the
// worker that last polled it, and that the action goes on by itself.
// The link stays cut past the plan's time limit for a call: the time a
// call waits for a worker is not time its site's storage had to answer.
// When a worker polls west's queue again the action goes on and
// completes with no operator's decision: every step ran once, no call
// that had answered before the cut was made again, and a call made
// twice is only one the cut left without an answer (a promotion,
// which storage takes again as done).
func TestSiteWorkerCutOffMidAction(t *testing.T) {
	t.Cleanup(workflows.SetSiteWaitAfter(2 * time.Second))
	srv := devserver.Start(t, nil)
	f := newFixture(t)
	for i := range f.plan.Sites {
		f.plan.Sites[i].TaskQueue = names.SiteTaskQueue(f.plan.Sites[i].Name)
	}
	// A promotion cut off mid-call ends at its deadline (plus
	// activities.CallGrace: 6 s), which the server reports up to a second
	// late (its timer queue reads no task due before now plus a second);
	// the time limit of a call leaves room for that and one retry's
	// backoff, and is shorter than the cut will last.
	limit := 10 * time.Second
	f.plan.Policy.Deadlines = map[string]plans.Duration{activities.RPCPromoteVolume: plans.Duration(time.Second)}
	f.plan.Policy.Retry.TimeLimit = plans.Duration(limit)
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
	startSiteWorker(t, srv, "east", "east-worker", &ranBy{}, nil)
	before, after := &ranBy{}, &ranBy{}
	westLink := newLink(t, srv.Address())
	startSiteWorker(t, srv, "west", "west-worker-1", before, westLink)

	// West's storage takes the first promotion, and the link goes as it
	// does: the worker holds a call it cannot answer for.
	var cutAt time.Time
	var cutMu sync.Mutex
	f.setOnRPC(func(site, method string, req any, handle func() (any, error)) (any, error) {
		if site == "west" && strings.HasPrefix(method, "Promote") {
			cutMu.Lock()
			if cutAt.IsZero() {
				westLink.Cut()
				cutAt = time.Now()
			}
			cutMu.Unlock()
		}
		return handle()
	})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	startRecord(t, ctx, srv)
	f.east.Down()
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, err)

	// The step waiting for west's worker says so; no step pauses. The
	// link stays cut until the wait has outlasted the call's time limit.
	var waiting *workflows.Step
	var last workflows.Progress
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		v, err := srv.Client.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), workflows.QueryProgress)
		if err != nil || v.Get(&last) != nil {
			continue
		}
		for _, s := range last.Steps {
			if s.State == workflows.StatePaused {
				t.Fatalf("step %q paused while west's worker was cut off: %s", s.Name, s.LastError)
			}
			if s.WaitsForWorker && waiting == nil {
				waiting = s
			}
		}
		cutMu.Lock()
		long := !cutAt.IsZero() && time.Since(cutAt) > limit+2*time.Second
		cutMu.Unlock()
		if waiting != nil && long {
			break
		}
	}
	if waiting == nil {
		for _, s := range last.Steps {
			t.Logf("%s: %s %q (%s)", s.ID, s.State, s.Note, s.LastError)
		}
		t.Fatal("no step said it waits for west's worker while west's calls sat in its queue")
	}
	t.Logf("%s: %s", waiting.Name, waiting.Note)
	if waiting.State != workflows.StateRunning {
		t.Errorf("step %q is %s while it waits for a worker, want running (not paused: no decision is needed)", waiting.Name, waiting.State)
	}
	for _, part := range []string{"site west's worker", names.SiteTaskQueue("west"), "west-worker-1", "goes on by itself"} {
		if !strings.Contains(waiting.Note, part) {
			t.Errorf("the waiting step's note lacks %q: %s", part, waiting.Note)
		}
	}

	// The link heals: a worker polls west's queue again.
	startSiteWorker(t, srv, "west", "west-worker-2", after, nil)
	var res workflows.FailoverResult
	mustOK(t, run.Get(ctx, &res))
	allDone(t, res.Progress)
	allRoles(t, f.west, sim.RolePrimary)
	record(t, ctx, srv.Client, run, "failover-site-cutoff")
	for _, s := range res.Steps {
		if s.Attempts != 1 || s.Decided != "" {
			t.Errorf("step %q ran %d time(s), decided %q: want once, with no decision", s.Name, s.Attempts, s.Decided)
		}
		if s.WaitsForWorker {
			t.Errorf("step %q still says it waits for a worker once done: %s", s.Name, s.Note)
		}
	}
	// What west-worker-1 ran before the cut answered (every call but the
	// promotions it held as the link went): west-worker-2 repeats only
	// those promotions.
	ranBefore := map[string]bool{}
	for _, c := range before.list() {
		ranBefore[c.activity+" "+c.input] = true
	}
	promoted := 0
	seen := map[string]bool{}
	for _, c := range after.list() {
		key := c.activity + " " + c.input
		if seen[key] {
			t.Errorf("west-worker-2 ran %s twice: %.200s", c.activity, c.input)
		}
		seen[key] = true
		if c.activity == "PromoteVolume" {
			promoted++
		} else if ranBefore[key] {
			t.Errorf("%s answered before the cut and ran again after it: %.200s", c.activity, c.input)
		}
	}
	if promoted == 0 {
		t.Errorf("west-worker-2 promoted nothing: it ran %v", seen)
	}
}

// TestLostSitesWorkerDoesNotHoldTheFailover: a site lost with its own
// worker leaves the failover's best-effort stop of its workloads in a
// queue no worker will serve. That stop keeps its deadline over the wait
// (the step says meanwhile that it waits for east's worker), reports the
// workloads not stopped, and the failover goes on to fence, promote and
// start at west: a lost site's worker never holds the failover that
// replaces it.
func TestLostSitesWorkerDoesNotHoldTheFailover(t *testing.T) {
	t.Cleanup(workflows.SetSiteWaitAfter(time.Second))
	srv := devserver.Start(t, nil)
	f := newFixture(t)
	for i := range f.plan.Sites {
		f.plan.Sites[i].TaskQueue = names.SiteTaskQueue(f.plan.Sites[i].Name)
	}
	f.plan.Policy.StopDeadline = plans.Duration(4 * time.Second)
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
	// East's worker was lost with east: none polls its queue.
	startSiteWorker(t, srv, "west", "west-worker", &ranBy{}, nil)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	startRecord(t, ctx, srv)
	f.east.Down()
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, err)
	var saw string
	done := make(chan error, 1)
	var res workflows.FailoverResult
	go func() { done <- run.Get(ctx, &res) }()
	for waiting := true; waiting; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("the failover did not end (%v); a step waiting for a worker said: %s", err, saw)
			}
			waiting = false
		case <-time.After(200 * time.Millisecond):
			v, err := srv.Client.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), workflows.QueryProgress)
			var p workflows.Progress
			if err != nil || v.Get(&p) != nil {
				continue
			}
			for _, s := range p.Steps {
				if s.WaitsForWorker && saw == "" {
					saw = s.Name + ": " + s.Note
				}
			}
		}
	}
	allDone(t, res.Progress)
	allRoles(t, f.west, sim.RolePrimary)
	if !strings.Contains(saw, "site east's worker") {
		t.Errorf("no step said it waited for east's worker (saw %q)", saw)
	}
	for _, s := range res.Steps {
		if s.ID == "stop-workloads/east" && !strings.Contains(s.Output, "not stopped") {
			t.Errorf("the lost site's stop says %q, want its workloads reported not stopped", s.Output)
		}
	}
}

// TestCancelEndsTheWaitForASiteWorker: a call that waits in a site's
// queue with no worker to take it holds the action for as long as the
// cut lasts, and `drctl cancel` (a cancel of the run) ends the wait
// (docs/guides/deploy-nomad.md, "A site worker cut off"): the action ends canceled and the
// call never runs.
func TestCancelEndsTheWaitForASiteWorker(t *testing.T) {
	t.Cleanup(workflows.SetSiteWaitAfter(time.Second))
	srv := devserver.Start(t, nil)
	f := newFixture(t)
	for i := range f.plan.Sites {
		f.plan.Sites[i].TaskQueue = names.SiteTaskQueue(f.plan.Sites[i].Name)
	}
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
	// No worker polls west's queue: its preflight waits there.
	east := &ranBy{}
	startSiteWorker(t, srv, "east", "east-worker", east, nil)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	startRecord(t, ctx, srv)
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, err)
	simtest.Eventually(t, 30*time.Second, "a step to say it waits for west's worker", func() bool {
		v, err := srv.Client.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), workflows.QueryProgress)
		var p workflows.Progress
		if err != nil || v.Get(&p) != nil {
			return false
		}
		for _, s := range p.Steps {
			if s.WaitsForWorker && strings.Contains(s.Note, "site west's worker") {
				return true
			}
		}
		return false
	})
	mustOK(t, srv.Client.CancelWorkflow(ctx, run.GetID(), run.GetRunID()))
	var canceled *temporal.CanceledError
	if err := run.Get(ctx, nil); !errors.As(err, &canceled) {
		t.Fatalf("the failover after its cancel: %v, want canceled", err)
	}
	if n := len(f.west.FencedCIDRs()); n != 0 {
		t.Errorf("west fenced %d CIDRs for a failover canceled before its preflight there", n)
	}
}
