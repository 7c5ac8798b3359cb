package workflows

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/plans"
)

// Names of the queries and updates every action answers.
const (
	QueryProgress  = names.QueryProgress
	UpdateResolve  = names.UpdateResolve
	UpdateApprove  = names.UpdateApprove
	ErrAborted     = "ActionAborted"
	ErrPreflight   = "PreflightFailed"
	ErrNotFenced   = "NotFenced"
	DecisionRetry  = "retry"
	DecisionSkip   = "skip"
	DecisionAbort  = "abort"
	StatePending   = "pending"
	StateRunning   = "running"
	StateDone      = "done"
	StateFailed    = "failed"
	StateSkipped   = "skipped"
	StatePaused    = "paused"
	StateWaiting   = "waiting for approval"
	StateCompleted = "completed"
	StateAborted   = "aborted"
	// StatePartial ends a site action that left plans behind: it ran to
	// its end, but not every plan moved (SiteFailoverResult.LeftBehind).
	StatePartial = "partial"
	// StateIncomplete ends an action that ran to its end with steps the
	// operator skipped: what each left undone is its Undone.
	StateIncomplete = "incomplete"
	// ErrNotPromoted refuses to start a workload on copies its site's
	// storage does not say are primary, after a promotion was skipped.
	ErrNotPromoted = "NotPromoted"
)

// Step is one line of an action's timeline.
type Step struct {
	// ID names the step for code and tools: its kind and subjects
	// ("fence/east", "start/west/web"); Name is the display text.
	ID        string    `json:"id,omitempty"`
	Name      string    `json:"name"`
	State     string    `json:"state"`
	Attempts  int       `json:"attempts"`
	Start     time.Time `json:"start,omitzero"`
	End       time.Time `json:"end,omitzero"`
	LastError string    `json:"lastError,omitempty"`
	Output    string    `json:"output,omitempty"`
	// Retries counts the attempts of the step's calls that failed and
	// were tried again; while one is retrying, LastError holds its error
	// and Note what comes next.
	Retries int `json:"retries,omitempty"`
	// Note says what a running step is doing (a call retrying, a
	// workload not healthy yet and why).
	Note string `json:"note,omitempty"`
	// WaitsForWorker marks a running step whose call sits in a site's
	// task queue that no worker takes (the site's worker is cut off):
	// Note names the site, the queue and the workers that last polled
	// it. The step goes on by itself when a worker takes the call.
	WaitsForWorker bool `json:"waitsForWorker,omitempty"`
	// Guard marks a step that later steps rely on for safety (a fence a
	// forced promotion needs): skipping it needs an explicit override.
	Guard bool `json:"guard,omitempty"`
	// By is who approved the gate, or who decided on the paused step.
	By string `json:"by,omitempty"`
	// Decided is the operator's last decision on the paused step (retry,
	// skip or abort), DecidedAt when it came.
	Decided   string    `json:"decided,omitempty"`
	DecidedAt time.Time `json:"decidedAt,omitzero"`
	// Undone says, on a skipped step, what the skip left undone and what
	// that means (SkipMeans): the action then ends incomplete.
	Undone string `json:"undone,omitempty"`
}

// Progress is what the progress query answers and what the result holds.
type Progress struct {
	Action string    `json:"action"`
	Plan   string    `json:"plan"`
	State  string    `json:"state"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end,omitzero"`
	Steps  []*Step   `json:"steps"`
	// By is who started the action (drctl's identity, or its --by).
	By string `json:"by,omitempty"`
	// Trust says why the worker acts on the plan: the key that signed
	// it, or the warning of a worker that does not check.
	Trust string `json:"trust,omitempty"`
}

// Decision is the operator's answer to a paused step (drctl resolve).
type Decision struct {
	Step   string `json:"step"`   // the step's ID or its name
	Action string `json:"action"` // retry, skip or abort
	// Override allows skipping a guard step.
	Override bool `json:"override,omitempty"`
	// By is who decided.
	By string `json:"by,omitempty"`
}

