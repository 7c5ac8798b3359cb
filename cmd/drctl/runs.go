package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/internal/evidence"
	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// actionTypes are the workflow types drctl lists (GroupBatch children
// are part of their parent's step table).
var actionTypes = append(slices.Clone(names.ActionTypes), names.Protect, names.SiteFailover, names.TestRecovery, names.TestCleanup)

// runArg is what a hint names a run by: the plan's name for its DR
// action (drover-action-NAME), else the workflow id (a test recovery, a
// site action), which RUN arguments take as it is.
func runArg(id string) string {
	if name := planName(id); workflows.ActionID(name) == id {
		return name
	}
	return id
}

// runID is the workflow id a RUN argument stands for.
func runID(arg string) string {
	if strings.HasPrefix(arg, names.ActionIDPrefix) || strings.HasPrefix(arg, names.ProtectIDPrefix) || strings.HasPrefix(arg, names.SiteActionIDPrefix) ||
		strings.HasPrefix(arg, names.TestRecoveryIDPrefix) {
		return arg
	}
	return workflows.ActionID(planName(arg))
}

func (a *app) runCommands() []*cobra.Command {
	var verify bool
	status := &cobra.Command{
		Use:   "status [PLAN|RUN]",
		Short: "Where a plan stands: its record, its last action and its protection (all plans without an argument)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				if verify {
					return badInput("--verify needs a plan file: drctl status PLAN.yaml --verify")
				}
				return a.list(cmd.Context(), 0, true)
			}
			return a.status(cmd.Context(), args[0], verify)
		},
	}
	status.Flags().BoolVar(&verify, "verify", false, "compare the plan's record with what its storage reports (fences, replication) and name any drift; exit 1 when there is some")
	watch := &cobra.Command{
		Use:   "watch RUN",
		Short: "Follow an action: a live step table, then its result",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := runID(args[0])
			if strings.HasPrefix(id, workflows.ProtectIDPrefix) {
				return badInput("watch follows DR actions; for protection run drctl status %s", planName(args[0]))
			}
			c, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			return a.follow(cmd.Context(), c, id, "")
		},
	}
	var limit int
	list := &cobra.Command{
		Use:   "list",
		Short: "Recent actions and protections, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 {
				return badInput("--limit %d: want 1 or more", limit)
			}
			return a.list(cmd.Context(), limit, false)
		},
	}
	list.Flags().IntVar(&limit, "limit", 20, "how many to show")
	list.Flags().StringVar(&a.planFilter, "plan", "", "only this plan's actions and protection")

	var retry, skip, abort, override, yes bool
	var step string
	resolve := &cobra.Command{
		Use:   "resolve RUN --retry|--skip|--abort",
		Short: "Decide on a paused step: retry it, skip it, or abort the action",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var decisions []string
			for d, on := range map[string]bool{workflows.DecisionRetry: retry, workflows.DecisionSkip: skip, workflows.DecisionAbort: abort} {
				if on {
					decisions = append(decisions, d)
				}
			}
			if len(decisions) != 1 {
				return badInput("give exactly one of --retry, --skip or --abort")
			}
			return a.resolve(cmd.Context(), runID(args[0]), step, decisions[0], override, yes)
		},
	}
	resolve.Flags().BoolVar(&retry, "retry", false, "run the step again")
	resolve.Flags().BoolVar(&skip, "skip", false, "mark the step skipped and go on")
	resolve.Flags().BoolVar(&abort, "abort", false, "end the action here")
	resolve.Flags().BoolVar(&override, "override", false, "allow skipping a step later steps rely on (a fence), or, with --retry, starting a workload on copies a skipped promotion left as they were")
	resolve.Flags().StringVar(&step, "step", "", "the paused step, by its ID (fence/east) or its name (default: the only one paused)")
	resolve.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation (skip and abort ask)")

	var gate string
	var approveYes bool
	approve := &cobra.Command{
		Use:   "approve RUN",
		Short: "Open the approval gate the action waits at",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.approve(cmd.Context(), runID(args[0]), gate, a.identity(), approveYes)
		},
	}
	approve.Flags().StringVar(&gate, "gate", "", "the gate (default: the only one waiting)")
	approve.Flags().BoolVarP(&approveYes, "yes", "y", false, "do not ask for confirmation")

	var cancelYes bool
	cancel := &cobra.Command{
		Use:   "cancel RUN",
		Short: "Stop an action where it is (steps done stay done)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.cancel(cmd.Context(), runID(args[0]), cancelYes)
		},
	}
	cancel.Flags().BoolVarP(&cancelYes, "yes", "y", false, "do not ask for confirmation")
	return []*cobra.Command{status, watch, list, resolve, approve, cancel}
}

// queryProgress asks a running (or closed, if a worker is up) action for
// its progress.
func queryProgress(ctx context.Context, c client.Client, id, run string) (*workflows.Progress, error) {
	return queryProgressWithin(ctx, c, id, run, 10*time.Second)
}

// actWait is how long resolve and approve wait for the action to answer
// before they act on it: longer than a workflow task's timeout (10 s).
// A worker killed in the middle of a workflow task (local calls run
// inside one) leaves the action unable to answer until Temporal times
// that task out and hands it to another worker; the operator's command
// must outlast that, not fail in it.
const actWait = 30 * time.Second

// queryProgressWithin is queryProgress waiting up to wait for the answer.
func queryProgressWithin(ctx context.Context, c client.Client, id, run string, wait time.Duration) (*workflows.Progress, error) {
	qctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	v, err := c.QueryWorkflow(qctx, id, run, workflows.QueryProgress)
	if err != nil {
		return nil, err
	}
	var p workflows.Progress
	return &p, v.Get(&p)
}

