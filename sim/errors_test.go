package sim_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/sim"
)

// replCall issues one replication RPC on src with the given secrets.
type replCall func(ctx context.Context, s *siteUnderTest, volumeID string, src *replication.ReplicationSource, secrets map[string]string, force bool) error

var replCalls = map[string]replCall{
	"EnableVolumeReplication": func(ctx context.Context, s *siteUnderTest, id string, src *replication.ReplicationSource, sec map[string]string, _ bool) error {
		_, err := s.rc.EnableVolumeReplication(ctx, &replication.EnableVolumeReplicationRequest{VolumeId: id, ReplicationSource: src, Secrets: sec})
		return err
	},
	"DisableVolumeReplication": func(ctx context.Context, s *siteUnderTest, id string, src *replication.ReplicationSource, sec map[string]string, _ bool) error {
		_, err := s.rc.DisableVolumeReplication(ctx, &replication.DisableVolumeReplicationRequest{VolumeId: id, ReplicationSource: src, Secrets: sec})
		return err
	},
	"PromoteVolume": func(ctx context.Context, s *siteUnderTest, id string, src *replication.ReplicationSource, sec map[string]string, force bool) error {
		_, err := s.rc.PromoteVolume(ctx, &replication.PromoteVolumeRequest{VolumeId: id, ReplicationSource: src, Secrets: sec, Force: force})
		return err
	},
	"DemoteVolume": func(ctx context.Context, s *siteUnderTest, id string, src *replication.ReplicationSource, sec map[string]string, force bool) error {
		_, err := s.rc.DemoteVolume(ctx, &replication.DemoteVolumeRequest{VolumeId: id, ReplicationSource: src, Secrets: sec, Force: force})
		return err
	},
	"ResyncVolume": func(ctx context.Context, s *siteUnderTest, id string, src *replication.ReplicationSource, sec map[string]string, force bool) error {
		_, err := s.rc.ResyncVolume(ctx, &replication.ResyncVolumeRequest{VolumeId: id, ReplicationSource: src, Secrets: sec, Force: force})
		return err
	},
	"GetVolumeReplicationInfo": func(ctx context.Context, s *siteUnderTest, id string, src *replication.ReplicationSource, sec map[string]string, _ bool) error {
		_, err := s.rc.GetVolumeReplicationInfo(ctx, &replication.GetVolumeReplicationInfoRequest{VolumeId: id, ReplicationSource: src, Secrets: sec})
		return err
	},
}

// fenceCall issues one fence RPC with the given CIDRs and secrets.
type fenceCall func(ctx context.Context, s *siteUnderTest, cidrs []string, secrets map[string]string) error

func toCIDRs(cs []string) []*fence.CIDR {
	var out []*fence.CIDR
	for _, c := range cs {
		out = append(out, &fence.CIDR{Cidr: c})
	}
	return out
}

var fenceCalls = map[string]fenceCall{
	"FenceClusterNetwork": func(ctx context.Context, s *siteUnderTest, cs []string, sec map[string]string) error {
		_, err := s.fc.FenceClusterNetwork(ctx, &fence.FenceClusterNetworkRequest{Cidrs: toCIDRs(cs), Secrets: sec})
		return err
	},
	"UnfenceClusterNetwork": func(ctx context.Context, s *siteUnderTest, cs []string, sec map[string]string) error {
		_, err := s.fc.UnfenceClusterNetwork(ctx, &fence.UnfenceClusterNetworkRequest{Cidrs: toCIDRs(cs), Secrets: sec})
		return err
	},
	"ListClusterFence": func(ctx context.Context, s *siteUnderTest, _ []string, sec map[string]string) error {
		_, err := s.fc.ListClusterFence(ctx, &fence.ListClusterFenceRequest{Secrets: sec})
		return err
	},
	"GetFenceClients": func(ctx context.Context, s *siteUnderTest, _ []string, sec map[string]string) error {
		_, err := s.fc.GetFenceClients(ctx, &fence.GetFenceClientsRequest{Secrets: sec})
		return err
	},
}

