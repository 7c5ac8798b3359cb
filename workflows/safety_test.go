package workflows_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// The tests in this file each guard one safety rule: each fails when its
// rule is broken. They look at the storage itself (roles, fences, data) at
// the moment a call is made, not only at the order of the calls.

// primariesOn lists the units that are primary on a site now.
func primariesOn(s *simtest.Site) []string {
	var out []string
	for _, u := range s.Snapshot().Units {
		if u.Role == sim.RolePrimary {
			out = append(out, u.Key())
		}
	}
	slices.Sort(out)
	return out
}

// noPromotion checks that no copy on the surviving site was promoted.
func noPromotion(t *testing.T, f *fixture, calls []call) {
	t.Helper()
	if i := indexOf(calls, "PromoteVolume", "", ""); i >= 0 {
		t.Fatalf("PromoteVolume was called: %v", calls[i])
	}
	if p := primariesOn(f.west); len(p) != 0 {
		t.Fatalf("west holds primaries %v though the lost site was never fenced", p)
	}
}

// failOverUntilAborted runs a failover of f's plan from east to west in
// which the operator aborts step once it pauses: the step as it paused
// (nil if nothing paused) and the storage calls made. The failover must
// end with the operator's abort.
func failOverUntilAborted(t *testing.T, f *fixture, step string) (*workflows.Step, *[]call) {
	t.Helper()
	env, calls := f.env(t)
	var paused *workflows.Step
	env.RegisterDelayedCallback(func() {
		paused = pausedStep(t, env)
		send(t, env, workflows.UpdateResolve, workflows.Decision{Step: step, Action: workflows.DecisionAbort}, nil, nil)
	}, time.Hour)
	env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	var ae *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &ae) || ae.Type() != workflows.ErrAborted {
		t.Fatalf("error %v, want the operator's abort", err)
	}
	return paused, calls
}

// TestFailoverNeedsReadyReplicatingStorage: a failover whose surviving
// site's storage answers Probe not ready, or does not advertise volume
// replication, stops at the preflight: nothing fenced, nothing promoted.
func TestFailoverNeedsReadyReplicatingStorage(t *testing.T) {
	for _, c := range []struct {
		name, want string
		setup      func(t *testing.T, f *fixture)
	}{
		{"not ready", `the storage of site "west" is not ready (Probe)`, func(t *testing.T, f *fixture) { f.west.SetReady(false) }},
		{"no replication", `the storage of site "west" lacks [VolumeReplication.VOLUME_REPLICATION]`, func(t *testing.T, f *fixture) {
			// West's identity service is another driver's, one that
			// does not replicate.
			other, _ := simtest.StartPair(t, simtest.Options{TweakA: func(c *sim.Config) { c.Unimplemented = []string{"PromoteVolume"} }})
			f.plan.Sites[1].Storage.Identity = other.Endpoint()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			f.east.Down()
			c.setup(t, f)
			f.plan.Policy.OnFailure = "abort"
			env, calls := f.env(t)
			env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
			var ae *temporal.ApplicationError
			if err := env.GetWorkflowError(); !errors.As(err, &ae) || ae.Type() != workflows.ErrPreflight || !strings.Contains(ae.Error(), c.want) {
				t.Fatalf("error %v, want a %s error saying %s", err, workflows.ErrPreflight, c.want)
			}
			noPromotion(t, f, *calls)
			if i := indexOf(*calls, "FenceClusterNetwork", "", ""); i >= 0 {
				t.Fatalf("fenced though the preflight failed: %v", (*calls)[i])
			}
		})
	}
}

// TestFailoverWithNothingToFence: the lost site lists no fence CIDRs and
// Protect recorded no clients for it. The fence step must pause with
// NotFenced, and nothing may be promoted; with onFailure abort, the action
// ends with NotFenced.
func TestFailoverWithNothingToFence(t *testing.T) {
	f := newFixture(t)
	f.east.Down()
	f.plan.Sites[0].Fence = plans.Fence{}

	paused, calls := failOverUntilAborted(t, f, "fence east")
	if paused == nil || paused.Name != "fence east" || !strings.Contains(paused.LastError, "no fence CIDRs and no clients") {
		t.Fatalf("paused step %+v, want the fence step paused for want of anything to fence", paused)
	}
	noPromotion(t, f, *calls)
	if indexOf(*calls, "FenceClusterNetwork", "", "") >= 0 {
		t.Fatalf("a fence with no CIDRs was sent: %v", *calls)
	}

	// The failure itself is NotFenced: with onFailure abort the action
	// ends with it.
	endsNotFenced(t, f)
}

