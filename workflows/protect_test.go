package workflows_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestProtectRecordsAndContinues: Protect enables replication on the
// primary, records every group's last sync and each site's clients, and
// after a run's worth of polls continues as new, carrying its state.
func TestProtectRecordsAndContinues(t *testing.T) {
	f := newFixture(t)
	env, calls := f.testEnv(t)
	got := stateAt(t, env, 30*time.Second, nil)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Origin: workflows.Origin{By: "ops"}, Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	seen := *got

	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("error %v, want continue-as-new after a run's worth of polls", err)
	}
	if seen == nil || !seen.Enabled || len(seen.Groups) != 3 || seen.OutOfRPO {
		t.Fatalf("state at 30s: %+v", seen)
	}
	// Who started it, and why the worker acts on its plan.
	if seen.By != "ops" || !strings.Contains(seen.Trust, "unsigned") {
		t.Fatalf("state at 30s: by %q, trust %q", seen.By, seen.Trust)
	}
	for g, h := range seen.Groups {
		if h.LastSync.IsZero() || h.Status != "HEALTHY" || h.Error != "" {
			t.Fatalf("group %s: %+v", g, h)
		}
	}
	if !slices.Contains(seen.Clients["east"], "127.0.0.2/32") {
		t.Fatalf("clients %v: east's writer is missing", seen.Clients)
	}
	if seen.LastSync().IsZero() {
		t.Fatal("no last sync over the groups")
	}
	// One survey call per poll (three groups fit one), a hundred polls a run.
	if surveys := count(*calls, "SurveyReplication"); surveys != 100 {
		t.Fatalf("%d survey calls in a run of 100 polls", surveys)
	}
	first := indexOf(*calls, "SurveyReplication", "east", "")
	for _, src := range []string{"vg-1", "vg-2", "solo"} {
		if i := indexOf(*calls, "EnableVolumeReplication", "east", src); i < 0 || i > first {
			t.Fatalf("replication of %s was not enabled on east before polling:\n%v", src, *calls)
		}
	}
	if indexOf(*calls, "EnableVolumeReplication", "west", "") >= 0 {
		t.Fatal("protect enabled replication on the secondary")
	}
}

