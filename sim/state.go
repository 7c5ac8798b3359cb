package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Role is the replication role of one copy of a volume or volume group.
type Role string

const (
	// RolePrimary is the writable copy; it ships its changes to the peer.
	RolePrimary Role = "primary"
	// RoleSecondary is a read-only copy that receives changes from the peer.
	RoleSecondary Role = "secondary"
)

// Unit kinds: the replication unit is a volume group or an ungrouped volume.
const (
	KindVolume = "volume"
	KindGroup  = "group"
)

// Block is one block of a volume as a copy holds it: the data and the write
// (sequence number and epoch) that produced it.
type Block struct {
	Data  []byte `json:"data"`
	Seq   uint64 `json:"seq"`
	Epoch uint64 `json:"epoch"`
}

// Fork marks where a primacy epoch began: epoch Epoch took over the data
// after write BaseSeq of the previous epoch. A copy's lineage is the list of
// forks its data descends from.
type Fork struct {
	Epoch   uint64 `json:"epoch"`
	BaseSeq uint64 `json:"baseSeq"`
	// Forced: the epoch began with a promotion by force that did not
	// start from the peer's demotion (the ceph-csi profile's split brain).
	Forced bool `json:"forced,omitempty"`
}

// WriteRecord is one acknowledged client write, kept for the invariant
// checker.
type WriteRecord struct {
	Volume string    `json:"volume"`
	Block  int64     `json:"block"`
	Seq    uint64    `json:"seq"`
	Epoch  uint64    `json:"epoch"`
	Time   time.Time `json:"time"`
	Client string    `json:"client"`
	Sum    string    `json:"sum"`
}

// SyncRecord is one completed sync from a primary to its peer that moved
// the peer forward.
type SyncRecord struct {
	Time     time.Time `json:"time"`
	SnapTime time.Time `json:"snapTime"`
	Epoch    uint64    `json:"epoch"`
	Seq      uint64    `json:"seq"`
	Bytes    int64     `json:"bytes"`
}

// RoleChange is one promotion or demotion of a copy.
type RoleChange struct {
	Time  time.Time `json:"time"`
	Role  Role      `json:"role"`
	Epoch uint64    `json:"epoch"`
	Seq   uint64    `json:"seq"`
	Force bool      `json:"force"`
	// Scheduled: primary again through a scheduled snapshot taken across
	// a demotion (Config.ScheduleRace), not through a promotion.
	Scheduled bool `json:"scheduled,omitempty"`
}

// SyncInfo is what GetVolumeReplicationInfo reports: the point in time of
// the data the peer holds, how long shipping it took and how many bytes.
type SyncInfo struct {
	SnapTime time.Time     `json:"snapTime"`
	Duration time.Duration `json:"duration"`
	Bytes    int64         `json:"bytes"`
}

// UnitState is the persistent state of one copy of a replication unit.
type UnitState struct {
	Kind     string            `json:"kind"`
	ID       string            `json:"id"`
	Volumes  []string          `json:"volumes"`
	Enabled  bool              `json:"enabled"`
	Role     Role              `json:"role"`
	Demoted  bool              `json:"demoted"`
	Epoch    uint64            `json:"epoch"`
	Seq      uint64            `json:"seq"`
	Lineage  []Fork            `json:"lineage"`
	Schedule time.Duration     `json:"schedule,omitempty"`
	Params   map[string]string `json:"params,omitempty"`

	// Blocks holds the data: volume -> block index -> block.
	Blocks map[string]map[int64]Block `json:"blocks"`

	// Primary side: what the peer acknowledged, and the last completed sync.
	PeerSeq  uint64    `json:"peerSeq"`
	LastSync *SyncInfo `json:"lastSync,omitempty"`

	// Secondary side.
	InSync      bool      `json:"inSync"`
	Resyncing   bool      `json:"resyncing"`
	ResyncStart time.Time `json:"resyncStart,omitempty"`

	// The ceph-csi profile's mirroring. SnapPending: a mirror snapshot
	// was taken (at enable or promote) and has not shipped yet.
	// DemoteStamp: the copy is still the image a demotion of a primary
	// stamped (the image metadata .rbd.image.creation_time); an image a
	// resync re-created has none.
	SnapPending bool `json:"snapPending,omitempty"`
	DemoteStamp bool `json:"demoteStamp,omitempty"`

	// Made: the copy was made a replicated volume on this site from a
	// volume created through CSI (made.go); the link creates the peer's.
	Made bool `json:"made,omitempty"`
	// FromPeer: the copy was created on this site by the first sync of a
	// volume the peer made; the peer's deletion of that volume removes
	// it while it is secondary (made.go).
	FromPeer bool `json:"fromPeer,omitempty"`

	// Logs for the invariant checker.
	Writes      []WriteRecord `json:"writes,omitempty"`
	Syncs       []SyncRecord  `json:"syncs,omitempty"`
	RoleChanges []RoleChange  `json:"roleChanges,omitempty"`
}

