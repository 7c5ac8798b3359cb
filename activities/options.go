package activities

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/plans"
)

// CallGrace is how much longer an activity may run than its call's
// deadline, so that the call's own DEADLINE_EXCEEDED (retried by the
// table) arrives before Temporal's start-to-close timeout.
const CallGrace = 5 * time.Second

// DefaultHeartbeatTimeout bounds how long a polling activity on a crashed
// worker goes unnoticed.
const DefaultHeartbeatTimeout = 15 * time.Second

// RetryPolicy is the plan's back-off with the always-final error types.
func RetryPolicy(p *plans.Plan) *temporal.RetryPolicy {
	r := p.Policy.Retry
	rp := &temporal.RetryPolicy{
		InitialInterval:        orDefault(r.InitialInterval.D(), plans.DefaultInitialInterval),
		BackoffCoefficient:     r.BackoffCoefficient,
		MaximumInterval:        orDefault(r.MaximumInterval.D(), plans.DefaultMaximumInterval),
		MaximumAttempts:        int32(r.MaximumAttempts),
		NonRetryableErrorTypes: NonRetryableTypes(),
	}
	if rp.BackoffCoefficient < 1 {
		rp.BackoffCoefficient = plans.DefaultBackoffCoefficient
	}
	return rp
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// CallOptions are the activity options of one storage call of rpc on a
// site: the site's task queue, the call's deadline plus CallGrace per
// attempt, the plan's time limit over all attempts (a dead site fails
// fast instead of hanging), and the plan's back-off.
func CallOptions(p *plans.Plan, site, rpc string) workflow.ActivityOptions {
	o := workflow.ActivityOptions{
		StartToCloseTimeout:    p.Deadline(rpc) + CallGrace,
		ScheduleToCloseTimeout: orDefault(p.Policy.Retry.TimeLimit.D(), plans.DefaultTimeLimit),
		RetryPolicy:            RetryPolicy(p),
	}
	if s := p.Site(site); s != nil {
		o.TaskQueue = s.TaskQueue
	}
	return o
}

// PollOptions are the options of a polling activity (ResyncUntilReady,
// WaitForSync) that may take up to limit in all: it heartbeats, so a
// crashed worker is noticed within DefaultHeartbeatTimeout and the next
// attempt resumes from the heartbeat.
func PollOptions(p *plans.Plan, site, rpc string, limit time.Duration) workflow.ActivityOptions {
	o := CallOptions(p, site, rpc)
	limit = orDefault(limit, o.ScheduleToCloseTimeout)
	o.StartToCloseTimeout = limit
	o.ScheduleToCloseTimeout = limit
	o.HeartbeatTimeout = DefaultHeartbeatTimeout
	return o
}

// service maps an RPC to the plan field naming its endpoint.
func service(rpc string) string {
	switch {
	case slices.Contains(IdentityRPCs, rpc):
		return "identity"
	case slices.Contains(FenceRPCs, rpc):
		return "fence"
	case slices.Contains(CSIRPCs, rpc):
		return "csi"
	default:
		return "replication"
	}
}

// EndpointFor builds the endpoint of one rpc on a site of the plan: the
// service's address (falling back to storage.endpoint), TLS, the secret
// reference, the site's parameters merged with its callParameters for the
// rpc, and the rpc's deadline.
func EndpointFor(p *plans.Plan, site, rpc string) (Endpoint, error) {
	s := p.Site(site)
	if s == nil {
		return Endpoint{}, fmt.Errorf("plan %q has no site %q", p.Metadata.Name, site)
	}
	st := s.Storage
	addr := st.Endpoint
	switch service(rpc) {
	case "identity":
		addr = first(st.Identity, addr)
	case "fence":
		addr = first(st.Fence, addr)
	case "csi":
		addr = first(st.CSI, addr)
	default:
		addr = first(st.Replication, addr)
	}
	if addr == "" {
		return Endpoint{}, fmt.Errorf("site %q has no storage endpoint for %s", site, rpc)
	}
	params := maps.Clone(st.Parameters)
	if extra := st.CallParameters[rpc]; len(extra) > 0 {
		if params == nil {
			params = map[string]string{}
		}
		maps.Copy(params, extra) //workflowcheck:ignore a map filled from a map: order-free
	}
	return Endpoint{Site: site, Address: addr, TLS: st.TLS, Secret: st.Secret, Parameters: params, Deadline: p.Deadline(rpc)}, nil
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ReplicationInputs builds the inputs of one replication rpc for a volume
// group of the plan on a site: one input for a storage-side group, one per
// volume for a group of loose volumes. The group's parameters go over the
// site's.
func ReplicationInputs(p *plans.Plan, site, group, rpc string, force bool) ([]ReplicationInput, error) {
	for i := range p.VolumeGroups {
		if p.VolumeGroups[i].Name == group {
			return GroupInputs(p, site, &p.VolumeGroups[i], rpc, force)
		}
	}
	return nil, fmt.Errorf("plan %q has no volume group %q", p.Metadata.Name, group)
}

// GroupInputs is ReplicationInputs for a group already looked up, as loops
// over many groups do with plans.Plan.Groups: a lookup by name per group
// costs the square of the plan's size.
func GroupInputs(p *plans.Plan, site string, g *plans.VolumeGroup, rpc string, force bool) ([]ReplicationInput, error) {
	e, err := EndpointFor(p, site, rpc)
	if err != nil {
		return nil, err
	}
	ref, ok := g.Sites[site]
	if !ok {
		return nil, fmt.Errorf("volume group %q has nothing on site %q", g.Name, site)
	}
	if len(g.Parameters) > 0 && rpc != RPCGetVolumeReplicationInfo {
		params := maps.Clone(e.Parameters)
		if params == nil {
			params = map[string]string{}
		}
		maps.Copy(params, g.Parameters) //workflowcheck:ignore a map filled from a map: order-free
		e.Parameters = params
	}
	if ref.GroupID != "" {
		return []ReplicationInput{{Endpoint: e, Source: Source{GroupID: ref.GroupID}, Force: force}}, nil
	}
	out := make([]ReplicationInput, 0, len(ref.Volumes))
	for _, v := range ref.Volumes {
		out = append(out, ReplicationInput{Endpoint: e, Source: Source{VolumeID: v}, Force: force})
	}
	return out, nil
}
