package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drover-dr/drover/internal/codec"
	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// actionFlags are the flags every DR action takes.
type actionFlags struct {
	to string
	// takeOver makes the cluster drctl reaches active for a global
	// namespace active on a cluster that does not answer (failover).
	takeOver bool
	yes      bool
	wait     bool
	override bool
	// recordOverride is the operator's reason to fail over without the
	// plan's record's answer (failover --override).
	recordOverride string
}

func (f *actionFlags) add(cmd *cobra.Command, needTo bool, destructive bool) {
	if needTo {
		cmd.Flags().StringVar(&f.to, "to", "", "the site that takes over (required)")
	}
	if destructive {
		cmd.Flags().BoolVarP(&f.yes, "yes", "y", false, "do not ask for confirmation")
	}
	cmd.Flags().BoolVarP(&f.wait, "wait", "w", false, "wait for the action to end, showing its progress")
	cmd.Flags().BoolVar(&f.override, "override-state", false, "go on although the plan's recorded state or its storage says the action goes the wrong way")
}

// actionCommand is one DR action's command: PLAN as its one argument,
// the action flags f, and run called with the plan's name.
func actionCommand(use, short string, f *actionFlags, needTo, destructive bool, run func(ctx context.Context, plan string) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return run(cmd.Context(), args[0]) },
	}
	f.add(cmd, needTo, destructive)
	return cmd
}

