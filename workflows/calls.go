package workflows

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/plans"
)

// Nil receivers name the activities; the worker runs its registered
// instances (activities.NewStorage, activities.NewWorkloads).
var (
	st *activities.Storage
	wl *activities.Workloads
)

// regularOnly, as a context key, keeps rpcCall to regular activities
// (Protect's calls), unwatched (awaitSite).
type regularOnly struct{}

// queueBound, as a context key, keeps a call's time limit over the time
// it waits in a site's queue for a worker: the best-effort stop of a
// lost site's workloads, whose worker is likely lost with it.
type queueBound struct{}

// call runs one activity and decodes its result.
//
// A step's call on a site's own task queue is watched (awaitSite): the
// step says when the call sits there with no worker to take it. Its
// options stay as they are: an activity Temporal retries (a poll, a
// hook, a batch) waits for the site's worker within its own time limit.
func call[T any](ctx workflow.Context, o workflow.ActivityOptions, fn, in any) (T, error) {
	var out T
	g := gateOf(ctx)
	if g != nil {
		// Protection's call for a point: none starts while an action
		// pauses them, and the pause waits for those under way.
		if err := g.enter(); err != nil {
			return out, err
		}
	}
	start := workflow.Now(ctx)
	f := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, o), fn, in)
	awaitSite(ctx, f, o.TaskQueue, activityName(fn), true)
	err := f.Get(ctx, &out)
	if g != nil {
		g.leave(ctx, o, start, err)
	}
	return out, err
}

// rpcCall runs one storage call (one RPC, no heartbeat) with options o
// from activities.CallOptions.
//
// Its attempts are the workflow's own (retried), so that the workflow
// task is never held longer than localBudget and the step shows every
// failed attempt as it happens; on the workflow's own task queue the
// first attempt is local.
func rpcCall[T any](ctx workflow.Context, o workflow.ActivityOptions, fn, in any) (T, error) {
	if ctx.Value(regularOnly{}) != nil {
		return call[T](ctx, o, fn, in)
	}
	return retried[T](ctx, o, fn, in, o.TaskQueue == "")
}

// cannotList tells whether err is the storage's UNIMPLEMENTED answer to
// ListClusterFence: a storage that does not implement it (ceph-csi's RBD
// driver serves only FenceClusterNetwork and UnfenceClusterNetwork) is
// fenced on the acknowledgement of FenceClusterNetwork and unfenced
// without a listing.
func cannotList(err error) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == activities.ErrNotImplemented
}

// localBudget is the longest a local attempt may hold the workflow task:
// while it runs, the server holds back every query of the action.
const localBudget = time.Second

// ownPendingPoll is the pause before the next attempt of a call whose
// local attempt was cut at localBudget while the storage answers that an
// operation is pending on the volume (ABORTED): a driver may go on with
// a call its caller gave up on (ceph-csi does: its librbd calls run to
// their end), and until that call's deadline the operation pending is
// most likely that very call. The plan's back-off, made for a rival's
// operation, would double the wait each time; measured on real Ceph
// (make bench-ceph), three forced promotions that took 4 s took 16 s.
const ownPendingPoll = 500 * time.Millisecond

// ownPending tells whether err is the storage's answer that another
// operation is pending on the volume, within own, the time a call Drover
// gave up on may still run.
func ownPending(ctx workflow.Context, err error, own time.Time) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == activities.ErrOperationPending && workflow.Now(ctx).Before(own)
}

