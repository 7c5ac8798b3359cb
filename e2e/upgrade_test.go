package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/internal/stack"
	"github.com/drover-dr/drover/workflows"
)

// upgrade is one run of TestUpgrade: the stack, and the two builds with
// the names of their workers in it.
type upgrade struct {
	*harness
	prevBin string // the previous build's worker and drctl
	// build IDs and stack process names of the previous build and of
	// this checkout's
	prev, this         string
	prevProc, thisProc string
	// mark is the action's last event before its gate was opened.
	mark int64
}

// eventually waits up to within for cond, asking every 250 ms (history
// and visibility reads are not cheap), and fails the test naming what
// it waited for and what it saw last (cond's answer).
func (u *upgrade) eventually(within time.Duration, what string, cond func() (bool, string)) {
	u.t.Helper()
	var saw string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		var ok bool
		if ok, saw = cond(); ok {
			return
		}
	}
	u.t.Fatalf("timed out after %v waiting for %s; last seen: %s", within, what, saw)
}

// TestUpgrade upgrades the worker from a previous build of Drover (the
// worker and drctl of an earlier commit, which make e2e-upgrade builds
// and names in DROVER_E2E_UPGRADE_FROM) to this checkout's while a
// protected plan's failover waits at an approval gate, as
// docs/guides/upgrades.md says: the new build's worker starts beside the old one,
// `temporal worker deployment set-current-version` makes it current, and
// the gate is opened. The failover must end on the build it started on
// (pinned: every workflow and activity task of it after the gate by the
// old build's worker), Protect and the plan's record must move to the new
// build and carry on there, a new action must run on the new build, and
// the old build's worker is stopped only once Temporal lists nothing
// running on it and calls it drained. Then a rollback, as the guide
// says of it: a failback waits at its gate on the new build, the
// previous build's worker starts again and is made current, and the
// failback ends on the new build and a drill runs on the previous one;
// Protect and the record, which took a path on the new build that the
// previous one does not have, stay on the new build, their workflow
// tasks failing on the previous one (Temporal's describe and history
// show it, drctl status says what to do) and nothing completed there,
// while runs that did not take it (if any) move back. Once the new
// build is current again (roll forward) Protect syncs and the record
// takes the changes sent meanwhile, and the previous build's worker
// stops once drained.
func TestUpgrade(t *testing.T) {
	prevBin := os.Getenv("DROVER_E2E_UPGRADE_FROM")
	rev := os.Getenv("DROVER_E2E_UPGRADE_REV")
	if prevBin == "" || rev == "" {
		t.Skip("make e2e-upgrade runs this test: it builds the previous build and names it in DROVER_E2E_UPGRADE_FROM and DROVER_E2E_UPGRADE_REV")
	}
	u := &upgrade{prevBin: prevBin, prev: "prev-" + rev[:min(12, len(rev))], this: "this-checkout", prevProc: "worker", thisProc: "worker-this"}
	t0 := time.Now()
	u.harness = startWith(t, 2, 2, func(plan string) string {
		// The failover waits before it fences, the reprotect and the
		// failback before they demote: each gate comes before the action
		// changes anything.
		return strings.Replace(plan, "policy:\n", "policy:\n  approvals: [beforeFence, beforeDemote]\n", 1)
	}, func(o *stack.Options) {
		o.Worker = filepath.Join(prevBin, "worker")
		o.WorkerArgs = []string{"--build-id", u.prev}
		// Drainage is judged every 5 s instead of every 3 minutes.
		o.TemporalArgs = []string{
			"--dynamic-config-value", `matching.wv.VersionDrainageStatusRefreshInterval="5s"`,
			"--dynamic-config-value", `matching.wv.VersionDrainageStatusVisibilityGracePeriod="5s"`,
		}
	})
	if o, _ := u.prevDrctl("version"); !strings.Contains(o, rev[:min(12, len(rev))]) {
		t.Fatalf("the previous build's drctl does not say it is of %s:\n%s", rev, o)
	}
	u.current(u.prev) // its first start made it current

	// A protected plan under the previous build; its failover waits at
	// its gate.
	u.mustPrev("protect", "start", u.plan, "--primary", "east", "--interval", "1s")
	u.waitProtected("e2e", 2)
	u.mustPrev("failover", u.plan, "--to", "west", "--yes")
	u.waitGate("beforeFence")
	u.on(workflows.ActionID("e2e"), u.prev, enumspb.VERSIONING_BEHAVIOR_PINNED)
	u.on(workflows.ProtectID("e2e"), u.prev, enumspb.VERSIONING_BEHAVIOR_AUTO_UPGRADE)
	u.on(workflows.RecordID("e2e"), u.prev, enumspb.VERSIONING_BEHAVIOR_AUTO_UPGRADE)
	t.Logf("upgrade: %s protected, its failover at its gate on %s (%v in)", "e2e", u.prev, time.Since(t0).Round(time.Second))

	{ // the upgrade
		u.switchTo(t, u.this, u.prev, u.thisProc, u.prevProc, func() { u.startThis(t) })
		u.pinnedActionEnds(t, workflows.ActionID("e2e"), u.prev, u.prevProc)
		u.eventually(time.Minute, "the record to hold the failover to west", func() (bool, string) {
			rec, err := workflows.ReadRecord(context.Background(), u.c, "e2e")
			if err != nil || rec == nil {
				return false, fmt.Sprint(err)
			}
			a := rec.LastAction
			return rec.Primary == "west" && a != nil && a.Action == "failover" && a.Outcome == "completed", fmt.Sprintf("%+v %+v", rec, a)
		})
		u.on(workflows.RecordID("e2e"), u.this, enumspb.VERSIONING_BEHAVIOR_AUTO_UPGRADE)
		u.lastTaskBy(t, workflows.RecordID("e2e"), u.thisProc)
		if !u.runningOn("west") {
			t.Fatal("the application does not run on west after the failover")
		}

		// A new action starts on the new build.
		u.must("reprotect", u.plan, "--yes")
		u.waitGate("beforeDemote")
		u.on(workflows.ActionID("e2e"), u.this, enumspb.VERSIONING_BEHAVIOR_PINNED)
		u.must("approve", "e2e", "--yes")
		u.must("watch", "e2e")
		u.allTasksBy(t, workflows.ActionID("e2e"), 0, u.thisProc)

		u.drainAndStop(t, u.prev, u.prevProc)
		u.check()
		t.Logf("upgrade: %s to %s done (%v in)", u.prev, u.this, time.Since(t0).Round(time.Second))
	}

	{ // the rollback
		u.waitProtected("e2e", 2)
		u.must("failback", u.plan, "--to", "east", "--yes")
		u.waitGate("beforeDemote")
		u.on(workflows.ActionID("e2e"), u.this, enumspb.VERSIONING_BEHAVIOR_PINNED)
		before, err := workflows.ReadProtect(context.Background(), u.c, "e2e")
		if err != nil {
			t.Fatal(err)
		}
		recBefore, err := workflows.ReadRecord(context.Background(), u.c, "e2e")
		if err != nil || recBefore == nil {
			t.Fatalf("the record before the rollback: %v", err)
		}
		// Which of the two auto-upgrade runs took the new path on this
		// build (what the previous build cannot replay): those stay, the
		// others move back. Protect must have: its sealed record
		// changes are what this half proves a rollback cannot undo.
		var stay, move []string
		for _, id := range []string{workflows.ProtectID("e2e"), workflows.RecordID("e2e")} {
			if why := u.newPath(t, id, "record-proof", names.UpdatePlanVersion); why != "" {
				t.Logf("upgrade: %s took the new path on %s: %s", id, u.this, why)
				stay = append(stay, id)
			} else {
				move = append(move, id)
			}
		}
		if !slices.Contains(stay, workflows.ProtectID("e2e")) {
			t.Fatalf("Protect did not take the patch on %s; the rollback would prove nothing of the upgrade guide's promise", u.this)
		}
		t.Logf("upgrade: took the new path on %s: %v; did not: %v", u.this, stay, move)
		marks := map[string]int64{}
		for _, id := range stay {
			marks[id] = u.lastEvent(id)
		}

		// The upgrade guide's rollback: the previous build's workers beside
		// the new build's, then made current.
		u.restart(u.prevProc)
		u.current(u.this)
		u.temporal("worker", "deployment", "set-current-version", "--deployment-name", names.Deployment, "--build-id", u.prev, "--yes")
		u.current(u.prev)
		for _, id := range move {
			u.on(id, u.prev, enumspb.VERSIONING_BEHAVIOR_AUTO_UPGRADE)
		}
		// Protect's workflow tasks go to the previous build and fail
		// there: it stays on this build, Temporal shows the failure.
		u.stuck(t, workflows.ProtectID("e2e"), marks[workflows.ProtectID("e2e")])
		out, code := u.drctl("status", "e2e")
		if code == 0 || !strings.Contains(out, `the protection state of plan "e2e" cannot be read on the current build `+u.prev) ||
			!strings.Contains(out, "--build-id "+u.this) {
			t.Fatalf("drctl status during the rollback exited %d; want it to say that the protection state cannot be read on %s and to make %s current:\n%s", code, u.prev, u.this, out)
		}

		// The failback pinned to this build finishes on it.
		u.eventually(time.Minute, u.this+" draining, the failback on it", func() (bool, string) {
			running, status := u.drainage(u.this)
			return status == client.WorkerDeploymentVersionDrainageStatusDraining && slices.Contains(running, workflows.ActionID("e2e")),
				fmt.Sprintf("%v, running %v", status, running)
		})
		u.mark = u.lastEvent(workflows.ActionID("e2e"))
		u.must("approve", "e2e", "--yes")
		u.pinnedActionEnds(t, workflows.ActionID("e2e"), u.this, u.thisProc)
		if !u.runningOn("east") || u.runningOn("west") {
			t.Fatalf("after the failback the application runs on east %v, on west %v; want east only", u.runningOn("east"), u.runningOn("west"))
		}
		// Its change reached the record, whose tasks fail on the
		// previous build too if it took the new path.
		for _, id := range stay {
			u.stuck(t, id, marks[id])
		}

		// A new action starts on the build rolled back to.
		u.must("drill", u.plan, "--to", "west", "--wait")
		u.on(workflows.ActionID("e2e"), u.prev, enumspb.VERSIONING_BEHAVIOR_PINNED)
		u.allTasksBy(t, workflows.ActionID("e2e"), 0, u.prevProc)
		drill := u.lastEvent(workflows.ActionID("e2e"))
		dd, err := u.c.DescribeWorkflowExecution(context.Background(), workflows.ActionID("e2e"), "")
		if err != nil {
			t.Fatal(err)
		}
		drillRun := dd.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		for _, id := range stay {
			u.stuck(t, id, marks[id]) // still: nothing done on the previous build
		}

		// Roll forward: this build current again, the stuck runs carry
		// on from where they stopped, nothing lost.
		u.temporal("worker", "deployment", "set-current-version", "--deployment-name", names.Deployment, "--build-id", u.this, "--yes")
		u.current(u.this)
		u.eventually(time.Minute, "protection to record a sync on "+u.this+" again", func() (bool, string) {
			ps, err := workflows.ReadProtect(context.Background(), u.c, "e2e")
			if err != nil {
				return false, err.Error()
			}
			return ps.LastSync().After(before.LastSync()) && u.lastTaskIs(workflows.ProtectID("e2e"), u.thisProc),
				fmt.Sprintf("last sync %v (before the rollback %v)", ps.LastSync(), before.LastSync())
		})
		u.on(workflows.ProtectID("e2e"), u.this, enumspb.VERSIONING_BEHAVIOR_AUTO_UPGRADE)
		// The record takes the changes sent while it waited: the drill's
		// (the previous build's, unsealed: held as the last action, or
		// listed as refused if the record took the sealed path; either
		// way not lost) and the failback's before it.
		u.eventually(time.Minute, "the record to take the changes sent while it waited, on "+u.this, func() (bool, string) {
			rec, err := workflows.ReadRecord(context.Background(), u.c, "e2e")
			if err != nil || rec == nil {
				return false, fmt.Sprint(err)
			}
			a := rec.LastAction
			held := a != nil && a.RunID == drillRun && a.Outcome == "completed"
			for _, r := range rec.Refused {
				// (A record of this build names no sender of a change
				// it refuses: it cannot know who sent it.)
				held = held || (r.From == workflows.ActionID("e2e") || r.From == workflows.UnknownSender) && rec.RefusedCount > recBefore.RefusedCount
			}
			return rec.Primary == "east" && rec.Changes > recBefore.Changes && held && u.lastTaskIs(workflows.RecordID("e2e"), u.thisProc),
				fmt.Sprintf("%+v %+v", rec, a)
		})
		u.on(workflows.RecordID("e2e"), u.this, enumspb.VERSIONING_BEHAVIOR_AUTO_UPGRADE)
		rec, _ := workflows.ReadRecord(context.Background(), u.c, "e2e")
		t.Logf("upgrade: rolled forward to %s: the record took %d changes since the rollback began, last action %+v, refused %d", u.this, rec.Changes-recBefore.Changes, rec.LastAction, rec.RefusedCount)
		if n := u.lastEvent(workflows.ActionID("e2e")); n != drill {
			t.Fatalf("the drill's history grew after it ended (%d events, then %d)", drill, n)
		}

		u.drainAndStop(t, u.prev, u.prevProc)
		u.check()
		t.Logf("upgrade: rollback to %s and forward again done (%v in)", u.prev, time.Since(t0).Round(time.Second))
	}
}

