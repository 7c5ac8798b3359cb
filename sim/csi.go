package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The CSI services a site serves beside CSI-Addons (csi.v1 Identity,
// Controller and GroupController, per the CSI spec): point-in-time
// snapshots of the site's copies, and writable volumes created from them
// (clones), for a test recovery that must leave the replicas alone.
//
// A snapshot holds the blocks of its source volume as they were when it
// was cut: later writes and replicated changes do not reach it. A group
// snapshot cuts every volume it names at one point, under the locks of
// all their units at once. A clone is an independent volume of the site,
// writable on the data path by any client the fence admits, neither
// replicated, promoted nor demoted until replication is enabled on it,
// which makes it a replicated volume (made.go). A replicated volume cannot be deleted
// through CSI (FAILED_PRECONDITION, the spec's "volume in use"). Names
// make every create idempotent: the same name and source answer the same
// object, the same name with another source ALREADY_EXISTS. Deleting
// what does not exist answers OK. Snapshots and clones persist in the
// site's state.

// SnapshotState is a point-in-time copy of one volume of the site.
type SnapshotState struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Volume string `json:"volume"`
	// Unit is the unit the volume belongs to, and Epoch and Seq the
	// copy's position in its history when the snapshot was cut.
	Unit    string            `json:"unit"`
	Epoch   uint64            `json:"epoch"`
	Seq     uint64            `json:"seq"`
	Group   string            `json:"group,omitempty"` // the group snapshot it was cut in
	Created time.Time         `json:"created"`
	Blocks  map[int64]Block   `json:"blocks"`
	Params  map[string]string `json:"params,omitempty"`
}

// GroupSnapshotState is a group snapshot: its member snapshots, one per
// source volume, cut at one point in time.
type GroupSnapshotState struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Volumes   []string  `json:"volumes"`
	Snapshots []string  `json:"snapshots"`
	Created   time.Time `json:"created"`
}

// CloneState is a writable volume created from a snapshot (or empty).
type CloneState struct {
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Snapshot string          `json:"snapshot,omitempty"`
	Created  time.Time       `json:"created"`
	Blocks   map[int64]Block `json:"blocks"`
	Seq      uint64          `json:"seq"`
	Writes   []WriteRecord   `json:"writes,omitempty"`
	// Flattened: the ceph-csi profile flattened the volume made of
	// Snapshot (made.go's flatten), so that its replication can be
	// enabled.
	Flattened bool `json:"flattened,omitempty"`
}

func objectID(prefix, name string) string {
	h := sha256.Sum256([]byte(name))
	return prefix + hex.EncodeToString(h[:8])
}

func cloneBlocks(bs map[int64]Block) map[int64]Block {
	out := make(map[int64]Block, len(bs))
	for i, b := range bs {
		out[i] = Block{Data: slices.Clone(b.Data), Seq: b.Seq, Epoch: b.Epoch}
	}
	return out
}

func blocksSize(bs map[int64]Block) int64 {
	var n int64
	for _, b := range bs {
		n += int64(len(b.Data))
	}
	return n
}

// csiBegin is begin for the CSI services: faults, then implemented and
// secrets as for CSI-Addons.
func (s *Site) csiBegin(ctx context.Context, method string, secrets map[string]string) error {
	if err := s.begin(method, secrets); err != nil {
		return err
	}
	return s.faults.inject(ctx, method)
}

// ---- identity ----

type csiIdentity struct {
	csi.UnimplementedIdentityServer
	s *Site
}

func (i *csiIdentity) GetPluginInfo(ctx context.Context, _ *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	if err := i.s.faults.inject(ctx, "GetPluginInfo"); err != nil {
		return nil, err
	}
	return &csi.GetPluginInfoResponse{Name: i.s.cfg.DriverName, VendorVersion: i.s.cfg.Version}, nil
}

func (i *csiIdentity) GetPluginCapabilities(ctx context.Context, _ *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	if err := i.s.faults.inject(ctx, "GetPluginCapabilities"); err != nil {
		return nil, err
	}
	svc := func(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}}
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{
		svc(csi.PluginCapability_Service_CONTROLLER_SERVICE), svc(csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE)}}, nil
}

func (i *csiIdentity) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	ready, err := i.s.probe(ctx)
	if err != nil {
		return nil, err
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(ready)}, nil
}

// ---- controller ----

