package workflows_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/workflows"
)

// TestForgedRecordChangesAreRefused is issue 42's second attack, by a
// client of the namespace without the workers' record key: after a real
// failover to west, a `record` signal with a forged primary, fence and
// last action; the same with a made-up seal; and a change the worker
// sealed, read back from the record's history and sent again. The record
// refuses each, keeps the refusal, and still holds the failover's state.
// A PlanRecorder started from scratch for a plan without a record, with
// a state of the attacker's, is refused at once and holds nothing.
func TestForgedRecordChangesAreRefused(t *testing.T) {
	srv, f, ctx := recordStack(t)
	startRecord(t, ctx, srv)
	f.plan.Workloads = nil
	run, _ := failOverEast(t, ctx, srv, f)
	id := workflows.RecordID("shop")

	// A sealed change of the worker's, from the record's history.
	var sealed *workflows.RecordChange
	it := srv.Client.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() && sealed == nil {
		ev, err := it.Next()
		mustOK(t, err)
		if a := ev.GetWorkflowExecutionSignaledEventAttributes(); a != nil {
			var c workflows.RecordChange
			mustOK(t, converter.GetDefaultDataConverter().FromPayloads(a.GetInput(), &c))
			if c.Proof != nil {
				sealed = &c
			}
		}
	}
	if sealed == nil {
		t.Fatal("the record's history holds no sealed change")
	}
	forged := workflows.RecordChange{At: time.Now(), Primary: "east",
		Fenced: &workflows.FenceEntry{Site: "west", Via: "east", CIDRs: []string{"10.9.9.9/32"}},
		Action: &workflows.ActionEntry{Action: "failback", WorkflowID: "forged", RunID: "r1", Outcome: workflows.StateCompleted, From: "west", To: "east", Start: time.Now()}}
	madeUp := forged
	madeUp.Proof = &workflows.Proof{Sent: time.Now(), MAC: []byte("0123456789abcdef0123456789abcdef")}
	attempts := []struct {
		name string
		c    workflows.RecordChange
		says string
	}{
		{"forged", forged, "no worker's seal"},
		{"made-up seal", madeUp, "not one of this worker's record key"},
		{"sealed change sent again", *sealed, "sent again"},
	}
	for _, a := range attempts {
		mustOK(t, srv.Client.SignalWorkflow(ctx, id, "", workflows.SignalRecord, a.c))
	}
	var rec *workflows.PlanRecord
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var err error
		rec, err = workflows.ReadRecord(ctx, srv.Client, "shop")
		mustOK(t, err)
		if rec.RefusedCount >= len(attempts) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	failedOverInRecord(t, rec, f, run)
	if c, _ := rec.FencedOf("west"); len(c) > 0 {
		t.Errorf("the record holds a forged fence of west: %v", c)
	}
	if rec.RefusedCount != len(attempts) || len(rec.Refused) != len(attempts) {
		t.Fatalf("the record refused %d changes (%+v), want %d", rec.RefusedCount, rec.Refused, len(attempts))
	}
	for i, a := range attempts {
		if !strings.Contains(rec.Refused[i].Reason, a.says) {
			t.Errorf("%s: refused because %q, want it to say %q", a.name, rec.Refused[i].Reason, a.says)
		}
		// Who sent it is not what the change says (issue 56): the
		// worker does not know, and says so.
		if rec.Refused[i].From != workflows.UnknownSender {
			t.Errorf("%s: refused as from %q, want %q, not the sender's word", a.name, rec.Refused[i].From, workflows.UnknownSender)
		}
	}

	// A plan version without a seal, naming a workflow of the forger's
	// choice: refused, and not kept under that name.
	uh, err := srv.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: workflows.UpdatePlanVersion,
		Args:         []any{workflows.PlanVersion{Digest: "0000", SignedAt: time.Now(), KeyID: "k", Workflow: "Failover", WorkflowID: "drover-action-shop"}},
		WaitForStage: client.WorkflowUpdateStageCompleted})
	if err == nil {
		err = uh.Get(ctx, nil)
	}
	if err == nil {
		t.Fatal("the record took an unsealed plan version")
	}
	rec, err = workflows.ReadRecord(ctx, srv.Client, "shop")
	mustOK(t, err)
	if n := len(rec.Refused); n != len(attempts)+1 || rec.Refused[n-1].From != workflows.UnknownSender {
		t.Fatalf("the record's refusals after an unsealed plan version: %+v; want it refused from %q", rec.Refused, workflows.UnknownSender)
	}

	// A record started from scratch by a client.
	fresh, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.RecordID("fresh"), TaskQueue: workflows.TaskQueue},
		workflows.PlanRecorder, workflows.PlanRecordInput{Record: workflows.PlanRecord{Plan: "fresh", Primary: "east",
			Fences: []workflows.FenceEntry{{Site: "west", Via: "east", CIDRs: []string{"10.9.9.9/32"}}}}})
	mustOK(t, err)
	err = fresh.Get(ctx, nil)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != workflows.ErrRecordRefused || !ae.NonRetryable() {
		t.Fatalf("a record started by a client ended with %v, want a non-retryable %s", err, workflows.ErrRecordRefused)
	}
	got, err := workflows.ReadRecord(ctx, srv.Client, "fresh")
	mustOK(t, err)
	if got == nil || got.Primary != "" || len(got.Fences) != 0 || got.RefusedCount != 1 {
		t.Fatalf("the refused record holds %+v, want nothing but its refusal", got)
	}
	// Nor with a first change of its own, unsealed.
	fresh, err = srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.RecordID("fresh"), TaskQueue: workflows.TaskQueue},
		workflows.PlanRecorder, workflows.PlanRecordInput{Plan: "fresh", First: &forged})
	mustOK(t, err)
	if err := fresh.Get(ctx, nil); !errors.As(err, &ae) || ae.Type() != workflows.ErrRecordRefused {
		t.Fatalf("a record started with an unsealed first change ended with %v, want %s", err, workflows.ErrRecordRefused)
	}
}
