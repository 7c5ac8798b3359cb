package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestFailbackDemotesAgainACopyPrimaryAgain: the copy the failback
// demoted turns primary again just after its demotion returned, with no
// call of Drover's (Ceph does so when its mirror-snapshot schedule takes
// a primary snapshot across the demotion; made here with a promotion
// from outside). The failback reads the roles back before promoting the
// other site, demotes the copy again, and goes on: the promotion follows
// the second demotion without force, nothing is lost, and the step says
// what it found. Before, the failback promoted west while east's copy was
// primary again, and paused at the resync ("image is in primary state").
func TestFailbackDemotesAgainACopyPrimaryAgain(t *testing.T) {
	f := newFixture(t)
	db := &replication.ReplicationSource{Type: &replication.ReplicationSource_Volumegroup{
		Volumegroup: &replication.ReplicationSource_VolumeGroupSource{VolumeGroupId: "vg-1"}}}
	rc := replication.NewControllerClient(dial(t, f.east))
	var mu sync.Mutex
	demotes, flipped := 0, false
	f.setOnRPC(func(site, method string, req any, handle func() (any, error)) (any, error) {
		resp, err := handle()
		if site != "east" || method != "DemoteVolume" || err != nil ||
			req.(*replication.DemoteVolumeRequest).GetReplicationSource().GetVolumegroup().GetVolumeGroupId() != "vg-1" {
			return resp, err
		}
		mu.Lock()
		demotes++
		first := demotes == 1
		mu.Unlock()
		if first {
			// Primary again before the demotion's answer reaches the
			// worker: the test environment skips the failback's settle.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, perr := rc.PromoteVolume(ctx, &replication.PromoteVolumeRequest{ReplicationSource: db, Force: true})
			mu.Lock()
			flipped = perr == nil
			mu.Unlock()
		}
		return resp, err
	})
	var fb workflows.FailbackResult
	calls, err := f.run(t, workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "east", To: "west"}, &fb)
	mustOK(t, err)
	mu.Lock()
	if !flipped || demotes != 2 {
		t.Fatalf("east's db flipped %v, demoted %d times; want flipped and demoted twice", flipped, demotes)
	}
	mu.Unlock()
	allDone(t, fb.Progress)
	held := ""
	for _, s := range fb.Steps {
		if s.Name == "check the demotion held on east" {
			held = s.Output
		}
	}
	if !strings.Contains(held, "demoted again: volume group \"vg-1\"") {
		t.Fatalf("the read-back does not say what it demoted again: %q", held)
	}
	inOrder(t, calls,
		[3]string{"DemoteVolume", "east", "vg-1"},
		[3]string{"DemoteVolume", "east", "vg-1"},
		[3]string{"PromoteVolume", "west", "vg-1"})
	roles(t, f.west, sim.RolePrimary)
	roles(t, f.east, sim.RoleSecondary)
	if r := sim.Check(f.east.Snapshot(), f.west.Snapshot()); !r.OK() {
		t.Fatalf("invariants: %s", r)
	}
}

// TestResyncDemotesAgainACopyPrimaryAgain: the failback's resync finds
// the copy it demoted primary again (ceph-csi's ResyncVolume refuses
// "image is in primary state"; here the spec's FAILED_PRECONDITION, and
// the copy's replication info answered as a primary's). With the other
// site's copy primary and nothing of the plan running, it demotes the
// copy again and resyncs, and the step says so. With a workload still
// running on the copy's site it demotes nothing and pauses.
func TestResyncDemotesAgainACopyPrimaryAgain(t *testing.T) {
	for _, running := range []bool{false, true} {
		name := "nothing runs"
		if running {
			name = "a workload runs"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.plan.Policy.OnFailure = "abort"
			f.plan.Policy.StopDeadline = plans.Duration(time.Second)
			// pg's stopped hook: nothing of it runs unless marker exists.
			marker := filepath.Join(t.TempDir(), "running")
			for i, w := range f.plan.Workloads {
				if w.Name == "pg" {
					hooks := *w.Sites["east"].Exec
					hooks.Stopped = fmt.Sprintf("test ! -e %s", marker)
					f.plan.Workloads[i].Sites["east"] = plans.WorkloadRef{Exec: &hooks}
				}
			}
			var mu sync.Mutex
			promoted, refused, asked, demotes := false, false, false, 0
			isDB := func(req any) bool {
				type sourced interface {
					GetReplicationSource() *replication.ReplicationSource
				}
				r, ok := req.(sourced)
				return ok && r.GetReplicationSource().GetVolumegroup().GetVolumeGroupId() == "vg-1"
			}
			f.setOnRPC(func(site, method string, req any, handle func() (any, error)) (any, error) {
				mu.Lock()
				defer mu.Unlock()
				switch {
				case site == "west" && method == "PromoteVolume" && isDB(req):
					promoted = true
				case site == "east" && method == "ResyncVolume" && isDB(req) && promoted && !refused:
					refused = true
					if running {
						// pg runs again on east (an operator started it).
						mustOK(t, os.WriteFile(marker, nil, 0o600))
					}
					return nil, status.Error(codes.FailedPrecondition, "volume group \"vg-1\" is not in the demoted state")
				case site == "east" && method == "GetVolumeReplicationInfo" && isDB(req) && refused && !asked:
					asked = true
					return &replication.GetVolumeReplicationInfoResponse{LastSyncTime: timestamppb.Now()}, nil
				case site == "east" && method == "DemoteVolume" && isDB(req):
					demotes++
				}
				return handle()
			})
			var fb workflows.FailbackResult
			_, err := f.run(t, workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "east", To: "west"}, &fb)
			mu.Lock()
			defer mu.Unlock()
			if !refused || !asked {
				t.Fatalf("the resync was refused %v, east's role asked %v", refused, asked)
			}
			out := ""
			for _, s := range fb.Steps {
				if s.Name == "resync db on east" {
					out = s.Output + s.LastError
				}
			}
			if running {
				var ae *temporal.ApplicationError
				if !errors.As(err, &ae) || ae.Type() != workflows.ErrPrimaryAgain || !strings.Contains(err.Error(), "workload pg is not confirmed stopped") {
					t.Fatalf("error %v, step %q; want the resync to stop naming pg", err, out)
				}
				if demotes != 1 {
					t.Fatalf("east's db demoted %d times with pg running, want 1 (the failback's own)", demotes)
				}
				return
			}
			mustOK(t, err)
			allDone(t, fb.Progress)
			if demotes != 2 || !strings.Contains(out, "answered as primary again after its demotion") {
				t.Fatalf("east's db demoted %d times; the resync says: %q", demotes, out)
			}
		})
	}
}
