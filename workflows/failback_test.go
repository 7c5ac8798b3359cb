package workflows_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	"github.com/drover-dr/drover/csiaddons/replication"

	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// run executes one action to completion in a fresh environment and
// returns the calls it made.
func (f *fixture) run(t *testing.T, wf, in any, out any) ([]call, error) {
	t.Helper()
	env, calls := f.env(t)
	env.ExecuteWorkflow(wf, in)
	if !env.IsWorkflowCompleted() {
		t.Fatal("the action did not complete")
	}
	err := env.GetWorkflowError()
	if err == nil && out != nil {
		mustOK(t, env.GetWorkflowResult(out))
	}
	return *calls, err
}

func inOrder(t *testing.T, calls []call, steps ...[3]string) {
	t.Helper()
	prev := -1
	for _, s := range steps {
		i := indexOf(calls, s[0], s[1], s[2])
		if i < 0 || i < prev {
			t.Fatalf("%v is missing or out of order in:\n%v", s, calls)
		}
		prev = i
	}
}

func roles(t *testing.T, s *simtest.Site, want sim.Role) {
	t.Helper()
	state := s.Snapshot()
	for _, key := range []string{"vg/vg-1", "vg/vg-2", "vol/solo"} {
		if u := state.Unit(key); u == nil || u.Role != want {
			t.Fatalf("%s on %s: %+v, want %s", key, s.Name(), u, want)
		}
	}
}

func allDone(t *testing.T, p workflows.Progress) {
	t.Helper()
	for _, s := range p.Steps {
		if s.State != workflows.StateDone {
			t.Fatalf("%s: step %q is %s (%s)", p.Action, s.Name, s.State, s.LastError)
		}
	}
}

// TestFailoverReprotectFailback runs the whole cycle on one simulated
// pair: east is lost and west takes over; east returns and is made west's
// replica; the plan moves back to east without losing the writes made on
// west meanwhile. The storage invariants hold at the end.
func TestFailoverReprotectFailback(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()

	f.east.Down()
	_, err := f.run(t, workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"}, nil)
	mustOK(t, err)
	roles(t, f.west, sim.RolePrimary)

	// West's clients write while east is away.
	west, err := sim.NewClient(f.west.DataAddr(), simtest.NodeB, "west-node")
	mustOK(t, err)
	defer west.Close()
	_, err = west.Write(ctx, "v1", 5, []byte("written on west"))
	mustOK(t, err)

	mustOK(t, f.east.Up())
	var rp workflows.ReprotectResult
	calls, err := f.run(t, workflows.Reprotect, workflows.ReprotectInput{Plan: f.plan, From: "east", To: "west"}, &rp)
	mustOK(t, err)
	allDone(t, rp.Progress)
	inOrder(t, calls,
		[3]string{"StopWorkload", "east", ""},
		[3]string{"DemoteVolume", "east", "vg-1"},
		[3]string{"ResyncUntilReady", "east", ""},
		[3]string{"WaitForSync", "west", ""},
		[3]string{"UnfenceClusterNetwork", "west", ""},
		[3]string{"Protect", "west", ""})
	if i := indexOf(calls, "DemoteVolume", "east", "vg-1"); !calls[i].force {
		t.Fatal("reprotect must demote the stale primaries with force")
	}
	roles(t, f.east, sim.RoleSecondary)
	if fenced := f.west.FencedCIDRs(); len(fenced) != 0 {
		t.Fatalf("east's clients are still fenced: %v", fenced)
	}

	var fb workflows.FailbackResult
	calls, err = f.run(t, workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "west", To: "east"}, &fb)
	mustOK(t, err)
	allDone(t, fb.Progress)
	inOrder(t, calls,
		[3]string{"Probe", "west", ""},
		[3]string{"Probe", "east", ""},
		[3]string{"GetVolumeReplicationInfo", "west", "vg-1"},
		[3]string{"StopWorkload", "west", ""},
		[3]string{"DemoteVolume", "west", "vg-1"},
		[3]string{"PromoteVolume", "east", "vg-1"},
		[3]string{"StartWorkload", "east", ""},
		[3]string{"ResyncUntilReady", "west", ""},
		[3]string{"Protect", "east", ""})
	for _, c := range calls {
		if (c.name == "PromoteVolume" || c.name == "DemoteVolume") && c.force {
			t.Fatalf("a planned failback forced a role change: %v", c)
		}
	}

	// No data loss: east serves the write made on west.
	f.homeAgain(t, "v1", 5, "written on west")
}