// endsNotFenced runs the failover again with onFailure abort: it must end
// with NotFenced and promote nothing.
func endsNotFenced(t *testing.T, f *fixture) {
	t.Helper()
	f.plan.Policy.OnFailure = "abort"
	env, calls := f.env(t)
	env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	var ae *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &ae) || ae.Type() != workflows.ErrNotFenced {
		t.Fatalf("error %v, want NotFenced", err)
	}
	noPromotion(t, f, *calls)
}

// TestFailoverFencesRecordedClients: with no CIDRs in the plan, the
// failover fences exactly the clients Protect recorded for the lost site:
// those and no others are fenced on the storage, a recorded client cannot
// write to the promoted copies, and another site's client still can. The
// reprotect after it lifts them all.
func TestFailoverFencesRecordedClients(t *testing.T) {
	f := newFixture(t)
	f.east.Down()
	f.plan.Sites[0].Fence = plans.Fence{}
	recorded := []string{simtest.NodeA + "/32", "127.0.0.9/32"}

	var fencedAtPromote []string
	f.onCall = func(c call) {
		if c.name == "PromoteVolume" && fencedAtPromote == nil {
			fencedAtPromote = f.west.FencedCIDRs()
		}
	}
	var res workflows.FailoverResult
	_, err := f.run(t, workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west", Clients: recorded}, &res)
	mustOK(t, err)
	if !slices.Equal(fencedAtPromote, recorded) {
		t.Fatalf("fenced when the first promotion started: %v, want exactly %v", fencedAtPromote, recorded)
	}
	if got := f.west.FencedCIDRs(); !slices.Equal(got, recorded) {
		t.Fatalf("fenced on west: %v, want exactly the recorded clients %v", got, recorded)
	}
	if !slices.Equal(res.Fenced, recorded) {
		t.Fatalf("result says fenced %v, want %v", res.Fenced, recorded)
	}
	roles(t, f.west, sim.RolePrimary)

	ctx := context.Background()
	lost, err := sim.NewClient(f.west.DataAddr(), simtest.NodeA, "east-node")
	mustOK(t, err)
	defer lost.Close()
	if _, err := lost.Write(ctx, "v1", 1, []byte("from the lost site")); !errors.Is(err, sim.ErrFenced) {
		t.Fatalf("a recorded client of the lost site wrote to west: %v", err)
	}
	other, err := sim.NewClient(f.west.DataAddr(), simtest.NodeB, "west-node")
	mustOK(t, err)
	defer other.Close()
	if _, err := other.Write(ctx, "v1", 1, []byte("from west")); err != nil {
		t.Fatalf("west's own client was refused: %v", err)
	}

	// The reprotect lifts exactly what the failover fenced, though the
	// plan lists none of it: nothing stays fenced on either site.
	mustOK(t, f.east.Up())
	var rp workflows.ReprotectResult
	_, err = f.run(t, workflows.Reprotect, workflows.ReprotectInput{Plan: f.plan, From: "east", To: "west", Fenced: res.Fenced}, &rp)
	mustOK(t, err)
	for _, site := range []*simtest.Site{f.west, f.east} {
		if got := site.FencedCIDRs(); len(got) != 0 {
			t.Fatalf("after the reprotect %s still lists %v as fenced", site.Config.Name, got)
		}
	}
	i := slices.IndexFunc(rp.Steps, func(s *workflows.Step) bool { return s.ID == "unfence/east" })
	if i < 0 || !strings.Contains(rp.Steps[i].Output, strings.Join(recorded, ", ")) {
		t.Fatalf("unfence step of %+v, want it to name %v", rp.Steps, recorded)
	}
}

// TestFailoverVerifiesTheFence: storage that acknowledges the fence but
// never applies it (it does not list the CIDR in ListClusterFence) stops
// the failover at the verify step: it pauses with NotFenced, nothing is
// promoted, and the lost site's client can still write where it could.
func TestFailoverVerifiesTheFence(t *testing.T) {
	f := newFixture(t)
	f.east.Down()
	mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "FenceClusterNetwork", Discard: true, Probability: 1}}))
	paused, calls := failOverUntilAborted(t, f, "verify fence of east")
	if n := f.west.FaultCounts()["FenceClusterNetwork:DISCARDED"]; n == 0 {
		t.Fatal("the storage was never asked to fence")
	}
	if paused == nil || paused.Name != "verify fence of east" || !strings.Contains(paused.LastError, "127.0.0.2/32") {
		t.Fatalf("paused step %+v, want the verify step paused naming the missing CIDR", paused)
	}
	noPromotion(t, f, *calls)
	if got := f.west.FencedCIDRs(); len(got) != 0 {
		t.Fatalf("the fault should have left nothing fenced, west lists %v", got)
	}

	endsNotFenced(t, f)
}

