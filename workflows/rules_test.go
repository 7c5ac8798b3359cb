package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// The tests in this file each guard one safety rule that no test guarded
// before; each was seen failing against a deliberate breakage of its rule
// (TESTING.md names them). Where a rule is about the storage's state when
// a call is made, the test looks at the simulated storage as the call
// reaches its gRPC server (fixture.onRPC), not at the order of the calls.

// sourceKey is the simulator's unit key of a replication call's source.
func sourceKey(src *replication.ReplicationSource) string {
	if g := src.GetVolumegroup(); g != nil {
		return "vg/" + g.GetVolumeGroupId()
	}
	return "vol/" + src.GetVolume().GetVolumeId()
}

// fenceEndpoint is the plan's fence endpoint of site.
func fenceEndpoint(t *testing.T, f *fixture, site string) activities.Endpoint {
	t.Helper()
	ep, err := activities.EndpointFor(f.plan, site, activities.RPCFenceClusterNetwork)
	mustOK(t, err)
	return ep
}

// TestReprotectLiftsOnlyThePlansFences: the fence domain a failover fences
// through also holds another plan's fence. The reprotect after the
// failover lifts the plan's own CIDRs only: no unfence call names the
// other plan's CIDR, both sites still list it as fenced, and the unfence
// step says it is still there.
func TestReprotectLiftsOnlyThePlansFences(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const others = "127.0.0.77/32" // another plan's client, fenced through west
	mustOK(t, f.storage.FenceClusterNetwork(ctx, activities.FenceInput{Endpoint: fenceEndpoint(t, f, "west"), CIDRs: []string{others}}))
	var mu sync.Mutex
	var lifted []string
	f.setOnRPC(func(site, method string, req any, handle func() (any, error)) (any, error) {
		if r, ok := req.(*fence.UnfenceClusterNetworkRequest); ok {
			mu.Lock()
			for _, c := range r.GetCidrs() {
				lifted = append(lifted, c.GetCidr())
			}
			mu.Unlock()
		}
		return handle()
	})

	f.east.Down()
	var fo workflows.FailoverResult
	_, err := f.run(t, workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"}, &fo)
	mustOK(t, err)
	mustOK(t, f.east.Up())
	var rp workflows.ReprotectResult
	_, err = f.run(t, workflows.Reprotect, workflows.ReprotectInput{Plan: f.plan, From: "east", To: "west", Fenced: fo.Fenced}, &rp)
	mustOK(t, err)

	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(lifted, []string{simtest.NodeA + "/32"}) {
		t.Fatalf("unfence calls lifted %v, want only the plan's %s/32", lifted, simtest.NodeA)
	}
	for _, s := range []*simtest.Site{f.west, f.east} {
		simtest.Eventually(t, 5*time.Second, s.Config.Name+" to list the other plan's fence alone", func() bool {
			return slices.Equal(s.FencedCIDRs(), []string{others})
		})
	}
	i := slices.IndexFunc(rp.Steps, func(s *workflows.Step) bool { return s.ID == "unfence/east" })
	if i < 0 || !strings.Contains(rp.Steps[i].Output, "still lists "+others) {
		t.Fatalf("unfence step %+v, want it to say west still lists %s", rp.Steps, others)
	}
}

// TestProtectCountsNoSyncAsOutOfRPO: a group whose primary has completed
// no sync (west promoted with force while east is lost, as after a
// failover) is out of RPO, not within it with a lag of zero; so is the
// plan.
func TestProtectCountsNoSyncAsOutOfRPO(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.east.Down()
	for _, g := range f.plan.VolumeGroups {
		ins, err := activities.ReplicationInputs(f.plan, "west", g.Name, activities.RPCPromoteVolume, true)
		mustOK(t, err)
		for _, in := range ins {
			mustOK(t, f.storage.PromoteVolume(ctx, in))
		}
	}
	s, _ := f.protectFor(t, workflows.ProtectInput{Plan: f.plan, Primary: "west", Interval: 10 * time.Second})
	if len(s.Groups) != len(f.plan.VolumeGroups) {
		t.Fatalf("protection recorded groups %v, want all %d", s.Groups, len(f.plan.VolumeGroups))
	}
	for g, h := range s.Groups {
		if !h.LastSync.IsZero() {
			t.Fatalf("group %s: last sync %v, though west has shipped nothing with east down", g, h.LastSync)
		}
		if !h.OutOfRPO {
			t.Errorf("group %s has completed no sync and is within the RPO: %+v", g, h)
		}
	}
	if !s.OutOfRPO {
		t.Fatalf("a plan none of whose groups has completed a sync is within the RPO: %+v", s)
	}
}

// TestFailoverToItselfIsRefused: a failover from a site to the same site
// is refused by the workflow before any call, with the operator's
// overrides or without: no storage or workload call, nothing fenced,
// promoted or recorded.
func TestFailoverToItselfIsRefused(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	var rpcs []string
	f.setOnRPC(func(site, method string, req any, handle func() (any, error)) (any, error) {
		mu.Lock()
		rpcs = append(rpcs, site+" "+method)
		mu.Unlock()
		return handle()
	})
	for _, site := range []string{"east", "west"} {
		for _, override := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s override %v", site, override), func(t *testing.T) {
				env, calls := f.env(t)
				env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: site, To: site,
					OverrideState: override, ConfirmUnfenced: override})
				var ae *temporal.ApplicationError
				if err := env.GetWorkflowError(); !errors.As(err, &ae) || ae.Type() != workflows.ErrPreflight || !strings.Contains(ae.Error(), "two different sites") {
					t.Fatalf("error %v, want a preflight refusal naming the two different sites", err)
				}
				if len(*calls) != 0 {
					t.Fatalf("a failover from %s to itself made the calls %v", site, *calls)
				}
			})
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(rpcs) != 0 {
		t.Fatalf("the storage was called: %v", rpcs)
	}
	if len(f.record) != 0 {
		t.Fatalf("the refused failovers sent the plan's record %+v", f.record)
	}
	for _, s := range []*simtest.Site{f.east, f.west} {
		if got := s.FencedCIDRs(); len(got) != 0 {
			t.Fatalf("%s lists %v as fenced", s.Config.Name, got)
		}
	}
	roles(t, f.east, sim.RolePrimary)
	roles(t, f.west, sim.RoleSecondary)
}

