package activities_test

import (
	"context"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/csiaddons/identity"
	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
)

// TestResyncWaitsForReady: a resync of a diverged copy cannot finish while
// the primary's full copy cannot arrive. ResyncUntilReady keeps polling
// (here with the link down) and returns only once the driver says ready:
// at that moment the copy is a secondary in sync, no longer resyncing,
// holding the primary's data and none of its own divergent writes.
func TestResyncWaitsForReady(t *testing.T) {
	a, b := simtest.StartPair(t, simtest.Options{Interval: 20 * time.Millisecond})
	p := pairPlan(a, b)
	st := newStorage(t)
	env := activityEnv(t, st)
	ctx := ctxT(t)
	for _, site := range []string{"a", "b"} {
		_, err := env.ExecuteActivity(st.EnableVolumeReplication, groupInput(t, p, site, "db", activities.RPCEnableVolumeReplication, false))
		mustOK(t, err)
	}
	wa, err := sim.NewClient(a.DataAddr(), simtest.NodeA, "a-node")
	mustOK(t, err)
	defer wa.Close()
	_, err = wa.Write(ctx, "v1", 0, []byte("shipped"))
	mustOK(t, err)
	_, err = env.ExecuteActivity(st.WaitForSync, activities.WaitSyncInput{
		Call: groupInput(t, p, "a", "db", activities.RPCGetVolumeReplicationInfo, false), After: time.Now(), Interval: 10 * time.Millisecond})
	mustOK(t, err)

	// Split: b takes over with force while a, cut off, writes on.
	a.SetLink(false)
	time.Sleep(50 * time.Millisecond) // let a round already shipping end
	_, err = wa.Write(ctx, "v1", 1, []byte("divergent"))
	mustOK(t, err)
	_, err = env.ExecuteActivity(st.PromoteVolume, groupInput(t, p, "b", "db", activities.RPCPromoteVolume, true))
	mustOK(t, err)
	wb, err := sim.NewClient(b.DataAddr(), simtest.NodeB, "b-node")
	mustOK(t, err)
	defer wb.Close()
	_, err = wb.Write(ctx, "v1", 2, []byte("written on b"))
	mustOK(t, err)
	_, err = env.ExecuteActivity(st.DemoteVolume, groupInput(t, p, "a", "db", activities.RPCDemoteVolume, true))
	mustOK(t, err)

	// Resync a with the link still down; bring it up once a has started
	// resyncing and had time for several not-ready answers.
	type result struct {
		out activities.ResyncOutcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := st.ResyncUntilReady(ctx, activities.ResyncInput{
			Call: groupInput(t, p, "a", "db", activities.RPCResyncVolume, true), Interval: 10 * time.Millisecond})
		done <- result{out, err}
	}()
	eventually(t, 5*time.Second, "a to start resyncing", func() bool {
		u := a.Snapshot().Unit("vg/vg-1")
		return u != nil && u.Resyncing
	})
	select {
	case r := <-done:
		u := a.Snapshot().Unit("vg/vg-1")
		t.Fatalf("the resync returned (%+v, %v) while the full copy could not arrive: a resyncing %v, in sync %v", r.out, r.err, u.Resyncing, u.InSync)
	case <-time.After(200 * time.Millisecond):
	}
	a.SetLink(true)
	var r result
	select {
	case r = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the resync did not finish after the link came back")
	}
	mustOK(t, r.err)
	// What the copy is at the moment the activity returned.
	got := a.Snapshot().Unit("vg/vg-1")
	if !r.out.Ready || r.out.Polls < 2 {
		t.Fatalf("outcome %+v, want ready after several polls", r.out)
	}
	if got == nil || got.Role != sim.RoleSecondary || got.Resyncing || !got.InSync {
		t.Fatalf("a when the resync returned: %+v, want a secondary in sync, not resyncing", got)
	}
	prim := b.Snapshot().Unit("vg/vg-1")
	if got.Epoch != prim.Epoch {
		t.Fatalf("a is at epoch %d, the primary at %d", got.Epoch, prim.Epoch)
	}
	if string(got.Blocks["v1"][2].Data) != "written on b" || string(got.Blocks["v1"][0].Data) != "shipped" {
		t.Fatalf("a's data after the resync: %v", got.Blocks["v1"])
	}
	// Exactly the primary's data: the divergent write is gone.
	if _, onB := prim.Blocks["v1"][1]; !onB {
		if _, kept := got.Blocks["v1"][1]; kept {
			t.Fatal("a kept its divergent write after the resync")
		}
	}
	for n, blk := range prim.Blocks["v1"] {
		if string(got.Blocks["v1"][n].Data) != string(blk.Data) {
			t.Fatalf("block %d: a holds %q, the primary %q", n, got.Blocks["v1"][n].Data, blk.Data)
		}
	}
	if len(got.Blocks["v1"]) != len(prim.Blocks["v1"]) {
		t.Fatalf("a holds %d blocks, the primary %d", len(got.Blocks["v1"]), len(prim.Blocks["v1"]))
	}
}

