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

// ReprotectInput starts a reprotect: site From, lost in a failover to
// site To, is back; its copies become To's secondaries again.
type ReprotectInput struct {
	Origin
	Plan *plans.Plan `json:"plan"`
	From string      `json:"from"`
	To   string      `json:"to"`
	// Fenced are the CIDRs the failover fenced (FailoverResult.Fenced),
	// lifted with the plan's own CIDRs of From.
	Fenced []string `json:"fenced,omitempty"`
}

// ReprotectResult is the timeline.
type ReprotectResult struct {
	Progress
	// ResyncStart is when the resync began; To's first sync after it is
	// the proof that From holds To's data.
	ResyncStart time.Time `json:"resyncStart"`
}

// Reprotect makes the returned site From a replica of To again:
//
//  1. stop From's workloads (they may have come back with the site);
//  2. demote From's groups with force (their old primaries are stale);
//  3. resync From until every group reports ready; a group the storage
//     finds diverged (split-brain) is resynced with force, which discards
//     From's writes after the failover, as reprotect means to;
//  4. wait on To for a completed sync newer than the resync start;
//  5. unfence From's clients.
//
// After it, Failback can move the plan back to From without data loss.
func Reprotect(ctx workflow.Context, in ReprotectInput) (*ReprotectResult, error) {
	r, err := begin(ctx, "reprotect", in.Plan, in.From, in.To, in.Origin)
	if err != nil {
		return nil, err
	}
	res := &ReprotectResult{}
	err = reprotect(ctx, r, in, res)
	r.finish(ctx, err)
	res.Progress = *r.progress
	return res, err
}

func reprotect(ctx workflow.Context, r *run, in ReprotectInput, res *ReprotectResult) error {
	p, from, to := in.Plan, in.From, in.To
	if err := stopAll(ctx, r, p, from, "reprotect"); err != nil {
		return err
	}
	if err := r.gate(ctx, "beforeDemote"); err != nil {
		return err
	}
	if err := forGroups(ctx, r, p, GroupOp{Kind: OpDemote, Site: from, Force: true}); err != nil {
		return err
	}
	res.ResyncStart = workflow.Now(ctx)
	if err := forGroups(ctx, r, p, GroupOp{Kind: OpResync, Site: from, Discard: true}); err != nil {
		return err
	}
	if err := forGroups(ctx, r, p, GroupOp{Kind: OpWaitSync, Site: to, After: res.ResyncStart}); err != nil {
		return err
	}
	if err := unfence(ctx, r, p, from, to, in.Fenced); err != nil {
		return err
	}
	return protectFrom(ctx, r, p, to)
}

// changeForceResync marks histories in which a reprotect's resync, refused
// with FAILED_PRECONDITION, is sent again with force.
const changeForceResync = "force-resync-diverged"