// TestFailbackRollbackDemotesFirst: a failback whose promotion fails
// after some groups were promoted on the target rolls back by demoting
// those first: when the source is promoted again, no copy on the target
// is primary, every rollback demote came before the first promote on the
// source, and the invariants hold.
func TestFailbackRollbackDemotesFirst(t *testing.T) {
	f := newFixture(t)
	// East is primary: fail back "from east to west"; west's promotion of
	// the priority-1 volume is refused for good, after the priority-0
	// groups were promoted.
	var mu sync.Mutex
	var atSourcePromote [][]string
	f.onCall = func(c call) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case c.name == "PromoteVolume" && c.site == "west" && c.subject == "solo":
			mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "PromoteVolume", Code: "INVALID_ARGUMENT", Count: 100, Message: "pool is read-only"}}))
		case c.name == "PromoteVolume" && c.site == "east":
			atSourcePromote = append(atSourcePromote, primariesOn(f.west))
		}
	}
	env, calls := f.env(t)
	env.ExecuteWorkflow(workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "east", To: "west"})
	var ae *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &ae) || ae.Type() != workflows.ErrRolledBack {
		t.Fatalf("error %v, want a rollback", err)
	}
	if len(atSourcePromote) == 0 {
		t.Fatal("east was never promoted back")
	}
	for _, p := range atSourcePromote {
		if len(p) != 0 {
			t.Fatalf("west still held primaries %v when east was promoted back", p)
		}
	}
	// The rollback had something to demote: db and logs were promoted.
	var demoted []string
	firstSourcePromote := indexOf(*calls, "PromoteVolume", "east", "")
	for i, c := range *calls {
		if c.name == "DemoteVolume" && c.site == "west" {
			if !c.force {
				t.Fatalf("rollback demote without force: %v", c)
			}
			if firstSourcePromote < 0 || i > firstSourcePromote {
				t.Fatalf("rollback demote %v came after the first promote on east:\n%v", c, *calls)
			}
			demoted = append(demoted, c.subject)
		}
	}
	slices.Sort(demoted)
	if !slices.Equal(demoted, []string{"vg-1", "vg-2"}) {
		t.Fatalf("rollback demoted %v on west, want the promoted vg-1 and vg-2:\n%v", demoted, *calls)
	}
	roles(t, f.east, sim.RolePrimary)
	roles(t, f.west, sim.RoleSecondary)
	if r := sim.Check(f.east.Snapshot(), f.west.Snapshot()); !r.OK() {
		t.Fatalf("invariants: %s", r)
	}
}

