package sim_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/sim"
)

var mountRW = []*csi.VolumeCapability{{
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}}

// TestCSISnapshotsArePointInTime: on the secondary site, a snapshot of a
// replica and a group snapshot of a group's volumes hold the data the
// replica had when they were cut: writes replicated later reach the
// replica, not them. A volume created from the snapshot starts with that
// data and is writable on the data path, and its writes reach neither the
// replica, the snapshot nor the primary; the replicas' roles, data and
// history are unchanged by all of it (sim.ReplicasUnchanged).
func TestCSISnapshotsArePointInTime(t *testing.T) {
	a, b := startPair(t, pairOpts{Interval: 20 * time.Millisecond})
	enable(t, a, group("vg-1"))
	enable(t, b, group("vg-1"))
	w := dataClient(t, a, nodeA)
	ctx := ctxT(t)
	_, err := w.Write(ctx, "v1", 0, []byte("before"))
	mustOK(t, err)
	_, err = w.Write(ctx, "v2", 0, []byte("before, v2"))
	mustOK(t, err)
	waitSynced(t, a, "vg/vg-1")
	before := b.Snapshot()

	cc, gc := csi.NewControllerClient(b.conn), csi.NewGroupControllerClient(b.conn)
	snap, err := cc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "test-v1", SourceVolumeId: "v1"})
	mustOK(t, err)
	gsnap, err := gc.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: "test-vg-1", SourceVolumeIds: []string{"v2", "v1"}})
	mustOK(t, err)
	if len(gsnap.GroupSnapshot.Snapshots) != 2 || !gsnap.GroupSnapshot.ReadyToUse {
		t.Fatalf("group snapshot %+v, want two members ready", gsnap.GroupSnapshot)
	}

	// Replication carries on: the replica moves, the snapshots do not.
	_, err = w.Write(ctx, "v1", 0, []byte("after"))
	mustOK(t, err)
	waitSynced(t, a, "vg/vg-1")
	if got := b.Snapshot().Unit("vg/vg-1").Blocks["v1"][0].Data; string(got) != "after" {
		t.Fatalf("replica holds %q, want the replicated write", got)
	}
	clone, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "test-v1-copy", VolumeCapabilities: mountRW,
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.Snapshot.SnapshotId}}}})
	mustOK(t, err)
	id := clone.Volume.VolumeId
	r := dataClient(t, b, nodeB)
	got, err := r.Read(ctx, id, 0)
	mustOK(t, err)
	if string(got) != "before" {
		t.Fatalf("the copy holds %q, want the data of the snapshot's moment", got)
	}
	var member string
	for _, s := range gsnap.GroupSnapshot.Snapshots {
		if s.SourceVolumeId == "v1" {
			member = s.SnapshotId
		}
	}
	st := b.Snapshot()
	for _, sn := range st.Snapshots {
		if (sn.ID == member || sn.ID == snap.Snapshot.SnapshotId) && string(sn.Blocks[0].Data) != "before" {
			t.Fatalf("snapshot %s holds %q, want the data of its moment", sn.ID, sn.Blocks[0].Data)
		}
	}

	// The copy is writable; nothing else sees its writes.
	_, err = r.Write(ctx, id, 0, []byte("written in the test"))
	mustOK(t, err)
	got, err = r.Read(ctx, id, 0)
	mustOK(t, err)
	if string(got) != "written in the test" {
		t.Fatalf("the copy reads %q after a write", got)
	}
	after := b.Snapshot()
	if d := after.Unit("vg/vg-1").Blocks["v1"][0].Data; string(d) != "after" {
		t.Fatalf("the write to the copy reached the replica: %q", d)
	}
	if d := a.Snapshot().Unit("vg/vg-1").Blocks["v1"][0].Data; string(d) != "after" {
		t.Fatalf("the write to the copy reached the primary: %q", d)
	}
	// Between before and after the replica only took replicated writes:
	// its role is the same, and it holds what the primary holds.
	if diff := sim.ReplicasUnchanged(before, after, false); len(diff) != 0 {
		t.Fatalf("roles changed: %v", diff)
	}
	if r := check(t, a, b); !r.OK() {
		t.Fatalf("invariants: %s", r)
	}
}