type csiController struct {
	csi.UnimplementedControllerServer
	s *Site
}

func (c *csiController) ControllerGetCapabilities(ctx context.Context, _ *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	if err := c.s.faults.inject(ctx, "ControllerGetCapabilities"); err != nil {
		return nil, err
	}
	rpc := func(t csi.ControllerServiceCapability_RPC_Type) *csi.ControllerServiceCapability {
		return &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}}
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{
		rpc(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME),
		rpc(csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT),
		rpc(csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS),
	}}, nil
}

// cut takes snapshots of vols at one point in time: it holds the locks of
// every unit involved (in key order) while it copies. Volumes that belong
// to no unit are NOT_FOUND.
func (s *Site) cut(vols []string) ([]SnapshotState, error) {
	units := map[string]*unit{}
	for _, v := range vols {
		u, err := s.lookupVolume(v)
		if err != nil {
			return nil, status.Errorf(codes.NotFound, "volume %q not found on site %s", v, s.cfg.Name)
		}
		units[u.st.Key()] = u
		// ceph-csi snapshots with rbd snap create on the source image,
		// which a mirrored non-primary image refuses (EROFS), and answers
		// INTERNAL (createSnapshot in internal/rbd/snapshot.go). Measured
		// by make e2e-ceph: a test recovery at the replicas' site.
		u.mu.Lock()
		replica := u.st.Enabled && u.st.Role != RolePrimary
		u.mu.Unlock()
		if s.profile.mirror && replica {
			return nil, status.Error(codes.Internal, "rbd: ret=-30, Read-only file system")
		}
	}
	keys := make([]string, 0, len(units))
	for k := range units {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		units[k].mu.Lock()
	}
	now := time.Now()
	out := make([]SnapshotState, len(vols))
	for i, v := range vols {
		u, _ := s.lookupVolume(v)
		out[i] = SnapshotState{Volume: v, Unit: u.st.Key(), Epoch: u.st.Epoch, Seq: u.st.Seq, Created: now, Blocks: cloneBlocks(u.st.Blocks[v])}
	}
	for _, k := range keys {
		units[k].mu.Unlock()
	}
	return out, nil
}

func snapshotMsg(sn *SnapshotState) *csi.Snapshot {
	return &csi.Snapshot{SnapshotId: sn.ID, SourceVolumeId: sn.Volume, CreationTime: timestamppb.New(sn.Created),
		ReadyToUse: true, SizeBytes: blocksSize(sn.Blocks), GroupSnapshotId: sn.Group}
}

func (c *csiController) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	s := c.s
	if err := s.csiBegin(ctx, "CreateSnapshot", req.GetSecrets()); err != nil {
		return nil, err
	}
	if req.GetName() == "" || req.GetSourceVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "CreateSnapshot: name and source_volume_id are required")
	}
	s.csiMu.Lock()
	defer s.csiMu.Unlock()
	id := objectID("snap-", req.GetName())
	s.mu.Lock()
	sn, ok := s.sf.Snapshots[id]
	s.mu.Unlock()
	if ok {
		if sn.Volume != req.GetSourceVolumeId() {
			return nil, status.Errorf(codes.AlreadyExists, "snapshot %q exists of volume %q, not %q", req.GetName(), sn.Volume, req.GetSourceVolumeId())
		}
		return lostAnswer(c.s, "CreateSnapshot", &csi.CreateSnapshotResponse{Snapshot: snapshotMsg(sn)})
	}
	cut, err := s.cut([]string{req.GetSourceVolumeId()})
	if err != nil {
		return nil, err
	}
	sn = &cut[0]
	sn.ID, sn.Name, sn.Params = id, req.GetName(), req.GetParameters()
	if err := s.saveCSI(func(sf *siteFile) { sf.Snapshots[id] = sn }); err != nil {
		return nil, err
	}
	s.log.Info("snapshot cut", "snapshot", id, "volume", sn.Volume, "seq", sn.Seq)
	return lostAnswer(c.s, "CreateSnapshot", &csi.CreateSnapshotResponse{Snapshot: snapshotMsg(sn)})
}