func (a *app) actionCommands() []*cobra.Command {
	var fo, rp, fb, dr actionFlags
	var confirmUnfenced bool
	var from, drillAction string
	var lost string
	var plansAtOnce int
	var foPoint string
	failover := actionCommand("failover PLAN --to SITE [--point T] | failover --site LOST --to SITE PLAN|DIR...",
		"Unplanned failover: fence the other site, force-promote on SITE, start the workloads there",
		&fo, true, true, nil)
	failover.Long = `Unplanned failover: fence the other site's clients, force-promote the
plan's volume groups on SITE and start its workloads there.

--point T brings the workloads up on volumes made from a point in time
(policy.pointsInTime) instead of the promoted replicas: the newest point
cut at SITE at or before T (a time, a point's id as drctl points lists
it, or newest), picked and held before anything is fenced. The
replicas are promoted and kept, the point stays held, and the writes
after the point's last sync are left on the replicas.`
	failover.Flags().StringVar(&foPoint, "point", "", "bring the workloads up on volumes made from a point in time: the newest cut at --to at or before this time (RFC 3339), point id, or newest")
	failover.Flags().BoolVar(&confirmUnfenced, "confirm-unfenced", false, "accept a forced promotion without a fence, for a lost site the plan says cannot be fenced")
	failover.Flags().BoolVar(&fo.takeOver, "take-over-namespace", false, "when the namespace is global and active on a Temporal cluster that does not answer (the lost site's), make the cluster drctl reaches active for it first (at once, before the failover's confirmation)")
	failover.Flags().StringVar(&fo.recordOverride, "override", "", "REASON: go on without the plan's record when it does not answer (a workflow that is not Drover's record holds its ID): the signature is still checked, the reason shown and kept, and what the failover does goes to the record once one answers")
	failover.Flags().StringVar(&lost, "site", "", "fail over every plan (files, or directories of them) that uses this lost site, tier by tier, as one site action")
	failover.Flags().IntVar(&plansAtOnce, "plans-at-once", workflows.DefaultSiteParallelism, "with --site: the plans of a tier that fail over at once")
	failover.Args = cobra.MinimumNArgs(1)
	failover.RunE = func(cmd *cobra.Command, args []string) error {
		if cmd.Flags().Changed("override") && strings.TrimSpace(fo.recordOverride) == "" {
			return badInput("--override takes the reason the failover goes on without the plan's record, which is kept with it")
		}
		if lost != "" {
			if foPoint != "" {
				return badInput("--point is for one plan's failover, not a site's")
			}
			if fo.recordOverride != "" {
				return badInput("--override is for one plan's failover, not a site's")
			}
			return a.siteFailover(cmd.Context(), args, lost, plansAtOnce, fo, confirmUnfenced)
		}
		if len(args) != 1 {
			return badInput("failover takes one plan; to fail over every plan of a lost site, name it with --site")
		}
		var pointAt time.Time
		if foPoint != "" {
			var err error
			if pointAt, err = parsePointTime(foPoint); err != nil {
				return err
			}
		}
		return a.failover(cmd.Context(), args[0], fo, confirmUnfenced, pointAt)
	}

	reprotect := actionCommand("reprotect PLAN",
		"After a failover: make the returned site a replica again (demote, resync, unfence)",
		&rp, false, true, func(ctx context.Context, plan string) error { return a.reprotect(ctx, plan, from, rp) })
	reprotect.Flags().StringVar(&from, "from", "", "the returned site (default: the site the last failover left)")

	failback := actionCommand("failback PLAN --to SITE",
		"Planned move to SITE with no data loss (rolls back if SITE cannot take over)",
		&fb, true, true, func(ctx context.Context, plan string) error { return a.failback(ctx, plan, fb) })

	drill := actionCommand("drill PLAN --to SITE",
		"Rehearse a failover (or failback) to SITE: every check, no change",
		&dr, true, false, func(ctx context.Context, plan string) error { return a.drill(ctx, plan, drillAction, dr) })
	drill.Flags().StringVar(&drillAction, "action", "failover", "the action to rehearse: failover or failback")

	// reprotect, failback and drill per site, as failover.
	var rpSite, fbSite, drSite string
	var rpAtOnce, fbAtOnce, drAtOnce int
	bySite := func(cmd *cobra.Command, use string, site *string, atOnce *int, what string, one func(ctx context.Context, plan string) error, all func(ctx context.Context, args []string) error) {
		cmd.Use = use
		cmd.Flags().StringVar(site, "site", "", what)
		cmd.Flags().IntVar(atOnce, "plans-at-once", workflows.DefaultSiteParallelism, "with --site: the plans of a tier that act at once")
		cmd.Args = cobra.MinimumNArgs(1)
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			if *site != "" {
				return all(cmd.Context(), args)
			}
			if len(args) != 1 {
				return badInput("%s takes one plan; for every plan of a site, name it with --site", cmd.Name())
			}
			return one(cmd.Context(), args[0])
		}
	}
	bySite(reprotect, "reprotect PLAN | reprotect --site RETURNED PLAN|DIR...", &rpSite, &rpAtOnce,
		"reprotect every plan (files, or directories of them) that the returned site's loss failed over, tier by tier, as one site action",
		func(ctx context.Context, plan string) error { return a.reprotect(ctx, plan, from, rp) },
		func(ctx context.Context, args []string) error {
			if from != "" && from != rpSite {
				return badInput("--from %s and --site %s name different sites", from, rpSite)
			}
			return a.siteReprotect(ctx, args, rpSite, rpAtOnce, rp)
		})
	bySite(failback, "failback PLAN --to SITE | failback --site LEAVE --to SITE PLAN|DIR...", &fbSite, &fbAtOnce,
		"fail back to --to every plan (files, or directories of them) that runs on this site, tier by tier, as one site action",
		func(ctx context.Context, plan string) error { return a.failback(ctx, plan, fb) },
		func(ctx context.Context, args []string) error { return a.siteFailback(ctx, args, fbSite, fbAtOnce, fb) })
	bySite(drill, "drill PLAN --to SITE | drill --site FROM --to SITE PLAN|DIR...", &drSite, &drAtOnce,
		"drill every plan (files, or directories of them) that has this site and --to, tier by tier, as one site action",
		func(ctx context.Context, plan string) error { return a.drill(ctx, plan, drillAction, dr) },
		func(ctx context.Context, args []string) error {
			return a.siteDrill(ctx, args, drSite, drillAction, drAtOnce, dr)
		})

	var at string
	var testWait, cleanup bool
	var point string
	testRecovery := &cobra.Command{
		Use:   "test-recovery PLAN --at SITE [--point T] | PLAN --cleanup",
		Short: "Bring the workloads up at SITE on copies of the replicas, in isolation, then clean up; production untouched",
		Long: `Bring the plan's workloads up at SITE on copies of its replicas, in
isolation, while replication carries on; drctl approve ends the test and
its cleanup deletes everything it made.

--point T makes the copies from a point in time (policy.pointsInTime)
instead of new snapshots: the newest point cut at SITE at or before T
(a time, a point's id as drctl points lists it, or newest). The point is
held while the test runs and released by its cleanup, which leaves the
point's snapshots. A point cut at the primary (policy.pointsInTime.cut:
primary) is tested where it was cut, from its snapshots there.

--cleanup finds the test recoveries of the plan that ended without their
cleanup (a terminated workflow, say), and for each runs the cleanup: the
test workloads stopped, the copies and snapshots deleted.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cleanup {
				if at != "" {
					return badInput("--cleanup takes no --at: it cleans up at the site each test ran at")
				}
				if point != "" {
					return badInput("--cleanup takes no --point")
				}
				return a.testCleanup(cmd.Context(), args[0])
			}
			var pointAt time.Time
			if point != "" {
				var err error
				if pointAt, err = parsePointTime(point); err != nil {
					return err
				}
			}
			return a.testRecovery(cmd.Context(), args[0], at, pointAt, testWait)
		},
	}
	testRecovery.Flags().BoolVar(&cleanup, "cleanup", false, "delete what earlier test recoveries of the plan left behind")
	testRecovery.Flags().StringVar(&at, "at", "", "the site whose replicas are copied and where the test workloads run (required)")
	testRecovery.Flags().StringVar(&point, "point", "", "copy from a point in time: the newest cut at --at at or before this time (RFC 3339), point id, or newest")
	testRecovery.Flags().BoolVarP(&testWait, "wait", "w", false, "wait for the test to end (drctl approve ends it), showing its progress")

	var rl actionFlags
	release := actionCommand("release PLAN",
		"After a failover to a point in time and its reprotect: release the point and the replicas the failover kept",
		&rl, false, true, func(ctx context.Context, plan string) error { return a.release(ctx, plan, rl) })
	release.Long = `After a failover to a point in time and the reprotect that made the
restored volumes the protected ones: release the failover's hold on its
point (protection prunes it again as its policy says) and the replicas
the failover went back from, which were kept (their replication turned
off where they are primary). Nothing is deleted: the released replicas
stay on both sites' storage for you to delete with its own tools.`

	return []*cobra.Command{failover, reprotect, failback, drill, release, testRecovery, a.protectCommand()}
}