// TestFailoverFencesWhatTheSiteActionLeft: a site action fenced one of
// the lost site's two CIDRs (another plan's list did not hold the
// second). The plan's failover fences the rest itself and completes:
// when the first promotion reaches the storage, both are fenced.
func TestFailoverFencesWhatTheSiteActionLeft(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	second := "127.0.0.9/32"
	f.plan.Sites[0].Fence.CIDRs = []string{simtest.NodeA + "/32", second}
	f.plan.Policy.OnFailure = "abort" // a stall at the verify step ends the action
	byTheSite := []string{simtest.NodeA + "/32"}
	mustOK(t, f.storage.FenceClusterNetwork(ctx, activities.FenceInput{Endpoint: fenceEndpoint(t, f, "west"), CIDRs: byTheSite}))

	var mu sync.Mutex
	var atPromote [][]string
	fences := 0
	f.setOnRPC(func(site, method string, req any, handle func() (any, error)) (any, error) {
		mu.Lock()
		switch method {
		case "PromoteVolume":
			atPromote = append(atPromote, f.west.FencedCIDRs())
		case "FenceClusterNetwork":
			fences++
		}
		mu.Unlock()
		return handle()
	})
	f.east.Down()
	var res workflows.FailoverResult
	_, err := f.run(t, workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west",
		SiteFence: &workflows.SiteFence{Action: "site-failover-east", CIDRs: byTheSite}}, &res)
	mustOK(t, err)

	mu.Lock()
	defer mu.Unlock()
	if fences == 0 {
		t.Fatal("the failover sent no fence for the CIDR the site action left")
	}
	want := []string{simtest.NodeA + "/32", second}
	if len(atPromote) < 3 {
		t.Fatalf("%d promotions reached west, want 3", len(atPromote))
	}
	for _, got := range atPromote {
		if !slices.Equal(got, want) {
			t.Fatalf("west listed %v as fenced when a promotion reached it, want %v", got, want)
		}
	}
	if !slices.Equal(res.Fenced, want) {
		t.Fatalf("result says fenced %v, want %v", res.Fenced, want)
	}
	roles(t, f.west, sim.RolePrimary)
}

