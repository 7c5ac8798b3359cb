package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"
)

func TestClusterViewActiveHere(t *testing.T) {
	for _, tc := range []struct {
		v    clusterView
		want bool
	}{
		{clusterView{global: false, active: "active"}, true},
		{clusterView{global: true, here: "east", active: "east"}, true},
		{clusterView{global: true, here: "west", active: "east"}, false},
		{clusterView{global: true, here: "east", active: "west"}, false},
	} {
		if got := tc.v.activeHere(); got != tc.want {
			t.Errorf("%+v: activeHere %v, want %v", tc.v, got, tc.want)
		}
	}
}

// fakeWorker counts starts and stops; the gate calls nothing else.
type fakeWorker struct {
	worker.Worker
	started, stopped *atomic.Int32
}

func (f fakeWorker) Start() error { f.started.Add(1); return nil }
func (f fakeWorker) Stop()        { f.stopped.Add(1) }

// syncBuffer is a log buffer the gate's goroutine writes while the test
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestGatePollsOnlyWhileActiveHere: a worker whose cluster is standby
// for the namespace does not start; it starts when its cluster turns
// active, stops (saying paused, naming the active cluster) when the
// namespace moves away, starts a new worker when it comes back, and goes
// on as it is while its cluster cannot be asked.
func TestGatePollsOnlyWhileActiveHere(t *testing.T) {
	var mu sync.Mutex
	view := clusterView{global: true, here: "west", active: "east"}
	var checkErr error
	set := func(active string, err error) {
		mu.Lock()
		view.active, checkErr = active, err
		mu.Unlock()
	}
	var started, stopped atomic.Int32
	var logs syncBuffer
	g := &gate{every: 5 * time.Millisecond, ns: "drover", logger: slog.New(slog.NewTextHandler(&logs, nil)),
		check: func(context.Context) (clusterView, error) {
			mu.Lock()
			defer mu.Unlock()
			return view, checkErr
		},
		build: func() worker.Worker { return fakeWorker{started: &started, stopped: &stopped} }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waited := make(chan bool, 1)
	go func() { waited <- g.waitActive(ctx) }()
	time.Sleep(50 * time.Millisecond)
	select {
	case <-waited:
		t.Fatal("waitActive returned while the namespace is active on east, not on the worker's west")
	default:
	}
	if !strings.Contains(logs.String(), "paused") || !strings.Contains(logs.String(), "activeCluster=east") {
		t.Fatalf("no pause naming the active cluster in the log:\n%s", logs.String())
	}
	set("west", nil)
	if ok := <-waited; !ok {
		t.Fatal("waitActive gave up")
	}
	if err := g.start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { g.watch(ctx); close(done) }()
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: started %d, stopped %d; log:\n%s", what, started.Load(), stopped.Load(), logs.String())
			}
		}
	}
	// The cluster cannot be asked: nothing changes.
	set("west", errors.New("unavailable"))
	time.Sleep(50 * time.Millisecond)
	if stopped.Load() != 0 {
		t.Fatal("the worker stopped while its cluster could not be asked")
	}
	set("east", nil)
	eventually("the worker to stop when the namespace moved to east", func() bool { return stopped.Load() == 1 })
	time.Sleep(50 * time.Millisecond)
	if started.Load() != 1 {
		t.Fatalf("a worker started %d times while the namespace is active on east", started.Load())
	}
	set("west", nil)
	eventually("a new worker to start when the namespace came back", func() bool { return started.Load() == 2 })
	if !strings.Contains(logs.String(), "resumed") {
		t.Fatalf("no resume in the log:\n%s", logs.String())
	}
	cancel()
	<-done
	g.stop()
	if stopped.Load() != 2 {
		t.Fatalf("stopped %d times, want 2", stopped.Load())
	}
}

