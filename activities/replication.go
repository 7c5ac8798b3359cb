package activities

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"

	"github.com/drover-dr/drover/csiaddons/replication"
)

// Source is what a replication call acts on: a volume group or a single
// volume. Exactly one is set.
type Source struct {
	GroupID  string `json:"groupID,omitempty"`
	VolumeID string `json:"volumeID,omitempty"`
}

func (s Source) String() string {
	if s.GroupID != "" {
		return fmt.Sprintf("volume group %q", s.GroupID)
	}
	return fmt.Sprintf("volume %q", s.VolumeID)
}

// proto builds replication_source. The newest spec reads only that field;
// older drivers read only volume_id, which volumeID fills for a single
// volume, so every generation of driver understands the call.
func (s Source) proto() *replication.ReplicationSource {
	if s.GroupID != "" {
		return &replication.ReplicationSource{Type: &replication.ReplicationSource_Volumegroup{
			Volumegroup: &replication.ReplicationSource_VolumeGroupSource{VolumeGroupId: s.GroupID}}}
	}
	return &replication.ReplicationSource{Type: &replication.ReplicationSource_Volume{
		Volume: &replication.ReplicationSource_VolumeSource{VolumeId: s.VolumeID}}}
}

func (s Source) volumeID() string {
	if s.GroupID != "" {
		return ""
	}
	return s.VolumeID
}

// ReplicationInput addresses one replication call.
type ReplicationInput struct {
	Endpoint Endpoint `json:"endpoint"`
	Source   Source   `json:"source"`
	// ReplicationID is the optional replication_id of the request.
	ReplicationID string `json:"replicationID,omitempty"`
	// Force is sent on Promote, Demote and Resync.
	Force bool `json:"force,omitempty"`
}

func (in ReplicationInput) check(rpc string) error {
	if (in.Source.GroupID == "") == (in.Source.VolumeID == "") {
		return setupError(rpc, in.Endpoint, in.Source.String(), ErrInvalidArgument,
			fmt.Errorf("a replication source is exactly one of a volume group id or a volume id"))
	}
	return nil
}

// replicate runs one replication RPC; the closure builds and sends the
// request from the common fields.
func (s *Storage) replicate(ctx context.Context, rpc string, in ReplicationInput,
	fn func(ctx context.Context, c replication.ControllerClient, secrets map[string]string) error) error {
	if err := in.check(rpc); err != nil {
		return err
	}
	key := ""
	if !s.SeparateAttempts && slices.Contains(flightRPCs, rpc) {
		key = flightKey(ctx, rpc, in)
	}
	return s.flights.do(ctx, key, func(ctx context.Context) error {
		return s.call(ctx, rpc, in.Endpoint, in.Source.String(), true, func(ctx context.Context, conn *grpc.ClientConn, secrets map[string]string) error {
			return fn(ctx, replication.NewControllerClient(conn), secrets)
		})
	})
}

// EnableVolumeReplication turns replication on; the plan's parameters
// (mirroringMode, schedulingInterval, …) go with it.
func (s *Storage) EnableVolumeReplication(ctx context.Context, in ReplicationInput) error {
	return s.replicate(ctx, RPCEnableVolumeReplication, in, func(ctx context.Context, c replication.ControllerClient, secrets map[string]string) error {
		_, err := c.EnableVolumeReplication(ctx, &replication.EnableVolumeReplicationRequest{
			VolumeId: in.Source.volumeID(), Parameters: in.Endpoint.Parameters, Secrets: secrets,
			ReplicationId: in.ReplicationID, ReplicationSource: in.Source.proto()})
		return err
	})
}

// DisableVolumeReplication turns replication off. NOT_FOUND counts as
// done: nothing is left to disable.
func (s *Storage) DisableVolumeReplication(ctx context.Context, in ReplicationInput) error {
	return s.replicate(ctx, RPCDisableVolumeReplication, in, func(ctx context.Context, c replication.ControllerClient, secrets map[string]string) error {
		_, err := c.DisableVolumeReplication(ctx, &replication.DisableVolumeReplicationRequest{
			VolumeId: in.Source.volumeID(), Parameters: in.Endpoint.Parameters, Secrets: secrets,
			ReplicationId: in.ReplicationID, ReplicationSource: in.Source.proto()})
		return err
	})
}