// readyAtOnce is a driver whose ResyncVolume answers ready at once, as
// ceph-csi did from statuses that lagged a failback's promotion, and whose
// GetVolumeReplicationInfo reports the last sync it is given.
type readyAtOnce struct {
	identity.UnimplementedIdentityServer
	replication.UnimplementedControllerServer
	lastSync atomic.Int64 // unix nanoseconds
}

func (r *readyAtOnce) GetIdentity(context.Context, *identity.GetIdentityRequest) (*identity.GetIdentityResponse, error) {
	return &identity.GetIdentityResponse{Name: "example.csi.vendor.io", VendorVersion: "test"}, nil
}

func (r *readyAtOnce) ResyncVolume(context.Context, *replication.ResyncVolumeRequest) (*replication.ResyncVolumeResponse, error) {
	return &replication.ResyncVolumeResponse{Ready: true}, nil
}

func (r *readyAtOnce) GetVolumeReplicationInfo(context.Context, *replication.GetVolumeReplicationInfoRequest) (*replication.GetVolumeReplicationInfoResponse, error) {
	return &replication.GetVolumeReplicationInfoResponse{LastSyncTime: timestamppb.New(time.Unix(0, r.lastSync.Load()))}, nil
}

// TestResyncWithAPrimaryWaitsForItsSync: when the primary can be asked,
// the copy's ready is not the end of a resync: only the primary's word
// that it completed a sync begun after the resync is. A driver that
// answers ready at once while the primary has shipped nothing since
// keeps the resync waiting until a sync lands.
func TestResyncWithAPrimaryWaitsForItsSync(t *testing.T) {
	drv := &readyAtOnce{}
	sock := filepath.Join(t.TempDir(), "driver.sock")
	l, err := net.Listen("unix", sock)
	mustOK(t, err)
	srv := grpc.NewServer()
	identity.RegisterIdentityServer(srv, drv)
	replication.RegisterControllerServer(srv, drv)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	e := activities.Endpoint{Site: "x", Address: "unix://" + sock}
	start := time.Now()
	drv.lastSync.Store(start.Add(-time.Minute).UnixNano())

	st := newStorage(t)
	done := make(chan activities.ResyncOutcome, 1)
	go func() {
		out, err := st.ResyncUntilReady(ctxT(t), activities.ResyncInput{
			Call:    activities.ReplicationInput{Endpoint: e, Source: activities.Source{VolumeID: "v"}},
			Primary: &activities.ReplicationInput{Endpoint: e, Source: activities.Source{VolumeID: "v"}},
			After:   start, Interval: 10 * time.Millisecond})
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	select {
	case out := <-done:
		t.Fatalf("the resync ended (%+v) on the copy's ready, with no sync from the primary since it began", out)
	case <-time.After(300 * time.Millisecond):
	}
	synced := time.Now()
	drv.lastSync.Store(synced.UnixNano())
	select {
	case out := <-done:
		if !out.Shipped || !out.LastSync.Equal(synced) || !out.Ready {
			t.Fatalf("outcome %+v, want shipped at %v, the copy ready", out, synced)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the resync did not end once the primary reported a sync")
	}
}
