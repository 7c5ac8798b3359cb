package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/plans"
)

// A failback demotes the primary's copies and resyncs them, while the
// plan's protection may be cutting a point at that same primary (cut:
// primary): a snapshot, a copy made of it, the copy's replication
// enabled. On real Ceph a snapshot begun before the demotion runs on
// through it, and the storage's answers to the resync that follows are
// no longer to be trusted. So before it demotes, a failback pauses
// protection's points (UpdatePausePoints): protection starts no storage
// call for its points from then on (no cut, no copy, no enable, no
// prune), cuts short a cut under way between two calls, and answers
// once every call it had under way has ended. Replication is still
// polled: a poll only reads.
//
// The pause is the action's, sealed by the worker that runs it (as an
// action's hold of a point), and names a run of the plan's action
// workflow: anyone who may send an update could otherwise stop a plan's
// points. It ends with the run of protection it was given to: the
// failback's own retarget moves protection on; and a protection that
// finds no run of the plan's action running, and the record naming its
// primary as the plan's (PauseEnded), resumes at its next round.

// UpdatePausePoints pauses a protection's points while an action runs.
const UpdatePausePoints = names.UpdatePausePoints

// KindPausePoints is the step of an action that pauses protection's
// points before it demotes.
const KindPausePoints StepKind = "pause-points"

// pausePointsVersion marks the failbacks that pause protection's points
// before they demote; a failback recorded before runs as it did.
const pausePointsVersion = "pause-points"

// PointsPause is an action's pause of protection's points.
type PointsPause struct {
	// By is the action's run (ActionHolder).
	By    string    `json:"by"`
	Since time.Time `json:"since,omitzero"`
	Proof *Proof    `json:"proof,omitempty"`
}

// pauseRun is the run of plan's action that by (ActionHolder) names, or
// an error when by names no run of the plan's action workflow
// (ActionID): only a failback pauses, and a failback runs under that id,
// on its own or as a site action's child.
func pauseRun(plan, by string) (runID string, err error) {
	rest, ok := strings.CutPrefix(by, actionHolderPrefix+ActionID(plan)+"/")
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("the pause is refused: %q is no run of plan %q's action (%s)", by, plan, ActionID(plan)), ErrRecordRefused, nil)
	}
	return rest, nil
}

// SealPauseAt seals an action's pause of plan's points as made at now.
func (s *RecordSender) SealPauseAt(plan string, pp PointsPause, now time.Time) (PointsPause, error) {
	pp.Proof = nil
	p, err := s.proof("points pause", plan, now, pp)
	pp.Proof = p
	return pp, err
}

// PausePointsInput names the plan whose protection's points an action
// (By, ActionHolder) pauses.
type PausePointsInput struct {
	Plan string `json:"plan"`
	By   string `json:"by"`
}

// PausePoints is the activity that pauses the points of plan's
// protection for an action, sealed: its answer comes once protection's
// storage calls for points have ended. No protection running is no
// point to pause.
func (s *RecordSender) PausePoints(ctx context.Context, in PausePointsInput) (string, error) {
	if s == nil || s.Client == nil {
		return "", temporal.NewNonRetryableApplicationError("this worker has no client to reach the plan's protection", errNoRun, nil)
	}
	if _, err := pauseRun(in.Plan, in.By); err != nil {
		return "", err
	}
	sealed, err := s.SealPauseAt(in.Plan, PointsPause{By: in.By}, time.Now())
	if err != nil {
		return "", err
	}
	uh, err := s.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: ProtectID(in.Plan),
		UpdateName: UpdatePausePoints, Args: []any{sealed}, WaitForStage: client.WorkflowUpdateStageCompleted})
	var out string
	if err == nil {
		err = uh.Get(ctx, &out)
	}
	var ae *temporal.ApplicationError
	switch {
	case err == nil:
		return out, nil
	case protectionGone(err):
		return "no protection runs: no point is cut meanwhile", nil
	case errors.As(err, &ae) && ae.Type() == ErrRecordRefused:
		return "", temporal.NewNonRetryableApplicationError(err.Error(), ErrRecordRefused, err)
	}
	return "", err
}

