package workflows

import (
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/plans"
)

// FailbackInput starts a planned move of the plan from site From (the
// current primary) to site To, with no data loss.
type FailbackInput struct {
	Origin
	Plan *plans.Plan `json:"plan"`
	From string      `json:"from"`
	To   string      `json:"to"`
	// Fenced are CIDRs of To fenced beyond the plan's (by a failover that
	// fenced Protect's recorded clients), lifted if still fenced.
	Fenced []string `json:"fenced,omitempty"`
}

// FailbackResult is the timeline, and whether the move was rolled back.
type FailbackResult struct {
	Progress
	RolledBack bool   `json:"rolledBack,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// ErrRolledBack is the error type of a failback that failed to promote
// To and put everything back on From.
const ErrRolledBack = "FailbackRolledBack"

// Failback moves the plan from From to To without losing a write:
//
//  1. preflight both sites (and, on volumes that stand in for the plan's
//     after a failover to a point, read To's Nomad jobs as they will
//     start on them), and require healthy replication no older than the
//     plan's RPO target on From;
//  2. stop From's workloads;
//  3. demote From's groups without force (the final sync ships), and
//     read their roles back once it settled: a copy primary again (a
//     storage-side snapshot schedule taken across the demotion) is
//     demoted again before anything is promoted (demotionHeld);
//  4. promote To's groups without force: the storage refuses
//     (FAILED_PRECONDITION) until the final sync has landed, so the
//     promotion is retried until it does, within the plan's time limit;
//  5. unfence To if it is fenced;
//  6. start To's workloads;
//  7. resync From, which is now To's replica, never with force, until To
//     reports a sync to it begun since the promotion: a copy the storage
//     finds diverged pauses the step with an explanation. The workloads
//     do not wait for it: the failback ends once From follows To.
//
// If To cannot be promoted, the failback rolls back: To's promoted groups
// are demoted, From's are promoted again, From's workloads restarted, and
// the action ends with ErrRolledBack.
func Failback(ctx workflow.Context, in FailbackInput) (*FailbackResult, error) {
	r, err := begin(ctx, "failback", in.Plan, in.From, in.To, in.Origin)
	if err != nil {
		return nil, err
	}
	in.Plan = r.plan
	res := &FailbackResult{}
	err = failback(ctx, r, in, res)
	r.finish(ctx, err)
	res.Progress = *r.progress
	return res, err
}

func failback(ctx workflow.Context, r *run, in FailbackInput, res *FailbackResult) error {
	p, from, to := in.Plan, in.From, in.To
	if rs := r.view.Restored; rs != nil && rs.Site == from {
		// The plan's groups name the promoted replicas, which hold what
		// the failover to a point went back from; the workloads write to
		// the restored volumes, which have no copy at To yet.
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"plan %q runs on volumes restored from point %s at %s: a failback would move the promoted replicas, which hold what the failover went back from, not the restored volumes the workloads write to; reprotect first (drctl reprotect), which makes the restored volumes the protected ones, then fail back",
			p.Metadata.Name, rs.Point, from), ErrPreflight, nil)
	}
	// Storage is the truth before any demotion: From, which the failback
	// demotes, must hold the primary copies it hands to To.
	if err := holdsPrimary(ctx, r, p, from, from, "failback"); err != nil {
		return err
	}
	for _, site := range []string{from, to} {
		if err := r.step(ctx, preflightStep(site), false, func(ctx workflow.Context) (string, error) { return preflight(ctx, p, site) }); err != nil {
			return err
		}
	}
	if err := checkStandInJobs(ctx, r, p, to, "failback"); err != nil {
		return err
	}
	if err := forGroups(ctx, r, p, GroupOp{Kind: OpCheck, Site: from}); err != nil {
		return err
	}
	if err := settle(ctx); err != nil {
		return err
	}
	if err := stopAll(ctx, r, p, from, "failback"); err != nil {
		return err
	}
	if err := r.gate(ctx, "beforeDemote"); err != nil {
		return err
	}
	// Protection cuts no point beside the demotion and the resync.
	if err := pausePoints(ctx, r, p); err != nil {
		return err
	}
	if err := forGroups(ctx, r, p, GroupOp{Kind: OpDemote, Site: from}); err != nil {
		return err
	}
	if err := demotionHeld(ctx, r, p, from); err != nil {
		return err
	}
	if err := r.gate(ctx, "beforePromote"); err != nil {
		return err
	}

	// The promotion does not pause: if it fails for good, roll back.
	// The first sync of To's lineage is the one its promotion starts: the
	// resync of From below is done once To has shipped it (or a later one).
	promotedAt := workflow.Now(ctx)
	promoted := map[string]bool{}
	var failure error
	if fansOut(p) {
		failure = promoteBatches(ctx, r, p, to, promoted)
	} else {
		failure = promoteEach(ctx, r, p, to, promoted)
	}
	if failure != nil {
		res.RolledBack, res.Reason = true, ErrorText(failure)
		if err := rollback(ctx, r, p, from, to, promoted); err != nil {
			return err
		}
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("failback to %q rolled back: %s", to, res.Reason), ErrRolledBack, nil)
	}

	if err := r.notePrimary(ctx, to, ""); err != nil {
		return err
	}
	if err := unfence(ctx, r, p, to, from, in.Fenced); err != nil {
		return err
	}
	if err := r.gate(ctx, "beforeStart"); err != nil {
		return err
	}
	if err := startAll(ctx, r, p, to, "failback"); err != nil {
		return err
	}
	// To's workloads run from here; the failback ends once From follows
	// To, which may take To's next scheduled sync.
	if err := forGroups(ctx, r, p, GroupOp{Kind: OpResync, Site: from, Primary: to, After: promotedAt}); err != nil {
		return err
	}
	return protectFrom(ctx, r, p, to)
}

// promoteEach is the failback's promotion, one step per group, by
// priority; it records the promoted groups and returns the first failure.
func promoteEach(ctx workflow.Context, r *run, p *plans.Plan, site string, promoted map[string]bool) error {
	prios := byPriority(p.VolumeGroups, func(g plans.VolumeGroup) int { return g.Priority }, func(g plans.VolumeGroup) string { return g.Name })
	for _, batch := range prios {
		err := parallel(ctx, batch, p.Policy.Parallelism, func(ctx workflow.Context, group string) error {
			s := r.add(groupStep(GroupOp{Kind: OpFinalPromote, Verb: "promote", Site: site}, group), false)
			s.State, s.Start = StateRunning, workflow.Now(ctx)
			out, err := promoteAfterFinalSync(ctx, p, site, group, s)
			s.Output, s.End = out, workflow.Now(ctx)
			if err != nil {
				s.State, s.LastError = StateFailed, ErrorText(err)
				return err
			}
			s.State = StateDone
			promoted[group] = true
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// promoteBatches is the failback's promotion for a plan that fans out:
// one child per batch, no pause; it records the promoted groups and
// returns the first failure.
func promoteBatches(ctx workflow.Context, r *run, p *plans.Plan, site string, promoted map[string]bool) error {
	op := GroupOp{Kind: OpFinalPromote, Verb: "promote", Site: site}
	bs := batches(p)
	steps := make([]*Step, len(bs))
	for i, b := range bs {
		steps[i] = r.add(batchStep(op, b), false)
	}
	for i, b := range bs {
		s := steps[i]
		s.State, s.Start, s.Attempts = StateRunning, workflow.Now(ctx), 1
		res, err := r.inChild(ctx, p, op, b)
		s.End = workflow.Now(ctx)
		if err == nil {
			for _, g := range res.Done {
				promoted[g] = true
			}
			s.Output = fmt.Sprintf("%d of %d groups promoted", len(res.Done), len(b))
			if len(res.Failed) > 0 {
				err = batchFailure(op, res.Failed, len(res.Failed)+len(res.Done))
			}
		}
		if err != nil {
			s.State, s.LastError = StateFailed, ErrorText(err)
			return err
		}
		s.State = StateDone
	}
	return nil
}

// demotePromoted demotes with force, on site, the groups a failed
// failback promoted there: one step per group, or for a plan that fans
// out, in batches.
func demotePromoted(ctx workflow.Context, r *run, p *plans.Plan, site string, promoted map[string]bool) error {
	var groups []string
	for _, g := range p.VolumeGroups {
		if promoted[g.Name] {
			groups = append(groups, g.Name)
		}
	}
	if len(groups) > 0 && fansOut(p) {
		return forGroups(ctx, r, r.subPlan(p, groups), GroupOp{Kind: OpDemote, Verb: "rollback: demote", Site: site, Force: true, Guard: true, Rollback: true})
	}
	for _, g := range groups {
		if err := r.step(ctx, groupStep(GroupOp{Kind: OpDemote, Verb: "rollback: demote", Site: site, Rollback: true}, g), true, func(ctx workflow.Context) (string, error) {
			return replicate(ctx, p, site, g, activities.RPCDemoteVolume, true, st.DemoteVolume)
		}); err != nil {
			return err
		}
	}
	return nil
}

// rollback undoes a failed failback: demote what was promoted on to
// (first, so that never two copies are writable), promote every group on
// from again with force (to holds no new writes: its workloads never
// started), and restart from's workloads.
func rollback(ctx workflow.Context, r *run, p *plans.Plan, from, to string, promoted map[string]bool) error {
	if err := demotePromoted(ctx, r, p, to, promoted); err != nil {
		return err
	}
	if err := forGroups(ctx, r, p, GroupOp{Kind: OpPromote, Verb: "rollback: promote", Site: from, Force: true, Rollback: true}); err != nil {
		return err
	}
	return startAll(ctx, r, p, from, "failback rollback")
}
