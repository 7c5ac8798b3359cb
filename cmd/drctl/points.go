package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/workflows"
)

// pointsList is drctl points' answer: the points in time the plan's
// record holds, oldest first, and the latest pruned.
type pointsList struct {
	Plan        string                  `json:"plan"`
	Points      []workflows.PointInTime `json:"points"`
	Pruned      []workflows.PrunedPoint `json:"pruned"`
	PrunedCount int                     `json:"prunedCount"`
	// Paused is the pause of the points by a failback under way, as the
	// running protection has it.
	Paused *workflows.PointsPause `json:"paused,omitempty"`
	// NotCut says why no point is cut now, when none is.
	NotCut *notCut `json:"notCut,omitempty"`
}

// notCut is why protection cuts no point now: the plan is unprotected
// (a failover lost its replica's site), a failback paused the points,
// or protection does not run.
type notCut struct {
	Reason string    `json:"reason"` // unprotected, paused, stopped
	Since  time.Time `json:"since,omitzero"`
	Lost   string    `json:"lost,omitempty"`
	By     string    `json:"by,omitempty"`
}

// whyNotCut says why no point is cut now: running tells whether the
// plan's protection runs, ps is its state (nil when it did not answer:
// the plan's record says then); nil while points are cut.
func whyNotCut(rec *workflows.PlanRecord, ps *workflows.ProtectState, running bool) *notCut {
	var u *workflows.Unprotection
	switch {
	case ps != nil:
		u = ps.Unprotected
	case rec != nil && rec.Protection != nil:
		u = rec.Protection.Unprotected
	}
	switch {
	case !running:
		return &notCut{Reason: "stopped"}
	case u != nil:
		return &notCut{Reason: "unprotected", Since: u.Since, Lost: u.Lost, By: u.By}
	case ps != nil && ps.PointsPaused != nil:
		return &notCut{Reason: "paused", Since: ps.PointsPaused.Since, By: ps.PointsPaused.By}
	}
	return nil
}

// text says why no point is cut, at now, and what resumes the cuts.
func (n *notCut) text(plan string, now time.Time) string {
	ago := func() string {
		return fmt.Sprintf("%s, %s ago", n.Since.Local().Format(time.DateTime), max(now.Sub(n.Since), 0).Round(time.Second))
	}
	switch n.Reason {
	case "unprotected":
		return fmt.Sprintf("no points are cut: the plan has no replica since %s (%s was lost); drctl reprotect %s once %s is back", ago(), n.Lost, plan, n.Lost)
	case "paused":
		return fmt.Sprintf("no points are cut: %s paused them at %s while it runs", n.By, ago())
	}
	return "no points are cut: the plan's protection is not running; drctl protect start cuts them again"
}