// TestProtectSeesADeadPrimary: while the primary cannot be asked, the lag
// Protect reports keeps growing from the last sync it knew, round after
// round, and the plan goes out of RPO once the lag passes the target.
func TestProtectSeesADeadPrimary(t *testing.T) {
	f := newFixture(t)
	f.plan.Policy.RPOTarget = plans.Duration(45 * time.Second)
	env, _ := f.testEnv(t)
	var states []workflows.ProtectState
	look := func() {
		v, err := env.QueryWorkflow(workflows.QueryProtect)
		mustOK(t, err)
		var s workflows.ProtectState
		mustOK(t, v.Get(&s))
		states = append(states, s)
	}
	env.RegisterDelayedCallback(func() { look(); f.east.Down() }, 15*time.Second)
	for at := 25 * time.Second; at <= 135*time.Second; at += 10 * time.Second {
		env.RegisterDelayedCallback(look, at)
	}
	env.RegisterDelayedCallback(func() {
		send(t, env, workflows.UpdateStopProtect, workflows.StopProtect{}, nil, nil)
	}, 140*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	mustOK(t, env.GetWorkflowError())
	if len(states) < 2 {
		t.Fatalf("%d looks at the state", len(states))
	}
	before := states[0]
	if before.OutOfRPO || before.LastSync().IsZero() || len(before.Groups) != 3 {
		t.Fatalf("before the loss: %+v", before)
	}
	// Each round recorded after the loss (a new Checked time) reports a
	// longer lag than the round before it, from the same last sync.
	rounds := 0
	for i := 1; i < len(states); i++ {
		prev, cur := states[i-1], states[i]
		for g, h := range cur.Groups {
			p := prev.Groups[g]
			if h.Checked.Equal(p.Checked) {
				continue
			}
			rounds++
			if h.Lag <= p.Lag {
				t.Fatalf("round checked at %v: group %s lag %v did not grow from %v with the primary down", h.Checked, g, h.Lag, p.Lag)
			}
			if !h.LastSync.Equal(before.Groups[g].LastSync) {
				t.Fatalf("round checked at %v: group %s last sync %v, want the last one known, %v", h.Checked, g, h.LastSync, before.Groups[g].LastSync)
			}
		}
	}
	if rounds < 2*len(before.Groups) {
		t.Fatalf("only %d group records changed with the primary down", rounds)
	}
	last := states[len(states)-1]
	if !last.OutOfRPO {
		t.Fatalf("two minutes after the loss, against a 45s target, the plan is not out of RPO: %+v", last)
	}
	for g, h := range last.Groups {
		if !h.OutOfRPO || h.Lag <= 45*time.Second {
			t.Fatalf("group %s: %+v, want out of RPO with a lag past 45s", g, h)
		}
	}
}

// TestCycleActsOnObservedState runs failover, reprotect and failback and
// looks at the storage as each guarded call starts: every forced
// promotion on west finds east's client fenced; the unfence of east finds
// every east copy a secondary in sync, no longer resyncing, holding the
// write made on west; every promotion back on east finds no primary on
// west. The invariants hold at the end.
func TestCycleActsOnObservedState(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var mu sync.Mutex
	var problems []string
	seen := map[string]int{}
	f.onCall = func(c call) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case c.name == "PromoteVolume" && c.site == "west":
			seen["promote west"]++
			if !slices.Contains(f.west.FencedCIDRs(), simtest.NodeA+"/32") {
				problems = append(problems, "west promoted "+c.subject+" with east's client unfenced")
			}
		case c.name == "UnfenceClusterNetwork":
			seen["unfence"]++
			st := f.east.Snapshot()
			for _, key := range []string{"vg/vg-1", "vg/vg-2", "vol/solo"} {
				u := st.Unit(key)
				if u == nil || u.Role != sim.RoleSecondary || !u.InSync || u.Resyncing {
					problems = append(problems, "east was unfenced with "+key+" not a secondary in sync")
				}
			}
			if u := st.Unit("vg/vg-1"); u == nil || string(u.Blocks["v1"][5].Data) != "written on west" {
				problems = append(problems, "east was unfenced before it held west's write")
			}
		case c.name == "PromoteVolume" && c.site == "east":
			seen["promote east"]++
			if p := primariesOn(f.west); len(p) != 0 {
				problems = append(problems, "east promoted "+c.subject+" while west held primaries "+strings.Join(p, ","))
			}
		}
	}

	f.east.Down()
	_, err := f.run(t, workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"}, nil)
	mustOK(t, err)
	west, err := sim.NewClient(f.west.DataAddr(), simtest.NodeB, "west-node")
	mustOK(t, err)
	defer west.Close()
	_, err = west.Write(ctx, "v1", 5, []byte("written on west"))
	mustOK(t, err)
	mustOK(t, f.east.Up())
	_, err = f.run(t, workflows.Reprotect, workflows.ReprotectInput{Plan: f.plan, From: "east", To: "west"}, nil)
	mustOK(t, err)
	_, err = f.run(t, workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "west", To: "east"}, nil)
	mustOK(t, err)

	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatalf("unsafe calls:\n%s", strings.Join(problems, "\n"))
	}
	if seen["promote west"] < 3 || seen["unfence"] < 1 || seen["promote east"] < 3 {
		t.Fatalf("calls observed %v, want every promotion and the unfence", seen)
	}
	f.homeAgain(t, "v1", 5, "written on west")
}

