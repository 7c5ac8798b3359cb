package activities_test

import (
	"testing"
	"time"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
)

// switched returns a pair after a planned switch of group db from a to
// b: a is demoted and needs a resync, b is primary with no sync yet.
func switched(t *testing.T) (a, b *simtest.Site, p *plans.Plan, st *activities.Storage) {
	t.Helper()
	a, b = simtest.StartPair(t, simtest.Options{Interval: 20 * time.Millisecond})
	p = pairPlan(a, b)
	st = newStorage(t)
	env := activityEnv(t, st)
	for _, site := range []string{"a", "b"} {
		_, err := env.ExecuteActivity(st.EnableVolumeReplication, groupInput(t, p, site, "db", activities.RPCEnableVolumeReplication, false))
		mustOK(t, err)
	}
	_, err := env.ExecuteActivity(st.WaitForSync, activities.WaitSyncInput{
		Call: groupInput(t, p, "a", "db", activities.RPCGetVolumeReplicationInfo, false), Interval: 10 * time.Millisecond})
	mustOK(t, err)
	_, err = env.ExecuteActivity(st.DemoteVolume, groupInput(t, p, "a", "db", activities.RPCDemoteVolume, false))
	mustOK(t, err)
	eventually(t, 5*time.Second, "promotion of b", func() bool {
		_, err := env.ExecuteActivity(st.PromoteVolume, groupInput(t, p, "b", "db", activities.RPCPromoteVolume, false))
		return err == nil
	})
	return a, b, p, st
}

// TestResyncResumesFromHeartbeat: an attempt that starts with heartbeat
// details (left by an attempt on a worker that crashed) continues the
// count and keeps the original start instead of starting over.
func TestResyncResumesFromHeartbeat(t *testing.T) {
	_, _, p, st := switched(t)
	env := activityEnv(t, st)
	since := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	env.SetHeartbeatDetails(activities.PollProgress{Since: since, Polls: 7, Attempts: 1})
	v, err := env.ExecuteActivity(st.ResyncUntilReady, activities.ResyncInput{
		Call: groupInput(t, p, "a", "db", activities.RPCResyncVolume, false), Interval: 10 * time.Millisecond})
	mustOK(t, err)
	var out activities.ResyncOutcome
	mustOK(t, v.Get(&out))
	if !out.Ready || !out.Since.Equal(since) || out.Polls < 8 || out.Attempts != 2 {
		t.Fatalf("resumed resync = %+v, want ready, since %v, polls > 7, attempt 2", out, since)
	}
}

// TestPollRetriesKeepProgress: a retryable error ends the polling attempt,
// Temporal retries it with the plan's back-off, and the next attempt picks
// up the heartbeat: the outcome counts every attempt and every poll.
func TestPollRetriesKeepProgress(t *testing.T) {
	a, _, p, st := switched(t)
	setFaults(t, a, sim.FaultRule{Method: activities.RPCResyncVolume, Code: "ABORTED", Count: 2})
	var out activities.ResyncOutcome
	in := activities.ResyncInput{Call: groupInput(t, p, "a", "db", activities.RPCResyncVolume, false), Interval: 10 * time.Millisecond}
	attempts, err := runCall(t, st, activities.PollOptions(p, "a", activities.RPCResyncVolume, time.Minute), "ResyncUntilReady", in, &out)
	mustOK(t, err)
	if len(attempts) != 3 || out.Attempts != 3 || out.Polls < 3 || !out.Ready {
		t.Fatalf("%d attempts, outcome %+v; want 3 attempts counted, at least 3 polls, ready", len(attempts), out)
	}
	if got := a.FaultCounts()[activities.RPCResyncVolume+":Aborted"]; got != 2 {
		t.Fatalf("simulator answered ABORTED %d times, want 2", got)
	}
}

// TestWaitForSync: NOT_FOUND before the first sync of a new primary is part
// of waiting; asking a copy that is not primary goes back to the workflow.
func TestWaitForSync(t *testing.T) {
	_, _, p, st := switched(t)
	env := activityEnv(t, st)
	after := time.Now()
	v, err := env.ExecuteActivity(st.WaitForSync, activities.WaitSyncInput{
		Call: groupInput(t, p, "b", "db", activities.RPCGetVolumeReplicationInfo, false), After: after, Interval: 10 * time.Millisecond})
	mustOK(t, err)
	var out activities.WaitSyncOutcome
	mustOK(t, v.Get(&out))
	if !out.Info.LastSyncTime.After(after) || out.Info.Status != "HEALTHY" {
		t.Fatalf("WaitForSync on the new primary = %+v", out)
	}

	_, err = env.ExecuteActivity(st.WaitForSync, activities.WaitSyncInput{
		Call: groupInput(t, p, "a", "db", activities.RPCGetVolumeReplicationInfo, false), After: after, Interval: 10 * time.Millisecond})
	if final, _ := wantType(t, err, activities.ErrFailedPrecondition); !final {
		t.Fatal("FailedPrecondition from a secondary must be final for the activity")
	}
}

// TestPollOptions: polling activities heartbeat and may run as long as
// their limit; single calls are bounded by the RPC's deadline.
func TestPollOptions(t *testing.T) {
	p := &plans.Plan{Sites: []plans.Site{{Name: "east", TaskQueue: "drover-east"}}}
	p.ApplyDefaults()
	call := activities.CallOptions(p, "east", activities.RPCPromoteVolume)
	if call.StartToCloseTimeout != 3*time.Minute+activities.CallGrace || call.ScheduleToCloseTimeout != plans.DefaultTimeLimit ||
		call.TaskQueue != "drover-east" || call.HeartbeatTimeout != 0 {
		t.Fatalf("CallOptions = %+v", call)
	}
	rp := call.RetryPolicy
	if rp.InitialInterval != time.Second || rp.BackoffCoefficient != 2 || rp.MaximumInterval != time.Minute || len(rp.NonRetryableErrorTypes) == 0 {
		t.Fatalf("retry policy = %+v", rp)
	}
	poll := activities.PollOptions(p, "east", activities.RPCResyncVolume, 30*time.Minute)
	if poll.StartToCloseTimeout != 30*time.Minute || poll.HeartbeatTimeout != activities.DefaultHeartbeatTimeout {
		t.Fatalf("PollOptions = %+v", poll)
	}
}
