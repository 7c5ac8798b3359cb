package workflows_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// TestOlderSignedPlanIsRefused is the replay of issue 42: the operator
// signed v1 of plan shop (with a hook), then v2 (the current plan), and
// ran an action with v2. Someone who can start workflows but holds no
// key takes v1 and its signature, still unexpired, from a history and
// starts a Failover with it and overrideState through the plain client,
// under a workflow id of their choosing and without drctl's search
// attributes or memo. Every workflow type refuses v1 (UntrustedPlan,
// naming the newer version) before any storage call or hook; the plan's
// record keeps each refusal with the workflow id; and the refused
// workflows show under plan shop in a visibility query, as drctl list
// makes it, with who started them. v2 under an older signature of the
// same content still runs.
func TestOlderSignedPlanIsRefused(t *testing.T) {
	srv, f, key := trustingWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	owned := filepath.Join(t.TempDir(), "owned")
	v1 := *f.plan
	v1.Workloads = append([]plans.Workload(nil), f.plan.Workloads...)
	v1.Workloads = append(v1.Workloads, plans.Workload{Name: "old", Sites: map[string]plans.WorkloadRef{
		"east": {Exec: &plans.ExecHooks{Start: "touch " + owned, Stop: "touch " + owned}},
		"west": {Exec: &plans.ExecHooks{Start: "touch " + owned, Stop: "touch " + owned}}}})
	v2 := f.plan
	now := time.Now()
	sig1, err := plans.Sign(&v1, key, now.Add(-2*time.Hour), 720*time.Hour)
	mustOK(t, err)
	sig2old, err := plans.Sign(v2, key, now.Add(-90*time.Minute), 720*time.Hour)
	mustOK(t, err)
	sig2, err := plans.Sign(v2, key, now.Add(-time.Hour), 720*time.Hour)
	mustOK(t, err)

	// The operator's action with v2: the record now holds v2.
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Drill, workflows.DrillInput{Plan: v2, Action: "failover", From: "east", To: "west",
		Origin: workflows.Origin{Signature: sig2, By: "alice@ops"}})
	mustOK(t, err)
	mustOK(t, run.Get(ctx, nil))

	o1 := workflows.Origin{Signature: sig1}
	cases := []struct {
		name string
		wf   any
		in   any
	}{
		{"failover", workflows.Failover, workflows.FailoverInput{Plan: &v1, From: "east", To: "west", OverrideState: true, Origin: o1}},
		{"reprotect", workflows.Reprotect, workflows.ReprotectInput{Plan: &v1, From: "east", To: "west", Origin: o1}},
		{"failback", workflows.Failback, workflows.FailbackInput{Plan: &v1, From: "west", To: "east", Origin: o1}},
		{"drill", workflows.Drill, workflows.DrillInput{Plan: &v1, Action: "failover", From: "east", To: "west", Origin: o1}},
		{"protect", workflows.Protect, workflows.ProtectInput{Plan: &v1, Primary: "west", Origin: o1}},
		{"verify", workflows.Verify, workflows.VerifyInput{Plan: &v1, Record: &workflows.PlanRecord{Plan: "shop"}, Origin: o1}},
		{"test recovery", workflows.TestRecovery, workflows.TestRecoveryInput{Plan: &v1, At: "west", Origin: o1}},
	}
	ids := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := "not-drover-" + strings.ReplaceAll(tc.name, " ", "-")
			ids[id] = true
			run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, tc.wf, tc.in)
			mustOK(t, err)
			err = run.Get(ctx, nil)
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || ae.Type() != activities.ErrUntrustedPlan || !ae.NonRetryable() || !strings.Contains(err.Error(), "a newer version of the plan") {
				t.Fatalf("v1 after v2: %v; want a non-retryable %s naming the newer version", err, activities.ErrUntrustedPlan)
			}
			it := srv.Client.GetWorkflowHistory(ctx, id, run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for it.HasNext() {
				ev, err := it.Next()
				mustOK(t, err)
				switch ev.GetEventType() {
				case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
					enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
					t.Errorf("the refused workflow did %v", ev.GetEventType())
				}
			}
		})
	}
	if _, err := os.Stat(owned); err == nil {
		t.Fatal("v1's hook ran")
	}
	if n := len(f.west.FencedCIDRs()) + len(f.east.FencedCIDRs()); n != 0 {
		t.Fatalf("%d CIDRs fenced by a refused plan", n)
	}
	for _, u := range f.west.Snapshot().Units {
		if u.Role != "secondary" {
			t.Fatalf("a refused plan changed %s on west to %s", u.ID, u.Role)
		}
	}

	// The record keeps each refusal with the workflow id.
	rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
	mustOK(t, err)
	for id := range ids {
		found := false
		for _, r := range rec.Refused {
			found = found || (r.From == id && strings.Contains(r.Reason, "a newer version"))
		}
		if !found {
			t.Errorf("the record keeps no refusal from %s: %+v", id, rec.Refused)
		}
	}
	if rec.Version == nil || !rec.Version.SignedAt.Equal(sig2.SignedAt) {
		t.Errorf("the record's version %+v, want v2's signature of %v", rec.Version, sig2.SignedAt)
	}

	// Visible under the plan, with who started them: each workflow set
	// its own attributes and memo.
	seen := map[string]string{}
	deadline := time.Now().Add(30 * time.Second)
	for len(seen) < len(ids) && time.Now().Before(deadline) {
		resp, err := srv.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: names.AttrPlan + " = 'shop'"})
		mustOK(t, err)
		for _, e := range resp.GetExecutions() {
			id := e.GetExecution().GetWorkflowId()
			if !ids[id] || e.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_FAILED {
				continue
			}
			var by string
			if p := e.GetMemo().GetFields()[workflows.MemoBy]; p != nil {
				_ = converter.GetDefaultDataConverter().FromPayload(p, &by)
			}
			seen[id] = by
		}
		time.Sleep(200 * time.Millisecond)
	}
	for id := range ids {
		if by, ok := seen[id]; !ok || !strings.HasPrefix(by, "client ") {
			t.Errorf("%s under plan shop: listed %v, by %q; want listed, by the client's identity", id, ok, by)
		}
	}

	// v2's content under an older signature is the same plan: it runs.
	run, err = workflows.Start(ctx, srv.Client, "shop", workflows.Drill, workflows.DrillInput{Plan: v2, Action: "failover", From: "east", To: "west",
		Origin: workflows.Origin{Signature: sig2old, By: "alice@ops"}})
	mustOK(t, err)
	mustOK(t, run.Get(ctx, nil))
}