// TestProtectStops: past its RPO target the plan is marked out of RPO;
// the stop update ends Protect and, when asked, disables replication.
func TestProtectStops(t *testing.T) {
	f := newFixture(t)
	f.plan.Policy.RPOTarget = plans.Duration(1) // no replication can meet it
	env, _ := f.testEnv(t)
	env.RegisterDelayedCallback(func() {
		send(t, env, workflows.UpdateStopProtect, workflows.StopProtect{Disable: true}, nil, nil)
	}, 25*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	mustOK(t, env.GetWorkflowError())
	var s workflows.ProtectState
	mustOK(t, env.GetWorkflowResult(&s))
	if s.Enabled || !s.OutOfRPO || s.Polls < 2 {
		t.Fatalf("final state %+v", s)
	}
	state := f.east.Snapshot()
	for _, key := range []string{"vg/vg-1", "vg/vg-2", "vol/solo"} {
		if u := state.Unit(key); u == nil || u.Enabled {
			t.Fatalf("%s on east still replicates: %+v", key, u)
		}
	}
}

// TestProtectStopAnswersOnceDisabled: the stop update with disable is
// answered only after replication is off on every group; when some
// group cannot be disabled, the answer is an error naming it: up to 20
// groups by name and how many more, with the errors of up to five.
func TestProtectStopAnswersOnceDisabled(t *testing.T) {
	refuse := func(n int) []sim.FaultRule {
		return []sim.FaultRule{{Method: "DisableVolumeReplication", Code: "INVALID_ARGUMENT", Count: n, Message: "injected"}}
	}
	for _, tc := range []struct {
		name  string
		extra int // groups beyond the fixture's three
		fault []sim.FaultRule
		want  string
	}{
		{"every group", 0, nil, ""},
		{"a group refuses", 0, refuse(100), "could not be disabled on 3 of 3 groups on east: "},
		{"25 of 31 refuse", 28, refuse(25), "could not be disabled on 25 of 31 groups on east: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixtureN(t, tc.extra)
			env, _ := f.testEnv(t)
			var answer string
			var answerErr error
			var enabledAtAnswer []string
			answered := false
			env.RegisterDelayedCallback(func() {
				mustOK(t, f.east.SetFaults(tc.fault))
				env.UpdateWorkflow(workflows.UpdateStopProtect, "", &testsuite.TestUpdateCallback{
					OnAccept: func() {}, OnReject: func(err error) { t.Errorf("stop rejected: %v", err) },
					OnComplete: func(v any, err error) {
						answered, answerErr = true, err
						answer, _ = v.(string)
						state := f.east.Snapshot()
						for _, key := range []string{"vg/vg-1", "vg/vg-2", "vol/solo"} {
							if u := state.Unit(key); u == nil || u.Enabled {
								enabledAtAnswer = append(enabledAtAnswer, key)
							}
						}
					}}, workflows.StopProtect{Disable: true})
			}, 15*time.Second)
			env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
			mustOK(t, env.GetWorkflowError())
			if !answered {
				t.Fatal("the stop was never answered")
			}
			if tc.fault == nil {
				if answerErr != nil || len(enabledAtAnswer) > 0 || !strings.Contains(answer, "replication disabled on every group (3) on east") {
					t.Fatalf("answer %q, %v; still replicating when answered: %v", answer, answerErr, enabledAtAnswer)
				}
				return
			}
			if answerErr == nil || !strings.Contains(answerErr.Error(), tc.want) {
				t.Fatalf("answer %q, %v; want an error saying %q", answer, answerErr, tc.want)
			}
			msg := answerErr.Error()
			rest := msg[strings.Index(msg, tc.want)+len(tc.want):]
			named := strings.Split(rest[:strings.Index(rest, " (")], ", ")
			wantNamed, wantLines := 3, 3
			if tc.extra == 0 && !slices.Equal(named, []string{"db", "logs", "loose"}) {
				t.Fatalf("the groups named are %q: %s", named, msg)
			}
			if tc.extra > 0 {
				wantNamed, wantLines = 21, 5
				if named[20] != "and 5 more" {
					t.Fatalf("the groups named end %q, want \"and 5 more\": %s", named[20], msg)
				}
			}
			if len(named) != wantNamed || strings.Count(msg, ": injected") != wantLines {
				t.Fatalf("%d groups named and %d errors, want %d and %d: %s", len(named), strings.Count(msg, ": injected"), wantNamed, wantLines, msg)
			}
		})
	}
}