func (c *csiController) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	s := c.s
	if err := s.csiBegin(ctx, "DeleteSnapshot", req.GetSecrets()); err != nil {
		return nil, err
	}
	if req.GetSnapshotId() == "" {
		return nil, status.Error(codes.InvalidArgument, "DeleteSnapshot: snapshot_id is required")
	}
	s.csiMu.Lock()
	defer s.csiMu.Unlock()
	s.mu.Lock()
	sn, ok := s.sf.Snapshots[req.GetSnapshotId()]
	s.mu.Unlock()
	if !ok {
		return &csi.DeleteSnapshotResponse{}, nil
	}
	if sn.Group != "" {
		// The spec's "snapshot in use": it belongs to a group snapshot,
		// which DeleteVolumeGroupSnapshot deletes whole.
		return nil, status.Errorf(codes.FailedPrecondition, "snapshot %s belongs to group snapshot %s: delete that", sn.ID, sn.Group)
	}
	return &csi.DeleteSnapshotResponse{}, s.saveCSI(func(sf *siteFile) { delete(sf.Snapshots, sn.ID) })
}

func (c *csiController) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	s := c.s
	if err := s.csiBegin(ctx, "ListSnapshots", req.GetSecrets()); err != nil {
		return nil, err
	}
	s.mu.Lock()
	var all []*csi.Snapshot
	for _, sn := range s.sf.Snapshots {
		if (req.GetSnapshotId() == "" || sn.ID == req.GetSnapshotId()) && (req.GetSourceVolumeId() == "" || sn.Volume == req.GetSourceVolumeId()) {
			all = append(all, snapshotMsg(sn))
		}
	}
	s.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].SnapshotId < all[j].SnapshotId })
	start := 0
	if t := req.GetStartingToken(); t != "" {
		// The token is the last ID of the previous page.
		start = sort.Search(len(all), func(i int) bool { return all[i].SnapshotId > t })
	}
	end := len(all)
	if m := int(req.GetMaxEntries()); m > 0 && start+m < end {
		end = start + m
	}
	resp := &csi.ListSnapshotsResponse{}
	for _, sn := range all[start:end] {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: sn})
	}
	if end < len(all) {
		resp.NextToken = all[end-1].SnapshotId
	}
	return resp, nil
}

func cloneMsg(cl *CloneState) *csi.Volume {
	v := &csi.Volume{VolumeId: cl.ID, CapacityBytes: blocksSize(cl.Blocks)}
	if cl.Snapshot != "" {
		v.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: cl.Snapshot}}}
	}
	return v
}

func (c *csiController) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	s := c.s
	if err := s.csiBegin(ctx, "CreateVolume", req.GetSecrets()); err != nil {
		return nil, err
	}
	if req.GetName() == "" || len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "CreateVolume: name and volume_capabilities are required")
	}
	src := ""
	if cs := req.GetVolumeContentSource(); cs != nil {
		if cs.GetSnapshot() == nil {
			// The spec's "source incompatible or not supported".
			return nil, status.Error(codes.InvalidArgument, "CreateVolume: this driver creates volumes from snapshots only, not from volumes")
		}
		src = cs.GetSnapshot().GetSnapshotId()
	}
	s.csiMu.Lock()
	defer s.csiMu.Unlock()
	id := objectID("clone-", req.GetName())
	s.mu.Lock()
	cl, exists := s.sf.Clones[id]
	sn, found := s.sf.Snapshots[src]
	s.mu.Unlock()
	if exists {
		if cl.Snapshot != src {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q exists from snapshot %q, not %q", req.GetName(), cl.Snapshot, src)
		}
		return lostAnswer(c.s, "CreateVolume", &csi.CreateVolumeResponse{Volume: cloneMsg(cl)})
	}
	cl = &CloneState{ID: id, Name: req.GetName(), Snapshot: src, Created: time.Now(), Blocks: map[int64]Block{}}
	if src != "" {
		if !found {
			return nil, status.Errorf(codes.NotFound, "snapshot %q not found on site %s", src, s.cfg.Name)
		}
		if lim := req.GetCapacityRange().GetLimitBytes(); lim > 0 && lim < blocksSize(sn.Blocks) {
			return nil, status.Errorf(codes.OutOfRange, "limit %d bytes is smaller than snapshot %s (%d bytes)", lim, src, blocksSize(sn.Blocks))
		}
		cl.Blocks = cloneBlocks(sn.Blocks)
	}
	if err := s.saveCSI(func(sf *siteFile) { sf.Clones[id] = cl }); err != nil {
		return nil, err
	}
	s.log.Info("volume created", "volume", id, "snapshot", src)
	return lostAnswer(c.s, "CreateVolume", &csi.CreateVolumeResponse{Volume: cloneMsg(cl)})
}

