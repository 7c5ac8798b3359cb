package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/plans"
)

// batchReport is how long a ReplicateBatch runs before it returns what it
// has, so that the step's note shows the groups done.
const batchReport = 5 * time.Second

// localBatchReport is how long a batch's first attempt, a local activity
// on the workflow's own worker, starts calls before it returns: a batch
// done by then costs no turn through the server, where a regular
// activity costs two (the workflow task that schedules it, the one its
// result wakes), and what it left goes on in regular activities. With
// the calls it started still to end, it holds the workflow task for at
// most localBudget.
const localBatchReport = 700 * time.Millisecond

// batchRPC is the RPC of an operation a batch can make, if any.
func batchRPC(op GroupOp) (string, bool) {
	switch op.Kind {
	case OpPromote:
		return activities.RPCPromoteVolume, true
	case OpDemote:
		return activities.RPCDemoteVolume, true
	case OpEnable:
		return activities.RPCEnableVolumeReplication, true
	case OpDisable:
		return activities.RPCDisableVolumeReplication, true
	}
	return "", false
}

// inBatches runs op on every group of the plan, a priority at a time, each
// priority's groups one step and one ReplicateBatch activity that keeps
// policy.parallelism calls in flight. The activity makes one attempt per
// group; the step retries the groups whose failure the classification
// table lets it retry, after the plan's back-off and within its time
// limit, and shows each failed round (attempts, last error) and the
// groups done so far. Groups that failed for good pause the step like a
// batch of children; its retry runs again only those groups.
func inBatches(ctx workflow.Context, r *run, p *plans.Plan, op GroupOp, rpc string) error {
	prios := byPriority(p.VolumeGroups, func(g plans.VolumeGroup) int { return g.Priority }, func(g plans.VolumeGroup) string { return g.Name })
	for _, prio := range prios {
		r.add(batchStep(op, prio), op.Guard)
	}
	rp := activities.RetryPolicy(p)
	limit := activities.CallOptions(p, op.Site, rpc).ScheduleToCloseTimeout
	for _, prio := range prios {
		left, done := prio, 0
		err := r.step(ctx, batchStep(op, prio), false, func(ctx workflow.Context) (string, error) {
			in, err := activities.BatchInputFor(p, op.Site, rpc, op.Force, left)
			if err != nil {
				return "", err
			}
			items := map[string]activities.BatchItem{}
			for _, it := range in.Items {
				items[it.Group] = it
			}
			in.ReportAfter = batchReport
			o := batchOptions(p, op.Site, rpc, in.Items)
			local := o.TaskQueue == ""
			start := workflow.Now(ctx)
			// own: the attempts of a group that found the storage still
			// making a call the cut local attempt gave up on (ownPending),
			// until ownUntil.
			attempts, own := map[string]int{}, map[string]int{}
			var ownUntil time.Time
			var (
				todo, retry = slices.Clone(left), []string(nil)
				due         time.Time
				failed      []GroupFailure
			)
			progress := func() string { return fmt.Sprintf("%d of %d groups done", done, len(prio)) }
			for len(todo)+len(retry) > 0 {
				if len(todo) == 0 {
					if err := workflow.Sleep(ctx, due.Sub(workflow.Now(ctx))); err != nil {
						return progress(), err
					}
					todo, retry = retry, nil
				} else if len(retry) > 0 && !workflow.Now(ctx).Before(due) {
					todo, retry = append(todo, retry...), nil
				}
				in.Items = in.Items[:0]
				for _, g := range todo {
					in.Items = append(in.Items, items[g])
				}
				var res activities.BatchResult
				var err error
				if local {
					res, err = firstBatch(ctx, in)
					if err != nil {
						ownUntil = workflow.Now(ctx).Add(p.Deadline(rpc) + activities.CallGrace)
					}
				}
				if !local || err != nil {
					res, err = call[activities.BatchResult](ctx, o, st.ReplicateBatch, in)
				}
				local = false
				if err != nil {
					return progress(), err
				}
				done += len(res.Done)
				todo = res.NotRun
				var last *activities.BatchFailure
				next, tries := 0, 0
				for i, f := range res.Failed {
					attempts[f.Group]++
					if f.Type == activities.ErrOperationPending && workflow.Now(ctx).Before(ownUntil) {
						own[f.Group]++
					}
					n := attempts[f.Group] - own[f.Group]
					if !f.Retryable || (n > 0 && rp.MaximumAttempts > 0 && int32(n) >= rp.MaximumAttempts) {
						failed = append(failed, GroupFailure{Group: f.Group, Error: f.Error, Type: f.Type})
						continue
					}
					retry = append(retry, f.Group)
					last = &res.Failed[i]
					next = max(next, n)
					tries = max(tries, attempts[f.Group])
				}
				noteStep(ctx, progress())
				if last == nil {
					continue
				}
				// Every group retried found only its own call still
				// running: the short pause, not the back-off.
				wait := backoff(rp, next)
				if next == 0 {
					wait = ownPendingPoll
				}
				if limit > 0 && workflow.Now(ctx).Add(wait).Sub(start) >= limit {
					// Out of time: what still fails is the step's failure.
					for _, g := range retry {
						for _, f := range res.Failed {
							if f.Group == g {
								failed = append(failed, GroupFailure{Group: g, Error: f.Error, Type: f.Type})
							}
						}
					}
					retry = nil
					continue
				}
				due = workflow.Now(ctx).Add(wait)
				mine := ""
				if next == 0 {
					mine = fmt.Sprintf(" (the storage still making the calls the local attempt cut at %v)", localBudget)
				}
				retrying(ctx, errors.New(last.Error), fmt.Sprintf("%s: %d groups failed attempt %d%s, next in %v; %s",
					rpc, len(retry), tries, mine, wait, progress()))
			}
			if len(failed) > 0 {
				left = left[:0:0]
				for _, f := range failed {
					left = append(left, f.Group)
				}
				return progress(), batchFailure(op, failed, len(left)+done)
			}
			return progress(), nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// firstBatch is a batch's local attempt: it starts calls for
// localBatchReport and returns what it did and what it left (NotRun),
// within localBudget. An error (a call that held it past the budget, a
// worker without the activity) is no failure of the calls: the regular
// activity makes them, as it would have.
func firstBatch(ctx workflow.Context, in activities.BatchInput) (activities.BatchResult, error) {
	var res activities.BatchResult
	in.ReportAfter = localBatchReport
	lo := workflow.LocalActivityOptions{StartToCloseTimeout: localBudget, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}}
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, lo), st.ReplicateBatch, in).Get(ctx, &res)
	if err != nil && ctx.Err() == nil {
		noteStep(ctx, fmt.Sprintf("the batch's local attempt ended (%s); the calls go on as a regular activity", ErrorText(err)))
	}
	return res, err
}

// batchOptions are the options of a ReplicateBatch: on the site's queue,
// heartbeating, one attempt long enough for the calls started before it
// reports to end (a group's sources one after another), retried by
// Temporal only when the worker is lost; the next attempt skips the
// groups its heartbeat lists as done.
func batchOptions(p *plans.Plan, site, rpc string, items []activities.BatchItem) workflow.ActivityOptions {
	o := activities.CallOptions(p, site, rpc)
	sources := 1
	for _, it := range items {
		sources = max(sources, len(it.Sources))
	}
	o.StartToCloseTimeout = batchReport + time.Duration(sources)*(p.Deadline(rpc)+activities.CallGrace)
	o.HeartbeatTimeout = activities.DefaultHeartbeatTimeout
	return o
}