// events is the history of the workflow's latest run, read within 30 s.
func (u *upgrade) events(id string) ([]*historypb.HistoryEvent, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*historypb.HistoryEvent
	it := u.c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// newPath says what in the workflow's latest run the previous build
// cannot replay, "" if nothing: the workflow.GetVersion marker of
// change, or an accepted update of a kind the previous build has no
// handler for (the plan version a newer action presents to the record).
func (u *upgrade) newPath(t *testing.T, id, change, update string) string {
	t.Helper()
	events, err := u.events(id)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if a := e.GetWorkflowExecutionUpdateAcceptedEventAttributes(); a != nil && a.GetAcceptedRequest().GetInput().GetName() == update {
			return fmt.Sprintf("update %s accepted (event %d)", update, e.GetEventId())
		}
		m := e.GetMarkerRecordedEventAttributes()
		if e.GetEventType() != enumspb.EVENT_TYPE_MARKER_RECORDED || m.GetMarkerName() != "Version" {
			continue
		}
		for _, p := range m.GetDetails()["change-id"].GetPayloads() {
			if strings.Contains(string(p.GetData()), change) {
				return fmt.Sprintf("version marker %s (event %d)", change, e.GetEventId())
			}
		}
	}
	return ""
}

// stuck waits until the workflow, a run that took a path the current
// (previous) build does not have, shows what the upgrade guide says of it: its
// workflow task failed on the previous build's worker and is being
// tried again (Temporal's describe), it stays on this build (no task of
// it completed since event after, by anyone), and it still runs.
func (u *upgrade) stuck(t *testing.T, id string, after int64) {
	t.Helper()
	prevID := u.st.WorkerIdentity(u.prevProc)
	u.eventually(time.Minute, id+"'s workflow tasks failing on "+u.prev, func() (bool, string) {
		d, err := u.c.DescribeWorkflowExecution(context.Background(), id, "")
		if err != nil {
			return false, err.Error()
		}
		info := d.GetWorkflowExecutionInfo()
		vi := info.GetVersioningInfo()
		wt := d.GetPendingWorkflowTask()
		failed, cause := u.taskFailures(t, id, after, prevID)
		return info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING && vi.GetDeploymentVersion().GetBuildId() == u.this &&
				wt != nil && wt.GetAttempt() >= 2 && failed > 0,
			fmt.Sprintf("%v on %s, pending workflow task attempt %d, %d failed by %s (%s)", info.GetStatus(),
				vi.GetDeploymentVersion().GetBuildId(), wt.GetAttempt(), failed, u.prevProc, cause)
	})
	by, _, err := u.tasks(id, after)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range by {
		if w == prevID {
			t.Fatalf("%s: a task ran to completion on %s after the rollback", id, u.prevProc)
		}
	}
	d, _ := u.c.DescribeWorkflowExecution(context.Background(), id, "")
	_, cause := u.taskFailures(t, id, after, prevID)
	t.Logf("upgrade: %s stays on %s, its workflow task attempt %d failing on %s: %s", id, u.this, d.GetPendingWorkflowTask().GetAttempt(), u.prev, cause)
}

