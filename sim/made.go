package sim

import (
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
// longer a CSI copy (it cannot be deleted through CSI, as no replica
// can), and the link creates its copy on the peer with the first sync,
// secondary, under the same volume id. The peer refuses to create it
// when it holds a volume of that id already. Adopting is persisted
// before it is answered; a site that crashed between the unit's file and
// its site file restarts with the unit, never with both.

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
	st := UnitState{Kind: KindVolume, ID: id, Volumes: []string{id}, Role: RoleSecondary, Blocks: map[string]map[int64]Block{}}
	if err := s.store.saveUnit(&st); err != nil {
		return nil, "persist failed: " + err.Error()
	}
	s.log.Info("created the copy of a volume the peer made", "volume", id)
	return s.addUnit(st), ""
}

// removeUnit deletes a unit's file (undoing an adoption that could not be
// persisted whole).
func (st *store) removeUnit(key string) {
	if st.dir == "" {
		return
	}
	os.Remove(filepath.Join(st.unitsDir(), unitFileName(key)))
}
