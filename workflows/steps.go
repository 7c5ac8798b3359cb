package workflows

// The steps more than one action runs: the checks before an action
// (checkSites, preflight, fresh), the per-group storage calls a step or a
// GroupBatch child makes (replicate, resync, waitSync,
// promoteAfterFinalSync: the pieces of GroupOp.do), and the workload and
// fence steps (startAll, stopAll, unfence). Each action's file holds its
// sequence only.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/plans"
)

func checkSites(p *plans.Plan, from, to string) error {
	if p == nil {
		return temporal.NewNonRetryableApplicationError("no plan", ErrPreflight, nil)
	}
	if p.Site(from) == nil || p.Site(to) == nil || from == to {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("plan %q: from %q and to %q must be its two different sites", p.Metadata.Name, from, to), ErrPreflight, nil)
	}
	return nil
}

// preflight checks that a site's storage is ready and can replicate. Its
// two calls run at once.
func preflight(ctx workflow.Context, p *plans.Plan, site string) (string, error) {
	pe, err := activities.EndpointFor(p, site, activities.RPCProbe)
	if err != nil {
		return "", err
	}
	ce, err := activities.EndpointFor(p, site, activities.RPCGetCapabilities)
	if err != nil {
		return "", err
	}
	var (
		probe      activities.ProbeResult
		caps       activities.CapabilitiesResult
		perr, cerr error
	)
	probeCall := func(ctx workflow.Context) {
		probe, perr = rpcCall[activities.ProbeResult](ctx, activities.CallOptions(p, site, activities.RPCProbe), st.Probe, activities.IdentityInput{Endpoint: pe})
	}
	capsCall := func(ctx workflow.Context) {
		caps, cerr = rpcCall[activities.CapabilitiesResult](ctx, activities.CallOptions(p, site, activities.RPCGetCapabilities), st.GetCapabilities, activities.IdentityInput{Endpoint: ce})
	}
	together(ctx, probeCall, capsCall)
	if perr != nil {
		return "", perr
	}
	if !probe.Ready {
		return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("the storage of site %q is not ready (Probe)", site), ErrPreflight, nil)
	}
	if cerr != nil {
		return "", cerr
	}
	if m := caps.Missing(activities.CapVolumeReplication); len(m) > 0 {
		return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("the storage of site %q lacks %v", site, m), ErrPreflight, nil)
	}
	return fmt.Sprintf("storage of %s ready; %d capabilities", site, len(caps.Capabilities)), nil
}

// workloadsOn lists the plan's workloads that have a part on site.
func workloadsOn(p *plans.Plan, site string) []plans.Workload {
	var out []plans.Workload
	for _, w := range p.Workloads {
		if _, ok := w.Sites[site]; ok {
			out = append(out, w)
		}
	}
	return out
}

// replicate calls one replication rpc for every source of a group on a
// site.
func replicate(ctx workflow.Context, p *plans.Plan, site, group, rpc string, force bool, fn any) (string, error) {
	ins, err := activities.ReplicationInputs(p, site, group, rpc, force)
	if err != nil {
		return "", err
	}
	for _, in := range ins {
		if _, err := rpcCall[struct{}](ctx, activities.CallOptions(p, site, rpc), fn, in); err != nil {
			return "", err
		}
	}
	how := ""
	if force {
		how = " (force)"
	}
	return fmt.Sprintf("%s%s: %d source(s)", rpc, how, len(ins)), nil
}

