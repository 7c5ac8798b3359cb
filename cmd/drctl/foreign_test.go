package main_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/workflows"
)

// TestForeignWorkflowAtATestID (issue 56): a writer of the namespace
// starts a workflow of their own at drover-test-shop, on a task queue
// nobody polls, which holds the plan's test recovery id. drctl approve
// and drctl test-recovery say at once that it is not a Drover run,
// naming it and how to remove it, instead of waiting on it. One of the
// right type on Drover's queue that no worker answers is named too,
// once approve has waited its bound.
func TestForeignWorkflowAtATestID(t *testing.T) {
	bins := bintest.Build(t, "drctl")
	srv := devserver.Start(t, nil)
	east, west := eastWest(t)
	shop := onePlan(t, filepath.Join(t.TempDir(), "shop.yaml"), "shop", east, west, fmt.Sprintf("{cidrs: [%s/32]}", simtest.NodeA), "")
	c := cli{t: t, bin: filepath.Join(bins, "drctl"), addr: srv.Address()}
	id := workflows.TestRecoveryID("shop")
	start := func(queue string) {
		t.Helper()
		if _, err := srv.Client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: id, TaskQueue: queue}, "TestRecovery"); err != nil {
			t.Fatal(err)
		}
	}
	end := func() {
		t.Helper()
		if err := srv.Client.TerminateWorkflow(context.Background(), id, "", "the test's"); err != nil {
			t.Fatal(err)
		}
	}

	start("nobody-polls")
	for _, args := range [][]string{{"approve", id, "--yes"}, {"test-recovery", shop, "--at", "west"}} {
		code, out, errs := c.run(args...)
		for _, want := range []string{"workflow " + id, "is not a Drover run", `task queue "nobody-polls"`, "temporal workflow terminate -w " + id} {
			if code != 1 || !strings.Contains(errs, want) {
				t.Errorf("drctl %v with a foreign workflow at %s: exit %d, stderr lacks %q:\n%s%s", args, id, code, want, out, errs)
			}
		}
	}
	end()

	// The right type on Drover's queue, and no worker: approve waits its
	// bound for an answer, then says none came and what it may be.
	start(workflows.TaskQueue)
	code, out, errs := c.run("approve", id, "--yes")
	for _, want := range []string{"no worker answered workflow " + id, "not a Drover run", "temporal workflow terminate -w " + id} {
		if code != 1 || !strings.Contains(errs, want) {
			t.Errorf("drctl approve with no worker to answer: exit %d, stderr lacks %q:\n%s%s", code, want, out, errs)
		}
	}
	end()
}