// TestFailoverPausesWhenTheFenceCannotBeReadBack: the storage fences but
// its ListClusterFence fails (refused, or unavailable until the time
// limit), which is not the UNIMPLEMENTED of a driver that cannot list.
// The failover pauses at the verify step and promotes nothing.
func TestFailoverPausesWhenTheFenceCannotBeReadBack(t *testing.T) {
	for _, code := range []string{"PERMISSION_DENIED", "UNAVAILABLE"} {
		t.Run(code, func(t *testing.T) {
			f := newFixture(t)
			f.plan.Policy.Retry.TimeLimit = plans.Duration(30 * time.Second)
			f.east.Down()
			mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "ListClusterFence", Code: code, Probability: 1, Message: "cannot list now"}}))
			paused, calls := failOverUntilAborted(t, f, "verify fence of east")
			if paused == nil || paused.Name != "verify fence of east" || !strings.Contains(paused.LastError, "cannot list now") {
				t.Fatalf("paused step %+v, want the verify step paused with the storage's error", paused)
			}
			answered := 0
			for k, n := range f.west.FaultCounts() {
				if strings.HasPrefix(k, "ListClusterFence:") {
					answered += n
				}
			}
			if answered == 0 {
				t.Fatalf("the fault never answered: %v", f.west.FaultCounts())
			}
			noPromotion(t, f, *calls)
		})
	}
}

// TestReprotectUnfencesOnceTheResyncLanded: after a split brain (east
// lost with a write west never received, west written after the
// failover), when the unfence reaches west's storage east's copies are
// secondaries in sync, no longer resyncing, holding west's write and not
// east's own, and west reports for each a completed sync begun after the
// resync did.
//
// The second run plays a driver that answers ready=true as soon as it
// accepts the resync (drivers answer ready at different moments): then
// only the wait for west's sync holds the unfence back.
func TestReprotectUnfencesOnceTheResyncLanded(t *testing.T) {
	t.Run("ready when in sync", func(t *testing.T) { unfenceOnceResynced(t, false) })
	t.Run("ready at once", func(t *testing.T) { unfenceOnceResynced(t, true) })
}

func unfenceOnceResynced(t *testing.T, readyAtOnce bool) {
	f := newFixture(t)
	f.splitBrain(t)

	var mu sync.Mutex
	var problems []string
	var resyncStart time.Time
	unfences := 0
	units := []string{"vg/vg-1", "vg/vg-2", "vol/solo"}
	f.setOnRPC(func(site, method string, req any, handle func() (any, error)) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case method == "ResyncVolume":
			if resyncStart.IsZero() {
				resyncStart = time.Now()
			}
			resp, err := handle()
			if err == nil && readyAtOnce {
				return &replication.ResyncVolumeResponse{Ready: true}, nil
			}
			return resp, err
		case method == "UnfenceClusterNetwork":
			unfences++
			if resyncStart.IsZero() {
				problems = append(problems, "east unfenced before any resync")
				break
			}
			e, ws := f.east.Snapshot(), f.west.Snapshot()
			for _, key := range units {
				u, p := e.Unit(key), ws.Unit(key)
				switch {
				case u == nil || p == nil:
					problems = append(problems, key+" missing")
				case u.Role != sim.RoleSecondary || !u.InSync || u.Resyncing:
					problems = append(problems, fmt.Sprintf("east unfenced with %s role %s, in sync %v, resyncing %v", key, u.Role, u.InSync, u.Resyncing))
				case p.LastSync == nil || !p.LastSync.SnapTime.After(resyncStart):
					problems = append(problems, fmt.Sprintf("east unfenced before west completed a sync of %s begun after the resync (%+v)", key, p.LastSync))
				case u.Epoch != p.Epoch || u.Seq != p.Seq:
					problems = append(problems, fmt.Sprintf("east unfenced with %s at epoch %d seq %d, west at %d %d", key, u.Epoch, u.Seq, p.Epoch, p.Seq))
				}
			}
			if u := e.Unit("vg/vg-1"); u != nil && (string(u.Blocks["v1"][5].Data) != "written on west" || len(u.Blocks["v1"][7].Data) != 0) {
				problems = append(problems, "east unfenced before it held west's write and lost its own divergent one")
			}
		}
		return handle()
	})
	_, err := f.run(t, workflows.Reprotect, workflows.ReprotectInput{Plan: f.plan, From: "east", To: "west"}, nil)
	mustOK(t, err)
	mu.Lock()
	defer mu.Unlock()
	if unfences == 0 {
		t.Fatal("no unfence reached west's storage")
	}
	if len(problems) > 0 {
		t.Fatalf("the unfence came too early:\n%s", strings.Join(problems, "\n"))
	}
}

