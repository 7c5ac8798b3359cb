package workflows_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// readOnly are the only calls a drill may make.
var readOnly = []string{"Probe", "GetCapabilities", "GetIdentity", "ListClusterFence", "GetFenceClients", "GetVolumeReplicationInfo", "DescribeWorkload"}

// TestDrill: a drill of a healthy plan passes every check and says what a
// failover would do; a drill of a broken one names each failed check. No
// drill changes anything.
func TestDrill(t *testing.T) {
	f := newFixture(t)
	var res workflows.DrillResult
	calls, err := f.run(t, workflows.Drill, workflows.DrillInput{Plan: f.plan, Action: "failover", From: "east", To: "west"}, &res)
	mustOK(t, err)
	if !res.OK || res.Failed != 0 {
		for _, s := range res.Steps {
			t.Logf("%s: %s %s", s.Name, s.State, s.LastError)
		}
		t.Fatal("the drill of a healthy plan failed")
	}
	if len(res.Steps) != 2*2+1+3+2 {
		t.Fatalf("%d checks, want storage and secrets on both sites, fencing, 3 groups, 2 workloads", len(res.Steps))
	}
	want := []string{"fence east's clients 127.0.0.2/32 through west", "force-promote on west: db, logs", "force-promote on west: loose", "start on west and wait healthy: pg"}
	for _, w := range want {
		if !slices.ContainsFunc(res.Would, func(s string) bool { return strings.HasPrefix(s, w) }) {
			t.Fatalf("the plan of the failover lacks %q:\n%s", w, strings.Join(res.Would, "\n"))
		}
	}

	// Break it: a secret the worker cannot resolve, and an RPO target no
	// replication can meet.
	f.plan.Sites[1].Storage.Secret = &plans.SecretRef{Env: "DROVER_DRILL_NOT_SET"}
	f.plan.Policy.RPOTarget = plans.Duration(1)
	more, err := f.run(t, workflows.Drill, workflows.DrillInput{Plan: f.plan, Action: "failover", From: "east", To: "west"}, &res)
	mustOK(t, err)
	failed := failedChecks(res)
	if res.OK || !strings.Contains(failed["secrets accepted on west"], "DROVER_DRILL_NOT_SET") || !strings.Contains(failed["replication of db fresh on east"], "more than the RPO target") {
		t.Fatalf("failed checks %v", failed)
	}
	for _, c := range append(calls, more...) {
		if !slices.Contains(readOnly, c.name) {
			t.Fatalf("a drill made the call %v", c)
		}
	}
	roles(t, f.east, sim.RolePrimary)
	roles(t, f.west, sim.RoleSecondary)
}

// TestDrillOfFailbackSaysTheStopOrder: a failback's drill lists the stop
// of the old primary's workloads tier by tier, highest priority number
// first, each waited for within the stop deadline, before any demotion.
func TestDrillOfFailbackSaysTheStopOrder(t *testing.T) {
	f := newFixture(t)
	var res workflows.DrillResult
	_, err := f.run(t, workflows.Drill, workflows.DrillInput{Plan: f.plan, Action: "failback", From: "east", To: "west"}, &res)
	mustOK(t, err)
	at := func(prefix string) int {
		return slices.IndexFunc(res.Would, func(s string) bool { return strings.HasPrefix(s, prefix) })
	}
	web := at("stop on east and wait until nothing of it runs (within 30s, else pause): web")
	pg := at("stop on east and wait until nothing of it runs (within 30s, else pause): pg")
	demote := at("demote on east without force")
	if web < 0 || pg < web || demote < pg {
		t.Fatalf("the failback's plan stops web (%d), then pg (%d), then demotes (%d)?\n%s", web, pg, demote, strings.Join(res.Would, "\n"))
	}
}

