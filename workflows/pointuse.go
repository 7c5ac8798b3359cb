package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	enums "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/plans"
)

// Recovering from a point in time: an action that recovers from a point
// (drctl test-recovery --point) names a time, never snapshots: the
// worker picks the point from the plan's record, which takes only
// changes a worker sealed, so that whoever may start a workflow cannot
// have it copy, or later delete, a snapshot protection did not cut. The
// action holds the point for as long as it uses it, under its run's
// name (ActionHolder) and with the worker's seal, so that protection
// never prunes it meanwhile and no one else can release it; it releases
// the hold when it ends. The point's snapshots are protection's: the
// action deletes only the copies it made of them.

// ErrNoPoint is the error type of a recovery from a point in time that
// the plan's record has no point for.
const ErrNoPoint = "NoPoint"

// PointUse asks the worker to hold the point a run recovers from: the
// newest usable point cut at Site at or before At; or, with Release, to
// release the run's hold on Point (without Point: on the point the run
// holds, if any).
type PointUse struct {
	Plan    string    `json:"plan"`
	Site    string    `json:"site"`
	At      time.Time `json:"at,omitzero"`
	By      string    `json:"by"`
	Point   string    `json:"point,omitempty"`
	Release bool      `json:"release,omitempty"`
	// Snapshots: the run recovers from the point's snapshots at Site (a
	// test recovery), so a point whose recovery there takes its copies
	// is refused before it is held.
	Snapshots bool `json:"snapshots,omitempty"`
}

// PointNewest is the time that picks a site's newest point, whenever the
// worker picks it (drctl's --point newest): points cut between the
// command and the pick count.
var PointNewest = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// PointFor picks the point a recovery at site goes back to: the newest
// point cut at or before t that is usable there (PointInTime.UsableAt).
func PointFor(points []PointInTime, site string, t time.Time) (*PointInTime, error) {
	var pick *PointInTime
	var later, failed, pending int
	for i := range points {
		pt := &points[i]
		switch {
		case pt.Site != site && pt.CutAt != site:
		case pt.Taken.After(t):
			later++
		case pt.Pending() && !pt.UsableAt(site):
			pending++
		case !pt.UsableAt(site):
			failed++
		case pick == nil || pt.Taken.After(pick.Taken):
			pick = pt
		}
	}
	if pick != nil {
		return pick, nil
	}
	why := fmt.Sprintf("the plan's record has no point in time at %s cut at or before %s", site, t.UTC().Format(time.RFC3339))
	if !t.Before(PointNewest) {
		why = fmt.Sprintf("the plan's record has no point in time at %s", site)
	}
	if later+failed > 0 {
		why += fmt.Sprintf(" (%d later, %d whose cut failed)", later, failed)
	}
	if pending > 0 {
		why += fmt.Sprintf(" (%d whose copies have not synced to %s yet)", pending, site)
	}
	return nil, temporal.NewNonRetryableApplicationError(why+": drctl points lists them", ErrNoPoint, nil)
}

