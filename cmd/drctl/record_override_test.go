package main_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestFailoverOverridesASquattedRecord (issue 56): a namespace writer
// ended the plan's record and holds its ID with a PlanRecorder on a
// task queue nobody polls. drctl failover ends naming the workflow
// (RecordNotDrovers) and changes nothing; --override with no reason is
// bad input; --override REASON fails over, its step table saying it went
// on without the record and why; once the writer's workflow is gone,
// drctl status shows the failover in the record, with the reason.
func TestFailoverOverridesASquattedRecord(t *testing.T) {
	bins := bintest.Build(t, "drctl", "worker")
	srv := devserver.Start(t, nil)
	east, west := eastWest(t)
	dir := t.TempDir()
	shop := onePlan(t, filepath.Join(dir, "shop.yaml"), "shop", east, west, fmt.Sprintf("{cidrs: [%s/32]}", simtest.NodeA), "")
	c := cli{t: t, bin: filepath.Join(bins, "drctl"), addr: srv.Address()}
	ops := filepath.Join(dir, "ops")
	c.ok(nil, "plan", "keygen", ops)
	c.ok(nil, "plan", "sign", shop, "--key", ops+".key")
	worker := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + srv.Address()}, filepath.Join(bins, "worker"), "--metrics", "", "--trusted-plan-key", ops+".pub")
	simtest.Eventually(t, 30*time.Second, "the worker to start", func() bool { return strings.Contains(worker.Log.String(), "worker started") })
	c.ok(nil, "protect", "start", shop, "--primary", "east", "--interval", "200ms")
	c.eventually("protection from east", "shop", func(s statusOut) bool {
		return s.Protection != nil && s.Protection.Primary == "east" && !s.Protection.Groups["db"].LastSync.IsZero()
	})

	ctx := context.Background()
	id := workflows.RecordID("shop")
	if err := srv.Client.TerminateWorkflow(ctx, id, "", "a writer ends the record"); err != nil {
		t.Fatal(err)
	}
	squat, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: "nobody-polls-this"}, "PlanRecorder", workflows.PlanRecordInput{Plan: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Client.TerminateWorkflow(context.Background(), id, squat.GetRunID(), "test over") }()

	code, out, errs := c.run("failover", shop, "--to", "west", "--yes", "--wait")
	if code == 0 || !strings.Contains(out+errs, "RecordNotDrovers") || !strings.Contains(out+errs, "temporal workflow terminate -w "+id) {
		t.Fatalf("a failover beside a squatted record: exit %d\n%s\n%s", code, out, errs)
	}
	if u := west.Snapshot().Unit("vg/vg-1"); u != nil && u.Role == sim.RolePrimary {
		t.Fatal("west's vg-1 promoted by a failover that was refused")
	}
	c.want(2, "--override takes the reason", "failover", shop, "--to", "west", "--yes", "--override", " ")

	const reason = "east is gone, ticket 4711"
	code, out, errs = c.run("failover", shop, "--to", "west", "--yes", "--wait", "--override", reason)
	if code != 0 || !strings.Contains(out, "go on without the plan's record") || !strings.Contains(out, reason) {
		t.Fatalf("a failover with --override beside a squatted record: exit %d\n%s\n%s", code, out, errs)
	}
	if u := west.Snapshot().Unit("vg/vg-1"); u == nil || u.Role != sim.RolePrimary {
		t.Fatalf("after the failover west's vg-1 is %+v, want primary", u)
	}

	if err := srv.Client.TerminateWorkflow(ctx, id, squat.GetRunID(), "the writer's workflow is removed"); err != nil {
		t.Fatal(err)
	}
	simtest.Eventually(t, 3*time.Minute, "the failover in the record, with the reason", func() bool {
		_, out, _ := c.run("status", "shop")
		return strings.Contains(out, "last action: failover east → west, completed") && strings.Contains(out, "WITHOUT THE RECORD") && strings.Contains(out, reason)
	})
}
