package activities_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
)

// TestLifecycle drives every storage activity through a planned switch of
// a simulated pair: identity, fencing that really stops a client's
// writes, enabling replication, a sync, demote, promote, resync, disable.
func TestLifecycle(t *testing.T) {
	a, b := simtest.StartPair(t, simtest.Options{})
	p := pairPlan(a, b)
	st := newStorage(t)
	env := activityEnv(t, st)
	ctx := ctxT(t)

	// Identity.
	v, err := env.ExecuteActivity(st.GetIdentity, activities.IdentityInput{Endpoint: endpoint(t, p, "a", activities.RPCGetIdentity)})
	mustOK(t, err)
	var id activities.IdentityResult
	mustOK(t, v.Get(&id))
	if id.Name != "sim.drover.dev" || id.VendorVersion != "dev" || id.Manifest["site"] != "a" {
		t.Fatalf("GetIdentity = %+v", id)
	}
	v, err = env.ExecuteActivity(st.GetCapabilities, activities.IdentityInput{Endpoint: endpoint(t, p, "a", activities.RPCGetCapabilities)})
	mustOK(t, err)
	var caps activities.CapabilitiesResult
	mustOK(t, v.Get(&caps))
	if m := caps.Missing(activities.CapControllerService, activities.CapNetworkFence, activities.CapGetFenceClients,
		activities.CapVolumeReplication, activities.CapVolumeGroup); len(m) > 0 {
		t.Fatalf("capabilities %v lack %v", caps.Capabilities, m)
	}
	v, err = env.ExecuteActivity(st.Probe, activities.IdentityInput{Endpoint: endpoint(t, p, "b", activities.RPCProbe)})
	mustOK(t, err)
	var probe activities.ProbeResult
	mustOK(t, v.Get(&probe))
	if !probe.Ready || !probe.Reported {
		t.Fatalf("Probe = %+v", probe)
	}

	// Fencing: a client of site a writes, is fenced, and can no longer.
	client, err := sim.NewClient(a.DataAddr(), simtest.NodeA, "node-a1")
	mustOK(t, err)
	defer client.Close()
	_, err = client.Write(ctx, "v1", 0, []byte("before the fence"))
	mustOK(t, err)
	v, err = env.ExecuteActivity(st.GetFenceClients, activities.FenceListInput{Endpoint: endpoint(t, p, "a", activities.RPCGetFenceClients)})
	mustOK(t, err)
	var clients activities.FenceClients
	mustOK(t, v.Get(&clients))
	if len(clients.Clients) != 1 || clients.Clients[0].ID != "node-a1" || !slices.Equal(clients.Clients[0].CIDRs, []string{"127.0.0.2/32"}) {
		t.Fatalf("GetFenceClients = %+v", clients)
	}
	fenceIn := activities.FenceInput{Endpoint: endpoint(t, p, "a", activities.RPCFenceClusterNetwork), CIDRs: clients.Clients[0].CIDRs}
	_, err = env.ExecuteActivity(st.FenceClusterNetwork, fenceIn)
	mustOK(t, err)
	if _, err := client.Write(ctx, "v1", 1, []byte("after the fence")); !errors.Is(err, sim.ErrFenced) {
		t.Fatalf("write from a fenced client: %v, want ErrFenced", err)
	}
	for _, site := range []string{"a", "b"} { // one fence domain
		v, err = env.ExecuteActivity(st.ListClusterFence, activities.FenceListInput{Endpoint: endpoint(t, p, site, activities.RPCListClusterFence)})
		mustOK(t, err)
		var list activities.FenceList
		mustOK(t, v.Get(&list))
		if !slices.Equal(list.CIDRs, []string{"127.0.0.2/32"}) {
			t.Fatalf("ListClusterFence on %s = %v", site, list.CIDRs)
		}
	}
	fenceIn.Endpoint = endpoint(t, p, "a", activities.RPCUnfenceClusterNetwork)
	_, err = env.ExecuteActivity(st.UnfenceClusterNetwork, fenceIn)
	mustOK(t, err)
	_, err = client.Write(ctx, "v1", 1, []byte("unfenced again"))
	mustOK(t, err)

	// Replication on, and a sync newer than now arrives.
	for _, site := range []string{"a", "b"} {
		for _, g := range []string{"db", "loose"} {
			_, err = env.ExecuteActivity(st.EnableVolumeReplication, groupInput(t, p, site, g, activities.RPCEnableVolumeReplication, false))
			mustOK(t, err)
		}
	}
	after := time.Now()
	_, err = client.Write(ctx, "v1", 2, []byte("replicated"))
	mustOK(t, err)
	v, err = env.ExecuteActivity(st.WaitForSync, activities.WaitSyncInput{
		Call: groupInput(t, p, "a", "db", activities.RPCGetVolumeReplicationInfo, false), After: after, Interval: 20 * time.Millisecond})
	mustOK(t, err)
	var synced activities.WaitSyncOutcome
	mustOK(t, v.Get(&synced))
	if !synced.Info.LastSyncTime.After(after) || synced.Info.Status != "HEALTHY" || synced.Polls < 1 {
		t.Fatalf("WaitForSync = %+v", synced)
	}
	// The loose volume goes by volume_id as well as replication_source.
	eventually(t, 5*time.Second, "first sync of the loose volume", func() bool {
		v, err = env.ExecuteActivity(st.GetVolumeReplicationInfo, groupInput(t, p, "a", "loose", activities.RPCGetVolumeReplicationInfo, false))
		return err == nil
	})
	var info activities.ReplicationInfo
	mustOK(t, v.Get(&info))
	if info.LastSyncTime.IsZero() || info.Status != "HEALTHY" {
		t.Fatalf("GetVolumeReplicationInfo(solo) = %+v", info)
	}

	// Planned switch a → b: demote a, promote b once the final sync landed.
	_, err = env.ExecuteActivity(st.DemoteVolume, groupInput(t, p, "a", "db", activities.RPCDemoteVolume, false))
	mustOK(t, err)
	promote := groupInput(t, p, "b", "db", activities.RPCPromoteVolume, false)
	eventually(t, 5*time.Second, "promotion of b after the final sync", func() bool {
		_, err = env.ExecuteActivity(st.PromoteVolume, promote)
		if err != nil {
			if final, _ := wantType(t, err, activities.ErrFailedPrecondition); !final {
				t.Fatalf("FailedPrecondition must go back to the workflow, not be retried")
			}
		}
		return err == nil
	})
	writer, err := sim.NewClient(b.DataAddr(), simtest.NodeB, "node-b1")
	mustOK(t, err)
	defer writer.Close()
	_, err = writer.Write(ctx, "v1", 3, []byte("written on b"))
	mustOK(t, err)
	wrote := time.Now()

	// Resync a from b until ready; after the next sync a holds b's write.
	v, err = env.ExecuteActivity(st.ResyncUntilReady, activities.ResyncInput{
		Call: groupInput(t, p, "a", "db", activities.RPCResyncVolume, false), Interval: 20 * time.Millisecond})
	mustOK(t, err)
	var resync activities.ResyncOutcome
	mustOK(t, v.Get(&resync))
	if !resync.Ready || resync.Polls < 1 {
		t.Fatalf("ResyncUntilReady = %+v", resync)
	}
	// Ready means caught up as of the last sync; the write above is in the
	// next one, which the primary reports as a sync newer than the write.
	_, err = env.ExecuteActivity(st.WaitForSync, activities.WaitSyncInput{
		Call: groupInput(t, p, "b", "db", activities.RPCGetVolumeReplicationInfo, false), After: wrote, Interval: 20 * time.Millisecond})
	mustOK(t, err)
	got := a.Snapshot().Unit("vg/vg-1")
	if got == nil || string(got.Blocks["v1"][3].Data) != "written on b" {
		t.Fatalf("site a lacks b's write after the resync: %+v", got)
	}

	// Disable, twice, and on a volume that does not exist: all done.
	for _, site := range []string{"a", "b"} {
		in := groupInput(t, p, site, "loose", activities.RPCDisableVolumeReplication, false)
		for range 2 {
			_, err = env.ExecuteActivity(st.DisableVolumeReplication, in)
			mustOK(t, err)
		}
	}
	ghost := groupInput(t, p, "a", "loose", activities.RPCDisableVolumeReplication, false)
	ghost.Source = activities.Source{VolumeID: "ghost"}
	_, err = env.ExecuteActivity(st.DisableVolumeReplication, ghost)
	mustOK(t, err)

	if r := sim.Check(a.Snapshot(), b.Snapshot()); !r.OK() {
		t.Fatalf("invariants: %s", r)
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
