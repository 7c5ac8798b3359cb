package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"golang.org/x/sync/errgroup"

	"github.com/drover-dr/drover/plans"
)

// BatchRPCs are the replication calls a batch may make: one RPC per source,
// no polling.
var BatchRPCs = []string{RPCPromoteVolume, RPCDemoteVolume, RPCEnableVolumeReplication, RPCDisableVolumeReplication}

// BatchInput is one replication RPC on many volume groups of one site: a
// priority's groups of a large plan in one activity instead of an
// activity, a workflow task and a history entry per group.
type BatchInput struct {
	RPC      string   `json:"rpc"`
	Endpoint Endpoint `json:"endpoint"`
	Force    bool     `json:"force,omitempty"`
	// Items are the groups, each with its sources, in the order the calls
	// start.
	Items []BatchItem `json:"items"`
	// Parallelism bounds the groups in flight (default
	// plans.DefaultParallelism).
	Parallelism int `json:"parallelism,omitempty"`
	// ReportAfter, when set, makes the activity stop starting calls after
	// that long and return what it has, so that the workflow shows the
	// progress; the workflow asks again for the rest.
	ReportAfter time.Duration `json:"reportAfter,omitempty"`
}

// BatchItem is one volume group of a batch: its sources on the site, and
// the group's own plugin parameters over the endpoint's.
type BatchItem struct {
	Group      string            `json:"group"`
	Sources    []Source          `json:"sources"`
	Parameters map[string]string `json:"parameters,omitempty"`
}

// BatchFailure is a group whose call failed in this attempt.
type BatchFailure struct {
	Group string `json:"group"`
	Error string `json:"error"`
	Type  string `json:"type,omitempty"`
	// Retryable is the classification table's decision (Retryable): the
	// workflow may try the group again after its back-off.
	Retryable bool `json:"retryable,omitempty"`
}

// BatchResult says, per group, what became of it: done (every source's
// call succeeded), failed, or not started because the batch reported
// before its turn.
type BatchResult struct {
	Done    []string       `json:"done"`
	Failed  []BatchFailure `json:"failed,omitempty"`
	NotRun  []string       `json:"notRun,omitempty"`
	Resumed int            `json:"resumed,omitempty"`
}

// BatchInputFor builds the batch of rpc on the named groups of site.
func BatchInputFor(p *plans.Plan, site, rpc string, force bool, groups []string) (BatchInput, error) {
	if !slices.Contains(BatchRPCs, rpc) {
		return BatchInput{}, fmt.Errorf("%s cannot run in a batch", rpc)
	}
	in := BatchInput{RPC: rpc, Force: force, Parallelism: p.Policy.Parallelism, Items: make([]BatchItem, 0, len(groups))}
	base, err := EndpointFor(p, site, rpc)
	if err != nil {
		return BatchInput{}, err
	}
	in.Endpoint = base
	byName := p.Groups()
	for _, g := range groups {
		vg, ok := byName[g]
		if !ok {
			return BatchInput{}, fmt.Errorf("plan %q has no volume group %q", p.Metadata.Name, g)
		}
		calls, err := GroupInputs(p, site, vg, rpc, force)
		if err != nil {
			return BatchInput{}, err
		}
		it := BatchItem{Group: g, Sources: make([]Source, 0, len(calls))}
		for _, c := range calls {
			it.Sources = append(it.Sources, c.Source)
		}
		if len(calls) > 0 && len(vg.Parameters) > 0 {
			it.Parameters = calls[0].Endpoint.Parameters
		}
		in.Items = append(in.Items, it)
	}
	return in, nil
}

// batchDone is the heartbeat of a batch: the groups done so far, so that
// the attempt after a crash skips them.
type batchDone struct {
	Done []string `json:"done"`
}