// PromoteVolume makes the site's copy primary. Without Force the driver
// answers FAILED_PRECONDITION until the peer is demoted and caught up;
// that comes back to the workflow as ErrFailedPrecondition.
func (s *Storage) PromoteVolume(ctx context.Context, in ReplicationInput) error {
	return s.replicate(ctx, RPCPromoteVolume, in, func(ctx context.Context, c replication.ControllerClient, secrets map[string]string) error {
		_, err := c.PromoteVolume(ctx, &replication.PromoteVolumeRequest{
			VolumeId: in.Source.volumeID(), Force: in.Force, Parameters: in.Endpoint.Parameters, Secrets: secrets,
			ReplicationId: in.ReplicationID, ReplicationSource: in.Source.proto()})
		return err
	})
}

// DemoteVolume makes the site's copy secondary.
func (s *Storage) DemoteVolume(ctx context.Context, in ReplicationInput) error {
	return s.replicate(ctx, RPCDemoteVolume, in, func(ctx context.Context, c replication.ControllerClient, secrets map[string]string) error {
		_, err := c.DemoteVolume(ctx, &replication.DemoteVolumeRequest{
			VolumeId: in.Source.volumeID(), Force: in.Force, Parameters: in.Endpoint.Parameters, Secrets: secrets,
			ReplicationId: in.ReplicationID, ReplicationSource: in.Source.proto()})
		return err
	})
}

// ResyncResult says whether the resynced copy has caught up.
type ResyncResult struct {
	Ready bool `json:"ready"`
}

// ResyncVolume asks a demoted copy to resynchronise from the primary, once.
// ResyncUntilReady is the activity that waits for ready.
func (s *Storage) ResyncVolume(ctx context.Context, in ReplicationInput) (ResyncResult, error) {
	var out ResyncResult
	err := s.replicate(ctx, RPCResyncVolume, in, func(ctx context.Context, c replication.ControllerClient, secrets map[string]string) error {
		r, err := c.ResyncVolume(ctx, &replication.ResyncVolumeRequest{
			VolumeId: in.Source.volumeID(), Force: in.Force, Parameters: in.Endpoint.Parameters, Secrets: secrets,
			ReplicationId: in.ReplicationID, ReplicationSource: in.Source.proto()})
		if err == nil {
			out.Ready = r.GetReady()
		}
		return err
	})
	return out, err
}

// ReplicationInfo is what GetVolumeReplicationInfo reports about the
// primary copy. Status is empty when the driver does not report one.
type ReplicationInfo struct {
	LastSyncTime     time.Time     `json:"lastSyncTime"`
	LastSyncDuration time.Duration `json:"lastSyncDuration"`
	LastSyncBytes    int64         `json:"lastSyncBytes"`
	Status           string        `json:"status,omitempty"`
	StatusMessage    string        `json:"statusMessage,omitempty"`
	// Lag is how far the last completed sync was behind the worker's clock
	// when the call answered; zero before the first sync.
	Lag time.Duration `json:"lag"`
}

// GetVolumeReplicationInfo reads the last sync of a primary copy.
func (s *Storage) GetVolumeReplicationInfo(ctx context.Context, in ReplicationInput) (ReplicationInfo, error) {
	var out ReplicationInfo
	err := s.replicate(ctx, RPCGetVolumeReplicationInfo, in, func(ctx context.Context, c replication.ControllerClient, secrets map[string]string) error {
		r, err := c.GetVolumeReplicationInfo(ctx, &replication.GetVolumeReplicationInfoRequest{
			VolumeId: in.Source.volumeID(), Secrets: secrets,
			ReplicationId: in.ReplicationID, ReplicationSource: in.Source.proto()})
		if err != nil {
			return err
		}
		out = ReplicationInfo{LastSyncBytes: r.GetLastSyncBytes(), StatusMessage: r.GetStatusMessage()}
		if r.GetLastSyncTime() != nil {
			out.LastSyncTime = r.GetLastSyncTime().AsTime()
			out.Lag = time.Since(out.LastSyncTime)
		}
		if r.GetLastSyncDuration() != nil {
			out.LastSyncDuration = r.GetLastSyncDuration().AsDuration()
		}
		if st := r.GetStatus(); st != replication.GetVolumeReplicationInfoResponse_UNKNOWN {
			out.Status = st.String()
		}
		return nil
	})
	return out, err
}