// PauseEndInput asks whether the pause of plan's points by By has
// ended: Primary is the primary protection runs from.
type PauseEndInput struct {
	Plan    string `json:"plan"`
	By      string `json:"by"`
	Primary string `json:"primary"`
}

// PauseEnded is the activity that tells why the pause of a plan's points
// ended, or "" while it holds: it ends once no run of the plan's action
// runs (the pausing run, or one that took over from it, a reset's) and
// the plan's record names protection's primary as the plan's. A
// failback that ended after it promoted the other site leaves the
// demoted one to protection only once a retarget moves protection on.
func (s *RecordSender) PauseEnded(ctx context.Context, in PauseEndInput) (string, error) {
	if s == nil || s.Client == nil {
		return "", temporal.NewNonRetryableApplicationError("this worker has no client to read a run", errNoRun, nil)
	}
	run, err := pauseRun(in.Plan, in.By)
	if err != nil {
		return "the pause names no run of the plan's action", nil
	}
	for _, r := range []string{run, ""} {
		d, err := s.Client.DescribeWorkflowExecution(ctx, ActionID(in.Plan), r)
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return "", err
		}
		if d.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return "", nil
		}
	}
	rec, err := ReadRecord(ctx, s.Client, in.Plan)
	if err != nil {
		return "", err
	}
	if rec != nil && rec.Primary != "" && rec.Primary != in.Primary {
		return "", nil
	}
	return "the action that paused them ended, and the plan's primary is still " + in.Primary, nil
}

// pausePointsOptions bound the pause: the update is answered once
// protection's calls under way have ended, each within its own deadline.
var pausePointsOptions = workflow.ActivityOptions{
	StartToCloseTimeout:    5 * time.Minute,
	ScheduleToCloseTimeout: 10 * time.Minute,
	RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, NonRetryableErrorTypes: []string{ErrRecordRefused, errNoRun}},
}

// pausePoints is the step that pauses the points of p's protection
// before the action demotes (a plan that cuts points only; a failback
// recorded before the step runs as it did).
func pausePoints(ctx workflow.Context, r *run, p *plans.Plan) error {
	if p.Policy.PointsInTime == nil || workflow.GetVersion(ctx, pausePointsVersion, workflow.DefaultVersion, 1) < 1 {
		return nil
	}
	ref := newRef(KindPausePoints, "pause protection's points", "protection")
	// Guarded: a skip demotes beside protection's calls, which takes
	// the operator's --override.
	return r.step(ctx, ref, true, func(ctx workflow.Context) (string, error) {
		info := workflow.GetInfo(ctx)
		in := PausePointsInput{Plan: p.Metadata.Name, By: ActionHolder(info.WorkflowExecution.ID, info.WorkflowExecution.RunID)}
		var rs *RecordSender
		var out string
		err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, pausePointsOptions), rs.PausePoints, in).Get(ctx, &out)
		return out, err
	})
}

// pointGate keeps protection's storage calls for points while an action
// pauses them: a call (call) in a context that carries it starts only
// while no pause holds, and is counted while it runs. A call Temporal
// stopped waiting for (its deadline passed, or it was cancelled) may
// still run at the storage, as ceph-csi's librbd calls run to their end,
// and so may one the storage answered DEADLINE_EXCEEDED: it is taken as
// under way for as long again (busyUntil).
type pointGate struct {
	paused    func() bool
	calls     int
	busyUntil time.Time
}

// leave counts out a call that began at start and ended with err. One
// that may have left an attempt running at the storage keeps the gate
// busy for o's deadline more: Temporal stopped waiting for it (timed
// out, cancelled), the storage answered DEADLINE_EXCEEDED, or it took
// at least its deadline, so that some attempt of it did (Temporal may
// have tried it again since, and the last attempt's answer hides it).
func (g *pointGate) leave(ctx workflow.Context, o workflow.ActivityOptions, start time.Time, err error) {
	g.calls--
	now := workflow.Now(ctx)
	var ce *temporal.CanceledError
	var ae *temporal.ApplicationError
	gaveUp := now.Sub(start) >= o.StartToCloseTimeout-activities.CallGrace ||
		(err != nil && (temporal.IsTimeoutError(err) || errors.As(err, &ce) || (errors.As(err, &ae) && ae.Type() == activities.ErrDeadlineExceeded)))
	if until := now.Add(o.StartToCloseTimeout); gaveUp && until.After(g.busyUntil) {
		g.busyUntil = until
	}
}