// TestProtectRetargets: a retarget signal naming the plan's other site
// makes Protect continue as new from that primary at once; one naming its
// own primary, or a site the plan does not have, is ignored, and Protect
// goes on polling at its default interval (none was given) until a run's
// worth of polls continues it from the same primary.
func TestProtectRetargets(t *testing.T) {
	for _, c := range []struct{ to, want string }{{"west", "west"}, {"east", "east"}, {"nowhere", "east"}} {
		t.Run(c.to, func(t *testing.T) {
			f := newFixture(t)
			env, _ := f.testEnv(t)
			got := stateAt(t, env, 2*time.Minute+time.Second, func() {
				env.SignalWorkflow(workflows.SignalRetarget, sealedRetarget(t, env, workflows.Retarget{Primary: c.to}))
			})
			start := env.Now()
			env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east"})
			seen := *got
			var can *workflow.ContinueAsNewError
			if err := env.GetWorkflowError(); !errors.As(err, &can) {
				t.Fatalf("error %v, want continue-as-new", err)
			}
			// Polls at 0, 30, 60, 90 and 120 s of workflow time.
			if seen == nil || seen.Polls != 5 {
				t.Fatalf("state at 2m1s: %+v, want five polls at the default interval", seen)
			}
			var next workflows.ProtectInput
			mustOK(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
			if next.Primary != c.want || next.Interval != workflows.DefaultProtectInterval {
				t.Fatalf("continued from %q every %v, want %q every %v", next.Primary, next.Interval, c.want, workflows.DefaultProtectInterval)
			}
			// A run is 100 polls (protectRunLength); the state goes on.
			if c.to != "west" && (next.State == nil || next.State.Polls != 100) {
				t.Fatalf("continued with state %+v, want it after 100 polls", next.State)
			}
			// Moved at once, before its next poll was due; or the signal
			// was ignored and the polls went on.
			if took, next := env.Now().Sub(start), 2*time.Minute+workflows.DefaultProtectInterval; (c.to == "west") != (took < next) {
				t.Fatalf("continued after %v of workflow time, the next poll due at %v", took, next)
			}
		})
	}
}

// TestProtectSurveysLargePlans: a plan of more groups than one survey
// call takes is polled in several calls, and every group's answer lands
// on its own group: all of them healthy with a last sync.
func TestProtectSurveysLargePlans(t *testing.T) {
	f := newFixtureN(t, 150)
	env, calls := f.testEnv(t)
	got := stateThenStop(t, env, 15*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	mustOK(t, env.GetWorkflowError())
	seen := *got
	if seen == nil || len(seen.Groups) != 153 {
		t.Fatalf("state at 15s: %+v, want 153 groups", seen)
	}
	for g, h := range seen.Groups {
		if h.LastSync.IsZero() || h.Status != "HEALTHY" || h.Error != "" {
			t.Fatalf("group %s: %+v", g, h)
		}
	}
	if surveys := count(*calls, "SurveyReplication"); surveys != 2*seen.Polls {
		t.Fatalf("%d survey calls for %d polls of 153 groups, want two a poll", surveys, seen.Polls)
	}
}

// TestProtectSaysWhenThePrimaryIsUnreachable: a poll in which some groups
// answer leaves the primary reachable; one in which none does reports it
// unreachable with the first group's error (by name), since the first
// such poll, and a later failed poll keeps that time.
func TestProtectSaysWhenThePrimaryIsUnreachable(t *testing.T) {
	for _, subject := range []string{"vg-1", ""} {
		t.Run(map[string]string{"vg-1": "one group fails", "": "every group fails"}[subject], func(t *testing.T) {
			f := newFixture(t)
			env, _ := f.testEnv(t)
			start := env.Now()
			env.RegisterDelayedCallback(func() {
				mustOK(t, f.east.SetFaults([]sim.FaultRule{{Method: "GetVolumeReplicationInfo", Code: "INVALID_ARGUMENT", Count: 1000, Subject: subject, Message: "injected"}}))
			}, 5*time.Second)
			got := stateThenStop(t, env, 25*time.Second)
			env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
			mustOK(t, env.GetWorkflowError())
			seen := *got
			if seen == nil || seen.Polls != 3 || !strings.Contains(seen.Groups["db"].Error, "injected") {
				t.Fatalf("state at 25s: %+v, want three polls, db's failing", seen)
			}
			if subject != "" {
				if seen.Unreachable != "" || !seen.UnreachableSince.IsZero() || seen.Groups["logs"].Error != "" {
					t.Fatalf("one group failing: unreachable %q since %v, logs %+v", seen.Unreachable, seen.UnreachableSince, seen.Groups["logs"])
				}
				return
			}
			// Polls at 0 (answered), 10 and 20 s (not): since the one at 10 s.
			if seen.Unreachable != seen.Groups["db"].Error || seen.UnreachableSince.Sub(start).Round(time.Second) != 10*time.Second {
				t.Fatalf("unreachable %q since %v after the start, want db's error since 10s", seen.Unreachable, seen.UnreachableSince.Sub(start))
			}
		})
	}
}

// TestProtectWatchesAHangingPoll: while a poll round hangs (a primary
// that answers nothing lets every call run on), the watch says the
// primary is unreachable since the round began, within half the RPO
// target of it, not only once the round ends or after a whole interval.
func TestProtectWatchesAHangingPoll(t *testing.T) {
	f := newFixture(t)
	f.plan.Policy.RPOTarget = plans.Duration(time.Second) // the watch ticks every 500 ms
	env, _ := f.testEnv(t)
	start := env.Now()
	env.RegisterDelayedCallback(func() {
		mustOK(t, f.east.SetFaults([]sim.FaultRule{{Method: "GetVolumeReplicationInfo", Latency: 3 * time.Second, Count: 1000}}))
	}, 5*time.Second)
	// The round of 10 s hangs; at 10.7 s the watch has ticked once.
	got := stateThenStop(t, env, 10700*time.Millisecond)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	mustOK(t, env.GetWorkflowError())
	seen := *got
	if seen == nil || seen.Unreachable == "" {
		t.Fatalf("state 0.7 s into a hanging poll round: %+v, want the primary unreachable", seen)
	}
	if since := seen.UnreachableSince.Sub(start).Round(100 * time.Millisecond); since != 10*time.Second {
		t.Errorf("unreachable since %v after the start, want since the round began at 10s", since)
	}
	if !seen.Groups["db"].OutOfRPO {
		t.Errorf("db in RPO after ten seconds without a sync known: %+v", seen.Groups["db"])
	}
}

// TestProtectNotesTheRecordEveryTenPolls: Protect sends the plan's record
// its summary at its first poll, then, while nothing but the lag changes,
// every tenth poll, and once more when it stops: not a signal per poll.
// Each summary is as of protection's look (the poll it judged the lag
// at): the stop's, at 255 s, carries the look of the last poll, at 250 s.
func TestProtectNotesTheRecordEveryTenPolls(t *testing.T) {
	f := newFixture(t)
	f.plan.Policy.RPOTarget = plans.Duration(time.Hour) // in RPO throughout
	env, _ := f.testEnv(t)
	start := env.Now()
	// Polls at 0, 10, ... 250 s; stopped at 255 s.
	got := stateThenStop(t, env, 255*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	mustOK(t, env.GetWorkflowError())
	if *got == nil || (*got).Polls != 26 {
		t.Fatalf("state at 255 s: %+v, want 26 polls", *got)
	}
	var at []string
	f.recordMu.Lock()
	for _, c := range f.record {
		if p := c.Protection; p != nil {
			at = append(at, fmt.Sprintf("%v running=%v", p.Checked.Sub(start).Round(time.Second), p.Running))
		}
	}
	f.recordMu.Unlock()
	want := []string{"0s running=true", "1m30s running=true", "3m10s running=true", "4m10s running=false"}
	if !slices.Equal(at, want) {
		t.Errorf("protection's summaries sent to the record at %q, want %q", at, want)
	}
}

// stateAt reads Protect's state at d of workflow time, then runs then
// (when not nil); the state read is *got once the workflow has ended.
func stateAt(t *testing.T, env *testsuite.TestWorkflowEnvironment, d time.Duration, then func()) **workflows.ProtectState {
	t.Helper()
	got := new(*workflows.ProtectState)
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(workflows.QueryProtect)
		mustOK(t, err)
		mustOK(t, v.Get(got))
		if then != nil {
			then()
		}
	}, d)
	return got
}

// stateThenStop reads Protect's state at d of workflow time, then stops
// it (see stateAt).
func stateThenStop(t *testing.T, env *testsuite.TestWorkflowEnvironment, d time.Duration) **workflows.ProtectState {
	t.Helper()
	return stateAt(t, env, d, func() { send(t, env, workflows.UpdateStopProtect, workflows.StopProtect{}, nil, nil) })
}

// TestFailoverTellsProtection: a failover records its new primary with
// the site it lost, and the record, taking that change, tells the plan's
// protection that the plan runs on west without a replica, east lost.
func TestFailoverTellsProtection(t *testing.T) {
	f := newFixture(t)
	f.east.Down()
	var res workflows.FailoverResult
	_, err := f.run(t, workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"}, &res)
	mustOK(t, err)
	f.recordMu.Lock()
	var primary []workflows.RecordChange
	for _, c := range f.record {
		if c.Primary != "" {
			primary = append(primary, c)
		}
	}
	f.recordMu.Unlock()
	if len(primary) != 1 || primary[0].Primary != "west" || primary[0].Lost != "east" {
		t.Fatalf("the failover recorded the primaries %+v, want west with east lost", primary)
	}

	// The record takes it (sent with the change after it, as the
	// actions send them together) and tells protection.
	env, _ := f.testEnv(t)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.SignalRecord, sealFor(t, env, workflows.RecordChange{At: env.Now(), Fenced: &workflows.FenceEntry{Site: "east", CIDRs: []string{"127.0.0.2/32"}, Via: "west"},
			More: []workflows.RecordChange{primary[0]}}))
	}, time.Second)
	env.RegisterDelayedCallback(func() { env.CancelWorkflow() }, time.Minute)
	env.ExecuteWorkflow(workflows.PlanRecorder, recordStart(t, env))
	f.recordMu.Lock()
	defer f.recordMu.Unlock()
	if len(f.retargets) != 1 {
		t.Fatalf("the record told protection %+v, want one retarget", f.retargets)
	}
	if rt := f.retargets[0]; rt.Primary != "west" || rt.Lost != "east" || !rt.At.Equal(primary[0].At) {
		t.Fatalf("the record told protection %+v, want west primary with east lost at %v", rt, primary[0].At)
	}
}