// taskFailures counts the workflow task failures by identity after event
// after, and gives the last one's cause and message.
func (u *upgrade) taskFailures(t *testing.T, id string, after int64, identity string) (int, string) {
	events, err := u.events(id)
	if err != nil {
		return 0, err.Error()
	}
	n, last := 0, ""
	for _, e := range events {
		if f := e.GetWorkflowTaskFailedEventAttributes(); e.GetEventId() > after && f != nil && f.GetIdentity() == identity {
			n++
			last = fmt.Sprintf("%v: %s", f.GetCause(), f.GetFailure().GetMessage())
		}
	}
	return n, last
}

// switchTo moves the deployment from build from to build to while an
// action pinned to from waits at its gate: start runs to's worker beside
// from's, the upgrade guide's command makes current, and Protect must move
// to it and carry on there (the record moves at its next change, which
// the action makes). from's worker must not be
// stoppable yet: the action runs on it. Then the gate is opened.
func (u *upgrade) switchTo(t *testing.T, to, from, toProc, fromProc string, start func()) {
	t.Helper()
	start()
	u.current(from) // a worker that starts beside the current build leaves it current
	u.temporal("worker", "deployment", "set-current-version", "--deployment-name", names.Deployment, "--build-id", to, "--yes")
	u.current(to)

	before, err := workflows.ReadProtect(context.Background(), u.c, "e2e")
	if err != nil {
		t.Fatal(err)
	}
	u.on(workflows.ProtectID("e2e"), to, enumspb.VERSIONING_BEHAVIOR_AUTO_UPGRADE)
	u.eventually(time.Minute, "protection to record a sync on "+to, func() (bool, string) {
		ps, err := workflows.ReadProtect(context.Background(), u.c, "e2e")
		if err != nil {
			return false, err.Error()
		}
		return ps.LastSync().After(before.LastSync()) && u.lastTaskIs(workflows.ProtectID("e2e"), toProc),
			fmt.Sprintf("last sync %v (before the switch %v)", ps.LastSync(), before.LastSync())
	})
	u.lastTaskBy(t, workflows.ProtectID("e2e"), toProc)

	// What runs on from: the pinned action at its gate, so its worker
	// stays.
	u.eventually(time.Minute, from+" draining, the action on it", func() (bool, string) {
		running, status := u.drainage(from)
		return status == client.WorkerDeploymentVersionDrainageStatusDraining && slices.Contains(running, workflows.ActionID("e2e")),
			fmt.Sprintf("%v, running %v", status, running)
	})
	running, _ := u.drainage(from)
	t.Logf("upgrade: %s is current; still on %s: %v", to, from, running)
	u.mark = u.lastEvent(workflows.ActionID("e2e"))
	u.must("approve", "e2e", "--yes")
}