// TestCSIIdempotenceAndErrors: the spec's answers. The same name and
// source answer the same object; the same name with another source is
// ALREADY_EXISTS; a missing source is NOT_FOUND; a replica cannot be
// deleted (FAILED_PRECONDITION); deleting what does not exist is OK; a
// member of a group snapshot is deleted with its group only; snapshots
// and copies survive a restart of the site.
func TestCSIIdempotenceAndErrors(t *testing.T) {
	a, _ := startPair(t, pairOpts{Interval: 20 * time.Millisecond})
	cc, gc := csi.NewControllerClient(a.conn), csi.NewGroupControllerClient(a.conn)
	ctx := ctxT(t)
	s1, err := cc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "v1"})
	mustOK(t, err)
	s2, err := cc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "v1"})
	mustOK(t, err)
	if s1.Snapshot.SnapshotId != s2.Snapshot.SnapshotId || !s1.Snapshot.CreationTime.AsTime().Equal(s2.Snapshot.CreationTime.AsTime()) {
		t.Fatalf("a repeated CreateSnapshot made another snapshot: %v, %v", s1.Snapshot, s2.Snapshot)
	}
	_, err = cc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "v3"})
	wantCode(t, err, codes.AlreadyExists)
	_, err = cc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "t", SourceVolumeId: "nope"})
	wantCode(t, err, codes.NotFound)
	_, err = cc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{SourceVolumeId: "v1"})
	wantCode(t, err, codes.InvalidArgument)

	src := func(id string) *csi.VolumeContentSource {
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
	}
	v1, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "c", VolumeCapabilities: mountRW, VolumeContentSource: src(s1.Snapshot.SnapshotId)})
	mustOK(t, err)
	v2, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "c", VolumeCapabilities: mountRW, VolumeContentSource: src(s1.Snapshot.SnapshotId)})
	mustOK(t, err)
	if v1.Volume.VolumeId != v2.Volume.VolumeId {
		t.Fatalf("a repeated CreateVolume made another volume: %s, %s", v1.Volume.VolumeId, v2.Volume.VolumeId)
	}
	_, err = cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "c", VolumeCapabilities: mountRW})
	wantCode(t, err, codes.AlreadyExists)
	_, err = cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "d", VolumeCapabilities: mountRW, VolumeContentSource: src("snap-missing")})
	wantCode(t, err, codes.NotFound)
	_, err = cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "e", VolumeContentSource: src(s1.Snapshot.SnapshotId)})
	wantCode(t, err, codes.InvalidArgument)

	_, err = cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "v1"})
	wantCode(t, err, codes.FailedPrecondition)
	_, err = cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "never-was"})
	mustOK(t, err)
	_, err = cc.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: "never-was"})
	mustOK(t, err)

	g, err := gc.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{"v1", "v2"}})
	mustOK(t, err)
	_, err = gc.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{"v1"}})
	wantCode(t, err, codes.AlreadyExists)
	_, err = cc.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: g.GroupSnapshot.Snapshots[0].SnapshotId})
	wantCode(t, err, codes.FailedPrecondition)

	// A restart keeps them.
	a.Down()
	up(t, a)
	st := a.Snapshot()
	if len(st.Snapshots) != 3 || len(st.GroupSnapshots) != 1 || len(st.Clones) != 1 {
		t.Fatalf("after a restart: %d snapshots, %d group snapshots, %d copies; want 3, 1, 1", len(st.Snapshots), len(st.GroupSnapshots), len(st.Clones))
	}
	list, err := cc.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SourceVolumeId: "v1"})
	mustOK(t, err)
	if len(list.Entries) != 2 {
		t.Fatalf("snapshots of v1: %v, want the plain one and the group's member", list.Entries)
	}

	// Cleanup, twice: the second time finds nothing and answers OK.
	for range 2 {
		_, err = gc.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: g.GroupSnapshot.GroupSnapshotId})
		mustOK(t, err)
		_, err = cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v1.Volume.VolumeId})
		mustOK(t, err)
		_, err = cc.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: s1.Snapshot.SnapshotId})
		mustOK(t, err)
	}
	st = a.Snapshot()
	if len(st.Snapshots)+len(st.GroupSnapshots)+len(st.Clones) != 0 {
		t.Fatalf("left after cleanup: %+v %+v %+v", st.Snapshots, st.GroupSnapshots, st.Clones)
	}
	_, err = gc.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: g.GroupSnapshot.GroupSnapshotId})
	wantCode(t, err, codes.NotFound)
}