// resync resynchronises every source of a group on site until ready.
//
// A driver refuses a resync without force of a copy that diverged
// (split-brain: both copies were written as primary) with
// FAILED_PRECONDITION: ceph-csi answers "Force resync to recover volume"
// (rbdVolume.ResyncVol in internal/rbd/replication.go, before 2023), and
// its ReplicationServer.ResyncVolume (internal/csi-addons/rbd/replication.go)
// resyncs the image only when force is set. With discard (reprotect, which
// by design gives up the returned site's writes after the failover) the
// resync is then sent with force, and the step's output names what the
// driver said was discarded. Without it (failback, whose copies must never
// lose a write) the step fails with an explanation and pauses.
func resync(ctx workflow.Context, p *plans.Plan, site, group string, discard bool) (string, error) {
	ins, err := activities.ReplicationInputs(p, site, group, activities.RPCResyncVolume, false)
	if err != nil {
		return "", err
	}
	polls := 0
	var forced []string
	for _, in := range ins {
		out, err := call[activities.ResyncOutcome](ctx, activities.PollOptions(p, site, activities.RPCResyncVolume, 0), st.ResyncUntilReady,
			activities.ResyncInput{Call: in})
		if typ, _, _ := activities.FailureOf(err); typ == activities.ErrFailedPrecondition {
			if !discard {
				return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s on %s cannot resync without force, and a failback never forces: "+
					"the copy may have diverged (split-brain) and forcing would discard its writes; find out which copy holds the writes to keep, "+
					"then retry this step, or abort and move the plan with failover and reprotect instead; the storage said: %s",
					in.Source, site, ErrorText(err)), activities.ErrFailedPrecondition, nil)
			}
			if workflow.GetVersion(ctx, changeForceResync, workflow.DefaultVersion, 1) == 1 {
				refusal := ErrorText(err)
				f := in
				f.Force = true
				if _, err := rpcCall[activities.ResyncResult](ctx, activities.CallOptions(p, site, activities.RPCResyncVolume), st.ResyncVolume, f); err != nil {
					return "", fmt.Errorf("forced resync of %s on %s: %w", in.Source, site, err)
				}
				polls++
				forced = append(forced, fmt.Sprintf("forced resync of %s discarded %s's divergent data (driver: %s)", in.Source, site, refusal))
				out, err = call[activities.ResyncOutcome](ctx, activities.PollOptions(p, site, activities.RPCResyncVolume, 0), st.ResyncUntilReady,
					activities.ResyncInput{Call: in})
			}
		}
		if err != nil {
			return "", err
		}
		polls += out.Polls
	}
	note := fmt.Sprintf("ready after %d ResyncVolume call(s)", polls)
	if len(forced) > 0 {
		note += "; " + strings.Join(forced, "; ")
	}
	return note, nil
}

// waitSync waits until the primary copy of every source of a group on
// site reports a completed sync newer than after.
func waitSync(ctx workflow.Context, p *plans.Plan, site, group string, after time.Time) (string, error) {
	ins, err := activities.ReplicationInputs(p, site, group, activities.RPCGetVolumeReplicationInfo, false)
	if err != nil {
		return "", err
	}
	var last time.Time
	for _, in := range ins {
		out, err := call[activities.WaitSyncOutcome](ctx, activities.PollOptions(p, site, activities.RPCGetVolumeReplicationInfo, 0), st.WaitForSync,
			activities.WaitSyncInput{Call: in, After: after})
		if err != nil {
			return "", err
		}
		last = out.Info.LastSyncTime
	}
	return "synced at " + last.UTC().Format(time.RFC3339Nano), nil
}

// unfence lifts the fence of a site's CIDRs (the plan's, and extra ones a
// failover fenced), through the other site's storage (the fence domain is
// shared), where they are fenced.
func unfence(ctx workflow.Context, r *run, p *plans.Plan, site, via string, extra []string) error {
	return r.step(ctx, "unfence "+site, false, func(ctx workflow.Context) (string, error) {
		cidrs := slices.Clone(p.Site(site).Fence.CIDRs)
		for _, c := range extra {
			if !slices.Contains(cidrs, c) {
				cidrs = append(cidrs, c)
			}
		}
		if !r.recording {
			return unfenceBefore(ctx, p, via, cidrs)
		}
		// Every outcome says what the storage of via lists, so that the
		// step never reports an unfence it did not make.
		listed, err := listFence(ctx, p, via)
		unlisted := cannotList(ctx, err)
		if unlisted {
			// Unfencing is idempotent: lift every CIDR the site may hold.
			listed = cidrs
		} else if err != nil {
			return "", err
		}
		var fenced, others []string
		for _, c := range listed {
			if slices.Contains(cidrs, c) {
				fenced = append(fenced, c)
			} else {
				others = append(others, c)
			}
		}
		still := ""
		if len(others) > 0 {
			still = fmt.Sprintf("; %s still lists %s as fenced (not %s's, as recorded or planned)", via, strings.Join(others, ", "), site)
		}
		if len(cidrs) == 0 {
			return fmt.Sprintf("nothing recorded or planned as fenced for %s: nothing unfenced%s", site, still), nil
		}
		if len(fenced) > 0 {
			if err := fenceCIDRs(ctx, p, via, activities.RPCUnfenceClusterNetwork, fenced); err != nil {
				return "", err
			}
		}
		// The record drops what is no longer fenced, lifted now or before.
		if err := r.record(ctx, RecordChange{Unfenced: &FenceEntry{Site: site, CIDRs: cidrs, Via: via, By: by(ctx), At: workflow.Now(ctx)}}); err != nil {
			return "", err
		}
		if len(fenced) == 0 {
			return fmt.Sprintf("%s lists none of %s as fenced: nothing unfenced%s", via, strings.Join(cidrs, ", "), still), nil
		}
		if unlisted {
			still = fmt.Sprintf(" (%s cannot list its fences: every CIDR recorded or planned was lifted)", via)
		}
		return fmt.Sprintf("unfenced %s through %s%s", strings.Join(fenced, ", "), via, still), nil
	})
}