// retried runs one call with the retry policy, time limit and per-attempt
// deadline of o, one attempt at a time, so that a query is answered
// between any two and the running step (stepKey) shows the attempts
// that failed and the last error while the call goes on.
//
// With local set, the first attempt is a local activity on the
// workflow's own worker (a fraction of a millisecond against the tens a
// trip through the server's matching costs, and a failover is a chain of
// calls), cut at localBudget: a call that fails or takes longer hands
// over to regular activities, each one attempt with the call's whole
// deadline, within what is left of the time limit. The back-off between
// attempts is a workflow timer. Whether an error is worth another
// attempt is what the activity decided from the classification table
// (activities.Retryable). After a cut, while the call cut may still run
// on the storage, an answer that an operation is pending on the volume
// is taken as that call's: the next attempt comes after ownPendingPoll,
// and such attempts count neither toward the back-off nor toward the
// plan's maximum attempts (the step still shows each).
//
// A step's attempt on a site's own task queue waits there for the site's
// worker with no time limit, the step saying so while no worker takes it
// (awaitSite), and the time it waited does not count toward the time
// limit: a site's worker cut off from Temporal holds the action, it does
// not fail it. The failover's best-effort stop of a lost site keeps its
// deadline over the wait (queueBound).
func retried[T any](ctx workflow.Context, o workflow.ActivityOptions, fn, in any, local bool) (T, error) {
	var out T
	rp := o.RetryPolicy
	if rp == nil {
		rp = &temporal.RetryPolicy{}
	}
	limit := o.ScheduleToCloseTimeout
	start := workflow.Now(ctx)
	once := &temporal.RetryPolicy{MaximumAttempts: 1}
	name := activityName(fn)
	failed, own := 0, 0
	// ownUntil: until then the call a cut local attempt gave up on may
	// still be running on the storage.
	var ownUntil time.Time
	for {
		var err error
		left := limit - workflow.Now(ctx).Sub(start)
		if local {
			lo := workflow.LocalActivityOptions{StartToCloseTimeout: min(o.StartToCloseTimeout, localBudget), RetryPolicy: once}
			err = workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, lo), fn, in).Get(ctx, &out)
		} else {
			ro := o
			ro.RetryPolicy = once
			waits := watched(ctx, o.TaskQueue) && ctx.Value(queueBound{}) == nil
			if limit > 0 {
				ro.ScheduleToCloseTimeout = max(left, time.Second)
				ro.StartToCloseTimeout = min(o.StartToCloseTimeout, ro.ScheduleToCloseTimeout)
				if waits {
					// The attempt waits in the site's queue for as long
					// as no worker takes it (the step says so): only the
					// time the site's worker had the call counts.
					ro.ScheduleToCloseTimeout = 0
				}
			}
			f := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, ro), fn, in)
			start = start.Add(awaitSite(ctx, f, o.TaskQueue, name, false))
			err = f.Get(ctx, &out)
		}
		if err == nil {
			return out, nil
		}
		cut := local && o.StartToCloseTimeout > localBudget && cutAtBudget(err)
		if ctx.Err() != nil || (!cut && !activities.Retryable(err)) {
			return out, err
		}
		wasLocal := local
		local = false
		if cut {
			// Not a failure: the call needs longer than a local attempt
			// may hold the workflow task. It runs again at once as a
			// regular activity with its whole deadline.
			noteStep(ctx, fmt.Sprintf("%s took over %v; it goes on as a regular activity", name, localBudget))
			ownUntil = workflow.Now(ctx).Add(o.StartToCloseTimeout)
			continue
		}
		failed++
		pending := ownPending(ctx, err, ownUntil)
		if pending {
			own++
		}
		counted := failed - own
		if !pending && rp.MaximumAttempts > 0 && int32(counted) >= rp.MaximumAttempts {
			return out, err
		}
		wait := backoff(rp, counted)
		if pending {
			wait = ownPendingPoll
		}
		if limit > 0 && workflow.Now(ctx).Sub(start)+wait >= limit {
			return out, err
		}
		how := ""
		if wasLocal {
			how = "; it goes on as a regular activity"
		}
		if pending {
			how = fmt.Sprintf("; the storage is still making the call cut at %v", localBudget)
		}
		retrying(ctx, err, fmt.Sprintf("%s: attempt %d failed, next in %v%s", name, failed, wait, how))
		if err := workflow.Sleep(ctx, wait); err != nil {
			return out, err
		}
	}
}

// backoff is the pause after the n-th failed attempt under rp.
func backoff(rp *temporal.RetryPolicy, n int) time.Duration {
	d := rp.InitialInterval
	if d <= 0 {
		d = time.Second
	}
	coef := rp.BackoffCoefficient
	if coef < 1 {
		coef = 2
	}
	for i := 1; i < n; i++ {
		d = time.Duration(float64(d) * coef)
		if rp.MaximumInterval > 0 && d >= rp.MaximumInterval {
			return rp.MaximumInterval
		}
	}
	if rp.MaximumInterval > 0 && d > rp.MaximumInterval {
		d = rp.MaximumInterval
	}
	return d
}