// TestProtectCarriesItsOwnStateOnly: a run continued from the same
// primary keeps what the previous run recorded (no new enabling, the poll
// and run counts go on); state recorded for another primary is dropped,
// and replication is enabled on the new one.
func TestProtectCarriesItsOwnStateOnly(t *testing.T) {
	f := newFixture(t)
	prev := &workflows.ProtectState{Primary: "east", Enabled: true, Polls: 7, Runs: 3,
		Groups:  map[string]workflows.GroupHealth{"db": {LastSync: time.Now().Add(-time.Minute)}},
		Clients: map[string][]string{"east": {simtest.NodeA + "/32"}}}
	run := func(primary string) (workflows.ProtectState, []call) {
		return f.protectFor(t, workflows.ProtectInput{Plan: f.plan, Primary: primary, Interval: 10 * time.Second, State: prev})
	}
	same, calls := run("east")
	if same.Runs != 4 || same.Polls < 8 || same.Primary != "east" {
		t.Fatalf("continued from the same primary: runs %d polls %d, want the counts carried on (4, 8 or more)", same.Runs, same.Polls)
	}
	if i := indexOf(calls, "EnableVolumeReplication", "", ""); i >= 0 {
		t.Fatalf("replication enabled again though the carried state says it is: %v", calls[i])
	}

	other, calls := run("west")
	if other.Runs != 1 || other.Polls >= 7 || other.Primary != "west" {
		t.Fatalf("state of east carried to a protection from west: runs %d polls %d", other.Runs, other.Polls)
	}
	if indexOf(calls, "EnableVolumeReplication", "west", "") < 0 {
		t.Fatalf("replication was not enabled on the new primary: %v", calls)
	}
}

// TestFailbackRefusesStaleReplication: a planned move needs healthy
// replication no older than the plan's RPO target; past it, the failback
// ends in preflight and nothing is stopped, demoted or promoted.
func TestFailbackRefusesStaleReplication(t *testing.T) {
	f := newFixture(t)
	f.plan.Policy.RPOTarget = plans.Duration(1) // no replication can meet it
	f.plan.Policy.OnFailure = "abort"
	calls, err := f.run(t, workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "east", To: "west"}, nil)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != workflows.ErrPreflight || !strings.Contains(ae.Error(), "more than the RPO target") {
		t.Fatalf("error %v, want a preflight failure naming the RPO target", err)
	}
	for _, name := range []string{"StopWorkload", "DemoteVolume", "PromoteVolume"} {
		if i := indexOf(calls, name, "", ""); i >= 0 {
			t.Fatalf("a failback refused in preflight made the call %v", calls[i])
		}
	}
	roles(t, f.east, sim.RolePrimary)
	roles(t, f.west, sim.RoleSecondary)
}

