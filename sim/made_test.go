package sim_test

import (
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
)

// restoreVolume makes, on s, a volume named name from a snapshot of
// volume vol as it stands, and returns the volume's id.
func restoreVolume(t *testing.T, s *siteUnderTest, name, vol string) string {
	t.Helper()
	cc := csi.NewControllerClient(s.conn)
	sn, err := cc.CreateSnapshot(ctxT(t), &csi.CreateSnapshotRequest{Name: name + "-snap", SourceVolumeId: vol})
	mustOK(t, err)
	v, err := cc.CreateVolume(ctxT(t), &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: mountRW,
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: sn.Snapshot.SnapshotId}}}})
	mustOK(t, err)
	return v.Volume.VolumeId
}

// TestReplicationOfAVolumeMadeAfterStart: replication enabled on a volume
// created through CSI from a snapshot (as a failover to a point in time
// restores one) makes it a replicated volume, primary where it was made:
// its data, the writes made to it before included, reaches a copy the
// peer creates under the same id; the peer's copy is read-only; the
// volume can no longer be deleted through CSI; it moves like any
// replica (a planned move to the peer); it survives a restart; and a
// peer that holds a volume of that id already refuses to create it.
func TestReplicationOfAVolumeMadeAfterStart(t *testing.T) {
	a, b := startPair(t, pairOpts{Interval: 20 * time.Millisecond})
	enable(t, a, group("vg-1"))
	wa := dataClient(t, a, nodeA)
	ctx := ctxT(t)
	_, err := wa.Write(ctx, "v1", 0, []byte("clean"))
	mustOK(t, err)
	waitSynced(t, a, "vg/vg-1")

	// At b, a volume from the replica's snapshot, written before its
	// replication is enabled.
	id := restoreVolume(t, b, "restored", "v1")
	wb := dataClient(t, b, nodeB)
	_, err = wb.Write(ctx, id, 1, []byte("written on the restored volume"))
	mustOK(t, err)
	enable(t, b, volume(id))
	enable(t, b, volume(id)) // idempotent
	st := b.Snapshot()
	if len(st.Clones) != 0 {
		t.Fatalf("the volume is still a CSI copy: %+v", st.Clones)
	}
	key := "vol/" + id
	if u := st.Unit(key); u == nil || u.Role != sim.RolePrimary || !u.Made {
		t.Fatalf("unit %s on b: %+v, want a made primary", key, u)
	}
	waitSynced(t, b, key)
	peer := a.Snapshot().Unit(key)
	if peer == nil || peer.Role != sim.RoleSecondary || !peer.InSync {
		t.Fatalf("a's copy of %s: %+v, want an in-sync secondary", key, peer)
	}
	for n, want := range map[int64]string{0: "clean", 1: "written on the restored volume"} {
		got, err := wa.Read(ctx, id, n)
		mustOK(t, err)
		if string(got) != want {
			t.Fatalf("a's copy block %d holds %q, want %q", n, got, want)
		}
	}
	if _, err := wa.Write(ctx, id, 0, []byte("x")); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("a write to the peer's copy: %v, want read-only", err)
	}
	_, err = csi.NewControllerClient(b.conn).DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	wantCode(t, err, codes.FailedPrecondition)
	r, err := info(t, b, volume(id))
	mustOK(t, err)
	if r.Status != replication.GetVolumeReplicationInfoResponse_HEALTHY || r.LastSyncTime == nil {
		t.Fatalf("replication info %v", r)
	}
	_, err = wb.Write(ctx, id, 2, []byte("after enable"))
	mustOK(t, err)
	waitSynced(t, b, key)
	check(t, a, b)

	// A planned move to a: b demoted, a promoted.
	_, err = b.rc.DemoteVolume(ctx, &replication.DemoteVolumeRequest{ReplicationSource: volume(id), Secrets: b.cfg.Secrets})
	mustOK(t, err)
	eventually(t, 5*time.Second, "a's copy holds b's last write", func() bool {
		u := a.Snapshot().Unit(key)
		return u != nil && string(u.Blocks[id][2].Data) == "after enable"
	})
	_, err = a.rc.PromoteVolume(ctx, &replication.PromoteVolumeRequest{ReplicationSource: volume(id), Secrets: a.cfg.Secrets})
	mustOK(t, err)
	_, err = wa.Write(ctx, id, 3, []byte("on a"))
	mustOK(t, err)
	check(t, a, b)

	// A restart of b keeps the volume replicated.
	mustOK(t, b.Close())
	b2 := startSite(t, b.cfg)
	if st := b2.Snapshot(); st.Unit(key) == nil || len(st.Clones) != 0 {
		t.Fatalf("after a restart: unit %v, copies %v", st.Unit(key), st.Clones)
	}
	enable(t, a, volume(id))
	waitSynced(t, a, key)
	check(t, a, b2)
}