// release starts plan's Release: what its record says a failover to a
// point in time kept, the worker reads it again.
func (a *app) release(ctx context.Context, file string, f actionFlags) error {
	p, err := loadPlan(file)
	if err != nil {
		return err
	}
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	in := workflows.ReleaseInput{Plan: p}
	if in.Origin, err = a.origin(file, p); err != nil {
		return err
	}
	rec, err := a.readRecord(ctx, c, p.Metadata.Name)
	if err != nil {
		return err
	}
	switch {
	case rec != nil && rec.Restored != nil:
		return badInput("plan %q runs on volumes restored from point %s at %s that no reprotect has protected yet. Nothing was done. Reprotect first (drctl reprotect %s), then release what the failover kept",
			p.Metadata.Name, rec.Restored.Point, rec.Restored.Site, p.Metadata.Name)
	case rec == nil || rec.Replaced == nil || (len(rec.Replaced.Kept) == 0 && rec.Replaced.Holder == ""):
		return badInput("plan %q keeps nothing to release: its record names no replicas a failover to a point in time kept. Nothing was done", p.Metadata.Name)
	}
	rep := rec.Replaced
	in.To, in.From = rep.Site, otherSite(p, rep.Site)
	what := fmt.Sprintf("Release what the failover to point %s kept for plan %q: the failover's hold on the point (protection may prune it), and the replicas the restored volumes replaced (%s), their replication turned off at %s. Nothing is deleted.",
		rep.Point, p.Metadata.Name, workflows.KeptText(rep.Kept), rep.Site)
	if err := a.confirm(f.yes, what); err != nil {
		return err
	}
	return a.start(ctx, c, p, "release", workflows.Release, in, f.wait)
}

// sites checks --to against the plan and returns (from, to).
func sites(p *plans.Plan, to string) (string, string, error) {
	var names []string
	for _, s := range p.Sites {
		names = append(names, s.Name)
	}
	if to == "" {
		return "", "", badInput("give the site that takes over with --to (plan %q has sites %s)", p.Metadata.Name, strings.Join(names, ", "))
	}
	if p.Site(to) == nil {
		return "", "", badInput("plan %q has no site %q; its sites are %s", p.Metadata.Name, to, strings.Join(names, ", "))
	}
	return otherSite(p, to), to, nil
}

func otherSite(p *plans.Plan, site string) string {
	for _, s := range p.Sites {
		if s.Name != site {
			return s.Name
		}
	}
	return ""
}

// confirm asks the operator to type yes, unless --yes was given.
func (a *app) confirm(yes bool, what string) error {
	if yes {
		return nil
	}
	fmt.Fprintf(a.stderr, "%s\nType yes to go on: ", what)
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	answer := strings.ToLower(strings.TrimSpace(line))
	if answer == "yes" || answer == "y" {
		return nil
	}
	if err != nil && answer == "" {
		return badInput("not confirmed (no answer on standard input); nothing was done. Pass --yes to go on without asking")
	}
	return badInput("not confirmed; nothing was done")
}

func groupCount(p *plans.Plan) string {
	if len(p.VolumeGroups) == 1 {
		return "1 volume group"
	}
	return fmt.Sprintf("%d volume groups", len(p.VolumeGroups))
}

// prepare loads the plan, checks --to and connects: what every action
// taking --to needs first.
func (a *app) prepare(ctx context.Context, file, toFlag string) (*plans.Plan, string, string, client.Client, error) {
	p, err := loadPlan(file)
	if err != nil {
		return nil, "", "", nil, err
	}
	from, to, err := sites(p, toFlag)
	if err != nil {
		return nil, "", "", nil, err
	}
	c, err := a.dial(ctx)
	return p, from, to, c, err
}

func (a *app) failover(ctx context.Context, file string, f actionFlags, confirmUnfenced bool, pointAt time.Time) error {
	p, from, to, c, err := a.prepare(ctx, file, f.to)
	if err != nil {
		return err
	}
	if err := a.activeHere(ctx, c, f.takeOver); err != nil {
		return err
	}
	if err := a.checkDirection(ctx, c, file, p, "failover", from, to, f.override); err != nil {
		return err
	}
	in := workflows.FailoverInput{Plan: p, From: from, To: to, ConfirmUnfenced: confirmUnfenced, OverrideState: f.override, PointAt: pointAt}
	if in.Origin, err = a.origin(file, p); err != nil {
		return err
	}
	in.Origin.RecordOverride = strings.TrimSpace(f.recordOverride)
	if in.LastSync, in.Clients, err = a.protection(ctx, c, p, from); err != nil {
		return err
	}
	fence := p.Site(from).Fence.CIDRs
	if len(fence) == 0 {
		fence = in.Clients
	}
	if !pointAt.IsZero() && !a.json() {
		fmt.Fprintf(a.stderr, "point: %s\n", a.pointNow(ctx, c, p.Metadata.Name, to, pointAt))
	}
	if !a.json() {
		rec, err := glanceRecord(ctx, c, p.Metadata.Name)
		if w := restoredLoss(p.Metadata.Name, rec, from, to); err == nil && w != "" {
			fmt.Fprintf(a.stderr, "warning: %s\n", w)
		}
	}
	what := failoverText(p, from, to, fence, pointAt)
	if in.Origin.RecordOverride != "" {
		what += fmt.Sprintf("\nIf the plan's record does not answer, the failover goes on without it (--override %q): no check that this is the newest version of the plan the record accepted.", in.Origin.RecordOverride)
	}
	if err := a.confirm(f.yes, what); err != nil {
		return err
	}
	return a.start(ctx, c, p, "failover", workflows.Failover, in, f.wait)
}

