package sim_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/sim"
)

// The ceph-csi profile's mirroring, each behaviour as ceph-csi 52fcb7b
// answers it (sim/ceph.go, sim/profile.go cite the code and the
// measurement).

const noSnapshotDetails = "failed to get last sync info: no snapshot details: last sync time not found"

// cephPairWith starts a ceph-csi pair whose "1m" of schedule lasts minute.
func cephPairWith(t *testing.T, minute time.Duration) (a, b *siteUnderTest) {
	t.Helper()
	ceph := func(c *sim.Config) { c.Driver = sim.DriverCephCSI; c.ScheduleMinute = minute }
	return startPair(t, pairOpts{TweakA: ceph, TweakB: ceph})
}

func promote(t *testing.T, s *siteUnderTest, src *replication.ReplicationSource, force bool, params map[string]string) error {
	t.Helper()
	_, err := s.rc.PromoteVolume(ctxT(t), &replication.PromoteVolumeRequest{ReplicationSource: src, Force: force, Parameters: params})
	return err
}

func demote(t *testing.T, s *siteUnderTest, src *replication.ReplicationSource, force bool) error {
	t.Helper()
	_, err := s.rc.DemoteVolume(ctxT(t), &replication.DemoteVolumeRequest{ReplicationSource: src, Force: force})
	return err
}

func resync(t *testing.T, s *siteUnderTest, src *replication.ReplicationSource, force bool) (bool, error) {
	t.Helper()
	r, err := s.rc.ResyncVolume(ctxT(t), &replication.ResyncVolumeRequest{ReplicationSource: src, Force: force})
	return r.GetReady(), err
}

func lastSync(t *testing.T, s *siteUnderTest, key string) time.Time {
	t.Helper()
	u := s.Snapshot().Unit(key)
	if u == nil || u.LastSync == nil {
		return time.Time{}
	}
	return u.LastSync.SnapTime
}

// EnableVolumeReplication ships the image once and adds no schedule, even
// with a schedulingInterval; PromoteVolume with one adds it, also on a
// copy already primary; without one it adds none.
func TestCephCSIScheduleComesFromPromote(t *testing.T) {
	a, b := cephPairWith(t, 100*time.Millisecond)
	ctx := ctxT(t)
	src := group("vg-1")
	w := dataClient(t, a, nodeA)
	_, err := w.Write(ctx, "v1", 0, []byte("before enable"))
	mustOK(t, err)
	_, err = a.rc.EnableVolumeReplication(ctx, &replication.EnableVolumeReplicationRequest{ReplicationSource: src,
		Parameters: map[string]string{"mirroringMode": "snapshot", "schedulingInterval": "1m"}})
	mustOK(t, err)
	// The initial copy arrives.
	eventually(t, 5*time.Second, "the initial copy", func() bool {
		got, err := dataClient(t, b, nodeB).Read(ctx, "v1", 0)
		return err == nil && string(got) == "before enable" && !lastSync(t, a, "vg/vg-1").IsZero()
	})
	first := lastSync(t, a, "vg/vg-1")
	// Then nothing more: a write stays on A, the last sync time stays.
	_, err = w.Write(ctx, "v1", 1, []byte("after enable"))
	mustOK(t, err)
	quiet := func(what string) {
		t.Helper()
		time.Sleep(600 * time.Millisecond) // six "minutes" of the schedule asked at enable
		if _, err := dataClient(t, b, nodeB).Read(ctx, "v1", 1); !errors.Is(err, sim.ErrNotFound) {
			t.Fatalf("%s: a write after the initial copy reached the peer: %v", what, err)
		}
		if got := lastSync(t, a, "vg/vg-1"); !got.Equal(first) {
			t.Fatalf("%s: the copy synced again at %v", what, got)
		}
	}
	quiet("enabled only")
	if u := a.Snapshot().Unit("vg/vg-1"); u.Schedule != 0 {
		t.Fatalf("enable added a schedule of %v", u.Schedule)
	}
	// A promotion of the primary without schedulingInterval adds none.
	mustOK(t, promote(t, a, src, false, map[string]string{"mirroringMode": "snapshot"}))
	quiet("promoted without schedulingInterval")
	// An interval ceph-csi's mgr refuses: the answer is UNKNOWN.
	wantCode(t, promote(t, a, src, false, map[string]string{"schedulingInterval": "1s"}), codes.Unknown)
	quiet("promoted with a refused interval")
	// With "1m": a schedule of one (scaled) minute, snapshots keep coming.
	mustOK(t, promote(t, a, src, false, map[string]string{"schedulingInterval": "1m"}))
	if u := a.Snapshot().Unit("vg/vg-1"); u.Schedule != 100*time.Millisecond {
		t.Fatalf("schedule %v, want 100ms for 1m at a 100ms minute", u.Schedule)
	}
	eventually(t, 5*time.Second, "the scheduled snapshot", func() bool {
		got, err := dataClient(t, b, nodeB).Read(ctx, "v1", 1)
		return err == nil && string(got) == "after enable"
	})
	for i := 0; i < 3; i++ {
		before := lastSync(t, a, "vg/vg-1")
		eventually(t, 5*time.Second, "one more scheduled snapshot", func() bool {
			return lastSync(t, a, "vg/vg-1").After(before)
		})
	}
	check(t, a, b)
}