func isTimeout(err error) bool {
	var te *temporal.TimeoutError
	return errors.As(err, &te)
}

// cutAtBudget tells whether a local attempt ended at its deadline: the
// SDK's timeout, or the call's own answer to it. A storage call returns
// its context's error when the activity's deadline passes, and when that
// answer and the deadline come together the SDK reports the answer (as
// an application error of the Go type's name once it has been through
// the SDK's converter, as itself in the test environment). The storage's
// own DEADLINE_EXCEEDED is a failure like any other (Storage.call turns
// the one that is really the activity's deadline into the context's
// error).
func cutAtBudget(err error) bool {
	var ae *temporal.ApplicationError
	return isTimeout(err) || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ae) && ae.Type() == deadlineExceededType)
}

// deadlineExceededType is the error type the SDK gives an activity's
// context.DeadlineExceeded (the name of its Go type).
var deadlineExceededType = reflect.TypeOf(context.DeadlineExceeded).Name()

// activityName is the name an activity method is registered under
// ("PromoteVolume" for st.PromoteVolume).
func activityName(fn any) string {
	n := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name()
	n = strings.TrimSuffix(n, "-fm")
	if i := strings.LastIndex(n, "."); i >= 0 {
		n = n[i+1:]
	}
	return n
}

// stepKey, as a context key, holds the *Step a call runs for (run.step).
type stepKey struct{}

// retrying records a failed attempt of a call on the running step: its
// count, its error and what happens next.
func retrying(ctx workflow.Context, err error, note string) {
	if s, ok := ctx.Value(stepKey{}).(*Step); ok && s != nil {
		s.Retries++
		s.LastError = ErrorText(err)
		s.Note = note
	}
}

// noteStep sets the note of the running step.
func noteStep(ctx workflow.Context, note string) {
	if s, ok := ctx.Value(stepKey{}).(*Step); ok && s != nil {
		s.Note = note
	}
}

// listFence returns the CIDRs the storage of site lists as fenced.
func listFence(ctx workflow.Context, p *plans.Plan, site string) ([]string, error) {
	e, err := activities.EndpointFor(p, site, activities.RPCListClusterFence)
	if err != nil {
		return nil, err
	}
	l, err := rpcCall[activities.FenceList](ctx, activities.CallOptions(p, site, activities.RPCListClusterFence), st.ListClusterFence,
		activities.FenceListInput{Endpoint: e})
	return l.CIDRs, err
}

// fenceCIDRs fences (rpc FenceClusterNetwork) or unfences
// (UnfenceClusterNetwork) cidrs through the storage of site.
func fenceCIDRs(ctx workflow.Context, p *plans.Plan, site, rpc string, cidrs []string) error {
	e, err := activities.EndpointFor(p, site, rpc)
	if err != nil {
		return err
	}
	fn := st.FenceClusterNetwork
	if rpc == activities.RPCUnfenceClusterNetwork {
		fn = st.UnfenceClusterNetwork
	}
	_, err = rpcCall[struct{}](ctx, activities.CallOptions(p, site, rpc), fn, activities.FenceInput{Endpoint: e, CIDRs: cidrs})
	return err
}

// together runs fns at once and returns when all have.
func together(ctx workflow.Context, fns ...func(ctx workflow.Context)) {
	wg := workflow.NewWaitGroup(ctx)
	for _, fn := range fns {
		wg.Add(1)
		workflow.Go(ctx, func(ctx workflow.Context) {
			defer wg.Done()
			fn(ctx)
		})
	}
	wg.Wait(ctx)
}

// eachTogether runs fn for each of n items together (in the order of
// together, so a replay schedules the same calls) and joins their
// errors.
func eachTogether(ctx workflow.Context, n int, fn func(ctx workflow.Context, i int) error) error {
	errs := make([]error, n)
	fns := make([]func(ctx workflow.Context), n)
	for i := range n {
		fns[i] = func(ctx workflow.Context) { errs[i] = fn(ctx, i) }
	}
	together(ctx, fns...)
	return errors.Join(errs...)
}
