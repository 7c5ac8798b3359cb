package workflows_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/workflows"
)

// TestGroupBatchAloneIsRefused: GroupBatch acts on the sub-plan its
// parent checked; started on its own (anyone with Temporal access could,
// with a forged plan) it refuses before any call.
func TestGroupBatchAloneIsRefused(t *testing.T) {
	f := newFixture(t)
	env, calls := f.env(t)
	env.ExecuteWorkflow(workflows.GroupBatch, workflows.GroupBatchInput{Plan: f.plan, Op: workflows.GroupOp{Kind: workflows.OpPromote, Site: "west", Force: true}})
	var ae *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &ae) || ae.Type() != activities.ErrUntrustedPlan || !strings.Contains(ae.Error(), "started on its own") {
		t.Fatalf("error %v, want GroupBatch refused as untrusted", err)
	}
	if len(*calls) != 0 {
		t.Fatalf("calls made: %v", *calls)
	}
}

// TestAttributes: a workflow's search attributes name its plan and action,
// and its site only when there is one.
func TestAttributes(t *testing.T) {
	with := workflows.Attributes("shop", "failover", "west")
	if p, _ := with.GetKeyword(workflows.AttrPlan); p != "shop" {
		t.Errorf("plan %q", p)
	}
	if a, _ := with.GetKeyword(workflows.AttrAction); a != "failover" {
		t.Errorf("action %q", a)
	}
	if s, ok := with.GetKeyword(workflows.AttrSite); !ok || s != "west" {
		t.Errorf("site %q (%v), want west", s, ok)
	}
	if s, ok := workflows.Attributes("shop", "record", "").GetKeyword(workflows.AttrSite); ok {
		t.Errorf("a workflow without a site has site %q", s)
	}
}

// TestReadProtectAndAttributesOnTheServer: reading the protection of a
// plan that has none is an error naming the plan; the dev server knows
// every search attribute Drover uses.
func TestReadProtectAndAttributesOnTheServer(t *testing.T) {
	srv := devserver.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if ps, err := workflows.ReadProtect(ctx, srv.Client, "nowhere"); err == nil || ps != nil || !strings.Contains(err.Error(), `plan "nowhere"`) {
		t.Fatalf("ReadProtect of an unprotected plan: %+v, %v", ps, err)
	}
	missing, err := workflows.MissingAttributes(ctx, srv.Client, "default")
	if err != nil || len(missing) != 0 {
		t.Fatalf("missing attributes %v, %v", missing, err)
	}
	if _, err := workflows.MissingAttributes(ctx, srv.Client, "no-such-namespace"); err == nil {
		t.Fatal("MissingAttributes of an unknown namespace answered without error")
	}
	// Who started an action is its memo, for listings; nobody named,
	// no memo. (No worker runs: the actions only wait, and are ended.)
	for _, by := range []string{"alice@ops", ""} {
		plan := "memo-" + strings.SplitN(by+"none", "@", 2)[0]
		run, err := workflows.Start(ctx, srv.Client, plan, workflows.Drill, workflows.DrillInput{Origin: workflows.Origin{By: by}, Action: "failover"})
		mustOK(t, err)
		d, err := srv.Client.DescribeWorkflowExecution(ctx, run.GetID(), run.GetRunID())
		mustOK(t, err)
		fields := d.GetWorkflowExecutionInfo().GetMemo().GetFields()
		if got := fields[workflows.MemoBy]; (by == "") != (got == nil) || got != nil && !strings.Contains(string(got.GetData()), by) {
			t.Errorf("memo of an action started by %q: %v", by, fields)
		}
		mustOK(t, srv.Client.TerminateWorkflow(ctx, run.GetID(), run.GetRunID(), "test over"))
	}

	// On a namespace without Drover's search attributes an action still
	// starts, without them: an index the operator has not registered
	// must not stop a failover.
	var run client.WorkflowRun
	bare := srv.BareNamespace(t, "bare", func(c client.Client) (err error) {
		run, err = workflows.Start(ctx, c, "bare-plan", workflows.Drill, workflows.DrillInput{Action: "failover"})
		return err
	})
	if missing, err := workflows.MissingAttributes(ctx, srv.Client, "bare"); err != nil || len(missing) == 0 {
		t.Fatalf("the bare namespace lacks %v (%v): the test tests nothing", missing, err)
	}
	mustOK(t, bare.TerminateWorkflow(ctx, run.GetID(), run.GetRunID(), "test over"))
}

// TestChildrenInheritAttributes: the children of an action carry its
// search attributes, so that listings by plan, action and site find
// them: a GroupBatch child those of its parent (plan, action, site); the
// Protect that a failback hands the plan to, its own action ("protect")
// and its primary.
func TestChildrenInheritAttributes(t *testing.T) {
	f := newFixtureN(t, 150)
	env, _ := f.env(t)
	mustOK(t, env.SetTypedSearchAttributesOnStart(workflows.Attributes("shop", "failback", "west")))
	var mu sync.Mutex
	seen := map[string]string{} // workflow type: its attributes
	env.SetOnChildWorkflowStartedListener(func(info *workflow.Info, ctx workflow.Context, _ converter.EncodedValues) {
		sa := workflow.GetTypedSearchAttributes(ctx)
		plan, _ := sa.GetKeyword(workflows.AttrPlan)
		action, _ := sa.GetKeyword(workflows.AttrAction)
		site, ok := sa.GetKeyword(workflows.AttrSite)
		if !ok {
			site = "(none)"
		}
		mu.Lock()
		defer mu.Unlock()
		got := plan + " " + action + " " + site
		if prev, dup := seen[info.WorkflowType.Name]; dup && prev != got {
			got = prev + " and " + got
		}
		seen[info.WorkflowType.Name] = got
	})
	env.ExecuteWorkflow(workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, env.GetWorkflowError())
	want := map[string]string{"GroupBatch": "shop failback west", "Protect": "shop protect west"}
	for typ, w := range want {
		if seen[typ] != w {
			t.Errorf("%s children's attributes: %q, want %q", typ, seen[typ], w)
		}
	}
}
