package workflows

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/plans"
)

// FailoverInput starts an unplanned failover: site From is lost, site To
// takes over.
type FailoverInput struct {
	Origin
	Plan *plans.Plan `json:"plan"`
	From string      `json:"from"`
	To   string      `json:"to"`
	// ConfirmUnfenced is the operator's acceptance of a forced promotion
	// without a fence, for a From site whose plan says fencing is
	// unavailable. Without it such a failover stops before promoting.
	ConfirmUnfenced bool `json:"confirmUnfenced,omitempty"`
	// OverrideState is the operator's word that the failover goes on
	// although To's storage reports its copies as primary already.
	OverrideState bool `json:"overrideState,omitempty"`
	// LastSync is the last completed sync known before the loss (from
	// Protect); zero when unknown.
	LastSync time.Time `json:"lastSync,omitzero"`
	// Clients are From's client CIDRs as Protect last recorded them; they
	// are fenced when the plan lists no CIDRs for From.
	Clients []string `json:"clients,omitempty"`
	// SiteFence is set by a site action that fenced From's clients
	// through To's storage for every plan there: the fence step fences
	// only what it lacks, and the verify step reads them back as always.
	SiteFence *SiteFence `json:"siteFence,omitempty"`
	// PointAt, when set, brings the workloads up on volumes made from a
	// point in time instead of the promoted replicas: the newest point
	// the plan's record has at To cut at or before PointAt (drctl
	// failover --point), picked and held before any side effect.
	PointAt time.Time `json:"pointAt,omitzero"`
}

// FailoverResult is the timeline with the achieved recovery figures.
type FailoverResult struct {
	Progress
	// RTO is how long the failover took, start to healthy workloads.
	RTO time.Duration `json:"rto"`
	// RPO estimates the data lost: the failover's start minus the last
	// sync known before it. Zero with RPOKnown false when unknown.
	RPO      time.Duration `json:"rpo"`
	RPOKnown bool          `json:"rpoKnown"`
	Fenced   []string      `json:"fenced,omitempty"`
	// Point is the point in time a failover with PointAt brought the
	// workloads up on, held by the failover's run after it ends;
	// Restored the volumes made from its snapshots at To; Discarded the
	// writes the point does not hold (kept on the promoted replicas).
	PointAt   time.Time        `json:"pointAt,omitzero"`
	Point     *PointInTime     `json:"point,omitempty"`
	Restored  []RestoredVolume `json:"restored,omitempty"`
	Discarded *Discarded       `json:"discarded,omitempty"`
}

// Failover moves the plan to site To after the loss of site From:
//
//  1. preflight To: its storage answers Probe and can replicate, and its
//     copies are not all primary already (a failover to the primary ends
//     there, unless the operator overrides);
//  2. stop From's workloads, best effort within the plan's stopDeadline;
//  3. fence From's client CIDRs through To's storage and verify the fence
//     with ListClusterFence (or, when the plan says From cannot be fenced,
//     go on only with the operator's confirmation);
//  4. force-promote every volume group on To, by priority, at most
//     policy.parallelism at a time;
//  5. start To's workloads by priority and wait until each is healthy.
//
// With PointAt (a failover to a point in time, pointfailover.go), the
// point is picked and held after the preflight, before step 2, and
// between steps 4 and 5 one volume is made from each of its snapshots at
// To; the workloads start on those (their exec hooks get
// DROVER_VOLUME_<VOLUME> and DROVER_POINT). The promoted replicas are
// kept.
//
// Approval gates from the plan sit before the fence, the promotion and the
// start. A step that fails for good pauses for `drctl resolve` (or ends the
// action, with policy onFailure: abort); nothing is promoted unless the
// fence steps succeeded, were confirmed away, or were skipped with an
// explicit override.
func Failover(ctx workflow.Context, in FailoverInput) (*FailoverResult, error) {
	r, err := begin(ctx, "failover", in.Plan, in.From, in.To, in.Origin)
	if err != nil {
		return nil, err
	}
	in.Plan = r.plan
	res := &FailoverResult{}
	err = failover(ctx, r, in, res)
	r.finish(ctx, err)
	res.Progress = *r.progress
	res.RTO = res.End.Sub(res.Start)
	if !in.LastSync.IsZero() {
		res.RPO, res.RPOKnown = res.Start.Sub(in.LastSync), true
	}
	return res, err
}