// TestVersionsSignedInOneSecondAreOrdered (issue 56): versions signed
// within one second are ordered by their signing times, which keep
// their nanoseconds: b, signed half a second after a, is the newer and
// runs. c, of other content signed at the very time of b, cannot be
// ordered against it: the record refuses it, saying so, rather than take
// it as the newest, and keeps b.
func TestVersionsSignedInOneSecondAreOrdered(t *testing.T) {
	srv, f, key := trustingWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	version := func(parallelism int) *plans.Plan {
		v := *f.plan
		v.Policy.Parallelism = parallelism
		return &v
	}
	a, b, c := version(4), version(5), version(6)
	second := time.Now().Add(-time.Hour).Truncate(time.Second)
	sigA, err := plans.Sign(a, key, second.Add(200*time.Millisecond), 720*time.Hour)
	mustOK(t, err)
	sigB, err := plans.Sign(b, key, second.Add(700*time.Millisecond), 720*time.Hour)
	mustOK(t, err)
	sigC, err := plans.Sign(c, key, second.Add(700*time.Millisecond), 720*time.Hour)
	mustOK(t, err)
	verify := func(id string, p *plans.Plan, sig *plans.Signature) error {
		run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, workflows.Verify,
			workflows.VerifyInput{Plan: p, Record: &workflows.PlanRecord{Plan: "shop"}, Origin: workflows.Origin{Signature: sig, By: "alice@ops"}})
		mustOK(t, err)
		return run.Get(ctx, nil)
	}
	mustOK(t, verify("verify-a", a, sigA))
	if err := verify("verify-b", b, sigB); err != nil {
		t.Fatalf("b, signed half a second after a, was refused: %v", err)
	}
	err = verify("verify-c", c, sigC)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != activities.ErrUntrustedPlan || !strings.Contains(err.Error(), "signed at the same time") {
		t.Fatalf("c, of other content signed at b's time: %v; want %s saying both were signed at the same time", err, activities.ErrUntrustedPlan)
	}
	rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
	mustOK(t, err)
	if rec.Version == nil || !rec.Version.SignedAt.Equal(sigB.SignedAt) || rec.Version.WorkflowID != "verify-b" {
		t.Fatalf("the record's version %+v, want b's", rec.Version)
	}
	if n := len(rec.Refused); n == 0 || rec.Refused[n-1].From != "verify-c" || !strings.Contains(rec.Refused[n-1].Reason, "cannot be ordered") {
		t.Fatalf("the record's refusals %+v, want c's, saying why", rec.Refused)
	}
}
