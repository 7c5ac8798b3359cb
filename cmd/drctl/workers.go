package main

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// pollerFresh is how recently a worker must have polled to count as
// running: a live worker's long poll comes back within about a minute,
// and the server lists pollers for some minutes after they stop.
const pollerFresh = 2 * time.Minute

// warnIdleWorkers warns, before an action or protection starts, about
// each task queue it needs that no worker has polled lately: the
// workflow queue, and the queue of every site with a worker of its own.
// The action would wait there without a word until a worker comes, which
// in an outage is the last thing an operator should find out late. A
// failure to ask is not an error: the check only informs.
func (a *app) warnIdleWorkers(ctx context.Context, c client.Client, p *plans.Plan, what string) {
	type queue struct {
		name   string
		typ    enums.TaskQueueType
		serves string
	}
	queues := []queue{{workflows.TaskQueue, enums.TASK_QUEUE_TYPE_WORKFLOW, "the workflows"}}
	for _, s := range p.Sites {
		if s.TaskQueue != "" {
			queues = append(queues, queue{s.TaskQueue, enums.TASK_QUEUE_TYPE_ACTIVITY, "site " + s.Name + "'s calls"})
		}
	}
	a.warnAttributes(ctx, c)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, q := range queues {
		resp, err := c.DescribeTaskQueue(ctx, q.name, q.typ)
		if err != nil {
			continue
		}
		if !polledLately(resp.GetPollers()) {
			fmt.Fprintf(a.stderr, "drctl: warning: no worker has polled task queue %q (%s) in the last %v: the %s will wait until one does; start one (bin/worker%s)\n",
				q.name, q.serves, pollerFresh, what, siteFlag(q.name, p))
		}
	}
}

// warnAttributes warns when the namespace lacks Drover's search
// attributes: the action still runs, but drctl list and the Temporal UI
// cannot find it by plan. A failure to ask is not an error.
func (a *app) warnAttributes(ctx context.Context, c client.Client) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	missing, err := workflows.MissingAttributes(ctx, c, a.ns)
	if err != nil || len(missing) == 0 {
		return
	}
	fmt.Fprintf(a.stderr, "drctl: warning: namespace %s lacks the search attributes %v: Drover's workflows start without them, and drctl list cannot find them by plan;\n%s", a.ns, missing, registerHint())
}

// siteFlag is the worker flag that serves a site's own queue.
func siteFlag(queue string, p *plans.Plan) string {
	for _, s := range p.Sites {
		if s.TaskQueue == queue {
			if queue == names.SiteTaskQueue(s.Name) {
				return " --site " + s.Name
			}
			return " --site " + s.Name + " --task-queue " + queue
		}
	}
	return ""
}

// noProgressCause tells why an action's progress could not be read: the
// Temporal server does not answer, no worker polls the workflows' queue
// (the action waits for one; its state is safe in Temporal either way),
// or something else, said as it is.
func noProgressCause(ctx context.Context, c client.Client, id string, qerr error) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		return fmt.Sprintf("Temporal is unreachable: %v; the action's state is kept by Temporal and it goes on when the server is back; still waiting", err)
	}
	resp, err := c.DescribeTaskQueue(ctx, workflows.TaskQueue, enums.TASK_QUEUE_TYPE_WORKFLOW)
	if err == nil && !polledLately(resp.GetPollers()) {
		return fmt.Sprintf("no worker polls task queue %q: %s waits until one does; start one (bin/worker); still waiting", workflows.TaskQueue, id)
	}
	return fmt.Sprintf("no progress from %s yet: %v", id, qerr)
}

// polledLately reports whether a poller was seen within pollerFresh.
func polledLately(pollers []*taskqueuepb.PollerInfo) bool {
	for _, p := range pollers {
		if time.Since(p.GetLastAccessTime().AsTime()) < pollerFresh {
			return true
		}
	}
	return false
}