// failoverText is what a failover asks the operator to confirm: to a
// point in time, how the point's volumes are made at to (from its
// snapshots, or its copies promoted when it was cut at the primary).
func failoverText(p *plans.Plan, from, to string, fence []string, pointAt time.Time) string {
	if pointAt.IsZero() {
		return fmt.Sprintf("Fail over plan %q from %s to %s: fence %s's clients %v and force-promote %s on %s, then start %d workload(s) there.",
			p.Metadata.Name, from, to, from, fence, groupCount(p), to, len(p.Workloads))
	}
	restore := "make volumes from the point's snapshots"
	if p.Policy.PointsInTime.AtPrimary() {
		restore = "force-promote the point's copies (cut at the primary, shipped to " + to + ")"
	}
	return fmt.Sprintf("Fail over plan %q from %s to %s to a point in time: the newest point usable at %s cut at or before %s, held before anything is fenced; fence %s's clients %v and force-promote %s on %s (the replicas are kept), %s and start %d workload(s) there on them. The writes after the point's last sync stay on the replicas only.",
		p.Metadata.Name, from, to, to, pointAt.UTC().Format(time.RFC3339), from, fence, groupCount(p), to, restore, len(p.Workloads))
}

// restoredLoss warns of a failover away from volumes a failover to a
// point in time restored at from, before a reprotect protected them: to
// holds no copy of them, so what was written on them since is not
// there. Not refused: in a second disaster to's copies may be all there
// is. "" when the record says nothing of the kind.
func restoredLoss(plan string, rec *workflows.PlanRecord, from, to string) string {
	if rec == nil || rec.Restored == nil || rec.Restored.Site != from {
		return ""
	}
	x := rec.Restored
	return fmt.Sprintf("plan %q runs at %s on volumes restored from point %s (a failover to a point in time, %s), which no reprotect has protected yet: %s holds no copy of them. This failover brings up %s's copies as they were before that failover; every write on the restored volumes since then stays at %s. If %s can still be reached, reprotect first (drctl reprotect %s) and fail back instead",
		plan, from, x.Point, x.At.UTC().Format(time.RFC3339), to, to, from, from, plan)
}

// pointNow says which point the plan's record picks at site for t, as
// the worker will (from protection's state, which may be a little newer).
func (a *app) pointNow(ctx context.Context, c client.Client, plan, site string, t time.Time) string {
	rec, err := a.readRecord(ctx, c, plan)
	if err != nil {
		return "the plan's record cannot be read now (" + oneLine(err.Error()) + "): the worker picks the point"
	}
	var points []workflows.PointInTime
	if rec != nil {
		points = rec.Points
	}
	pt, err := workflows.PointFor(points, site, t)
	if err != nil {
		why := err.Error()
		var ae *temporal.ApplicationError
		if errors.As(err, &ae) {
			why = ae.Message()
		}
		return "no point now: " + oneLine(why) + "; the failover will end before it fences anything unless protection has cut one since"
	}
	held := "the writes up to a last sync not known"
	if !pt.LastSync.IsZero() {
		held = "every write up to " + pt.LastSync.Local().Format(time.DateTime)
	}
	return fmt.Sprintf("the record picks %s now, cut at %s, holding %s", pt.ID, pt.Taken.Local().Format(time.DateTime), held)
}

// protection is what the plan's protection last recorded from the site
// now lost: its last completed sync and its clients. It notes on stderr
// when there is none (the RPO will be unknown), and fails only when
// Temporal cannot be asked.
func (a *app) protection(ctx context.Context, c client.Client, p *plans.Plan, from string) (time.Time, []string, error) {
	ps, perr := glanceProtect(ctx, c, p.Metadata.Name)
	switch {
	case perr == nil && ps.Primary == from:
		if ps.LastSync().IsZero() && !a.json() {
			fmt.Fprintf(a.stderr, "note: the protection of plan %q has recorded no completed sync from %s yet; the RPO will be unknown\n", p.Metadata.Name, from)
		}
		return ps.LastSync(), ps.Clients[from], nil
	case perr != nil && (isUnavailable(perr) || isNamespaceNotFound(perr)):
		// Nothing would start either: say why rather than note a
		// protection state that could not be asked for.
		return time.Time{}, nil, temporalError("read the protection state of plan "+p.Metadata.Name, perr)
	case !a.json():
		fmt.Fprintf(a.stderr, "note: %s\n", protectionNote(p.Metadata.Name, from, ps, perr, isNotFound(perr)))
	}
	return time.Time{}, nil, nil
}

// protectionNote says why the RPO of an action from site from will be
// unknown: no protection runs, it runs from another site (it knows no
// sync from this one), or it could not be read.
func protectionNote(plan, from string, ps *workflows.ProtectState, perr error, notFound bool) string {
	switch {
	case perr == nil && ps != nil && ps.Primary != "":
		return fmt.Sprintf("the protection of plan %q runs from %s, not from %s: it has recorded no sync from %s; the RPO will be unknown", plan, ps.Primary, from, from)
	case perr == nil || notFound:
		return fmt.Sprintf("plan %q is not protected (drctl protect start): no sync from %s is known; the RPO will be unknown", plan, from)
	}
	return fmt.Sprintf("the protection state of plan %q could not be read (%v); the RPO will be unknown", plan, perr)
}