// HoldPoint is the activity that holds (or releases) the point a run
// recovers from, and returns it as the plan's record or protection has
// it: through the plan's protection when it runs (an update, sealed),
// else in the plan's record (a sealed change), which a protection
// started later takes the hold from.
func (s *RecordSender) HoldPoint(ctx context.Context, in PointUse) (PointInTime, error) {
	if s == nil || s.Client == nil {
		return PointInTime{}, temporal.NewNonRetryableApplicationError("this worker has no client to read the plan's record", errNoRun, nil)
	}
	if !strings.HasPrefix(in.By, actionHolderPrefix) {
		return PointInTime{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%q is no action's hold", in.By), ErrNoPoint, nil)
	}
	for try := 1; ; try++ {
		pt, err := s.holdPoint(ctx, in)
		// A point picked a moment before protection pruned it (the
		// picked one was not the newest any more): the pick again finds
		// what the time picks now.
		if err != nil && !in.Release && try < 3 && (strings.Contains(err.Error(), "being pruned") || strings.Contains(err.Error(), "no point \"")) {
			continue
		}
		return pt, err
	}
}

// holdPoint is one pick and hold (or release) of HoldPoint.
func (s *RecordSender) holdPoint(ctx context.Context, in PointUse) (PointInTime, error) {
	// A running protection's own state is the newest (the record takes
	// its changes a moment later); else the record's.
	var points []PointInTime
	running, err := s.protectionRuns(ctx, in.Plan)
	if err != nil {
		return PointInTime{}, err
	}
	if running {
		ps, err := ReadProtect(ctx, s.Client, in.Plan)
		if err != nil {
			return PointInTime{}, err
		}
		points = ps.Points
	} else {
		rec, err := ReadRecord(ctx, s.Client, in.Plan)
		if err != nil {
			return PointInTime{}, err
		}
		if rec != nil {
			points = rec.Points
		}
	}
	var pt *PointInTime
	switch {
	case in.Release && in.Point != "":
		if i := slices.IndexFunc(points, func(x PointInTime) bool { return x.ID == in.Point }); i >= 0 {
			pt = &points[i]
		}
	case in.Release:
		// The run does not know which point it held (its answer was
		// lost): the one it holds. None: it took no hold (refused
		// before it, say), and there is nothing to release or to say.
		i := slices.IndexFunc(points, func(x PointInTime) bool { return slices.Contains(x.Held, in.By) })
		if i < 0 {
			return PointInTime{}, nil
		}
		pt = &points[i]
	default:
		if pt, err = PointFor(points, in.Site, in.At); err != nil {
			return PointInTime{}, err
		}
		if in.Snapshots && pt.ByCopies(in.Site) {
			return PointInTime{}, byCopiesRefusal(*pt, in.Site)
		}
	}
	h := PointHold{By: in.By, Release: in.Release, Point: in.Point}
	if pt != nil {
		h.Point = pt.ID
	}
	sealed, err := s.SealHoldAt(in.Plan, h, time.Now())
	if err != nil {
		return PointInTime{}, err
	}
	uh, err := s.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: ProtectID(in.Plan),
		UpdateName: UpdateHoldPoint, Args: []any{sealed}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err == nil {
		var got *PointInTime
		if err = uh.Get(ctx, &got); err == nil && got != nil {
			return *got, nil
		}
	}
	if err != nil && !protectionGone(err) {
		if in.Release && strings.Contains(err.Error(), "no point") {
			// Protection no longer has the point: nothing holds it.
			return PointInTime{ID: in.Point}, nil
		}
		return PointInTime{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("the plan's protection refused the hold of point %s: %v", h.Point, err), ErrNoPoint, err)
	}
	// No protection runs: the hold goes to the plan's record.
	if pt == nil {
		return PointInTime{ID: in.Point}, nil
	}
	held := *pt
	if in.Release {
		held.Held = slices.DeleteFunc(slices.Clone(pt.Held), func(b string) bool { return b == in.By })
	} else if !slices.Contains(pt.Held, in.By) {
		held.Held = append(slices.Clone(pt.Held), in.By)
	}
	if err := s.SendRecordChange(ctx, RecordSend{Plan: in.Plan, Change: RecordChange{At: time.Now(), Point: &held}}); err != nil {
		return PointInTime{}, err
	}
	return held, nil
}

// protectionRuns tells whether the plan's protection runs.
func (s *RecordSender) protectionRuns(ctx context.Context, plan string) (bool, error) {
	d, err := s.Client.DescribeWorkflowExecution(ctx, ProtectID(plan), "")
	if isNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return d.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
}

// protectionGone tells an update that found no running protection.
func protectionGone(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf) || strings.Contains(err.Error(), "workflow execution already completed")
}

// pointUseOptions bound the hold of a point: a read of the record and an
// update of protection, which answers once the hold is in its state.
var pointUseOptions = workflow.ActivityOptions{
	StartToCloseTimeout:    30 * time.Second,
	ScheduleToCloseTimeout: 5 * time.Minute,
	RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, NonRetryableErrorTypes: []string{ErrNoPoint, errNoRun}},
}

// usePoint holds, or releases, the point a run recovers from.
func usePoint(ctx workflow.Context, in PointUse) (PointInTime, error) {
	var rs *RecordSender
	var pt PointInTime
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, pointUseOptions), rs.HoldPoint, in).Get(ctx, &pt)
	return pt, err
}

