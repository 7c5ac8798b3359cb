package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/orchestrators"
	"github.com/drover-dr/drover/plans"
)

// DrillInput rehearses an action: "failover" or "failback" from From to To.
type DrillInput struct {
	Origin
	Plan   *plans.Plan `json:"plan"`
	Action string      `json:"action"`
	From   string      `json:"from"`
	To     string      `json:"to"`
}

// DrillResult lists every check with its outcome, and what the real action
// would do, step by step.
type DrillResult struct {
	Progress
	OK     bool `json:"ok"`
	Failed int  `json:"failed"`
	// Failures names every failed check with its error, in order.
	Failures []string `json:"failures,omitempty"`
	Would    []string `json:"would"`
}

// DrillCheckBudget bounds the retries of each of a drill's calls: a drill
// is a rehearsal, so a check of a site that does not answer fails within
// tens of seconds, and the drill goes on to the next one.
const DrillCheckBudget = 30 * time.Second

// drillPlan is p with its time limit cut to DrillCheckBudget.
func drillPlan(p *plans.Plan) *plans.Plan {
	q := *p
	if tl := q.Policy.Retry.TimeLimit.D(); tl <= 0 || tl > DrillCheckBudget {
		q.Policy.Retry.TimeLimit = plans.Duration(DrillCheckBudget)
	}
	return &q
}

// Drill runs every check of the action without changing any state:
// endpoints reachable and ready, secrets accepted, capabilities present,
// replication healthy and fresh within the RPO target, orchestrators
// reachable and the workloads (and their CSI volumes) present on the
// target. Failed checks do not stop the drill; the result counts and
// names them. Each call retries for DrillCheckBudget at most, and the
// per-group checks of a site whose storage did not answer fail without
// a call, so a drill against a site that is down ends within minutes.
func Drill(ctx workflow.Context, in DrillInput) (*DrillResult, error) {
	p := in.Plan
	if in.Action != "failover" && in.Action != "failback" {
		return nil, fmt.Errorf("drill: action %q is not failover or failback", in.Action)
	}
	r, err := begin(ctx, "drill "+in.Action, p, in.From, in.To, in.Origin)
	if err != nil {
		return nil, err
	}
	res := &DrillResult{}
	p = drillPlan(r.plan)
	check := func(ref stepRef, fn func(ctx workflow.Context) (string, error)) bool {
		s := r.add(ref, false)
		s.State, s.Start, s.Attempts = StateRunning, workflow.Now(ctx), 1
		// The check's calls note their attempts on its step, as an
		// action's do: a check that waits on a storage that does not
		// answer says which call waits and what it last answered.
		out, err := fn(workflow.WithValue(ctx, stepKey{}, s))
		s.Output, s.End = out, workflow.Now(ctx)
		if err != nil {
			s.State, s.LastError = StateFailed, ErrorText(err)
			res.Failed++
			res.Failures = append(res.Failures, s.Name+": "+s.LastError)
			return false
		}
		s.State = StateDone
		return true
	}

	// Storage of both sites: a failover drill cannot expect the lost site
	// to answer, but today it should.
	ready := map[string]bool{}
	for _, site := range []string{in.From, in.To} {
		ready[site] = check(newRef(KindCheckStorage, "storage ready on "+site, site), func(ctx workflow.Context) (string, error) { return preflight(ctx, p, site) })
		check(newRef(KindCheckSecrets, "secrets accepted on "+site, site), func(ctx workflow.Context) (string, error) {
			cidrs, err := listFence(ctx, p, site)
			if cannotList(err) {
				// ceph-csi: nothing else takes the fence's secrets without
				// fencing; the failover's fence is their first use.
				return "not checked: the storage does not implement ListClusterFence, the one call that takes the fence's secrets without fencing", nil
			}
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("ListClusterFence answered: %d CIDRs fenced", len(cidrs)), nil
		})
	}
	check(newRef(KindCheckFencing, "fencing possible for "+in.From, in.From), func(ctx workflow.Context) (string, error) {
		f := p.Site(in.From).Fence
		switch {
		case f.Unavailable:
			return "fencing unavailable: a failover needs the operator's confirmation", nil
		case len(f.CIDRs) > 0:
			return "fence CIDRs " + strings.Join(f.CIDRs, ", "), nil
		}
		e, err := activities.EndpointFor(p, in.To, activities.RPCGetCapabilities)
		if err != nil {
			return "", err
		}
		caps, err := rpcCall[activities.CapabilitiesResult](ctx, activities.CallOptions(p, in.To, activities.RPCGetCapabilities), st.GetCapabilities, activities.IdentityInput{Endpoint: e})
		if err != nil {
			return "", err
		}
		if m := caps.Missing(activities.CapNetworkFence, activities.CapGetFenceClients); len(m) > 0 {
			return "", fmt.Errorf("the plan lists no CIDRs for %s and the storage of %s lacks %v", in.From, in.To, m)
		}
		return "CIDRs from GetFenceClients at failover time", nil
	})
	for _, g := range p.VolumeGroups {
		check(newRef(KindCheckReplication, fmt.Sprintf("replication of %s fresh on %s", g.Name, in.From), in.From, g.Name), func(ctx workflow.Context) (string, error) {
			if !ready[in.From] {
				return "", fmt.Errorf("not checked: the storage of %s did not answer (see the check storage ready on %s)", in.From, in.From)
			}
			return fresh(ctx, p, in.From, g.Name)
		})
	}
	for _, w := range workloadsOn(p, in.To) {
		check(newRef(KindCheckWorkload, fmt.Sprintf("workload %s ready to start on %s", w.Name, in.To), in.To, w.Name), func(ctx workflow.Context) (string, error) {
			wi, err := activities.WorkloadInputFor(p, in.To, w.Name, "drill")
			if err != nil {
				return "", err
			}
			d, err := call[orchestrators.Description](ctx, activities.WorkloadOptions(p, in.To, wi.Workload), wl.DescribeWorkload, wi)
			if err != nil {
				return "", err
			}
			var missing []string
			for _, v := range d.Volumes {
				if !v.Registered {
					missing = append(missing, v.ID)
				}
			}
			if len(missing) > 0 {
				return d.Detail, fmt.Errorf("CSI volumes %s are not registered on %s", strings.Join(missing, ", "), in.To)
			}
			return strings.TrimSpace(d.Status + " " + d.Detail), nil
		})
	}

	res.Would = would(p, in)
	r.finish(ctx, nil)
	res.Progress = *r.progress
	res.OK = res.Failed == 0
	return res, nil
}