// TestVersionedWorkerOfAGlobalNamespaceWarns: a worker that runs as a
// Worker Deployment version says once, on its cluster's first answer
// that the namespace is global, that the workers of a global namespace
// run with --versioning=false; an unversioned one, or one of a local
// namespace, says nothing of it.
func TestVersionedWorkerOfAGlobalNamespaceWarns(t *testing.T) {
	for _, c := range []struct {
		name            string
		versioned, glob bool
		want            int
	}{
		{"versioned, global", true, true, 1},
		{"unversioned, global", false, true, 0},
		{"versioned, local", true, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs syncBuffer
			g := &gate{every: time.Millisecond, ns: "drover", versioned: c.versioned, logger: slog.New(slog.NewTextHandler(&logs, nil)),
				check: func(context.Context) (clusterView, error) {
					return clusterView{global: c.glob, here: "east", active: "east"}, nil
				}}
			for i := 0; i < 3; i++ {
				if !g.active(context.Background()) {
					t.Fatal("not active with the namespace active here")
				}
			}
			if got := strings.Count(logs.String(), "--versioning=false"); got != c.want {
				t.Fatalf("the warning logged %d times, want %d:\n%s", got, c.want, logs.String())
			}
		})
	}
}

// TestPausedGateStaysPausedWhileItsClusterCannotBeAsked: a worker paused
// because its cluster is standby for the namespace does not start
// polling when the check then fails (its cluster restarting, the link
// to it cut): a failed check is no answer that the namespace came back.
// Neither waitActive nor watch starts a worker over several failed
// checks; the first answer that names the cluster active does.
func TestPausedGateStaysPausedWhileItsClusterCannotBeAsked(t *testing.T) {
	var mu sync.Mutex
	view := clusterView{global: true, here: "west", active: "east"}
	var checkErr error
	checks := 0
	set := func(active string, err error) {
		mu.Lock()
		view.active, checkErr = active, err
		mu.Unlock()
	}
	checked := func() int {
		mu.Lock()
		defer mu.Unlock()
		return checks
	}
	var started, stopped atomic.Int32
	var logs syncBuffer
	g := &gate{every: time.Millisecond, ns: "drover", logger: slog.New(slog.NewTextHandler(&logs, nil)),
		check: func(context.Context) (clusterView, error) {
			mu.Lock()
			defer mu.Unlock()
			checks++
			return view, checkErr
		},
		build: func() worker.Worker { return fakeWorker{started: &started, stopped: &stopped} }}
	ctx := context.Background()

	// Paused by an answer, then the check fails: still paused.
	if g.active(ctx) {
		t.Fatal("active with the namespace active on east, not on the worker's west")
	}
	set("east", errors.New("rpc error: code = Unavailable desc = connection refused"))
	for i := 0; i < 3; i++ {
		if g.active(ctx) {
			t.Fatalf("failed check %d after a pause: active (the worker would poll a standby)", i+1)
		}
	}
	if !strings.Contains(logs.String(), "cannot ask") {
		t.Fatalf("the failed check is not logged:\n%s", logs.String())
	}

	// waitActive keeps waiting through failed checks.
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan bool, 1)
	from := checked()
	go func() { waited <- g.waitActive(wctx) }()
	for i := 0; checked() < from+5; i++ {
		if i > 10000 {
			t.Fatal("waitActive made no checks")
		}
		select {
		case ok := <-waited:
			t.Fatalf("waitActive returned %v after a failed check while paused", ok)
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	if ok := <-waited; ok {
		t.Fatal("waitActive said active after failed checks while paused")
	}

	// watch starts no worker through failed checks either.
	wctx, cancel = context.WithCancel(ctx)
	done := make(chan struct{})
	from = checked()
	go func() { g.watch(wctx); close(done) }()
	for i := 0; checked() < from+5; i++ {
		if i > 10000 {
			t.Fatal("watch made no checks")
		}
		time.Sleep(time.Millisecond)
	}
	if n := started.Load(); n != 0 {
		t.Fatalf("a worker started %d time(s) while its cluster, standby at the last answer, could not be asked", n)
	}
	// The cluster answers, active here: a worker starts.
	set("west", nil)
	for i := 0; started.Load() == 0; i++ {
		if i > 10000 {
			t.Fatalf("no worker started once the cluster answered active; log:\n%s", logs.String())
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	g.stop()
}