func (a *app) pointsCommand() *cobra.Command {
	var hold, release string
	cmd := &cobra.Command{
		Use:   "points PLAN [--hold POINT | --release POINT]",
		Short: "The plan's points in time (policy.pointsInTime): each with its site, when it was cut, the last sync it holds, and whether it is held",
		Long: `The plan's points in time (policy.pointsInTime), oldest first: each
with its site, when it was cut, the last sync it holds and the lag,
whether its replicas were in sync, and who holds it (and why a point
the policy would prune is kept); then why no point is cut now, if none
is, and the latest pruned and why.

--hold POINT holds a point (its id, or newest) for you (--by, else
user@host): protection never prunes a held point. --release POINT ends
your hold (exit 2, nothing released, when you hold none). Both go to the plan's running protection, which alone prunes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case hold != "" && release != "":
				return badInput("give --hold or --release, not both")
			case hold != "":
				return a.holdPoint(cmd.Context(), planName(args[0]), hold, false)
			case release != "":
				return a.holdPoint(cmd.Context(), planName(args[0]), release, true)
			}
			return a.points(cmd.Context(), planName(args[0]))
		},
	}
	cmd.Flags().StringVar(&hold, "hold", "", "hold this point (its id, or newest): protection does not prune it until released")
	cmd.Flags().StringVar(&release, "release", "", "release your hold of this point")
	return cmd
}

// holdPoint holds (or releases) a point for the operator, through the
// plan's running protection.
func (a *app) holdPoint(ctx context.Context, plan, point string, release bool) error {
	by := a.identity()
	if strings.HasPrefix(by, "run ") {
		return badInput("--by %q: a name beginning with \"run \" is an action's hold", by)
	}
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	if strings.EqualFold(point, "newest") {
		ps, err := workflows.ReadProtect(ctx, c, plan)
		if err != nil {
			return badInput("the protection of plan %q is not running: nothing prunes its points now, hold one once it runs (drctl protect start)", plan)
		}
		pt := workflows.NewestPoint(ps.Points)
		if pt == nil {
			return badInput("plan %q has no point in time to hold yet (drctl points %s)", plan, plan)
		}
		point = pt.ID
	}
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: workflows.ProtectID(plan), UpdateName: workflows.UpdateHoldPoint,
		Args: []any{workflows.PointHold{Point: point, By: by, Release: release}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil && (strings.Contains(err.Error(), "already completed") || strings.Contains(err.Error(), "not found")) {
		return badInput("the protection of plan %q is not running: nothing prunes its points now, hold one once it runs (drctl protect start)", plan)
	}
	var pt workflows.PointInTime
	if err == nil {
		err = h.Get(ctx, &pt)
	}
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.Type() == workflows.ErrNotHeld {
		// Someone who holds nothing released nothing: bad input, as a
		// point of another's.
		return badInput("plan %q: %s", plan, ae.Message())
	}
	if err != nil {
		return failed("%s", workflows.ErrorText(err))
	}
	if a.json() {
		writeJSON(a.stdout, pt)
		return nil
	}
	verb := "held by " + by
	if release {
		verb = by + "'s hold released"
	}
	holders := strings.Join(pt.Held, ", ")
	if holders == "" {
		holders = "nobody: protection prunes it as the policy says"
	}
	fmt.Fprintf(a.stdout, "plan %q: point %s %s; held by %s\n", plan, pt.ID, verb, holders)
	return nil
}

func (a *app) points(ctx context.Context, plan string) error {
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	rec, err := a.readRecord(ctx, c, plan)
	if err != nil {
		return err
	}
	if rec == nil {
		return badInput("plan %q has no record yet: no action or protection of it has run", plan)
	}
	out := pointsList{Plan: plan, Points: rec.Points, Pruned: rec.Pruned, PrunedCount: rec.PrunedCount}
	if out.Points == nil {
		out.Points = []workflows.PointInTime{}
	}
	if out.Pruned == nil {
		out.Pruned = []workflows.PrunedPoint{}
	}
	// A stopped protection still answers queries, with its last state.
	running := rec.Protection != nil && rec.Protection.Running
	if d, err := c.DescribeWorkflowExecution(ctx, workflows.ProtectID(plan), ""); err == nil {
		running = d.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING
	} else if isNotFound(err) {
		running = false
	}
	var ps *workflows.ProtectState
	if running {
		if got, err := glanceProtect(ctx, c, plan); err == nil {
			ps = got
		}
	}
	if ps != nil && ps.PointsPaused != nil {
		out.Paused = &workflows.PointsPause{By: ps.PointsPaused.By, Since: ps.PointsPaused.Since}
	}
	out.NotCut = whyNotCut(rec, ps, running)
	if a.json() {
		writeJSON(a.stdout, out)
		return nil
	}
	return renderPoints(a.stdout, out, time.Now())
}

// renderPoints writes the points as a table, newest last, then what was
// pruned.
func renderPoints(w io.Writer, l pointsList, now time.Time) error {
	if len(l.Points) == 0 {
		fmt.Fprintf(w, "plan %s has no points in time (a plan keeps them with policy.pointsInTime, while its protection runs)\n", l.Plan)
	} else {
		fmt.Fprintf(w, "plan %s: %d point(s) in time\n", l.Plan, len(l.Points))
		t := newTable(w, "POINT", "SITE", "CUT", "HOLDS UP TO (LAST SYNC)", "LAG", "REPLICAS", "HELD BY")
		for _, pt := range l.Points {
			synced, lag := "not known", "-"
			if !pt.LastSync.IsZero() {
				synced, lag = pt.LastSync.Local().Format(time.DateTime), pt.Lag.Round(time.Second).String()
			}
			// The reasons, which can be long errors, go below the table.
			state := "in sync"
			switch {
			case pt.Pending():
				state = "COPIES SHIPPING (below)"
			case !pt.Usable():
				state = "FAILED (below)"
			case pt.NotInSync != "":
				var groups []string
				for _, g := range pt.Groups {
					if g.NotInSync != "" {
						groups = append(groups, g.Group)
					}
				}
				state = "NOT IN SYNC: " + strings.Join(groups, ", ")
			}
			held := strings.Join(pt.Held, ", ")
			if held == "" {
				held = "-"
			}
			site := pt.Site
			if pt.CutAt != "" {
				site += " (cut at " + pt.CutAt + ")"
			}
			t.row(pt.ID, site, fmt.Sprintf("%s (%s ago)", pt.Taken.Local().Format(time.DateTime), max(now.Sub(pt.Taken), 0).Round(time.Second)), synced, lag, state, held)
		}
		if err := t.flush(); err != nil {
			return err
		}
		for _, pt := range l.Points {
			switch {
			case pt.Pending():
				fmt.Fprintf(w, "  %s: cut at %s; its copies have not all synced to %s yet: usable there once they have (at %s now, from its snapshots)\n", pt.ID, pt.CutAt, pt.Site, pt.CutAt)
			case !pt.Usable():
				fmt.Fprintf(w, "  %s: its cut failed: %s\n", pt.ID, oneLine(pt.Error))
			case pt.NotInSync != "":
				fmt.Fprintf(w, "  %s: not in sync when cut: %s\n", pt.ID, oneLine(pt.NotInSync))
			}
			if pt.Kept != "" {
				fmt.Fprintf(w, "  %s: %s\n", pt.ID, pt.Kept)
			}
			if pt.PruneError != "" {
				fmt.Fprintf(w, "  %s: its deletion failed, tried again at the next cut: %s\n", pt.ID, oneLine(pt.PruneError))
			}
		}
	}
	if n := l.NotCut; n != nil {
		fmt.Fprintln(w, n.text(l.Plan, now))
	}
	renderPruned(w, l.Pruned, l.PrunedCount, "")
	return nil
}

// renderPruned writes the latest pruned points, indented by indent.
func renderPruned(w io.Writer, pruned []workflows.PrunedPoint, count int, indent string) {
	if count == 0 {
		return
	}
	fmt.Fprintf(w, "%spruned: %d point(s) in all; the latest:\n", indent, count)
	for _, x := range pruned[max(len(pruned)-5, 0):] {
		fmt.Fprintf(w, "%s  %s at %s, cut %s, pruned %s: %s\n", indent, x.ID, x.Site, x.Taken.Local().Format(time.DateTime), x.Pruned.Local().Format(time.DateTime), x.Why)
	}
}

// renderRecordPoints writes the record's points in time in a line or
// two of drctl status: how many, the newest, what was pruned.
func renderRecordPoints(w io.Writer, r *workflows.PlanRecord, now time.Time) {
	if len(r.Points) == 0 && r.PrunedCount == 0 {
		return
	}
	line := fmt.Sprintf("  points in time: %d", len(r.Points))
	if pt := workflows.NewestPoint(r.Points); pt != nil {
		line += fmt.Sprintf(", the newest %s at %s, cut %s ago", pt.ID, pt.Site, max(now.Sub(pt.Taken), 0).Round(time.Second))
		if pt.NotInSync != "" {
			line += " (NOT IN SYNC)"
		}
	}
	held := 0
	for _, pt := range r.Points {
		if len(pt.Held) > 0 {
			held++
		}
	}
	if held > 0 {
		line += fmt.Sprintf(", %d held", held)
	}
	fmt.Fprintf(w, "%s (drctl points %s)\n", line, r.Plan)
	renderPruned(w, r.Pruned, r.PrunedCount, "  ")
}

// pointIDLayout is the layout of a point's id (workflows.PointInTime.ID).
const pointIDLayout = "20060102T150405Z"

// parsePointTime reads --point: a time (RFC 3339), a point's id as
// drctl points lists it (20261127T101500Z), or "newest". A recovery
// goes back to the newest point cut at or before it.
func parsePointTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "newest") {
		// The newest when the worker picks it, not when drctl ran.
		return workflows.PointNewest, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, strings.ToUpper(s)); err == nil {
		return t, nil
	}
	if t, err := time.Parse(pointIDLayout, strings.ToUpper(s)); err == nil {
		// A point's id is its cut's time to the second, the cut itself
		// a fraction later: the id names the point cut within that
		// second (points are at least a second apart).
		return t.Add(time.Second - time.Nanosecond), nil
	}
	return time.Time{}, badInput("--point %q: give a time (2026-11-27T10:15:00Z), a point's id as drctl points lists it (20261127T101500Z), or newest", s)
}
