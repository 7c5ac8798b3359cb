package sim

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/drover-dr/drover/csiaddons/replication"
)

// The ceph-csi profile's replication answers, read from ceph-csi at commit
// 52fcb7b (internal/csi-addons/rbd/replication.go, ReplicationServer) and
// measured against it on Ceph 16.2.15 (shared/ceph/README.md, make
// e2e-ceph). The copy's mirror status, which ceph-csi reads from
// rbd-mirror, is derived from the pair's state:
//
//   - a primary: its peer replays the mirror snapshots it takes;
//   - a copy replaying a live primary: up+replaying with the timestamp of
//     its last snapshot ("replaying, {...local_snapshot_timestamp...}");
//   - both copies non-primary with nothing left to exchange: up+unknown on
//     both sides (the planned move, once the demote snapshot arrived);
//   - a copy just demoted, one waiting for its first snapshot, one
//     being re-copied after a resync, or one split-brained (it took writes
//     the primary never saw): a status without snapshot details.

// errNoSnapshotDetails is what ceph-csi's checkVolumeResyncStatus answers
// when the local status carries no snapshot timestamp: getLastSyncInfo
// fails with "no snapshot details" (ErrLastSyncTimeNotFound) and
// ReplicationServer.ResyncVolume wraps it as INTERNAL. Measured:
// shared/ceph/README.md item 3.
func errNoSnapshotDetails() error {
	return status.Error(codes.Internal, "failed to get last sync info: no snapshot details: last sync time not found")
}

// errNoRemoteStatus is GetVolumeReplicationInfo's answer on a primary
// copy whose global mirror status holds no peer site's status
// (GlobalMirrorStatus.GetRemoteSiteStatus in internal/rbd/mirror.go finds
// none: librbd's ErrNotExist, "RBD image not found", wrapped as INTERNAL).
// A restarted rbd-mirror removes the statuses its former instance left
// and reports again only once its image replayers run. Measured (make
// e2e-ceph's power loss, these words): from the other site's restart until
// 66 s after it.
func errNoRemoteStatus() error {
	return status.Error(codes.Internal, "failed to get remote status: RBD image not found: rbd: ret=-2, No such file or directory")
}

// peerMirrorRestarting tells whether the peer's mirror daemon, restarted
// after a power loss, has not yet reported this site's copies.
func (s *Site) peerMirrorRestarting(now time.Time) bool {
	r := s.peerRestarted.Load()
	return r != 0 && now.Before(time.Unix(0, r).Add(s.cfg.MirrorRestart))
}