// result is the union of the actions' results.
type result struct {
	workflows.Progress
	RTO        time.Duration `json:"rto"`
	RPO        time.Duration `json:"rpo"`
	RPOKnown   bool          `json:"rpoKnown"`
	Fenced     []string      `json:"fenced"`
	RolledBack bool          `json:"rolledBack"`
	Reason     string        `json:"reason"`
	OK         *bool         `json:"ok"`
	Failed     int           `json:"failed"`
	Failures   []string      `json:"failures"`
	Would      []string      `json:"would"`
	// Plans: a site action's outcome per plan.
	Plans []workflows.PlanOutcome `json:"plans"`
	// LeftBehind: the plans a site action did not move (it ended partial).
	LeftBehind []string `json:"leftBehind"`
	// A test recovery's copies, whether they are gone, and each test
	// workload's RTO.
	Copies      []workflows.TestCopy     `json:"copies"`
	Cleaned     bool                     `json:"cleaned"`
	WorkloadRTO map[string]time.Duration `json:"workloadRTO"`
	// A test cleanup's test recovery run.
	Run string `json:"run"`
	// The point in time a test recovery copied, or a failover restored
	// the workloads' volumes from, and what the failover discarded.
	Point     *workflows.PointInTime `json:"point"`
	Discarded *workflows.Discarded   `json:"discarded"`
}

// outcome is what watch and --wait print at the end (-o json).
type outcome struct {
	WorkflowID string              `json:"workflowId"`
	RunID      string              `json:"runId"`
	Status     string              `json:"status"`
	Error      string              `json:"error,omitempty"`
	Result     json.RawMessage     `json:"result,omitempty"`
	Progress   *workflows.Progress `json:"progress,omitempty"`
}

// follow shows an action's progress until it ends, then its result; the
// exit code says how it ended.
func (a *app) follow(ctx context.Context, c client.Client, id, run string) error {
	interrupted := func() error {
		return &exitError{exitInterrupted, fmt.Errorf("stopped following %s; the action goes on (drctl watch %s)", id, runArg(id))}
	}
	if run != "" {
		// A run drctl has just started, perhaps through a standby.
		waitVisible(ctx, c, id, run)
	}
	if run == "" {
		d, err := c.DescribeWorkflowExecution(ctx, id, "")
		if ctx.Err() != nil {
			return interrupted()
		}
		if isNotFound(err) {
			return badInput("Temporal knows no action of plan %q (workflow %s); drctl list shows the actions it knows", planName(id), id)
		}
		if err != nil {
			return temporalError("find "+id, err)
		}
		run = d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	}
	wr := c.GetWorkflow(ctx, id, run)
	out := outcome{WorkflowID: id, RunID: wr.GetRunID()}
	var raw json.RawMessage
	done := make(chan error, 1)
	go func() { done <- wr.Get(ctx, &raw) }()
	live := newLiveTable(a.stdout, !a.json())
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var err error
	misses, said := 0, ""
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-ctx.Done():
			// Interrupted: the action itself goes on in Temporal.
			return interrupted()
		case <-tick.C:
			p, qerr := queryProgress(ctx, c, id, out.RunID)
			if qerr != nil {
				misses++
				if misses >= 3 && !a.json() {
					// Say why once, and again when the cause changes.
					if why := noProgressCause(ctx, c, id, qerr); why != said {
						fmt.Fprintf(a.stderr, "(%s)\n", why)
						said = why
					}
				}
				continue
			}
			if said != "" && !a.json() {
				fmt.Fprintf(a.stderr, "(progress from %s again)\n", id)
			}
			misses, said = 0, ""
			planSteps(ctx, c, p)
			live.show(p, id)
		}
	}
	if ctx.Err() != nil {
		// The wait for the result saw the interruption first: the action
		// has not ended because of it.
		return interrupted()
	}
	if err == nil {
		var r result
		_ = json.Unmarshal(raw, &r)
		out.Status, out.Result = workflows.StateCompleted, raw
		if len(r.LeftBehind) > 0 {
			// It ran to its end, and left plans where they were.
			out.Status = workflows.StatePartial
		}
		undone := workflows.Undone(&r.Progress)
		if len(undone) > 0 && out.Status == workflows.StateCompleted {
			// It ran to its end with steps skipped: not done.
			out.Status = workflows.StateIncomplete
		}
		live.final(&r.Progress, id)
		if a.json() {
			writeJSON(a.stdout, out)
		} else {
			// How long it took as list and status say it: Temporal's
			// start and close of the run.
			took := "(not known)"
			if d, derr := c.DescribeWorkflowExecution(ctx, id, out.RunID); derr == nil {
				took = executionOf(d.GetWorkflowExecutionInfo()).Took()
			}
			a.summary(&r, took)
		}
		if out.Status == workflows.StateIncomplete && a.json() {
			return silent(exitFailed)
		}
		if out.Status == workflows.StateIncomplete {
			return failed("%s %s: it ran to its end with steps skipped:\n  %s\nsee drctl status %s", id, workflows.StateIncomplete, strings.Join(undone, "\n  "), runArg(id))
		}
		if r.OK != nil && !*r.OK || workflows.IsSiteAction(r.Action) && !sitePlansAllDone(&r) {
			return silent(exitFailed)
		}
		return nil
	}
	out.Status, out.Error = closeState(err), workflows.ErrorText(err)
	named := out.Status
	if p, qerr := queryProgress(ctx, c, id, out.RunID); qerr == nil {
		out.Progress = p
		live.final(p, id)
		named = actionState(out.Status, p)
	}
	if d, derr := c.DescribeWorkflowExecution(ctx, id, out.RunID); derr == nil {
		if took := executionOf(d.GetWorkflowExecutionInfo()).Took(); took != "" {
			named += " after " + took
		}
	}
	// An action that contradicted the storage's state did nothing: bad input.
	var app *temporal.ApplicationError
	wrongWay := errors.As(err, &app) && app.Type() == workflows.ErrWrongDirection
	if a.json() {
		writeJSON(a.stdout, out)
		if wrongWay {
			return silent(exitBadInput)
		}
		return silent(exitFailed)
	}
	if isUnavailable(err) {
		return temporalError("follow "+id, err)
	}
	if wrongWay {
		return badInput("%s %s: %s", id, named, out.Error)
	}
	return failed("%s %s: %s\nsee the step table above and drctl status %s", id, named, out.Error, runArg(id))
}