// TestReplicationErrorTable produces every row of the replication spec's
// error tables, for every RPC whose table lists it.
func TestReplicationErrorTable(t *testing.T) {
	secrets := map[string]string{"user": "admin", "key": "s3cr3t"}
	for name, call := range replCalls {
		t.Run(name, func(t *testing.T) {
			a, _ := startPair(t, pairOpts{Secrets: secrets, TweakA: func(c *sim.Config) {}})
			ctx := ctxT(t)

			// 3 INVALID_ARGUMENT: a required field is missing.
			wantCode(t, call(ctx, a, "", nil, secrets, false), codes.InvalidArgument)
			wantCode(t, call(ctx, a, "", &replication.ReplicationSource{}, secrets, false), codes.InvalidArgument)
			wantCode(t, call(ctx, a, "", volume(""), secrets, false), codes.InvalidArgument)
			// ... or invalid: a grouped volume addressed alone, disagreeing ids.
			wantCode(t, call(ctx, a, "", volume("v1"), secrets, false), codes.InvalidArgument)
			wantCode(t, call(ctx, a, "solo", volume("v3"), secrets, false), codes.InvalidArgument)

			// 5 NOT_FOUND: no such volume or group.
			wantCode(t, call(ctx, a, "", group("nope"), secrets, false), codes.NotFound)
			wantCode(t, call(ctx, a, "nope", nil, secrets, false), codes.NotFound)

			// 16 UNAUTHENTICATED: secrets missing or wrong.
			wantCode(t, call(ctx, a, "", group("vg-1"), nil, false), codes.Unauthenticated)
			wantCode(t, call(ctx, a, "", group("vg-1"), map[string]string{"user": "admin", "key": "wrong"}, false), codes.Unauthenticated)

			// 9 FAILED_PRECONDITION where the table lists it: replication
			// not enabled.
			switch name {
			case "PromoteVolume", "DemoteVolume", "ResyncVolume", "GetVolumeReplicationInfo":
				wantCode(t, call(ctx, a, "", group("vg-2"), secrets, false), codes.FailedPrecondition)
			}

			// 10 ABORTED: another call is pending on the same volume.
			// The first call holds the volume for its latency; the second
			// comes well after it has taken it, even on a loaded machine.
			mustOK(t, a.SetFaults([]sim.FaultRule{{Method: name, Latency: time.Second}}))
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				call(ctx, a, "", group("vg-1"), secrets, true)
			}()
			time.Sleep(250 * time.Millisecond)
			wantCode(t, call(ctx, a, "", group("vg-1"), secrets, true), codes.Aborted)
			wg.Wait()

			// 2 UNKNOWN, injected as a driver would fail.
			mustOK(t, a.SetFaults([]sim.FaultRule{{Method: name, Code: "UNKNOWN", Count: 1}}))
			wantCode(t, call(ctx, a, "", group("vg-1"), secrets, true), codes.Unknown)
			mustOK(t, a.SetFaults(nil))
		})
	}
	// 12 UNIMPLEMENTED: a driver without the RPC.
	for name, call := range replCalls {
		t.Run(name+"/unimplemented", func(t *testing.T) {
			a, _ := startPair(t, pairOpts{TweakA: func(c *sim.Config) { c.Unimplemented = []string{name} }})
			wantCode(t, call(ctxT(t), a, "", group("vg-1"), nil, false), codes.Unimplemented)
		})
	}
}

// TestFailedPreconditionRows covers the state-dependent FAILED_PRECONDITION
// answers beyond "replication not enabled".
func TestFailedPreconditionRows(t *testing.T) {
	a, b := startPair(t, pairOpts{})
	ctx := ctxT(t)
	src := group("vg-1")
	enable(t, a, src)
	waitSynced(t, a, "vg/vg-1")
	promote := replCalls["PromoteVolume"]
	demote := replCalls["DemoteVolume"]
	resync := replCalls["ResyncVolume"]
	infoCall := replCalls["GetVolumeReplicationInfo"]
	// Promote without force while the peer is still primary.
	wantCode(t, promote(ctx, b, "", src, nil, false), codes.FailedPrecondition)
	// Resync of a copy that is primary, not demoted.
	wantCode(t, resync(ctx, a, "", src, nil, false), codes.FailedPrecondition)
	// Replication info from a copy that is not primary.
	wantCode(t, infoCall(ctx, b, "", src, nil, false), codes.FailedPrecondition)
	// Demote without force when the final sync cannot reach the peer.
	a.SetLink(false)
	wantCode(t, demote(ctx, a, "", src, nil, false), codes.FailedPrecondition)
	a.SetLink(true)
	// After enabling on the primary but before the first sync: NOT_FOUND
	// (replication details not available yet).
	mustOK(t, a.SetFaults(nil))
	a.SetLink(false)
	enable(t, a, group("vg-2"))
	wantCode(t, infoCall(ctx, a, "", group("vg-2"), nil, false), codes.NotFound)
}

