package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/names"

	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// planFiles expands the arguments of a site action: plan files as they
// are, directories to the plan files in them (*.yaml, *.yml, *.json),
// sorted.
func planFiles(args []string) ([]string, error) {
	var out []string
	for _, arg := range args {
		fi, err := os.Stat(arg)
		if err != nil {
			return nil, badInput("%v", err)
		}
		if !fi.IsDir() {
			out = append(out, arg)
			continue
		}
		entries, err := os.ReadDir(arg)
		if err != nil {
			return nil, badInput("%v", err)
		}
		n := len(out)
		for _, e := range entries {
			if path := filepath.Join(arg, e.Name()); !e.IsDir() && isPlanFile(path) {
				out = append(out, path)
			}
		}
		if len(out) == n {
			return nil, badInput("directory %s holds no plan files (*.yaml, *.yml, *.json)", arg)
		}
	}
	return out, nil
}

// siteFailover fails over, as one site action, every plan among args
// that uses the lost site and the site taking over.
func (a *app) siteFailover(ctx context.Context, args []string, lost string, plansAtOnce int, f actionFlags, confirmUnfenced bool) error {
	if f.to == "" {
		return badInput("give the site that takes over with --to")
	}
	if f.to == lost {
		return badInput("--site %s --to %s: the lost site cannot take over", lost, f.to)
	}
	return a.siteAction(ctx, workflows.SiteFailoverAction, args, lost, f.to, plansAtOnce, f,
		func(c client.Client, file string, p *plans.Plan) (workflows.SitePlan, string, error) {
			if err := a.checkDirection(ctx, c, file, p, "failover", lost, f.to, f.override); err != nil {
				return workflows.SitePlan{}, "", err
			}
			o, err := a.origin(file, p)
			if err != nil {
				return workflows.SitePlan{}, "", err
			}
			sp := workflows.SitePlan{Plan: p, Signature: o.Signature, ConfirmUnfenced: confirmUnfenced, OverrideState: f.override}
			if sp.LastSync, sp.Clients, err = a.protection(ctx, c, p, lost); err != nil {
				return workflows.SitePlan{}, "", err
			}
			fence := p.Site(lost).Fence.CIDRs
			if len(fence) == 0 {
				fence = sp.Clients
			}
			return sp, fmt.Sprintf("fence %v, force-promote %s on %s, start %d workload(s)", fence, groupCount(p), f.to, len(p.Workloads)), nil
		})
}

// siteReprotect reprotects, as one site action, every plan among args
// that uses the returned site.
func (a *app) siteReprotect(ctx context.Context, args []string, site string, plansAtOnce int, f actionFlags) error {
	return a.siteAction(ctx, workflows.SiteReprotectAction, args, site, "", plansAtOnce, f,
		func(c client.Client, file string, p *plans.Plan) (workflows.SitePlan, string, error) {
			in, what, err := a.reprotectInput(ctx, c, file, p, site, f.override)
			if err != nil {
				return workflows.SitePlan{}, "", err
			}
			return workflows.SitePlan{Plan: p, Signature: in.Signature, Reprotect: &in}, what, nil
		})
}

// siteFailback fails back to f.to, as one site action, every plan among
// args that runs on site.
func (a *app) siteFailback(ctx context.Context, args []string, site string, plansAtOnce int, f actionFlags) error {
	if f.to == "" || f.to == site {
		return badInput("give the site the plans go back to with --to (not --site %s, the one they leave)", site)
	}
	return a.siteAction(ctx, workflows.SiteFailbackAction, args, site, f.to, plansAtOnce, f,
		func(c client.Client, file string, p *plans.Plan) (workflows.SitePlan, string, error) {
			in, what, err := a.failbackInput(ctx, c, file, p, site, f.to, f.override)
			if err != nil {
				return workflows.SitePlan{}, "", err
			}
			return workflows.SitePlan{Plan: p, Signature: in.Signature, Failback: &in}, what, nil
		})
}

// siteDrill drills, as one site action, action (failover or failback)
// from site to f.to for every plan among args that has both.
func (a *app) siteDrill(ctx context.Context, args []string, site, action string, plansAtOnce int, f actionFlags) error {
	if f.to == "" || f.to == site {
		return badInput("give the site the drill rehearses moving to with --to (not --site %s)", site)
	}
	return a.siteAction(ctx, workflows.SiteDrillAction, args, site, f.to, plansAtOnce, f,
		func(c client.Client, file string, p *plans.Plan) (workflows.SitePlan, string, error) {
			in, err := a.drillInput(ctx, c, file, p, action, site, f.to, f.override)
			if err != nil {
				return workflows.SitePlan{}, "", err
			}
			return workflows.SitePlan{Plan: p, Signature: in.Signature, Drill: &in}, fmt.Sprintf("every check of a %s to %s, no change", action, f.to), nil
		})
}