func closeState(err error) string {
	var canceled *temporal.CanceledError
	var terminated *temporal.TerminatedError
	var timeout *temporal.TimeoutError
	switch {
	case errors.As(err, &canceled):
		return "canceled"
	case errors.As(err, &terminated):
		return "terminated"
	case errors.As(err, &timeout):
		return "timed out"
	}
	return "failed"
}

// summary is the closing line of a completed action.
func (a *app) summary(r *result, took string) {
	if workflows.IsSiteAction(r.Action) {
		a.siteSummary(r, took)
		return
	}
	fmt.Fprintf(a.stdout, "%s of plan %q completed in %s\n", r.Action, r.Plan, took)
	switch r.Action {
	case "failover":
		fmt.Fprintf(a.stdout, "  RTO %s, RPO %s, fenced %v\n", dur(r.RTO), rpoFact(r.RPO, r.RPOKnown), r.Fenced)
		if r.Point != nil && r.Discarded != nil {
			fmt.Fprintf(a.stdout, "  the workloads run on volumes restored from point %s (held); %s, kept on the promoted replicas\n", r.Point.ID, r.Discarded.Text())
		}
	case "test recovery":
		state := "every copy and snapshot deleted"
		if r.Point != nil {
			state = fmt.Sprintf("every copy deleted; the snapshots of point %s kept (protection's), its hold released", r.Point.ID)
		}
		if !r.Cleaned {
			state = "the cleanup did not finish: see the steps"
		}
		fmt.Fprintf(a.stdout, "  %d volume(s) copied, %s\n", len(r.Copies), state)
		names := slices.Sorted(maps.Keys(r.WorkloadRTO))
		for _, w := range names {
			fmt.Fprintf(a.stdout, "  %s healthy on its copies %v after the start\n", w, r.WorkloadRTO[w].Round(time.Millisecond))
		}
	case "test cleanup":
		state := "every copy and snapshot deleted"
		if !r.Cleaned {
			state = "the cleanup did not finish: see the steps"
		}
		fmt.Fprintf(a.stdout, "  %d copy record(s) of test recovery run %s, %s\n", len(r.Copies), r.Run, state)
	case "drill failover", "drill failback":
		if r.OK != nil && *r.OK {
			fmt.Fprintf(a.stdout, "  every check passed; the real action would:\n")
		} else {
			fmt.Fprintf(a.stdout, "  %d check(s) failed:\n", r.Failed)
			for _, f := range r.Failures {
				fmt.Fprintf(a.stdout, "    %s\n", f)
			}
			fmt.Fprintf(a.stdout, "  the real action would:\n")
		}
		for _, w := range r.Would {
			fmt.Fprintf(a.stdout, "    %s\n", w)
		}
	}
}

// actionState is the one wording of what an action is at, for every
// view (drctl watch's and status's step tables, status's last action,
// the report, the dashboard): state (Temporal's status of the run, or
// its progress's state), but paused while a step waits for the
// operator's decision, waiting for approval while one waits at a gate,
// partial for a site action that completed and left plans behind,
// incomplete for an action that completed with steps skipped, and,
// for an action that ended on a step, failed at that step (the plan's
// policy aborts on a failure: the run says aborted, Temporal failed)
// or aborted at the step the operator aborted.
func actionState(state string, p *workflows.Progress) string {
	if p == nil {
		return state
	}
	switch state {
	case workflows.StateRunning:
		if len(stepsIn(p, workflows.StatePaused)) > 0 {
			return workflows.StatePaused
		}
		if len(stepsIn(p, workflows.StateWaiting)) > 0 {
			return workflows.StateWaiting
		}
	case workflows.StateCompleted:
		if p.State == workflows.StatePartial || p.State == workflows.StateIncomplete {
			// It ran to its end, with plans left behind or steps skipped.
			return p.State
		}
	case workflows.StateAborted, workflows.StateFailed:
		if failed := stepsIn(p, workflows.StateFailed); len(failed) > 0 {
			return fmt.Sprintf("failed at step %q", failed[0].Name)
		}
		aborted := stepsIn(p, workflows.StateAborted)
		for _, s := range aborted {
			if s.Decided == workflows.DecisionAbort {
				return fmt.Sprintf("aborted at step %q", s.Name)
			}
		}
		if len(aborted) > 0 {
			return fmt.Sprintf("aborted at step %q", aborted[0].Name)
		}
	}
	return state
}

func stepsIn(p *workflows.Progress, state string) []*workflows.Step {
	var out []*workflows.Step
	for _, s := range p.Steps {
		if s.State == state {
			out = append(out, s)
		}
	}
	return out
}

