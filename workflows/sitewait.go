package workflows

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/plans"
)

// A site with a task queue of its own has its calls run by a worker
// inside it. When that worker is cut off from Temporal (its link down,
// its host gone), a call of the site sits in the queue: nothing fails,
// and without a word the step would look like a slow call. The step
// says instead, after siteWaitAfter, that it waits for the site's
// worker, naming the site, its queue and the workers that last polled
// it, and that it goes on by itself: when a worker takes the call, the
// action goes on with no operator's decision. It is not a paused step
// (those wait for drctl resolve): the step stays running, marked
// Step.WaitsForWorker.

// siteWaitAfter is how long a call may sit unstarted in a site's task
// queue before the step says it waits for the site's worker: longer than
// a busy worker's backlog of a plan's calls takes to drain, far shorter
// than the plan's time limit (ten minutes by default). The question is
// asked again at twice the interval each time, up to siteWaitMax, so
// that a worker cut off for hours adds a few events an hour to the
// history.
var siteWaitAfter = 20 * time.Second

const siteWaitMax = 5 * time.Minute

// SiteWaitInput names the calls of a workflow run that may sit in a
// site's task queue: the activity type and the queue.
type SiteWaitInput struct {
	WorkflowID string `json:"workflowId"`
	RunID      string `json:"runId"`
	Queue      string `json:"queue"`
	Activity   string `json:"activity"`
}

// QueuePoller is one worker the server lists as a poller of a task
// queue, and when it last polled.
type QueuePoller struct {
	Identity   string    `json:"identity"`
	LastAccess time.Time `json:"lastAccess,omitzero"`
}

// SiteWait is what Temporal says of a run's calls on a site's queue:
// whether one sits there unstarted, since when, and the workers that
// polled the queue (the server keeps a poller listed for some minutes
// after its last poll).
type SiteWait struct {
	Waiting bool          `json:"waiting"`
	Since   time.Time     `json:"since,omitzero"`
	Pollers []QueuePoller `json:"pollers,omitempty"`
}

// SiteQueueWait asks Temporal whether a call of in.Activity of the run
// sits unstarted in task queue in.Queue (a pending activity scheduled
// and not started: no worker took it), and which workers polled that
// queue. It runs on the worker that runs the workflows, which reaches
// Temporal whatever became of the site's worker.
func (rr *RunReader) SiteQueueWait(ctx context.Context, in SiteWaitInput) (SiteWait, error) {
	var w SiteWait
	if rr == nil || rr.Client == nil {
		return w, fmt.Errorf("this worker has no client to ask Temporal about task queue %s", in.Queue)
	}
	d, err := rr.Client.DescribeWorkflowExecution(ctx, in.WorkflowID, in.RunID)
	if err != nil {
		return w, err
	}
	now := time.Now()
	for _, a := range d.GetPendingActivities() {
		if a.GetActivityType().GetName() != in.Activity || a.GetState() != enums.PENDING_ACTIVITY_STATE_SCHEDULED {
			continue
		}
		if q := a.GetActivityOptions().GetTaskQueue().GetName(); q != "" && q != in.Queue {
			continue
		}
		at := a.GetScheduledTime().AsTime()
		if a.GetScheduledTime() != nil && at.After(now) {
			continue // between two attempts: not in the queue yet
		}
		if !w.Waiting || at.Before(w.Since) {
			w.Since = at
		}
		w.Waiting = true
	}
	resp, err := rr.Client.DescribeTaskQueue(ctx, in.Queue, enums.TASK_QUEUE_TYPE_ACTIVITY)
	if err != nil {
		return w, err
	}
	for _, p := range resp.GetPollers() {
		w.Pollers = append(w.Pollers, QueuePoller{Identity: p.GetIdentity(), LastAccess: p.GetLastAccessTime().AsTime()})
	}
	return w, nil
}

// planKey, as a context key, holds the plan of the running step's action
// (run.step), so that a call names the site its task queue serves.
type planKey struct{}

// siteOfQueue is the site of the running action's plan whose calls go to
// queue, or "" when none names it.
func siteOfQueue(ctx workflow.Context, queue string) string {
	if p, ok := ctx.Value(planKey{}).(*plans.Plan); ok && p != nil {
		for _, s := range p.Sites {
			if s.TaskQueue == queue {
				return s.Name
			}
		}
	}
	return ""
}

