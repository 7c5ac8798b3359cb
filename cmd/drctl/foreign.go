package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/workflows"
)

// A Drover workflow id (a plan's test recovery, its action) is only a
// name: whoever may start workflows in the namespace can start any
// workflow under it, of any type and on a task queue no worker polls,
// and so hold it. drctl checks what runs at an id before it waits on it,
// and names a workflow that is not Drover's instead of hanging on it.

// droverTypesAt are the workflow types a Drover worker runs at id, by
// its prefix; every Drover type for another id.
func droverTypesAt(id string) []string {
	switch {
	case strings.HasPrefix(id, names.TestRecoveryIDPrefix):
		return []string{names.TestRecovery, names.TestCleanup}
	case strings.HasPrefix(id, names.SiteActionIDPrefix):
		return []string{names.SiteFailover}
	case strings.HasPrefix(id, names.ActionIDPrefix):
		return []string{names.Failover, names.Reprotect, names.Failback, names.Drill}
	}
	return []string{names.Failover, names.Reprotect, names.Failback, names.Drill, names.Protect, names.GroupBatch,
		names.PlanRecorder, names.Verify, names.SiteFailover, names.TestRecovery, names.TestCleanup}
}

// foreignRun refuses the running workflow at id (run "" for the
// current) when it is not a Drover workflow a worker serves: a type no
// Drover worker runs there, or a task queue other than Drover's. nil
// when it is one, is not running, or cannot be described (the caller's
// own call then says why).
func foreignRun(ctx context.Context, c client.Client, id, run string) error {
	d, err := c.DescribeWorkflowExecution(ctx, id, run)
	if err != nil {
		return nil
	}
	info := d.GetWorkflowExecutionInfo()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return nil
	}
	typ, queue, want := info.GetType().GetName(), info.GetTaskQueue(), droverTypesAt(id)
	if slices.Contains(want, typ) && queue == workflows.TaskQueue {
		return nil
	}
	return failed("workflow %s (run %s) is not a Drover run: it is a %q on task queue %q, where Drover runs %s on %q, so no Drover worker serves it; it holds the id, and with it the plan's %s.\n%s",
		id, info.GetExecution().GetRunId(), typ, queue, strings.Join(want, " or "), workflows.TaskQueue, idUse(id), removeHint(id))
}

// runningAt tells whether a workflow runs at id.
func runningAt(ctx context.Context, c client.Client, id string) bool {
	d, err := c.DescribeWorkflowExecution(ctx, id, "")
	return err == nil && d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
}

// noAnswer is the refusal of a workflow at id that answered no query
// within wait: no worker of Drover's task queue serves it now, or it is
// not Drover's.
func noAnswer(id string, err error) error {
	return failed("no worker answered workflow %s (drctl waits up to %v: %v): either no Drover worker polls task queue %q now (start one: bin/worker), or the workflow is not a Drover run.\n%s",
		id, actWait, err, workflows.TaskQueue, removeHint(id))
}

// idUse is what a workflow at id holds.
func idUse(id string) string {
	if strings.HasPrefix(id, names.TestRecoveryIDPrefix) {
		return "test recoveries"
	}
	return "actions"
}

// removeHint says how to remove a workflow that holds a Drover id.
func removeHint(id string) string {
	return fmt.Sprintf("Check who started it and what it is (temporal workflow describe -w %s), then, if it is not yours, remove it: temporal workflow terminate -w %s", id, id)
}