// pick connects, reads the action's progress and picks the step in state
// that the operator means: the one named, or the only one. what names
// such steps in messages, flag the option that names one.
func (a *app) pick(ctx context.Context, id, state, named, what, flag string, trim func(*workflows.Step) string) (client.Client, *workflows.Progress, string, error) {
	c, err := a.dial(ctx)
	if err != nil {
		return nil, nil, "", err
	}
	if err := foreignRun(ctx, c, id, ""); err != nil {
		return nil, nil, "", err
	}
	p, err := queryProgressWithin(ctx, c, id, "", actWait)
	if err != nil && ctx.Err() == nil && !isUnavailable(err) && runningAt(ctx, c, id) {
		// It runs, and answered nothing in time: no worker serves it.
		return nil, nil, "", noAnswer(id, err)
	}
	if err != nil {
		return nil, nil, "", temporalError("read the progress of "+id, err)
	}
	if named != "" {
		return c, p, named, nil
	}
	var found []string
	for _, s := range stepsIn(p, state) {
		found = append(found, trim(s))
	}
	switch len(found) {
	case 0:
		return nil, nil, "", badInput("%s has no %s; drctl status %s shows where it is", id, what, runArg(id))
	case 1:
		return c, p, found[0], nil
	}
	return nil, nil, "", badInput("%s has %d of them (%s); name one with %s: %q", id, len(found), what, flag, found)
}

func (a *app) resolve(ctx context.Context, id, step, decision string, override, yes bool) error {
	c, p, step, err := a.pick(ctx, id, workflows.StatePaused, step, "paused step", "--step", (*workflows.Step).Key)
	if err != nil {
		return err
	}
	if decision != workflows.DecisionRetry {
		what := fmt.Sprintf("%s step %q of %s.", strings.ToUpper(decision[:1])+decision[1:], step, id)
		if i := slices.IndexFunc(p.Steps, func(s *workflows.Step) bool { return s.Key() == step }); decision == workflows.DecisionSkip && i >= 0 {
			what += fmt.Sprintf(" Skipped, %s; the action goes on and ends %s, not completed.", workflows.SkipMeans(p.Steps[i]), workflows.StateIncomplete)
		}
		if err := a.confirm(yes, what); err != nil {
			return err
		}
	}
	msg, err := a.update(ctx, c, id, workflows.UpdateResolve, workflows.Decision{Step: step, Action: decision, Override: override, By: a.identity()})
	if err != nil {
		return err
	}
	if a.json() {
		writeJSON(a.stdout, map[string]string{"workflowId": id, "step": step, "decision": decision, "message": msg})
		return nil
	}
	fmt.Fprintf(a.stdout, "%s: %s\n", id, msg)
	return nil
}

func (a *app) approve(ctx context.Context, id, gate, by string, yes bool) error {
	c, p, gate, err := a.pick(ctx, id, workflows.StateWaiting, gate, "approval gate waiting", "--gate",
		func(s *workflows.Step) string {
			if s.Kind() == workflows.KindApprove {
				return strings.TrimPrefix(s.ID, string(workflows.KindApprove)+"/")
			}
			return strings.TrimPrefix(s.Name, "approve ") // an action from before steps had IDs
		})
	if err != nil {
		return err
	}
	if err := a.confirm(yes, fmt.Sprintf("Approve gate %s of the %s of plan %q: the action goes on past it.", gate, p.Action, p.Plan)); err != nil {
		return err
	}
	msg, err := a.update(ctx, c, id, workflows.UpdateApprove, workflows.Approval{Gate: gate, By: by})
	if err != nil {
		return err
	}
	if a.json() {
		writeJSON(a.stdout, map[string]string{"workflowId": id, "gate": gate, "message": msg})
		return nil
	}
	fmt.Fprintf(a.stdout, "%s: %s\n", id, msg)
	return nil
}

func (a *app) cancel(ctx context.Context, id string, yes bool) error {
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	d, err := c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return temporalError("find "+id, err)
	}
	info := d.GetWorkflowExecutionInfo()
	if info.GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return badInput("%s is not running (%s); nothing to cancel", id, statusName(info.GetStatus()))
	}
	if err := a.confirm(yes, fmt.Sprintf("Cancel %s (%s, run %s): it stops where it is; steps done stay done.", id, info.GetType().GetName(), info.GetExecution().GetRunId())); err != nil {
		return err
	}
	if err := c.CancelWorkflow(ctx, id, ""); err != nil {
		return temporalError("cancel "+id, err)
	}
	if a.json() {
		writeJSON(a.stdout, map[string]string{"workflowId": id, "runId": info.GetExecution().GetRunId(), "state": "cancel requested"})
		return nil
	}
	fmt.Fprintf(a.stdout, "%s: cancellation requested; drctl status %s shows where it stopped\n", id, runArg(id))
	return nil
}

// update sends an update and waits for its answer; a refusal (a step not
// paused, a gate not waiting) is bad input.
func (a *app) update(ctx context.Context, c client.Client, id, name string, arg any) (string, error) {
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: name, Args: []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil && strings.Contains(err.Error(), "already completed") {
		return "", badInput("%s has ended; there is nothing to %s (drctl status %s shows how it ended)", id, name, runArg(id))
	}
	if err != nil {
		return "", temporalError(name+" "+id, err)
	}
	var msg string
	if err := h.Get(ctx, &msg); err != nil {
		return "", badInput("%s refused: %v", id, workflows.ErrorText(err))
	}
	return msg, nil
}