// unfenceBefore is the unfence of histories from before the record.
func unfenceBefore(ctx workflow.Context, p *plans.Plan, via string, cidrs []string) (string, error) {
	if len(cidrs) == 0 {
		return "no fence CIDRs", nil
	}
	listed, err := listFence(ctx, p, via)
	if cannotList(ctx, err) {
		// Unfencing is idempotent: lift every CIDR the site may hold.
		listed = cidrs
	} else if err != nil {
		return "", err
	}
	var fenced []string
	for _, c := range cidrs {
		if slices.Contains(listed, c) {
			fenced = append(fenced, c)
		}
	}
	if len(fenced) == 0 {
		return "not fenced", nil
	}
	if err := fenceCIDRs(ctx, p, via, activities.RPCUnfenceClusterNetwork, fenced); err != nil {
		return "", err
	}
	return "unfenced " + strings.Join(fenced, ", "), nil
}

// changeStopConfirmed marks histories in which a planned stop waits until
// nothing of the workload runs (WaitStopped); older histories replay the
// stop request alone.
const changeStopConfirmed = "stop-confirmed"

// stopAll stops the site's workloads before their volumes are demoted:
// highest priority number first (the reverse of the start order), each
// tier confirmed down before the next starts to stop. A workload's step
// ends only when nothing of it runs on the site (every allocation of its
// Nomad job terminal, its exec stopped hook exiting 0); one still running
// after the plan's stopDeadline pauses the step, naming what runs. The
// steps guard the demotions after them: skipping one needs an override.
func stopAll(ctx workflow.Context, r *run, p *plans.Plan, site, action string) error {
	batches := byPriority(workloadsOn(p, site), func(w plans.Workload) int { return w.Priority }, func(w plans.Workload) string { return w.Name })
	slices.Reverse(batches)
	confirm := workflow.GetVersion(ctx, changeStopConfirmed, workflow.DefaultVersion, 1) == 1
	name := func(w string) string { return fmt.Sprintf("stop %s on %s", w, site) }
	return r.stepBatches(ctx, batches, name, confirm, func(ctx workflow.Context, name string) (string, error) {
		in, err := activities.WorkloadInputFor(p, site, name, action)
		if err != nil {
			return "", err
		}
		out, err := call[activities.WorkloadOutput](ctx, activities.WorkloadOptions(p, site, in.Workload), wl.StopWorkload, in)
		if err != nil || !confirm {
			return out.Output, err
		}
		deadline := p.Policy.StopDeadline.D()
		s, err := call[activities.StopOutcome](ctx, activities.StopWaitOptions(p, site, in.Workload, deadline), wl.WaitStopped,
			activities.StopWaitInput{WorkloadInput: in, Deadline: deadline})
		text := strings.TrimSpace(out.Output)
		if s.Stopped.Detail != "" {
			text = strings.TrimSpace(text + "\n" + s.Stopped.Detail)
		}
		return text, err
	})
}