// startAll starts the site's workloads by priority and waits until each
// is healthy; a priority's workloads start together.
func startAll(ctx workflow.Context, r *run, p *plans.Plan, site, action string) error {
	ws := workloadsOn(p, site)
	batches := byPriority(ws, func(w plans.Workload) int { return w.Priority }, func(w plans.Workload) string { return w.Name })
	name := func(w string) stepRef { return startStep(site, w) }
	return r.stepBatches(ctx, batches, name, false, func(ctx workflow.Context, name string) (string, error) {
		in, err := activities.WorkloadInputFor(p, site, name, action)
		if err != nil {
			return "", err
		}
		if r.skipped(OpPromote, site) && !r.overridden[startStep(site, name).id] &&
			workflow.GetVersion(ctx, startAfterSkipVersion, workflow.DefaultVersion, 1) >= 1 {
			if err := onPrimaries(ctx, p, site, name); err != nil {
				return "", err
			}
		}
		o := activities.WorkloadOptions(p, site, in.Workload)
		// The first attempt is local (a start that answers at once, a Nomad
		// job registered, costs no turn through the server); one that takes
		// longer than localBudget is cut and goes on as a regular activity,
		// which a start hook must bear like a retry.
		out, err := retried[activities.WorkloadOutput](ctx, o, wl.StartWorkload, in, o.TaskQueue == "")
		if err != nil {
			return out.Output, err
		}
		var timeout time.Duration
		for _, w := range ws {
			if w.Name == name {
				timeout = w.HealthTimeout.D()
			}
		}
		// Report: the wait returns with why it waits, for the step's note.
		hin := activities.HealthInput{WorkloadInput: in, Timeout: timeout, Report: true}
		var h activities.HealthOutcome
		ho := activities.HealthOptions(p, site, in.Workload, timeout)
		if ho.TaskQueue == "" {
			// The first look is a local activity: with nothing known yet it
			// returns at its first check, healthy or not, and a workload
			// that is healthy at once costs no turn through the server.
			lo := workflow.LocalActivityOptions{StartToCloseTimeout: localBudget, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}}
			err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, lo), wl.WaitHealthy, hin).Get(ctx, &h)
			switch {
			case err == nil && h.Waiting == "":
				return strings.TrimSpace(out.Output + "\nhealthy: " + h.Health.Detail), nil
			case err == nil:
				noteStep(ctx, "not healthy yet: "+h.Waiting)
				hin.Known, hin.Since = h.Waiting, h.Since
			case !activities.Retryable(err):
				return out.Output, err
			}
			// Otherwise (a check slower than the local budget) the wait
			// goes on as a regular activity.
		}
		for {
			h, err = call[activities.HealthOutcome](ctx, ho, wl.WaitHealthy, hin)
			if err != nil {
				return out.Output, err
			}
			if h.Waiting == "" {
				break
			}
			// Not healthy yet: say why, and wait on from where it was.
			noteStep(ctx, "not healthy yet: "+h.Waiting)
			hin.Known, hin.Since = h.Waiting, h.Since
		}
		return strings.TrimSpace(out.Output + "\nhealthy: " + h.Health.Detail), nil
	})
}

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
	name := func(w string) stepRef { return stopStep(site, w) }
	return r.stepBatches(ctx, batches, name, true, func(ctx workflow.Context, name string) (string, error) {
		in, err := activities.WorkloadInputFor(p, site, name, action)
		if err != nil {
			return "", err
		}
		out, err := call[activities.WorkloadOutput](ctx, activities.WorkloadOptions(p, site, in.Workload), wl.StopWorkload, in)
		if err != nil {
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

// unfence lifts the fence of a site's CIDRs (the plan's, and extra ones a
// failover fenced), through the other site's storage (the fence domain is
// shared), where they are fenced.
func unfence(ctx workflow.Context, r *run, p *plans.Plan, site, via string, extra []string) error {
	return r.step(ctx, unfenceStep(site), false, func(ctx workflow.Context) (string, error) {
		cidrs := slices.Clone(p.Site(site).Fence.CIDRs)
		for _, c := range extra {
			if !slices.Contains(cidrs, c) {
				cidrs = append(cidrs, c)
			}
		}
		// Every outcome says what the storage of via lists, so that the
		// step never reports an unfence it did not make.
		listed, err := listFence(ctx, p, via)
		unlisted := cannotList(err)
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

// resync resynchronises every source of a group on op.Site.
//
// After a failover the returned site's copies were primary when their
// peers were promoted with force: they have diverged (split-brain) by
// definition, and reprotect (op.Discard) resyncs them with force from the
// first call, discarding whatever they took after the failover, as the
// kubernetes-csi-addons controller's autoResync does for the old primary
// after a failover. Asking first without force is no use: ceph-csi
// 3.12 answers a diverged image without force with INTERNAL "failed to
// get last sync info" for as long as it stays so (ResyncVolume in
// internal/csi-addons/rbd/replication.go; it answered FAILED_PRECONDITION
// "Force resync to recover volume" before 2023), and the spec leaves force
// to the caller.
//
// A failback's resync of the old primary never forces: its copy was
// demoted cleanly and must lose no write; a copy the storage refuses
// without force (FAILED_PRECONDITION) pauses the step with an
// explanation.
//
// Drivers answer ready=true at different moments (ceph-csi only when both
// copies are demoted and in sync), so with op.Primary the resync is also
// done once the copy accepts the resync and the primary reports a sync
// to it begun after the resync did.
func resync(ctx workflow.Context, p *plans.Plan, op GroupOp, group string) (string, error) {
	site := op.Site
	force := op.Discard
	ins, err := activities.ReplicationInputs(p, site, group, activities.RPCResyncVolume, force)
	if err != nil {
		return "", err
	}
	var prims []activities.ReplicationInput
	if op.Primary != "" {
		if prims, err = activities.ReplicationInputs(p, op.Primary, group, activities.RPCGetVolumeReplicationInfo, false); err != nil {
			return "", err
		}
		if len(prims) != len(ins) {
			prims = nil // the sites list their volumes differently: wait for ready alone
		}
	}
	after := op.After
	if after.IsZero() {
		after = workflow.Now(ctx)
	}
	polls, shipped := 0, 0
	var last time.Time
	var again []string
	for i, in := range ins {
		ri := activities.ResyncInput{Call: in, After: after}
		if prims != nil {
			ri.Primary = &prims[i]
		}
		out, err := call[activities.ResyncOutcome](ctx, activities.PollOptions(p, site, activities.RPCResyncVolume, 0), st.ResyncUntilReady, ri)
		for tries := 0; err != nil && prims != nil && tries < redemoteTries && refusedAsPrimary(err) &&
			workflow.GetVersion(ctx, demoteAgainVersion, workflow.DefaultVersion, 1) >= 1; tries++ {
			// The copy may be primary again since the action demoted it.
			note, ok, derr := demoteAgain(ctx, p, op, group, i)
			if derr != nil {
				return "", derr
			}
			if !ok {
				break
			}
			again = append(again, note)
			out, err = call[activities.ResyncOutcome](ctx, activities.PollOptions(p, site, activities.RPCResyncVolume, 0), st.ResyncUntilReady, ri)
		}
		if typ, _, _ := activities.FailureOf(err); typ == activities.ErrFailedPrecondition && !force {
			return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s on %s cannot resync without force, and a failback never forces: "+
				"the copy may have diverged (split-brain) and forcing would discard its writes; find out which copy holds the writes to keep, "+
				"then retry this step, or abort and move the plan with failover and reprotect instead; the storage said: %s",
				in.Source, site, ErrorText(err)), activities.ErrFailedPrecondition, nil)
		}
		if err != nil {
			return "", err
		}
		polls += out.Polls
		if out.Shipped {
			shipped++
			if out.LastSync.After(last) {
				last = out.LastSync
			}
		}
	}
	note := fmt.Sprintf("ready after %d ResyncVolume call(s)", polls)
	if shipped > 0 {
		note = fmt.Sprintf("resynced after %d ResyncVolume call(s): %s shipped %d of %d copies a sync begun after the resync (the last at %s)",
			polls, op.Primary, shipped, len(ins), last.UTC().Format(time.RFC3339))
	}
	if force {
		note += fmt.Sprintf("; forced resync: %s's copies were replaced by %s's, and whatever %s wrote after the failover is discarded", site, op.Primary, site)
	}
	if len(again) > 0 {
		note = strings.Join(again, "; ") + "; " + note
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

// fresh requires a group's replication on its primary to be healthy and
// no older than the plan's RPO target.
func fresh(ctx workflow.Context, p *plans.Plan, site, group string) (string, error) {
	ins, err := activities.ReplicationInputs(p, site, group, activities.RPCGetVolumeReplicationInfo, false)
	if err != nil {
		return "", err
	}
	target := p.Policy.RPOTarget.D()
	worst := time.Duration(0)
	for _, in := range ins {
		info, err := rpcCall[activities.ReplicationInfo](ctx, activities.CallOptions(p, site, activities.RPCGetVolumeReplicationInfo), st.GetVolumeReplicationInfo, in)
		if err != nil {
			return "", err
		}
		lag := info.Lag
		switch {
		case info.Status != "" && info.Status != "HEALTHY":
			return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("replication of %s is %s: %s", in.Source, info.Status, info.StatusMessage), ErrPreflight, nil)
		case info.LastSyncTime.IsZero():
			return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s has no completed sync", in.Source), ErrPreflight, nil)
		case lag > target:
			return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s lags %v, more than the RPO target %v", in.Source, lag.Round(time.Second), target), ErrPreflight, nil)
		}
		worst = max(worst, lag)
	}
	return fmt.Sprintf("healthy, lag %v", worst.Round(time.Millisecond)), nil
}

// retryPace is the plan's back-off for a step that asks the storage again
// in a loop of its own: the first pause, the longest, and the growth
// between two (1 s, 1 min and 2 where the plan gives none).
func retryPace(rt plans.Retry) (first, most time.Duration, coef float64) {
	first, most, coef = rt.InitialInterval.D(), rt.MaximumInterval.D(), rt.BackoffCoefficient
	if first <= 0 {
		first = time.Second
	}
	if most <= 0 {
		most = time.Minute
	}
	if coef < 1 {
		coef = 2
	}
	return first, most, coef
}

// freshWithin is fresh asked again under the plan's back-off, within its
// time limit, while the storage answers that replication is not healthy
// yet (DEGRADED while a peer that was down comes back, no sync since,
// a lag past the target): a storage that recovers is waited out, with a
// note of what it answered, not taken as final. What is still so at the
// time limit fails as fresh does.
func freshWithin(ctx workflow.Context, p *plans.Plan, site, group string) (string, error) {
	rt := p.Policy.Retry
	wait, most, coef := retryPace(rt)
	start := workflow.Now(ctx)
	deadline := start.Add(rt.TimeLimit.D())
	waited := ""
	for {
		out, err := fresh(ctx, p, site, group)
		var ae *temporal.ApplicationError
		if err == nil || !errors.As(err, &ae) || ae.Type() != ErrPreflight || workflow.Now(ctx).Add(wait).After(deadline) {
			if err == nil && waited != "" {
				out += fmt.Sprintf(", after %v in which the storage answered %s", workflow.Now(ctx).Sub(start).Round(time.Second), waited)
			}
			return out, err
		}
		waited = ae.Message()
		retrying(ctx, err, fmt.Sprintf("not healthy yet (%s): asking again in %v, within the step's %v limit", waited, wait, rt.TimeLimit.D()))
		if err := workflow.Sleep(ctx, wait); err != nil {
			return "", err
		}
		wait = min(time.Duration(float64(wait)*coef), most)
	}
}

// finalSyncPoll bounds the pause between two non-forced promotions while
// To waits for From's final sync.
const finalSyncPoll = 5 * time.Second

// promoteAfterFinalSync promotes a group without force, retrying while the
// storage says the final sync has not landed, within the plan's time
// limit. s, when given, counts the attempts and keeps the last refusal.
func promoteAfterFinalSync(ctx workflow.Context, p *plans.Plan, site, group string, s *Step) (string, error) {
	limit := p.Policy.Retry.TimeLimit.D()
	deadline := workflow.Now(ctx).Add(limit)
	wait := p.Policy.Retry.InitialInterval.D()
	for {
		if s != nil {
			s.Attempts++
		}
		out, err := replicate(ctx, p, site, group, activities.RPCPromoteVolume, false, st.PromoteVolume)
		typ, _, _ := activities.FailureOf(err)
		if err == nil || typ != activities.ErrFailedPrecondition {
			return out, err
		}
		if s != nil {
			s.LastError = ErrorText(err)
		}
		if workflow.Now(ctx).Add(wait).After(deadline) {
			return "", fmt.Errorf("the final sync did not land within %v: %w", limit, err)
		}
		if err := workflow.Sleep(ctx, wait); err != nil {
			return "", err
		}
		wait = min(2*wait, finalSyncPoll)
	}
}

// startAfterSkipVersion marks an action that, after a promotion was
// skipped, starts a workload only on copies its storage says are primary.
const startAfterSkipVersion = "start-after-skip"

// skipped: a step of kind op on site was skipped in this run.
func (r *run) skipped(op OpKind, site string) bool {
	return slices.ContainsFunc(r.progress.Steps, func(s *Step) bool {
		return s.State == StateSkipped && s.Kind() == StepKind(op) && strings.HasPrefix(s.ID, string(op)+"/"+site+"/")
	})
}

// onPrimaries asks site's storage for the copies of the groups workload
// uses (every group when it names none) and refuses, for the operator to
// decide, when one is not primary or does not answer: after a skipped
// promotion, the workload would otherwise start on copies that may be
// secondary (read-only, or behind).
func onPrimaries(ctx workflow.Context, p *plans.Plan, site, workload string) error {
	var uses []string
	for _, w := range p.Workloads {
		if w.Name == workload {
			uses = w.VolumeGroups
		}
	}
	var calls []activities.ReplicationInput
	var owner []string
	for i := range p.VolumeGroups {
		g := &p.VolumeGroups[i]
		if len(uses) > 0 && !slices.Contains(uses, g.Name) {
			continue
		}
		ins, err := activities.GroupInputs(p, site, g, activities.RPCGetVolumeReplicationInfo, false)
		if err != nil {
			return err
		}
		for _, in := range ins {
			calls, owner = append(calls, in), append(owner, g.Name)
		}
	}
	if len(calls) == 0 {
		return nil
	}
	res, err := surveyOnce(ctx, p, site, calls)
	var bad []string
	for i, g := range owner {
		role := ""
		if err == nil && i < len(res.Entries) {
			role = roleIn(res.Entries[i])
		}
		switch role {
		case roleSecondary:
			bad = append(bad, g+" (secondary)")
		case "":
			bad = append(bad, g+" (no answer)")
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	bad = slices.Compact(bad)
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
		"a promotion on %s was skipped, and %s's storage does not say the copies %s uses are primary: %s. "+
			"--skip leaves %s stopped; --retry --override starts it on them anyway",
		site, site, workload, strings.Join(bad, ", "), workload), ErrNotPromoted, nil)
}
