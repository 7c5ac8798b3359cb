package e2e_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/conformance"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/internal/stack"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// cephPlan turns the e2e plan into one a real ceph-csi accepts: a
// clusterID in every storage call's parameters (its fence calls need it)
// and a schedulingInterval of whole minutes (it takes only ^\d+[mhd]$);
// the sites run a minute of schedule in cephMinute.
func cephPlan(text string) string {
	text = regexp.MustCompile(`storage: \{endpoint: ("[^"]*")\}`).ReplaceAllString(text, `storage: {endpoint: $1, parameters: {clusterID: rook-ceph}}`)
	return strings.ReplaceAll(text, "{mirroringMode: snapshot, schedulingInterval: 1s}", "{mirroringMode: snapshot, schedulingInterval: 1m}")
}

// cephMinute is how long the sites' "1m" lasts: a mirror snapshot every
// second once a promotion has added the schedule.
const cephMinute = time.Second

// cephMirrorRestart is how long the sites' primary copies answer INTERNAL
// "failed to get remote status" after their peer restarts from a power
// loss (real ceph-csi: at least 74 s).
const cephMirrorRestart = 20 * time.Second

// TestCephCSICycle runs one failover, reprotect and failback on sites that
// answer as ceph-csi does (drover-sim --driver ceph-csi): ListClusterFence
// panics, INVALID_ARGUMENT where the spec says FAILED_PRECONDITION, its
// parameter validation, a snapshot schedule only from PromoteVolume, its
// resync. The conformance suite passes against those sites first, and the
// invariants hold at the end.
func TestCephCSICycle(t *testing.T) {
	h := startWith(t, 2, 2, cephPlan, func(o *stack.Options) {
		o.Driver, o.ScheduleMinute, o.MirrorRestart, o.ScheduleRace = sim.DriverCephCSI, cephMinute, cephMirrorRestart, true
	})
	if raw, err := os.ReadFile(h.plan); err != nil || strings.Contains(string(raw), "schedulingInterval: 1s") || !strings.Contains(string(raw), "schedulingInterval: 1m") {
		t.Fatal("the plan does not ask for a schedule ceph-csi takes")
	}

	sites := h.st.Layout.Sites
	out, code := h.drctl("conformance", "-o", "json", "--plan", h.plan, "--site", sites[0].Name, "--cidr", "192.0.2.44/32", "--timeout", "10s")
	var rep conformance.Report
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Driver != sim.CephCSIDriverName {
		t.Fatalf("conformance against the ceph-csi sites: exit %d\n%s", code, out)
	}

	h.must("protect", "start", h.plan, "--primary", "east", "--interval", "1s")
	h.startWriters()
	h.waitWrites("east", "acknowledged", acked, 20)
	// Replication on for every group on both sites first: ceph-csi answers
	// a promotion of a copy not replicated with INVALID_ARGUMENT, which no
	// retry cures (the spec's FAILED_PRECONDITION goes back to the action).
	simtest.Eventually(t, 30*time.Second, "protection to record a sync of every group", func() bool {
		ps, err := workflows.ReadProtect(context.Background(), h.c, "e2e")
		return err == nil && len(ps.Groups) == 2 && !ps.LastSync().IsZero()
	})
	// The syncs keep coming: ceph-csi schedules them when a copy is
	// promoted, not when it is enabled, and protection promotes.
	seen := map[time.Time]bool{}
	simtest.Eventually(t, 30*time.Second, "protection to see the syncs keep coming", func() bool {
		ps, err := workflows.ReadProtect(context.Background(), h.c, "e2e")
		if err != nil || ps.LastSync().IsZero() {
			return false
		}
		seen[ps.LastSync()] = true
		return len(seen) >= 4
	})

	// East loses power: when it comes back, west's primary copies answer
	// as real ceph-csi does while east's restarted mirror daemon has not
	// reported them yet.
	h.sitePowerLoss("east")
	h.must("failover", h.plan, "--to", "west", "--yes", "--wait")
	pr, err := h.progress()
	if err != nil {
		t.Fatal(err)
	}
	verified := false
	for _, s := range pr.Steps {
		if s.Name == "verify fence of east" && strings.Contains(s.Output, "not read back") {
			verified = true
		}
	}
	if !verified {
		t.Errorf("the failover's fence verification does not say the fence was not read back: %+v", pr.Steps)
	}
	h.waitWrites("west", "acknowledged", acked, 20)

	h.siteUp("east")
	restarted := time.Now()
	h.waitWrites("east", "refused by the fence", fenced, 3)
	if time.Since(restarted) > cephMirrorRestart/2 {
		t.Fatalf("east's fenced writes took %s: the reprotect would start after west's storage recovered", time.Since(restarted))
	}
	h.must("reprotect", h.plan, "--yes", "--wait")
	// The reprotect waited the recovery out, and its report says what the
	// storage answered meanwhile.
	if pr, err := h.progress(); err != nil {
		t.Fatal(err)
	} else if i := slices.IndexFunc(pr.Steps, func(s *workflows.Step) bool { return s.Name == "check roles on west" }); i < 0 ||
		!strings.Contains(pr.Steps[i].Output, "was recovering") || !strings.Contains(pr.Steps[i].Output, "failed to get remote status: RBD image not found") {
		t.Fatalf("the reprotect's role check does not say it waited out west's recovering storage: %+v", pr.Steps)
	} else {
		t.Logf("the reprotect's role check: %s", pr.Steps[i].Output)
	}
	simtest.Eventually(t, 60*time.Second, "east's copies in-sync secondaries and nothing fenced", func() bool {
		for _, s := range h.states() {
			for _, f := range s.Fences {
				if f.Fenced {
					return false
				}
			}
			for _, u := range s.Units {
				if (s.Site == "east") != (u.Role == sim.RoleSecondary) || (u.Role == sim.RoleSecondary && !u.InSync) {
					return false
				}
			}
		}
		return true
	})

	// The plan's record learns the new direction from the protection the
	// reprotect restarts; failback checks its direction against it.
	simtest.Eventually(t, 30*time.Second, "the plan's record to name west the primary", func() bool {
		rec, err := workflows.ReadRecord(context.Background(), h.c, "e2e")
		return err == nil && rec != nil && rec.Primary == "west"
	})
	// ceph-csi cannot list its fences: status --verify says they were not
	// checked, which is no drift.
	if out, _ := h.drctl("status", h.plan, "--verify"); !strings.Contains(out, "east's fences not checked: its storage does not implement ListClusterFence") ||
		strings.Contains(out, "did not list its fences") {
		t.Errorf("status --verify on ceph-csi does not say its fences were not checked:\n%s", out)
	}

	// West's demotions take 1.5 s of a 1 s schedule: a tick falls in each,
	// and the copies are primary again just after, as on real Ceph. The
	// failback reads the roles back and demotes them again.
	h.faults("west", sim.FaultRule{Method: "DemoteVolume", Latency: 1500 * time.Millisecond, Count: 2})
	before := lostOn(h.check(), "west")
	h.must("failback", h.plan, "--to", "east", "--yes", "--wait")
	if pr, err := h.progress(); err != nil {
		t.Fatal(err)
	} else if i := slices.IndexFunc(pr.Steps, func(s *workflows.Step) bool { return s.Name == "check the demotion held on west" }); i < 0 ||
		!strings.Contains(pr.Steps[i].Output, "demoted again") {
		t.Fatalf("the failback's read-back does not say it demoted west's copies again: %+v", pr.Steps)
	} else {
		t.Logf("the failback's read-back: %s", pr.Steps[i].Output)
	}
	h.waitWrites("east", "acknowledged", acked, 20)
	h.stopWriters()
	r := h.check()
	if lost := lostOn(r, "west") - before; lost != 0 {
		t.Fatalf("the failback lost %d acknowledged writes: %v", lost, r.Lost)
	}
	if !h.runningOn("east") || h.runningOn("west") {
		t.Fatalf("the application runs on east %v, on west %v; want east only", h.runningOn("east"), h.runningOn("west"))
	}
}