func (a *app) reprotect(ctx context.Context, file, from string, f actionFlags) error {
	p, err := loadPlan(file)
	if err != nil {
		return err
	}
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	in, what, err := a.reprotectInput(ctx, c, file, p, from, f.override)
	if err != nil {
		return err
	}
	if err := a.confirm(f.yes, what); err != nil {
		return err
	}
	return a.start(ctx, c, p, "reprotect", workflows.Reprotect, in, f.wait)
}

// reprotectInput prepares plan p's reprotect (of site from, when given)
// and says what it will do.
func (a *app) reprotectInput(ctx context.Context, c client.Client, file string, p *plans.Plan, from string, override bool) (workflows.ReprotectInput, string, error) {
	in := workflows.ReprotectInput{Plan: p}
	var err error
	if in.Origin, err = a.origin(file, p); err != nil {
		return in, "", err
	}
	if from != "" && p.Site(from) == nil {
		return in, "", badInput("plan %q has no site %q", p.Metadata.Name, from)
	}
	rec, err := a.readRecord(ctx, c, p.Metadata.Name)
	if err != nil {
		return in, "", err
	}
	last, fo, res, err := lastFailover(ctx, c, p.Metadata.Name)
	if err != nil {
		return in, "", err
	}
	// Which site came back: the last failover's (from its history, or
	// from the record once that history is past retention), an
	// unfinished reprotect's, or --from.
	recFailover := rec != nil && rec.LastAction != nil && rec.LastAction.Action == "failover" && rec.LastAction.Outcome == workflows.StateCompleted
	switch {
	case fo != nil:
		// The usual case: the site the failover left is back.
		in.From, in.To, in.Fenced = fo.From, fo.To, res.Fenced
	case last.typ == "" && recFailover:
		in.From, in.To = rec.LastAction.From, rec.LastAction.To
	case last.is("Reprotect", enums.WORKFLOW_EXECUTION_STATUS_FAILED, enums.WORKFLOW_EXECUTION_STATUS_CANCELED, enums.WORKFLOW_EXECUTION_STATUS_TERMINATED, enums.WORKFLOW_EXECUTION_STATUS_TIMED_OUT):
		// A reprotect that did not finish: run it again.
		if err := last.read(ctx, c, &in, nil); err != nil {
			return in, "", err
		}
		in.Plan = p
	case from == "":
		return in, "", badInput("plan %q: the last action is %s; reprotect follows a completed failover. If the site came back otherwise, name it with --from", p.Metadata.Name, last)
	}
	if from != "" && from != in.From {
		if in.From != "" {
			return in, "", badInput("--from %s: the last failover of plan %q left %s, not %s", from, p.Metadata.Name, in.From, from)
		}
		in.From, in.To, in.Fenced = from, otherSite(p, from), nil
	}
	// What to unfence: the record's fences of the returned site; without
	// a record (actions from before it), the failover's result; else the
	// plan's own CIDRs. When none can say, reprotect refuses rather than
	// report an unfence it did not make.
	known := fo != nil && in.From == fo.From
	if rec != nil {
		cidrs, via := rec.FencedOf(in.From)
		if via != "" && via != in.To {
			return in, "", badInput("plan %q: the record holds %s's clients %v as fenced through %s's own storage; lift that fence by hand (UnfenceClusterNetwork), then reprotect", p.Metadata.Name, in.From, cidrs, via)
		}
		in.Fenced, known = cidrs, true
	}
	if site := p.Site(in.From); !known && len(site.Fence.CIDRs) == 0 && !site.Fence.Unavailable {
		return in, "", badInput("plan %q: cannot know which of %s's clients are fenced: the plan has no record of it, no failover's result tells, and the plan lists no fence.cidrs for %s. "+
			"Nothing was done. Check what %s's storage lists (ListClusterFence), lift the fence by hand, or add the CIDRs to the plan", p.Metadata.Name, in.From, in.From, in.To)
	}
	if err := a.checkDirection(ctx, c, file, p, "reprotect", in.From, in.To, override); err != nil {
		return in, "", err
	}
	what := fmt.Sprintf("Reprotect plan %q: stop %s's workloads, demote %s's copies of %s with force (their writes since the failover are dropped), resync them from %s and unfence %s.",
		p.Metadata.Name, in.From, in.From, groupCount(p), in.To, in.From)
	if rec != nil && rec.Restored != nil && rec.Restored.Site == in.To {
		what = fmt.Sprintf("Reprotect plan %q, which runs on %d volume(s) restored from point %s at %s: stop %s's workloads, demote %s's copies of the replicas with force and keep them as they are (with %s's promoted replicas), enable replication of the restored volumes toward %s (their copies registered with %s's Nomad where it knows the replicas) and unfence %s; from then on every action acts on the restored volumes.",
			p.Metadata.Name, len(rec.Restored.Volumes), rec.Restored.Point, in.To, in.From, in.From, in.To, in.From, in.From, in.From)
	}
	return in, what, nil
}

func (a *app) failback(ctx context.Context, file string, f actionFlags) error {
	p, from, to, c, err := a.prepare(ctx, file, f.to)
	if err != nil {
		return err
	}
	in, what, err := a.failbackInput(ctx, c, file, p, from, to, f.override)
	if err != nil {
		return err
	}
	if err := a.confirm(f.yes, what); err != nil {
		return err
	}
	return a.start(ctx, c, p, "failback", workflows.Failback, in, f.wait)
}