// pinnedActionEnds waits for the action to complete and checks that
// every workflow and activity task of it after the gate was opened ran
// on its own build's worker, and that there were some.
func (u *upgrade) pinnedActionEnds(t *testing.T, id, build, proc string) {
	t.Helper()
	out := u.must("watch", "e2e")
	if st := u.actionStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("the action ended %v:\n%s", st, out)
	}
	u.on(id, build, enumspb.VERSIONING_BEHAVIOR_PINNED)
	n := u.allTasksBy(t, id, u.mark, proc)
	t.Logf("upgrade: the action pinned to %s ended there: after its gate %s, all by %s", build, n, proc)
}

// drainAndStop waits until nothing runs on build, as the upgrade
// guide's commands tell (the list of its running workflows empty, its drainage
// status drained), and only then stops its worker.
func (u *upgrade) drainAndStop(t *testing.T, build, proc string) {
	t.Helper()
	start := time.Now()
	u.eventually(2*time.Minute, build+" drained", func() (bool, string) {
		running, status := u.drainage(build)
		return len(running) == 0 && status == client.WorkerDeploymentVersionDrainageStatusDrained, fmt.Sprintf("%v, running %v", status, running)
	})
	t.Logf("upgrade: %s drained %v after its action ended; stopping %s", build, time.Since(start).Round(time.Second), proc)
	if err := u.st.Terminate(proc); err != nil {
		t.Fatal(err)
	}
}

