package activities_test

import (
	"context"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/csiaddons/identity"
	"github.com/drover-dr/drover/csiaddons/replication"
)

func (a *answering) DisableVolumeReplication(context.Context, *replication.DisableVolumeReplicationRequest) (*replication.DisableVolumeReplicationResponse, error) {
	return nil, a.err
}

// answeringCSI is answering's CSI controller: CreateSnapshot answers err.
type answeringCSI struct {
	csi.UnimplementedControllerServer
	a *answering
}

func (c answeringCSI) CreateSnapshot(context.Context, *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	return nil, c.a.err
}

// serveAnsweringTCP serves a on 127.0.0.1, with its CSI controller.
func serveAnsweringTCP(t *testing.T, a *answering) activities.Endpoint {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	identity.RegisterIdentityServer(srv, a)
	fence.RegisterFenceControllerServer(srv, a)
	replication.RegisterControllerServer(srv, a)
	csi.RegisterControllerServer(srv, answeringCSI{a: a})
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return activities.Endpoint{Site: "x", Address: l.Addr().String()}
}

// cephWords are, for each recorded deviation of ceph-csi that rewrites
// its answer (Classify), the driver's own words for the condition, and
// other words it answers with the same code on the same call, which must
// come through as they are.
var cephWords = map[string]struct{ own, other string }{
	"ceph-csi/list-fence-panics": {
		"panic runtime error: invalid memory address or nil pointer dereference",
		"failed to connect to the cluster"},
	"ceph-csi/resync-no-sync-info": {
		"failed to get last sync info: no snapshot details: last sync time not found",
		"failed to get mirroring status: rados: ret=-110, Connection timed out"},
	"ceph-csi/resync-recreating-not-enabled": {
		"image mirroring is not enabled",
		"volume ID cannot be empty"},
	"ceph-csi/resync-recreating-no-local-status": {
		"failed to get local status: RBD image not found: rbd: ret=-2, No such file or directory",
		"failed to get image mirroring status: rados: ret=-110, Connection timed out"},
	"ceph-csi/disable-peer-deleted-internal": {
		`failed to open image "replicapool/csi-vol-5a2f0c1e" with error: Failed as image not found (internal RBD image not found: rbd: ret=-2, No such file or directory)`,
		`failed to open image "replicapool/csi-vol-5a2f0c1e" with error: rados: ret=-110, Connection timed out`},
	"ceph-csi/info-secondary-invalid": {
		"image is not in primary state",
		"volume ID cannot be empty"},
	"ceph-csi/info-no-remote-status": {
		"failed to get remote status: RBD image not found: rbd: ret=-2, No such file or directory",
		"failed to get remote status: connection refused"},
	"ceph-csi/snapshot-replica-read-only": {
		"rbd: ret=-30, Read-only file system",
		"rbd: ret=-28, No space left on device"},
}

// TestEveryRewritingRowRewrites: every recorded deviation that rewrites
// a driver's answer (Classify) does so for ceph-csi's own words on its
// call, naming the row, and leaves the same code in other words as it
// came. A row that rewrites needs its words here.
func TestEveryRewritingRowRewrites(t *testing.T) {
	byID := map[string]activities.Deviation{}
	for _, d := range activities.Deviations {
		byID[d.ID] = d
		if _, ok := cephWords[d.ID]; d.Classify && !ok {
			t.Errorf("no driver's words for %s, which rewrites answers: add its own and other words to cephWords", d.ID)
		}
	}
	ids := slices.Sorted(maps.Keys(cephWords))
	for _, id := range ids {
		t.Run(id, func(t *testing.T) {
			d, ok := byID[id]
			if !ok || !d.Classify {
				t.Fatalf("%s: no row that rewrites answers (found %v, Classify %v)", id, ok, d.Classify)
			}
			w := cephWords[id]
			if !d.Message.MatchString(w.own) || d.Message.MatchString(w.other) {
				t.Fatalf("the words do not tell the row's condition from another: %q, %q against %s", w.own, w.other, d.Message)
			}
			call := func(words string) error {
				e := serveAnsweringTCP(t, &answering{name: d.Driver, err: status.Error(d.Code, words)})
				s := newStorage(t)
				src := activities.Source{VolumeID: "v"}
				switch d.RPC {
				case activities.RPCListClusterFence:
					_, err := s.ListClusterFence(ctxT(t), activities.FenceListInput{Endpoint: e})
					return err
				case activities.RPCResyncVolume:
					_, err := s.ResyncVolume(ctxT(t), activities.ReplicationInput{Endpoint: e, Source: src})
					return err
				case activities.RPCGetVolumeReplicationInfo:
					_, err := s.GetVolumeReplicationInfo(ctxT(t), activities.ReplicationInput{Endpoint: e, Source: src})
					return err
				case activities.RPCDisableVolumeReplication:
					return s.DisableVolumeReplication(ctxT(t), activities.ReplicationInput{Endpoint: e, Source: src})
				case activities.RPCCreateSnapshot:
					_, err := s.CreateSnapshot(ctxT(t), activities.SnapshotInput{Endpoint: e, Name: "p1", Volumes: []string{"v"}})
					return err
				}
				t.Fatalf("no call of %s in this test: add it", d.RPC)
				return nil
			}
			mark := "a recorded deviation, " + d.ID
			err := call(w.own)
			switch {
			case d.Means == codes.NotFound && d.RPC == activities.RPCDisableVolumeReplication:
				// A disable counts NOT_FOUND as done.
				if err != nil {
					t.Fatalf("ceph-csi's own words: %v; want the disable done (NOT_FOUND)", err)
				}
			case err == nil || !strings.Contains(err.Error(), mark) || !strings.Contains(err.Error(), "read as "+d.Means.String()):
				t.Fatalf("ceph-csi's own words: %v; want them read as %s by %s", err, d.Means, d.ID)
			}
			err = call(w.other)
			if err == nil || strings.Contains(err.Error(), "recorded deviation") || !strings.Contains(err.Error(), w.other) {
				t.Fatalf("ceph-csi's other words: %v; want them as they came", err)
			}
		})
	}
}
