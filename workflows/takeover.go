package workflows

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/internal/codec"
	"github.com/drover-dr/drover/internal/names"
)

// A plan's record is its memory: the newest plan version accepted, the
// fences, the holds, the points, the volumes that stand in for the
// plan's, what it refused. Whoever may terminate, reset or delete
// workflows in the namespace can end its run; the next action then
// starts a new one. That new run takes over what the last run under the
// record's ID knew (takeOverVersion): the worker reads that run's
// history, which Temporal keeps after a terminate for the namespace's
// retention, replays it through the record's own code and takes the
// state the replay ends with, with the seals it had seen. A run is taken
// only if a Drover worker made it: a PlanRecorder on Drover's task
// queue that either continued from an earlier run (only the server
// starts those) or began with a change sealed by the worker's record
// key. The record says it was rebuilt, from which run, and what it
// passed over (PlanRecord.Rebuilt).
//
// Where runs under the record's ID are found but none of them is one a
// Drover worker made and whose history still reads (a writer's run, the
// history deleted or past the namespace's retention while the run is
// still listed, a listing that fails), or where none is left at all but
// the plan's action or protection ran to its end (which each tell the
// record), what the record knew cannot be proven (unprovenVersion): the
// record takes nothing over and refuses every plan version signed before
// it found so (ErrRecordUnproven), saying what it found and how to
// restore it: the operator signs the plan again, which approves the
// plan as it is now, and the first action with that signature restores
// the record from that version (Rebuilt.Restored names it). A plan
// that never had a run under its record's ID, nor an action or a
// protection that ended, starts empty: a new plan. Once the retention
// has passed over every run of the record and of the plan's actions and
// protection, or they were all deleted, nothing is left to tell the
// plan from a new one.

// takeOverVersion marks a record that takes over the last run under its
// ID when it starts anew.
const takeOverVersion = "record-take-over"

// unprovenVersion marks a record that refuses to start from empty where
// earlier runs were found and none could be taken over.
const unprovenVersion = "record-refuses-unproven"

// ErrRecordUnproven ends an action whose plan's record found nothing it
// could trust to take over: the plan must be signed again.
const ErrRecordUnproven = "RecordUnproven"

// QueryRecordSeals answers the seals a record has taken within the
// seals' window, for a new run that takes it over.
const QueryRecordSeals = "drover-record-seals"

// Rebuilt says where a record's state came from when it started anew.
type Rebuilt struct {
	// From is the run taken over (empty when none was), Status how it
	// ended and Closed when.
	From   string    `json:"from,omitempty"`
	Status string    `json:"status,omitempty"`
	Closed time.Time `json:"closed,omitzero"`
	At     time.Time `json:"at"`
	// Note says what was passed over or could not be read.
	Note string `json:"note,omitempty"`
	// Unproven: earlier runs were found and none could be taken over
	// (Note says what was found): the record refuses every plan version
	// signed before At, until one signed after restores it (Restored,
	// the version that did).
	Unproven bool         `json:"unproven,omitempty"`
	Restored *PlanVersion `json:"restored,omitempty"`
}

// TakeOverInput names the record and the run that takes it over.
type TakeOverInput struct {
	Plan  string `json:"plan"`
	RunID string `json:"runId"`
}

// TakenOver is what the last run under a record's ID knew, when a
// Drover worker made it.
type TakenOver struct {
	Record *PlanRecord `json:"record,omitempty"`
	Seen   []seenSeal  `json:"seen,omitempty"`
	From   string      `json:"from,omitempty"`
	Status string      `json:"status,omitempty"`
	Closed time.Time   `json:"closed,omitzero"`
	Note   string      `json:"note,omitempty"`
	// Unproven: earlier runs were found, and none a Drover worker made
	// could be read (Note says what was found).
	Unproven bool `json:"unproven,omitempty"`
}

// takeOverOptions bound the look at the earlier runs: a history read and
// a replay.
var takeOverOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3},
}

