package workflows_test

import (
	"context"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestOwnCallStillRunningIsNoRival: west's storage makes each forced
// promotion take longer than a local attempt may hold the workflow task,
// and goes on with a call its caller gave up on, holding the volume
// (Detached, as ceph-csi's librbd calls do): the attempts after the cut
// find an operation pending (ABORTED). That operation is the failover's
// own call: the next attempts come after ownPendingPoll (500 ms), not
// after the plan's back-off (1 s, 2 s, 4 s...), one step per group and in
// batches alike. Every pause the failover took is read from its history
// (its timers), not from a clock; every group ends promoted.
func TestOwnCallStillRunningIsNoRival(t *testing.T) {
	srv := devserver.Start(t, nil)
	for _, c := range []struct {
		name    string
		extra   int
		latency time.Duration
	}{
		{"a step per group", 0, 2500 * time.Millisecond},
		{"batches", workflows.GroupsPerChild, 1500 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixtureN(t, c.extra)
			f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			startRecord(t, ctx, srv)
			// Every group's promotion in flight at once: one round.
			f.plan.Policy.Parallelism = len(f.plan.VolumeGroups) + 1
			mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "PromoteVolume", Latency: c.latency, Detached: true}}))
			f.east.Down()
			run, _ := failOverEast(t, ctx, srv, f)
			allRoles(t, f.west, sim.RolePrimary)

			// The pauses after a failed promotion: the timers started
			// next after a PromoteVolume activity failed, or after a
			// ReplicateBatch with failures (in its result).
			var pauses []time.Duration
			types := map[int64]string{}
			after := ""
			it := srv.Client.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for it.HasNext() {
				ev, err := it.Next()
				mustOK(t, err)
				switch {
				case ev.GetActivityTaskScheduledEventAttributes() != nil:
					types[ev.GetEventId()] = ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()
					after = ""
				case ev.GetActivityTaskFailedEventAttributes() != nil:
					after = types[ev.GetActivityTaskFailedEventAttributes().GetScheduledEventId()]
				case ev.GetActivityTaskCompletedEventAttributes() != nil:
					var r activities.BatchResult
					if typ := types[ev.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()]; typ == "ReplicateBatch" {
						mustOK(t, converter.GetDefaultDataConverter().FromPayloads(ev.GetActivityTaskCompletedEventAttributes().GetResult(), &r))
						if len(r.Failed) > 0 {
							after = typ
						}
					}
				case ev.GetTimerStartedEventAttributes() != nil:
					if after == "PromoteVolume" || after == "ReplicateBatch" {
						pauses = append(pauses, ev.GetTimerStartedEventAttributes().GetStartToFireTimeout().AsDuration())
					}
					after = ""
				}
			}
			if len(pauses) == 0 {
				t.Fatal("no pause between attempts: the promotions found no operation pending after their local attempts were cut")
			}
			for _, d := range pauses {
				if d != workflows.OwnPendingPoll {
					t.Fatalf("the failover paused %v between attempts (all its pauses: %v); want %v while the storage makes the call the local attempt gave up on",
						d, pauses, workflows.OwnPendingPoll)
				}
			}
		})
	}
}
