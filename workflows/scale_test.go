package workflows_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/worker"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// Temporal's default warn limits for one workflow's history.
const (
	historyCountWarn = 10240
	historySizeWarn  = 10 << 20
)

// TestFiveThousandGroups fails over a plan of 5,000 volume groups through
// the real dev server and a real worker. It must complete with every
// group primary on the surviving site, with no workflow's history near
// Temporal's warn limits (checked on the parent and every child) and no
// warning about history or payload size in the server's log.
func TestFiveThousandGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("5,000 groups: not in -short")
	}
	const n = 5000
	srv := devserver.Start(t, nil)
	east, west := simtest.StartPair(t, simtest.Options{Interval: 200 * time.Millisecond, Groups: sim.GenerateGroups(n, 1),
		TweakA: func(c *sim.Config) { c.Name = "east" }, TweakB: func(c *sim.Config) { c.Name = "west" }})
	p := &plans.Plan{
		APIVersion: plans.APIVersion, Kind: plans.Kind, Metadata: plans.Metadata{Name: "big"},
		Sites: []plans.Site{
			{Name: "east", Storage: plans.Storage{Endpoint: east.Endpoint()}, Fence: plans.Fence{CIDRs: []string{simtest.NodeA + "/32"}}},
			{Name: "west", Storage: plans.Storage{Endpoint: west.Endpoint()}, Fence: plans.Fence{CIDRs: []string{simtest.NodeB + "/32"}}},
		},
	}
	for i, g := range sim.GenerateGroups(n, 1) {
		p.VolumeGroups = append(p.VolumeGroups, plans.VolumeGroup{Name: g.ID, Priority: i % 3,
			Sites: map[string]plans.GroupRef{"east": {GroupID: g.ID}, "west": {GroupID: g.ID}}})
	}
	p.ApplyDefaults()
	storage := activities.NewStorage()
	defer storage.Close()

	// Replication on for every group, from east.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan string)
	for range 16 {
		wg.Go(func() {
			for g := range work {
				ins, err := activities.ReplicationInputs(p, "east", g, activities.RPCEnableVolumeReplication, false)
				if err == nil {
					err = storage.EnableVolumeReplication(ctx, ins[0])
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	for _, g := range p.VolumeGroups {
		work <- g.Name
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	simtest.Eventually(t, time.Minute, "west's copies enabled by replication", func() bool {
		for _, u := range west.Snapshot().Units {
			if !u.Enabled {
				return false
			}
		}
		return true
	})

	w := worker.New(srv.Client, workflows.TaskQueue, worker.Options{})
	workflows.Register(w)
	w.RegisterActivity(&workflows.RecordSender{Client: srv.Client})
	w.RegisterActivity(&activities.PlanTrust{AllowUnsigned: true})
	w.RegisterActivity(storage)
	w.RegisterActivity(activities.NewWorkloads())
	mustOK(t, w.Start())
	defer w.Stop()

	east.Down()
	input, _ := json.Marshal(p)
	start := time.Now()
	run, err := workflows.Start(ctx, srv.Client, "big", workflows.Failover, workflows.FailoverInput{Plan: p, From: "east", To: "west"})
	mustOK(t, err)
	// A paused step would wait for an operator: end the test with it.
	var paused atomic.Value
	go func() {
		for ctx.Err() == nil {
			time.Sleep(time.Second)
			v, err := srv.Client.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), workflows.QueryProgress)
			var pr workflows.Progress
			if err != nil || v.Get(&pr) != nil {
				continue
			}
			for _, s := range pr.Steps {
				if s.State == workflows.StatePaused {
					paused.Store(s.Name + ": " + s.LastError)
					cancel()
				}
			}
		}
	}()
	var fo workflows.FailoverResult
	if err := run.Get(ctx, &fo); err != nil {
		t.Fatalf("%v; paused: %v", err, paused.Load())
	}
	allDone(t, fo.Progress)
	t.Logf("failover of %d groups (plan %d KiB as JSON): %v, RTO %v, %d steps", n, len(input)>>10, time.Since(start).Round(time.Millisecond), fo.RTO.Round(time.Millisecond), len(fo.Steps))
	allRoles(t, west, sim.RolePrimary)

	// The parent and each child stay far below the warn limits.
	ids := []string{run.GetID()}
	it := srv.Client.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		mustOK(t, err)
		if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil {
			// The plan travels compressed (internal/codec).
			in := a.GetInput().GetPayloads()[0]
			if enc := string(in.GetMetadata()["encoding"]); enc != "binary/zlib" || len(in.GetData())*5 > len(input) {
				t.Fatalf("the failover's input is %q, %d bytes for a %d-byte plan; want binary/zlib, a fifth or less", enc, len(in.GetData()), len(input))
			}
			t.Logf("the failover's input: %d KiB of plan travel as %d KiB", len(input)>>10, len(in.GetData())>>10)
		}
		if a := ev.GetChildWorkflowExecutionStartedEventAttributes(); a != nil && a.WorkflowExecution.WorkflowId != workflows.RecordID("big") {
			ids = append(ids, a.WorkflowExecution.WorkflowId)
		}
	}
	var maxCount, maxSize, events int64
	for _, id := range ids {
		d, err := srv.Client.DescribeWorkflowExecution(ctx, id, "")
		mustOK(t, err)
		info := d.GetWorkflowExecutionInfo()
		maxCount, maxSize = max(maxCount, info.GetHistoryLength()), max(maxSize, info.GetHistorySizeBytes())
		events += info.GetHistoryLength()
		if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			t.Fatalf("%s is %v", id, info.GetStatus())
		}
	}
	t.Logf("%d workflows; the largest history has %d events and %d KiB (warn limits: %d events, %d MiB); %d events in all, %.3f per group",
		len(ids), maxCount, maxSize>>10, historyCountWarn, historySizeWarn>>20, events, float64(events)/n)
	if maxCount > historyCountWarn/5 || maxSize > historySizeWarn/5 {
		t.Fatalf("a history reached %d events, %d bytes: more than a fifth of the warn limits", maxCount, maxSize)
	}
	// The promotions run as one batch activity per priority: no child
	// workflow, and far fewer than 2 history events per group.
	if len(ids) != 1 || events > 2*n {
		t.Fatalf("%d children and %d history events for %d groups; want none and at most 2 per group", len(ids)-1, events, n)
	}
	if w := srv.Warnings("exceeds warn limit", "exceeds the warning limit"); len(w) > 0 {
		t.Fatalf("the server warned:\n%v", w)
	}
	mustOK(t, east.Up())
	if r := sim.Check(east.Snapshot(), west.Snapshot()); !r.OK() {
		t.Fatalf("invariants: %s", r)
	}
}
