package sim

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drover-dr/drover/csiaddons/replication"
)

// GetReplicationDestinationInfo names the peer site's copy of a replicated
// volume or volume group. The simulator's sites hold every unit under the
// same IDs, so the destination of a volume is the volume of the same ID on
// the peer, and a group's map names each of its volumes. Its error table is
// the spec's: a request without replication_source is INVALID_ARGUMENT, an
// unknown source NOT_FOUND, one not replicated FAILED_PRECONDITION, and
// before the first sync between the two copies UNAVAILABLE ("destination
// details are not yet available").
func (r *replicationServer) GetReplicationDestinationInfo(ctx context.Context, req *replication.GetReplicationDestinationInfoRequest) (*replication.GetReplicationDestinationInfoResponse, error) {
	var resp *replication.GetReplicationDestinationInfoResponse
	err := r.s.withUnit(ctx, "GetReplicationDestinationInfo", req.GetSecrets(), "", req.GetReplicationSource(), func(u *unit) error {
		u.mu.Lock()
		defer u.mu.Unlock()
		if !u.st.Enabled {
			return status.Errorf(codes.FailedPrecondition, "%s %q: replication is not enabled", u.st.Kind, u.st.ID)
		}
		synced := u.st.InSync
		if u.st.Role == RolePrimary {
			synced = u.st.LastSync != nil
		}
		if !synced {
			return status.Errorf(codes.Unavailable, "%s %q: the destination is not known until the first sync completes", u.st.Kind, u.st.ID)
		}
		dest := &replication.ReplicationDestination{}
		if u.st.Kind == KindGroup {
			ids := make(map[string]string, len(u.st.Volumes))
			for _, v := range u.st.Volumes {
				ids[v] = v
			}
			dest.Type = &replication.ReplicationDestination_Volumegroup{Volumegroup: &replication.ReplicationDestination_VolumeGroupDestination{VolumeGroupId: u.st.ID, VolumeIds: ids}}
		} else {
			dest.Type = &replication.ReplicationDestination_Volume{Volume: &replication.ReplicationDestination_VolumeDestination{VolumeId: u.st.ID}}
		}
		resp = &replication.GetReplicationDestinationInfoResponse{ReplicationDestination: dest}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}