// The scale of a schedule: "1h" lasts sixty of the site's minutes, and a
// longer interval added later does not replace a shorter one.
func TestCephCSIScheduleMinute(t *testing.T) {
	a, _ := cephPairWith(t, 10*time.Millisecond)
	src := group("vg-1")
	enable(t, a, src)
	mustOK(t, promote(t, a, src, false, map[string]string{"schedulingInterval": "1h"}))
	if u := a.Snapshot().Unit("vg/vg-1"); u.Schedule != 600*time.Millisecond {
		t.Fatalf("schedule %v, want 600ms for 1h at a 10ms minute", u.Schedule)
	}
	mustOK(t, promote(t, a, src, false, map[string]string{"schedulingInterval": "2m"}))
	mustOK(t, promote(t, a, src, false, map[string]string{"schedulingInterval": "1d"}))
	if u := a.Snapshot().Unit("vg/vg-1"); u.Schedule != 20*time.Millisecond {
		t.Fatalf("schedule %v, want the shortest added, 2m = 20ms", u.Schedule)
	}
}

// The spec profile keeps its own reading: the schedule comes with
// EnableVolumeReplication and the primary ships at every interval.
func TestSpecScheduleComesFromEnable(t *testing.T) {
	a, b := startPair(t, pairOpts{TweakA: func(c *sim.Config) { c.ScheduleMinute = 100 * time.Millisecond }})
	ctx := ctxT(t)
	_, err := a.rc.EnableVolumeReplication(ctx, &replication.EnableVolumeReplicationRequest{ReplicationSource: group("vg-1"),
		Parameters: map[string]string{"schedulingInterval": "1m"}})
	mustOK(t, err)
	if u := a.Snapshot().Unit("vg/vg-1"); u.Schedule != 100*time.Millisecond {
		t.Fatalf("schedule %v, want 100ms", u.Schedule)
	}
	waitSynced(t, a, "vg/vg-1")
	_, err = dataClient(t, a, nodeA).Write(ctx, "v1", 1, []byte("later"))
	mustOK(t, err)
	eventually(t, 5*time.Second, "a later write to ship", func() bool {
		got, err := dataClient(t, b, nodeB).Read(ctx, "v1", 1)
		return err == nil && string(got) == "later"
	})
}