// takeOver is a new record run's take-over of the last run under its ID;
// it returns the record to start from (r itself when nothing is taken).
func takeOver(ctx workflow.Context, r PlanRecord, ps *proofs) PlanRecord {
	info := workflow.GetInfo(ctx)
	var rs *RecordSender
	var got TakenOver
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, takeOverOptions), rs.TakeOverRecord,
		TakeOverInput{Plan: r.Plan, RunID: info.WorkflowExecution.RunID}).Get(ctx, &got)
	now := workflow.Now(ctx)
	refuses := workflow.GetVersion(ctx, unprovenVersion, workflow.DefaultVersion, 1) >= 1
	switch {
	case err != nil && refuses:
		r.Rebuilt = &Rebuilt{At: now, Unproven: true, Note: "the earlier runs under the record's ID could not be read (" + ErrorText(err) + ")"}
	case err != nil:
		r.Rebuilt = &Rebuilt{At: now, Note: "the earlier runs under the record's ID could not be read (" + ErrorText(err) + "): started empty"}
	case got.Record != nil:
		prev := got.Record.Rebuilt
		r = *got.Record
		r.Rebuilt = &Rebuilt{From: got.From, Status: got.Status, Closed: got.Closed, At: now, Note: got.Note}
		if refuses && prev != nil && prev.Unproven {
			// The run taken over had not been restored: neither is this
			// one, from the time that one found so.
			r.Rebuilt.Unproven, r.Rebuilt.At = true, prev.At
			r.Rebuilt.Note = joinNotes(got.Note, "the run taken over had found nothing to trust: "+prev.Note)
		}
		ps.seen = got.Seen
		if r.Fences == nil {
			r.Fences = []FenceEntry{}
		}
	case got.Note != "":
		r.Rebuilt = &Rebuilt{At: now, Note: got.Note, Unproven: refuses && got.Unproven}
	}
	if r.Rebuilt != nil {
		workflow.GetLogger(ctx).Warn("the plan's record started anew", "plan", r.Plan, "from", r.Rebuilt.From, "note", r.Rebuilt.Note)
	}
	return r
}

// TakeOverRecord finds the last run under the plan's record ID, other
// than in.RunID, that a Drover worker made, and replays its history to
// the state it ended with. Nothing found is no error: a new plan's
// record has no earlier run.
func (s *RecordSender) TakeOverRecord(ctx context.Context, in TakeOverInput) (TakenOver, error) {
	if s == nil || s.Client == nil {
		return TakenOver{}, temporal.NewNonRetryableApplicationError("this worker has no client to read the record's earlier runs", "NoRecordClient", nil)
	}
	got, err := s.lastDroversRun(ctx, in, false)
	if err != nil || got.Record != nil || got.Note != "" {
		return got, err
	}
	// No run under the record's ID: a new plan, unless the plan's action
	// or protection ran to its end, each of which told a record.
	res, err := s.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{PageSize: 1, Query: fmt.Sprintf(
		"(WorkflowId = '%s' OR WorkflowId = '%s') AND (ExecutionStatus = 'Completed' OR ExecutionStatus = 'ContinuedAsNew')",
		names.ActionID(in.Plan), names.ProtectID(in.Plan))})
	if err != nil {
		return TakenOver{}, fmt.Errorf("list the plan's ended actions: %w", err)
	}
	if xs := res.GetExecutions(); len(xs) > 0 {
		x := xs[0]
		return TakenOver{Unproven: true, Note: fmt.Sprintf(
			"no run is left under the record's ID, yet the plan's %s %s (run %s) ended at %s after telling its record: the record's runs were deleted, or outlived the namespace's retention",
			x.GetType().GetName(), x.GetExecution().GetWorkflowId(), x.GetExecution().GetRunId(), x.GetCloseTime().AsTime().UTC().Format(time.RFC3339))}, nil
	}
	return TakenOver{}, nil
}

// KnownVersion answers what the newest run under the plan's record ID
// that a Drover worker made, running or not, had accepted as the plan's
// newest version, for a failover that goes on without the record's
// answer (recordlater.go).
func (s *RecordSender) KnownVersion(ctx context.Context, plan string) (TakenOver, error) {
	if s == nil || s.Client == nil {
		return TakenOver{}, temporal.NewNonRetryableApplicationError("this worker has no client to read the record's runs", "NoRecordClient", nil)
	}
	got, err := s.lastDroversRun(ctx, TakeOverInput{Plan: plan}, true)
	if err != nil || got.Record == nil {
		return got, err
	}
	got.Record = &PlanRecord{Plan: plan, Version: got.Record.Version, Rebuilt: got.Record.Rebuilt}
	got.Seen = nil
	return got, nil
}