// TestCSICopiesAreFenced: a fenced client can neither read nor write a
// copy, as for any volume of the site.
func TestCSICopiesAreFenced(t *testing.T) {
	a, _ := startPair(t, pairOpts{Interval: 20 * time.Millisecond})
	cc := csi.NewControllerClient(a.conn)
	ctx := ctxT(t)
	v, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "empty", VolumeCapabilities: mountRW})
	mustOK(t, err)
	c := dataClient(t, a, nodeB)
	_, err = c.Write(ctx, v.Volume.VolumeId, 0, []byte("x"))
	mustOK(t, err)
	fenceCIDRs(t, a, nodeB+"/32")
	if _, err := c.Write(ctx, v.Volume.VolumeId, 0, []byte("y")); err == nil {
		t.Fatal("a fenced client wrote to a copy")
	}
	if got, err := c.Read(ctx, v.Volume.VolumeId, 0); !errors.Is(err, sim.ErrFenced) {
		t.Fatalf("a fenced client read a copy: %q, %v", got, err)
	}
	if !slices.ContainsFunc(a.Snapshot().Clones, func(c sim.CloneState) bool { return string(c.Blocks[0].Data) == "x" }) {
		t.Fatal("the copy lost its write")
	}
}

func fenceCIDRs(t *testing.T, s *siteUnderTest, cidrs ...string) {
	t.Helper()
	var cs []*fence.CIDR
	for _, c := range cidrs {
		cs = append(cs, &fence.CIDR{Cidr: c})
	}
	_, err := s.fc.FenceClusterNetwork(ctxT(t), &fence.FenceClusterNetworkRequest{Cidrs: cs, Secrets: s.cfg.Secrets})
	mustOK(t, err)
}

// TestReplicasUnchanged: the comparison that proves production untouched
// names a replica promoted, and with data a block changed.
func TestReplicasUnchanged(t *testing.T) {
	a, b := startPair(t, pairOpts{Interval: 20 * time.Millisecond})
	enable(t, a, group("vg-1"))
	enable(t, b, group("vg-1"))
	w := dataClient(t, a, nodeA)
	_, err := w.Write(ctxT(t), "v1", 0, []byte("one"))
	mustOK(t, err)
	waitSynced(t, a, "vg/vg-1")
	before := b.Snapshot()
	if d := sim.ReplicasUnchanged(before, b.Snapshot(), true); len(d) != 0 {
		t.Fatalf("a state differs from itself: %v", d)
	}
	_, err = w.Write(ctxT(t), "v1", 0, []byte("two"))
	mustOK(t, err)
	waitSynced(t, a, "vg/vg-1")
	if d := sim.ReplicasUnchanged(before, b.Snapshot(), false); len(d) != 0 {
		t.Fatalf("replication alone counted as a change: %v", d)
	}
	if d := sim.ReplicasUnchanged(before, b.Snapshot(), true); len(d) != 1 || !strings.Contains(d[0], "block 0 of v1 changed") {
		t.Fatalf("with data: %v, want the replicated block named", d)
	}
	_, err = b.rc.PromoteVolume(ctxT(t), &replication.PromoteVolumeRequest{ReplicationSource: group("vg-1"), Force: true})
	mustOK(t, err)
	if d := sim.ReplicasUnchanged(before, b.Snapshot(), false); len(d) != 1 || !strings.Contains(d[0], "vg/vg-1: role primary") {
		t.Fatalf("after a promotion: %v, want the role change named", d)
	}
}

// TestCSIFaults: fault rules name the CSI RPCs as they name CSI-Addons
// ones: an ABORTED (operation pending) once, then the call goes through.
func TestCSIFaults(t *testing.T) {
	a, _ := startPair(t, pairOpts{})
	mustOK(t, a.SetFaults([]sim.FaultRule{{Method: "CreateSnapshot", Code: "ABORTED", Count: 1, Message: "operation pending"}}))
	cc := csi.NewControllerClient(a.conn)
	_, err := cc.CreateSnapshot(ctxT(t), &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "v1"})
	wantCode(t, err, codes.Aborted)
	_, err = cc.CreateSnapshot(ctxT(t), &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "v1"})
	mustOK(t, err)
}