// Key names the unit in maps and file names: "vg/ID" or "vol/ID".
func (u *UnitState) Key() string { return unitKey(u.Kind, u.ID) }

func unitKey(kind, id string) string {
	if kind == KindGroup {
		return "vg/" + id
	}
	return "vol/" + id
}

// Consistent reports whether a copy at (epoch, seq) holds nothing that this
// lineage lacks, so that an incremental sync from seq can bring it up to
// date. A copy that went past the fork where a later epoch began has
// diverged (split-brain) and needs a resync.
func Consistent(lineage []Fork, curSeq, epoch, seq uint64) bool {
	for i, f := range lineage {
		if f.Epoch != epoch {
			continue
		}
		end := curSeq
		if i+1 < len(lineage) {
			end = lineage[i+1].BaseSeq
		}
		return seq <= end
	}
	// A copy that never held data (epoch 0) is consistent with anything.
	return epoch == 0 && seq == 0
}

// FenceEntry is the current fence state of one CIDR in the fence domain.
type FenceEntry struct {
	CIDR   string    `json:"cidr"`
	Fenced bool      `json:"fenced"`
	Time   time.Time `json:"time"`
	Origin string    `json:"origin"`
}

// FenceEvent is one change of a fence as a site learned it: Time is when the
// change was made at its origin, Learned when this site applied it.
type FenceEvent struct {
	FenceEntry
	Learned time.Time `json:"learned"`
}

// ClientSeen is a data-path client a site has served.
type ClientSeen struct {
	ID        string    `json:"id"`
	Addr      string    `json:"addr"`
	FirstSeen time.Time `json:"firstSeen"`
}

// siteFile is the persistent state of a site besides its units.
type siteFile struct {
	Name     string                `json:"name"`
	Fences   map[string]FenceEntry `json:"fences"`
	FenceLog []FenceEvent          `json:"fenceLog,omitempty"`
	Clients  map[string]ClientSeen `json:"clients,omitempty"`
	// The CSI objects (csi.go).
	Snapshots      map[string]*SnapshotState      `json:"snapshots,omitempty"`
	GroupSnapshots map[string]*GroupSnapshotState `json:"groupSnapshots,omitempty"`
	Clones         map[string]*CloneState         `json:"clones,omitempty"`
	// Dropped are the keys of volumes made replicated here and deleted
	// whose copy the peer has not removed yet (the link was down, or the
	// peer did not answer): told again at each round until it answers,
	// as rbd-mirror removes a non-primary image whose primary's mirroring
	// went away once it sees its peer again.
	Dropped []string `json:"dropped,omitempty"`
}

