package workflows_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// splitBrain loses east with a write its replica never received, fails
// over to west, writes there too and brings east back: both copies of
// db were written as primary.
func (f *fixture) splitBrain(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	east, err := sim.NewClient(f.east.DataAddr(), simtest.NodeA, "east-node")
	mustOK(t, err)
	defer east.Close()
	// A shipping round checks the link once, at its start: one under way
	// when the link is cut can still carry a write to west. The write
	// waits until a round has seen the link down (db degraded on east),
	// after a first sync, without which east has no status to report.
	db := &replication.ReplicationSource{Type: &replication.ReplicationSource_Volumegroup{
		Volumegroup: &replication.ReplicationSource_VolumeGroupSource{VolumeGroupId: "vg-1"}}}
	rc := replication.NewControllerClient(dial(t, f.east))
	status := func() replication.GetVolumeReplicationInfoResponse_Status {
		info, err := rc.GetVolumeReplicationInfo(ctx, &replication.GetVolumeReplicationInfoRequest{ReplicationSource: db})
		if err != nil {
			return -1
		}
		return info.GetStatus()
	}
	simtest.Eventually(t, 20*time.Second, "db synced once", func() bool { return status() != -1 })
	f.east.SetLink(false)
	simtest.Eventually(t, 20*time.Second, "a shipping round to see the link down", func() bool {
		return status() == replication.GetVolumeReplicationInfoResponse_DEGRADED
	})
	_, err = east.Write(ctx, "v1", 7, []byte("east's divergent write"))
	mustOK(t, err)
	f.east.Down()
	f.east.SetLink(true)
	_, err = f.run(t, workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"}, nil)
	mustOK(t, err)
	west, err := sim.NewClient(f.west.DataAddr(), simtest.NodeB, "west-node")
	mustOK(t, err)
	defer west.Close()
	_, err = west.Write(ctx, "v1", 5, []byte("written on west"))
	mustOK(t, err)
	mustOK(t, f.east.Up())
}

// TestReprotectForcesSplitBrainResync: after a split brain, reprotect,
// which discards the returned site's divergence by design, resyncs with
// force from the first call (a diverged copy is what a failover leaves,
// and a driver may never say so: ceph-csi 3.12 answers INTERNAL without
// force), says what was discarded in the step, and ends with east a
// replica of west holding west's data and none of its own divergent write.
func TestReprotectForcesSplitBrainResync(t *testing.T) {
	f := newFixture(t)
	f.splitBrain(t)

	var rp workflows.ReprotectResult
	calls, err := f.run(t, workflows.Reprotect, workflows.ReprotectInput{Plan: f.plan, From: "east", To: "west"}, &rp)
	mustOK(t, err)
	allDone(t, rp.Progress)
	forced := false
	for _, c := range calls {
		if c.name == "ResyncUntilReady" && c.site == "east" && c.subject == "vg-1" {
			if !c.force {
				t.Fatalf("reprotect resynced the diverged vg-1 without force: %v", c)
			}
			forced = true
		}
	}
	if !forced {
		t.Fatalf("reprotect never forced the resync of the diverged vg-1:\n%v", calls)
	}
	var note string
	for _, s := range rp.Steps {
		if s.Name == "resync db on east" {
			note = s.Output
		}
	}
	if !strings.Contains(note, "forced resync") || !strings.Contains(note, "east's copies were replaced by west's") || !strings.Contains(note, "discarded") {
		t.Fatalf("resync step output %q does not record what was discarded", note)
	}
	t.Logf("resync step: %s", note)
	roles(t, f.east, sim.RoleSecondary)
	simtest.Eventually(t, 10*time.Second, "east holds west's write", func() bool {
		u := f.east.Snapshot().Unit("vg/vg-1")
		b, ok := u.Blocks["v1"][5]
		_, divergent := u.Blocks["v1"][7]
		return ok && string(b.Data) == "written on west" && !divergent
	})
	if r := sim.Check(f.east.Snapshot(), f.west.Snapshot()); !r.OK() {
		t.Fatalf("invariants: %s", r)
	}
}

// TestFailbackNeverForcesResync: a failback's resync of the old primary
// that the storage refuses without force pauses and explains; it is never
// sent with force, which would discard writes.
func TestFailbackNeverForcesResync(t *testing.T) {
	f := newFixture(t)
	// East is primary: fail back "from east to west"; east's resync is
	// refused as ceph-csi refuses a diverged image.
	mustOK(t, f.east.SetFaults([]sim.FaultRule{{Method: "ResyncVolume", Code: "FAILED_PRECONDITION", Count: 1000,
		Message: `image is in "up+error" state, description (split-brain). Force resync to recover volume`}}))
	env, calls := f.env(t)
	paused := false
	env.RegisterDelayedCallback(func() {
		if s := pausedStep(t, env); s != nil {
			paused = true
			if !strings.HasPrefix(s.Name, "resync ") || !strings.Contains(s.LastError, "never forces") || !strings.Contains(s.LastError, "Force resync") {
				t.Errorf("paused step %q: %s; want the resync, explained", s.Name, s.LastError)
			}
		}
		env.CancelWorkflow()
	}, time.Hour)
	env.ExecuteWorkflow(workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "east", To: "west"})
	if !paused {
		t.Fatalf("the failback did not pause on the refused resync: %v", env.GetWorkflowError())
	}
	for _, c := range *calls {
		if c.name == "ResyncVolume" && c.force {
			t.Fatalf("a failback forced a resync: %v", c)
		}
	}
}
