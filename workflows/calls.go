package workflows

import (
	"errors"

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

// changeLocalCalls marks histories in which single storage calls run as
// local activities (see rpcCall); older histories replay them as
// regular activities.
const changeLocalCalls = "local-storage-calls"

// regularOnly, as a context key, keeps rpcCall to regular activities.
type regularOnly struct{}

// call runs one activity and decodes its result.
func call[T any](ctx workflow.Context, o workflow.ActivityOptions, fn, in any) (T, error) {
	var out T
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, o), fn, in).Get(ctx, &out)
	return out, err
}

// rpcCall runs one storage call (one RPC, no heartbeat) with options o
// from activities.CallOptions.
//
// Without a site task queue it runs as a local activity on the workflow's
// own worker: a regular activity costs a round trip through the server's
// matching (tens of milliseconds, more under load), a local one a
// fraction of a millisecond, and a failover is a chain of such calls. The
// retry policy, the per-attempt deadline and the time limit are the same;
// the result is recorded in the history as a marker, and a call that was
// in flight when the worker died runs again on replay (the CSI-Addons
// calls are idempotent). With a site task queue the call stays a regular
// activity, since only a worker inside the site can reach its storage.
func rpcCall[T any](ctx workflow.Context, o workflow.ActivityOptions, fn, in any) (T, error) {
	if o.TaskQueue != "" || ctx.Value(regularOnly{}) != nil || !localCalls(ctx) {
		return call[T](ctx, o, fn, in)
	}
	var out T
	lo := workflow.LocalActivityOptions{
		StartToCloseTimeout:    o.StartToCloseTimeout,
		ScheduleToCloseTimeout: o.ScheduleToCloseTimeout,
		RetryPolicy:            o.RetryPolicy,
	}
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, lo), fn, in).Get(ctx, &out)
	return out, err
}

// changeUnlistedFence marks histories in which a storage that does not
// implement ListClusterFence (ceph-csi's RBD driver serves only
// FenceClusterNetwork and UnfenceClusterNetwork) is fenced on the
// acknowledgement of FenceClusterNetwork and unfenced without a listing.
const changeUnlistedFence = "unlisted-fence"

// cannotList tells whether err is the storage's UNIMPLEMENTED answer to
// ListClusterFence, in a run that handles it (changeUnlistedFence).
func cannotList(ctx workflow.Context, err error) bool {
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != activities.ErrNotImplemented {
		return false
	}
	return workflow.GetVersion(ctx, changeUnlistedFence, workflow.DefaultVersion, 1) == 1
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

// localCalls tells whether this run makes its single storage calls as
// local activities, and its independent calls at once.
func localCalls(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, changeLocalCalls, workflow.DefaultVersion, 1) == 1
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
