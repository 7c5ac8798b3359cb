package workflows_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// verify runs Verify of f's plan against rec in a fresh environment.
func (f *fixture) verify(t *testing.T, rec workflows.PlanRecord) workflows.VerifyResult {
	t.Helper()
	env, _ := f.testEnv(t)
	env.ExecuteWorkflow(workflows.Verify, workflows.VerifyInput{Plan: f.plan, Record: &rec})
	mustOK(t, env.GetWorkflowError())
	var res workflows.VerifyResult
	mustOK(t, env.GetWorkflowResult(&res))
	return res
}

// TestVerifyNamesEveryDrift: Verify compares the record with what each
// site's storage says, and names each difference, written out here case
// by case: a recorded fence the storage does not list, a listed fence
// the record does not hold, a primary the record does not name or the
// plan does not have, groups the recorded primary does not replicate
// from (five named, all counted), replication that is not healthy; a
// site or a group that does not answer is not verified, which is no
// drift. Storage that agrees gives no drift.
func TestVerifyNamesEveryDrift(t *testing.T) {
	f := newFixtureN(t, 150) // 153 groups: two survey calls of up to 100
	fenced := simtest.NodeA + "/32"
	simtest.Eventually(t, time.Minute, "every group synced once", func() bool {
		res := f.verify(t, workflows.PlanRecord{Primary: "east"})
		return len(res.Drift) == 0 && len(res.Checked) == 3
	})

	res := f.verify(t, workflows.PlanRecord{Primary: "east"})
	want := []string{"east lists 0 fenced CIDR(s)", "west lists 0 fenced CIDR(s)", "replication info of 153 group(s) on the recorded primary east"}
	if !slices.Equal(res.Checked, want) || len(res.Drift) != 0 {
		t.Fatalf("storage as recorded: checked %q, drift %q; want %q and none", res.Checked, res.Drift, want)
	}

	// A fence recorded through west that west does not list.
	rec := workflows.PlanRecord{Primary: "east", Fences: []workflows.FenceEntry{{Site: "east", Via: "west", CIDRs: []string{fenced}, By: "failover run r1"}}}
	res = f.verify(t, rec)
	if want := []string{"recorded as fenced through west (east's clients, by failover run r1), but west does not list " + fenced}; !slices.Equal(res.Drift, want) {
		t.Errorf("a recorded fence missing: drift %q, want %q", res.Drift, want)
	}

	// Fenced by hand through west: as recorded, no drift (the two sites
	// share the fence domain, so east lists it too, and it is recorded);
	// with the record holding none, each site's listing is drift.
	_, err := fence.NewFenceControllerClient(dial(t, f.west)).FenceClusterNetwork(t.Context(), &fence.FenceClusterNetworkRequest{Cidrs: []*fence.CIDR{{Cidr: fenced}}})
	mustOK(t, err)
	simtest.Eventually(t, time.Minute, "the fence listed by both sites", func() bool {
		return len(f.east.FencedCIDRs()) == 1 && len(f.west.FencedCIDRs()) == 1
	})
	if res = f.verify(t, rec); len(res.Drift) != 0 || res.Checked[0] != "east lists 1 fenced CIDR(s)" || res.Checked[1] != "west lists 1 fenced CIDR(s)" {
		t.Errorf("a fence as recorded: checked %q, drift %q", res.Checked, res.Drift)
	}
	res = f.verify(t, workflows.PlanRecord{Primary: "east"})
	if want := []string{"east lists " + fenced + " as fenced, but the record holds no such fence", "west lists " + fenced + " as fenced, but the record holds no such fence"}; !slices.Equal(res.Drift, want) {
		t.Errorf("an unrecorded fence: drift %q, want %q", res.Drift, want)
	}

	// The primary: none named, one the plan does not have, and the
	// secondary, which replicates from elsewhere for every group.
	res = f.verify(t, workflows.PlanRecord{Fences: rec.Fences})
	if want := []string{"the record names no primary site: no action or protection has said which it is"}; !slices.Equal(res.Drift, want) || len(res.Checked) != 2 {
		t.Errorf("no primary: checked %q, drift %q, want the fence checks and %q", res.Checked, res.Drift, want)
	}
	res = f.verify(t, workflows.PlanRecord{Primary: "north", Fences: rec.Fences})
	if want := []string{"the record names north as primary, a site the plan does not have"}; !slices.Equal(res.Drift, want) {
		t.Errorf("an unknown primary: drift %q, want %q", res.Drift, want)
	}
	res = f.verify(t, workflows.PlanRecord{Primary: "west", Fences: rec.Fences})
	if len(res.Drift) != 1 || !strings.HasPrefix(res.Drift[0], "the record names west as primary, but its storage says it does not replicate from there for 153 group(s): ") ||
		strings.Count(res.Drift[0], "; ") != 4 || !strings.Contains(res.Drift[0], "db (") {
		t.Errorf("the secondary as primary: drift %q, want all 153 groups counted and five named", res.Drift)
	}
	// east holds every primary copy: the drift says so, with the fix.
	if len(res.Drift) == 1 && (!strings.Contains(res.Drift[0], "The storage of east reports every copy asked (") ||
		!strings.Contains(res.Drift[0], "Fix: drctl reprotect PLAN --from west, PLAN the file of plan shop")) {
		t.Errorf("the secondary as primary: drift %q, want it to name east's storage and the fix", res.Drift)
	}

	// The primary's storage fails to answer for one group (the last by
	// name, in the second survey call): that group is not verified, and
	// that is no drift.
	mustOK(t, f.east.SetFaults([]sim.FaultRule{{Method: "GetVolumeReplicationInfo", Code: "INTERNAL", Probability: 1, Count: 1000,
		Subject: "vg-0150", Message: "injected"}}))
	res = f.verify(t, rec)
	if len(res.Drift) != 0 || len(res.Unverified) != 1 || !strings.HasPrefix(res.Unverified[0], "could not ask east about group vg-0150: ") || !strings.Contains(res.Unverified[0], "injected") {
		t.Errorf("one group not answered: drift %q, not verified %q", res.Drift, res.Unverified)
	}
	mustOK(t, f.east.SetFaults(nil))

	// The link cut: the primary's copies replicate DEGRADED, one drift
	// line per group.
	f.east.SetLink(false)
	simtest.Eventually(t, time.Minute, "replication degraded", func() bool {
		return len(f.verify(t, rec).Drift) == 153
	})
	res = f.verify(t, rec)
	if !strings.HasPrefix(res.Drift[0], "group ") || !strings.Contains(res.Drift[0], " on east replicates DEGRADED: ") {
		t.Errorf("degraded replication: drift %q", res.Drift[0])
	}
	f.east.SetLink(true)

	// West down: its fences cannot be listed, and that is said, as not
	// verified: a storage that cannot be reached shows no drift.
	f.west.Down()
	res = f.verify(t, rec)
	if len(res.Unverified) == 0 || !strings.HasPrefix(res.Unverified[0], "the storage of west did not list its fences: ") ||
		slices.ContainsFunc(res.Drift, func(d string) bool { return strings.Contains(d, "west did not list") }) {
		t.Errorf("west down: not verified %q, drift %q", res.Unverified, res.Drift)
	}
	if !slices.Contains(res.Checked, "east lists 1 fenced CIDR(s)") {
		t.Errorf("west down: checked %q, want east's fences checked still", res.Checked)
	}
}
