package main_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// TestUpgradeToANewBuild: the first worker of deployment drover makes
// its build current (the deployment had none); a second build started
// beside it is not made current by starting. A failover waiting at an
// approval gate on the first build, and the plan's protection, are
// there when the operator makes the second build current: new actions
// run on it, protection and the plan's record move to it at their next
// workflow task (they auto-upgrade), and the approved failover finishes
// on the build it started on (pinned), which a query by
// TemporalWorkerDeploymentVersion lists until it ends.
func TestUpgradeToANewBuild(t *testing.T) {
	bin := filepath.Join(bintest.Build(t, "worker"), "worker")
	srv := devserver.Start(t, nil)
	east, west := eastWest(t)
	p, _, _, _ := signedShop(t, east, west)
	p.Policy.Approvals = []string{"beforePromote"}
	pubFile, _, _, key := keyPair(t)
	sig, err := plans.Sign(p, key, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	origin := workflows.Origin{Signature: sig, By: "test"}
	env := []string{"TEMPORAL_ADDRESS=" + srv.Address(), "TEMPORAL_NAMESPACE=default"}
	// Every build's workers hold the same record key: a record takes the
	// changes one build sealed on the other.
	recordKey := []byte(strings.Repeat("k", 32))
	recordKeyFile := filepath.Join(t.TempDir(), "record.key")
	if err := os.WriteFile(recordKeyFile, recordKey, 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(build string) *bintest.Proc {
		w := bintest.Start(t, env, bin, "--metrics", "", "--trusted-plan-key", pubFile, "--build-id", build, "--record-key", recordKeyFile)
		simtest.Eventually(t, time.Minute, "worker "+build+" to start", func() bool { return strings.Contains(w.Log.String(), "worker started") })
		return w
	}
	old := start("one")
	if !strings.Contains(old.Log.String(), "made this build the deployment's current version") {
		t.Fatalf("the first worker did not make its build current:\n%s", old.Log)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := workflows.StartProtect(ctx, srv.Client, p, "east", 100*time.Millisecond, origin); err != nil {
		t.Fatal(err)
	}
	simtest.Eventually(t, time.Minute, "a round of Protect", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		return err == nil && ps.Polls > 0
	})
	east.Down()
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Origin: origin, Plan: p, From: "east", To: "west"})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Eventually(t, time.Minute, "the failover at its gate", func() bool {
		v, err := srv.Client.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), workflows.QueryProgress)
		var pr workflows.Progress
		if err != nil || v.Get(&pr) != nil {
			return false
		}
		for _, s := range pr.Steps {
			if s.ID == "approve/beforePromote" && s.State == workflows.StateWaiting {
				return true
			}
		}
		return false
	})
	version := func(id, runID string) (enums.VersioningBehavior, string) {
		d, err := srv.Client.DescribeWorkflowExecution(ctx, id, runID)
		if err != nil {
			return enums.VERSIONING_BEHAVIOR_UNSPECIFIED, err.Error()
		}
		vi := d.GetWorkflowExecutionInfo().GetVersioningInfo()
		return vi.GetBehavior(), vi.GetDeploymentVersion().GetBuildId()
	}
	for _, c := range []struct {
		id       string
		behavior enums.VersioningBehavior
	}{{run.GetID(), enums.VERSIONING_BEHAVIOR_PINNED}, {workflows.ProtectID("shop"), enums.VERSIONING_BEHAVIOR_AUTO_UPGRADE},
		{workflows.RecordID("shop"), enums.VERSIONING_BEHAVIOR_AUTO_UPGRADE}} {
		var b enums.VersioningBehavior
		var build string
		simtest.Eventually(t, 30*time.Second, c.id+" on build one", func() bool {
			b, build = version(c.id, "")
			return b == c.behavior && build == "one"
		})
	}

	// The new build starts beside the old one and waits to be made current.
	next := start("two")
	if !strings.Contains(next.Log.String(), "another build is the deployment's current version") {
		t.Fatalf("the second worker does not say that it is not current:\n%s", next.Log)
	}
	h := srv.Client.WorkerDeploymentClient().GetHandle("drover")
	d, err := h.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur := d.Info.RoutingConfig.CurrentVersion; cur == nil || cur.BuildID != "one" {
		t.Fatalf("current version after the second build started: %+v, want one", cur)
	}
	if _, err := h.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: "two"}); err != nil {
		t.Fatal(err)
	}

	// What still runs on build one: the pinned failover.
	onOne := func() []string {
		var out []string
		resp, err := srv.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: `TemporalWorkerDeploymentVersion="drover:one" AND ExecutionStatus="Running"`})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range resp.GetExecutions() {
			out = append(out, e.GetType().GetName())
		}
		return out
	}
	simtest.Eventually(t, time.Minute, "protection to move to build two", func() bool {
		_, build := version(workflows.ProtectID("shop"), "")
		return build == "two"
	})
	var listed []string
	simtest.Eventually(t, 30*time.Second, "the failover listed on build one", func() bool {
		listed = onOne()
		return slices.Contains(listed, "Failover")
	})
	t.Logf("running on build one after two became current: %v", listed)

	h2, err := srv.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), RunID: run.GetRunID(),
		UpdateName: workflows.UpdateApprove, Args: []any{workflows.Approval{Gate: "beforePromote", By: "test"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		t.Fatal(err)
	}
	if err := h2.Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	var res workflows.FailoverResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("failover: %v\nold worker:\n%s\nnew worker:\n%s", err, old.Log, next.Log)
	}
	if b, build := version(run.GetID(), run.GetRunID()); b != enums.VERSIONING_BEHAVIOR_PINNED || build != "one" {
		t.Errorf("the failover ended %v on build %q, want pinned to one", b, build)
	}
	// The failover's changes reached the record, which now runs on two.
	simtest.Eventually(t, time.Minute, "the record on build two with west primary", func() bool {
		rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
		_, build := version(workflows.RecordID("shop"), "")
		return err == nil && rec.Primary == "west" && build == "two"
	})
	if got := onOne(); len(got) != 0 {
		t.Errorf("still running on build one after the failover: %v", got)
	}

	// A new action runs on the new build.
	drill, err := workflows.Start(ctx, srv.Client, "shop", workflows.Drill, workflows.DrillInput{Origin: origin, Plan: p, Action: "failover", From: "west", To: "east"})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Eventually(t, time.Minute, "the drill pinned to build two", func() bool {
		b, build := version(drill.GetID(), drill.GetRunID())
		return b == enums.VERSIONING_BEHAVIOR_PINNED && build == "two"
	})
}