// Approval opens an approval gate (drctl approve).
type Approval struct {
	Gate string `json:"gate"`
	By   string `json:"by,omitempty"`
}

// run is the bookkeeping of one action: its steps, the decisions waiting
// for the operator and the approval gates.
type run struct {
	plan      *plans.Plan
	progress  *Progress
	decisions map[string]Decision
	approved  map[string]bool
	approver  map[string]string
	origin    Origin
	aborted   bool
	children  int // GroupBatch children started, for their ids
	// groupAt is the position of each group of the plan indexed, by
	// name (see subPlan).
	indexed *plans.Plan
	groupAt map[string]int
	// from and to are the action's sites; recording: it is a plan's
	// action (begin), which sends what it changes to the plan's record.
	from, to string
	// signed is the plan as given (its defaults applied), which
	// protection checks the signature of again; plan is what the run
	// acts on: signed with the volumes that stand in for its own
	// (replaced.go). view is what trust read of the plan's record.
	signed    *plans.Plan
	view      RecordView
	recording bool
	aside     *aside // the sender of changes to the record
	// without says the action runs without its plan's record, by the
	// operator's override, and how; held are the changes it keeps for
	// the record until one answers (recordlater.go).
	without   string
	held      []RecordChange
	cancelled bool // the action was cancelled: it records its end regardless
	// overridden are the steps the operator retried with --override (a
	// start on copies a skipped promotion left as they were).
	overridden map[string]bool
	// unattended: nobody waits on this run (a scheduled test
	// recovery): a step that fails for good fails it, as with the
	// policy onFailure: abort, rather than pause for an operator.
	unattended bool
}

// begin checks that the worker trusts the plan (before anything else),
// checks the action's sites and starts its bookkeeping.
func begin(ctx workflow.Context, action string, p *plans.Plan, from, to string, o Origin) (*run, error) {
	note, view, err := trust(ctx, p, o)
	if err != nil {
		return nil, err
	}
	if err := checkSites(p, from, to); err != nil {
		return nil, err
	}
	r, err := newRun(ctx, action, replacedPlan(p, view.Replaced))
	if err != nil {
		return nil, err
	}
	r.signed, r.view = p, view
	r.origin, r.progress.By, r.progress.Trust = o, o.By, note
	r.from, r.to, r.recording, r.aside = from, to, true, &aside{}
	if view.Without != "" {
		r.goWithoutRecord(ctx, p, view.Without)
	}
	r.noteAction(ctx, StateRunning, "")
	return r, nil
}

func newRun(ctx workflow.Context, action string, p *plans.Plan) (*run, error) {
	r := &run{plan: p, decisions: map[string]Decision{}, approved: map[string]bool{}, approver: map[string]string{}, overridden: map[string]bool{},
		progress: &Progress{Action: action, Plan: p.Metadata.Name, State: StateRunning, Start: workflow.Now(ctx)}}
	if err := workflow.SetQueryHandler(ctx, QueryProgress, func() (*Progress, error) { return r.progress, nil }); err != nil {
		return nil, err
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateResolve, func(ctx workflow.Context, d Decision) (string, error) {
		if s := r.find(d.Step); s != nil { // the validator made sure; a replay finds it again
			r.decisions[s.Key()] = d
		}
		return fmt.Sprintf("%s of step %q accepted", d.Action, d.Step), nil
	}, workflow.UpdateHandlerOptions{Validator: r.validate})
	if err != nil {
		return nil, err
	}
	err = workflow.SetUpdateHandlerWithOptions(ctx, UpdateApprove, func(ctx workflow.Context, a Approval) (string, error) {
		r.approved[a.Gate], r.approver[a.Gate] = true, a.By
		return fmt.Sprintf("gate %s approved", a.Gate), nil
	}, workflow.UpdateHandlerOptions{Validator: func(a Approval) error {
		if s := r.find(approveStep(a.Gate).id); s == nil || s.State != StateWaiting {
			return fmt.Errorf("gate %q is not waiting for approval", a.Gate)
		}
		return nil
	}})
	return r, err
}