// homeAgain checks, after a failback to east, that east serves the block
// written on west during the outage and that no invariant broke.
func (f *fixture) homeAgain(t *testing.T, volume string, block int64, want string) {
	t.Helper()
	roles(t, f.east, sim.RolePrimary)
	roles(t, f.west, sim.RoleSecondary)
	east, err := sim.NewClient(f.east.DataAddr(), simtest.NodeA, "east-node")
	mustOK(t, err)
	defer east.Close()
	got, err := east.Read(context.Background(), volume, block)
	mustOK(t, err)
	if string(got) != want {
		t.Fatalf("east reads %q after the failback, want %q", got, want)
	}
	if r := sim.Check(f.east.Snapshot(), f.west.Snapshot()); !r.OK() {
		t.Fatalf("invariants: %s", r)
	}
}

// TestFailbackRollsBack: when the target cannot be promoted, the failback
// demotes what it promoted there, promotes the source again, restarts the
// source's workloads, and says so.
func TestFailbackRollsBack(t *testing.T) {
	f := newFixture(t)
	// East is primary and west its replica: fail back "from east to west"
	// with west's promotion of the loose volume refused for good.
	mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "PromoteVolume", Code: "INVALID_ARGUMENT", Count: 100, Message: "pool is read-only"}}))
	env, calls := f.env(t)
	env.ExecuteWorkflow(workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "east", To: "west"})
	var ae *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &ae) || ae.Type() != workflows.ErrRolledBack || !strings.Contains(ae.Error(), "pool is read-only") {
		t.Fatalf("error %v, want a rollback naming the cause", err)
	}
	inOrder(t, *calls,
		[3]string{"DemoteVolume", "east", "vg-1"},
		[3]string{"PromoteVolume", "west", ""},
		[3]string{"PromoteVolume", "east", "vg-1"},
		[3]string{"StartWorkload", "east", "pg"})
	roles(t, f.east, sim.RolePrimary)
	roles(t, f.west, sim.RoleSecondary)
	hooks, err := os.ReadFile(f.hooks)
	mustOK(t, err)
	if !strings.HasSuffix(string(hooks), "pg start east\nweb start east\n") {
		t.Fatalf("east's workloads were not restarted:\n%s", hooks)
	}
	if r := sim.Check(f.east.Snapshot(), f.west.Snapshot()); !r.OK() {
		t.Fatalf("invariants: %s", r)
	}
}

// TestFailbackWaitsOutADegradedReplica: the failback's check of the
// replication it moves asks again, within the step's time limit, while
// the storage reports it DEGRADED (as right after the peer came back from
// an outage, seen in the chaos run): the failback goes on once it is
// healthy, and the step says what the storage answered meanwhile, where
// it used to stop at the first answer.
func TestFailbackWaitsOutADegradedReplica(t *testing.T) {
	f := newFixture(t)
	f.plan.Policy.OnFailure = "abort" // a check that gives up ends the test at once
	var mu sync.Mutex
	degraded, armed := 0, false
	f.setOnRPC(func(site, method string, req any, handle func() (any, error)) (any, error) {
		resp, err := handle()
		mu.Lock()
		defer mu.Unlock()
		if site == "west" && method == "Probe" {
			armed = true // the preflights come after the role check, before the replication's
		}
		if !armed || site != "east" || method != "GetVolumeReplicationInfo" || err != nil {
			return resp, err
		}
		if degraded < 3 {
			degraded++
			r := proto.Clone(resp.(*replication.GetVolumeReplicationInfoResponse)).(*replication.GetVolumeReplicationInfoResponse)
			r.Status, r.StatusMessage = replication.GetVolumeReplicationInfoResponse_DEGRADED, "peer site unreachable: connection refused"
			return r, nil
		}
		return resp, err
	})
	var fb workflows.FailbackResult
	_, err := f.run(t, workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "east", To: "west"}, &fb)
	mustOK(t, err)
	allDone(t, fb.Progress)
	waited := ""
	for _, s := range fb.Steps {
		if strings.HasPrefix(s.Name, "check replication of") && strings.Contains(s.Output, "in which the storage answered") {
			waited = s.Name + ": " + s.Output
		}
	}
	if !strings.Contains(waited, "DEGRADED: peer site unreachable") {
		var names []string
		for _, s := range fb.Steps {
			names = append(names, s.Name+": "+s.Output)
		}
		t.Fatalf("no check of the replication says it waited out the storage's DEGRADED answers (%d rewritten):\n%s", degraded, strings.Join(names, "\n"))
	}
	t.Log(waited)
	roles(t, f.west, sim.RolePrimary)
}