// siteAction runs action, as one site action on site, for every plan
// among args that has the site (and to, when given): plan prepares each
// plan's part and says what it will do; a plan it refuses as bad input
// (one already moved, say) is left out with a note, the others go.
func (a *app) siteAction(ctx context.Context, action string, args []string, site, to string, plansAtOnce int, f actionFlags,
	plan func(c client.Client, file string, p *plans.Plan) (workflows.SitePlan, string, error)) error {
	if plansAtOnce < 1 {
		return badInput("--plans-at-once %d: give 1 or more", plansAtOnce)
	}
	files, err := planFiles(args)
	if err != nil {
		return err
	}
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	if action == workflows.SiteFailoverAction {
		if err := a.activeHere(ctx, c, f.takeOver); err != nil {
			return err
		}
	}
	in := workflows.SiteFailoverInput{Origin: workflows.Origin{By: a.identity()}, From: site, To: to, Parallelism: plansAtOnce}
	if action != workflows.SiteFailoverAction {
		in.Action = action
	}
	seen := map[string]string{}
	var lines []string
	for _, file := range files {
		p, err := loadPlan(file)
		if err != nil {
			return err
		}
		name := p.Metadata.Name
		if other, dup := seen[name]; dup {
			return badInput("plan %q is in both %s and %s", name, other, file)
		}
		seen[name] = file
		if p.Site(site) == nil || to != "" && p.Site(to) == nil {
			fmt.Fprintf(a.stderr, "note: plan %q (%s) does not have the site%s: left out\n", name, file, map[bool]string{true: "s " + site + " and " + to, false: " " + site}[to != ""])
			continue
		}
		sp, what, err := plan(c, file, p)
		sp.File = file
		var ee *exitError
		if errors.As(err, &ee) && ee.code == exitBadInput {
			// One plan already moved, or not where the action needs it:
			// the others still go.
			fmt.Fprintf(a.stderr, "note: plan %q left out: %v\n", name, err)
			continue
		}
		if err != nil {
			return err
		}
		in.Plans = append(in.Plans, sp)
		lines = append(lines, fmt.Sprintf("  tier %d: plan %q: %s", p.Metadata.Tier, name, what))
	}
	verb := workflows.SiteAction(action)
	if len(in.Plans) == 0 {
		return badInput("none of the %d plan(s) given can take part in the %s of %s", len(files), verb, site)
	}
	slices.Sort(lines)
	head := fmt.Sprintf("%s of %s: %d plan(s), lower tiers first", titleCase(verb), site, len(in.Plans))
	if action == workflows.SiteFailoverAction {
		head = fmt.Sprintf("Fail over %d plan(s) from the lost site %s to %s, lower tiers first, fencing %s's clients once per storage system", len(in.Plans), site, to, site)
	}
	if action != workflows.SiteDrillAction {
		if err := a.confirm(f.yes, head+":\n"+strings.Join(lines, "\n")); err != nil {
			return err
		}
	}
	run, err := workflows.StartSite(ctx, c, in)
	var busy *workflows.SiteBusyError
	if errors.As(err, &busy) {
		return failed("%v", err)
	}
	if err != nil {
		return temporalError("start the "+verb, err)
	}
	if !f.wait {
		if a.json() {
			writeJSON(a.stdout, map[string]string{"site": site, "action": verb, "workflowId": run.GetID(), "runId": run.GetRunID(), "state": workflows.StateRunning})
			return nil
		}
		fmt.Fprintf(a.stdout, "%s of %s started: workflow %s, run %s\nfollow it with: drctl watch %s\n", verb, site, run.GetID(), run.GetRunID(), run.GetID())
		return nil
	}
	if !a.json() {
		fmt.Fprintf(a.stdout, "%s of %s started: workflow %s, run %s\n", verb, site, run.GetID(), run.GetRunID())
	}
	return a.follow(ctx, c, run.GetID(), run.GetRunID())
}

