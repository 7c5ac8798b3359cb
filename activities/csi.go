package activities

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

// The CSI controller calls of a test recovery (the CSI spec's Controller
// and GroupController services): snapshots of the recovery site's
// replicas and writable copies made from them, and their deletion. They
// go through the site's storage.csi endpoint (storage.endpoint by
// default) with the same dialing, TLS and secrets as the CSI-Addons
// calls, and retry by the same table (classify.go), whose CSI rows come
// from the spec's error tables. Every create is named by the caller, so
// that a call tried again finds what the first made.
const (
	RPCCreateSnapshot            = "CreateSnapshot"
	RPCDeleteSnapshot            = "DeleteSnapshot"
	RPCCreateVolume              = "CreateVolume"
	RPCDeleteVolume              = "DeleteVolume"
	RPCCreateVolumeGroupSnapshot = "CreateVolumeGroupSnapshot"
	RPCDeleteVolumeGroupSnapshot = "DeleteVolumeGroupSnapshot"
)

// CSIRPCs lists the CSI controller RPCs Drover calls.
var CSIRPCs = []string{RPCCreateSnapshot, RPCDeleteSnapshot, RPCCreateVolume, RPCDeleteVolume,
	RPCCreateVolumeGroupSnapshot, RPCDeleteVolumeGroupSnapshot}

// SnapshotInput names a snapshot to cut of one volume, or of several at
// one point in time (a group snapshot).
type SnapshotInput struct {
	Endpoint Endpoint `json:"endpoint"`
	Name     string   `json:"name"`
	Volumes  []string `json:"volumes"`
}

// Snapshot is a snapshot the storage cut: its ID, the volume it is of and
// when it was cut.
type Snapshot struct {
	ID      string    `json:"id"`
	Volume  string    `json:"volume"`
	Created time.Time `json:"created"`
	Size    int64     `json:"size,omitempty"`
}

// GroupSnapshot is a group snapshot and its member snapshots.
type GroupSnapshot struct {
	ID        string     `json:"id"`
	Snapshots []Snapshot `json:"snapshots"`
}

// CopyInput names a writable volume to create from a snapshot.
type CopyInput struct {
	Endpoint Endpoint `json:"endpoint"`
	Name     string   `json:"name"`
	Snapshot string   `json:"snapshot"`
	// Bytes, when known, is the snapshot's size, asked for as the copy's
	// required capacity: without it a driver makes the volume its default
	// size (ceph-csi: 1 GiB, whatever the snapshot's).
	Bytes int64 `json:"bytes,omitempty"`
}

// Copy is a volume created from a snapshot.
type Copy struct {
	ID       string `json:"id"`
	Snapshot string `json:"snapshot"`
}

// DeleteInput names what to delete: a volume, a snapshot, or a group
// snapshot with its members (Members).
type DeleteInput struct {
	Endpoint Endpoint `json:"endpoint"`
	ID       string   `json:"id"`
	Members  []string `json:"members,omitempty"`
}

func snapshotOf(s *csi.Snapshot) Snapshot {
	return Snapshot{ID: s.GetSnapshotId(), Volume: s.GetSourceVolumeId(), Created: s.GetCreationTime().AsTime(), Size: s.GetSizeBytes()}
}

// CreateSnapshot cuts a snapshot of one volume (in.Volumes[0]).
func (s *Storage) CreateSnapshot(ctx context.Context, in SnapshotInput) (Snapshot, error) {
	var out Snapshot
	vol := ""
	if len(in.Volumes) == 1 {
		vol = in.Volumes[0]
	}
	err := s.call(ctx, RPCCreateSnapshot, in.Endpoint, vol, true, func(ctx context.Context, conn *grpc.ClientConn, secrets map[string]string) error {
		r, err := csi.NewControllerClient(conn).CreateSnapshot(ctx, &csi.CreateSnapshotRequest{
			Name: in.Name, SourceVolumeId: vol, Parameters: in.Endpoint.Parameters, Secrets: secrets})
		if err == nil {
			out = snapshotOf(r.GetSnapshot())
		}
		return err
	})
	return out, err
}

