package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestFrozenSiteWorkerMidFailover: the worker binaries as deployed, a
// central one and west's own (`--site west`). West's worker freezes
// (SIGSTOP: it neither polls nor answers, as behind a cut link) while a
// failover waits at its approval before the promotions. The step
// running them says that it waits for site west's worker, naming the
// queue and the frozen worker's identity as Temporal lists its poll:
// the central worker asks Temporal through the activity it registers.
// When the worker thaws (the link heals) the failover completes by
// itself, every step run once, west primary.
func TestFrozenSiteWorkerMidFailover(t *testing.T) {
	bin := filepath.Join(bintest.Build(t, "worker"), "worker")
	srv := devserver.Start(t, nil)
	east, west := simtest.StartPair(t, simtest.Options{Groups: []sim.GroupSpec{{ID: "vg-1", Volumes: []string{"v1", "v2"}}},
		TweakA: func(c *sim.Config) { c.Name = "east" }, TweakB: func(c *sim.Config) { c.Name = "west" }})
	p := &plans.Plan{APIVersion: plans.APIVersion, Kind: plans.Kind, Metadata: plans.Metadata{Name: "cut"},
		Sites: []plans.Site{
			{Name: "east", Storage: plans.Storage{Endpoint: east.Endpoint()}, Fence: plans.Fence{CIDRs: []string{simtest.NodeA + "/32"}}},
			{Name: "west", Storage: plans.Storage{Endpoint: west.Endpoint()}, Fence: plans.Fence{CIDRs: []string{simtest.NodeB + "/32"}},
				TaskQueue: "drover-site-west"},
		},
		VolumeGroups: []plans.VolumeGroup{{Name: "db", Sites: map[string]plans.GroupRef{"east": {GroupID: "vg-1"}, "west": {GroupID: "vg-1"}}}},
	}
	p.Policy.Approvals = []string{"beforePromote"}
	// A promotion the frozen worker took ends at this deadline (plus
	// activities.CallGrace) and is tried again.
	p.Policy.Deadlines = map[string]plans.Duration{activities.RPCPromoteVolume: plans.Duration(time.Second)}
	p.ApplyDefaults()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st := activities.NewStorage()
	defer st.Close()
	for _, site := range []string{"east", "west"} {
		ins, err := activities.ReplicationInputs(p, site, "db", activities.RPCEnableVolumeReplication, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range ins {
			if err := st.EnableVolumeReplication(ctx, in); err != nil {
				t.Fatal(err)
			}
		}
	}

	env := []string{"TEMPORAL_ADDRESS=" + srv.Address()}
	bintest.Start(t, env, bin, "--metrics", "", "--allow-unsigned-plans")
	site := bintest.Start(t, env, bin, "--metrics", "", "--site", "west")
	identity := fmt.Sprintf("%d@", site.Cmd.Process.Pid)
	east.Down()

	run, err := workflows.Start(ctx, srv.Client, "cut", workflows.Failover, workflows.FailoverInput{Plan: p, From: "east", To: "west"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Client.TerminateWorkflow(context.Background(), run.GetID(), "", "test over")
	progress := func() *workflows.Progress {
		v, err := srv.Client.QueryWorkflow(ctx, run.GetID(), "", workflows.QueryProgress)
		var pr workflows.Progress
		if err != nil || v.Get(&pr) != nil {
			return nil
		}
		return &pr
	}
	simtest.Eventually(t, time.Minute, "the failover to wait for its approval", func() bool {
		pr := progress()
		if pr == nil {
			return false
		}
		for _, s := range pr.Steps {
			if s.Name == "approve beforePromote" && s.State == workflows.StateWaiting {
				return true
			}
		}
		return false
	})
	if err := site.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	h, err := srv.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(),
		UpdateName: workflows.UpdateApprove, Args: []any{workflows.Approval{Gate: "beforePromote", By: "test"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Get(ctx, nil); err != nil {
		t.Fatal(err)
	}

	var note string
	simtest.Eventually(t, 2*time.Minute, "a step to say it waits for west's worker", func() bool {
		pr := progress()
		if pr == nil {
			return false
		}
		for _, s := range pr.Steps {
			if s.State == workflows.StatePaused {
				t.Fatalf("step %q paused while west's worker was frozen: %s", s.Name, s.LastError)
			}
			if s.WaitsForWorker {
				note = s.Note
				return true
			}
		}
		return false
	})
	t.Logf("the step's note: %s", note)
	for _, part := range []string{"site west's worker", "drover-site-west", identity, "goes on by itself"} {
		if !strings.Contains(note, part) {
			t.Errorf("the waiting step's note lacks %q: %s", part, note)
		}
	}

	if err := site.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var res workflows.FailoverResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Steps {
		if s.State != workflows.StateDone || s.Attempts != 1 || s.Decided != "" {
			t.Errorf("step %q: %s, run %d time(s), decided %q; want done once with no decision", s.Name, s.State, s.Attempts, s.Decided)
		}
	}
	for _, u := range west.Snapshot().Units {
		if u.Role != sim.RolePrimary {
			t.Errorf("%s %s on west is %s after the failover", u.Kind, u.ID, u.Role)
		}
	}
}
