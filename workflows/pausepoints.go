package workflows

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

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
// action's hold of a point): anyone who may send an update could
// otherwise stop a plan's points. It ends with the run of protection
// it was given to: the failback's own retarget moves protection on, and
// a protection that finds the pausing action ended (completed, failed,
// terminated) resumes at its next round.

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

// actionRun is the workflow run an action's holder name (ActionHolder)
// names.
func actionRun(by string) (workflowID, runID string, ok bool) {
	rest, ok := strings.CutPrefix(by, actionHolderPrefix)
	if !ok {
		return "", "", false
	}
	i := strings.LastIndex(rest, "/")
	if i <= 0 || i == len(rest)-1 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
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
	if _, _, ok := actionRun(in.By); !ok {
		return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("%q is no action's run", in.By), ErrRecordRefused, nil)
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
	switch {
	case err == nil:
		return out, nil
	case protectionGone(err):
		return "no protection runs: no point is cut meanwhile", nil
	case strings.Contains(err.Error(), "refused"):
		return "", temporal.NewNonRetryableApplicationError(err.Error(), ErrRecordRefused, err)
	}
	return "", err
}

// ActionRuns is the activity that tells whether the action run by
// (ActionHolder) still runs.
func (s *RecordSender) ActionRuns(ctx context.Context, by string) (bool, error) {
	if s == nil || s.Client == nil {
		return false, temporal.NewNonRetryableApplicationError("this worker has no client to read a run", errNoRun, nil)
	}
	id, run, ok := actionRun(by)
	if !ok {
		return false, nil
	}
	d, err := s.Client.DescribeWorkflowExecution(ctx, id, run)
	if isNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return d.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
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
	return r.step(ctx, ref, false, func(ctx workflow.Context) (string, error) {
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
// while no pause holds, and is counted while it runs.
type pointGate struct {
	paused func() bool
	calls  int
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

// pausedText says who paused the points, for a cut cut short.
func (pp *PointsPause) text() string {
	return "protection's points were paused by " + pp.By
}

// setPauseHandler installs protection's handler of UpdatePausePoints: a
// sealed pause by an action's run, answered once gate counts no call.
func (s *ProtectState) setPauseHandler(ctx workflow.Context, ps *proofs, gate *pointGate) error {
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdatePausePoints, func(ctx workflow.Context, pp PointsPause) (string, error) {
		if err := ps.check(ctx, RecordProofCheck{Plan: ps.plan, Pause: &pp}, pp.Proof); err != nil {
			return "", fmt.Errorf("the pause is refused: %w", err)
		}
		since := workflow.Now(ctx)
		if s.PointsPaused == nil || s.PointsPaused.By != pp.By {
			s.PointsPaused = &PointsPause{By: pp.By, Since: since}
		}
		waited := gate.calls > 0
		if err := workflow.Await(ctx, func() bool { return gate.calls == 0 }); err != nil {
			return "", err
		}
		if waited {
			return fmt.Sprintf("protection cuts no point until this action ends (its calls for a point ended first, after %v)",
				workflow.Now(ctx).Sub(since).Round(time.Millisecond)), nil
		}
		return "protection cuts no point until this action ends", nil
	}, workflow.UpdateHandlerOptions{Validator: func(pp PointsPause) error {
		if _, _, ok := actionRun(pp.By); !ok {
			return fmt.Errorf("the pause is refused: %q is no action's run", pp.By)
		}
		return nil
	}})
}

// resumePoints ends a pause whose action no longer runs, and tells
// whether the points are still paused.
func (s *ProtectState) resumePoints(ctx workflow.Context) bool {
	pp := s.PointsPaused
	if pp == nil {
		return false
	}
	var rs *RecordSender
	var runs bool
	o := workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 2, NonRetryableErrorTypes: []string{errNoRun}}}
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, o), rs.ActionRuns, pp.By).Get(ctx, &runs); err != nil {
		// Not known: still paused, asked again next round.
		workflow.GetLogger(ctx).Warn("protection could not tell whether the action that paused its points runs", "by", pp.By, "error", err)
		return true
	}
	if runs {
		return true
	}
	workflow.GetLogger(ctx).Info("protection's points resume: the action that paused them ended", "by", pp.By)
	s.PointsPaused = nil
	return false
}
