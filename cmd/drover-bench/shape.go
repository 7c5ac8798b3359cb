package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/workflows"
)

// A plan's shape is what its failover carried through the server in the
// measured run, read from its history and its record's: the bench's third
// floor of a site failover runs children of these shapes (the design's
// turns carrying the plans' histories), so that what is left beyond it is
// neither the turns nor the weight of what the workflows write.

// planShape is one plan's failover as the server saw it.
type planShape struct {
	Input   int         // bytes of its input
	Tasks   []taskShape // each workflow task it completed, in order
	Result  int         // bytes of its result
	Changes []int       // bytes of each signal its record took from it
}

// taskShape is what one completed workflow task wrote.
type taskShape struct {
	Markers    []int // bytes of each local activity's result, in its marker
	Activities int   // regular activities scheduled
	Timers     int   // timers started
	Cancels    int   // timers canceled
}

// payloadBytes is the size of the payloads' data.
func payloadBytes(ps *commonpb.Payloads) int {
	n := 0
	for _, p := range ps.GetPayloads() {
		n += len(p.GetData())
	}
	return n
}

// readShape reads a plan's failover run and the signals its record took
// while it ran.
func readShape(ctx context.Context, c client.Client, plan, runID string) (planShape, error) {
	var s planShape
	var start, end time.Time
	var t *taskShape
	it := c.GetWorkflowHistory(ctx, workflows.ActionID(plan), runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return s, err
		}
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			s.Input, start = payloadBytes(e.GetWorkflowExecutionStartedEventAttributes().GetInput()), e.GetEventTime().AsTime()
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			s.Tasks = append(s.Tasks, taskShape{})
			t = &s.Tasks[len(s.Tasks)-1]
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			if t != nil {
				t.Markers = append(t.Markers, payloadBytes(e.GetMarkerRecordedEventAttributes().GetDetails()["result"]))
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			if t != nil {
				t.Activities++
			}
		case enumspb.EVENT_TYPE_TIMER_STARTED:
			if t != nil {
				t.Timers++
			}
		case enumspb.EVENT_TYPE_TIMER_CANCELED:
			if t != nil {
				t.Cancels++
			}
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
			s.Result, end = payloadBytes(e.GetWorkflowExecutionCompletedEventAttributes().GetResult()), e.GetEventTime().AsTime()
		}
	}
	if len(s.Tasks) == 0 || end.IsZero() {
		return s, fmt.Errorf("the failover of %s (run %s) did not complete", plan, runID)
	}
	it = c.GetWorkflowHistory(ctx, workflows.RecordID(plan), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return s, err
		}
		at := e.GetEventTime().AsTime()
		if a := e.GetWorkflowExecutionSignaledEventAttributes(); a != nil && !at.Before(start) && !at.After(end.Add(time.Second)) {
			s.Changes = append(s.Changes, payloadBytes(a.GetInput()))
		}
	}
	return s, nil
}

// shapedChild takes a plan's failover's turns carrying what it carried:
// input pads its input to its failover's input's bytes (shapedInput);
// each of its tasks starts and cancels the timers, writes the markers
// (local activities answering as many bytes) and schedules the
// activities that task did, and the last also signals the plan's record
// stand-in with each change the record took (the last of the task's
// markers, as the worker sends them); it ends with a result of the
// failover's result's bytes.
func shapedChild(ctx workflow.Context, s planShape, input string, record string) (string, error) {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute})
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	var cancels []workflow.CancelFunc
	for i, t := range s.Tasks {
		last := i == len(s.Tasks)-1
		for range t.Timers {
			tctx, cancel := workflow.WithCancel(ctx)
			workflow.NewTimer(tctx, time.Hour)
			cancels = append(cancels, cancel)
		}
		markers := t.Markers
		var fs []workflow.Future
		if last {
			// The worker sends a change in a local activity, the last
			// markers' (as many as the changes, when there are).
			k := max(len(markers)-len(s.Changes), 0)
			for i, n := range s.Changes {
				m := 0
				if k+i < len(markers) {
					m = markers[k+i]
				}
				fs = append(fs, workflow.ExecuteLocalActivity(lctx, "Change", record, n, m))
			}
			markers = markers[:k]
		}
		for _, n := range markers {
			fs = append(fs, workflow.ExecuteLocalActivity(lctx, "Answer", n))
		}
		for _, f := range fs {
			if err := f.Get(ctx, nil); err != nil {
				return "", err
			}
		}
		for range min(t.Cancels, len(cancels)) {
			cancels[0]()
			cancels = cancels[1:]
		}
		if last {
			break
		}
		// The task ended on its activities (a task that scheduled none
		// ended another way; one activity ends it here).
		fs = fs[:0]
		for range max(t.Activities, 1) {
			fs = append(fs, workflow.ExecuteActivity(actx, "Nothing"))
		}
		for _, f := range fs {
			if err := f.Get(ctx, nil); err != nil {
				return "", err
			}
		}
	}
	return padding("r", s.Result), nil
}

// answer is a local activity's answer of n bytes, nothing for none (a
// call that answers nothing, as a promotion).
func answer(_ context.Context, n int) (any, error) { return answerOf(n), nil }

// answerOf is an answer of n bytes, or none.
func answerOf(n int) any {
	if n <= 0 {
		return nil
	}
	return padding("a", n)
}

// padding is a string whose JSON payload is n bytes (its quotes
// included), or as near as it gets.
func padding(c string, n int) string { return strings.Repeat(c, max(n-2, 0)) }

// shapedInput is a shaped child's padding: the child's input (its shape,
// its padding and its record's name) is then as many bytes as its
// plan's failover's input.
func shapedInput(s planShape, record string) string {
	rest := 0
	for _, v := range []any{s, record} {
		if b, err := json.Marshal(v); err == nil {
			rest += len(b)
		}
	}
	return padding("i", s.Input-rest)
}