// startThis starts this checkout's worker beside the previous build's,
// with the default --make-current: it must not make itself current.
func (u *upgrade) startThis(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := u.st.StartWorker(ctx, u.thisProc, filepath.Join(bin, "worker"), "--build-id", u.this); err != nil {
		t.Fatal(err)
	}
}

// current waits until build is the deployment's current version.
func (u *upgrade) current(build string) {
	u.t.Helper()
	h := u.c.WorkerDeploymentClient().GetHandle(names.Deployment)
	u.eventually(30*time.Second, build+" current", func() (bool, string) {
		d, err := h.Describe(context.Background(), client.WorkerDeploymentDescribeOptions{})
		if err != nil || d.Info.RoutingConfig.CurrentVersion == nil {
			return false, fmt.Sprint(err)
		}
		got := d.Info.RoutingConfig.CurrentVersion.BuildID
		return got == build, got
	})
}

// on waits until the workflow's latest run is on build with behaviour b.
func (u *upgrade) on(id, build string, b enumspb.VersioningBehavior) {
	u.t.Helper()
	u.eventually(time.Minute, fmt.Sprintf("%s on %s (%v)", id, build, b), func() (bool, string) {
		d, err := u.c.DescribeWorkflowExecution(context.Background(), id, "")
		if err != nil {
			return false, err.Error()
		}
		vi := d.GetWorkflowExecutionInfo().GetVersioningInfo()
		return vi.GetDeploymentVersion().GetBuildId() == build && vi.GetBehavior() == b,
			fmt.Sprintf("%s %v", vi.GetDeploymentVersion().GetBuildId(), vi.GetBehavior())
	})
}