// cephResync is ReplicationServer.ResyncVolume (ceph-csi profile):
//
//   - a primary: INVALID_ARGUMENT "image is in primary state";
//   - ready=true only when the local status is up+unknown and so is the
//     peer's (checkRemoteSiteStatus): both copies non-primary and in sync,
//     the planned move's final sync done. A healthy copy replaying a live
//     primary answers ready=false, OK, for as long as it replays (the
//     comment in ResyncVolume; measured: item 3, ready=false for minutes);
//   - force with the image still the one a demotion stamped (its saved
//     creation time equals the image's) issues librbd's mirror resync
//     (rbdImage.Resync, internal/rbd/mirror.go), which always answers
//     ErrUnavailable: UNAVAILABLE "awaiting initial resync due to split
//     brain". Force does not look for a split brain: a cleanly demoted copy
//     is re-copied in full too. The re-created image has no stamp, so a
//     later forced call resyncs nothing again (commit e013cfed1, "Dont depend
//     on image state to issue resync"). Measured: item 3 (UNAVAILABLE, then a
//     NOT_FOUND while the image is re-created);
//   - not ready: checkVolumeResyncStatus reads the local description; one
//     without snapshot details answers INTERNAL "failed to get last sync
//     info: no snapshot details" (errNoSnapshotDetails), persistently for a
//     split brain, for a while after a demotion or a resync.
//
// The pre-2023 FAILED_PRECONDITION "Force resync to recover volume" is gone
// from ceph-csi since e013cfed1; this profile never answers it.
func (r *replicationServer) cephResync(ctx context.Context, req *replication.ResyncVolumeRequest) (*replication.ResyncVolumeResponse, error) {
	ready := false
	err := r.s.withUnit(ctx, "ResyncVolume", req.GetSecrets(), req.GetVolumeId(), req.GetReplicationSource(), func(u *unit) error {
		u.mu.Lock()
		enabled, role, resyncing, inSync, stamp := u.st.Enabled, u.st.Role, u.st.Resyncing, u.st.InSync, u.st.DemoteStamp
		epoch, seq := u.st.Epoch, u.st.Seq
		u.mu.Unlock()
		if !enabled {
			return r.s.profile.refuse("ResyncVolume", refuseNotEnabled, u)
		}
		if role == RolePrimary {
			return status.Error(codes.InvalidArgument, "image is in primary state")
		}
		ps, perr := r.s.peerUnitStatus(ctx, u.st.Key())
		peerUp := perr == nil
		u.mu.Lock()
		split := peerUp && ps.Role == RolePrimary && u.splitBrain(ps.Lineage, ps.Seq)
		u.mu.Unlock()
		ready = peerUp && !resyncing && ps.Role != RolePrimary && !ps.Resyncing && !ps.Recreating &&
			ps.Epoch == epoch && ps.Seq == seq
		if req.GetForce() && stamp {
			now := time.Now()
			u.mu.Lock()
			u.st.Resyncing = true
			u.st.InSync = false
			u.st.DemoteStamp = false
			u.st.ResyncStart = now
			u.recreateStart, u.recreateUntil = now, now.Add(r.s.recreateSpan())
			err := r.s.commit(u)
			u.mu.Unlock()
			if err != nil {
				return err
			}
			r.s.log.Info("resync issued: the copy is re-created from the primary", "unit", u.st.Key())
			return status.Error(codes.Unavailable, "image needs to be recreated: awaiting initial resync due to split brain")
		}
		if ready {
			return nil
		}
		switch {
		case resyncing:
			// Re-created and waiting for its first copy (bootstrapping).
			return errNoSnapshotDetails()
		case !peerUp:
			// rbd-mirror keeps the last status it reported.
			if inSync {
				return nil
			}
			return errNoSnapshotDetails()
		case split:
			// Split brain: up+error, "split-brain", until a forced resync.
			return errNoSnapshotDetails()
		case !inSync:
			// Just demoted, or starting its replay.
			return errNoSnapshotDetails()
		}
		return nil // replaying: ready=false
	})
	if err != nil {
		return nil, err
	}
	return &replication.ResyncVolumeResponse{Ready: ready}, nil
}

// cephInfo is ReplicationServer.GetVolumeReplicationInfo (ceph-csi
// profile); u.mu is held. A copy that is not primary: INVALID_ARGUMENT
// "image is not in primary state". While the peer's mirror daemon,
// restarted, has not reported it: INTERNAL (errNoRemoteStatus). Before the peer holds a snapshot of it:
// NOT_FOUND "failed to get last sync info" (ErrLastSyncTimeNotFound).
// Then getLastSyncInfo reads the peer's description: last_sync_time is
// the timestamp of the last snapshot the peer holds
// (local_snapshot_timestamp, whole seconds), last_sync_duration its
// last_snapshot_sync_seconds (whole seconds), last_sync_bytes its
// last_snapshot_bytes; status and status_message are never set (the
// vendored spec has no such fields). Measured: item 7 (a last sync time
// about 20 s after enable), and make e2e-ceph.
func cephInfo(u *unit, peerRestarting bool) (*replication.GetVolumeReplicationInfoResponse, error) {
	if u.st.Role != RolePrimary {
		return nil, status.Error(codes.InvalidArgument, "image is not in primary state")
	}
	if peerRestarting {
		return nil, errNoRemoteStatus()
	}
	if u.st.LastSync == nil {
		return nil, status.Error(codes.NotFound, "failed to get last sync info: no snapshot details: last sync time not found")
	}
	return &replication.GetVolumeReplicationInfoResponse{
		LastSyncTime:     timestamppb.New(time.Unix(u.st.LastSync.SnapTime.Unix(), 0)),
		LastSyncDuration: durationpb.New(u.st.LastSync.Duration.Truncate(time.Second)),
		LastSyncBytes:    u.st.LastSync.Bytes,
	}, nil
}