// TestCSILostAnswer: a Lost rule carries the create out and answers its
// code instead: the snapshot and the copy exist though the caller got an
// error, and a repeat of the same name, once the rule is spent, returns
// them. The rule is refused where it does not apply, or without a code.
func TestCSILostAnswer(t *testing.T) {
	a, _ := startPair(t, pairOpts{})
	cc := csi.NewControllerClient(a.conn)
	ctx := ctxT(t)
	r, err := sim.ParseFaultRule("CreateSnapshot:DEADLINE_EXCEEDED,count=2,lost")
	mustOK(t, err)
	mustOK(t, a.SetFaults([]sim.FaultRule{r, {Method: "CreateVolume", Code: "UNAVAILABLE", Count: 1, Lost: true}}))
	_, err = cc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "v1"})
	wantCode(t, err, codes.DeadlineExceeded)
	if n := len(a.Snapshot().Snapshots); n != 1 {
		t.Fatalf("%d snapshots after a lost answer, want the one made", n)
	}
	_, err = cc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "v1"})
	wantCode(t, err, codes.DeadlineExceeded)
	sn, err := cc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "v1"})
	mustOK(t, err)
	if got := a.Snapshot().Snapshots; len(got) != 1 || got[0].ID != sn.Snapshot.SnapshotId {
		t.Fatalf("snapshots %v, the repeat answered %v", got, sn.Snapshot)
	}
	src := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: sn.Snapshot.SnapshotId}}}
	_, err = cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "c", VolumeCapabilities: mountRW, VolumeContentSource: src})
	wantCode(t, err, codes.Unavailable)
	v, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "c", VolumeCapabilities: mountRW, VolumeContentSource: src})
	mustOK(t, err)
	if got := a.Snapshot().Clones; len(got) != 1 || got[0].ID != v.Volume.VolumeId {
		t.Fatalf("copies %v, the repeat answered %v", got, v.Volume)
	}
	if n := a.FaultCounts()["CreateSnapshot:DeadlineExceeded:LOST"]; n != 2 {
		t.Fatalf("lost fired %d times on CreateSnapshot, want 2: %v", n, a.FaultCounts())
	}
	for _, tc := range []struct {
		rule sim.FaultRule
		want string
	}{
		{sim.FaultRule{Method: "PromoteVolume", Code: "UNAVAILABLE", Count: 1, Lost: true}, "lost applies to"},
		{sim.FaultRule{Method: "CreateVolume", Count: 1, Lost: true, Latency: time.Millisecond}, "lost needs the code"},
	} {
		if err := a.SetFaults([]sim.FaultRule{tc.rule}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetFaults(%+v) = %v, want an error with %q", tc.rule, err, tc.want)
		}
	}
}

// TestFaultsAimedAtOneUnit: a rule with a subject fires on the calls on
// that unit only.
func TestFaultsAimedAtOneUnit(t *testing.T) {
	a, _ := startPair(t, pairOpts{})
	for _, src := range []*replication.ReplicationSource{group("vg-1"), group("vg-2"), volume("solo")} {
		enable(t, a, src)
	}
	r, err := sim.ParseFaultRule("PromoteVolume:UNAVAILABLE,p=1,subject=vg-2")
	mustOK(t, err)
	mustOK(t, a.SetFaults([]sim.FaultRule{r}))
	_, err = a.rc.PromoteVolume(ctxT(t), &replication.PromoteVolumeRequest{ReplicationSource: group("vg-1")})
	mustOK(t, err)
	_, err = a.rc.PromoteVolume(ctxT(t), &replication.PromoteVolumeRequest{ReplicationSource: group("vg-2")})
	wantCode(t, err, codes.Unavailable)
	_, err = a.rc.PromoteVolume(ctxT(t), &replication.PromoteVolumeRequest{ReplicationSource: volume("solo")})
	mustOK(t, err)
}

// TestCSIValidateVolumeCapabilities: the spec's required controller call
// confirms one-node capabilities of a replica or a copy, says why a
// multi-node one is not, and answers NOT_FOUND for a volume the site does
// not hold (Nomad calls it to register a volume).
func TestCSIValidateVolumeCapabilities(t *testing.T) {
	a, _ := startPair(t, pairOpts{})
	cc := csi.NewControllerClient(a.conn)
	ctx := ctxT(t)
	r, err := cc.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "v1", VolumeCapabilities: mountRW})
	mustOK(t, err)
	if r.GetConfirmed() == nil || len(r.GetConfirmed().GetVolumeCapabilities()) != 1 {
		t.Fatalf("a one-node mount of a replica: %v", r)
	}
	multi := []*csi.VolumeCapability{{AccessType: mountRW[0].AccessType,
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER}}}
	r, err = cc.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "v1", VolumeCapabilities: multi})
	mustOK(t, err)
	if r.GetConfirmed() != nil || !strings.Contains(r.GetMessage(), "one node at a time") {
		t.Fatalf("a multi-node writer: %v", r)
	}
	_, err = cc.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "nope", VolumeCapabilities: mountRW})
	wantCode(t, err, codes.NotFound)
	_, err = cc.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "v1"})
	wantCode(t, err, codes.InvalidArgument)
	sn, err := cc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "v1"})
	mustOK(t, err)
	cp, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "c", VolumeCapabilities: mountRW, VolumeContentSource: &csi.VolumeContentSource{
		Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: sn.Snapshot.SnapshotId}}}})
	mustOK(t, err)
	r, err = cc.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: cp.Volume.VolumeId, VolumeCapabilities: mountRW})
	mustOK(t, err)
	if r.GetConfirmed() == nil {
		t.Fatalf("a copy: %v", r)
	}
}