// statusName spells a workflow status the way the tables show it:
// "running", "completed", "continued as new".
func statusName(s enums.WorkflowExecutionStatus) string {
	var b strings.Builder
	for i, r := range s.String() {
		if unicode.IsUpper(r) && i > 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// execution is one workflow in list and status output.
type execution struct {
	Plan       string    `json:"plan"`
	Type       string    `json:"type"`
	WorkflowID string    `json:"workflowId"`
	RunID      string    `json:"runId"`
	Status     string    `json:"status"`
	Start      time.Time `json:"start"`
	Close      time.Time `json:"close,omitzero"`
	// By is who started it, as the starter said (the memo drctl sets).
	By string `json:"by,omitempty"`
}

// Took is how long the action took, as every view says it (drctl list,
// status, watch, report, the dashboard): from the moment Temporal
// started its run to the moment the run closed, the two instants each of
// them can read (list and the dashboard's overview read only Temporal's
// visibility); "" while it runs.
func (x execution) Took() string { return took(x.Start, x.Close) }

// took is how long something took from start to end, written the one way
// every view writes it; "" when either is not known.
func took(start, end time.Time) string {
	if start.IsZero() || end.IsZero() {
		return ""
	}
	return dur(end.Sub(start))
}

func executionOf(e *workflowpb.WorkflowExecutionInfo) execution {
	x := execution{Plan: planName(e.GetExecution().GetWorkflowId()), Type: e.GetType().GetName(), WorkflowID: e.GetExecution().GetWorkflowId(),
		RunID: e.GetExecution().GetRunId(), Status: statusName(e.GetStatus()), Start: e.GetStartTime().AsTime()}
	if e.GetCloseTime() != nil && e.GetCloseTime().IsValid() && e.GetCloseTime().AsTime().Unix() > 0 {
		x.Close = e.GetCloseTime().AsTime()
	}
	if f := e.GetMemo().GetFields()[workflows.MemoBy]; f != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(f, &x.By)
	}
	// The plan a workflow names itself (every Drover workflow sets its
	// search attributes), whatever id it was started under.
	if f := e.GetSearchAttributes().GetIndexedFields()[names.AttrPlan]; f != nil {
		var plan string
		if converter.GetDefaultDataConverter().FromPayload(f, &plan) == nil && plan != "" {
			x.Plan = plan
		}
	}
	return x
}

// list shows recent executions; latest keeps the newest of each workflow
// id (status without an argument).
func (a *app) list(ctx context.Context, limit int, latest bool) error {
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	all, err := a.executions(ctx, c, limit, latest)
	if err != nil {
		return err
	}
	for i := range all {
		markPartial(ctx, c, &all[i])
	}
	if a.json() {
		if all == nil {
			all = []execution{}
		}
		writeJSON(a.stdout, all)
		return nil
	}
	if len(all) == 0 {
		fmt.Fprintln(a.stdout, "no Drover actions yet; start with drctl protect start PLAN or drctl drill PLAN --to SITE")
		return nil
	}
	tw := newTable(a.stdout, "PLAN", "ACTION", "STATUS", "STARTED", "TOOK", "BY", "WORKFLOW")
	for _, x := range all {
		by := x.By
		if by == "" {
			by = "-"
		}
		tw.row(x.Plan, x.Type, x.Status, x.Start.Local().Format("2006-01-02 15:04:05"), x.Took(), by, x.WorkflowID)
	}
	return tw.flush()
}

// markPartial says "partial" of a site action that completed in
// Temporal but left plans behind, and "incomplete" of an action that
// completed with steps skipped, as their own page and report do: to
// Temporal they completed, to the operator they did not. Their result
// says (a result that cannot be read leaves them completed).
func markPartial(ctx context.Context, c client.Client, x *execution) {
	if x.Status != "completed" || !slices.Contains(outcomeTypes, x.Type) {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var res struct {
		State      string   `json:"state"`
		LeftBehind []string `json:"leftBehind"`
	}
	if err := c.GetWorkflow(rctx, x.WorkflowID, x.RunID).Get(rctx, &res); err != nil {
		return
	}
	switch {
	case len(res.LeftBehind) > 0:
		x.Status = workflows.StatePartial
	case res.State == workflows.StateIncomplete:
		x.Status = workflows.StateIncomplete
	}
}

// outcomeTypes are the actions whose result may say they did not all
// they set out to do.
var outcomeTypes = []string{names.SiteFailover, names.Failover, names.Failback, names.Reprotect}

// executions lists Drover's workflows, newest first (at most limit, if
// above zero; only the last run of each workflow id when latest, then by
// plan), of a.planFilter's plan when set.
func (a *app) executions(ctx context.Context, c client.Client, limit int, latest bool) ([]execution, error) {
	// Drover's workflows by their search attribute, not by type names
	// another application in the namespace may share. A Protect that
	// continued as new goes on in its next run: only that one is listed.
	types := "WorkflowType IN ('" + strings.Join(actionTypes, "','") + "') AND ExecutionStatus != 'ContinuedAsNew'"
	q := names.AttrPlan + " IS NOT NULL AND " + types
	if a.planFilter != "" {
		q = names.AttrPlan + " = '" + strings.ReplaceAll(a.planFilter, "'", "") + "' AND " + types
	}
	var all []execution
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, PageSize: 100, NextPageToken: token})
		var ia *serviceerror.InvalidArgument
		if errors.As(err, &ia) && strings.Contains(q, names.AttrPlan) && len(all) == 0 {
			// The namespace lacks Drover's search attributes: match the
			// types alone, and say how to register them.
			fmt.Fprintf(a.stderr, "drctl: warning: %v\n%s", err, registerHint())
			q = types
			if a.planFilter != "" {
				q = "WorkflowId IN ('" + workflows.ActionID(a.planFilter) + "','" + workflows.ProtectID(a.planFilter) + "') AND " + types
			}
			continue
		}
		if err != nil {
			return nil, temporalError("list the actions", err)
		}
		for _, e := range resp.GetExecutions() {
			all = append(all, executionOf(e))
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 || (limit > 0 && len(all) >= limit) || len(all) >= 10000 {
			break
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Start.After(all[j].Start) })
	if latest {
		seen := map[string]bool{}
		var keep []execution
		for _, x := range all {
			if !seen[x.WorkflowID] {
				seen[x.WorkflowID] = true
				keep = append(keep, x)
			}
		}
		all = keep
		sort.SliceStable(all, func(i, j int) bool { return all[i].Plan < all[j].Plan })
	}
	if limit > 0 && len(all) > limit {
		all = all[:limit]
	}
	return all, nil
}

// registerHint says how to register Drover's search attributes.
func registerHint() string {
	args := ""
	for _, n := range names.SearchAttributes {
		args += " --name " + n + " --type Keyword"
	}
	return "register Drover's search attributes on the namespace: temporal operator search-attribute create" + args + "\n"
}