// pointGateKey is the context key of a pointGate.
type pointGateKey struct{}

// errPointsPaused is the error type of a call for a point that a pause
// kept from starting.
const errPointsPaused = "PointsPaused"

// enter counts a call in, or refuses it while points are paused.
func (g *pointGate) enter() error {
	if g.paused() {
		return temporal.NewNonRetryableApplicationError("protection's points are paused while an action runs", errPointsPaused, nil)
	}
	g.calls++
	return nil
}

// gateOf is ctx's pointGate, if any.
func gateOf(ctx workflow.Context) *pointGate {
	g, _ := ctx.Value(pointGateKey{}).(*pointGate)
	return g
}

// pointsPaused tells whether an action paused protection's points
// (ctx carries protection's gate).
func pointsPaused(ctx workflow.Context) bool {
	g := gateOf(ctx)
	return g != nil && g.paused()
}

// text says who paused the points, for a cut cut short.
func (pp *PointsPause) text() string {
	return "protection's points were paused by " + pp.By
}

// setPauseHandler installs protection's handler of UpdatePausePoints: a
// sealed pause by a run of the plan's action, answered once gate counts
// no call and is no longer busy. pausing counts the pauses being
// answered: a run does not end, nor continue as new, under one.
func (s *ProtectState) setPauseHandler(ctx workflow.Context, ps *proofs, gate *pointGate, pausing *int) error {
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdatePausePoints, func(ctx workflow.Context, pp PointsPause) (string, error) {
		*pausing++
		defer func() { *pausing-- }()
		if err := ps.check(ctx, RecordProofCheck{Plan: ps.plan, Pause: &pp}, pp.Proof); err != nil {
			return "", temporal.NewNonRetryableApplicationError("the pause is refused: "+err.Error(), ErrRecordRefused, err)
		}
		since := workflow.Now(ctx)
		if s.PointsPaused == nil || s.PointsPaused.By != pp.By {
			s.PointsPaused = &PointsPause{By: pp.By, Since: since}
		}
		waited := gate.calls > 0
		if err := workflow.Await(ctx, func() bool { return gate.calls == 0 }); err != nil {
			return "", err
		}
		out := "protection cuts no point until this action ends"
		if waited {
			out += fmt.Sprintf(" (its calls for a point ended first, after %v)", workflow.Now(ctx).Sub(since).Round(time.Millisecond))
		}
		if d := gate.busyUntil.Sub(workflow.Now(ctx)); d > 0 {
			// A call that ended without the storage's answer may still
			// run there.
			if err := workflow.Sleep(ctx, d); err != nil {
				return "", err
			}
			out += fmt.Sprintf("; a call for a point ended without the storage's answer and may still have run there: waited %v more", d.Round(time.Millisecond))
		}
		return out, nil
	}, workflow.UpdateHandlerOptions{Validator: func(pp PointsPause) error {
		_, err := pauseRun(ps.plan, pp.By)
		return err
	}})
}

// resumePoints ends a pause whose action ended (PauseEnded), and tells
// whether the points are still paused.
func (s *ProtectState) resumePoints(ctx workflow.Context, plan string) bool {
	pp := s.PointsPaused
	if pp == nil {
		return false
	}
	var rs *RecordSender
	var why string
	o := workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 2, NonRetryableErrorTypes: []string{errNoRun}}}
	in := PauseEndInput{Plan: plan, By: pp.By, Primary: s.Primary}
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, o), rs.PauseEnded, in).Get(ctx, &why); err != nil {
		// Not known: still paused, asked again next round.
		workflow.GetLogger(ctx).Warn("protection could not tell whether the pause of its points ended", "by", pp.By, "error", err)
		return s.PointsPaused != nil
	}
	if why == "" || s.PointsPaused != pp {
		// Still paused, or paused anew meanwhile (by another run).
		return s.PointsPaused != nil
	}
	workflow.GetLogger(ctx).Info("protection's points resume", "by", pp.By, "why", why)
	s.PointsPaused = nil
	return false
}