// drainage is what the upgrade guide's commands tell of build: the running
// workflows on it (every behaviour) and its drainage status (pinned runs
// only).
func (u *upgrade) drainage(build string) ([]string, client.WorkerDeploymentVersionDrainageStatus) {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := u.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf(`TemporalWorkerDeploymentVersion="%s:%s" AND ExecutionStatus="Running"`, names.Deployment, build)})
	if err != nil {
		return []string{"(cannot list: " + err.Error() + ")"}, 0
	}
	var running []string
	for _, e := range resp.GetExecutions() {
		running = append(running, e.GetExecution().GetWorkflowId())
	}
	v, err := u.c.WorkerDeploymentClient().GetHandle(names.Deployment).DescribeVersion(ctx, client.WorkerDeploymentDescribeVersionOptions{BuildID: build})
	if err != nil || v.Info.DrainageInfo == nil {
		return running, client.WorkerDeploymentVersionDrainageStatusUnspecified
	}
	return running, v.Info.DrainageInfo.DrainageStatus
}

// tasks lists who completed each workflow task and started each
// activity task of the workflow's latest run after event after, and
// counts the activities and local activities among them (a local
// activity runs in the workflow task that records it).
func (u *upgrade) tasks(id string, after int64) (by []string, calls int, err error) {
	events, err := u.events(id)
	if err != nil {
		return nil, 0, err
	}
	for _, e := range events {
		if e.GetEventId() <= after {
			continue
		}
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			by = append(by, e.GetWorkflowTaskCompletedEventAttributes().GetIdentity())
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			by = append(by, e.GetActivityTaskStartedEventAttributes().GetIdentity())
			calls++
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			if e.GetMarkerRecordedEventAttributes().GetMarkerName() == "LocalActivity" {
				calls++
			}
		}
	}
	return by, calls, nil
}