// failbackInput prepares plan p's failback from from to to and says what
// it will do.
func (a *app) failbackInput(ctx context.Context, c client.Client, file string, p *plans.Plan, from, to string, override bool) (workflows.FailbackInput, string, error) {
	in := workflows.FailbackInput{Plan: p, From: from, To: to}
	if err := a.checkDirection(ctx, c, file, p, "failback", from, to, override); err != nil {
		return in, "", err
	}
	rec, err := a.readRecord(ctx, c, p.Metadata.Name)
	if err != nil {
		return in, "", err
	}
	if cidrs, via := rec.FencedOf(to); via == from {
		// What a failover fenced of To and no reprotect lifted since.
		in.Fenced = cidrs
	}
	if in.Origin, err = a.origin(file, p); err != nil {
		return in, "", err
	}
	_, fo, res, err := lastFailover(ctx, c, p.Metadata.Name)
	if err != nil {
		return in, "", err
	}
	if fo != nil && fo.From == to && rec == nil {
		// No reprotect since: lift what the failover fenced on To.
		in.Fenced = res.Fenced
	}
	what := fmt.Sprintf("Fail back plan %q from %s to %s: stop %s's workloads, demote %s there, promote on %s once the final sync has landed, start the workloads on %s.",
		p.Metadata.Name, from, to, from, groupCount(p), to, to)
	return in, what, nil
}

func (a *app) drill(ctx context.Context, file, action string, f actionFlags) error {
	p, from, to, c, err := a.prepare(ctx, file, f.to)
	if err != nil {
		return err
	}
	in, err := a.drillInput(ctx, c, file, p, action, from, to, f.override)
	if err != nil {
		return err
	}
	return a.start(ctx, c, p, "drill", workflows.Drill, in, f.wait)
}

// drillInput prepares plan p's drill of action from from to to.
func (a *app) drillInput(ctx context.Context, c client.Client, file string, p *plans.Plan, action, from, to string, override bool) (workflows.DrillInput, error) {
	if action != "failover" && action != "failback" {
		return workflows.DrillInput{}, badInput("--action %q: want failover or failback", action)
	}
	if err := a.checkDirection(ctx, c, file, p, "drill of a "+action, from, to, override); err != nil {
		return workflows.DrillInput{}, err
	}
	o, err := a.origin(file, p)
	if err != nil {
		return workflows.DrillInput{}, err
	}
	return workflows.DrillInput{Origin: o, Plan: p, Action: action, From: from, To: to}, nil
}

// start starts an action and, with wait, follows it to its end.
func (a *app) start(ctx context.Context, c client.Client, p *plans.Plan, action string, wf, in any, wait bool) error {
	a.warnIdleWorkers(ctx, c, p, action)
	run, err := workflows.Start(ctx, c, p.Metadata.Name, wf, in)
	var busy *workflows.BusyError
	if errors.As(err, &busy) {
		return failed("%v", err)
	}
	if err != nil {
		return temporalError("start the "+action, err)
	}
	if !wait {
		if a.json() {
			writeJSON(a.stdout, map[string]string{"plan": p.Metadata.Name, "action": action, "workflowId": run.GetID(), "runId": run.GetRunID(), "state": workflows.StateRunning})
			return nil
		}
		fmt.Fprintf(a.stdout, "%s of plan %q started: workflow %s, run %s\nfollow it with: drctl watch %s\n", action, p.Metadata.Name, run.GetID(), run.GetRunID(), p.Metadata.Name)
		return nil
	}
	if !a.json() {
		fmt.Fprintf(a.stdout, "%s of plan %q started: workflow %s, run %s\n", action, p.Metadata.Name, run.GetID(), run.GetRunID())
	}
	return a.follow(ctx, c, run.GetID(), run.GetRunID())
}

// readRecord reads the plan's record: nil when the plan has none (no
// action since the record came), an error when it cannot be read. A
// worker answers the query: one that is restarting (or whose sticky queue
// died with it) answers late, so it asks again for up to a minute, saying
// once that it waits.
func (a *app) readRecord(ctx context.Context, c client.Client, plan string) (*workflows.PlanRecord, error) {
	deadline := time.Now().Add(recordWait)
	for said := false; ; {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rec, err := workflows.ReadRecord(qctx, c, plan)
		cancel()
		if err == nil {
			return rec, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) || !timedOut(err) {
			return nil, temporalError("read the record of plan "+plan+" (is a worker running?)", err)
		}
		if !said {
			fmt.Fprintf(a.stderr, "drctl: no worker has answered for the record of plan %q yet; waiting up to %v\n", plan, recordWait)
			said = true
		}
	}
}

// timedOut: the query got no answer in time (the SDK, gRPC and the server
// each say so their own way).
func timedOut(err error) bool {
	var de *serviceerror.DeadlineExceeded
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &de) || status.Code(err) == codes.DeadlineExceeded
}

// recordWait bounds readRecord's wait for a worker to answer.
const recordWait = time.Minute

// glanceWait bounds a read that only adds to what drctl says (a warning,
// a line of a view): unlike readRecord, it does not wait for a worker.
const glanceWait = 5 * time.Second

// glanceRecord reads the plan's record within glanceWait.
func glanceRecord(ctx context.Context, c client.Client, plan string) (*workflows.PlanRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, glanceWait)
	defer cancel()
	return workflows.ReadRecord(ctx, c, plan)
}

// glanceProtect reads the plan's protection within glanceWait.
func glanceProtect(ctx context.Context, c client.Client, plan string) (*workflows.ProtectState, error) {
	ctx, cancel := context.WithTimeout(ctx, glanceWait)
	defer cancel()
	return workflows.ReadProtect(ctx, c, plan)
}

