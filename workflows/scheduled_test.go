package workflows_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestScheduledTestRecoveryOnDevServer: a test recovery a schedule
// starts runs unattended under the plan's test id. It ends itself at its
// time limit, its copies cleaned away, nobody approving; and when a step
// fails for good (west refuses to make a copy), the test fails and
// cleans up instead of pausing for an operator. With
// DROVER_RECORD_HISTORIES set it records the histories of Scheduled and
// of its unattended test for TestReplay.
func TestScheduledTestRecoveryOnDevServer(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := testRecoveryFixture(t)
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := func(name string) client.WorkflowRun {
		in := workflows.ScheduledInput{Schedule: "drover-schedule-shop-test-recovery", CreatedBy: "ops@example", Kind: workflows.ScheduledTest,
			Test: &workflows.TestRecoveryInput{Plan: f.plan, At: "west", TimeLimit: time.Second}}
		run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "drover-schedule-shop-test-recovery-" + name, TaskQueue: workflows.TaskQueue},
			workflows.Scheduled, in)
		mustOK(t, err)
		return run
	}
	left := func() int {
		s := f.west.Snapshot()
		return len(s.Snapshots) + len(s.GroupSnapshots) + len(s.Clones)
	}

	run := start("ok")
	var res workflows.ScheduledResult
	mustOK(t, run.Get(ctx, &res))
	if !res.OK || res.WorkflowID != workflows.TestRecoveryID("shop") {
		t.Fatalf("scheduled test: %+v", res)
	}
	record(t, ctx, srv.Client, run, "scheduled")
	recordChild(t, ctx, srv.Client, run, "TestRecovery", "test-recovery-unattended")
	var tr workflows.TestRecoveryResult
	mustOK(t, srv.Client.GetWorkflow(ctx, res.WorkflowID, res.RunID).Get(ctx, &tr))
	end := stepOf(t, tr.Progress, "approve/"+workflows.GateEndTest)
	if !tr.Cleaned || end.State != workflows.StateDone || end.By != "" || !strings.Contains(end.Output, "time limit of 1s reached") {
		t.Fatalf("the scheduled test did not end itself at its time limit: cleaned %v, end step %+v", tr.Cleaned, end)
	}
	if tr.By != "schedule drover-schedule-shop-test-recovery (created by ops@example)" {
		t.Errorf("the test is recorded as started by %q", tr.By)
	}
	if n := left(); n != 0 {
		t.Fatalf("%d snapshots or copies left on west", n)
	}

	// West refuses every copy: the copy step fails for good; unattended,
	// the test fails and cleans up rather than pause.
	mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "CreateVolume", Code: "INVALID_ARGUMENT", Probability: 1, Message: "pool read-only"}}))
	run = start("fails")
	err := run.Get(ctx, &res)
	if err == nil {
		t.Fatalf("a scheduled test whose copies failed succeeded: %+v", res)
	}
	if ctx.Err() != nil {
		t.Fatalf("the scheduled test did not end (paused for an operator?): %v", err)
	}
	var failed workflows.TestRecoveryResult
	v, qerr := srv.Client.QueryWorkflow(ctx, workflows.TestRecoveryID("shop"), "", workflows.QueryTestCopies)
	mustOK(t, qerr)
	mustOK(t, v.Get(&failed))
	paused := false
	for _, s := range failed.Steps {
		paused = paused || s.State == workflows.StatePaused
	}
	if paused || !failed.Cleaned {
		t.Fatalf("unattended test after a failed copy: paused %v, cleaned %v", paused, failed.Cleaned)
	}
	mustOK(t, f.west.SetFaults(nil))
	if n := left(); n != 0 {
		t.Fatalf("%d snapshots or copies left on west after the failed test", n)
	}
}