// ReplicateBatch makes in.RPC on every group of the batch, at most
// Parallelism groups at a time, a group's sources one after another. Each
// call is one attempt within its endpoint's deadline, classified by the
// same table as a single call; a failure is an entry of the result (the
// workflow retries the retryable ones after its back-off, so the step
// shows them), never the activity's error. It heartbeats the groups done;
// an attempt after a crash skips them.
func (s *Storage) ReplicateBatch(ctx context.Context, in BatchInput) (BatchResult, error) {
	var fn func(context.Context, ReplicationInput) error
	switch in.RPC {
	case RPCPromoteVolume:
		fn = s.PromoteVolume
	case RPCDemoteVolume:
		fn = s.DemoteVolume
	case RPCEnableVolumeReplication:
		fn = s.EnableVolumeReplication
	case RPCDisableVolumeReplication:
		fn = s.DisableVolumeReplication
	default:
		return BatchResult{}, setupError(in.RPC, in.Endpoint, "a batch", ErrInvalidArgument, fmt.Errorf("%s cannot run in a batch", in.RPC))
	}
	res := BatchResult{Done: []string{}}
	skip := map[string]bool{}
	if activity.IsActivity(ctx) && activity.HasHeartbeatDetails(ctx) {
		var prev batchDone
		if err := activity.GetHeartbeatDetails(ctx, &prev); err == nil {
			for _, g := range prev.Done {
				skip[g] = true
			}
		}
	}
	limit := in.Parallelism
	if limit <= 0 {
		limit = plans.DefaultParallelism
	}
	var (
		mu      sync.Mutex
		done    = map[string]bool{}
		failed  = map[string]BatchFailure{}
		started = map[string]bool{}
	)
	beat := func() {
		if !activity.IsActivity(ctx) {
			return
		}
		mu.Lock()
		d := batchDone{Done: make([]string, 0, len(done)+len(skip))}
		for _, it := range in.Items {
			if done[it.Group] || skip[it.Group] {
				d.Done = append(d.Done, it.Group)
			}
		}
		mu.Unlock()
		activity.RecordHeartbeat(ctx, d)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if activity.IsActivity(ctx) {
		every := activity.GetInfo(ctx).HeartbeatTimeout / 3
		if every <= 0 {
			every = time.Second
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				case <-t.C:
					beat()
				}
			}
		}()
	}
	began := time.Now()
	var g errgroup.Group
	g.SetLimit(limit)
	for _, it := range in.Items {
		if skip[it.Group] {
			continue
		}
		if ctx.Err() != nil || (in.ReportAfter > 0 && time.Since(began) >= in.ReportAfter) {
			break
		}
		mu.Lock()
		started[it.Group] = true
		mu.Unlock()
		g.Go(func() error {
			e := in.Endpoint
			if it.Parameters != nil {
				e.Parameters = it.Parameters
			}
			for _, src := range it.Sources {
				err := fn(ctx, ReplicationInput{Endpoint: e, Source: src, Force: in.Force})
				if err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					if errors.Is(err, context.DeadlineExceeded) {
						// The call ended at the activity's own deadline
						// (atOwnDeadline) a moment before its context
						// said so: the batch is cut, not the group failed.
						return err
					}
					typ, _, _ := FailureOf(err)
					mu.Lock()
					failed[it.Group] = BatchFailure{Group: it.Group, Error: err.Error(), Type: typ, Retryable: Retryable(err)}
					mu.Unlock()
					return nil
				}
			}
			mu.Lock()
			done[it.Group] = true
			mu.Unlock()
			return nil
		})
	}
	err := g.Wait()
	close(stop)
	wg.Wait()
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		beat() // what is done stays done for the next attempt
		return BatchResult{}, err
	}
	for _, it := range in.Items {
		switch {
		case skip[it.Group]:
			res.Done = append(res.Done, it.Group)
			res.Resumed++
		case done[it.Group]:
			res.Done = append(res.Done, it.Group)
		case started[it.Group]:
			res.Failed = append(res.Failed, failed[it.Group])
		default:
			res.NotRun = append(res.NotRun, it.Group)
		}
	}
	return res, nil
}
