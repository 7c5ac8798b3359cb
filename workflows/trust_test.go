package workflows_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// TestForgedPlansAreRefused is the attack of anyone who can start a
// workflow in the namespace: a Failover (or Protect, or a GroupBatch on
// its own) started straight through the Temporal client with a forged
// plan — a start hook that runs a command on the worker and a fence of
// an arbitrary CIDR. The worker trusts one key; the unsigned plan, the
// signed plan changed afterwards, a plan signed by another key, a plan
// whose signature is moved onto another plan, and an expired one are
// each refused with a non-retryable UntrustedPlan error that names the
// reason, and nothing happened: no storage call, no hook, no fence. The
// same plan signed by the trusted key runs.
func TestForgedPlansAreRefused(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := newFixture(t)
	trusted, key, err := plans.GenerateKey()
	mustOK(t, err)
	_, otherKey, err := plans.GenerateKey()
	mustOK(t, err)
	f.startWorker(t, srv, &activities.PlanTrust{Keys: []ed25519.PublicKey{trusted}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	owned := filepath.Join(t.TempDir(), "owned")
	forged := func() *plans.Plan {
		p := *f.plan
		p.Sites = append([]plans.Site(nil), f.plan.Sites...)
		p.Sites[0].Fence.CIDRs = []string{"10.66.0.0/16"}
		hooks := func() *plans.ExecHooks {
			return &plans.ExecHooks{Start: "touch " + owned, Stop: "touch " + owned, TestStart: "touch " + owned, TestStop: "touch " + owned}
		}
		p.Workloads = []plans.Workload{{Name: "evil", Sites: map[string]plans.WorkloadRef{
			"east": {Exec: hooks()}, "west": {Exec: hooks()}}}}
		return &p
	}
	sign := func(p *plans.Plan, k ed25519.PrivateKey, validFor time.Duration, at time.Time) *plans.Signature {
		s, err := plans.Sign(p, k, at, validFor)
		mustOK(t, err)
		return s
	}
	tampered := forged()
	tamperedSig := sign(f.plan, key, 0, time.Now())
	tampered.Sites[0].Fence.CIDRs = f.plan.Sites[0].Fence.CIDRs // as signed but for the hooks
	other := *f.plan
	other.Metadata.Name = "other"
	cases := []struct {
		name string
		wf   any
		in   any
		says string
	}{
		{"unsigned failover", workflows.Failover, workflows.FailoverInput{Plan: forged(), From: "east", To: "west"}, "the plan is not signed"},
		{"tampered failover", workflows.Failover, workflows.FailoverInput{Plan: tampered, From: "east", To: "west",
			Origin: workflows.Origin{Signature: tamperedSig}}, "does not match its signature"},
		{"failover signed by an unknown key", workflows.Failover, workflows.FailoverInput{Plan: forged(), From: "east", To: "west",
			Origin: workflows.Origin{Signature: sign(forged(), otherKey, 0, time.Now())}}, "a key this worker does not trust"},
		{"signature moved to another plan", workflows.Failover, workflows.FailoverInput{Plan: &other, From: "east", To: "west",
			Origin: workflows.Origin{Signature: sign(f.plan, key, 0, time.Now())}}, "does not match its signature"},
		{"expired signature", workflows.Failover, workflows.FailoverInput{Plan: forged(), From: "east", To: "west",
			Origin: workflows.Origin{Signature: sign(forged(), key, time.Hour, time.Now().Add(-2*time.Hour))}}, "has expired"},
		{"unsigned reprotect", workflows.Reprotect, workflows.ReprotectInput{Plan: forged(), From: "east", To: "west"}, "the plan is not signed"},
		{"unsigned failback", workflows.Failback, workflows.FailbackInput{Plan: forged(), From: "west", To: "east"}, "the plan is not signed"},
		{"unsigned drill", workflows.Drill, workflows.DrillInput{Plan: forged(), Action: "failover", From: "east", To: "west"}, "the plan is not signed"},
		{"unsigned verify", workflows.Verify, workflows.VerifyInput{Plan: forged(), Record: &workflows.PlanRecord{Plan: "shop"}}, "the plan is not signed"},
		{"unsigned protect", workflows.Protect, workflows.ProtectInput{Plan: forged(), Primary: "west"}, "the plan is not signed"},
		{"unsigned test recovery", workflows.TestRecovery, workflows.TestRecoveryInput{Plan: forged(), At: "west"}, "the plan is not signed"},
		{"test recovery signed by an unknown key", workflows.TestRecovery, workflows.TestRecoveryInput{Plan: forged(), At: "west",
			Origin: workflows.Origin{Signature: sign(forged(), otherKey, 0, time.Now())}}, "a key this worker does not trust"},
		{"unsigned test cleanup", workflows.TestCleanup, workflows.TestCleanupInput{Plan: forged(), At: "west", Run: "r1",
			Copies: []workflows.TestCopy{{Group: "db", Volume: "v1", Copy: "v1", CopyName: "v1"}}}, "the plan is not signed"},
		{"group batch on its own", workflows.GroupBatch, workflows.GroupBatchInput{Plan: forged(),
			Op: workflows.GroupOp{Kind: workflows.OpPromote, Site: "west", Force: true}}, "runs only as the child"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := workflows.ActionID("forged-" + string(rune('a'+i)))
			run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, tc.wf, tc.in)
			mustOK(t, err)
			err = run.Get(ctx, nil)
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || ae.Type() != activities.ErrUntrustedPlan || !ae.NonRetryable() || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("result: %v; want a non-retryable %s error saying %q", err, activities.ErrUntrustedPlan, tc.says)
			}
			t.Logf("refused: %v", ae.Error())
			// Nothing ran: the history holds no activity, no child, no
			// signal; only the version marker and the checks' own.
			it := srv.Client.GetWorkflowHistory(ctx, id, run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for it.HasNext() {
				ev, err := it.Next()
				mustOK(t, err)
				switch ev.GetEventType() {
				case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
					enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
					t.Errorf("the refused workflow did %v", ev.GetEventType())
				case enumspb.EVENT_TYPE_MARKER_RECORDED:
					// VerifyPlan, and StartedBy, which reads who started
					// the workflow for its memo: no side effect.
					if a := ev.GetMarkerRecordedEventAttributes(); a.GetMarkerName() == "LocalActivity" && !strings.Contains(a.String(), "VerifyPlan") && !strings.Contains(a.String(), "StartedBy") {
						t.Errorf("the refused workflow ran a local activity other than VerifyPlan and StartedBy: %v", a)
					}
				}
			}
		})
	}
	if _, err := os.Stat(owned); err == nil {
		t.Fatal("a forged plan's hook ran on the worker")
	}
	for _, s := range append(f.east.FencedCIDRs(), f.west.FencedCIDRs()...) {
		t.Fatalf("a forged plan fenced %s", s)
	}
	for _, site := range []string{"east", "west"} {
		s := f.east
		if site == "west" {
			s = f.west
		}
		for _, u := range s.Snapshot().Units {
			if want := map[string]string{"east": "primary", "west": "secondary"}[site]; string(u.Role) != want {
				t.Fatalf("a forged plan changed %s on %s to %s", u.ID, site, u.Role)
			}
		}
	}

	// The control: the plan signed by the trusted key runs, and its
	// result says who signed it and who started it.
	run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.ActionID("signed"), TaskQueue: workflows.TaskQueue},
		workflows.Drill, workflows.DrillInput{Plan: f.plan, Action: "failover", From: "east", To: "west",
			Origin: workflows.Origin{Signature: sign(f.plan, key, time.Hour, time.Now()), By: "alice@ops"}})
	mustOK(t, err)
	var res workflows.DrillResult
	mustOK(t, run.Get(ctx, &res))
	if want := "plan signed by key " + plans.KeyID(trusted); !strings.HasPrefix(res.Trust, want) || res.By != "alice@ops" || res.State != workflows.StateCompleted {
		t.Fatalf("signed drill: state %s, trust %q, by %q; want completed, %q…, alice@ops", res.State, res.Trust, res.By, want)
	}
}