// TestMadeVolumeNeverOverwritesThePeers: a peer holding a volume of the
// made volume's id (here a CSI copy of its own under the same name) does
// not create the copy over it: the sync is refused and the primary says
// why, and the peer's volume keeps its data.
func TestMadeVolumeNeverOverwritesThePeers(t *testing.T) {
	a, b := startPair(t, pairOpts{Interval: 20 * time.Millisecond})
	enable(t, a, group("vg-1"))
	wa := dataClient(t, a, nodeA)
	ctx := ctxT(t)
	_, err := wa.Write(ctx, "v1", 0, []byte("a's data"))
	mustOK(t, err)
	waitSynced(t, a, "vg/vg-1")
	theirs := restoreVolume(t, a, "same-name", "v1")
	_, err = wa.Write(ctx, theirs, 0, []byte("a's own copy"))
	mustOK(t, err)
	ours := restoreVolume(t, b, "same-name", "v1")
	if ours != theirs {
		t.Fatalf("ids %q and %q: the test needs one id on both sites", ours, theirs)
	}
	enable(t, b, volume(ours))
	simtest.Eventually(t, 5*time.Second, "the refusal", func() bool {
		return strings.Contains(b.Snapshot().Refused["vol/"+ours], "created through CSI exists on this site")
	})
	got, err := wa.Read(ctx, theirs, 0)
	mustOK(t, err)
	if string(got) != "a's own copy" || a.Snapshot().Unit("vol/"+ours) != nil {
		t.Fatalf("a's volume holds %q (unit %v): overwritten", got, a.Snapshot().Unit("vol/"+ours))
	}
}