// would lists what the real action would do, in order.
func would(p *plans.Plan, in DrillInput) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	groups := byPriority(p.VolumeGroups, func(g plans.VolumeGroup) int { return g.Priority }, func(g plans.VolumeGroup) string { return g.Name })
	ws := byPriority(workloadsOn(p, in.To), func(w plans.Workload) int { return w.Priority }, func(w plans.Workload) string { return w.Name })
	if in.Action == "failover" {
		add("check that the storage of %s is ready and can replicate", in.To)
		add("stop the workloads of %s, best effort within %v", in.From, p.Policy.StopDeadline)
		if f := p.Site(in.From).Fence; f.Unavailable {
			add("skip fencing %s (unavailable): only with the operator's confirmation", in.From)
		} else {
			add("fence %s's clients %s through %s and verify with ListClusterFence", in.From, strings.Join(f.CIDRs, ", "), in.To)
		}
		for _, b := range groups {
			add("force-promote on %s: %s", in.To, strings.Join(b, ", "))
		}
	} else {
		add("check both sites and that replication on %s is healthy and within %v", in.From, p.Policy.RPOTarget)
		stops := byPriority(workloadsOn(p, in.From), func(w plans.Workload) int { return w.Priority }, func(w plans.Workload) string { return w.Name })
		for i := len(stops) - 1; i >= 0; i-- {
			add("stop on %s and wait until nothing of it runs (within %v, else pause): %s", in.From, p.Policy.StopDeadline, strings.Join(stops[i], ", "))
		}
		for _, b := range groups {
			add("demote on %s without force: %s", in.From, strings.Join(b, ", "))
		}
		for _, b := range groups {
			add("promote on %s without force once the final sync landed: %s", in.To, strings.Join(b, ", "))
		}
		add("unfence %s if fenced, resync %s", in.To, in.From)
	}
	for _, b := range ws {
		add("start on %s and wait healthy: %s", in.To, strings.Join(b, ", "))
	}
	return out
}