func failover(ctx workflow.Context, r *run, in FailoverInput, res *FailoverResult) error {
	p, from, to := in.Plan, in.From, in.To
	// The operator's override skips the check of To's roles.
	checkRoles := !in.OverrideState
	r.add(preflightStep(to), false)
	if checkRoles {
		r.add(checkRolesStep(to), false)
	}
	withPoint := !in.PointAt.IsZero()
	if withPoint {
		r.add(pointStep(to), false)
	}
	r.add(stopLostStep(from), false)
	r.add(fenceStep(from), true) // guards: skipping them needs an override
	r.add(verifyFenceStep(from), true)

	pre := func(ctx workflow.Context) error {
		return r.step(ctx, preflightStep(to), false, func(ctx workflow.Context) (string, error) {
			return preflight(ctx, p, to)
		})
	}
	roles := func(ctx workflow.Context, groups []plans.VolumeGroup) error {
		// A contradiction ends the action at once, before any side effect.
		s := r.find(checkRolesStep(to).id)
		s.State, s.Start, s.Attempts = StateRunning, workflow.Now(ctx), 1
		out, err := notPrimaryYet(ctx, p, from, to, groups)
		s.Output, s.End = out, workflow.Now(ctx)
		if err != nil {
			s.State, s.LastError = StateFailed, ErrorText(err)
			return err
		}
		s.State = StateDone
		return nil
	}
	if checkRoles {
		// Both only read: they run together, and both end before any
		// side effect.
		var perr, cerr error
		together(ctx,
			func(ctx workflow.Context) { perr = pre(ctx) },
			func(ctx workflow.Context) { cerr = roles(ctx, roleSample(p, p.Policy.Parallelism)) })
		if perr != nil {
			return perr
		}
		if cerr != nil {
			return cerr
		}
		if err := settle(ctx); err != nil {
			return err
		}
	} else if err := pre(ctx); err != nil {
		return err
	}
	if withPoint {
		// Before any side effect: a time with no point ends the action
		// here, with nothing stopped, fenced or promoted.
		if err := holdFailoverPoint(ctx, r, in, res); err != nil {
			return err
		}
	}

	_ = r.step(ctx, stopLostStep(from), false, func(ctx workflow.Context) (string, error) {
		return stopLost(ctx, p, from, in.Plan.Policy.StopDeadline.D()), nil
	})

	if err := r.gate(ctx, "beforeFence"); err != nil {
		return err
	}
	site := p.Site(from)
	cidrs := site.Fence.CIDRs
	if len(cidrs) == 0 {
		cidrs = in.Clients
	}
	if err := r.step(ctx, fenceStep(from), true, func(ctx workflow.Context) (string, error) {
		switch {
		case site.Fence.Unavailable && !in.ConfirmUnfenced:
			return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"site %q cannot be fenced (fence.unavailable); a forced promotion without a fence needs the operator's confirmation", from), ErrNotFenced, nil)
		case site.Fence.Unavailable:
			return "fencing unavailable; the operator confirmed promoting without a fence", nil
		case len(cidrs) == 0:
			return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"site %q lists no fence CIDRs and no clients were recorded for it", from), ErrNotFenced, nil)
		}
		var lacking []string
		if in.SiteFence != nil {
			for _, c := range cidrs {
				if !slices.Contains(in.SiteFence.CIDRs, c) {
					lacking = append(lacking, c)
				}
			}
		}
		if in.SiteFence == nil || len(lacking) > 0 {
			if err := fenceCIDRs(ctx, p, to, activities.RPCFenceClusterNetwork, cidrs); err != nil {
				return "", err
			}
		}
		// What is fenced must outlive this history: reprotect lifts it.
		if err := r.record(ctx, RecordChange{Fenced: &FenceEntry{Site: from, CIDRs: cidrs, Via: to, By: by(ctx), At: workflow.Now(ctx)}}); err != nil {
			return "", err
		}
		res.Fenced = cidrs
		if in.SiteFence != nil && len(lacking) == 0 {
			return fmt.Sprintf("%s fenced through %s by the site action %s", strings.Join(cidrs, ", "), to, in.SiteFence.Action), nil
		}
		return "fenced " + strings.Join(cidrs, ", ") + " through " + to, nil
	}); err != nil {
		return err
	}
	if err := r.step(ctx, verifyFenceStep(from), true, func(ctx workflow.Context) (string, error) {
		if site.Fence.Unavailable {
			return "nothing to verify: fencing unavailable", nil
		}
		listed, err := listFence(ctx, p, to)
		if cannotList(err) {
			// FenceClusterNetwork answered OK, which a driver gives once
			// the blocklist holds the CIDRs; there is nothing to read it
			// back from.
			return fmt.Sprintf("%d CIDRs fenced as FenceClusterNetwork acknowledged; not read back: the storage of %q does not implement ListClusterFence", len(cidrs), to), nil
		}
		if err != nil {
			return "", err
		}
		var missing []string
		for _, c := range cidrs {
			if !slices.Contains(listed, c) {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"the storage of %q does not list %s as fenced (it lists %v)", to, strings.Join(missing, ", "), listed), ErrNotFenced, nil)
		}
		return fmt.Sprintf("%d CIDRs fenced", len(cidrs)), nil
	}); err != nil {
		return err
	}

	if err := r.gate(ctx, "beforePromote"); err != nil {
		return err
	}
	if err := promoteAll(ctx, r, p, to, true); err != nil {
		return err
	}
	// The record tells the plan's protection: the plan runs on to with
	// no replica, from lost (see PlanRecorder).
	if err := r.notePrimary(ctx, to, from); err != nil {
		return err
	}

	if withPoint {
		if err := restoreFromPoint(ctx, r, in, res); err != nil {
			return err
		}
		if !slices.ContainsFunc(res.Restored, func(v RestoredVolume) bool { return v.ID == "" }) {
			p = restoredPlan(p, to, res.Point.ID, res.Restored)
		}
		// Else the operator skipped the restore (an override): the
		// workloads start on the promoted replicas, as in any failover.
	}

	if err := r.gate(ctx, "beforeStart"); err != nil {
		return err
	}
	return startAll(ctx, r, p, to, "failover")
}