// last is the latest run of a plan's action workflow.
type last struct {
	id, runID, typ string
	status         enums.WorkflowExecutionStatus
}

func (l *last) String() string {
	if l.typ == "" {
		return "none"
	}
	return fmt.Sprintf("a %s (%s, run %s)", l.typ, statusName(l.status), l.runID)
}

func (l *last) is(typ string, statuses ...enums.WorkflowExecutionStatus) bool {
	return l.typ == typ && slices.Contains(statuses, l.status)
}

// lastAction describes the plan's latest action run. It reads the
// workflow itself, not the visibility store, which may lag behind it: a
// reprotect must not be aimed by a failover a failback has since undone.
func lastAction(ctx context.Context, c client.Client, plan string) (*last, error) {
	d, err := c.DescribeWorkflowExecution(ctx, workflows.ActionID(plan), "")
	if isNotFound(err) {
		return &last{}, nil
	}
	if err != nil {
		return nil, temporalError("describe the last action of plan "+plan, err)
	}
	info := d.GetWorkflowExecutionInfo()
	return &last{id: info.GetExecution().GetWorkflowId(), runID: info.GetExecution().GetRunId(), typ: info.GetType().GetName(), status: info.GetStatus()}, nil
}

// failover returns the run's input and result when it is a completed
// Failover, nils otherwise.
// lastFailover is the plan's last action and, when it is a completed
// failover, its input and result.
func lastFailover(ctx context.Context, c client.Client, plan string) (*last, *workflows.FailoverInput, *workflows.FailoverResult, error) {
	l, err := lastAction(ctx, c, plan)
	if err != nil {
		return nil, nil, nil, err
	}
	fo, res, err := l.failover(ctx, c)
	return l, fo, res, err
}

func (l *last) failover(ctx context.Context, c client.Client) (*workflows.FailoverInput, *workflows.FailoverResult, error) {
	if !l.is("Failover", enums.WORKFLOW_EXECUTION_STATUS_COMPLETED) {
		return nil, nil, nil
	}
	var in workflows.FailoverInput
	var res workflows.FailoverResult
	if err := l.read(ctx, c, &in, &res); err != nil {
		return nil, nil, err
	}
	return &in, &res, nil
}

// read decodes the run's input (from its first event) and, when result
// is not nil, its result.
func (l *last) read(ctx context.Context, c client.Client, input, result any) error {
	it := c.GetWorkflowHistory(ctx, l.id, l.runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return failed("the history of %s is empty", l)
	}
	ev, err := it.Next()
	if err != nil {
		return temporalError("read "+l.String(), err)
	}
	if err := codec.Converter().FromPayloads(ev.GetWorkflowExecutionStartedEventAttributes().GetInput(), input); err != nil {
		return failed("decode the input of %s: %v", l, err)
	}
	if result == nil {
		return nil
	}
	if err := c.GetWorkflow(ctx, l.id, l.runID).Get(ctx, result); err != nil {
		return temporalError("read the result of "+l.String(), err)
	}
	return nil
}

// protectInterval is how often protection polls: the flag's interval, or
// by default 30 s, or half the plan's RPO target when that is shorter (a
// poll every 30 s cannot tell a 10 s target from a miss); and a warning
// when the interval given is longer than half the target.
func protectInterval(p *plans.Plan, flag time.Duration) (time.Duration, string) {
	target := p.Policy.RPOTarget.D()
	half := max(target/2, time.Second)
	if flag == 0 {
		if target > 0 {
			return min(workflows.DefaultProtectInterval, half), ""
		}
		return workflows.DefaultProtectInterval, ""
	}
	if target > 0 && flag > half {
		return flag, fmt.Sprintf("--interval %v is longer than half the plan's RPO target (%v): the lag seen can be up to %v old, and a plan out of its target is seen that late; give --interval %v or less",
			flag, target, flag, half)
	}
	return flag, ""
}