// DemoteVolume ignores force and the peer; demoting a copy that is not
// primary changes nothing. GetVolumeReplicationInfo: INVALID_ARGUMENT on a
// copy not primary, NOT_FOUND before the first sync, then the peer's last
// snapshot time in whole seconds and no status.
func TestCephCSIDemoteAndInfo(t *testing.T) {
	a, b := cephPairWith(t, 100*time.Millisecond)
	src := group("vg-1")
	a.SetLink(false)
	enable(t, a, src)
	_, err := info(t, a, src)
	wantMessage(t, err, codes.NotFound, noSnapshotDetails)
	a.SetLink(true)
	waitSynced(t, a, "vg/vg-1")
	r, err := info(t, a, src)
	mustOK(t, err)
	snap := lastSync(t, a, "vg/vg-1")
	if !r.GetLastSyncTime().AsTime().Equal(time.Unix(snap.Unix(), 0)) || r.GetLastSyncTime().GetNanos() != 0 {
		t.Fatalf("last sync time %v, want the peer's snapshot time %v in whole seconds", r.GetLastSyncTime().AsTime(), snap)
	}
	if r.GetStatus() != replication.GetVolumeReplicationInfoResponse_UNKNOWN || r.GetStatusMessage() != "" || r.GetLastSyncDuration().GetNanos() != 0 {
		t.Fatalf("info %v: ceph-csi sets no status and whole seconds of duration", r)
	}
	_, err = info(t, b, src)
	wantMessage(t, err, codes.InvalidArgument, "image is not in primary state")

	// The secondary: demote is a no-op, forced or not.
	changes := len(b.Snapshot().Unit("vg/vg-1").RoleChanges)
	mustOK(t, demote(t, b, src, false))
	mustOK(t, demote(t, b, src, true))
	if u := b.Snapshot().Unit("vg/vg-1"); len(u.RoleChanges) != changes || u.DemoteStamp || u.Role != sim.RoleSecondary {
		t.Fatalf("demoting a secondary changed it: %+v", u.RoleChanges)
	}
	// The primary, link cut, no force: demoted all the same, and stamped.
	a.SetLink(false)
	mustOK(t, demote(t, a, src, false))
	if u := a.Snapshot().Unit("vg/vg-1"); u.Role != sim.RoleSecondary || !u.DemoteStamp {
		t.Fatalf("demote without force, peer unreachable: role %s, stamp %v", u.Role, u.DemoteStamp)
	}
	// Messages for replication not enabled.
	err = promote(t, a, group("vg-2"), false, nil)
	wantMessage(t, err, codes.InvalidArgument, "mirroring is not enabled on vg-2, image is in disabled Mode")
	_, err = info(t, a, group("vg-2"))
	wantMessage(t, err, codes.InvalidArgument, "image mirroring is not enabled")
}