// TestFailbackWaitsForTheFinalSync: while the target answers
// FAILED_PRECONDITION (the final sync has not landed), the failback waits
// and asks again instead of rolling back, then completes with no write
// lost.
func TestFailbackWaitsForTheFinalSync(t *testing.T) {
	f := newFixture(t)
	// db's group is refused twice: three attempts, two pauses.
	mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "PromoteVolume", Subject: "vg-1", Code: "FAILED_PRECONDITION", Count: 2, Message: "final sync not received yet"}}))
	var res workflows.FailbackResult
	_, err := f.run(t, workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "east", To: "west"}, &res)
	mustOK(t, err)
	if res.RolledBack {
		t.Fatalf("rolled back: %s", res.Reason)
	}
	attempts, said := 0, false
	for _, s := range res.Steps {
		if strings.HasPrefix(s.Name, "promote ") && strings.HasSuffix(s.Name, " on west") {
			attempts += s.Attempts
			// The step keeps the storage's last refusal.
			said = said || strings.Contains(s.LastError, "final sync not received yet")
		}
	}
	// Three groups promoted once each, and two answers of FAILED_PRECONDITION.
	if attempts != 5 {
		t.Fatalf("%d promotion attempts on west, want 5 (3 groups, 2 refusals)", attempts)
	}
	if !said {
		t.Errorf("no promotion step on west shows the storage's refusal: %+v", res.Steps)
	}
	// A refused group waits between its attempts, the pause doubling
	// from the plan's initial interval: one of it, then two.
	first := f.plan.Policy.Retry.InitialInterval.D()
	if first <= 0 {
		t.Fatal("the fixture's plan has no initial retry interval")
	}
	three := false
	for _, s := range res.Steps {
		if !strings.HasPrefix(s.Name, "promote ") || s.Attempts < 2 {
			continue
		}
		three = three || s.Attempts == 3
		if want := first * time.Duration(1<<(s.Attempts-1)-1); s.End.Sub(s.Start) < want {
			t.Errorf("%s made %d attempts in %v, want at least %v of pauses between them", s.Name, s.Attempts, s.End.Sub(s.Start), want)
		}
	}
	if !three {
		t.Errorf("no promotion step on west made three attempts: %+v", res.Steps)
	}
	roles(t, f.west, sim.RolePrimary)
	roles(t, f.east, sim.RoleSecondary)
	if r := sim.Check(f.east.Snapshot(), f.west.Snapshot()); !r.OK() {
		t.Fatalf("invariants: %s", r)
	}
}

// TestProtectPromotesOnceAndNeverMakesAPrimary: the operator's start of
// protection enables and then promotes, without force, the primary's
// copies (drivers such as ceph-csi schedule their syncs at promotion); a
// protection that follows an action (retarget, no Promote) makes no role
// call; and a start from a site whose copies are secondaries is refused
// by the storage, recorded, and changes no role: protection never makes
// a second primary, and does not pause.
func TestProtectPromotesOnceAndNeverMakesAPrimary(t *testing.T) {
	f := newFixture(t)
	run := func(primary string, promote bool) (workflows.ProtectState, []call) {
		return f.protectFor(t, workflows.ProtectInput{Plan: f.plan, Primary: primary, Interval: 10 * time.Second, Promote: promote})
	}
	s, calls := run("east", true)
	promoted := 0
	for i, c := range calls {
		if c.name != "PromoteVolume" {
			continue
		}
		if c.site != "east" || c.force {
			t.Fatalf("protection from east made the call %v", c)
		}
		if j := indexOf(calls, "EnableVolumeReplication", "east", c.subject); j < 0 || j > i {
			t.Fatalf("%v before replication was enabled on it: %v", c, calls)
		}
		promoted++
	}
	if promoted != 3 || len(s.Unpromoted) != 0 {
		t.Fatalf("protection from east promoted %d sources (unpromoted %v), want all 3: %v", promoted, s.Unpromoted, calls)
	}

	if _, calls := run("east", false); indexOf(calls, "PromoteVolume", "", "") >= 0 {
		t.Fatalf("a protection that follows an action made a role call: %v", calls)
	}

	s, calls = run("west", true)
	if len(s.Unpromoted) != len(f.plan.VolumeGroups) {
		t.Fatalf("protection from west, a secondary: unpromoted %v, want every group refused by the storage; calls %v", s.Unpromoted, calls)
	}
	for g, why := range s.Unpromoted {
		if !strings.Contains(why, "FailedPrecondition") {
			t.Errorf("group %s: %s; want the storage's refusal", g, why)
		}
	}
	roles(t, f.east, sim.RolePrimary)
	roles(t, f.west, sim.RoleSecondary)
}

// protectFor runs Protect with in for 15 seconds of workflow time, then
// stops it: its final state and the calls it made.
func (f *fixture) protectFor(t *testing.T, in workflows.ProtectInput) (workflows.ProtectState, []call) {
	t.Helper()
	env, calls := f.testEnv(t)
	env.RegisterDelayedCallback(func() {
		send(t, env, workflows.UpdateStopProtect, workflows.StopProtect{}, nil, nil)
	}, 15*time.Second)
	env.ExecuteWorkflow(workflows.Protect, in)
	mustOK(t, env.GetWorkflowError())
	var s workflows.ProtectState
	mustOK(t, env.GetWorkflowResult(&s))
	return s, *calls
}