// CreateVolumeGroupSnapshot cuts the volumes at one point in time.
func (s *Storage) CreateVolumeGroupSnapshot(ctx context.Context, in SnapshotInput) (GroupSnapshot, error) {
	var out GroupSnapshot
	err := s.call(ctx, RPCCreateVolumeGroupSnapshot, in.Endpoint, strings.Join(in.Volumes, ","), true, func(ctx context.Context, conn *grpc.ClientConn, secrets map[string]string) error {
		r, err := csi.NewGroupControllerClient(conn).CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{
			Name: in.Name, SourceVolumeIds: in.Volumes, Parameters: in.Endpoint.Parameters, Secrets: secrets})
		if err == nil {
			out.ID = r.GetGroupSnapshot().GetGroupSnapshotId()
			for _, sn := range r.GetGroupSnapshot().GetSnapshots() {
				out.Snapshots = append(out.Snapshots, snapshotOf(sn))
			}
			slices.SortFunc(out.Snapshots, func(a, b Snapshot) int { return strings.Compare(a.Volume, b.Volume) })
		}
		return err
	})
	return out, err
}

// copyCapability is what a copy is created for: a filesystem one node
// writes, as the workload that runs on it in the test does.
var copyCapability = []*csi.VolumeCapability{{
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}}

// CreateVolume creates a writable volume from a snapshot.
func (s *Storage) CreateVolume(ctx context.Context, in CopyInput) (Copy, error) {
	var out Copy
	err := s.call(ctx, RPCCreateVolume, in.Endpoint, in.Snapshot, true, func(ctx context.Context, conn *grpc.ClientConn, secrets map[string]string) error {
		req := &csi.CreateVolumeRequest{
			Name: in.Name, VolumeCapabilities: copyCapability, Parameters: in.Endpoint.Parameters, Secrets: secrets,
			VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
				Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: in.Snapshot}}}}
		if in.Bytes > 0 {
			req.CapacityRange = &csi.CapacityRange{RequiredBytes: in.Bytes}
		}
		r, err := csi.NewControllerClient(conn).CreateVolume(ctx, req)
		if err == nil {
			out = Copy{ID: r.GetVolume().GetVolumeId(), Snapshot: in.Snapshot}
		}
		return err
	})
	return out, err
}

// DeleteVolume deletes a copy.
func (s *Storage) DeleteVolume(ctx context.Context, in DeleteInput) error {
	return s.call(ctx, RPCDeleteVolume, in.Endpoint, in.ID, true, func(ctx context.Context, conn *grpc.ClientConn, secrets map[string]string) error {
		_, err := csi.NewControllerClient(conn).DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: in.ID, Secrets: secrets})
		return err
	})
}

// DeleteSnapshot deletes a snapshot.
func (s *Storage) DeleteSnapshot(ctx context.Context, in DeleteInput) error {
	return s.call(ctx, RPCDeleteSnapshot, in.Endpoint, in.ID, true, func(ctx context.Context, conn *grpc.ClientConn, secrets map[string]string) error {
		_, err := csi.NewControllerClient(conn).DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: in.ID, Secrets: secrets})
		return err
	})
}

// DeleteVolumeGroupSnapshot deletes a group snapshot and its members.
func (s *Storage) DeleteVolumeGroupSnapshot(ctx context.Context, in DeleteInput) error {
	return s.call(ctx, RPCDeleteVolumeGroupSnapshot, in.Endpoint, in.ID, true, func(ctx context.Context, conn *grpc.ClientConn, secrets map[string]string) error {
		_, err := csi.NewGroupControllerClient(conn).DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{
			GroupSnapshotId: in.ID, SnapshotIds: in.Members, Secrets: secrets})
		return err
	})
}