// awaitSite waits for f, a call of activity name on queue, the task
// queue of a site's own worker, and returns how long the call was seen
// sitting unstarted there. While it sits unstarted past siteWaitAfter,
// the running step says so (waitingNote). Only a step's calls are
// watched, not Protect's (regularOnly): Protect is a long-running poll
// that says nothing step by step, and its next round comes anyway.
//
// With again unset, f is one attempt that Temporal does not retry: once
// no call of its kind sits unstarted in the queue, it has started and
// cannot sit there again, and the watch ends (a long call adds nothing
// more to the history). With again set, Temporal may schedule the call
// anew after a failed attempt (a poll whose worker stopped
// heartbeating), and the watch goes on.
func awaitSite(ctx workflow.Context, f workflow.Future, queue, name string, again bool) time.Duration {
	if !watched(ctx, queue) {
		return 0
	}
	s := ctx.Value(stepKey{}).(*Step)
	tctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	info := workflow.GetInfo(ctx)
	in := SiteWaitInput{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID, Queue: queue, Activity: name}
	site := siteOfQueue(ctx, queue)
	scheduled := workflow.Now(ctx)
	var waited time.Duration
	var since time.Time
	for every := siteWaitAfter; ; every = min(2*every, siteWaitMax) {
		done := false
		workflow.NewSelector(ctx).
			AddFuture(f, func(workflow.Future) { done = true }).
			AddFuture(workflow.NewTimer(tctx, every), func(workflow.Future) {}).
			Select(ctx)
		if done || ctx.Err() != nil {
			break
		}
		var w SiteWait
		lctx := workflow.WithLocalActivityOptions(ctx, siteWaitOptions)
		var rr *RunReader
		if err := workflow.ExecuteLocalActivity(lctx, rr.SiteQueueWait, in).Get(ctx, &w); err != nil {
			workflow.GetLogger(ctx).Warn("could not ask Temporal about a site's task queue", "queue", queue, "error", err)
			continue
		}
		if f.IsReady() || !w.Waiting {
			if s.WaitsForWorker && !f.IsReady() {
				// Taken by a worker since: the step is a running call again.
				s.WaitsForWorker, s.Note = false, fmt.Sprintf("%s: taken by %s after %v without one", name, siteWorker(site, queue), waited.Round(time.Second))
			}
			if !again {
				break
			}
			continue
		}
		if since.IsZero() {
			since = w.Since
		}
		// Another call of the same kind may have waited longer: this
		// one waited at most since it was scheduled.
		waited = min(workflow.Now(ctx).Sub(since), workflow.Now(ctx).Sub(scheduled))
		if since.IsZero() || waited < 0 {
			waited = workflow.Now(ctx).Sub(scheduled)
		}
		s.WaitsForWorker, s.Note = true, waitingNote(site, queue, name, since, w.Pollers)
	}
	if s.WaitsForWorker {
		s.WaitsForWorker, s.Note = false, fmt.Sprintf("%s: taken by %s after %v without one", name, siteWorker(site, queue), waited.Round(time.Second))
	}
	return waited
}

// watched tells whether a call on queue is watched by awaitSite: a
// step's call (not Protect's) on a site's own task queue.
func watched(ctx workflow.Context, queue string) bool {
	s, ok := ctx.Value(stepKey{}).(*Step)
	return queue != "" && ok && s != nil && ctx.Value(regularOnly{}) == nil
}

// siteWaitOptions bound the question about a site's queue: a local
// activity on the workflows' own worker (two quick reads of Temporal;
// while it runs, queries of the action wait), short, not retried (the
// next look comes anyway).
var siteWaitOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 5 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
}

// siteWorker names the worker of a site ("site east's worker").
func siteWorker(site, queue string) string {
	if site == "" {
		return "the worker of task queue " + queue
	}
	return "site " + site + "'s worker"
}

// waitingNote is what a step says while a call of its sits unstarted in
// a site's task queue: the site, the queue, the call, since when, the
// workers that polled it last and when, and that the action goes on by
// itself once a worker takes the call.
func waitingNote(site, queue, name string, since time.Time, pollers []QueuePoller) string {
	note := fmt.Sprintf("waits for %s: %s sits in task queue %s", siteWorker(site, queue), name, queue)
	if !since.IsZero() {
		note += " since " + since.UTC().Format(time.TimeOnly) + " UTC"
	}
	note += ", no worker takes it (cut off from Temporal, or stopped); "
	if len(pollers) == 0 {
		note += "no worker has polled it lately"
	} else {
		seen := make([]string, len(pollers))
		for i, p := range pollers {
			seen[i] = p.Identity + " at " + p.LastAccess.UTC().Format(time.TimeOnly) + " UTC"
		}
		note += "last polled by " + strings.Join(seen, ", ")
	}
	flag := ""
	if site != "" {
		flag = " (bin/worker --site " + site + ")"
	}
	return note + "; the action goes on by itself when a worker" + flag + " polls the queue again, no resolve needed"
}