// TestProtectFollowsAFailover: a failover's retarget (naming the lost
// site) moves Protect at once to the new primary, unprotected: it polls
// no replication on either site (the lost one is no primary, the new one
// has no replica), enables nothing, is never out of RPO, says since when
// it is unprotected and what synced last, in its state, the record and
// the drover_unprotected gauge; a reprotect's retarget to the same
// primary then protects it anew.
func TestProtectFollowsAFailover(t *testing.T) {
	f := newFixture(t)
	f.plan.Policy.RPOTarget = plans.Duration(5 * time.Second)
	m := &gauges{vals: map[string]float64{}}
	f.metrics = m
	env, _ := f.testEnv(t)
	start := env.Now()
	lostAt := start.Add(15 * time.Second)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.SignalRetarget, sealedRetarget(t, env, workflows.Retarget{Primary: "west", Lost: "east", At: lostAt, By: "drover-shop"}))
	}, 15*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("error %v, want continue-as-new on the failover's word", err)
	}
	if took := env.Now().Sub(start); took >= 20*time.Second {
		t.Fatalf("continued after %v of workflow time: not at once", took)
	}
	var next workflows.ProtectInput
	mustOK(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	u := next.State.Unprotected
	if next.Primary != "west" || next.State == nil || u == nil || u.Lost != "east" || !u.Since.Equal(lostAt) || u.LastSync.IsZero() {
		t.Fatalf("continued as %+v with state %+v, want unprotected on west since the failover, with east's last sync", next, next.State)
	}

	// The next run, unprotected on west.
	env, calls := f.testEnv(t)
	start = env.Now()
	got := stateAt(t, env, 35*time.Second, func() {
		env.SignalWorkflow(workflows.SignalRetarget, sealedRetarget(t, env, workflows.Retarget{Primary: "west", Lost: "east", At: lostAt})) // told again: ignored
	})
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.SignalRetarget, sealedRetarget(t, env, workflows.Retarget{Primary: "west"})) // the reprotect's
	}, 36*time.Second)
	env.ExecuteWorkflow(workflows.Protect, next)
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("error %v, want continue-as-new on the reprotect's word", err)
	}
	seen := *got
	if seen == nil || seen.Unprotected == nil || seen.Primary != "west" || seen.OutOfRPO || len(seen.Groups) != 0 || seen.Polls != 4 {
		t.Fatalf("state 35 s into the unprotected run: %+v, want four polls on west, unprotected, no groups, not out of RPO", seen)
	}
	for _, name := range []string{"SurveyReplication", "GetVolumeReplicationInfo", "EnableVolumeReplication", "PromoteVolume"} {
		if i := indexOf(*calls, name, "", ""); i >= 0 {
			t.Fatalf("an unprotected protection called %v", (*calls)[i])
		}
	}
	// Nothing asks the lost site, fenced: its clients were recorded.
	if i := indexOf(*calls, "GetFenceClients", "east", ""); i >= 0 || indexOf(*calls, "GetFenceClients", "west", "") < 0 {
		t.Fatalf("an unprotected protection asked east's clients, or not west's: %v", *calls)
	}
	if !slices.Contains(seen.Clients["east"], "127.0.0.2/32") {
		t.Fatalf("east's clients %v were not kept", seen.Clients)
	}
	// Last reported at the poll at 30 s of this run.
	if v, want := m.get(workflows.MetricUnprotected, "shop"), start.Add(30*time.Second).Sub(lostAt).Seconds(); v < want-1 || v > want+1 {
		t.Errorf("drover_unprotected %v, want the seconds since the failover, %v", v, want)
	}
	if v := m.get(workflows.MetricOutOfRPO, "shop"); v != 0 {
		t.Errorf("drover_out_of_rpo %v while unprotected", v)
	}
	// No replica, no lag: its series are dropped (NaN), not left at the
	// last lag seen before the failover.
	if v := m.get(workflows.MetricReplicationLag, "shop"); !math.IsNaN(v) {
		t.Errorf("drover_replication_lag_seconds %v while unprotected, want NaN (the series dropped)", v)
	}
	f.recordMu.Lock()
	var last *workflows.ProtectionEntry
	for _, c := range f.record {
		if c.Protection != nil {
			last = c.Protection
		}
	}
	f.recordMu.Unlock()
	if last == nil || last.Primary != "west" || last.Unprotected == nil || last.Unprotected.Lost != "east" || last.OutOfRPO || !last.LastSync.Equal(u.LastSync) {
		t.Errorf("the record was told %+v, want west unprotected since east was lost", last)
	}
	var again workflows.ProtectInput
	mustOK(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &again))
	if again.Primary != "west" || again.State != nil {
		t.Fatalf("after the reprotect continued as %+v, want a new protection from west", again)
	}
}

