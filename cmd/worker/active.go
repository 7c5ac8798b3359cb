package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
)

// Temporal at both sites: each site's worker polls its own cluster, and
// the namespace is global, active on one cluster at a time. A worker
// acts only while its own cluster names the namespace active there: on
// a standby it does not poll (a standby's long polls would also hold the
// first task after a takeover for up to matching.longPollExpirationInterval),
// and when its cluster learns that the namespace moved (a takeover at
// the other site, seen once the link returns) it stops polling, lets the
// calls in flight finish and waits. It polls again, with new polls, as
// soon as its cluster is active again. A local namespace (one cluster)
// is always active.

// versionedGlobalWarning is logged once by a versioned worker of a
// global namespace. Measured (make e2e-sites with versioning on): the
// takeover at the other site and the actions there ran, but once the
// namespace was failed back, the plan's record, an auto-upgrade
// workflow, had a workflow task scheduled that no worker received
// (the task queue empty, this build current and polling), and every
// action asking the record timed out.
const versionedGlobalWarning = "the namespace is global (a Temporal cluster at each site) and this worker runs as a Worker Deployment version: " +
	"after a namespace failover and failback, the plans' records were seen waiting for workflow tasks no worker received; " +
	"run the workers of a global namespace with --versioning=false (docs/guides/two-sites.md: Where Temporal lives)"

// clusterView is what the worker's cluster says of the namespace.
type clusterView struct {
	global bool
	// here is the cluster the worker polls, active the one the
	// namespace is active on.
	here, active string
}

// activeHere reports whether the worker may act: the namespace is local,
// or its cluster names itself active.
func (v clusterView) activeHere() bool { return !v.global || v.active == v.here }

// readClusterView asks the worker's cluster.
func readClusterView(ctx context.Context, cl client.Client, ns string) (clusterView, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := cl.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: ns})
	if err != nil {
		return clusterView{}, err
	}
	v := clusterView{global: d.GetIsGlobalNamespace(), active: d.GetReplicationConfig().GetActiveClusterName()}
	if !v.global {
		return v, nil
	}
	info, err := cl.WorkflowService().GetClusterInfo(ctx, &workflowservice.GetClusterInfoRequest{})
	if err != nil {
		return clusterView{}, err
	}
	v.here = info.GetClusterName()
	return v, nil
}

// gate runs the SDK worker only while the namespace is active on the
// worker's cluster: check every interval, start a new worker when it
// turns active, stop the running one when it turns standby.
type gate struct {
	check    func(context.Context) (clusterView, error)
	every    time.Duration
	build    func() worker.Worker
	logger   *slog.Logger
	ns       string
	onPause  func()
	onResume func()
	// versioned: the worker runs as a Worker Deployment version, which
	// a global namespace's failover and failback are not proven with
	// (warned once, on the first answer that says global).
	versioned bool

	warnedVersioned bool

	mu  sync.Mutex
	cur worker.Worker
	// paused is the last state said: a change is logged once.
	paused bool
	failed bool
}

// waitActive checks until the namespace is active here (true) or ctx
// ends (false). A check that fails leaves the state as it was: before
// any answer it counts as active (the worker then polls, and its polls
// say what is wrong); after an answer that paused the worker it does not.
func (g *gate) waitActive(ctx context.Context) bool {
	for {
		if g.active(ctx) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(g.every):
		}
	}
}

// active checks once and logs a change of state.
func (g *gate) active(ctx context.Context) bool {
	v, err := g.check(ctx)
	if err != nil {
		if !g.failed && ctx.Err() == nil {
			g.logger.Warn("cannot ask the worker's Temporal cluster where the namespace is active; the worker goes on as it is", "namespace", g.ns, "error", err)
		}
		g.failed = true
		return !g.paused
	}
	g.failed = false
	if v.global && g.versioned && !g.warnedVersioned {
		g.warnedVersioned = true
		g.logger.Warn(versionedGlobalWarning, "namespace", g.ns, "cluster", v.here)
	}
	if v.activeHere() {
		if g.paused {
			g.logger.Info("resumed: the namespace is active on this worker's Temporal cluster again; polling", "namespace", g.ns, "cluster", v.here)
		}
		g.paused = false
		return true
	}
	if !g.paused {
		g.logger.Warn("paused: the namespace is not active on this worker's Temporal cluster; the worker polls nothing until it is",
			"namespace", g.ns, "cluster", v.here, "activeCluster", v.active)
	}
	g.paused = true
	return false
}

// start builds and starts a worker.
func (g *gate) start() error {
	w := g.build()
	if err := w.Start(); err != nil {
		return err
	}
	g.mu.Lock()
	g.cur = w
	g.mu.Unlock()
	return nil
}

// stop stops the running worker, if one runs: calls in flight finish
// (up to the worker's stop timeout).
func (g *gate) stop() {
	g.mu.Lock()
	w := g.cur
	g.cur = nil
	g.mu.Unlock()
	if w != nil {
		w.Stop()
	}
}

// watch checks every interval until ctx ends, stopping the worker when
// the namespace leaves its cluster and starting a new one when it comes
// back.
func (g *gate) watch(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(g.every):
		}
		active := g.active(ctx)
		g.mu.Lock()
		running := g.cur != nil
		g.mu.Unlock()
		switch {
		case active && !running:
			if err := g.start(); err != nil {
				g.logger.Error("the worker did not start polling again", "error", err)
				continue
			}
			if g.onResume != nil {
				g.onResume()
			}
		case !active && running:
			if g.onPause != nil {
				g.onPause()
			}
			g.stop()
		}
	}
}