// allTasksBy fails the test unless the workflow made activity or local
// activity calls after event after and the named worker ran every
// workflow and activity task since; it says how many of each.
func (u *upgrade) allTasksBy(t *testing.T, id string, after int64, proc string) string {
	t.Helper()
	by, calls, err := u.tasks(id, after)
	if err != nil {
		t.Fatal(err)
	}
	want := u.st.WorkerIdentity(proc)
	if len(by) == 0 || calls == 0 {
		t.Fatalf("%s: %d workflow or activity tasks, %d calls after event %d; want some of each", id, len(by), calls, after)
	}
	for i, w := range by {
		if w != want {
			t.Fatalf("%s: task %d of %d after event %d ran on %q, want %s (%q)", id, i+1, len(by), after, w, proc, want)
		}
	}
	return fmt.Sprintf("%d workflow and activity tasks, %d storage and hook calls", len(by), calls)
}

// lastTaskIs reports whether the named worker completed the latest run's
// last workflow task.
func (u *upgrade) lastTaskIs(id, proc string) bool {
	by, _, err := u.tasks(id, 0)
	return err == nil && len(by) > 0 && by[len(by)-1] == u.st.WorkerIdentity(proc)
}

// lastTaskBy waits until the named worker completed the workflow's last
// task.
func (u *upgrade) lastTaskBy(t *testing.T, id, proc string) {
	t.Helper()
	u.eventually(time.Minute, id+"'s last task by "+proc, func() (bool, string) { return u.lastTaskIs(id, proc), "" })
}

// lastEvent is the ID of the latest run's last event.
func (u *upgrade) lastEvent(id string) int64 {
	u.t.Helper()
	d, err := u.c.DescribeWorkflowExecution(context.Background(), id, "")
	if err != nil {
		u.t.Fatal(err)
	}
	return d.GetWorkflowExecutionInfo().GetHistoryLength()
}

// waitGate waits until the plan's action waits at gate.
func (u *upgrade) waitGate(gate string) {
	u.t.Helper()
	u.eventually(time.Minute, "the action at gate "+gate, func() (bool, string) {
		p, err := u.progress()
		if err != nil {
			return false, err.Error()
		}
		for _, s := range p.Steps {
			if s.ID == "approve/"+gate && s.State == workflows.StateWaiting {
				return true, ""
			}
		}
		return false, p.State
	})
}

// prevDrctl runs the previous build's drctl against the stack.
func (u *upgrade) prevDrctl(args ...string) (string, int) {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(u.prevBin, "drctl"), args...)
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+u.st.Layout.Temporal, "TEMPORAL_NAMESPACE=default")
	out, err := cmd.CombinedOutput()
	code := bintest.ExitCode(err)
	u.t.Logf("$ drctl(%s) %s  (exit %d)\n%s", u.prev, strings.Join(args, " "), code, out)
	return string(out), code
}

func (u *upgrade) mustPrev(args ...string) {
	u.t.Helper()
	if out, code := u.prevDrctl(args...); code != 0 {
		u.t.Fatalf("drctl(%s) %s exited %d:\n%s", u.prev, strings.Join(args, " "), code, out)
	}
}

// temporal runs the Temporal CLI against the stack, as the upgrade
// guide's commands are run, and fails the test unless it exits 0.
func (u *upgrade) temporal(args ...string) string {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "temporal"), args...)
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+u.st.Layout.Temporal, "TEMPORAL_NAMESPACE=default")
	out, err := cmd.CombinedOutput()
	u.t.Logf("$ temporal %s\n%s", strings.Join(args, " "), out)
	if err != nil {
		u.t.Fatalf("temporal %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}
