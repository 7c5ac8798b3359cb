package e2e_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/internal/stack"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestScenarios runs the operator's scenarios in order on one stack.
func TestScenarios(t *testing.T) {
	h := start(t, 4, 2)
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow() // each scenario starts where the last one left
		}
	}

	step("bad plans are refused with exit 2", func(t *testing.T) {
		good, err := os.ReadFile(h.plan)
		if err != nil {
			t.Fatal(err)
		}
		bad := map[string]struct{ edit, says string }{
			"yaml.yaml":        {"volumeGroups: [unclosed\n", "yaml"},
			"unknown-key.yaml": {strings.Replace(string(good), "parallelism:", "paralelism:", 1), "paralelism"},
			"unknown-site.yaml": {strings.Replace(string(good), "west: {groupID: vg-0001}", "north: {groupID: vg-0001}", 1),
				"north"},
			"bad-cidr.yaml": {strings.Replace(string(good), "127.0.0.3/32", "127.0.0.300/32", 1), "127.0.0.300/32"},
		}
		for name, b := range bad {
			p := filepath.Join(h.dir, name)
			if err := os.WriteFile(p, []byte(b.edit), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"plan", "validate", p}, {"failover", p, "--to", "west", "--yes"}} {
				out, code := h.drctl(args...)
				if code != 2 || !strings.Contains(out, b.says) {
					t.Errorf("drctl %s: exit %d, want 2 and a message naming %q:\n%s", strings.Join(args, " "), code, b.says, out)
				}
			}
		}
		if _, code := h.drctl("failover", h.plan, "--to", "nowhere", "--yes"); code != 2 {
			t.Errorf("failover to a site the plan lacks: exit %d, want 2", code)
		}
		if st := h.actionStatus(); st != 0 {
			t.Fatalf("a refused plan started an action (status %v)", st)
		}
	})

	h.must("plan", "validate", h.plan)
	h.must("protect", "start", h.plan, "--primary", "east", "--interval", "1s")
	h.startWriters()
	h.waitWrites("east", "acknowledged", acked, 40)
	h.waitProtected("e2e", 4)
	h.check()

	step("a drill changes nothing", func(t *testing.T) {
		h.stopWriters()
		h.syncedAndIdle()
		before := h.stateFiles()
		if len(before) < 2*5 { // site.json and one file per group, per site
			t.Fatalf("only %d state files: %v", len(before), before)
		}
		out := h.must("drill", h.plan, "--to", "west", "--wait")
		if !strings.Contains(out, "completed") {
			t.Fatalf("drill output lacks its outcome:\n%s", out)
		}
		after := h.stateFiles()
		if !maps.Equal(before, after) {
			for k, v := range after {
				if before[k] != v {
					t.Errorf("%s changed", k)
				}
			}
			for k := range before {
				if _, ok := after[k]; !ok {
					t.Errorf("%s went away", k)
				}
			}
			t.Fatal("the drill changed the storage state")
		}
		t.Logf("%d state files byte for byte the same after the drill", len(after))
		if !h.runningOn("east") && h.runningOn("west") {
			t.Fatal("the drill moved the application")
		}
		h.check()
		h.startWriters()
	})

	step("unplanned failover while writing, a second one refused", func(t *testing.T) {
		h.waitWrites("east", "acknowledged", acked, 40)
		h.siteDown("east")
		h.waitWrites("east", "refused by the lost site", func(c stack.WriteCounts) int { return c.Unavailable }, 5)
		// Slow promotions keep the failover running while the second
		// one is tried.
		h.faults("west", sim.FaultRule{Method: "PromoteVolume", Latency: 1500 * time.Millisecond})
		h.must("failover", h.plan, "--to", "west", "--yes")
		out, code := h.drctl("failover", h.plan, "--to", "west", "--yes")
		if code != 1 || !strings.Contains(out, "already has a DR action running: Failover") {
			t.Fatalf("second failover: exit %d, want 1 and the running action named:\n%s", code, out)
		}
		h.must("watch", "e2e")
		h.baseFaults()
		var res workflows.FailoverResult
		if err := h.c.GetWorkflow(context.Background(), workflows.ActionID("e2e"), "").Get(context.Background(), &res); err != nil {
			t.Fatal(err)
		}
		if res.RTO <= 0 || !res.RPOKnown {
			t.Fatalf("failover result: RTO %v, RPO known %v", res.RTO, res.RPOKnown)
		}
		t.Logf("RTO %v, RPO estimate %v", res.RTO, res.RPO)
		// The worker runs with Worker Versioning, as in production.
		build, err := stack.PinnedBuild(context.Background(), h.c, workflows.ActionID("e2e"))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the failover ran pinned to build %s", build)
		h.waitWrites("west", "acknowledged", acked, 40)
		if !h.runningOn("west") {
			t.Fatal("the application does not run on west")
		}
		r := h.check()
		if lostOn(r, "west") != 0 {
			t.Fatalf("writes west acknowledged were lost: %v", r.Lost)
		}
		t.Logf("%d writes east acknowledged after its last sync were lost, as the RPO allows", lostOn(r, "east"))
	})

	step("reprotect the returned site", func(t *testing.T) {
		h.siteUp("east")
		h.waitWrites("east", "refused by the fence", fenced, 5)
		h.must("reprotect", h.plan, "--yes", "--wait")
		h.waitWrites("east", "refused by east's secondary copies", readOnly, 5)
		simtest.Eventually(t, 30*time.Second, "east's copies to be in-sync secondaries", func() bool {
			for _, s := range h.states() {
				for _, u := range s.Units {
					if (s.Site == "east") != (u.Role == sim.RoleSecondary) || (u.Role == sim.RoleSecondary && !u.InSync) {
						return false
					}
				}
			}
			return true
		})
		h.check()
	})

	step("failback loses no write", func(t *testing.T) {
		before := lostOn(h.check(), "west")
		h.must("failback", h.plan, "--to", "east", "--yes", "--wait")
		h.waitWrites("east", "acknowledged", acked, 40)
		h.waitWrites("west", "refused by west's secondary copies", readOnly, 5)
		if !h.runningOn("east") || h.runningOn("west") {
			t.Fatalf("the application runs on east %v, on west %v; want east only", h.runningOn("east"), h.runningOn("west"))
		}
		t.Logf("since the drill: east's application %v; west's %v", h.counts("east"), h.counts("west"))
		h.stopWriters()
		r := h.check()
		if lost := lostOn(r, "west") - before; lost != 0 {
			t.Fatalf("the failback lost %d acknowledged writes: %v", lost, r.Lost)
		}
		h.must("status", "e2e")
	})
}