// A planned move: PromoteVolume without force is FAILED_PRECONDITION
// (EBUSY) while the peer is primary and until its demotion's snapshot has
// arrived; ResyncVolume answers ready=true only once both copies are
// non-primary and in sync, INTERNAL "no snapshot details" on the copy just
// demoted before that, and ready=false on a copy replaying a live primary.
func TestCephCSIPlannedMove(t *testing.T) {
	a, b := cephPairWith(t, 100*time.Millisecond)
	ctx := ctxT(t)
	src := group("vg-1")
	enable(t, a, src)
	mustOK(t, promote(t, a, src, false, map[string]string{"schedulingInterval": "1m"}))
	w := dataClient(t, a, nodeA)
	for i := 0; i < 4; i++ {
		_, err := w.Write(ctx, "v1", int64(i), []byte(fmt.Sprintf("a-%d", i)))
		mustOK(t, err)
	}
	eventually(t, 5*time.Second, "the secondary to replay", func() bool {
		_, err := resync(t, b, src, false)
		return err == nil
	})
	// A healthy secondary: ready=false, OK, as long as it replays; a
	// forced call does nothing to a copy never demoted as primary.
	for i := 0; i < 5; i++ {
		ready, err := resync(t, b, src, i%2 == 1)
		mustOK(t, err)
		if ready {
			t.Fatal("a secondary replaying a live primary answered ready=true")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if u := b.Snapshot().Unit("vg/vg-1"); u.Resyncing {
		t.Fatal("a forced resync of a copy never demoted as primary re-copied it")
	}
	_, err := resync(t, a, src, false)
	wantMessage(t, err, codes.InvalidArgument, "image is in primary state")
	err = promote(t, b, src, false, nil)
	wantCode(t, err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), "Device or resource busy") {
		t.Fatalf("refused promotion: %v", err)
	}

	// Demote A with its final snapshot held back by the link: A has no
	// snapshot details, B cannot be promoted without force yet.
	_, err = w.Write(ctx, "v1", 3, []byte("final"))
	mustOK(t, err)
	a.SetLink(false)
	mustOK(t, demote(t, a, src, false))
	for i := 0; i < 3; i++ {
		_, err = resync(t, a, src, false)
		wantMessage(t, err, codes.Internal, noSnapshotDetails)
		time.Sleep(50 * time.Millisecond)
	}
	wantCode(t, promote(t, b, src, false, nil), codes.FailedPrecondition)
	a.SetLink(true)
	for _, s := range []*siteUnderTest{a, b} {
		eventually(t, 5*time.Second, "ready=true on "+s.Name(), func() bool {
			ready, err := resync(t, s, src, false)
			if err != nil && status.Code(err) != codes.Internal {
				t.Fatalf("resync on %s: %v", s.Name(), err)
			}
			return ready
		})
	}
	mustOK(t, promote(t, b, src, false, map[string]string{"schedulingInterval": "1m"}))
	got, err := dataClient(t, b, nodeB).Read(ctx, "v1", 3)
	mustOK(t, err)
	if string(got) != "final" {
		t.Fatalf("the final write before the demotion: %q", got)
	}
	// A follows B: ready=false once it replays B's snapshots.
	eventually(t, 5*time.Second, "A to replay B", func() bool {
		ready, err := resync(t, a, src, false)
		return err == nil && !ready
	})
	if u := a.Snapshot().Unit("vg/vg-1"); u.Resyncing {
		t.Fatal("A was re-copied in a planned move")
	}
	rep := check(t, a, b)
	if len(rep.Lost) != 0 {
		t.Fatalf("the planned move lost writes: %v", rep.Lost)
	}
}

// A split brain: both copies written as primary. A non-forced resync of
// the demoted copy answers INTERNAL "no snapshot details" for as long as it
// is asked and changes nothing; a forced one re-creates the copy
// (UNAVAILABLE, then ABORTED or NOT_FOUND while it is re-created, INTERNAL
// until its first copy, then ready=false), discarding its divergent writes;
// the re-created copy carries no demote stamp, so further forced calls
// resync nothing. A forced promotion over a primary that was not demoted
// split-brains it even when it took no write the other never saw.
func TestCephCSISplitBrainResync(t *testing.T) {
	t.Run("diverged", func(t *testing.T) { splitBrainResync(t, true) })
	t.Run("forced promotion only", func(t *testing.T) { splitBrainResync(t, false) })
}

func splitBrainResync(t *testing.T, diverge bool) {
	a, b := cephPairWith(t, 100*time.Millisecond)
	ctx := ctxT(t)
	src := group("vg-1")
	enable(t, a, src)
	mustOK(t, promote(t, a, src, false, map[string]string{"schedulingInterval": "1m"}))
	wa := dataClient(t, a, nodeA)
	_, err := wa.Write(ctx, "v1", 0, []byte("common"))
	mustOK(t, err)
	waitSynced(t, a, "vg/vg-1")
	// A takes a write its peer never sees, then B is promoted by force
	// (A's node would be fenced in a failover).
	a.SetLink(false)
	if diverge {
		_, err = wa.Write(ctx, "v2", 0, []byte("a diverged"))
		mustOK(t, err)
	}
	mustOK(t, promote(t, b, src, true, map[string]string{"schedulingInterval": "1m"}))
	_, err = dataClient(t, b, nodeB).Write(ctx, "v1", 1, []byte("b wrote"))
	mustOK(t, err)
	a.SetLink(true)
	mustOK(t, demote(t, a, src, true))

	// Without force: INTERNAL, for good, and nothing happens.
	for i := 0; i < 6; i++ {
		_, err := resync(t, a, src, false)
		wantMessage(t, err, codes.Internal, noSnapshotDetails)
		time.Sleep(50 * time.Millisecond)
	}
	if got, err := dataClient(t, a, nodeA).Read(ctx, "v1", 1); !errors.Is(err, sim.ErrNotFound) {
		t.Fatalf("the split-brained copy replayed the new primary: %q %v", got, err)
	}
	if got, err := dataClient(t, a, nodeA).Read(ctx, "v2", 0); diverge && (err != nil || string(got) != "a diverged") {
		t.Fatalf("a non-forced resync touched the diverged copy: %q %v", got, err)
	}

	// With force: the resync is issued once.
	_, err = resync(t, a, src, true)
	wantMessage(t, err, codes.Unavailable, "image needs to be recreated: awaiting initial resync due to split brain")
	var seen []codes.Code
	eventually(t, 5*time.Second, "the re-created copy to replay", func() bool {
		ready, err := resync(t, a, src, true)
		c := status.Code(err)
		if len(seen) == 0 || seen[len(seen)-1] != c {
			seen = append(seen, c)
		}
		return err == nil && !ready
	})
	for _, c := range seen {
		if c != codes.Aborted && c != codes.NotFound && c != codes.Internal && c != codes.OK {
			t.Fatalf("answers while the copy was re-created: %v", seen)
		}
	}
	if seen[0] != codes.Aborted && seen[0] != codes.NotFound {
		t.Fatalf("the first answer after the resync was issued: %v, want ABORTED or NOT_FOUND while the image is re-created", seen)
	}
	if u := a.Snapshot().Unit("vg/vg-1"); u.DemoteStamp || u.Resyncing {
		t.Fatalf("re-created copy: stamp %v resyncing %v", u.DemoteStamp, u.Resyncing)
	}
	got, err := dataClient(t, a, nodeA).Read(ctx, "v1", 1)
	mustOK(t, err)
	if string(got) != "b wrote" {
		t.Fatalf("the resynced copy holds %q, want B's write", got)
	}
	if _, err := dataClient(t, a, nodeA).Read(ctx, "v2", 0); !errors.Is(err, sim.ErrNotFound) {
		t.Fatalf("the divergent write survived the resync: %v", err)
	}
	// A forced call now: no second resync.
	ready, err := resync(t, a, src, true)
	if err != nil || ready {
		t.Fatalf("forced resync of the re-created copy: ready %v, %v", ready, err)
	}
	check(t, a, b)
}

// Every replication RPC reads an unknown volume ID as ceph-csi does: one
// outside its format is INTERNAL, a well-formed one NOT_FOUND. Configured
// volumes stay addressable by their names. The spec profile answers
// NOT_FOUND for both.
func TestCephCSIVolumeIDs(t *testing.T) {
	a, _ := cephPair(t)
	spec, _ := startPair(t, pairOpts{})
	wellFormed := sim.CephVolumeID("rook-ceph", 2, "5f7a0b8e-1c2d-4e3f-9a8b-7c6d5e4f3a2b")
	if wellFormed != "0001-0009-rook-ceph-0000000000000002-5f7a0b8e-1c2d-4e3f-9a8b-7c6d5e4f3a2b" {
		t.Fatalf("composed %q", wellFormed)
	}
	bad := []struct{ id, says string }{
		{"nope", "string underflow"},
		{"0001-0009-rook-ceph-000000000000000X-5f7a0b8e-1c2d-4e3f-9a8b-7c6d5e4f3a2b", "invalid byte"},
		{"0001-0009-rook-ceph-0000000000000002-5f7a0b8e-1c2d-4e3f-9a8b-7c6d5e4f3a2b-x", "string size mismatch"},
		{"0001-00ff-rook-ceph-0000000000000002-5f7a0b8e-1c2d-4e3f-9a8b-7c6d5e4f3a2b", "string underflow"},
	}
	for name, call := range replCalls {
		ctx := ctxT(t)
		for _, b := range bad {
			err := call(ctx, a, "", volume(b.id), nil, false)
			if st := status.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "invalid VolumeID: error decoding volume ID") || !strings.Contains(st.Message(), b.says) {
				t.Errorf("ceph-csi %s(%q): %v, want INTERNAL invalid VolumeID (%s)", name, b.id, err, b.says)
			}
			wantCode(t, call(ctx, spec, "", volume(b.id), nil, false), codes.NotFound)
		}
		wantCode(t, call(ctx, a, "", volume(wellFormed), nil, false), codes.NotFound)
		wantCode(t, call(ctx, a, wellFormed, nil, nil, false), codes.NotFound)
		if name == "EnableVolumeReplication" {
			mustOK(t, call(ctx, a, "", volume("solo"), nil, false))
		}
	}
}

