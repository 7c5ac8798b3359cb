package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestTestRecoveryCommand: drctl test-recovery starts the plan's test
// recovery at west while east replicates to it; the test workload runs on
// the copy and waits; drctl approve ends it; drctl watch shows it
// completed with everything deleted. West's replicas are as they were,
// and the real start hook never ran.
func TestTestRecoveryCommand(t *testing.T) {
	st := newSiteStack(t)
	c := st.c
	hooks := filepath.Join(t.TempDir(), "hooks.log")
	shop := st.plan(t, "", "shop", "west", 0, "{groupID: vg-1, members: [v1]}", simtest.NodeA+"/32", fmt.Sprintf(`workloads:
  - name: app
    volumeGroups: [data]
    sites:
      east: {exec: {start: "true", stop: "true"}}
      west: {exec: {start: "echo real >> %[1]s", stop: "true", testStart: "echo test $DROVER_WORKLOAD $DROVER_COPY_V1 >> %[1]s", testStop: "echo test-stop >> %[1]s"}}
`, hooks))
	st.protect(shop)
	before := st.west.Snapshot()

	c.ok(nil, "test-recovery", shop, "--at", "west")
	id := workflows.TestRecoveryID("shop")
	c.want(1, "has a test recovery running already", "test-recovery", shop, "--at", "west")
	simtest.Eventually(t, time.Minute, "the test workload to run", func() bool {
		code, out, _ := c.run("-o", "json", "status", id)
		var s statusOut
		return code == 0 && json.Unmarshal([]byte(out), &s) == nil && stepIn(s, "waiting for approval")
	})
	if n := len(st.west.Snapshot().Clones); n != 1 {
		t.Fatalf("%d copies on west while the test runs, want 1", n)
	}
	c.ok(nil, "approve", id, "--yes")
	var o outcome
	c.ok(&o, "watch", id)
	var res workflows.TestRecoveryResult
	if err := json.Unmarshal(o.Result, &res); err != nil || o.Status != "completed" || !res.Cleaned || len(res.Copies) != 1 || res.RTO["app"] <= 0 {
		t.Fatalf("test recovery: %v %+v %+v", err, o, res)
	}
	after := st.west.Snapshot()
	if n := len(after.Snapshots) + len(after.GroupSnapshots) + len(after.Clones); n != 0 {
		t.Fatalf("%d copies or snapshots left", n)
	}
	if d := sim.ReplicasUnchanged(before, after, false); len(d) != 0 {
		t.Fatalf("the replicas changed: %v", d)
	}
	log, err := os.ReadFile(hooks)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(log); !strings.Contains(s, "test app-test clone-") || !strings.Contains(s, "test-stop") || strings.Contains(s, "real") {
		t.Fatalf("hooks log:\n%s", s)
	}
	// The text summary.
	code, out, errs := c.run("watch", id)
	if code != 0 || !strings.Contains(out, "1 volume(s) copied, every copy and snapshot deleted") || !strings.Contains(out, "app healthy on its copies") {
		t.Fatalf("watch: exit %d\n%s%s", code, out, errs)
	}
}
