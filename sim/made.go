package sim

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drover-dr/drover/csiaddons/replication"
)

// Replication of a volume created after start. EnableVolumeReplication on
// a volume the site created through CSI (a copy made from a snapshot, as
// a failover to a point in time restores one) makes it a replicated
// volume of its own, primary on this site, as RBD mirroring does when it
// is enabled on an image: the volume's data as it stands becomes its
// first writes (one per block, in block order, epoch 1), the copy is no
// longer a CSI copy (it cannot be deleted through CSI while its
// replication is on, as no replica can), and the link creates its copy on the peer with the first sync,
// secondary, under the same volume id. The peer refuses to create it
// when it holds a volume of that id already. Adopting is persisted
// before it is answered; a site that crashed between the unit's file and
// its site file restarts with the unit, never with both.
//
// Such a volume, primary here with its replication disabled, can be
// deleted through CSI (RBD deletes an image whose mirroring is off); the
// site then tells the peer, which removes the copy the first sync created
// while it is still secondary (rbd-mirror removes the non-primary image
// of an image whose mirroring the primary disabled). The peer's copy
// stays when the peer cannot be told (the link down), or when it was
// promoted there: it is the peer's own volume then.

// flatten is the ceph-csi profile's check before a volume made of a
// snapshot is made replicated: RBD mirrors a clone only once it has no
// parent, so without flattenMode: force the call is FAILED_PRECONDITION
// (HandleParentImageExistence, internal/rbd/mirror.go), and with it the
// first call queues the flatten and answers ABORTED ("flatten is in
// progress", as flattenRbdImage does while the manager's task runs); a
// call after it goes on. Other profiles, volumes made blank and volumes
// that are no CSI copy go on at once.
func (s *Site) flatten(volumeID string, src *replication.ReplicationSource, params map[string]string) error {
	if !s.profile.mirror {
		return nil
	}
	id := volumeID
	if v := src.GetVolume(); v != nil && v.GetVolumeId() != "" {
		id = v.GetVolumeId()
	}
	s.mu.Lock()
	cl, ok := s.sf.Clones[id]
	parent, flat := "", false
	if ok {
		parent, flat = cl.Snapshot, cl.Flattened
	}
	s.mu.Unlock()
	switch {
	case !ok || parent == "" || flat:
		return nil
	case params["flattenMode"] != "force":
		return status.Errorf(codes.FailedPrecondition, "system is not in a state required for the operation's execution: failed to enable mirroring on image %q: parent image %q is not enabled for mirroring", id, parent)
	}
	if err := s.saveCSI(func(sf *siteFile) {
		if c, ok := sf.Clones[id]; ok {
			flat := *c
			flat.Flattened = true
			sf.Clones[id] = &flat
		}
	}); err != nil {
		return err
	}
	return status.Errorf(codes.Aborted, "flatten is in progress for image %s", id)
}

// adopt makes the CSI copy a request names a replicated volume of this
// site, unless it is one already; it reports whether the request names a
// CSI copy at all.
func (s *Site) adopt(volumeID string, src *replication.ReplicationSource) (bool, error) {
	id := volumeID
	if v := src.GetVolume(); v != nil && v.GetVolumeId() != "" {
		id = v.GetVolumeId()
	}
	if id == "" || src.GetVolumegroup() != nil {
		return false, nil
	}
	s.csiMu.Lock()
	defer s.csiMu.Unlock()
	// s.mu is held from the copy's read to the unit's addition, so that
	// no write on the data path lands on the copy in between and is lost.
	s.mu.Lock()
	defer s.mu.Unlock()
	cl, ok := s.sf.Clones[id]
	if !ok {
		return false, nil
	}
	st := madeUnit(cl, time.Now())
	if err := s.store.saveUnit(&st); err != nil {
		return true, status.Errorf(codes.Unknown, "persist: %v", err)
	}
	delete(s.sf.Clones, id)
	if err := s.saveSiteLocked(); err != nil {
		s.sf.Clones[id] = cl
		s.store.removeUnit(st.Key())
		return true, status.Errorf(codes.Unknown, "persist: %v", err)
	}
	s.addUnit(st)
	s.log.Info("replication enabled on a created volume", "volume", id, "blocks", len(cl.Blocks))
	return true, nil
}