// planStatus is status's answer for one plan.
type planStatus struct {
	Plan       string                  `json:"plan"`
	Record     *workflows.PlanRecord   `json:"record"`
	Verify     *workflows.VerifyResult `json:"verify,omitempty"`
	Action     *actionStatus           `json:"action"`
	Protection *workflows.ProtectState `json:"protection"`
	ProtectRun *execution              `json:"protectRun,omitempty"`
	// Tests: where the plan's drills and test recoveries stand, from the
	// evidence store (DROVER_EVIDENCE_DIR), when drctl is given one.
	Tests []evidence.Health `json:"tests,omitempty"`
}

type actionStatus struct {
	execution
	Progress *workflows.Progress `json:"progress,omitempty"`
}

func (a *app) status(ctx context.Context, arg string, verify bool) error {
	var plan *plans.Plan
	if verify {
		if !isPlanFile(arg) {
			return badInput("--verify needs the plan file (its storage endpoints), not %q", arg)
		}
		p, err := loadPlan(arg)
		if err != nil {
			return err
		}
		plan = p
	}
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	id := runID(arg)
	name, actionID := planName(arg), workflows.ActionID(planName(arg))
	// A site action has no record or protection of its own: only its
	// steps.
	site, siteAction := strings.CutPrefix(id, names.SiteActionIDPrefix)
	if siteAction {
		name, actionID = "site-"+site, id
	}
	// A test recovery is the plan's, under an id of its own.
	if plan, test := strings.CutPrefix(id, names.TestRecoveryIDPrefix); test {
		name, actionID = plan, id
	}
	st := planStatus{Plan: name}
	// what could not be read because the current build cannot run it
	var unreadable []string
	if !siteAction {
		rec, rerr := glanceRecord(ctx, c, name)
		if rerr != nil {
			// On a standby cluster cut off from the active one, the
			// record cannot be read and what this cluster holds of the
			// plan may be behind: say so, exit 3, show nothing stale.
			if err := a.activeUnreachable(ctx, c); err != nil {
				return err
			}
		}
		if why := otherBuild(ctx, c, "record", name, workflows.RecordID(name), rerr); why != "" {
			unreadable = append(unreadable, why)
		} else if rerr != nil && verify {
			// Not "no record yet": the record could not be read (a
			// query the worker did not answer, or one a standby
			// cluster forwarded that failed on the way).
			return temporalError("verify plan "+name, rerr)
		} else if rerr != nil && !a.json() {
			fmt.Fprintf(a.stderr, "drctl: %v\n", rerr)
		}
		st.Record = rec
	}
	onlyProtect := strings.HasPrefix(id, workflows.ProtectIDPrefix)
	onlyAction := strings.HasPrefix(arg, names.ActionIDPrefix) || siteAction || strings.HasPrefix(id, names.TestRecoveryIDPrefix)
	if !onlyProtect {
		d, err := c.DescribeWorkflowExecution(ctx, actionID, "")
		if err == nil {
			x := executionOf(d.GetWorkflowExecutionInfo())
			as := &actionStatus{execution: x}
			if p, qerr := queryProgress(ctx, c, x.WorkflowID, x.RunID); qerr == nil {
				as.Progress = p
			}
			st.Action = as
		} else if !isNotFound(err) {
			return temporalError("describe the action of plan "+name, err)
		}
	}
	if !onlyAction {
		d, err := c.DescribeWorkflowExecution(ctx, workflows.ProtectID(name), "")
		if err == nil {
			x := executionOf(d.GetWorkflowExecutionInfo())
			st.ProtectRun = &x
			ps, qerr := glanceProtect(ctx, c, name)
			if qerr == nil {
				st.Protection = ps
			} else if why := otherBuild(ctx, c, "protection state", name, workflows.ProtectID(name), qerr); why != "" {
				unreadable = append(unreadable, why)
			}
		} else if !isNotFound(err) {
			return temporalError("describe the protection of plan "+name, err)
		}
	}
	if st.Action == nil && st.ProtectRun == nil && st.Record == nil {
		return badInput("Temporal knows no action or protection of plan %q; drctl list shows the plans it knows", name)
	}
	if verify {
		if st.Record == nil {
			return badInput("plan %q has no record to verify yet (no action or protection since the record came)", name)
		}
		o, err := a.origin(arg, plan)
		if err != nil {
			return err
		}
		v, err := verifyRecord(ctx, c, plan, st.Record, o)
		if err != nil {
			return err
		}
		st.Verify = v
	}
	drift := st.Verify != nil && len(st.Verify.Drift) > 0
	// A storage that did not answer is no drift: it is not verified, and
	// status says so and exits 3 (unreachable), unless drift was found.
	unverified := st.Verify != nil && len(st.Verify.Unverified) > 0
	if st.Record != nil && st.ProtectRun != nil {
		// The record line shows protection's newest look, as the
		// protection lines, the dashboard and the metrics do.
		st.Record.Protection = newestLook(st.Record.Protection, st.Protection, st.ProtectRun.Status == "running")
	}
	if dir := os.Getenv("DROVER_EVIDENCE_DIR"); dir != "" && !siteAction {
		p := plan
		if p == nil && isPlanFile(arg) {
			p, _ = loadPlan(arg) // its policy.drills, when it loads
		}
		st.Tests = testsOf(evidence.Dir{Root: dir}, name, p)
	}
	if a.json() {
		writeJSON(a.stdout, st)
		if len(unreadable) > 0 {
			return &exitError{exitFailed, errors.New(strings.Join(unreadable, "\n"))}
		}
		if drift {
			return silent(exitFailed)
		}
		if unverified {
			return silent(exitUnreachable)
		}
		return nil
	}
	fmt.Fprintf(a.stdout, "plan %s\n", name)
	reprotecting := ""
	if st.Action != nil {
		reprotecting = runningReprotect(&st.Action.execution)
	}
	if r := st.Record; r != nil {
		renderRecord(a.stdout, r, time.Now(), reprotecting)
	}
	if v := st.Verify; v != nil {
		fmt.Fprintf(a.stdout, "\nverified against storage: %s\n", strings.Join(v.Checked, "; "))
		switch {
		case !drift && !unverified:
			fmt.Fprintf(a.stdout, "  no drift: storage agrees with the record\n")
		case !drift:
			fmt.Fprintf(a.stdout, "  no drift in what storage answered; the rest could not be verified\n")
		}
		for _, d := range v.Drift {
			fmt.Fprintf(a.stdout, "  DRIFT: %s\n", d)
		}
		for _, u := range v.Unverified {
			fmt.Fprintf(a.stdout, "  NOT VERIFIED: %s\n", u)
		}
	}
	if x := st.Action; x != nil {
		took := ""
		if t := x.Took(); t != "" {
			took = ", took " + t
		}
		fmt.Fprintf(a.stdout, "\nlast action: %s, %s, started %s%s%s (workflow %s, run %s)\n", x.Type, actionState(x.Status, x.Progress), x.Start.Local().Format(time.DateTime), byText(x.By), took, x.WorkflowID, x.RunID)
		if x.Progress != nil {
			renderSteps(a.stdout, x.Progress, x.WorkflowID)
		} else if x.Status == "running" {
			fmt.Fprintf(a.stdout, "  (its steps are not known: no worker answered the progress query; is one running?)\n")
		}
	}
	if x := st.ProtectRun; x != nil {
		fmt.Fprintf(a.stdout, "\nprotection: %s (workflow %s)\n", x.Status, x.WorkflowID)
		if ps := st.Protection; ps != nil {
			if err := renderProtection(a.stdout, name, ps, time.Now(), reprotecting); err != nil {
				return err
			}
		}
	}
	renderTests(a.stdout, st.Tests, time.Now())
	if len(unreadable) > 0 {
		return &exitError{exitFailed, errors.New(strings.Join(unreadable, "\n"))}
	}
	if drift {
		return silent(exitFailed)
	}
	if unverified {
		return silent(exitUnreachable)
	}
	return nil
}

