package main

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/api/operatorservice/v1"
	replicationpb "go.temporal.io/api/replication/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
)

// Temporal at both sites: two clusters joined for multi-cluster
// replication, the namespace global and active on one of them. A
// failover at the surviving site talks to that site's cluster; when the
// namespace is active on the lost site's cluster, nothing can start
// there (a standby forwards the start to the active cluster, which does
// not answer). drctl failover says so, and with --take-over-namespace
// makes its own cluster active for the namespace first.

// activeCheckTimeout bounds the health check of the active cluster.
const activeCheckTimeout = 5 * time.Second

// namespaceSite is what the cluster drctl talks to says of the
// namespace: whether it is global, the cluster drctl reaches (here) and
// the one the namespace is active on, with its address.
type namespaceSite struct {
	global              bool
	here, active, addr  string
	failoverVersion     int64
	activeAnswers       bool
	activeAnswersReason string
}

// describeNamespaceSite asks the cluster drctl reaches where the
// namespace is active, and for a global namespace active elsewhere
// whether that cluster answers.
func (a *app) describeNamespaceSite(ctx context.Context, c client.Client) (*namespaceSite, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := c.WorkflowService().DescribeNamespace(dctx, &workflowservice.DescribeNamespaceRequest{Namespace: a.ns})
	if err != nil {
		return nil, fmt.Errorf("describe namespace %s: %w", a.ns, err)
	}
	ns := &namespaceSite{global: d.GetIsGlobalNamespace(), active: d.GetReplicationConfig().GetActiveClusterName(), failoverVersion: d.GetFailoverVersion()}
	if !ns.global {
		return ns, nil
	}
	info, err := c.WorkflowService().GetClusterInfo(dctx, &workflowservice.GetClusterInfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("the cluster's name: %w", err)
	}
	ns.here = info.GetClusterName()
	if ns.active == ns.here {
		return ns, nil
	}
	clusters, err := c.OperatorService().ListClusters(dctx, &operatorservice.ListClustersRequest{PageSize: 100})
	if err == nil {
		for _, cl := range clusters.GetClusters() {
			if cl.GetClusterName() == ns.active {
				ns.addr = cl.GetAddress()
			}
		}
	}
	ns.activeAnswers, ns.activeAnswersReason = answers(ctx, ns.addr)
	return ns, nil
}

// answers reports whether the Temporal frontend at addr answers its
// health check within activeCheckTimeout, and why not.
func answers(ctx context.Context, addr string) (bool, string) {
	if addr == "" {
		return false, "its address is unknown to this cluster"
	}
	hctx, cancel := context.WithTimeout(ctx, activeCheckTimeout)
	defer cancel()
	c, err := client.DialContext(hctx, client.Options{HostPort: addr, Logger: log.NewStructuredLogger(discardLogger())})
	if err != nil {
		return false, err.Error()
	}
	defer c.Close()
	if _, err := c.CheckHealth(hctx, &client.CheckHealthRequest{}); err != nil {
		return false, err.Error()
	}
	return true, ""
}

// activeHere makes sure a failover can start on the cluster drctl
// reaches: a local namespace, a global one active here, or one active on
// a cluster that answers (the start is forwarded there) need nothing.
// A global namespace active on a cluster that does not answer is taken
// over with takeOver (this cluster made active, waited for), and refused
// without it. takeOver where there is nothing to take over is said, on
// stderr, and the action goes on.
func (a *app) activeHere(ctx context.Context, c client.Client, takeOver bool) error {
	ns, err := a.describeNamespaceSite(ctx, c)
	if err != nil {
		return &exitError{exitUnreachable, err}
	}
	switch {
	case !ns.global:
		if takeOver {
			fmt.Fprintf(a.stderr, "drctl: warning: namespace %s is not global (it lives on one Temporal cluster): nothing to take over; --take-over-namespace does nothing\n", a.ns)
		}
		return nil
	case ns.active == ns.here:
		if takeOver {
			fmt.Fprintf(a.stderr, "drctl: namespace %s is already active on %s, the cluster drctl reaches: nothing to take over\n", a.ns, ns.here)
		}
		return nil
	}
	if takeOver && ns.activeAnswers {
		// Taken over only from a cluster that does not answer: one that
		// answers runs the action, and its workers would go on beside
		// this cluster's.
		fmt.Fprintf(a.stderr, "drctl: namespace %s is active on cluster %s (%s), which answers: nothing is taken over (--take-over-namespace takes over only a cluster that does not answer); the action starts there\n",
			a.ns, ns.active, ns.addr)
		return nil
	}
	if !takeOver {
		if ns.activeAnswers {
			fmt.Fprintf(a.stderr, "drctl: namespace %s is active on cluster %s (%s), not on %s, the cluster drctl reaches: the action starts there\n",
				a.ns, ns.active, ns.addr, ns.here)
			return nil
		}
		return &exitError{exitFailed, fmt.Errorf(`namespace %s is active on Temporal cluster %s (%s), which does not answer from here (%s): nothing can start while it is active there.
If %s's site is lost or cut off, make this cluster (%s) active for the namespace and fail over with --take-over-namespace.
When the link returns, Temporal keeps %s's history of everything run since, and the lost side's workers stop as their cluster learns it is no longer active`,
			a.ns, ns.active, addrOrUnknown(ns.addr), ns.activeAnswersReason, ns.active, ns.here, ns.here)}
	}
	return a.takeOver(ctx, c, ns)
}