// The data path stays faithful under the profile: a demoted copy refuses
// writes, and the primary's lag grows without a schedule.
func TestCephCSILagWithoutSchedule(t *testing.T) {
	a, _ := cephPairWith(t, 50*time.Millisecond)
	ctx := ctxT(t)
	src := group("vg-1")
	enable(t, a, src)
	eventually(t, 5*time.Second, "the initial copy", func() bool {
		_, err := info(t, a, src)
		return err == nil
	})
	w := dataClient(t, a, nodeA)
	for i := 0; i < 3; i++ {
		_, err := w.Write(ctx, "v1", int64(i), bytes.Repeat([]byte{'x'}, 100))
		mustOK(t, err)
	}
	r1, err := info(t, a, src)
	mustOK(t, err)
	time.Sleep(1100 * time.Millisecond)
	r2, err := info(t, a, src)
	mustOK(t, err)
	if !r2.GetLastSyncTime().AsTime().Equal(r1.GetLastSyncTime().AsTime()) {
		t.Fatal("the last sync time moved without a schedule")
	}
	if lag := time.Since(r2.GetLastSyncTime().AsTime()); lag < time.Second {
		t.Fatalf("lag %v, want it to grow past a second", lag)
	}
	mustOK(t, demote(t, a, src, false))
	if _, err := w.Write(context.Background(), "v1", 0, []byte("late")); !errors.Is(err, sim.ErrReadOnly) {
		t.Fatalf("write on a demoted copy: %v", err)
	}
}

