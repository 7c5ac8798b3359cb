package workflows_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/drover-dr/drover/activities"
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
	failed := map[string]string{}
	for _, s := range res.Steps {
		if s.State == workflows.StateFailed {
			failed[s.Name] = s.LastError
		}
	}
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
	t.Logf("drill against a down site: %v of workflow time, %d checks failed", res.End.Sub(res.Start), res.Failed)
}
