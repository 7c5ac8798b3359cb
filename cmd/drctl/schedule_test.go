package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enums "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

type scheduleRow struct {
	ID, Plan, Kind, Site, CreatedBy, Spec, Note, LastWorkflowID string
	Paused                                                      bool
	Next                                                        time.Time
}

type listed struct{ Type, WorkflowID, Status, By string }

// TestSchedules: drctl schedule runs a signed plan's drill every few
// seconds on a Temporal Schedule, each run recorded as started by the
// schedule and its creator under the plan's own action id; refuses an
// unsigned plan; pauses (with a note), unpauses and deletes. A
// scheduled run that finds the plan busy with another action does not
// run beside it: it fails, saying the plan is busy. A scheduled test
// recovery ends itself at its time limit, cleaned up, with nobody
// approving its end.
func TestSchedules(t *testing.T) {
	keys := t.TempDir()
	pub, key, err := plans.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := plans.EncodePrivateKey(key)
	pb, _ := plans.EncodePublicKey(pub)
	keyFile, pubFile := filepath.Join(keys, "ops.key"), filepath.Join(keys, "ops.pub")
	if os.WriteFile(keyFile, kb, 0o600) != nil || os.WriteFile(pubFile, pb, 0o644) != nil {
		t.Fatal("write the keys")
	}
	st := newSiteStackWith(t, "--trusted-plan-key", pubFile)
	st.c.env = []string{"DROVER_PLAN_SIGNING_KEY=" + keyFile, "DROVER_BY=ops@example"}
	c := st.c
	hooks := filepath.Join(t.TempDir(), "hooks.log")
	shop := st.plan(t, "", "shop", "west", 0, "{groupID: vg-1, members: [v1]}", simtest.NodeA+"/32", fmt.Sprintf(`workloads:
  - name: app
    volumeGroups: [data]
    sites:
      east: {exec: {start: "true", stop: "true"}}
      west: {exec: {start: "echo real >> %[1]s", stop: "true", testStart: "echo test >> %[1]s", testStop: "echo test-stop >> %[1]s"}}
`, hooks))
	st.protect(shop)

	c.want(2, "schedules run signed plans only", "--sign-key=", "schedule", "create", shop, "--to", "west", "--every", "1h")
	c.want(2, "give one of --cron EXPR or --every DURATION", "schedule", "create", shop, "--to", "west")
	c.want(2, "--time-zone", "schedule", "create", shop, "--to", "west", "--cron", "0 3 * * 1", "--time-zone", "Mars/Olympus")

	c.ok(nil, "schedule", "create", shop, "--to", "west", "--every", "3s", "--jitter", "500ms")
	id := "drover-schedule-shop-drill"
	by := "schedule " + id + " (created by ops@example)"
	c.want(1, "exists already", "schedule", "create", shop, "--to", "west", "--every", "3s")
	// A run due while the previous one runs is skipped, never run beside it.
	desc, err := st.srv.Client.ScheduleClient().GetHandle(t.Context(), id).Describe(t.Context())
	if err != nil || desc.Schedule.Policy == nil || desc.Schedule.Policy.Overlap != enums.SCHEDULE_OVERLAP_POLICY_SKIP {
		t.Fatalf("the schedule's overlap policy: %v %+v", err, desc)
	}
	var runs []listed
	simtest.Eventually(t, 3*time.Minute, "two scheduled drills to complete", func() bool {
		runs = nil
		c.ok(&runs, "list", "--plan", "shop")
		n := 0
		for _, r := range runs {
			if r.Type == "Drill" && r.Status == "completed" && r.By == by && r.WorkflowID == workflows.ActionID("shop") {
				n++
			}
		}
		return n >= 2
	})
	var rows []scheduleRow
	c.ok(&rows, "schedule", "list")
	if len(rows) != 1 || rows[0].ID != id || rows[0].Plan != "shop" || rows[0].Kind != "drill" || rows[0].Site != "west" ||
		rows[0].CreatedBy != "ops@example" || rows[0].Spec != "every 3s, jitter 500ms" || rows[0].Paused || !strings.HasPrefix(rows[0].LastWorkflowID, id) {
		t.Fatalf("schedule list: %+v", rows)
	}

	c.ok(nil, "schedule", "pause", id, "--note", "audit freeze")
	c.ok(&rows, "schedule", "list")
	if len(rows) != 1 || !rows[0].Paused || rows[0].Note != "paused by ops@example: audit freeze" {
		t.Fatalf("paused schedule: %+v", rows)
	}

	// Busy: a manual drill against a site that is down holds the plan's
	// action id for a while; a run of the schedule meanwhile fails.
	st.west.Down()
	c.ok(nil, "drill", shop, "--to", "west")
	c.ok(nil, "schedule", "trigger", id)
	simtest.Eventually(t, 2*time.Minute, "the triggered run to fail for the busy plan", func() bool {
		resp, err := st.srv.Client.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{Namespace: "default",
			Query: "WorkflowType = 'Scheduled' AND ExecutionStatus = 'Failed'"})
		if err != nil || len(resp.GetExecutions()) == 0 {
			return false
		}
		e := resp.GetExecutions()[0].GetExecution()
		err = st.srv.Client.GetWorkflow(t.Context(), e.GetWorkflowId(), e.GetRunId()).Get(t.Context(), nil)
		if err == nil || !strings.Contains(err.Error(), `plan "shop" is busy`) {
			t.Fatalf("the failed scheduled run: %v", err)
		}
		return true
	})
	c.run("watch", "shop") // the manual drill ends, its checks of west failed
	if err := st.west.Up(); err != nil {
		t.Fatal(err)
	}
	c.ok(nil, "schedule", "unpause", id)
	c.ok(&rows, "schedule", "list")
	if len(rows) != 1 || rows[0].Paused {
		t.Fatalf("unpaused schedule: %+v", rows)
	}
	c.ok(nil, "schedule", "delete", id)
	c.ok(&rows, "schedule", "list")
	if len(rows) != 0 {
		t.Fatalf("after delete: %+v", rows)
	}
	c.want(2, "no schedule "+id, "schedule", "pause", id)

	// A scheduled test recovery: its workloads run on the copies for its
	// time limit, then it cleans up; nobody approves.
	before := leftOn(st.west)
	c.ok(nil, "schedule", "create", shop, "--kind", "test-recovery", "--at", "west", "--every", "1h", "--test-time-limit", "2s")
	tid := "drover-schedule-shop-test-recovery"
	c.ok(nil, "schedule", "trigger", tid)
	var o outcome
	simtest.Eventually(t, 3*time.Minute, "the scheduled test recovery to end", func() bool {
		code, out, _ := c.run("-o", "json", "status", workflows.TestRecoveryID("shop"))
		return code == 0 && strings.Contains(out, `"completed"`)
	})
	c.ok(&o, "watch", workflows.TestRecoveryID("shop"))
	if o.Status != "completed" || !strings.Contains(string(o.Result), `"cleaned": true`) && !strings.Contains(string(o.Result), `"cleaned":true`) {
		t.Fatalf("scheduled test recovery: %+v %s", o, o.Result)
	}
	if !strings.Contains(string(o.Result), "time limit of 2s reached") {
		t.Errorf("the test did not end at its time limit: %s", o.Result)
	}
	if n := leftOn(st.west); n != before {
		t.Errorf("copies left on west after the scheduled test: %d, before %d", n, before)
	}
	if b, _ := os.ReadFile(hooks); !strings.Contains(string(b), "test-stop") || strings.Contains(string(b), "real") {
		t.Errorf("hooks of the scheduled test: %q", b)
	}
	c.ok(&runs, "list", "--plan", "shop")
	found := false
	for _, r := range runs {
		found = found || (r.Type == "TestRecovery" && r.By == "schedule "+tid+" (created by ops@example)")
	}
	if !found {
		t.Errorf("no test recovery started by the schedule: %+v", runs)
	}
}