// TestCephCSICannotSnapshotAReplica: ceph-csi cuts a snapshot with rbd
// snap create on the source image, which a mirrored non-primary image
// refuses (INTERNAL, "Read-only file system"); the primary's copy can be
// cut. The spec profile cuts both (TestCSISnapshotsArePointInTime).
func TestCephCSICannotSnapshotAReplica(t *testing.T) {
	a, b := cephPairWith(t, 100*time.Millisecond)
	src := group("vg-1")
	enable(t, a, src)
	waitSynced(t, a, "vg/vg-1")
	ctx := ctxT(t)
	_, err := csi.NewControllerClient(b.conn).CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "test-v1", SourceVolumeId: "v1"})
	wantMessage(t, err, codes.Internal, "rbd: ret=-30, Read-only file system")
	_, err = csi.NewControllerClient(a.conn).CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "test-v1", SourceVolumeId: "v1"})
	mustOK(t, err)
}

// A site back from a power loss is a restarted site: its mirror daemon
// reports the status of its peer's primary copies only after a while
// (Config.MirrorRestart), and until then the primary's replication info
// answers INTERNAL "failed to get remote status: RBD image not found",
// as real ceph-csi did after a site's restart; then it answers as before.
// A site back from a network loss (Down, Up) keeps its daemon, and the
// primary never answers so.
func TestCephCSIPeerRestart(t *testing.T) {
	ceph := func(c *sim.Config) {
		c.Driver, c.ScheduleMinute, c.MirrorRestart = sim.DriverCephCSI, 100*time.Millisecond, time.Second
	}
	a, b := startPair(t, pairOpts{TweakA: ceph, TweakB: ceph})
	src := group("vg-1")
	enable(t, a, src)
	waitSynced(t, a, "vg/vg-1")
	noRemote := func() bool {
		_, err := info(t, a, src)
		return status.Code(err) == codes.Internal && strings.Contains(status.Convert(err).Message(), "failed to get remote status: RBD image not found")
	}

	// A network loss: the same daemon comes back.
	b.Down()
	mustOK(t, b.Up())
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if noRemote() {
			t.Fatal("the primary lost its peer's status after the peer came back from a network loss")
		}
	}

	// A power loss: while the peer is down its old status stays.
	b.PowerLoss()
	if !b.IsDown() {
		t.Fatal("a power loss left the site up")
	}
	_, err := info(t, a, src)
	mustOK(t, err)
	mustOK(t, b.Up())
	eventually(t, 5*time.Second, "the primary to answer without its restarted peer's status", noRemote)
	_, err = info(t, b, src)
	wantMessage(t, err, codes.InvalidArgument, "image is not in primary state")
	eventually(t, 10*time.Second, "the primary to answer again once the peer's daemon reported", func() bool {
		_, err := info(t, a, src)
		return err == nil
	})
}