// renderRecord writes what the plan's record holds; its protection
// line is protection's look as of the time it gives (newestLook), never
// aged by drctl's clock.
func renderRecord(w io.Writer, r *workflows.PlanRecord, now time.Time, reprotecting string) {
	primary := r.Primary
	if primary == "" {
		primary = "not known yet"
	}
	fmt.Fprintf(w, "\nrecord (workflow %s, updated %s):\n  primary: %s\n", workflows.RecordID(r.Plan), r.Updated.Local().Format(time.DateTime), primary)
	if b := r.Rebuilt; b != nil {
		switch {
		case b.Unproven:
			fmt.Fprintf(w, "  NOTHING TO TRUST since %s: this run of the record started anew and took nothing over; it refuses every plan version signed before then, "+
				"so no action of the plan runs until the plan is signed again (check the storage with drctl status %s --verify, then drctl plan sign FILE --key KEY)",
				b.At.Local().Format(time.DateTime), r.Plan)
		case b.From != "":
			fmt.Fprintf(w, "  REBUILT at %s: this run of the record took over run %s (%s at %s), the last a Drover worker made",
				b.At.Local().Format(time.DateTime), b.From, b.Status, b.Closed.Local().Format(time.DateTime))
		default:
			fmt.Fprintf(w, "  STARTED ANEW at %s with nothing taken over", b.At.Local().Format(time.DateTime))
		}
		if b.Note != "" {
			fmt.Fprintf(w, ": %s", oneLine(b.Note))
		}
		fmt.Fprintln(w)
		if v := b.Restored; v != nil {
			fmt.Fprintf(w, "  RESTORED at %s by the plan version signed at %s by key %s, presented by %s %s (by %s)\n",
				v.Accepted.Local().Format(time.DateTime), v.SignedAt.Local().Format(time.DateTime), v.KeyID, v.Workflow, v.WorkflowID, oneLine(v.By))
		}
	}
	if len(r.Fences) == 0 {
		fmt.Fprintf(w, "  fenced: nothing\n")
	}
	for _, f := range r.Fences {
		fmt.Fprintf(w, "  fenced: %s's clients %s through %s's storage (by %s at %s)\n", f.Site, strings.Join(f.CIDRs, ", "), f.Via, f.By, f.At.Local().Format(time.DateTime))
	}
	if x := r.LastAction; x != nil {
		end := ""
		if !x.End.IsZero() {
			end = ", ended " + x.End.Local().Format(time.DateTime)
		}
		fmt.Fprintf(w, "  last action: %s %s → %s, %s%s (workflow %s, run %s)\n", x.Action, x.From, x.To, x.Outcome, end, x.WorkflowID, x.RunID)
		if x.Error != "" {
			fmt.Fprintf(w, "    error: %s\n", x.Error)
		}
		if x.WithoutRecord != "" {
			fmt.Fprintf(w, "    WITHOUT THE RECORD: %s\n", oneLine(x.WithoutRecord))
		}
	}
	if x := r.Restored; x != nil {
		fmt.Fprintf(w, "  running on volumes restored from point %s at %s (by %s at %s); the replicas are kept\n", x.Point, x.Site, x.By, x.At.Local().Format(time.DateTime))
	}
	if x := r.Replaced; x != nil {
		fmt.Fprintf(w, "  %s\n", x.Text())
	}
	renderRecordPoints(w, r, now)
	if pr := r.Protection; pr != nil {
		state := "stopped"
		if pr.Running {
			state = "running"
		}
		// Protection's end, or its signature's ahead, below its line.
		end := ""
		if pr.Ended != "" {
			state, end = "ended", "  "+endedText(pr.Ended)+"\n"
		} else if text, warn := signatureText(r.Plan, pr.SignatureEnds, now); warn && pr.Running {
			end = "  " + text + "\n"
		}
		if u := pr.Unprotected; u != nil {
			if x := r.LastAction; x != nil && x.Action == "reprotect" && x.Outcome == workflows.StateCompleted && x.End.After(pr.Checked) {
				// The reprotect ended the unprotection after protection's
				// last report: it has not reported since.
				fmt.Fprintf(w, "  protection: %s from %s, reprotected at %s (workflow %s); protection has not reported since (its last report, %s, was from before: unprotected)\n%s",
					state, x.To, x.End.Local().Format(time.DateTime), x.WorkflowID, pr.Checked.Local().Format(time.DateTime), end)
				return
			}
			fmt.Fprintf(w, "  protection: %s from %s, %s\n%s", state, pr.Primary, unprotectedText(r.Plan, pr.Primary, u, now, reprotecting), end)
			return
		}
		rpo := "within the RPO target"
		if pr.OutOfRPO {
			rpo = "OUT OF RPO"
		}
		last := ""
		if !pr.LastSync.IsZero() {
			last = ", last sync " + pr.LastSync.Local().Format(time.DateTime)
		}
		fmt.Fprintf(w, "  protection: %s from %s, replication enabled %v, lag %s, %s (as of %s%s)\n%s", state, pr.Primary, pr.Enabled,
			lagText(pr.Lag), rpo, pr.Checked.Local().Format(time.DateTime), last, end)
		if pr.Unreachable != "" {
			fmt.Fprintf(w, "  PRIMARY %s UNREACHABLE: %s\n", pr.Primary, oneLine(pr.Unreachable))
		}
	}
	if v := r.Version; v != nil {
		fmt.Fprintf(w, "  plan version: signed %s by key %s, accepted %s (%s %s)\n", v.SignedAt.Local().Format(time.DateTime), v.KeyID,
			v.Accepted.Local().Format(time.DateTime), v.Workflow, v.WorkflowID)
	}
	if r.RefusedCount > 0 {
		fmt.Fprintf(w, "  REFUSED: %d attempt(s) to change the record or to run an older plan; the latest:\n", r.RefusedCount)
		for _, x := range r.Refused[max(len(r.Refused)-5, 0):] {
			from := ""
			switch x.From {
			case "":
			case workflows.UnknownSender:
				from = " from an unknown sender"
			default:
				from = " from workflow " + x.From
			}
			fmt.Fprintf(w, "    %s %s%s: %s\n", x.At.Local().Format(time.DateTime), x.What, from, x.Reason)
		}
	}
}

