package workflows_test

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// TestPlanDefaultsAppliedOnce: a plan started through the API with no
// policy at all (drctl would have filled in the defaults) runs a whole
// cycle on the defaults, applied once when the action has checked the
// signature. The failback's freshness check needs the default RPO target
// (with none, every lag is too much), and the Protect that the reprotect
// hands the plan to checks the same signature on the plan with its
// defaults.
func TestPlanDefaultsAppliedOnce(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := newFixture(t)
	trusted, key, err := plans.GenerateKey()
	mustOK(t, err)
	f.startWorker(t, srv, &activities.PlanTrust{Keys: []ed25519.PublicKey{trusted}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	p := *f.plan
	p.Policy = plans.Policy{}
	p.Workloads = append([]plans.Workload(nil), f.plan.Workloads...)
	for i := range p.Workloads {
		p.Workloads[i].HealthTimeout = 0
	}
	sig, err := plans.Sign(&p, key, time.Now(), 0)
	mustOK(t, err)
	o := workflows.Origin{Signature: sig, By: "test"}

	f.east.Down()
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Plan: &p, From: "east", To: "west", Origin: o})
	mustOK(t, err)
	var fo workflows.FailoverResult
	mustOK(t, run.Get(ctx, &fo))
	allDone(t, fo.Progress)

	mustOK(t, f.east.Up())
	run, err = workflows.Start(ctx, srv.Client, "shop", workflows.Reprotect, workflows.ReprotectInput{Plan: &p, From: "east", To: "west", Fenced: fo.Fenced, Origin: o})
	mustOK(t, err)
	var rp workflows.ReprotectResult
	mustOK(t, run.Get(ctx, &rp))
	allDone(t, rp.Progress)
	simtest.Eventually(t, time.Minute, "protection from west", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		return err == nil && ps.Primary == "west" && ps.Polls > 0
	})

	run, err = workflows.Start(ctx, srv.Client, "shop", workflows.Failback, workflows.FailbackInput{Plan: &p, From: "west", To: "east", Origin: o})
	mustOK(t, err)
	var fb workflows.FailbackResult
	mustOK(t, run.Get(ctx, &fb))
	allDone(t, fb.Progress)
	// The reprotect's protection runs on: the failback turns it to east.
	if s := stepOf(t, fb.Progress, "protect/east"); s.Output != "the running protection (workflow "+workflows.ProtectID("shop")+") now polls east" {
		t.Fatalf("the failback's protect step says %q", s.Output)
	}

	uh, err := srv.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: workflows.ProtectID("shop"), UpdateName: workflows.UpdateStopProtect,
		Args: []any{workflows.StopProtect{}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	mustOK(t, err)
	mustOK(t, uh.Get(ctx, nil))
}