// validate refuses a decision that does not fit: no such paused step, an
// unknown action, or a skip of a guard step without override.
func (r *run) validate(d Decision) error {
	s := r.find(d.Step)
	switch {
	case s == nil:
		return fmt.Errorf("no step %q in this action", d.Step)
	case s.State != StatePaused:
		return fmt.Errorf("step %q is %s, not paused", d.Step, s.State)
	case d.Action != DecisionRetry && d.Action != DecisionSkip && d.Action != DecisionAbort:
		return fmt.Errorf("%q is not retry, skip or abort", d.Action)
	case d.Action == DecisionSkip && s.Guard && !d.Override:
		return fmt.Errorf("step %q guards the steps after it (a forced promotion, a demotion or a test's copies rely on it): skipping it needs --override", d.Step)
	}
	return nil
}

// find is the step of that ID or, failing that, of that name (decisions
// recorded before steps had IDs name them so).
func (r *run) find(key string) *Step {
	for _, s := range r.progress.Steps {
		if s.ID == key {
			return s
		}
	}
	for _, s := range r.progress.Steps {
		if s.Name == key {
			return s
		}
	}
	return nil
}

// Key is how to name the step to drctl resolve: its ID, or its name in
// the progress of an action from before steps had IDs.
func (s *Step) Key() string {
	if s.ID != "" {
		return s.ID
	}
	return s.Name
}

func (r *run) add(ref stepRef, guard bool) *Step {
	s := &Step{ID: ref.id, Name: ref.name, State: StatePending, Guard: guard}
	r.progress.Steps = append(r.progress.Steps, s)
	return s
}

// step runs fn as the named step. A failure that Temporal's retries did
// not cure pauses the step until the operator decides (policy pause), or
// ends the action (policy abort). It returns an error only when the
// action must end.
func (r *run) step(ctx workflow.Context, ref stepRef, guard bool, fn func(ctx workflow.Context) (string, error)) error {
	s := r.find(ref.id)
	if s == nil {
		s = r.add(ref, guard)
	}
	name := s.Key()
	s.State, s.Start = StateRunning, workflow.Now(ctx)
	ctx = workflow.WithValue(ctx, stepKey{}, s)
	ctx = workflow.WithValue(ctx, planKey{}, r.plan)
	for {
		if r.aborted {
			s.State = StateAborted
			return temporal.NewNonRetryableApplicationError("the action was aborted", ErrAborted, nil)
		}
		s.Attempts++
		out, err := fn(ctx)
		s.Output = out
		s.Note, s.WaitsForWorker = "", false
		if err == nil {
			s.State, s.End, s.LastError = StateDone, workflow.Now(ctx), ""
			return nil
		}
		s.LastError = ErrorText(err)
		tags := r.tags()
		tags["code"] = failureCode(err)
		workflow.GetMetricsHandler(ctx).WithTags(tags).Counter(MetricStepFailures).Inc(1)
		if r.plan.Policy.OnFailure == "abort" || r.unattended {
			s.State, s.End = StateFailed, workflow.Now(ctx)
			return err
		}
		s.State = StatePaused
		workflow.GetLogger(ctx).Warn("step paused for the operator", "step", s.Name, "id", s.ID, "error", s.LastError)
		if err := workflow.Await(ctx, func() bool { _, ok := r.decisions[name]; return ok || r.aborted }); err != nil {
			return err
		}
		d := r.decisions[name]
		delete(r.decisions, name)
		s.By, s.Decided, s.DecidedAt = d.By, d.Action, workflow.Now(ctx)
		switch {
		case r.aborted || d.Action == DecisionAbort:
			r.aborted = true
			s.State, s.End = StateAborted, workflow.Now(ctx)
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf("aborted by the operator at step %q: %s", s.Name, s.LastError), ErrAborted, nil)
		case d.Action == DecisionSkip:
			s.State, s.End, s.Undone = StateSkipped, workflow.Now(ctx), SkipMeans(s)
			return nil
		}
		if d.Override {
			r.overridden[s.ID] = true
		}
		s.State = StateRunning // retry
	}
}