// TestDrillAgainstADownSiteFailsFast: a drill of a failover from a site
// that is down spends at most DrillCheckBudget (and a call's grace) on
// any check, instead of each call's whole retry budget, and names every
// failing check in its result.
func TestDrillAgainstADownSiteFailsFast(t *testing.T) {
	f := newFixture(t)
	f.east.Down()
	var res workflows.DrillResult
	_, err := f.run(t, workflows.Drill, workflows.DrillInput{Plan: f.plan, Action: "failover", From: "east", To: "west"}, &res)
	mustOK(t, err)
	bound := workflows.DrillCheckBudget + activities.CallGrace
	var failed []string
	for _, s := range res.Steps {
		if took := s.End.Sub(s.Start); took > bound {
			t.Errorf("check %q took %v of workflow time, more than %v", s.Name, took, bound)
		}
		if s.State == workflows.StateFailed {
			failed = append(failed, s.Name)
		}
	}
	want := []string{"storage ready on east", "secrets accepted on east", "replication of loose fresh on east", "replication of db fresh on east", "replication of logs fresh on east"}
	if !slices.Equal(failed, want) || res.OK || res.Failed != len(want) || len(res.Failures) != len(want) {
		t.Fatalf("failed checks %v (result: %d, %v); want %v", failed, res.Failed, res.Failures, want)
	}
	for i, f := range res.Failures {
		if !strings.HasPrefix(f, want[i]+": ") {
			t.Fatalf("failure %d is %q, want it to name %q and its error", i, f, want[i])
		}
	}
	// Each check shows its own attempts while it retries, as an action's
	// step does: what it waits on, not only its end.
	for _, s := range res.Steps {
		if s.Name == "storage ready on east" && (s.Retries == 0 || s.Note == "") {
			t.Errorf("the check of the down site's storage kept no attempts of its own: retries %d, note %q", s.Retries, s.Note)
		}
	}
	t.Logf("drill against a down site: %v of workflow time, %d checks failed", res.End.Sub(res.Start), res.Failed)
}

// TestDrillKeepsAShorterTimeLimit: DrillCheckBudget only cuts a plan's
// time limit; a plan whose calls may retry for less keeps its own limit
// in a drill, so a check of a site that is down fails within it.
func TestDrillKeepsAShorterTimeLimit(t *testing.T) {
	f := newFixture(t)
	f.east.Down()
	// A try every second, so that a longer limit would show as more tries.
	f.plan.Policy.Retry = plans.Retry{InitialInterval: plans.Duration(time.Second), MaximumInterval: plans.Duration(time.Second),
		BackoffCoefficient: 1, TimeLimit: plans.Duration(10 * time.Second)}
	var res workflows.DrillResult
	_, err := f.run(t, workflows.Drill, workflows.DrillInput{Plan: f.plan, Action: "failover", From: "east", To: "west"}, &res)
	mustOK(t, err)
	bound := 10*time.Second + activities.CallGrace
	failed := 0
	for _, s := range res.Steps {
		if took := s.End.Sub(s.Start); took > bound {
			t.Errorf("check %q took %v of workflow time, more than the plan's 10s limit and a call's grace", s.Name, took)
		}
		if s.State == workflows.StateFailed {
			failed++
		}
	}
	if failed == 0 || res.OK {
		t.Fatalf("no check failed against a site that is down: %+v", res.Failures)
	}
}

// TestDrillChecksFencingWithoutCIDRs: when the plan lists no fence CIDRs
// for the site a failover leaves, the drill checks that the target's
// storage can find its clients and fence them (GetFenceClients and
// NetworkFence); it passes saying so when it can, and fails naming what
// is missing when it cannot. The workload checks show what the
// orchestrator described, and fail when it cannot describe a workload.
func TestDrillChecksFencingWithoutCIDRs(t *testing.T) {
	f := newFixture(t)
	f.plan.Sites[0].Fence = plans.Fence{}
	step := func(res workflows.DrillResult, name string) *workflows.Step {
		t.Helper()
		for _, s := range res.Steps {
			if s.Name == name {
				return s
			}
		}
		t.Fatalf("no check %q in %v", name, res.Failures)
		return nil
	}
	var res workflows.DrillResult
	_, err := f.run(t, workflows.Drill, workflows.DrillInput{Plan: f.plan, Action: "failover", From: "east", To: "west"}, &res)
	mustOK(t, err)
	s := step(res, "fencing possible for east")
	if s.State != workflows.StateDone || s.Output != "CIDRs from GetFenceClients at failover time" {
		t.Fatalf("fencing check %s, %q (%s); want it passed, saying the CIDRs come from GetFenceClients", s.State, s.Output, s.LastError)
	}
	if w := step(res, "workload pg ready to start on west"); w.State != workflows.StateDone || !strings.Contains(w.Output, "exec hooks via") {
		t.Fatalf("workload check %s, %q; want it passed with the orchestrator's description", w.State, w.Output)
	}

	// West's identity service is another driver's, one that cannot list
	// the clients to fence; west's exec workloads name a shell it lacks.
	other, _ := simtest.StartPair(t, simtest.Options{TweakA: func(c *sim.Config) { c.Unimplemented = []string{"GetFenceClients"} }})
	f.plan.Sites[1].Storage.Identity = other.Endpoint()
	f.plan.Sites[1].Orchestrator.Exec.Shell = "/nonexistent/drill-shell"
	res = workflows.DrillResult{}
	_, err = f.run(t, workflows.Drill, workflows.DrillInput{Plan: f.plan, Action: "failover", From: "east", To: "west"}, &res)
	mustOK(t, err)
	s = step(res, "fencing possible for east")
	if s.State != workflows.StateFailed || !strings.Contains(s.LastError, "lacks") || !strings.Contains(s.LastError, "GET_CLIENTS_TO_FENCE") {
		t.Fatalf("fencing check %s, %q; want it failed naming GetFenceClients as missing", s.State, s.LastError)
	}
	if w := step(res, "workload pg ready to start on west"); w.State != workflows.StateFailed || !strings.Contains(w.LastError, "drill-shell") {
		t.Fatalf("workload check %s, %q (%s); want it failed naming the missing shell", w.State, w.LastError, w.Output)
	}
	if res.OK {
		t.Fatal("the drill passed")
	}
}