func (c *csiController) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	s := c.s
	if err := s.csiBegin(ctx, "DeleteVolume", req.GetSecrets()); err != nil {
		return nil, err
	}
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "DeleteVolume: volume_id is required")
	}
	if u, err := s.lookupVolume(req.GetVolumeId()); err == nil {
		if done, err := s.deleteMade(ctx, u); done || err != nil {
			return &csi.DeleteVolumeResponse{}, err
		}
		// The spec's "volume in use": a replica is never deleted here.
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is replicated (%s): it cannot be deleted", req.GetVolumeId(), u.st.Key())
	}
	s.csiMu.Lock()
	defer s.csiMu.Unlock()
	s.mu.Lock()
	_, ok := s.sf.Clones[req.GetVolumeId()]
	s.mu.Unlock()
	if !ok {
		return &csi.DeleteVolumeResponse{}, nil
	}
	return &csi.DeleteVolumeResponse{}, s.saveCSI(func(sf *siteFile) { delete(sf.Clones, req.GetVolumeId()) })
}

// ValidateVolumeCapabilities confirms the capabilities a CO asks of a
// volume (a replica or a copy), as the spec requires of every
// controller: one node at a time, mounted or as a block device. A
// volume the site does not hold is NOT_FOUND.
func (c *csiController) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	s := c.s
	if err := s.csiBegin(ctx, "ValidateVolumeCapabilities", req.GetSecrets()); err != nil {
		return nil, err
	}
	if req.GetVolumeId() == "" || len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "ValidateVolumeCapabilities: volume_id and volume_capabilities are required")
	}
	if _, err := s.lookupVolume(req.GetVolumeId()); err != nil {
		s.mu.Lock()
		_, clone := s.sf.Clones[req.GetVolumeId()]
		s.mu.Unlock()
		if !clone {
			return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
		}
	}
	for _, vc := range req.GetVolumeCapabilities() {
		switch vc.GetAccessMode().GetMode() {
		case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
			csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		default:
			return &csi.ValidateVolumeCapabilitiesResponse{Message: fmt.Sprintf("access mode %s is not supported: one node at a time", vc.GetAccessMode().GetMode())}, nil
		}
		if vc.GetMount() == nil && vc.GetBlock() == nil {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: "an access type, mount or block, is required"}, nil
		}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters()}}, nil
}

// ---- group controller ----

type csiGroupController struct {
	csi.UnimplementedGroupControllerServer
	s *Site
}

func (g *csiGroupController) GroupControllerGetCapabilities(ctx context.Context, _ *csi.GroupControllerGetCapabilitiesRequest) (*csi.GroupControllerGetCapabilitiesResponse, error) {
	if err := g.s.faults.inject(ctx, "GroupControllerGetCapabilities"); err != nil {
		return nil, err
	}
	return &csi.GroupControllerGetCapabilitiesResponse{Capabilities: []*csi.GroupControllerServiceCapability{{
		Type: &csi.GroupControllerServiceCapability_Rpc{Rpc: &csi.GroupControllerServiceCapability_RPC{
			Type: csi.GroupControllerServiceCapability_RPC_CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT}}}}}, nil
}

func (s *Site) groupMsg(gs *GroupSnapshotState) *csi.VolumeGroupSnapshot {
	out := &csi.VolumeGroupSnapshot{GroupSnapshotId: gs.ID, CreationTime: timestamppb.New(gs.Created), ReadyToUse: true}
	for _, id := range gs.Snapshots {
		if sn := s.sf.Snapshots[id]; sn != nil {
			out.Snapshots = append(out.Snapshots, snapshotMsg(sn))
		}
	}
	return out
}