// snapshotDue tells whether a primary copy has a mirror snapshot to ship
// (ceph-csi profile); u.mu is held. One is due when enable or promote took
// one that has not shipped, when the schedule PromoteVolume added comes
// round, or when the peer's copy was re-created by a resync and waits for
// its first full copy (rbd-mirror bootstraps it from the primary).
func (u *unit) snapshotDue(now time.Time, p peerUnitStatus) bool {
	if p.Recreating {
		return false
	}
	return u.st.SnapPending || p.Resyncing || (u.st.Schedule > 0 && !now.Before(u.nextSnap))
}

// splitBrain tells whether this copy cannot follow a primary of this
// lineage (ceph-csi profile); u.mu is held. Either it holds writes the
// lineage lacks, or it was primary itself, was demoted, and the lineage's
// next epoch began with a forced promotion that did not start from its
// demotion: rbd-mirror finds no snapshot of the demotion in the new
// primary's history and reports the image up+error "split-brain"
// (snapshot-mode replayer), whose description has no snapshot details.
// Only a resync (re-creating the image) clears it.
func (u *unit) splitBrain(lineage []Fork, curSeq uint64) bool {
	if !Consistent(lineage, curSeq, u.st.Epoch, u.st.Seq) {
		return true
	}
	n := len(u.st.RoleChanges)
	if !u.st.Demoted || n == 0 {
		return false
	}
	last := u.st.RoleChanges[n-1]
	if last.Role != RoleSecondary || last.Epoch != u.st.Epoch {
		return false
	}
	for i, f := range lineage {
		if f.Epoch == u.st.Epoch && i+1 < len(lineage) {
			return lineage[i+1].Forced
		}
	}
	return false
}

func copyParams(params map[string]string) map[string]string {
	if len(params) == 0 {
		return nil
	}
	out := make(map[string]string, len(params))
	for k, v := range params {
		out[k] = v
	}
	return out
}

// tickWithin tells whether a schedule of period every, with a tick at
// phase, comes round within (from, to].
func tickWithin(phase time.Time, every time.Duration, from, to time.Time) bool {
	if every <= 0 || phase.IsZero() || !to.After(from) {
		return false
	}
	n := func(t time.Time) int64 {
		d := t.Sub(phase)
		k := int64(d / every)
		if d < 0 && d%every != 0 {
			k--
		}
		return k
	}
	return n(to) > n(from)
}

// scheduledSnapshotAfterDemotion is Config.ScheduleRace: the primary
// snapshot the schedule took across the demotion that ended at demoted
// lands just after it, and the copy is primary again in the same epoch
// (no promotion: its data is the demoted data), with a snapshot to ship.
// A copy promoted, resynced or demoted again meanwhile is left alone.
func (s *Site) scheduledSnapshotAfterDemotion(u *unit, demoted time.Time) {
	time.Sleep(min(s.cfg.SyncInterval/2, 500*time.Millisecond))
	u.mu.Lock()
	defer u.mu.Unlock()
	last := u.st.RoleChanges[len(u.st.RoleChanges)-1]
	if u.st.Role != RoleSecondary || u.st.Resyncing || !last.Time.Equal(demoted) {
		return
	}
	u.st.Role = RolePrimary
	u.st.Demoted = false
	u.st.SnapPending = true
	u.st.RoleChanges = append(u.st.RoleChanges, RoleChange{Time: time.Now(), Role: RolePrimary, Epoch: u.st.Epoch, Seq: u.st.Seq, Scheduled: true})
	u.nextSync = time.Time{}
	if err := s.store.saveUnit(&u.st); err != nil {
		s.log.Error("persist unit", "unit", u.st.Key(), "err", err)
	}
	s.log.Warn("a scheduled mirror snapshot taken across the demotion made the copy primary again", "unit", u.st.Key())
}