// stopLost stops the workloads of a lost site, best effort: each gets the
// stop deadline in all, and a failure is reported, not fatal.
func stopLost(ctx workflow.Context, p *plans.Plan, site string, deadline time.Duration) string {
	ws := workloadsOn(p, site)
	ctx = workflow.WithValue(ctx, queueBound{}, true)
	lines := make([]string, len(ws))
	names := make([]string, len(ws))
	for i, w := range ws {
		names[i] = w.Name
	}
	_ = parallel(ctx, names, p.Policy.Parallelism, func(ctx workflow.Context, name string) error {
		i := slices.Index(names, name)
		in, err := activities.WorkloadInputFor(p, site, name, "failover")
		if err == nil {
			o := activities.WorkloadOptions(p, site, in.Workload)
			o.ScheduleToCloseTimeout = deadline
			if o.StartToCloseTimeout > deadline {
				o.StartToCloseTimeout = deadline
			}
			// The first attempt is local, cut at localBudget; a lost
			// site's stop that takes longer goes on as a regular activity
			// within the deadline.
			_, err = retried[activities.WorkloadOutput](ctx, o, wl.StopWorkload, in, o.TaskQueue == "")
		}
		if err != nil {
			lines[i] = fmt.Sprintf("%s: not stopped (%s)", name, ErrorText(err))
		} else {
			// Asked, not seen stopped: a lost site's CO may go on
			// running it for a while, and it is not waited for (the
			// fence cuts it off its storage).
			lines[i] = name + ": asked to stop (not confirmed: a lost site is not waited for; the fence cuts it off its storage)"
		}
		return nil
	})
	if len(lines) == 0 {
		return "no workloads on " + site
	}
	return strings.Join(lines, "\n")
}

// promoteAll promotes every volume group on site.
func promoteAll(ctx workflow.Context, r *run, p *plans.Plan, site string, force bool) error {
	return forGroups(ctx, r, p, GroupOp{Kind: OpPromote, Site: site, Force: force})
}