// madeUnit is the primary copy of a replicated volume made from the CSI
// copy cl at t.
func madeUnit(cl *CloneState, t time.Time) UnitState {
	id := cl.ID
	st := UnitState{Kind: KindVolume, ID: id, Volumes: []string{id}, Role: RolePrimary, Epoch: 1,
		Lineage: []Fork{{Epoch: 1}}, Made: true, Blocks: map[string]map[int64]Block{id: {}}}
	ns := make([]int64, 0, len(cl.Blocks))
	for n := range cl.Blocks {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	for _, n := range ns {
		data := slices.Clone(cl.Blocks[n].Data)
		st.Seq++
		st.Blocks[id][n] = Block{Data: data, Seq: st.Seq, Epoch: 1}
		st.Writes = append(st.Writes, WriteRecord{Volume: id, Block: n, Seq: st.Seq, Epoch: 1, Time: t, Sum: blockSum(data)})
	}
	return st
}

// createFromPeer creates the secondary copy of a volume its peer made
// (applyUnit.Made) on the first sync; it returns the new copy, or why it
// was not created.
func (s *Site) createFromPeer(a applyUnit) (*unit, string) {
	if len(a.Volumes) != 1 {
		return nil, "a made volume ships one volume"
	}
	id := a.Volumes[0]
	if unitKey(KindVolume, id) != a.Key {
		return nil, "the volume's key and id disagree"
	}
	s.csiMu.Lock()
	defer s.csiMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sf.Clones[id]; ok {
		return nil, "a volume " + id + " created through CSI exists on this site"
	}
	if _, err := s.lookupVolume(id); err == nil {
		return nil, "volume " + id + " belongs to another unit on this site"
	}
	st := UnitState{Kind: KindVolume, ID: id, Volumes: []string{id}, Role: RoleSecondary, FromPeer: true, Blocks: map[string]map[int64]Block{}}
	if err := s.store.saveUnit(&st); err != nil {
		return nil, "persist failed: " + err.Error()
	}
	s.log.Info("created the copy of a volume the peer made", "volume", id)
	return s.addUnit(st), ""
}

// deleteMade deletes u, a volume this site made replicated whose
// replication is off, and asks the peer to remove its copy (best
// effort); it reports whether u was such a volume.
func (s *Site) deleteMade(ctx context.Context, u *unit) (bool, error) {
	u.mu.Lock()
	ok := u.st.Made && !u.st.Enabled && u.st.Role == RolePrimary
	key := u.st.Key()
	u.mu.Unlock()
	if !ok {
		return false, nil
	}
	s.dropUnit(u)
	s.log.Info("deleted a volume made replicated here", "unit", key)
	if s.peer == nil {
		return true, nil
	}
	if s.isLinkDown() || !s.tellDropped(ctx, key) {
		// The peer removes its copy once it hears of it (dropPending).
		s.mu.Lock()
		if !slices.Contains(s.sf.Dropped, key) {
			s.sf.Dropped = append(s.sf.Dropped, key)
		}
		err := s.saveSiteLocked()
		s.mu.Unlock()
		if err != nil {
			s.log.Warn("the deleted volume's copy at the peer is not remembered across a restart", "unit", key, "error", err)
		}
	}
	return true, nil
}

// tellDropped tells the peer that the volume of key, made replicated
// here, was deleted; false when the peer did not answer.
func (s *Site) tellDropped(ctx context.Context, key string) bool {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out peerDropResponse
	if err := s.peer.post(pctx, "/v1/peer/drop", peerDropRequest{From: s.cfg.Name, Key: key}, &out); err != nil {
		s.log.Warn("the peer was not told of a deleted volume: told again at the next round", "unit", key, "error", err)
		return false
	}
	if out.Why != "" {
		s.log.Info("the peer kept its copy of a deleted volume", "unit", key, "why", out.Why)
	}
	return true
}

// dropPending tells the peer again of the deleted volumes it has not
// heard of (siteFile.Dropped), while the link is up.
func (s *Site) dropPending(ctx context.Context) {
	s.mu.Lock()
	keys := slices.Clone(s.sf.Dropped)
	s.mu.Unlock()
	for _, key := range keys {
		if s.isLinkDown() || !s.tellDropped(ctx, key) {
			return
		}
		s.mu.Lock()
		s.sf.Dropped = slices.DeleteFunc(s.sf.Dropped, func(k string) bool { return k == key })
		err := s.saveSiteLocked()
		s.mu.Unlock()
		if err != nil {
			s.log.Warn("could not save the site's state", "error", err)
		}
	}
}

// dropUnit removes u from the site and its file.
func (s *Site) dropUnit(u *unit) {
	u.mu.Lock()
	key, vols := u.st.Key(), slices.Clone(u.st.Volumes)
	u.mu.Unlock()
	s.unitsMu.Lock()
	delete(s.units, key)
	for _, v := range vols {
		if s.volumes[v] == key {
			delete(s.volumes, v)
		}
	}
	s.unitsMu.Unlock()
	s.store.removeUnit(key)
}

type peerDropRequest struct {
	From string `json:"from"`
	Key  string `json:"key"`
}

type peerDropResponse struct {
	// Why the copy stays, or "" when it was removed (or was never here).
	Why string `json:"why,omitempty"`
}

// handlePeerDrop removes this site's copy of a volume the peer made and
// deleted, while the copy is still secondary.
func (s *Site) handlePeerDrop(w http.ResponseWriter, r *http.Request) {
	if !s.linkGuard(w) {
		return
	}
	var req peerDropRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		httpError(w, http.StatusBadRequest, "decode: %v", err)
		return
	}
	var resp peerDropResponse
	if u, ok := s.unitByKey(req.Key); ok {
		u.mu.Lock()
		switch {
		case !u.st.FromPeer:
			resp.Why = "not a copy the peer's sync created"
		case u.st.Role != RoleSecondary:
			resp.Why = "promoted on this site"
		}
		u.mu.Unlock()
		if resp.Why == "" {
			s.dropUnit(u)
			s.log.Info("removed the copy of a volume the peer deleted", "unit", req.Key)
		}
	}
	writeJSON(w, resp)
}

// removeUnit deletes a unit's file (undoing an adoption that could not be
// persisted whole).
func (st *store) removeUnit(key string) {
	if st.dir == "" {
		return
	}
	os.Remove(filepath.Join(st.unitsDir(), unitFileName(key)))
}