func TestFenceErrorTable(t *testing.T) {
	secrets := map[string]string{"token": "t0k3n"}
	for name, call := range fenceCalls {
		t.Run(name, func(t *testing.T) {
			a, _ := startPair(t, pairOpts{Secrets: secrets})
			ctx := ctxT(t)
			if name == "FenceClusterNetwork" || name == "UnfenceClusterNetwork" {
				// Missing required field, and an invalid one.
				wantCode(t, call(ctx, a, nil, secrets), codes.InvalidArgument)
				wantCode(t, call(ctx, a, []string{""}, secrets), codes.InvalidArgument)
				wantCode(t, call(ctx, a, []string{"10.0.0/24"}, secrets), codes.InvalidArgument)
				wantCode(t, call(ctx, a, []string{"10.0.0.1"}, secrets), codes.InvalidArgument)
			}
			wantCode(t, call(ctx, a, []string{"10.0.0.0/24"}, nil), codes.Unauthenticated)
			mustOK(t, call(ctx, a, []string{"10.0.0.0/24"}, secrets))
			mustOK(t, a.SetFaults([]sim.FaultRule{{Method: name, Code: "UNKNOWN", Count: 1}}))
			wantCode(t, call(ctx, a, []string{"10.0.0.0/24"}, secrets), codes.Unknown)
		})
		t.Run(name+"/unimplemented", func(t *testing.T) {
			a, _ := startPair(t, pairOpts{TweakA: func(c *sim.Config) { c.Unimplemented = []string{name} }})
			wantCode(t, call(ctxT(t), a, []string{"10.0.0.0/24"}, nil), codes.Unimplemented)
		})
	}
}

// TestUnknownOnPersistFailure: a driver that cannot record a change fails
// the call with UNKNOWN rather than acknowledging it.
func TestUnknownOnPersistFailure(t *testing.T) {
	a, _ := startPair(t, pairOpts{})
	units := filepath.Join(a.cfg.StateDir, "units")
	mustOK(t, os.RemoveAll(units))
	mustOK(t, os.WriteFile(units, []byte("not a directory"), 0o644))
	wantCode(t, replCalls["EnableVolumeReplication"](ctxT(t), a, "", group("vg-1"), nil, false), codes.Unknown)
	site := filepath.Join(a.cfg.StateDir, "site.json")
	mustOK(t, os.Remove(site))
	mustOK(t, os.Mkdir(site, 0o755))
	mustOK(t, os.WriteFile(filepath.Join(site, "keep"), nil, 0o644))
	wantCode(t, fenceCalls["FenceClusterNetwork"](ctxT(t), a, []string{"10.0.0.0/24"}, nil), codes.Unknown)
	// The failed fence was not acknowledged, and a failed write is refused.
	if _, err := dataClient(t, a, nodeA).Write(ctxT(t), "v1", 0, []byte("x")); err == nil {
		t.Fatal("a write was acknowledged although it could not be persisted")
	}
}

// TestIdempotency calls every mutating RPC twice: the second call succeeds
// and changes nothing.
func TestIdempotency(t *testing.T) {
	a, b := startPair(t, pairOpts{})
	ctx := ctxT(t)
	src := group("vg-1")
	// twice checks the unit on the site that was called: the peer's copy
	// may meanwhile change through replication (a demoted copy adopts the
	// new primary's epoch), which is not the call's doing.
	twice := func(what string, s *siteUnderTest, f func() error) {
		t.Helper()
		mustOK(t, f())
		before := s.Snapshot().Unit("vg/vg-1")
		if err := f(); err != nil {
			t.Fatalf("%s, second call: %v", what, err)
		}
		after := s.Snapshot().Unit("vg/vg-1")
		if before.Role != after.Role || before.Epoch != after.Epoch || before.Enabled != after.Enabled ||
			len(before.RoleChanges) != len(after.RoleChanges) || before.Resyncing != after.Resyncing {
			t.Fatalf("%s: the second call changed state", what)
		}
	}
	call := func(name string, s *siteUnderTest, force bool) func() error {
		return func() error { return replCalls[name](ctx, s, "", src, nil, force) }
	}
	twice("enable", a, call("EnableVolumeReplication", a, false))
	waitSynced(t, a, "vg/vg-1")
	twice("demote", a, call("DemoteVolume", a, false))
	eventually(t, 3*time.Second, "final sync", func() bool {
		return b.Snapshot().Unit("vg/vg-1").Seq == a.Snapshot().Unit("vg/vg-1").Seq
	})
	twice("promote", b, call("PromoteVolume", b, false))
	// Resync: the first call starts it, repeated calls only report.
	mustOK(t, call("ResyncVolume", a, false)())
	eventually(t, 3*time.Second, "resync ready", func() bool {
		r, err := a.rc.ResyncVolume(ctx, &replication.ResyncVolumeRequest{ReplicationSource: src})
		mustOK(t, err)
		return r.Ready
	})
	twice("resync when ready", a, call("ResyncVolume", a, false))
	twice("disable", b, call("DisableVolumeReplication", b, false))
	for _, name := range []string{"FenceClusterNetwork", "UnfenceClusterNetwork"} {
		mustOK(t, fenceCalls[name](ctx, a, []string{"10.0.0.0/24"}, nil))
		n := len(a.Snapshot().FenceLog)
		mustOK(t, fenceCalls[name](ctx, a, []string{"10.0.0.0/24"}, nil))
		if m := len(a.Snapshot().FenceLog); m != n {
			t.Fatalf("%s twice logged %d changes, want %d", name, m, n)
		}
	}
}