// TestFailbackPromotesOnceTheFinalSyncLanded: a write reaches east just
// before its demotion, and the link to west is cut once east is demoted,
// so the final sync is still to come when west is first asked to
// promote. Every promotion west's storage accepts found, as it arrived,
// east's copy demoted and west's holding all of it; the first attempts
// were refused, and the failback completes with the write on west.
func TestFailbackPromotesOnceTheFinalSyncLanded(t *testing.T) {
	// A sync interval of a second: the write below is not shipped in the
	// moment before east's demotion.
	f := newFixtureWith(t, 0, time.Second)
	ctx := context.Background()
	e, err := sim.NewClient(f.east.DataAddr(), simtest.NodeA, "east-node")
	mustOK(t, err)
	defer e.Close()

	var mu sync.Mutex
	var problems []string
	accepted, refused := 0, 0
	arrived, demoted := 0, 0
	written := "" // the volume written just before its demotion
	volumeOf := map[string]string{"vg/vg-1": "v1", "vg/vg-2": "v3", "vol/solo": "solo"}
	f.setOnRPC(func(site, method string, req any, handle func() (any, error)) (any, error) {
		switch {
		case site == "east" && method == "DemoteVolume":
			mu.Lock()
			arrived++
			last := arrived == len(volumeOf)
			mu.Unlock()
			if last {
				// The last copy to be demoted takes a write first.
				vol := volumeOf[sourceKey(req.(*replication.DemoteVolumeRequest).GetReplicationSource())]
				_, err := e.Write(ctx, vol, 9, []byte("just before the demotion"))
				mu.Lock()
				if err != nil {
					problems = append(problems, "write before the demotion: "+err.Error())
				}
				written = vol
				mu.Unlock()
			}
			resp, err := handle()
			mu.Lock()
			defer mu.Unlock()
			if demoted++; demoted == len(volumeOf) {
				f.east.SetLink(false) // the final sync waits
			}
			return resp, err
		case site == "west" && method == "PromoteVolume":
			key := sourceKey(req.(*replication.PromoteVolumeRequest).GetReplicationSource())
			from, to := f.east.Snapshot().Unit(key), f.west.Snapshot().Unit(key)
			resp, err := handle()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				refused++
				if refused == 1 {
					// The link comes back; the next attempts come once
					// the final syncs landed.
					f.east.SetLink(true)
					deadline := time.Now().Add(10 * time.Second)
					for !caughtUp(f) && time.Now().Before(deadline) {
						time.Sleep(10 * time.Millisecond)
					}
				}
				return resp, err
			}
			accepted++
			switch {
			case from.Role != sim.RoleSecondary:
				problems = append(problems, fmt.Sprintf("west promoted %s while east's copy was %s", key, from.Role))
			case from.Epoch != to.Epoch || from.Seq != to.Seq:
				problems = append(problems, fmt.Sprintf("west promoted %s holding epoch %d seq %d of east's %d %d: the final sync had not landed", key, to.Epoch, to.Seq, from.Epoch, from.Seq))
			}
			return resp, err
		}
		return handle()
	})
	var res workflows.FailbackResult
	_, err = f.run(t, workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "east", To: "west"}, &res)
	f.east.SetLink(true)
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatalf("unsafe promotions:\n%s", strings.Join(problems, "\n"))
	}
	mustOK(t, err)
	if accepted < 3 || refused == 0 {
		t.Fatalf("west accepted %d promotions and refused %d, want all 3 accepted after a refusal", accepted, refused)
	}
	w, err := sim.NewClient(f.west.DataAddr(), simtest.NodeB, "west-node")
	mustOK(t, err)
	defer w.Close()
	if written == "" {
		t.Fatal("no write was made before the demotions")
	}
	got, err := w.Read(ctx, written, 9)
	mustOK(t, err)
	if string(got) != "just before the demotion" {
		t.Fatalf("west holds %q, want the write made just before the demotion", got)
	}
}

// caughtUp tells whether west's copies hold everything east's do.
func caughtUp(f *fixture) bool {
	e, w := f.east.Snapshot(), f.west.Snapshot()
	for _, u := range e.Units {
		p := w.Unit(u.Key())
		if p == nil || p.Epoch != u.Epoch || p.Seq != u.Seq {
			return false
		}
	}
	return true
}