// State is a whole site's state as the checker and operators see it.
type State struct {
	Site     string       `json:"site"`
	Down     bool         `json:"down"`
	Units    []UnitState  `json:"units"`
	Fences   []FenceEntry `json:"fences"`
	FenceLog []FenceEvent `json:"fenceLog"`
	Clients  []ClientSeen `json:"clients"`
	// Snapshots, group snapshots and clones made through CSI, by ID.
	Snapshots      []SnapshotState      `json:"snapshots,omitempty"`
	GroupSnapshots []GroupSnapshotState `json:"groupSnapshots,omitempty"`
	Clones         []CloneState         `json:"clones,omitempty"`
	// Refused is, per unit key, why the primary's last shipment to the
	// peer failed (its replication status message while not healthy).
	Refused map[string]string `json:"refused,omitempty"`
}

// Unit returns the copy of the named unit ("vg/ID" or "vol/ID"), or nil.
func (s *State) Unit(key string) *UnitState {
	for i := range s.Units {
		if s.Units[i].Key() == key {
			return &s.Units[i]
		}
	}
	return nil
}

// writeFileAtomic writes data to path through a temporary file and a rename,
// so that a crash leaves either the old or the new content, never a torn
// file. With sync set it also fsyncs the file before the rename.
func writeFileAtomic(path string, data []byte, sync bool) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			os.Remove(tmp)
			return err
		}
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func unitFileName(key string) string {
	return strings.ReplaceAll(key, "/", "_") + ".json"
}

// store persists a site under a directory: site.json and one file per unit
// under units/, each written atomically.
type store struct {
	dir  string
	sync bool
}

func (st *store) unitsDir() string { return filepath.Join(st.dir, "units") }

func (st *store) init() error {
	if st.dir == "" {
		return nil
	}
	return os.MkdirAll(st.unitsDir(), 0o755)
}

func (st *store) saveUnit(u *UnitState) error {
	if st.dir == "" {
		return nil
	}
	data, err := json.Marshal(u)
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(st.unitsDir(), unitFileName(u.Key())), data, st.sync)
}

func (st *store) saveSite(sf *siteFile) error {
	if st.dir == "" {
		return nil
	}
	data, err := json.Marshal(sf)
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(st.dir, "site.json"), data, st.sync)
}

// load reads a persisted site; ok is false when the directory holds none.
func (st *store) load() (sf *siteFile, units []*UnitState, ok bool, err error) {
	if st.dir == "" {
		return nil, nil, false, nil
	}
	data, err := os.ReadFile(filepath.Join(st.dir, "site.json"))
	if os.IsNotExist(err) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	sf = &siteFile{}
	if err := json.Unmarshal(data, sf); err != nil {
		return nil, nil, false, fmt.Errorf("state %s: %w", filepath.Join(st.dir, "site.json"), err)
	}
	entries, err := os.ReadDir(st.unitsDir())
	if err != nil {
		return nil, nil, false, err
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".tmp-") {
			continue
		}
		p := filepath.Join(st.unitsDir(), e.Name())
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, false, err
		}
		u := &UnitState{}
		if err := json.Unmarshal(data, u); err != nil {
			return nil, nil, false, fmt.Errorf("state %s: %w", p, err)
		}
		units = append(units, u)
	}
	sort.Slice(units, func(i, j int) bool { return units[i].Key() < units[j].Key() })
	return sf, units, true, nil
}

// LoadState reads the state a site persisted under dir, for the checker.
// It reads a stopped site's files as well as a running one's.
func LoadState(dir string) (*State, error) {
	st := &store{dir: dir}
	sf, units, ok, err := st.load()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("no simulator state under %s", dir)
	}
	s := &State{Site: sf.Name, FenceLog: sf.FenceLog}
	for _, u := range units {
		s.Units = append(s.Units, *u)
	}
	for _, e := range sf.Fences {
		s.Fences = append(s.Fences, e)
	}
	sort.Slice(s.Fences, func(i, j int) bool { return s.Fences[i].CIDR < s.Fences[j].CIDR })
	for _, c := range sf.Clients {
		s.Clients = append(s.Clients, c)
	}
	sort.Slice(s.Clients, func(i, j int) bool { return s.Clients[i].Addr < s.Clients[j].Addr })
	return s, nil
}