// With Config.ScheduleRace, a demotion that the schedule's tick falls in
// leaves the copy primary again just after it returned, as Ceph 16.2.15
// did (sim/config.go); a demotion no tick falls in stays. A second
// demotion holds, and the copy then follows its peer's promotion without
// force.
func TestCephCSIScheduleRace(t *testing.T) {
	race := func(c *sim.Config) {
		c.Driver, c.ScheduleMinute, c.ScheduleRace = sim.DriverCephCSI, time.Second, true
	}
	a, b := startPair(t, pairOpts{TweakA: race, TweakB: race})
	src := group("vg-1")
	enable(t, a, src)
	mustOK(t, promote(t, a, src, false, map[string]string{"schedulingInterval": "1m"}))
	// No tick within a demotion made at once: it holds.
	mustOK(t, demote(t, a, src, false))
	time.Sleep(time.Second)
	_, err := resync(t, a, src, false)
	if status.Code(err) == codes.InvalidArgument {
		t.Fatalf("a demotion no tick fell in did not hold: %v", err)
	}
	mustOK(t, promote(t, a, src, true, map[string]string{"schedulingInterval": "1m"}))
	// A demotion that takes 1.5 s of a 1 s schedule spans a tick (a
	// latency for one call: the next demotion takes none).
	mustOK(t, a.SetFaults([]sim.FaultRule{{Method: "DemoteVolume", Latency: 1500 * time.Millisecond, Count: 1}}))
	mustOK(t, demote(t, a, src, false))
	eventually(t, 5*time.Second, "the copy to be primary again", func() bool {
		_, err := resync(t, a, src, false)
		return status.Code(err) == codes.InvalidArgument
	})
	wantMessage(t, func() error { _, err := resync(t, a, src, false); return err }(), codes.InvalidArgument, "image is in primary state")
	rc := a.Snapshot().Unit("vg/vg-1").RoleChanges
	if last := rc[len(rc)-1]; last.Role != sim.RolePrimary || !last.Scheduled {
		t.Fatalf("the last role change is %+v, want a scheduled snapshot's", last)
	}
	// Served again, the latency would span a tick again, and B could not
	// be promoted without force.
	mustOK(t, demote(t, a, src, false))
	eventually(t, 10*time.Second, "B to take the final snapshot and be promoted", func() bool {
		return promote(t, b, src, false, map[string]string{"schedulingInterval": "1m"}) == nil
	})
	eventually(t, 10*time.Second, "A to follow B", func() bool {
		ready, err := resync(t, a, src, false)
		return err == nil && !ready
	})
	// A copy primary again would be so 0.5 s after its demotion.
	time.Sleep(time.Second)
	flips := 0
	for _, c := range a.Snapshot().Unit("vg/vg-1").RoleChanges {
		if c.Scheduled {
			flips++
		}
	}
	if flips != 1 {
		t.Fatalf("the copy was primary again %d times, want once: the one-call latency served again", flips)
	}
	if rep := check(t, a, b); len(rep.Lost) != 0 || len(rep.Violations) != 0 {
		t.Fatalf("lost %v, violations %v", rep.Lost, rep.Violations)
	}
}