// stepBatches adds one step per item (named by name), then runs the
// batches one after another, each batch's steps at most
// policy.parallelism at a time.
func (r *run) stepBatches(ctx workflow.Context, batches [][]string, name func(item string) stepRef, guard bool,
	fn func(ctx workflow.Context, item string) (string, error)) error {
	for _, batch := range batches {
		for _, it := range batch {
			r.add(name(it), guard)
		}
	}
	for _, batch := range batches {
		err := parallel(ctx, batch, r.plan.Policy.Parallelism, func(ctx workflow.Context, it string) error {
			return r.step(ctx, name(it), guard, func(ctx workflow.Context) (string, error) { return fn(ctx, it) })
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// gate waits for an approval when the plan asks for one at this point.
func (r *run) gate(ctx workflow.Context, gate string) error {
	if !slices.Contains(r.plan.Policy.Approvals, gate) {
		return nil
	}
	s := r.add(approveStep(gate), false)
	s.State, s.Start = StateWaiting, workflow.Now(ctx)
	if err := workflow.Await(ctx, func() bool { return r.approved[gate] }); err != nil {
		return err
	}
	s.State, s.End, s.Attempts, s.By = StateDone, workflow.Now(ctx), 1, r.approver[gate]
	return nil
}

// finish closes the timeline.
func (r *run) finish(ctx workflow.Context, err error) {
	r.progress.End = workflow.Now(ctx)
	r.progress.State = StateCompleted
	if len(Undone(r.progress)) > 0 {
		r.progress.State = StateIncomplete
	}
	if err != nil {
		r.progress.State = StateAborted
	}
	tags := r.tags()
	tags["outcome"] = r.progress.State
	workflow.GetMetricsHandler(ctx).WithTags(tags).Timer(MetricActionDuration).Record(r.progress.End.Sub(r.progress.Start))
	errText := ""
	if err != nil {
		errText = ErrorText(err)
	}
	r.noteAction(ctx, r.progress.State, errText)
	if r.without != "" {
		r.recordLater(ctx)
	}
}

// ErrorText is the most specific message of an error chain: an activity's
// or a workflow's application error, else the error itself.
func ErrorText(err error) string {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return ae.Error()
	}
	return err.Error()
}

// byPriority groups names by priority, lowest first, each batch sorted.
func byPriority[T any](items []T, prio func(T) int, name func(T) string) [][]string {
	m := map[int][]string{}
	for _, it := range items {
		m[prio(it)] = append(m[prio(it)], name(it))
	}
	keys := make([]int, 0, len(m))
	// The keys are sorted below, so the map's order never shows.
	//workflowcheck:ignore
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	out := make([][]string, 0, len(keys))
	for _, k := range keys {
		sort.Strings(m[k])
		out = append(out, m[k])
	}
	return out
}

// parallel runs fn for every name, at most limit at a time, and returns
// the first error after all have ended. The limit is the plan's
// parallelism, already defaulted; below one it runs one at a time.
func parallel(ctx workflow.Context, names []string, limit int, fn func(ctx workflow.Context, name string) error) error {
	limit = max(limit, 1)
	errs := make([]error, len(names))
	running, next, finished := 0, 0, 0
	done := workflow.NewChannel(ctx)
	for finished < len(names) {
		for running < limit && next < len(names) {
			i := next
			next++
			running++
			workflow.Go(ctx, func(ctx workflow.Context) {
				errs[i] = fn(ctx, names[i])
				done.Send(ctx, i)
			})
		}
		var i int
		done.Receive(ctx, &i)
		running--
		finished++
	}
	var first error
	for _, err := range errs {
		if err != nil {
			first = err
			break
		}
	}
	return first
}
