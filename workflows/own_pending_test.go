package workflows_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestOwnCallStillRunningIsNoRival: west's storage makes each forced
// promotion take longer than a local attempt may hold the workflow task,
// and goes on with a call its caller gave up on, holding the volume
// (Detached, as ceph-csi's librbd calls do). On one worker the next
// attempt takes the outcome of the call its local attempt left running:
// the storage serves one PromoteVolume per group and answers none
// ABORTED. When each attempt makes its own call (as on another worker),
// the attempts after the cut find an operation pending (ABORTED), the
// failover's own call: the next attempts come after ownPendingPoll (500
// ms), not after the plan's back-off (1 s, 2 s, 4 s...). One step per
// group and in batches alike; every pause is read from the failover's
// history (its timers), not from a clock; every group ends promoted.
func TestOwnCallStillRunningIsNoRival(t *testing.T) {
	for _, c := range []struct {
		name     string
		extra    int
		latency  time.Duration
		separate bool
	}{
		{"a step per group", 0, 2500 * time.Millisecond, false},
		{"a step per group, separate attempts", 0, 2500 * time.Millisecond, true},
		{"batches", workflows.GroupsPerChild, 1500 * time.Millisecond, false},
		{"batches, separate attempts", workflows.GroupsPerChild, 1500 * time.Millisecond, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A server of its own: no record or action of another case
			// on it.
			srv := devserver.Start(t, nil)
			f := newFixtureN(t, c.extra)
			f.storage.SeparateAttempts = c.separate
			f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			startRecord(t, ctx, srv)
			// No workloads: no stop of the lost site's retrying beside
			// the promotions, whose pauses the history then shows alone.
			f.plan.Workloads = nil
			// Every group's promotion in flight at once: one round.
			f.plan.Policy.Parallelism = len(f.plan.VolumeGroups) + 1
			var mu sync.Mutex
			served, aborted := 0, 0
			f.setOnRPC(func(site, method string, req any, handle func() (any, error)) (any, error) {
				resp, err := handle()
				if site == "west" && method == "PromoteVolume" {
					mu.Lock()
					served++
					if status.Code(err) == codes.Aborted {
						aborted++
					}
					mu.Unlock()
				}
				return resp, err
			})
			mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "PromoteVolume", Latency: c.latency, Detached: true}}))
			f.east.Down()
			run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
			mustOK(t, err)
			var res workflows.FailoverResult
			if err := run.Get(ctx, &res); err != nil {
				// Say where it stood: each step, its tries and note.
				var lines []string
				qctx, qcancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer qcancel()
				if v, qerr := srv.Client.QueryWorkflow(qctx, run.GetID(), run.GetRunID(), workflows.QueryProgress); qerr == nil {
					var p workflows.Progress
					if v.Get(&p) == nil {
						for _, st := range p.Steps {
							lines = append(lines, fmt.Sprintf("%s: %s, %d tries, %d retries, note %q, last error %q", st.Name, st.State, st.Attempts, st.Retries, st.Note, st.LastError))
						}
					}
				}
				t.Fatalf("the failover did not end: %v; its steps:\n%s", err, strings.Join(lines, "\n"))
			}
			allDone(t, res.Progress)
			allRoles(t, f.west, sim.RolePrimary)
			f.setOnRPC(nil)

			if !c.separate {
				mu.Lock()
				defer mu.Unlock()
				if served != len(f.plan.VolumeGroups) || aborted != 0 {
					t.Fatalf("west served %d PromoteVolume calls, %d of them ABORTED, for %d groups: want one call a group, the next attempt taking the outcome of the call its local attempt left running",
						served, aborted, len(f.plan.VolumeGroups))
				}
				return
			}
			// Each attempt that found the call still running (a failed
			// PromoteVolume, or a ReplicateBatch with failures in its
			// result, all of them ABORTED) is followed by a pause of
			// ownPendingPoll, a length no other timer of the failover
			// has; without the rule they were the back-off's 1 s, 2 s.
			types := map[int64]string{}
			found, polls := 0, 0
			var timers []time.Duration
			var locals []string // the local attempts that failed, for the failure's message
			it := srv.Client.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for it.HasNext() {
				ev, err := it.Next()
				mustOK(t, err)
				switch {
				case ev.GetActivityTaskScheduledEventAttributes() != nil:
					types[ev.GetEventId()] = ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()
				case ev.GetActivityTaskFailedEventAttributes() != nil:
					a := ev.GetActivityTaskFailedEventAttributes()
					if types[a.GetScheduledEventId()] == "PromoteVolume" {
						if !strings.Contains(a.GetFailure().GetMessage(), "Aborted") {
							t.Fatalf("a promotion failed otherwise than ABORTED: %s", a.GetFailure().GetMessage())
						}
						found++
					}
				case ev.GetActivityTaskCompletedEventAttributes() != nil:
					a := ev.GetActivityTaskCompletedEventAttributes()
					if types[a.GetScheduledEventId()] == "ReplicateBatch" {
						var r activities.BatchResult
						mustOK(t, converter.GetDefaultDataConverter().FromPayloads(a.GetResult(), &r))
						if len(r.Failed) > 0 {
							found++
						}
					}
				case ev.GetMarkerRecordedEventAttributes().GetFailure() != nil:
					locals = append(locals, ev.GetMarkerRecordedEventAttributes().GetFailure().String())
				case ev.GetTimerStartedEventAttributes() != nil:
					d := ev.GetTimerStartedEventAttributes().GetStartToFireTimeout().AsDuration()
					timers = append(timers, d)
					if d == workflows.OwnPendingPoll {
						polls++
					}
				}
			}
			if found == 0 {
				t.Fatal("no attempt found the call still running: the promotions' local attempts were not cut, or the storage ended the calls they gave up on")
			}
			if polls != found {
				t.Fatalf("%d attempts found the call their local attempt gave up on still running, and %d pauses of %v followed (the failover's timers: %v); want one such pause after each\nthe local attempts that failed: %v",
					found, polls, workflows.OwnPendingPoll, timers, locals)
			}
		})
	}
}