// TestDrillSeesDegradedReplication: replication that reports itself
// DEGRADED (the link to the peer is cut) fails the freshness check, by
// its status, while its lag is still well within the RPO target.
func TestDrillSeesDegradedReplication(t *testing.T) {
	f := newFixture(t)
	f.east.SetLink(false)
	// The next round of shipping (every 20 ms here) marks the copies
	// DEGRADED; the lag stays far below the RPO target of five minutes.
	rc := replication.NewControllerClient(dial(t, f.east))
	db := &replication.ReplicationSource{Type: &replication.ReplicationSource_Volumegroup{
		Volumegroup: &replication.ReplicationSource_VolumeGroupSource{VolumeGroupId: "vg-1"}}}
	simtest.Eventually(t, 20*time.Second, "a shipping round to see the link down", func() bool {
		info, err := rc.GetVolumeReplicationInfo(context.Background(), &replication.GetVolumeReplicationInfoRequest{ReplicationSource: db})
		return err == nil && info.GetStatus() == replication.GetVolumeReplicationInfoResponse_DEGRADED
	})
	var res workflows.DrillResult
	_, err := f.run(t, workflows.Drill, workflows.DrillInput{Plan: f.plan, Action: "failover", From: "east", To: "west"}, &res)
	mustOK(t, err)
	failed := failedChecks(res)
	if res.OK || !strings.Contains(failed["replication of db fresh on east"], "is DEGRADED") {
		t.Fatalf("failed checks %v, want db's freshness failed for its DEGRADED status", failed)
	}
}

// failedChecks are a drill's failed checks, by name, with their errors.
func failedChecks(res workflows.DrillResult) map[string]string {
	failed := map[string]string{}
	for _, s := range res.Steps {
		if s.State == workflows.StateFailed {
			failed[s.Name] = s.LastError
		}
	}
	return failed
}

// TestDrillSecretsCheck: the drill's secrets check is ListClusterFence,
// the one call that takes the fence's secrets without fencing. Storage
// that refuses them (UNAUTHENTICATED) fails the check with its reason;
// storage that does not implement the call (ceph-csi's RBD driver) passes
// it saying it was not checked, so that a plan on it can pass a drill.
func TestDrillSecretsCheck(t *testing.T) {
	f := newFixture(t)
	mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "ListClusterFence", Code: "UNAUTHENTICATED", Probability: 1, Message: "key rejected by the cluster"}}))
	var res workflows.DrillResult
	_, err := f.run(t, workflows.Drill, workflows.DrillInput{Plan: f.plan, Action: "failover", From: "east", To: "west"}, &res)
	mustOK(t, err)
	failed := failedChecks(res)
	if res.OK || len(failed) != 1 || !strings.Contains(failed["secrets accepted on west"], "key rejected by the cluster") {
		t.Fatalf("failed checks %v, want only west's secrets, with the storage's reason", failed)
	}

	unlisted := []sim.FaultRule{{Method: "ListClusterFence", Code: "UNIMPLEMENTED", Probability: 1}}
	mustOK(t, f.west.SetFaults(unlisted))
	mustOK(t, f.east.SetFaults(unlisted))
	_, err = f.run(t, workflows.Drill, workflows.DrillInput{Plan: f.plan, Action: "failover", From: "east", To: "west"}, &res)
	mustOK(t, err)
	if !res.OK {
		t.Fatalf("the drill on storage without ListClusterFence failed: %v", failedChecks(res))
	}
	for _, site := range []string{"east", "west"} {
		if s := stepOf(t, res.Progress, "check-secrets/"+site); s.State != workflows.StateDone || !strings.HasPrefix(s.Output, "not checked: the storage does not implement ListClusterFence") {
			t.Errorf("the secrets check on %s: %s %q, want done, saying it was not checked", site, s.State, s.Output)
		}
	}
}