// TestProtectCountsSilenceFromTheFirstUnansweredPoll: while the primary
// stays silent over several poll rounds, "has not answered a poll for"
// counts from the first poll it left unanswered, not from the start of
// the round that hangs now.
func TestProtectCountsSilenceFromTheFirstUnansweredPoll(t *testing.T) {
	f := newFixture(t)
	f.plan.Policy.RPOTarget = plans.Duration(time.Second) // the watch ticks every 500 ms
	env, _ := f.testEnv(t)
	start := env.Now()
	env.RegisterDelayedCallback(func() {
		mustOK(t, f.east.SetFaults([]sim.FaultRule{{Method: "GetVolumeReplicationInfo", Code: "UNAVAILABLE", Count: 1000, Message: "injected"}}))
	}, 5*time.Second)
	env.RegisterDelayedCallback(func() {
		mustOK(t, f.east.SetFaults([]sim.FaultRule{{Method: "GetVolumeReplicationInfo", Latency: 3 * time.Second, Count: 1000}}))
	}, 15*time.Second)
	// The poll at 10 s fails; the one at 20 s hangs, watched from 20.5 s.
	got := stateThenStop(t, env, 21200*time.Millisecond)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	mustOK(t, env.GetWorkflowError())
	seen := *got
	if seen == nil || seen.Polls != 2 {
		t.Fatalf("state at 21.2 s: %+v, want two polls done and a third hanging", seen)
	}
	if since := seen.UnreachableSince.Sub(start).Round(100 * time.Millisecond); since != 10*time.Second {
		t.Errorf("unreachable since %v after the start, want since the first unanswered poll at 10s", since)
	}
	if want := "has not answered a poll for 11s"; !strings.Contains(seen.Unreachable, want) {
		t.Errorf("unreachable %q at 21 s, want %q (since 10 s)", seen.Unreachable, want)
	}
}

// TestProtectTakesACarriedStateWithoutMaps: a state carried over a
// continue-as-new comes through JSON, where an empty map of groups or
// clients comes back nil (an unprotected run's groups are empty; a site
// that reported no clients leaves none). The run must go on polling, not
// panic on the first answer it records.
func TestProtectTakesACarriedStateWithoutMaps(t *testing.T) {
	f := newFixture(t)
	env, _ := f.testEnv(t)
	got := stateThenStop(t, env, 25*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "west", Interval: 10 * time.Second,
		State: &workflows.ProtectState{Primary: "west", Unprotected: &workflows.Unprotection{Lost: "east", Since: env.Now()}}})
	mustOK(t, env.GetWorkflowError())
	s := *got
	if s == nil {
		t.Fatal("no state read")
	}
	if _, asked := s.Clients["west"]; s.Polls < 2 || s.Unprotected == nil || !asked {
		t.Fatalf("state %+v, want an unprotected run that polled and recorded west's clients", s)
	}
}
