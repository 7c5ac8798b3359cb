package activities

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
)

// A call's first attempt is a local activity that the workflow cuts at a
// second (workflows.localBudget); a replication call on real storage
// often takes longer (a forced PromoteVolume took 1.3–5 s on real Ceph),
// and a driver such as ceph-csi goes on with a call its caller gave up
// on, answering ABORTED to the next until it ends. Made again, the call
// costs the storage a second operation of seconds.
//
// So a replication call a local attempt gives up on is not cancelled: it
// runs on to its own deadline as a flight of this worker, and the next
// attempt of the same call (the same workflow run, RPC, endpoint, source
// and force) on this worker takes its outcome, waiting for it if it still
// runs, instead of making the call again. An attempt on another worker
// makes the call anew (and the workflow reads the ABORTED it may get as
// its own call still running). An outcome no attempt takes is dropped
// flightKeep after the call ended.

// flightRPCs are the calls that fly: those whose outcome is all in their
// error (no answer to hand over), the ones a workflow's step makes once.
var flightRPCs = []string{RPCPromoteVolume, RPCDemoteVolume, RPCEnableVolumeReplication, RPCDisableVolumeReplication}

// flightKeep is how long the outcome of a call its local attempt gave up
// on waits for the next attempt.
const flightKeep = 10 * time.Second

type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

type flight struct {
	done chan struct{}
	err  error
}

// flightKey names a call of a workflow run, or "" outside a workflow's
// activity.
func flightKey(ctx context.Context, rpc string, in ReplicationInput) string {
	if !activity.IsActivity(ctx) {
		return ""
	}
	info := activity.GetInfo(ctx)
	return fmt.Sprintf("%s|%s|%s|%s|%+v|%v", info.WorkflowExecution.RunID, rpc, in.Endpoint.Site, in.Endpoint.Address, in.Source, in.Force)
}

// do runs call, or takes the outcome of the same call (key) a local
// attempt gave up on. A local attempt's call outlives the attempt's
// context: cut, it returns the context's error and leaves the call
// running.
func (f *flights) do(ctx context.Context, key string, call func(ctx context.Context) error) error {
	if key == "" {
		return call(ctx)
	}
	f.mu.Lock()
	if f.m == nil {
		f.m = map[string]*flight{}
	}
	if fl, ok := f.m[key]; ok {
		f.mu.Unlock()
		return f.await(ctx, key, fl)
	}
	if !activity.GetInfo(ctx).IsLocalActivity {
		f.mu.Unlock()
		return call(ctx)
	}
	fl := &flight{done: make(chan struct{})}
	f.m[key] = fl
	f.mu.Unlock()
	go func() {
		// The call's own deadline bounds it (Storage.call); the
		// attempt's cut does not.
		fl.err = call(context.WithoutCancel(ctx))
		close(fl.done)
		time.AfterFunc(flightKeep, func() { f.take(key, fl) })
	}()
	return f.await(ctx, key, fl)
}

// await waits for fl's outcome and takes it, or returns when ctx ends,
// leaving it.
func (f *flights) await(ctx context.Context, key string, fl *flight) error {
	select {
	case <-fl.done:
		f.take(key, fl)
		return fl.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// take drops the flight of key if it is fl.
func (f *flights) take(key string, fl *flight) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m[key] == fl {
		delete(f.m, key)
	}
}