// verifyRecord runs the plan's Verify workflow and waits for its answer.
func verifyRecord(ctx context.Context, c client.Client, p *plans.Plan, rec *workflows.PlanRecord, o workflows.Origin) (*workflows.VerifyResult, error) {
	vctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	run, err := workflows.StartVerify(vctx, c, p, rec, o)
	if err != nil {
		return nil, temporalError("start the verification of plan "+p.Metadata.Name, err)
	}
	waitVisible(vctx, c, run.GetID(), run.GetRunID())
	var v workflows.VerifyResult
	if err := run.Get(vctx, &v); err != nil {
		if ctx.Err() != nil {
			return nil, &exitError{exitInterrupted, fmt.Errorf("stopped waiting for %s", run.GetID())}
		}
		return nil, temporalError("verify plan "+p.Metadata.Name+" (workflow "+run.GetID()+")", err)
	}
	return &v, nil
}

func byText(by string) string {
	if by == "" {
		return ""
	}
	return " by " + by
}

func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

// otherBuild explains a query that failed on a run of Protect or of a
// record (they follow the current build) that is still on another build
// than the Worker Deployment's current one: after a rollback to a build
// that does not have a path the run took on a newer build (a
// workflow.GetVersion change, an update the older build has no handler
// for), its workflow tasks and queries fail on the current build and it
// waits, nothing lost, until a build that has the path is current again
// (docs/guides/upgrades.md). "" when the run is on the current build (or
// Temporal does not say).
func otherBuild(ctx context.Context, c client.Client, what, plan, id string, err error) string {
	if err == nil {
		return ""
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	d, derr := c.DescribeWorkflowExecution(dctx, id, "")
	if derr != nil {
		return ""
	}
	vi := d.GetWorkflowExecutionInfo().GetVersioningInfo()
	ran := vi.GetDeploymentVersion().GetBuildId()
	dd, derr := c.WorkerDeploymentClient().GetHandle(names.Deployment).Describe(dctx, client.WorkerDeploymentDescribeOptions{})
	if derr != nil || dd.Info.RoutingConfig.CurrentVersion == nil || vi.GetBehavior() != enums.VERSIONING_BEHAVIOR_AUTO_UPGRADE {
		return ""
	}
	current := dd.Info.RoutingConfig.CurrentVersion.BuildID
	if ran == "" || ran == current {
		return ""
	}
	tasks := "it has not moved there"
	if n := d.GetPendingWorkflowTask().GetAttempt(); n > 1 {
		tasks = fmt.Sprintf("its workflow task fails there (attempt %d)", n)
	}
	return fmt.Sprintf("the %s of plan %q cannot be read on the current build %s: workflow %s ran last on build %s and %s; "+
		"after a rollback that is a run that took a path of the newer build which %s does not have, and it waits, nothing lost: "+
		"make the newer build current again (roll forward): temporal worker deployment set-current-version --deployment-name %s --build-id %s --yes\n  (%v)",
		what, plan, current, id, ran, tasks, current, names.Deployment, ran, err)
}