func (a *app) protectCommand() *cobra.Command {
	var primary string
	var interval time.Duration
	var disable, yes bool
	protect := &cobra.Command{
		Use:   "protect",
		Short: "Start or stop a plan's replication watch",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return badInput("give protect start PLAN or protect stop PLAN")
		},
	}
	start := &cobra.Command{
		Use:   "start PLAN",
		Short: "Enable replication from the primary and watch its lag against the RPO target",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := loadPlan(args[0])
			if err != nil {
				return err
			}
			if primary == "" {
				primary = p.Sites[0].Name
			}
			if p.Site(primary) == nil {
				return badInput("plan %q has no site %q", p.Metadata.Name, primary)
			}
			if interval < 0 {
				return badInput("--interval %v: want a positive duration", interval)
			}
			var warn string
			interval, warn = protectInterval(p, interval)
			if warn != "" {
				fmt.Fprintln(a.stderr, "warning: "+warn)
			}
			o, err := a.origin(args[0], p)
			if err != nil {
				return err
			}
			if o.Signature != nil && !o.Signature.ExpiresAt.IsZero() && !a.json() {
				// Protection ends with the signature, at its first poll
				// past it.
				fmt.Fprintf(a.stderr, "note: the signature of plan %q ends at %s; protection stops then, at its first poll past it (drctl status, the dashboard and the alert DroverPlanSignatureEnding warn %s ahead)\n",
					p.Metadata.Name, o.Signature.ExpiresAt.UTC().Format(time.RFC3339), leftText(workflows.SignatureWarning))
			}
			c, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			a.warnIdleWorkers(cmd.Context(), c, p, "protection")
			run, err := workflows.StartProtect(cmd.Context(), c, p, primary, interval, o)
			if err != nil {
				return temporalError("start protection", err)
			}
			checked, err := a.protectChecked(cmd.Context(), c, run)
			if err != nil {
				return err
			}
			if !checked && !a.json() {
				fmt.Fprintf(a.stderr, "note: protection of plan %q has not checked its plan within %v (is a worker polling?): drctl status %s says whether it runs or was refused\n",
					p.Metadata.Name, protectCheckWait, p.Metadata.Name)
			}
			if a.json() {
				writeJSON(a.stdout, map[string]string{"plan": p.Metadata.Name, "primary": primary, "workflowId": run.GetID(), "runId": run.GetRunID()})
				return nil
			}
			fmt.Fprintf(a.stdout, "protection of plan %q from %s runs: workflow %s\nsee it with: drctl status %s\n", p.Metadata.Name, primary, run.GetID(), p.Metadata.Name)
			return nil
		},
	}
	start.Flags().StringVar(&primary, "primary", "", "the site holding the primary copies (default: the plan's first site)")
	start.Flags().DurationVar(&interval, "interval", 0, "how often to poll replication (default 30s, or half the plan's RPO target when that is shorter)")
	stop := &cobra.Command{
		Use:   "stop PLAN",
		Short: "Stop watching; with --disable also turn replication off",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := planName(args[0])
			if disable {
				if err := a.confirm(yes, fmt.Sprintf("Stop protecting plan %q and disable its replication: the secondary copies stop receiving writes.", name)); err != nil {
					return err
				}
			}
			c, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			msg, err := a.stopProtect(cmd.Context(), c, name, disable)
			if err != nil {
				return err
			}
			if a.json() {
				writeJSON(a.stdout, map[string]any{"plan": name, "stopped": true, "disabled": disable})
				return nil
			}
			fmt.Fprintf(a.stdout, "plan %q: %s\n", name, msg)
			return nil
		},
	}
	stop.Flags().BoolVar(&disable, "disable", false, "also disable replication of every group")
	stop.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	protect.AddCommand(start, stop)
	return protect
}

// protectCheckWait bounds how long drctl protect start waits for
// protection's check of its plan (its signature, and its version with
// the plan's record): a refusal ends protection at once, and drctl says
// so rather than that it runs.
var protectCheckWait = 30 * time.Second

// protectChecked waits, up to protectCheckWait, for the protection just
// started (or found running) to pass its plan's check, which it shows by
// counting its run (ProtectState.Runs), or to end: an ended protection
// is an exit 1 naming why (an UntrustedPlan refusal: an older version,
// an expired or unknown signature). false when neither came in time.
func (a *app) protectChecked(ctx context.Context, c client.Client, run client.WorkflowRun) (bool, error) {
	deadline := time.Now().Add(protectCheckWait)
	for time.Now().Before(deadline) {
		d, err := c.DescribeWorkflowExecution(ctx, run.GetID(), run.GetRunID())
		if err != nil {
			return false, temporalError("read protection "+run.GetID(), err)
		}
		if d.GetWorkflowExecutionInfo().GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := run.Get(gctx, nil)
			cancel()
			if err == nil {
				return false, failed("protection %s ended at once, without an error: drctl status and the worker's log say why", run.GetID())
			}
			return false, failed("protection was refused, it does not run: %s", workflows.ErrorText(err))
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		v, err := c.QueryWorkflow(qctx, run.GetID(), run.GetRunID(), workflows.QueryProtect)
		cancel()
		var ps workflows.ProtectState
		if err == nil && v.Get(&ps) == nil && ps.Runs > 0 {
			return true, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return false, nil
}

// stopProtect asks the plan's Protect to stop and waits for its answer,
// which comes once it has ended: with disable, after replication is off
// on every group, or as an error naming the groups it is not off on.
func (a *app) stopProtect(ctx context.Context, c client.Client, plan string, disable bool) (string, error) {
	id := workflows.ProtectID(plan)
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: workflows.UpdateStopProtect,
		Args: []any{workflows.StopProtect{Disable: disable}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil && strings.Contains(err.Error(), "already completed") {
		return "", badInput("the protection of plan %q is not running; nothing to stop (drctl status %s)", plan, plan)
	}
	if err != nil {
		return "", temporalError("stop "+id, err)
	}
	var msg string
	if err := h.Get(ctx, &msg); err != nil {
		if ctx.Err() != nil {
			return "", &exitError{exitInterrupted, fmt.Errorf("stopped waiting for %s; it goes on stopping (drctl status %s)", id, plan)}
		}
		return "", failed("%s", workflows.ErrorText(err))
	}
	return msg, nil
}

// planName is the plan name an argument stands for: a plan file's name,
// or the argument itself.
func planName(arg string) string {
	if isPlanFile(arg) {
		if p, err := plans.Load(arg); err == nil {
			return p.Metadata.Name
		}
	}
	for _, prefix := range names.IDPrefixes {
		if n, ok := strings.CutPrefix(arg, prefix); ok {
			return n
		}
	}
	return arg
}

func isPlanFile(arg string) bool {
	if !slices.ContainsFunc([]string{".yaml", ".yml", ".json"}, func(s string) bool { return strings.HasSuffix(arg, s) }) {
		return false
	}
	_, err := os.Stat(arg)
	return err == nil
}