// TestReplicaSnapshotHoldsItsLastSync: a snapshot of a replica holds the
// replica's data as of the last sync that reached it, and nothing the
// primary wrote since: with the link cut, writes on the primary stay
// there (it reports replication DEGRADED and the same last sync), and a
// snapshot and a group snapshot of the replica cut then hold the data,
// and the position (Seq), of that sync. Points in time rely on it: the
// last sync the primary reported before the cut is what a point holds.
func TestReplicaSnapshotHoldsItsLastSync(t *testing.T) {
	a, b := startPair(t, pairOpts{Interval: 20 * time.Millisecond})
	enable(t, a, group("vg-1"))
	enable(t, b, group("vg-1"))
	w := dataClient(t, a, nodeA)
	ctx := ctxT(t)
	for _, v := range []string{"v1", "v2"} {
		_, err := w.Write(ctx, v, 0, []byte("synced "+v))
		mustOK(t, err)
	}
	waitSynced(t, a, "vg/vg-1")

	// A shipping round under way when the link is cut still ships: the
	// writes come once the primary reports the link down.
	a.SetLink(false)
	eventually(t, 5*time.Second, "the primary to report the failed shipping", func() bool {
		r, err := info(t, a, group("vg-1"))
		return err == nil && r.GetStatus() == replication.GetVolumeReplicationInfoResponse_DEGRADED
	})
	synced, err := info(t, a, group("vg-1"))
	mustOK(t, err)
	seq := a.Snapshot().Unit("vg/vg-1").PeerSeq
	for _, v := range []string{"v1", "v2"} {
		_, err := w.Write(ctx, v, 0, []byte("never shipped "+v))
		mustOK(t, err)
	}
	now, err := info(t, a, group("vg-1"))
	mustOK(t, err)
	if !now.GetLastSyncTime().AsTime().Equal(synced.GetLastSyncTime().AsTime()) {
		t.Fatalf("the last sync moved from %v to %v with the link cut", synced.GetLastSyncTime().AsTime(), now.GetLastSyncTime().AsTime())
	}
	cc, gc := csi.NewControllerClient(b.conn), csi.NewGroupControllerClient(b.conn)
	snap, err := cc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "pit-v1", SourceVolumeId: "v1"})
	mustOK(t, err)
	gsnap, err := gc.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: "pit-vg-1", SourceVolumeIds: []string{"v1", "v2"}})
	mustOK(t, err)
	ids := []string{snap.Snapshot.SnapshotId}
	for _, s := range gsnap.GroupSnapshot.Snapshots {
		ids = append(ids, s.SnapshotId)
	}
	st := b.Snapshot()
	if u := st.Unit("vg/vg-1"); u.Seq != seq {
		t.Fatalf("the replica is at %d, the last sync shipped %d", u.Seq, seq)
	}
	if u := a.Snapshot().Unit("vg/vg-1"); u.Seq <= seq {
		t.Fatalf("the primary is at %d, not past the last sync %d", u.Seq, seq)
	}
	for _, sn := range st.Snapshots {
		if !slices.Contains(ids, sn.ID) {
			continue
		}
		if got := string(sn.Blocks[0].Data); got != "synced "+sn.Volume || sn.Seq != seq {
			t.Fatalf("snapshot %s of %s holds %q at %d, want the last sync's %q at %d", sn.ID, sn.Volume, got, sn.Seq, "synced "+sn.Volume, seq)
		}
		ids = slices.DeleteFunc(ids, func(id string) bool { return id == sn.ID })
	}
	if len(ids) > 0 {
		t.Fatalf("snapshots %v not on the replica's site", ids)
	}
	a.SetLink(true)
	waitSynced(t, a, "vg/vg-1")
	check(t, a, b)
}
