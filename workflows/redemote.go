package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/plans"
)

// ErrPrimaryAgain pauses a resync whose copy answers as primary again
// after the action demoted it, where Drover cannot demote it again
// safely.
const ErrPrimaryAgain = "PrimaryAgain"

// demotionHeldVersion marks the failbacks that read the roles back after
// their demotion; demoteAgainVersion the resyncs that demote again a copy
// found primary again. A failback or resync recorded before runs as it
// did.
const (
	demotionHeldVersion = "demotion-held"
	demoteAgainVersion  = "demote-again"
)

// redemoteTries bounds how often one copy is demoted again in one step.
const redemoteTries = 3

// refusedAsPrimary tells whether a ResyncVolume refusal may be the copy's
// being primary: the spec answers FAILED_PRECONDITION ("the image is not
// in the demoted state"), ceph-csi INVALID_ARGUMENT "image is in primary
// state" (recorded deviation ceph-csi/resync-primary-invalid).
func refusedAsPrimary(err error) bool {
	typ, _, _ := activities.FailureOf(err)
	return typ == activities.ErrFailedPrecondition || typ == activities.ErrInvalidArgument
}

// roleOf asks site's storage once for the role of one copy (roleIn), with
// the storage's answer.
func roleOf(ctx workflow.Context, p *plans.Plan, site string, in activities.ReplicationInput) (role, answer string) {
	res, err := surveyOnce(ctx, p, site, []activities.ReplicationInput{in})
	if err != nil {
		return "", ErrorText(err)
	}
	if len(res.Entries) != 1 {
		return "", fmt.Sprintf("%d answers to one question", len(res.Entries))
	}
	return roleIn(res.Entries[0]), res.Entries[0].Error
}

// demoteAgain is the answer to a copy that the action demoted and that
// the storage reports primary again when the resync asks it to follow the
// new primary: real Ceph 16.2.15 does this to an image without
// exclusive-lock when its mirror-snapshot schedule comes round just before
// the demotion: the scheduler saw the image primary, its snapshot waited
// on the image's watchers (a dead client's watch for up to its time-out)
// and landed after the demoted one. Measured: 4 of 4 such demotions with
// a dead client's watch, 2 of 5 at a minute's tick without one, 0 of 20
// on images with exclusive-lock. Nothing of Drover's promoted it: the
// copy holds no write of its own, its workloads having been stopped
// before the demotion.
//
// It demotes the copy again only when the storage says it may: site's
// copy answers as primary, primary's copy answers as primary too (storage
// is the truth before any demotion), and no workload of the plan on site
// runs (stop means stopped). Otherwise, or when the refusal was for
// another reason (the copy is not primary), it returns again=false and
// the resync's refusal stands; a copy primary on both sites with a
// workload running, or with the other copy not primary, ends the step
// with ErrPrimaryAgain, which says what to check.
func demoteAgain(ctx workflow.Context, p *plans.Plan, op GroupOp, group string, at int) (note string, again bool, err error) {
	site, primary := op.Site, op.Primary
	infos, err := activities.ReplicationInputs(p, site, group, activities.RPCGetVolumeReplicationInfo, false)
	if err != nil || at >= len(infos) {
		return "", false, err
	}
	src := infos[at].Source
	if role, _ := roleOf(ctx, p, site, infos[at]); role != rolePrimary {
		return "", false, nil
	}
	theirs, err := activities.ReplicationInputs(p, primary, group, activities.RPCGetVolumeReplicationInfo, false)
	if err != nil || at >= len(theirs) {
		return "", false, err
	}
	if role, answer := roleOf(ctx, p, primary, theirs[at]); role != rolePrimary {
		if role == "" {
			role = "could not be asked: " + answer
		}
		return "", false, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"%s's copy of %s answers as primary again after this action demoted it, and %s's copy is %s: nothing was demoted, since no copy might be primary then. "+
				"Find out which copy holds the writes to keep (drctl status PLAN --verify), then retry this step",
			site, src, primary, role), ErrPrimaryAgain, nil)
	}
	if err := stillStopped(ctx, p, site, src.String()); err != nil {
		return "", false, err
	}
	force := op.Discard
	demotes, err := activities.ReplicationInputs(p, site, group, activities.RPCDemoteVolume, force)
	if err != nil || at >= len(demotes) {
		return "", false, err
	}
	if _, err := rpcCall[struct{}](ctx, activities.CallOptions(p, site, activities.RPCDemoteVolume), st.DemoteVolume, demotes[at]); err != nil {
		return "", false, err
	}
	return fmt.Sprintf("%s's copy of %s answered as primary again after its demotion, with no promotion since (a snapshot schedule that took a primary snapshot across the demotion does this); "+
		"demoted it again once %s's storage said its copy is primary and nothing of the plan ran on %s", site, src, primary, site), true, nil
}

// stillStopped confirms, before a copy found primary again is demoted
// again, that no workload of the plan runs on site (stop means stopped:
// the action stopped them before its first demotion).
func stillStopped(ctx workflow.Context, p *plans.Plan, site, src string) error {
	for _, w := range workloadsOn(p, site) {
		in, err := activities.WorkloadInputFor(p, site, w.Name, "demote again")
		if err != nil {
			return err
		}
		deadline := p.Policy.StopDeadline.D()
		o := activities.StopWaitOptions(p, site, in.Workload, deadline)
		if _, err := call[activities.StopOutcome](ctx, o, wl.WaitStopped, activities.StopWaitInput{WorkloadInput: in, Deadline: deadline}); err != nil {
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"%s's copy of %s answers as primary again after this action demoted it, and %s's workload %s is not confirmed stopped (%s): nothing was demoted. "+
					"Stop it, then retry this step",
				site, src, site, w.Name, ErrorText(err)), ErrPrimaryAgain, nil)
		}
	}
	return nil
}