func (g *csiGroupController) CreateVolumeGroupSnapshot(ctx context.Context, req *csi.CreateVolumeGroupSnapshotRequest) (*csi.CreateVolumeGroupSnapshotResponse, error) {
	s := g.s
	if err := s.csiBegin(ctx, "CreateVolumeGroupSnapshot", req.GetSecrets()); err != nil {
		return nil, err
	}
	vols := slices.Clone(req.GetSourceVolumeIds())
	slices.Sort(vols)
	if req.GetName() == "" || len(vols) == 0 || len(slices.Compact(slices.Clone(vols))) != len(vols) {
		return nil, status.Error(codes.InvalidArgument, "CreateVolumeGroupSnapshot: a name and distinct source_volume_ids are required")
	}
	s.csiMu.Lock()
	defer s.csiMu.Unlock()
	id := objectID("gsnap-", req.GetName())
	s.mu.Lock()
	gs, ok := s.sf.GroupSnapshots[id]
	var msg *csi.VolumeGroupSnapshot
	if ok {
		msg = s.groupMsg(gs)
	}
	s.mu.Unlock()
	if ok {
		if !slices.Equal(gs.Volumes, vols) {
			return nil, status.Errorf(codes.AlreadyExists, "group snapshot %q exists of volumes %v, not %v", req.GetName(), gs.Volumes, vols)
		}
		return lostAnswer(g.s, "CreateVolumeGroupSnapshot", &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: msg})
	}
	cut, err := s.cut(vols)
	if err != nil {
		return nil, err
	}
	gs = &GroupSnapshotState{ID: id, Name: req.GetName(), Volumes: vols, Created: cut[0].Created}
	for i := range cut {
		sn := &cut[i]
		sn.Name = req.GetName() + "/" + sn.Volume
		sn.ID, sn.Group, sn.Params = objectID("snap-", sn.Name), id, req.GetParameters()
		gs.Snapshots = append(gs.Snapshots, sn.ID)
	}
	if err := s.saveCSI(func(sf *siteFile) {
		for i := range cut {
			sf.Snapshots[cut[i].ID] = &cut[i]
		}
		sf.GroupSnapshots[id] = gs
	}); err != nil {
		return nil, err
	}
	s.mu.Lock()
	msg = s.groupMsg(gs)
	s.mu.Unlock()
	s.log.Info("group snapshot cut", "group snapshot", id, "volumes", vols)
	return lostAnswer(g.s, "CreateVolumeGroupSnapshot", &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: msg})
}

func (g *csiGroupController) DeleteVolumeGroupSnapshot(ctx context.Context, req *csi.DeleteVolumeGroupSnapshotRequest) (*csi.DeleteVolumeGroupSnapshotResponse, error) {
	s := g.s
	if err := s.csiBegin(ctx, "DeleteVolumeGroupSnapshot", req.GetSecrets()); err != nil {
		return nil, err
	}
	if req.GetGroupSnapshotId() == "" {
		return nil, status.Error(codes.InvalidArgument, "DeleteVolumeGroupSnapshot: group_snapshot_id is required")
	}
	s.csiMu.Lock()
	defer s.csiMu.Unlock()
	s.mu.Lock()
	gs, ok := s.sf.GroupSnapshots[req.GetGroupSnapshotId()]
	s.mu.Unlock()
	if !ok {
		return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
	}
	if ids := req.GetSnapshotIds(); len(ids) > 0 {
		want := slices.Sorted(slices.Values(gs.Snapshots))
		if got := slices.Sorted(slices.Values(ids)); !slices.Equal(got, want) {
			return nil, status.Errorf(codes.InvalidArgument, "group snapshot %s holds snapshots %v, not %v", gs.ID, want, got)
		}
	}
	return &csi.DeleteVolumeGroupSnapshotResponse{}, s.saveCSI(func(sf *siteFile) {
		for _, id := range gs.Snapshots {
			delete(sf.Snapshots, id)
		}
		delete(sf.GroupSnapshots, gs.ID)
	})
}

func (g *csiGroupController) GetVolumeGroupSnapshot(ctx context.Context, req *csi.GetVolumeGroupSnapshotRequest) (*csi.GetVolumeGroupSnapshotResponse, error) {
	s := g.s
	if err := s.csiBegin(ctx, "GetVolumeGroupSnapshot", req.GetSecrets()); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	gs, ok := s.sf.GroupSnapshots[req.GetGroupSnapshotId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "group snapshot %q not found on site %s", req.GetGroupSnapshotId(), s.cfg.Name)
	}
	return &csi.GetVolumeGroupSnapshotResponse{GroupSnapshot: s.groupMsg(gs)}, nil
}