// TestMadeVolumeDeletedWithItsPeerCopy: a volume made replicated here
// (a point in time's copy, cut at the primary) is deleted through CSI
// only once its replication is off, and its deletion removes the copy
// the peer's first sync created, as rbd-mirror removes the non-primary
// image; a peer copy that was promoted is the peer's own volume and
// stays.
func TestMadeVolumeDeletedWithItsPeerCopy(t *testing.T) {
	a, b := startPair(t, pairOpts{Interval: 20 * time.Millisecond})
	enable(t, a, group("vg-1"))
	wa := dataClient(t, a, nodeA)
	ctx := ctxT(t)
	_, err := wa.Write(ctx, "v1", 0, []byte("at the cut"))
	mustOK(t, err)
	waitSynced(t, a, "vg/vg-1")
	cc := csi.NewControllerClient(a.conn)

	made := func(name string) (string, string) {
		id := restoreVolume(t, a, name, "v1")
		enable(t, a, volume(id))
		key := "vol/" + id
		waitSynced(t, a, key)
		if u := b.Snapshot().Unit(key); u == nil || u.Role != sim.RoleSecondary {
			t.Fatalf("b's copy of %s: %+v, want a secondary", key, u)
		}
		return id, key
	}
	off := func(id string) {
		_, err := a.rc.DisableVolumeReplication(ctx, &replication.DisableVolumeReplicationRequest{ReplicationSource: volume(id), Secrets: a.cfg.Secrets})
		mustOK(t, err)
	}

	id, key := made("point-1")
	_, err = cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	wantCode(t, err, codes.FailedPrecondition) // replication on
	off(id)
	_, err = cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	mustOK(t, err)
	if u := a.Snapshot().Unit(key); u != nil {
		t.Fatalf("a still holds the deleted volume: %+v", u)
	}
	if u := b.Snapshot().Unit(key); u != nil {
		t.Fatalf("b still holds the copy of the deleted volume: %+v", u)
	}
	_, err = cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	mustOK(t, err) // idempotent

	// A copy promoted at b (a failover to the point) stays b's.
	id2, key2 := made("point-2")
	_, err = b.rc.PromoteVolume(ctx, &replication.PromoteVolumeRequest{ReplicationSource: volume(id2), Force: true, Secrets: b.cfg.Secrets})
	mustOK(t, err)
	off(id2)
	_, err = cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id2})
	mustOK(t, err)
	u := b.Snapshot().Unit(key2)
	if u == nil || u.Role != sim.RolePrimary {
		t.Fatalf("b's promoted copy of %s: %+v, want it kept, primary", key2, u)
	}
	wb := dataClient(t, b, nodeB)
	got, err := wb.Read(ctx, id2, 0)
	mustOK(t, err)
	if string(got) != "at the cut" {
		t.Fatalf("b's promoted copy holds %q", got)
	}

	// A replica of the plan's is never deleted, replication on or off.
	_, err = cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "v1"})
	wantCode(t, err, codes.FailedPrecondition)

	// Deleted while the link is down: b's copy stays until the link is
	// back, then goes, as rbd-mirror removes a non-primary image whose
	// primary's mirroring went away once it sees its peer again.
	id3, key3 := made("point-3")
	a.SetLink(false)
	off(id3)
	_, err = cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id3})
	mustOK(t, err)
	time.Sleep(100 * time.Millisecond) // five of the sync intervals
	if u := b.Snapshot().Unit(key3); u == nil {
		t.Fatalf("b's copy of %s went while the link was down", key3)
	}
	a.SetLink(true)
	simtest.Eventually(t, 10*time.Second, "b's copy of the volume deleted while the link was down gone", func() bool {
		return b.Snapshot().Unit(key3) == nil
	})
}

// TestCephCSIProfileFlattensBeforeMirroring: under the ceph-csi profile,
// replication of a volume made of a snapshot (an RBD clone) is refused
// without flattenMode: force (its parent is not mirrored), and with it
// the first call queues the flatten and answers ABORTED, as ceph-csi
// does while the manager's flatten task runs; the next call makes it
// replicated. A bad flattenMode is INVALID_ARGUMENT. The spec profile
// makes it replicated at the first call.
func TestCephCSIProfileFlattensBeforeMirroring(t *testing.T) {
	a, _ := cephPair(t)
	enable(t, a, group("vg-1"))
	ctx := ctxT(t)
	id := restoreVolume(t, a, "point-copy", "v1")
	try := func(params map[string]string) error {
		_, err := a.rc.EnableVolumeReplication(ctx, &replication.EnableVolumeReplicationRequest{ReplicationSource: volume(id), Parameters: params, Secrets: a.cfg.Secrets})
		return err
	}
	wantCode(t, try(map[string]string{"flattenMode": "sometimes"}), codes.InvalidArgument)
	err := try(nil)
	wantCode(t, err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), "is not enabled for mirroring") {
		t.Fatalf("without flattenMode: %v", err)
	}
	err = try(map[string]string{"flattenMode": "force"})
	wantCode(t, err, codes.Aborted)
	if !strings.Contains(err.Error(), "flatten is in progress") {
		t.Fatalf("the first call with flattenMode force: %v", err)
	}
	mustOK(t, try(map[string]string{"flattenMode": "force"}))
	if u := a.Snapshot().Unit("vol/" + id); u == nil || !u.Made || !u.Enabled {
		t.Fatalf("the flattened volume: %+v, want it replicated", u)
	}

	s, _ := startPair(t, pairOpts{Interval: 20 * time.Millisecond})
	enable(t, s, group("vg-1"))
	id = restoreVolume(t, s, "point-copy", "v1")
	enable(t, s, volume(id))
}