// pointText says what a point holds, for a step's output.
func pointText(pt PointInTime) string {
	out := fmt.Sprintf("point %s, cut at %s", pt.ID, pt.Taken.UTC().Format(time.RFC3339))
	if !pt.LastSync.IsZero() {
		out += fmt.Sprintf(", holds every write up to %s (lag %v)", pt.LastSync.UTC().Format(time.RFC3339), pt.Lag.Round(time.Second))
	}
	if pt.NotInSync != "" {
		out += "; not in sync when cut: " + pt.NotInSync
	}
	return out
}

// holdPointFor holds the point a test recovery at site recovers from,
// the newest at or before t, and takes each volume's snapshot from it
// into res: every group of the plan must have its part in the point.
func holdPointFor(ctx workflow.Context, p *plans.Plan, site string, t time.Time, res *TestRecoveryResult) (*PointInTime, error) {
	info := workflow.GetInfo(ctx).WorkflowExecution
	res.PointAt = t
	pt, err := usePoint(ctx, PointUse{Plan: p.Metadata.Name, Site: site, At: t, By: ActionHolder(info.ID, info.RunID), Snapshots: true})
	if err != nil {
		return nil, err
	}
	res.Point = &pt
	if pt.ByCopies(site) {
		// The pick refuses it before the hold; a worker that did not
		// know to (an older one's answer, taken on replay) held it.
		return nil, byCopiesRefusal(pt, site)
	}
	if err := eachPointSnapshot(p, pt, site, func(group string, sn PointSnapshot) {
		c := &res.Copies[res.copyIndex(group, sn.Volume)]
		c.Snapshot, c.Point, c.Size = sn.ID, pt.ID, sn.Size
	}); err != nil {
		return nil, err
	}
	return &pt, nil
}

// byCopiesRefusal refuses a test recovery at site from a point whose
// copies there are replicas, which a test recovery never touches: its
// snapshots are at the site it was cut at.
func byCopiesRefusal(pt PointInTime, site string) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf("point %s was cut at %s (policy.pointsInTime.cut: primary): a test recovery from it runs there, from its snapshots; at %s its copies are replicas", pt.ID, pt.CutAt, site), ErrNoPoint, nil)
}

// eachPointSnapshot calls fn with each snapshot of the point, group by
// group of the plan: every group of the plan must have its part in the
// point, every snapshot an id, and every copy too when a recovery at
// site uses the point's copies.
func eachPointSnapshot(p *plans.Plan, pt PointInTime, site string, fn func(group string, sn PointSnapshot)) error {
	for _, g := range p.VolumeGroups {
		i := slices.IndexFunc(pt.Groups, func(pg PointGroup) bool { return pg.Group == g.Name })
		if i < 0 {
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf("point %s has no snapshots of group %s (the plan changed since it was cut): pick another point", pt.ID, g.Name), ErrNoPoint, nil)
		}
		for _, sn := range pt.Groups[i].Snapshots {
			if sn.ID == "" {
				return temporal.NewNonRetryableApplicationError(fmt.Sprintf("point %s has no snapshot of volume %s", pt.ID, sn.Volume), ErrNoPoint, nil)
			}
			if sn.Copy == "" && pt.ByCopies(site) {
				return temporal.NewNonRetryableApplicationError(fmt.Sprintf("point %s has no copy of volume %s", pt.ID, sn.Volume), ErrNoPoint, nil)
			}
			fn(g.Name, sn)
		}
	}
	return nil
}

// releasePoint releases the hold of the run that made res on its point
// in time, if it took one.
func releasePoint(ctx workflow.Context, plan, site string, run workflow.Execution, res *TestRecoveryResult) (string, error) {
	if res.Point == nil && res.PointAt.IsZero() {
		return "", nil
	}
	in := PointUse{Plan: plan, Site: site, At: res.PointAt, By: ActionHolder(run.ID, run.RunID), Release: true}
	if res.Point != nil {
		in.Point = res.Point.ID
	}
	pt, err := usePoint(ctx, in)
	if err != nil {
		return "", fmt.Errorf("release the point in time: %w", err)
	}
	if pt.ID == "" {
		return "", nil
	}
	return fmt.Sprintf("; point %s released (its snapshots are protection's: kept)", pt.ID), nil
}
