package activities_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/csiaddons/identity"
	"github.com/drover-dr/drover/csiaddons/replication"
)

// answering is a driver that names itself name and answers ListClusterFence,
// ResyncVolume and GetVolumeReplicationInfo with err.
type answering struct {
	identity.UnimplementedIdentityServer
	fence.UnimplementedFenceControllerServer
	replication.UnimplementedControllerServer
	name string
	err  error
}

func (a *answering) GetIdentity(context.Context, *identity.GetIdentityRequest) (*identity.GetIdentityResponse, error) {
	return &identity.GetIdentityResponse{Name: a.name, VendorVersion: "test"}, nil
}

func (a *answering) ListClusterFence(context.Context, *fence.ListClusterFenceRequest) (*fence.ListClusterFenceResponse, error) {
	return nil, a.err
}

func (a *answering) ResyncVolume(context.Context, *replication.ResyncVolumeRequest) (*replication.ResyncVolumeResponse, error) {
	return nil, a.err
}

func (a *answering) GetVolumeReplicationInfo(context.Context, *replication.GetVolumeReplicationInfoRequest) (*replication.GetVolumeReplicationInfoResponse, error) {
	return nil, a.err
}

func serveAnswering(t *testing.T, a *answering) activities.Endpoint {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "driver.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	identity.RegisterIdentityServer(srv, a)
	fence.RegisterFenceControllerServer(srv, a)
	replication.RegisterControllerServer(srv, a)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return activities.Endpoint{Site: "x", Address: "unix://" + sock}
}

// TestDeviationsNeedNameAndBehaviour: a recorded deviation of a driver is
// read as the spec's code only when the endpoint both names itself as
// that driver and answers in that driver's words; a name alone, or the
// words alone, change nothing.
func TestDeviationsNeedNameAndBehaviour(t *testing.T) {
	panicked := status.Error(codes.Internal, "panic runtime error: invalid memory address or nil pointer dereference")
	other := status.Error(codes.Internal, "failed to connect to the cluster")
	noInfo := status.Error(codes.Internal, "failed to get last sync info: no snapshot details: last sync time not found")
	secondary := status.Error(codes.InvalidArgument, "image is not in primary state")
	noRemote := status.Error(codes.Internal, "failed to get remote status: RBD image not found: rbd: ret=-2, No such file or directory")
	otherRemote := status.Error(codes.Internal, "failed to get remote status: connection refused")
	for _, c := range []struct {
		name, driver string
		rpc          string
		err          error
		want         string
		retryable    bool
	}{
		{"ceph-csi's panic reads as unimplemented", "rbd.csi.ceph.com", activities.RPCListClusterFence, panicked, activities.ErrNotImplemented, false},
		{"a Rook-prefixed name too", "rook-ceph.rbd.csi.ceph.com", activities.RPCListClusterFence, panicked, activities.ErrNotImplemented, false},
		{"the words from another driver stay internal", "example.csi.vendor.io", activities.RPCListClusterFence, panicked, activities.ErrUnexpected, false},
		{"a name that only ends alike stays internal", "notrbd.csi.ceph.com.evil", activities.RPCListClusterFence, panicked, activities.ErrUnexpected, false},
		{"ceph-csi's other failures stay internal", "rbd.csi.ceph.com", activities.RPCListClusterFence, other, activities.ErrUnexpected, false},
		{"a resync without sync info yet is retried", "rbd.csi.ceph.com", activities.RPCResyncVolume, noInfo, activities.ErrUnavailable, true},
		{"the same words on another call stay internal", "rbd.csi.ceph.com", activities.RPCListClusterFence, noInfo, activities.ErrUnexpected, false},
		{"and from another driver too", "example.csi.vendor.io", activities.RPCResyncVolume, noInfo, activities.ErrUnexpected, false},
		// The role checks (a failover's, a reprotect's, a failback's,
		// status --verify) read FAILED_PRECONDITION as "not primary".
		{"a secondary's answer to replication info reads as not primary", "rbd.csi.ceph.com", activities.RPCGetVolumeReplicationInfo, secondary, activities.ErrFailedPrecondition, false},
		{"and stays invalid from another driver", "example.csi.vendor.io", activities.RPCGetVolumeReplicationInfo, secondary, activities.ErrInvalidArgument, false},
		// A primary whose peer's mirror daemon restarted (a power loss)
		// has no remote status for a while: the storage is recovering.
		{"a primary without its peer's status yet is retried", "rbd.csi.ceph.com", activities.RPCGetVolumeReplicationInfo, noRemote, activities.ErrUnavailable, true},
		{"other words of the remote status stay internal", "rbd.csi.ceph.com", activities.RPCGetVolumeReplicationInfo, otherRemote, activities.ErrUnexpected, false},
		{"and the words from another driver too", "example.csi.vendor.io", activities.RPCGetVolumeReplicationInfo, noRemote, activities.ErrUnexpected, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := serveAnswering(t, &answering{name: c.driver, err: c.err})
			s := newStorage(t)
			var err error
			switch c.rpc {
			case activities.RPCListClusterFence:
				_, err = s.ListClusterFence(ctxT(t), activities.FenceListInput{Endpoint: e})
			case activities.RPCGetVolumeReplicationInfo:
				_, err = s.GetVolumeReplicationInfo(ctxT(t), activities.ReplicationInput{Endpoint: e, Source: activities.Source{VolumeID: "v"}})
			default:
				_, err = s.ResyncVolume(ctxT(t), activities.ReplicationInput{Endpoint: e, Source: activities.Source{VolumeID: "v"}})
			}
			typ, f, ok := activities.FailureOf(err)
			if !ok || typ != c.want {
				t.Fatalf("got %v (type %q), want type %q", err, typ, c.want)
			}
			if got := activities.Retryable(err); got != c.retryable {
				t.Errorf("retryable %v, want %v", got, c.retryable)
			}
			if c.want != activities.ErrUnexpected && f.Message == "" {
				t.Errorf("the failure does not keep the driver's words: %+v", f)
			}
		})
	}
}

// TestDeviationRows: every row names its source, its versions and the
// measurement, and reads as a code the spec gives for some condition.
func TestDeviationRows(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range activities.Deviations {
		if d.ID == "" || seen[d.ID] {
			t.Errorf("row %+v: empty or repeated ID", d)
		}
		seen[d.ID] = true
		if d.Driver == "" || d.Versions == "" || d.Source == "" || d.Measured == "" || d.Message == nil {
			t.Errorf("%s: a row needs its driver, versions, source, measurement and words", d.ID)
		}
		if d.Means == d.Code || d.Means == codes.OK {
			t.Errorf("%s: reads %s as %s", d.ID, d.Code, d.Means)
		}
	}
}