// saveCSI applies change to the site file and persists it; on a failed
// persist the change is undone and the RPC answers UNKNOWN.
func (s *Site) saveCSI(change func(sf *siteFile)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	before := s.sf.csiCopy()
	if s.sf.Snapshots == nil {
		s.sf.Snapshots = map[string]*SnapshotState{}
	}
	if s.sf.GroupSnapshots == nil {
		s.sf.GroupSnapshots = map[string]*GroupSnapshotState{}
	}
	if s.sf.Clones == nil {
		s.sf.Clones = map[string]*CloneState{}
	}
	change(s.sf)
	if err := s.saveSiteLocked(); err != nil {
		s.sf.Snapshots, s.sf.GroupSnapshots, s.sf.Clones = before.Snapshots, before.GroupSnapshots, before.Clones
		return status.Errorf(codes.Unknown, "persist: %v", err)
	}
	return nil
}

// csiCopy is a shallow copy of the CSI maps, to undo a change.
func (sf *siteFile) csiCopy() siteFile {
	var c siteFile
	if sf.Snapshots != nil {
		c.Snapshots = make(map[string]*SnapshotState, len(sf.Snapshots))
		for k, v := range sf.Snapshots {
			c.Snapshots[k] = v
		}
	}
	if sf.GroupSnapshots != nil {
		c.GroupSnapshots = make(map[string]*GroupSnapshotState, len(sf.GroupSnapshots))
		for k, v := range sf.GroupSnapshots {
			c.GroupSnapshots[k] = v
		}
	}
	if sf.Clones != nil {
		c.Clones = make(map[string]*CloneState, len(sf.Clones))
		for k, v := range sf.Clones {
			c.Clones[k] = v
		}
	}
	return c
}

// cloneBlock handles a data-path read or write of a clone's block; it
// reports false when vol is not a clone of this site. The caller has
// admitted the client.
func (s *Site) cloneBlock(w http.ResponseWriter, r *http.Request, addr netip.Addr, write bool) bool {
	vol := r.PathValue("vol")
	s.mu.Lock()
	_, ok := s.sf.Clones[vol]
	s.mu.Unlock()
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(r.PathValue("n"), 10, 64)
	if err != nil || n < 0 {
		httpError(w, http.StatusBadRequest, "block %q is not a non-negative integer", r.PathValue("n"))
		return true
	}
	if !write {
		s.mu.Lock()
		b, found := s.sf.Clones[vol].Blocks[n]
		s.mu.Unlock()
		if !found {
			httpError(w, http.StatusNotFound, "block %d of volume %q was never written", n, vol)
			return true
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Drover-Seq", strconv.FormatUint(b.Seq, 10))
		w.Write(b.Data)
		return true
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, MaxBlockSize+1))
	if err != nil {
		httpError(w, http.StatusBadRequest, "read body: %v", err)
		return true
	}
	if len(data) > MaxBlockSize {
		httpError(w, http.StatusRequestEntityTooLarge, "block larger than %d bytes", MaxBlockSize)
		return true
	}
	if cidr, fenced := s.fencedBy(addr); fenced {
		httpError(w, http.StatusForbidden, "fenced: client %s is in fenced CIDR %s", addr, cidr)
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cl := s.sf.Clones[vol]
	if cl == nil { // deleted while the body was read
		httpError(w, http.StatusNotFound, "volume %q not found", vol)
		return true
	}
	prev, had := cl.Blocks[n]
	cl.Seq++
	cl.Blocks[n] = Block{Data: data, Seq: cl.Seq}
	rec := WriteRecord{Volume: vol, Block: n, Seq: cl.Seq, Time: time.Now(), Client: addr.String(), Sum: blockSum(data)}
	cl.Writes = append(cl.Writes, rec)
	if err := s.saveSiteLocked(); err != nil {
		cl.Seq--
		cl.Writes = cl.Writes[:len(cl.Writes)-1]
		if had {
			cl.Blocks[n] = prev
		} else {
			delete(cl.Blocks, n)
		}
		httpError(w, http.StatusInternalServerError, "persist: %v", err)
		return true
	}
	writeJSON(w, map[string]any{"seq": rec.Seq, "epoch": 0})
	return true
}

// lostAnswer is a create's answer, or the error of a Lost fault rule for
// method in its place: the create was carried out all the same.
func lostAnswer[T any](s *Site, method string, resp *T) (*T, error) {
	if err := s.faults.lose(method); err != nil {
		return nil, err
	}
	return resp, nil
}
