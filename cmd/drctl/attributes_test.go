package main_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/workflows"
)

// TestListWithoutSearchAttributes: in a namespace where Drover's search
// attributes are not registered, an action still starts (without them),
// and drctl list warns, says how to register them, and lists Drover's
// workflows by their types instead; --plan still keeps to its plan.
func TestListWithoutSearchAttributes(t *testing.T) {
	bins := bintest.Build(t, "drctl")
	srv := devserver.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var run client.WorkflowRun
	bare := srv.BareNamespace(t, "bare", func(c client.Client) (err error) {
		run, err = workflows.Start(ctx, c, "bare-plan", workflows.Drill, workflows.DrillInput{Action: "failover"})
		return err
	})
	// No worker runs: the drill only waits, and is ended below.
	defer bare.TerminateWorkflow(context.Background(), run.GetID(), run.GetRunID(), "test over")
	if missing, err := workflows.MissingAttributes(ctx, srv.Client, "bare"); err != nil || len(missing) == 0 {
		t.Fatalf("the bare namespace lacks %v (%v): the test tests nothing", missing, err)
	}

	c := cli{t: t, bin: filepath.Join(bins, "drctl"), addr: srv.Address()}
	for _, args := range [][]string{{"list"}, {"list", "--plan", "bare-plan"}} {
		// Visibility lists a run a moment after its start: ask until it
		// does (or 30 s pass).
		code, out, errs := c.run(append([]string{"--namespace", "bare"}, args...)...)
		for deadline := time.Now().Add(30 * time.Second); code == 0 && !strings.Contains(out, workflows.ActionID("bare-plan")) && time.Now().Before(deadline); {
			time.Sleep(200 * time.Millisecond)
			code, out, errs = c.run(append([]string{"--namespace", "bare"}, args...)...)
		}
		if code != 0 || !strings.Contains(errs, "drctl: warning: ") || !strings.Contains(errs, "temporal operator search-attribute create --name DroverPlan --type Keyword") {
			t.Errorf("drctl %v without the search attributes: exit %d, want 0 and a warning with the command that registers them\n%s%s", args, code, out, errs)
		}
		if !strings.Contains(out, workflows.ActionID("bare-plan")) {
			t.Errorf("drctl %v without the search attributes does not list the drill:\n%s", args, out)
		}
	}
	// --plan still keeps to its plan.
	if code, out, errs := c.run("--namespace", "bare", "list", "--plan", "other"); code != 0 || strings.Contains(out, "bare-plan") {
		t.Errorf("drctl list --plan other without the search attributes: exit %d, lists another plan's drill\n%s%s", code, out, errs)
	}
}