// demoteSettle is how long a failback lets its demotion settle before it
// reads the roles back. On Ceph 16.2.15 (images without exclusive-lock)
// the scheduler's primary snapshot, begun at a tick before the demotion,
// waits on the image's watchers and lands after the demoted one: the copy
// was primary again 0.65 s to 5.1 s after the demotion returned (1 s in
// make e2e-ceph's failback). A plan whose replication names a
// schedulingInterval waits scheduleSettle; any other, settleSpec.
const (
	scheduleSettle = 10 * time.Second
	settleSpec     = time.Second
)

func demoteSettle(p *plans.Plan) time.Duration {
	for _, g := range p.VolumeGroups {
		if _, ok := g.Parameters["schedulingInterval"]; ok {
			return scheduleSettle
		}
	}
	for _, s := range p.Sites {
		if _, ok := s.Storage.Parameters["schedulingInterval"]; ok {
			return scheduleSettle
		}
		for _, rpc := range []string{activities.RPCPromoteVolume, activities.RPCEnableVolumeReplication, activities.RPCDemoteVolume, activities.RPCResyncVolume} {
			if _, ok := s.Storage.CallParameters[rpc]["schedulingInterval"]; ok {
				return scheduleSettle
			}
		}
	}
	return settleSpec
}

// demotionHeld is the failback's read-back of the roles its demotion of
// site left, before anything is promoted on the other site: the storage
// must say that the copies are no longer primary. A copy primary again
// (demoteAgain tells how Ceph does it) is demoted again, after a check
// that nothing of the plan runs on site, and read back again: its new
// demotion ships to the other site before the promotion there, which then
// follows it without force. The copies asked are the role check's sample
// (every copy of a plan of up to surveyBatch groups); a copy outside it
// found primary later is handled by the resync (demoteAgain). A copy that
// cannot be asked is noted, not waited for: the promotion that follows is
// refused by the storage until the final sync of a demotion has landed.
func demotionHeld(ctx workflow.Context, r *run, p *plans.Plan, site string) error {
	if workflow.GetVersion(ctx, demotionHeldVersion, workflow.DefaultVersion, 1) < 1 {
		return nil
	}
	return r.step(ctx, checkDemotedStep(site), false, func(ctx workflow.Context) (string, error) {
		var groups []plans.VolumeGroup
		var calls []activities.ReplicationInput
		var at []int
		for _, g := range roleSample(p, surveyBatch) {
			ins, err := activities.GroupInputs(p, site, &g, activities.RPCGetVolumeReplicationInfo, false)
			if err != nil {
				return "", err
			}
			for i, in := range ins {
				groups, calls, at = append(groups, g), append(calls, in), append(at, i)
			}
		}
		if len(calls) == 0 {
			return "no volume groups", nil
		}
		var again []string
		asked := len(calls)
		for round := 0; ; round++ {
			if err := workflow.Sleep(ctx, demoteSettle(p)); err != nil {
				return "", err
			}
			res, err := surveyOnce(ctx, p, site, calls)
			if err != nil {
				return fmt.Sprintf("could not ask %s's storage for the roles of %d copies, going on (the promotion waits for the final sync): %s", site, len(calls), ErrorText(err)), nil
			}
			var pg []plans.VolumeGroup
			var pc []activities.ReplicationInput
			var pa []int
			unknown := 0
			for i, e := range res.Entries {
				switch roleIn(e) {
				case rolePrimary:
					pg, pc, pa = append(pg, groups[i]), append(pc, calls[i]), append(pa, at[i])
				case "":
					unknown++
				}
			}
			if len(pc) == 0 {
				out := fmt.Sprintf("%d of %d copies asked on %s answer as not primary", asked-unknown, asked, site)
				if unknown > 0 {
					out += fmt.Sprintf("; %d could not be asked", unknown)
				}
				if len(again) > 0 {
					out += "; demoted again: " + strings.Join(again, ", ") + " (primary again after the demotion with no promotion: a snapshot schedule that took a primary snapshot across the demotion does this)"
				}
				return out, nil
			}
			if round == redemoteTries {
				return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf(
					"%d copies on %s answer as primary after %d demotions (first: %s); nothing was promoted. Find out what promotes them (a storage-side schedule or tool), then retry this step",
					len(pc), site, round+1, pc[0].Source), ErrPrimaryAgain, nil)
			}
			for i, in := range pc {
				if err := stillStopped(ctx, p, site, in.Source.String()); err != nil {
					return "", err
				}
				demotes, err := activities.GroupInputs(p, site, &pg[i], activities.RPCDemoteVolume, false)
				if err != nil {
					return "", err
				}
				if pa[i] >= len(demotes) {
					continue
				}
				if _, err := rpcCall[struct{}](ctx, activities.CallOptions(p, site, activities.RPCDemoteVolume), st.DemoteVolume, demotes[pa[i]]); err != nil {
					return "", err
				}
				again = append(again, in.Source.String())
			}
			groups, calls, at = pg, pc, pa
		}
	})
}