// lastDroversRun replays the newest run under the plan's record ID,
// other than in.RunID, that a Drover worker made (with running, the run
// that runs too): nothing when there is no run at all, a note of what
// was passed over when none is one.
func (s *RecordSender) lastDroversRun(ctx context.Context, in TakeOverInput, running bool) (TakenOver, error) {
	id := RecordID(in.Plan)
	query := fmt.Sprintf("WorkflowId = '%s' AND ExecutionStatus != 'Running' AND ExecutionStatus != 'ContinuedAsNew'", id)
	if running {
		query = fmt.Sprintf("WorkflowId = '%s' AND ExecutionStatus != 'ContinuedAsNew'", id)
	}
	var runs []*workflowservice.ListWorkflowExecutionsResponse
	var token []byte
	for range 10 {
		res, err := s.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
		if err != nil {
			return TakenOver{}, fmt.Errorf("list the earlier runs of %s: %w", id, err)
		}
		runs = append(runs, res)
		if token = res.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	var passed []string
	for _, page := range runs {
		for _, x := range page.GetExecutions() {
			run := x.GetExecution().GetRunId()
			if run == in.RunID {
				continue
			}
			history, why, err := s.droversRun(ctx, in.Plan, id, run, x.GetType().GetName(), x.GetTaskQueue())
			if err != nil {
				return TakenOver{}, err
			}
			if why != "" {
				passed = append(passed, fmt.Sprintf("run %s (%s)", run, why))
				continue
			}
			rec, seen, err := replayRecord(history)
			if err != nil {
				passed = append(passed, fmt.Sprintf("run %s (its history does not replay: %v)", run, err))
				continue
			}
			note := ""
			if len(passed) > 0 {
				note = "passed over " + strings.Join(passed, "; ")
			}
			return TakenOver{Record: rec, Seen: seen, From: run, Status: statusWord(x.GetStatus()), Closed: x.GetCloseTime().AsTime(), Note: note}, nil
		}
	}
	if len(passed) > 0 {
		return TakenOver{Note: "no earlier run a Drover worker made could be read; passed over " + strings.Join(passed, "; "), Unproven: true}, nil
	}
	return TakenOver{}, nil
}

func joinNotes(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func statusWord(s enumspb.WorkflowExecutionStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "WORKFLOW_EXECUTION_STATUS_"))
}

// droversRun reads a run's history and says why a Drover worker did not
// make it ("" when one did).
func (s *RecordSender) droversRun(ctx context.Context, plan, id, run, typ, queue string) (*historypb.History, string, error) {
	if typ != names.PlanRecorder {
		return nil, fmt.Sprintf("a %q workflow, not a %s", typ, names.PlanRecorder), nil
	}
	if queue != TaskQueue {
		return nil, fmt.Sprintf("on task queue %q, not Drover's", queue), nil
	}
	h := &historypb.History{}
	it := s.Client.GetWorkflowHistory(ctx, id, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return nil, "", fmt.Errorf("read the history of %s run %s: %w", id, run, err)
		}
		h.Events = append(h.Events, ev)
	}
	if len(h.Events) == 0 {
		return nil, "its history is gone", nil
	}
	a := h.Events[0].GetWorkflowExecutionStartedEventAttributes()
	if a == nil {
		return nil, "its history does not begin with its start", nil
	}
	if a.GetContinuedExecutionRunId() != "" {
		return h, "", nil // continued from an earlier run: the server started it
	}
	var in PlanRecordInput
	if ps := a.GetInput().GetPayloads(); len(ps) != 1 || codec.Converter().FromPayload(ps[0], &in) != nil || in.First == nil ||
		s.CheckRecordProof(ctx, RecordProofCheck{Plan: plan, Change: in.First}) != nil {
		return nil, "its start carries no change sealed by this worker's record key", nil
	}
	return h, "", nil
}

// replayRecord replays a record's history through the record's code and
// answers its state and the seals it had taken, as its queries would
// have at the end of that history.
func replayRecord(h *historypb.History) (*PlanRecord, []seenSeal, error) {
	q := &queryCatcher{handlers: map[string]any{}}
	rp, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{DataConverter: codec.Converter(), Interceptors: []interceptor.WorkerInterceptor{q}})
	if err != nil {
		return nil, nil, err
	}
	rp.RegisterWorkflowWithOptions(PlanRecorder, workflow.RegisterOptions{Name: names.PlanRecorder})
	if err := rp.ReplayWorkflowHistory(nil, h); err != nil {
		return nil, nil, err
	}
	rec, ok := q.handlers[QueryRecord].(func() (*PlanRecord, error))
	if !ok {
		return nil, nil, fmt.Errorf("the replay set no %s query", QueryRecord)
	}
	r, err := rec()
	if err != nil || r == nil {
		return nil, nil, fmt.Errorf("the replay's record: %v", err)
	}
	out := *r
	var seen []seenSeal
	if f, ok := q.handlers[QueryRecordSeals].(func() ([]seenSeal, error)); ok {
		seen, _ = f()
	}
	return &out, slices.Clone(seen), nil
}

// queryCatcher keeps the query handlers a replayed workflow sets.
type queryCatcher struct {
	interceptor.WorkerInterceptorBase
	handlers map[string]any
}

func (q *queryCatcher) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	i := &queryCatcherIn{q: q}
	i.Next = next
	return i
}

type queryCatcherIn struct {
	interceptor.WorkflowInboundInterceptorBase
	q *queryCatcher
}

func (i *queryCatcherIn) Init(out interceptor.WorkflowOutboundInterceptor) error {
	o := &queryCatcherOut{q: i.q}
	o.Next = out
	return i.Next.Init(o)
}

type queryCatcherOut struct {
	interceptor.WorkflowOutboundInterceptorBase
	q *queryCatcher
}

func (o *queryCatcherOut) SetQueryHandler(ctx workflow.Context, name string, handler any) error {
	o.q.handlers[name] = handler
	return o.Next.SetQueryHandler(ctx, name, handler)
}