// TestReplacedBuildIsTakenOver: when the workers of the current build
// are replaced rather than run beside the new ones (a Nomad job's rolling
// update, a rebuilt container), the new build makes itself current once
// no worker of the old one has polled for --unattended-after, and new
// workflows run on it instead of waiting for a worker that is gone.
func TestReplacedBuildIsTakenOver(t *testing.T) {
	bin := filepath.Join(bintest.Build(t, "worker"), "worker")
	srv := devserver.Start(t, nil)
	env := []string{"TEMPORAL_ADDRESS=" + srv.Address(), "TEMPORAL_NAMESPACE=default"}
	recordKey := []byte(strings.Repeat("k", 32))
	recordKeyFile := filepath.Join(t.TempDir(), "record.key")
	if err := os.WriteFile(recordKeyFile, recordKey, 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(build string, args ...string) *bintest.Proc {
		w := bintest.Start(t, env, bin, append([]string{"--metrics", "", "--allow-unsigned-plans", "--build-id", build, "--record-key", recordKeyFile}, args...)...)
		simtest.Eventually(t, time.Minute, "worker "+build+" to start", func() bool { return strings.Contains(w.Log.String(), "worker started") })
		return w
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := srv.Client.WorkerDeploymentClient().GetHandle("drover")
	current := func() string {
		d, err := h.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
		if err != nil || d.Info.RoutingConfig.CurrentVersion == nil {
			return ""
		}
		return d.Info.RoutingConfig.CurrentVersion.BuildID
	}
	old := start("one")
	// Beside a build whose workers poll, a new build does not take over:
	// past its first look (unattendedEvery, 15 s), one is still current.
	start("beside", "--unattended-after", "90s")
	time.Sleep(20 * time.Second)
	if got := current(); got != "one" {
		t.Fatalf("current build %q while one's worker polls, want one", got)
	}
	if err := old.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	next := start("two", "--unattended-after", "5s")
	simtest.Eventually(t, time.Minute, "build two current", func() bool { return current() == "two" })
	// The worker logs the take-over once Temporal has answered: the
	// deployment can say two before the line is written.
	simtest.Eventually(t, 30*time.Second, "the take-over in build two's log", func() bool {
		return strings.Contains(next.Log.String(), "the current one had no worker polling")
	})
	// A new workflow runs: the plan's record, started by hand with a
	// first change sealed by the workers' key, answers.
	first, err := (&workflows.RecordSender{Key: recordKey}).SealAt("shop", workflows.RecordChange{At: time.Now()}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.RecordID("shop"), TaskQueue: workflows.TaskQueue},
		workflows.PlanRecorder, workflows.PlanRecordInput{Plan: "shop", First: &first}); err != nil {
		t.Fatal(err)
	}
	simtest.Eventually(t, time.Minute, "the record to answer on build two", func() bool {
		_, err := workflows.ReadRecord(ctx, srv.Client, "shop")
		return err == nil
	})
}
