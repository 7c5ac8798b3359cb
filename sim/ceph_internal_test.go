package sim

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/internal/freeport"
)

// A copy just demoted, or starting to replay a live primary that has not
// shipped it a snapshot yet, has no snapshot details: ResyncVolume answers
// INTERNAL until the first snapshot arrives, then ready=false. Over the
// gRPC API this lasts one round of the link; here the primary is held with
// nothing to ship, so that the answer can be read at leisure.
func TestCephCSIStartingReplayHasNoSnapshotDetails(t *testing.T) {
	sock, err := os.MkdirTemp("", "dsim")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sock) })
	addr := func() string {
		a, err := freeport.Addr("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	dataA, dataB := addr(), addr()
	mk := func(name, data, peer string, primary bool) *Site {
		s, err := New(Config{Name: name, GRPCAddr: "unix://" + filepath.Join(sock, name+".sock"), DataAddr: data, PeerAddr: peer,
			Primary: primary, Groups: []GroupSpec{{ID: "vg-1", Volumes: []string{"v1"}}}, Driver: DriverCephCSI,
			SyncInterval: 20 * time.Millisecond, PeerToken: "t"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	b := mk("b", dataB, dataA, true)
	a := mk("a", dataA, dataB, false)
	ub, ua := b.units["vg/vg-1"], a.units["vg/vg-1"]
	// B: an enabled primary with no snapshot to ship and no schedule.
	ub.st.Enabled = true
	// A: enabled, demoted, holding what B holds, not yet replaying B.
	ua.st.Enabled, ua.st.Demoted, ua.st.DemoteStamp = true, true, true
	ua.st.Epoch, ua.st.Lineage = 1, []Fork{{Epoch: 1}}
	for _, s := range []*Site{b, a} {
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
	}
	r := &replicationServer{s: a}
	req := &replication.ResyncVolumeRequest{ReplicationSource: &replication.ReplicationSource{Type: &replication.ReplicationSource_Volumegroup{
		Volumegroup: &replication.ReplicationSource_VolumeGroupSource{VolumeGroupId: "vg-1"}}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		_, err := r.ResyncVolume(ctx, req)
		if st := status.Convert(err); st.Code() != codes.Internal || st.Message() != "failed to get last sync info: no snapshot details: last sync time not found" {
			t.Fatalf("resync of a copy starting its replay: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// B takes a snapshot (as a promotion does): A replays it.
	ub.mu.Lock()
	ub.st.SnapPending = true
	ub.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := r.ResyncVolume(ctx, req)
		if err == nil && !resp.GetReady() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("resync once the first snapshot arrived: %v %v", resp, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
