package activities_test

import (
	"testing"
	"time"

	"github.com/drover-dr/drover/activities"
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
