package workflows_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// loseTask makes the worker lose one workflow task of workflow type wf,
// the first time that task asks for activity: the task panics there, as
// if the worker died before reporting it, so that the server never hears
// of what the task did (the local activities it ran, with their side
// effects on storage, leave no marker) and gives the task again. The new
// task replays the history and does the work again.
type loseTask struct {
	interceptor.WorkerInterceptorBase
	wf, activity string
	lost         atomic.Bool
}

func (l *loseTask) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &loseTaskIn{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, l: l}
}

type loseTaskIn struct {
	interceptor.WorkflowInboundInterceptorBase
	l *loseTask
}

func (i *loseTaskIn) Init(out interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&loseTaskOut{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: out}, l: i.l})
}

type loseTaskOut struct {
	interceptor.WorkflowOutboundInterceptorBase
	l *loseTask
}

func (o *loseTaskOut) ExecuteActivity(ctx workflow.Context, typ string, args ...any) workflow.Future {
	o.lose(ctx, typ)
	return o.Next.ExecuteActivity(ctx, typ, args...)
}

func (o *loseTaskOut) ExecuteLocalActivity(ctx workflow.Context, typ string, args ...any) workflow.Future {
	o.lose(ctx, typ)
	return o.Next.ExecuteLocalActivity(ctx, typ, args...)
}

func (o *loseTaskOut) lose(ctx workflow.Context, activity string) {
	if workflow.GetInfo(ctx).WorkflowType.Name == o.l.wf && strings.Contains(activity, o.l.activity) &&
		!workflow.IsReplaying(ctx) && o.l.lost.CompareAndSwap(false, true) {
		panic("the worker is lost before it reports its workflow task")
	}
}

// TestFailoverCarriesOnAfterALostTask: a worker lost in the middle of a
// failover, after the copies on west were promoted but before it reported
// the workflow task that promoted them, leaves the failover to another
// worker, which replays the history and carries on. The role check at
// the start must not be asked again then: west's copies are primary by
// the failover's own hand, and a check that saw them so would end the
// failover as "nothing was done", with east fenced and west promoted
// (the chaos run found it). The check's answer is in the history before
// the first side effect.
func TestFailoverCarriesOnAfterALostTask(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := newFixture(t)
	lost := &loseTask{wf: "Failover", activity: "StartWorkload"}
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true}, lost)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	startRecord(t, ctx, srv)

	_, res := failOverEast(t, ctx, srv, f)
	if !lost.lost.Load() {
		t.Fatal("no workflow task of the failover was lost: the test proves nothing")
	}
	allRoles(t, f.west, sim.RolePrimary)
	if !strings.Contains(stepOutput(res.Progress, "check roles on west"), "are not primary") {
		t.Errorf("the role check's answer: %q, want the copies on west not primary", stepOutput(res.Progress, "check roles on west"))
	}
}

// stepOutput is the output of p's step called name ("" when none is).
func stepOutput(p workflows.Progress, name string) string {
	for _, s := range p.Steps {
		if s.Name == name {
			return s.Output
		}
	}
	return ""
}

// TestFailbackCarriesOnAfterALostTask: the same for a failback, whose
// checks ask the storage of west, which it demotes, whether west holds
// the primary copies and each group answers. A worker lost after the
// demotion, in the task that demoted them, must not leave the next
// worker to ask again and end the failback there, with no primary copy
// at either site, or pause it on its own demotion. The plan has no
// workloads, whose stops would end a task between the check and the
// demotion.
func TestFailbackCarriesOnAfterALostTask(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := newFixture(t)
	f.plan.Workloads = nil
	lost := &loseTask{wf: "Failback", activity: "PromoteVolume"}
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true}, lost)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	startRecord(t, ctx, srv)
	failOverEast(t, ctx, srv, f)
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Reprotect, workflows.ReprotectInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, err)
	mustOK(t, run.Get(ctx, nil))

	run, err = workflows.Start(ctx, srv.Client, "shop", workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "west", To: "east"})
	mustOK(t, err)
	var res workflows.FailbackResult

	mustOK(t, run.Get(ctx, &res))
	if !lost.lost.Load() {
		t.Fatal("no workflow task of the failback was lost: the test proves nothing")
	}
	allDone(t, res.Progress)
	allRoles(t, f.east, sim.RolePrimary)
	allRoles(t, f.west, sim.RoleSecondary)
}