// activeUnreachable is an exit 3 naming the cluster the namespace is
// active on, when that is not the cluster drctl reaches and it does not
// answer: what a view reads of a plan lives there (a query is forwarded
// to it), and this cluster's copy may be behind. nil otherwise.
func (a *app) activeUnreachable(ctx context.Context, c client.Client) error {
	ns, err := a.describeNamespaceSite(ctx, c)
	if err != nil || !ns.global || ns.active == ns.here || ns.activeAnswers {
		return nil
	}
	return &exitError{exitUnreachable, fmt.Errorf(`namespace %s is active on Temporal cluster %s (%s), which does not answer from here (%s): the plan's record and protection live there and cannot be read from %s, whose copy may be behind.
Ask %s's cluster, or, if %s's site is lost, fail over with --take-over-namespace`,
		a.ns, ns.active, addrOrUnknown(ns.addr), ns.activeAnswersReason, ns.here, ns.active, ns.active)}
}

func addrOrUnknown(addr string) string {
	if addr == "" {
		return "address unknown"
	}
	return addr
}

// takeOver makes the cluster drctl reaches active for the namespace and
// waits until it says so.
func (a *app) takeOver(ctx context.Context, c client.Client, ns *namespaceSite) error {
	fmt.Fprintf(a.stderr, "drctl: taking namespace %s over: active cluster %s -> %s (%s does not answer: %s)\n", a.ns, ns.active, ns.here, ns.active, addrOrUnknown(ns.activeAnswersReason))
	start := time.Now()
	uctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := c.WorkflowService().UpdateNamespace(uctx, &workflowservice.UpdateNamespaceRequest{Namespace: a.ns,
		ReplicationConfig: &replicationpb.NamespaceReplicationConfig{ActiveClusterName: ns.here}})
	cancel()
	if err != nil {
		return &exitError{exitFailed, fmt.Errorf("make cluster %s active for namespace %s: %w", ns.here, a.ns, err)}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		now, err := a.describeNamespaceSite(ctx, c)
		if err == nil && now.active == ns.here {
			fmt.Fprintf(a.stderr, "drctl: namespace %s is active on %s (failover version %d -> %d) after %v\n",
				a.ns, ns.here, ns.failoverVersion, now.failoverVersion, time.Since(start).Round(time.Millisecond))
			return nil
		}
		if time.Now().After(deadline) {
			return &exitError{exitFailed, fmt.Errorf("namespace %s still not active on %s a minute after the update", a.ns, ns.here)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// replicationWait bounds how long drctl waits for a run it started to
// show on the cluster it talks to.
const replicationWait = 30 * time.Second

// waitVisible waits until the cluster drctl talks to knows the run: on
// a standby cluster a start is forwarded to the active one, and the
// standby knows of the run only once it has replicated (at once on a
// single cluster). It gives up after replicationWait and lets the next
// call say what is wrong.
func waitVisible(ctx context.Context, c client.Client, id, run string) {
	deadline := time.Now().Add(replicationWait)
	for {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.DescribeWorkflowExecution(dctx, id, run)
		cancel()
		if !isNotFound(err) || time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}