// siteSummary prints a site action's outcome: a row per plan, and the
// site-wide RTO; a site action that left plans behind says it ended
// partial, names them, and gives the command that recovers each.
func (a *app) siteSummary(r *result, took string) {
	site := strings.TrimPrefix(r.Plan, "site-")
	if len(r.LeftBehind) > 0 {
		fmt.Fprintf(a.stdout, "%s from %s ended PARTIAL in %s: %d of %d plan(s) left behind (%s); RTO of the plans that moved %v\n",
			r.Action, site, took, len(r.LeftBehind), len(r.Plans), strings.Join(r.LeftBehind, ", "), r.RTO.Round(time.Millisecond))
	} else {
		fmt.Fprintf(a.stdout, "%s from %s ended in %s: site-wide RTO %v\n", r.Action, site, took, r.RTO.Round(time.Millisecond))
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  PLAN\tTIER\tOUTCOME\tRTO\tRPO\tWORKFLOW")
	for _, o := range r.Plans {
		rto, rpo := outcomeRTO(o), outcomeRPO(o)
		state := o.State
		if o.Error != "" {
			state += ": " + o.Error
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\n", o.Plan, o.Tier, state, rto, rpo, o.Workflow)
	}
	tw.Flush()
	for _, o := range r.Plans {
		if o.Recover != "" {
			fmt.Fprintf(a.stdout, "  to recover plan %s: %s\n", o.Plan, o.Recover)
		}
	}
}

// outcomeRTO and outcomeRPO are a site action's plan's figures as the
// summary, the report and the dashboard show them: "-" for a plan that
// did not complete (it has none).
func outcomeRTO(o workflows.PlanOutcome) string {
	if o.State != workflows.StateCompleted {
		return "-"
	}
	return dur(o.RTO)
}

func outcomeRPO(o workflows.PlanOutcome) string {
	if o.State != workflows.StateCompleted {
		return "-"
	}
	return rpoText(o.RPO, o.RPOKnown)
}

// sitePlansAllDone: every plan of a site action completed.
func sitePlansAllDone(r *result) bool {
	return !slices.ContainsFunc(r.Plans, func(o workflows.PlanOutcome) bool { return o.State != workflows.StateCompleted })
}

// planSteps shows, in a site action's progress, where each running plan's
// own action is: the step it runs (or waits or pauses at), as the note of
// the plan's row. A plan whose progress cannot be read keeps its row as
// it is.
func planSteps(ctx context.Context, c client.Client, p *workflows.Progress) {
	if p == nil || !workflows.IsSiteAction(p.Action) {
		return
	}
	for _, s := range p.Steps {
		plan, ok := workflows.IsPlanStep(s)
		if !ok || s.State != workflows.StateRunning {
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		cp, err := queryProgress(qctx, c, workflows.ActionID(plan), "")
		cancel()
		if err != nil {
			continue
		}
		for _, cs := range cp.Steps {
			if cs.State == workflows.StateRunning || cs.State == workflows.StatePaused || cs.State == workflows.StateWaiting {
				s.Note = fmt.Sprintf("%s: %s", cs.State, cs.Name)
				break
			}
		}
	}
}

// testRecovery starts a plan's test recovery at a site and, with wait,
// follows it to its end (which waits for drctl approve, gate endTest).
func (a *app) testRecovery(ctx context.Context, file, at string, pointAt time.Time, wait bool) error {
	p, err := loadPlan(file)
	if err != nil {
		return err
	}
	if at == "" || p.Site(at) == nil {
		return badInput("give the site to test the recovery at with --at (one of the plan's sites)")
	}
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	o, err := a.origin(file, p)
	if err != nil {
		return err
	}
	a.warnIdleWorkers(ctx, c, p, "test recovery")
	run, err := workflows.StartTestRecovery(ctx, c, workflows.TestRecoveryInput{Origin: o, Plan: p, At: at, PointAt: pointAt})
	var busy *workflows.TestBusyError
	if errors.As(err, &busy) {
		if ferr := foreignRun(ctx, c, busy.ID, busy.RunID); ferr != nil {
			return ferr
		}
		return failed("%v", err)
	}
	if err != nil {
		return temporalError("start the test recovery", err)
	}
	id := run.GetID()
	if a.json() && !wait {
		writeJSON(a.stdout, map[string]string{"plan": p.Metadata.Name, "action": "test recovery", "workflowId": id, "runId": run.GetRunID(), "state": workflows.StateRunning})
		return nil
	}
	if !a.json() {
		fmt.Fprintf(a.stdout, "test recovery of plan %q at %s started: workflow %s, run %s\nits workloads run on copies until: drctl approve %s (or policy.testTimeLimit)\n",
			p.Metadata.Name, at, id, run.GetRunID(), id)
	}
	if !wait {
		return nil
	}
	return a.follow(ctx, c, id, run.GetRunID())
}

// leftover is a test recovery run that ended without its cleanup.
type leftover struct {
	Run    string               `json:"runId"`
	Status string               `json:"status"`
	At     string               `json:"at"`
	Copies []workflows.TestCopy `json:"copies"`
}

// testLeftovers lists the runs of the plan's test recovery id: the test
// recoveries that ended without a cleanup that finished, oldest first,
// less those a later TestCleanup finished for. A run still open refuses.
func testLeftovers(ctx context.Context, c client.Client, plan string) ([]leftover, int, error) {
	id := workflows.TestRecoveryID(plan)
	var runs []*workflowpb.WorkflowExecutionInfo
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: "WorkflowId = '" + id + "'", PageSize: 100, NextPageToken: token})
		if err != nil {
			return nil, 0, temporalError("list the test recoveries of plan "+plan, err)
		}
		runs = append(runs, resp.GetExecutions()...)
		if token = resp.GetNextPageToken(); len(token) == 0 || len(runs) >= 10000 {
			break
		}
	}
	done := map[string]bool{}
	var out []leftover
	for _, e := range runs {
		run := e.GetExecution().GetRunId()
		if e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			if err := foreignRun(ctx, c, id, run); err != nil {
				return nil, 0, err
			}
			return nil, 0, failed("a %s of plan %q is running (workflow %s, run %s): wait for it to end, or end it with drctl approve %s or drctl cancel %s",
				typeWords(e.GetType().GetName()), plan, id, run, id, id)
		}
		switch e.GetType().GetName() {
		case names.TestCleanup:
			var r workflows.TestCleanupResult
			if e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED && c.GetWorkflow(ctx, id, run).Get(ctx, &r) == nil && r.Cleaned {
				done[r.Run] = true
			}
		case names.TestRecovery:
			v, err := c.QueryWorkflow(ctx, id, run, workflows.QueryTestCopies)
			if err != nil {
				return nil, 0, temporalError(fmt.Sprintf("ask test recovery run %s what it made", run), err)
			}
			var r workflows.TestRecoveryResult
			if err := v.Get(&r); err != nil {
				return nil, 0, err
			}
			if !r.Cleaned && (len(r.Copies) > 0 || startedAny(&r.Progress)) {
				out = append(out, leftover{Run: run, Status: strings.ToLower(strings.TrimPrefix(e.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_")), At: r.At, Copies: r.Copies})
			}
		}
	}
	kept := out[:0]
	for _, l := range out {
		if !done[l.Run] {
			kept = append(kept, l)
		}
	}
	slices.Reverse(kept) // the listing is newest first
	return kept, len(runs), nil
}

// startedAny tells whether a test recovery began to start a workload.
func startedAny(p *workflows.Progress) bool {
	for _, s := range p.Steps {
		if s.Kind() == workflows.KindStart && s.State != workflows.StatePending {
			return true
		}
	}
	return false
}

func typeWords(t string) string {
	if t == names.TestCleanup {
		return "test cleanup"
	}
	return "test recovery"
}

// testCleanup runs the cleanup of every test recovery of the plan that
// ended without one, one after the other, following each.
func (a *app) testCleanup(ctx context.Context, file string) error {
	p, err := loadPlan(file)
	if err != nil {
		return err
	}
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	o, err := a.origin(file, p)
	if err != nil {
		return err
	}
	name := p.Metadata.Name
	left, seen, err := testLeftovers(ctx, c, name)
	if err != nil {
		return err
	}
	if len(left) == 0 {
		if a.json() {
			writeJSON(a.stdout, map[string]any{"plan": name, "runsLookedAt": seen, "leftovers": []leftover{}})
		} else {
			fmt.Fprintf(a.stdout, "no test recovery of plan %q left anything behind (%d run(s) looked at)\n", name, seen)
		}
		return nil
	}
	a.warnIdleWorkers(ctx, c, p, "test cleanup")
	for _, l := range left {
		if p.Site(l.At) == nil {
			return badInput("test recovery run %s ran at %q, a site plan %q no longer has: give the plan it ran with", l.Run, l.At, name)
		}
		if !a.json() {
			fmt.Fprintf(a.stdout, "test recovery run %s (%s) left %d copy record(s) at %s: cleaning up\n", l.Run, l.Status, len(l.Copies), l.At)
		}
		run, err := workflows.StartTestCleanup(ctx, c, workflows.TestCleanupInput{Origin: o, Plan: p, At: l.At, Run: l.Run, Copies: l.Copies})
		var busy *workflows.TestBusyError
		if errors.As(err, &busy) {
			return failed("%v", err)
		}
		if err != nil {
			return temporalError("start the test cleanup", err)
		}
		if err := a.follow(ctx, c, run.GetID(), run.GetRunID()); err != nil {
			return err
		}
	}
	return nil
}
