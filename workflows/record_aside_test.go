package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/wftest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestRecordHoldsEveryChangeWhenTheActionEnds: an action sends its
// changes to the plan's record aside, while it goes on, and waits for
// them all before it ends. The plan's first action is the hard case: the
// record does not exist yet, so each change first fails to reach it and
// then starts it, or waits while another change of the run starts it and
// sends to it then.
// The plan has no workloads, so the last change (west as primary) goes
// aside just before the action ends. The moment the failover's result is
// in, the record holds east's fence, west as primary and the completed
// failover.
func TestRecordHoldsEveryChangeWhenTheActionEnds(t *testing.T) {
	srv, f, ctx := recordStack(t)

	if rec, err := workflows.ReadRecord(ctx, srv.Client, "shop"); err == nil && rec != nil {
		t.Fatalf("the plan has a record before its first action: %+v", rec)
	}
	f.plan.Workloads = nil
	f.east.Down()
	run, res := failOverEast(t, ctx, srv, f)
	// The changes start the record once between them: none failed and
	// needed sending again.
	for _, st := range res.Steps {
		if st.Name == "record the plan's state" {
			t.Errorf("a change was sent again: %+v", st)
		}
	}
	rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
	mustOK(t, err)
	failedOverInRecord(t, rec, f, run)
}

// failOverEast fails plan shop over from east to west through the dev
// server and waits until it has completed with every step done.
func failOverEast(t *testing.T, ctx context.Context, srv *devserver.Server, f *fixture) (client.WorkflowRun, workflows.FailoverResult) {
	t.Helper()
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, err)
	var res workflows.FailoverResult
	mustOK(t, run.Get(ctx, &res))
	allDone(t, res.Progress)
	return run, res
}

// startWorker runs a worker of the fixture's activities, with trust as
// its plan check and the interceptors given, until the test ends.
func (f *fixture) startWorker(t *testing.T, srv *devserver.Server, trust *activities.PlanTrust, interceptors ...interceptor.WorkerInterceptor) {
	t.Helper()
	w := worker.New(srv.Client, workflows.TaskQueue, worker.Options{Interceptors: interceptors})
	workflows.Register(w)
	w.RegisterActivity(&workflows.RecordSender{Client: srv.Client})
	w.RegisterActivity(&workflows.RunReader{Client: srv.Client})
	w.RegisterActivity(trust)
	w.RegisterActivity(f.storage)
	w.RegisterActivity(f.workloads)
	mustOK(t, w.Start())
	t.Cleanup(w.Stop)
}

// TestRecordKeepsARunsEndOverItsStart: an action's start and end both go
// to the record aside, as signals sent apart that may arrive in either
// order. A start that arrives after its own run's end must not make the
// record show the finished action running again; another run's start
// still replaces it.
func TestRecordKeepsARunsEndOverItsStart(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := recorderEnv(&s)
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	entry := func(run, outcome string) workflows.RecordChange {
		return workflows.RecordChange{At: at, Action: &workflows.ActionEntry{Action: "failover", WorkflowID: "shop", RunID: run, Outcome: outcome, Start: at}}
	}
	var seen []string
	look := func() {
		v, err := env.QueryWorkflow(workflows.QueryRecord)
		mustOK(t, err)
		var rec workflows.PlanRecord
		mustOK(t, v.Get(&rec))
		seen = append(seen, rec.LastAction.RunID+" "+rec.LastAction.Outcome)
	}
	signal := func(d time.Duration, c workflows.RecordChange) {
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(workflows.SignalRecord, sealFor(t, env, c))
		}, d)
		env.RegisterDelayedCallback(look, d+time.Second)
	}
	signal(time.Minute, entry("r1", workflows.StateCompleted))
	signal(2*time.Minute, entry("r1", workflows.StateRunning))
	signal(3*time.Minute, entry("r2", workflows.StateRunning))
	env.RegisterDelayedCallback(env.CancelWorkflow, 4*time.Minute)
	env.ExecuteWorkflow(workflows.PlanRecorder, recordStart(t, env))
	want := []string{"r1 completed", "r1 completed", "r2 running"}
	if !slices.Equal(seen, want) {
		t.Errorf("record's last action after each signal: %q, want %q", seen, want)
	}
}

// TestRecordStartedByAnyChangeTakesIt: a record started by a worker's
// sealed first change applies it, whatever it changes: the note of a
// failover to a point in time too.
func TestRecordStartedByAnyChangeTakesIt(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := recorderEnv(&s)
	first := sealFor(t, env, workflows.RecordChange{At: env.Now(),
		Restored: &workflows.RestoredEntry{Point: "20261127T120000Z", Site: "west", Volumes: map[string]string{"v1": "vol-r1"}, At: env.Now()}})
	var rec workflows.PlanRecord
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(workflows.QueryRecord)
		mustOK(t, err)
		mustOK(t, v.Get(&rec))
	}, time.Second)
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Minute)
	env.ExecuteWorkflow(workflows.PlanRecorder, workflows.PlanRecordInput{Plan: "shop", First: &first})
	if rec.Restored == nil || rec.Restored.Point != "20261127T120000Z" || rec.Restored.Volumes["v1"] != "vol-r1" || rec.Changes != 1 {
		t.Fatalf("the record started by a restored note holds %+v (restored %+v)", rec, rec.Restored)
	}
}

// TestRecordChangesGoTogether: an action whose steps run in one stretch
// sends the record its changes (its start, the fence, the new primary,
// its end) as one signal, in order, where it sent one per change, each
// a delivery by the server before the action could end. The worker sends
// it, inside the workflow task that runs the steps: the failover runs in
// two workflow tasks (the checks settle first), where a signal of its own
// took one more. The record exists (as it does once Protect has watched
// the plan); the plan has no workloads, so every step after the checks
// runs in the second workflow task.
func TestRecordChangesGoTogether(t *testing.T) {
	srv, f, ctx := recordStack(t)

	startRecord(t, ctx, srv)
	f.plan.Workloads = nil
	f.east.Down()
	run, res := failOverEast(t, ctx, srv, f)

	count := func(id, runID string, types ...enumspb.EventType) map[enumspb.EventType]int {
		n := map[enumspb.EventType]int{}
		it := srv.Client.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			mustOK(t, err)
			if slices.Contains(types, ev.GetEventType()) {
				n[ev.GetEventType()]++
			}
		}
		return n
	}
	fo := count(run.GetID(), run.GetRunID(), enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED, enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
		enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES)
	if n := fo[enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED]; n != 0 {
		t.Errorf("the failover signalled its record itself %d times, want the worker to", n)
	}
	// No version marker, and no upsert of TemporalChangeVersion: the
	// workflows carry no patches (a worker build is pinned instead).
	versions := 0
	locals := map[string]bool{} // the activities that ran a local attempt
	var handed []string         // regular attempts of those
	it := srv.Client.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		mustOK(t, err)
		if ev.GetMarkerRecordedEventAttributes().GetMarkerName() == "Version" {
			versions++
		}
		if m := ev.GetMarkerRecordedEventAttributes(); m.GetMarkerName() == "LocalActivity" {
			var data struct{ ActivityType string }
			mustOK(t, converter.GetDefaultDataConverter().FromPayloads(m.GetDetails()["data"], &data))
			locals[data.ActivityType] = true
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && locals[a.GetActivityType().GetName()] {
			handed = append(handed, a.GetActivityType().GetName())
		}
	}
	// Two: the checks settle before the first side effect; the record's
	// changes add none. A step's local attempt cut at its budget (a slow
	// machine) goes on as a regular activity, which takes workflow tasks
	// of its own: the count holds only where every step ended local.
	if n := fo[enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED]; len(handed) == 0 && n != 2 {
		t.Errorf("the failover took %d workflow tasks with every step ended local, want 2", n)
	} else if len(handed) > 0 {
		t.Logf("the failover took %d workflow tasks; local attempts of %v went on as regular activities", n, handed)
	}
	if n := fo[enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES]; versions != 0 || n != 0 {
		t.Errorf("the failover recorded %d version markers and %d upserts, want none", versions, n)
	}
	if n := count(workflows.RecordID("shop"), "", enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)[enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]; n != 1 {
		t.Errorf("the record was signalled %d times, want once", n)
	}
	rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
	mustOK(t, err)
	failedOverInRecord(t, rec, f, run)
	if rec.Changes != 4 {
		t.Errorf("record took %d changes, want 4 (start, fence, primary, end)", rec.Changes)
	}
	// The primary's step says where the change went and that the action
	// waits for it.
	i := slices.IndexFunc(res.Steps, func(s *workflows.Step) bool { return s.Name == "record west as primary" })
	want := "sent to " + workflows.RecordID("shop") + "; the action ends once it has taken it"
	if i < 0 {
		t.Errorf("no step records west as primary")
	} else if got := res.Steps[i].Output; got != want {
		t.Errorf("the primary's step says %q, want %q", got, want)
	}
}

// TestRecordTakesTheFenceWhileTheActionPauses: the changes sent together
// wait a second at most, not for the action's end: a failover paused at
// its promotions (the storage refuses them) has its fence in the record
// while it waits for the operator, so that drctl status and a later
// reprotect know what is fenced.
func TestRecordTakesTheFenceWhileTheActionPauses(t *testing.T) {
	srv, f, ctx := recordStack(t)

	startRecord(t, ctx, srv)
	mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "PromoteVolume", Code: "INVALID_ARGUMENT", Count: 1000, Message: "pool is read-only"}}))
	f.east.Down()
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, err)

	paused := ""
	deadline := time.Now().Add(time.Minute)
	for paused == "" && time.Now().Before(deadline) {
		if v, err := srv.Client.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), workflows.QueryProgress); err == nil {
			var p workflows.Progress
			if v.Get(&p) == nil {
				for _, s := range p.Steps {
					if s.State == workflows.StatePaused {
						paused = s.ID
					}
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if paused == "" {
		t.Fatal("the failover never paused at its refused promotions")
	}
	var rec *workflows.PlanRecord
	deadline = time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		rec, err = workflows.ReadRecord(ctx, srv.Client, "shop")
		mustOK(t, err)
		if cidrs, via := rec.FencedOf("east"); via == "west" && slices.Equal(cidrs, f.plan.Sites[0].Fence.CIDRs) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if cidrs, via := rec.FencedOf("east"); via != "west" || !slices.Equal(cidrs, f.plan.Sites[0].Fence.CIDRs) {
		t.Fatalf("paused at %s, the record holds %v fenced through %q, want %v through west: %+v", paused, cidrs, via, f.plan.Sites[0].Fence.CIDRs, rec)
	}
	if rec.LastAction == nil || rec.LastAction.RunID != run.GetRunID() || rec.LastAction.Outcome != workflows.StateRunning {
		t.Errorf("record's last action %+v, want this failover running", rec.LastAction)
	}
	uh, err := srv.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), RunID: run.GetRunID(), UpdateName: workflows.UpdateResolve,
		Args: []any{workflows.Decision{Step: paused, Action: workflows.DecisionAbort}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	mustOK(t, err)
	mustOK(t, uh.Get(ctx, nil))
	var res workflows.FailoverResult
	_ = run.Get(ctx, &res)
}

// TestRecordTakesACancelledActionsEnd: an action cancelled while it
// waits (here at an approval gate, before its changes went to the
// record) still records its start and its end, so that the record does
// not go on naming the action before it, and drctl's direction checks
// do not read a state the cancelled action may have changed.
func TestRecordTakesACancelledActionsEnd(t *testing.T) {
	srv, f, ctx := recordStack(t)

	startRecord(t, ctx, srv)
	f.plan.Policy.Approvals = []string{"beforeFence"}
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, err)
	waitFor(t, ctx, srv.Client, run, "approve beforeFence", workflows.StateWaiting)
	mustOK(t, srv.Client.CancelWorkflow(ctx, run.GetID(), run.GetRunID()))
	var res workflows.FailoverResult
	_ = run.Get(ctx, &res)
	rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
	mustOK(t, err)
	if a := rec.LastAction; a == nil || a.RunID != run.GetRunID() || a.Outcome != workflows.StateAborted {
		t.Fatalf("record's last action %+v after the failover was cancelled, want it aborted", a)
	}
}

// TestRecordAppliesEachChange: the record folds each change it is sent
// into the plan's state, as drctl status, reprotect and failback read
// it: protection names the primary only until an action does; fences of
// one site through one storage merge, sorted and without repeats; an
// unfence lifts only the CIDRs it names and drops an entry left empty;
// the changes a signal carries (More) apply after it, in order; FencedOf
// gathers a site's CIDRs over every storage that fences it.
func TestRecordAppliesEachChange(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := recorderEnv(&s)
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	fence := func(site, via string, cidrs ...string) *workflows.FenceEntry {
		return &workflows.FenceEntry{Site: site, Via: via, CIDRs: cidrs}
	}
	type want struct {
		primary string
		fenced  map[string][]string // site → FencedOf's CIDRs
		via     map[string]string
		changes int
	}
	steps := []struct {
		c    workflows.RecordChange
		want want
	}{
		{workflows.RecordChange{Protection: &workflows.ProtectionEntry{Primary: "east", Enabled: true}},
			want{"east", nil, nil, 1}},
		{workflows.RecordChange{Fenced: fence("east", "west", "10.0.0.2/32", "10.0.0.1/32")},
			want{"east", map[string][]string{"east": {"10.0.0.1/32", "10.0.0.2/32"}}, map[string]string{"east": "west"}, 2}},
		{workflows.RecordChange{Fenced: fence("east", "west", "10.0.0.1/32", "10.0.0.3/32")},
			want{"east", map[string][]string{"east": {"10.0.0.1/32", "10.0.0.2/32", "10.0.0.3/32"}}, map[string]string{"east": "west"}, 3}},
		{workflows.RecordChange{Primary: "west"},
			want{"west", map[string][]string{"east": {"10.0.0.1/32", "10.0.0.2/32", "10.0.0.3/32"}}, map[string]string{"east": "west"}, 4}},
		{workflows.RecordChange{Protection: &workflows.ProtectionEntry{Primary: "east", Enabled: true}},
			want{"west", map[string][]string{"east": {"10.0.0.1/32", "10.0.0.2/32", "10.0.0.3/32"}}, map[string]string{"east": "west"}, 5}},
		{workflows.RecordChange{Unfenced: fence("east", "west", "10.0.0.1/32", "10.0.0.2/32")},
			want{"west", map[string][]string{"east": {"10.0.0.3/32"}}, map[string]string{"east": "west"}, 6}},
		{workflows.RecordChange{Unfenced: fence("east", "north", "10.0.0.3/32")},
			want{"west", map[string][]string{"east": {"10.0.0.3/32"}}, map[string]string{"east": "west"}, 7}},
		{workflows.RecordChange{Unfenced: fence("east", "west", "10.0.0.3/32")},
			want{"west", map[string][]string{"east": nil}, map[string]string{"east": ""}, 8}},
		{workflows.RecordChange{Primary: "east", More: []workflows.RecordChange{
			{Fenced: fence("west", "east", "10.0.1.1/32")}, {Fenced: fence("west", "north", "10.0.1.2/32")}, {Primary: "north"}}},
			want{"north", map[string][]string{"west": {"10.0.1.1/32", "10.0.1.2/32"}}, map[string]string{"west": "north"}, 12}},
	}
	var got []string
	changes := make([]workflows.RecordChange, len(steps))
	for i, st := range steps {
		changes[i] = st.c
	}
	applyToRecord(t, env, at, changes, func(i int, c workflows.RecordChange, rec workflows.PlanRecord) {
		st := steps[i]
		st.c = c
		if rec.Primary != st.want.primary || rec.Changes != st.want.changes || !rec.Updated.Equal(st.c.At) {
			got = append(got, fmt.Sprintf("after change %d: primary %q, %d changes, updated %v; want %q, %d, %v", i, rec.Primary, rec.Changes, rec.Updated, st.want.primary, st.want.changes, st.c.At))
		}
		// One entry per site and storage: a fence through the same
		// storage merges into it.
		for j, e := range rec.Fences {
			for _, o := range rec.Fences[j+1:] {
				if e.Site == o.Site && e.Via == o.Via {
					got = append(got, fmt.Sprintf("after change %d: two entries for %s through %s: %+v", i, e.Site, e.Via, rec.Fences))
				}
			}
		}
		for site, cidrs := range st.want.fenced {
			if c, via := rec.FencedOf(site); !slices.Equal(c, cidrs) || via != st.want.via[site] {
				got = append(got, fmt.Sprintf("after change %d: %s fenced %v through %q, want %v through %q (%+v)", i, site, c, via, cidrs, st.want.via[site], rec.Fences))
			}
		}
	})
	for _, g := range got {
		t.Error(g)
	}
}

// applyToRecord runs plan shop's record in env and sends it each change,
// sealed, a minute apart, each with its time set (at, then a minute
// later each); a second after each it calls look with the change as sent
// and the record as it then answers. The record ends after the last.
func applyToRecord(t *testing.T, env *testsuite.TestWorkflowEnvironment, at time.Time, changes []workflows.RecordChange, look func(i int, c workflows.RecordChange, rec workflows.PlanRecord)) {
	t.Helper()
	for i, c := range changes {
		c.At = at.Add(time.Duration(i) * time.Minute)
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(workflows.SignalRecord, sealFor(t, env, c)) }, time.Duration(i+1)*time.Minute)
		env.RegisterDelayedCallback(func() {
			v, err := env.QueryWorkflow(workflows.QueryRecord)
			mustOK(t, err)
			var rec workflows.PlanRecord
			mustOK(t, v.Get(&rec))
			look(i, c, rec)
		}, time.Duration(i+1)*time.Minute+time.Second)
	}
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Duration(len(changes)+1)*time.Minute)
	env.ExecuteWorkflow(workflows.PlanRecorder, recordStart(t, env))
}

// recordStack is the dev server, the fixture and a worker of its
// activities, and a context that bounds the test.
func recordStack(t *testing.T) (*devserver.Server, *fixture, context.Context) {
	t.Helper()
	srv := devserver.Start(t, nil)
	f := newFixture(t)
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return srv, f, ctx
}

// startRecord starts plan shop's record, as Protect does for a plan it
// watches, so that an action's changes find it running: with a first
// change sealed by the key of this process, which its workers share.
func startRecord(t *testing.T, ctx context.Context, srv *devserver.Server) {
	t.Helper()
	first, err := (&workflows.RecordSender{}).SealAt("shop", workflows.RecordChange{At: time.Now()}, time.Now())
	mustOK(t, err)
	_, err = srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.RecordID("shop"), TaskQueue: workflows.TaskQueue},
		workflows.PlanRecorder, workflows.PlanRecordInput{Plan: "shop", First: &first})
	mustOK(t, err)
}

// recorderEnv is a test environment for the record, with the worker's
// activities it calls (the seal check; who started it, which has no
// client here and answers nothing).
func recorderEnv(s *testsuite.WorkflowTestSuite) *testsuite.TestWorkflowEnvironment {
	env := wftest.New(s)
	env.RegisterActivity(&workflows.RecordSender{})
	env.RegisterActivity(&workflows.RunReader{})
	return env
}

// sealFor seals a change for plan shop's record as a worker of this
// process would at the environment's time.
func sealFor(t *testing.T, env *testsuite.TestWorkflowEnvironment, c workflows.RecordChange) workflows.RecordChange {
	t.Helper()
	c, err := (&workflows.RecordSender{}).SealAt("shop", c, env.Now())
	mustOK(t, err)
	return c
}

// recordStart is the input with which a worker starts plan shop's
// record: an empty first change, sealed.
func recordStart(t *testing.T, env *testsuite.TestWorkflowEnvironment) workflows.PlanRecordInput {
	t.Helper()
	first := sealFor(t, env, workflows.RecordChange{At: env.Now()})
	return workflows.PlanRecordInput{Plan: "shop", First: &first}
}

// failedOverInRecord checks that rec holds the completed failover run
// from east to west: west primary, east's CIDRs fenced through west.
func failedOverInRecord(t *testing.T, rec *workflows.PlanRecord, f *fixture, run client.WorkflowRun) {
	t.Helper()
	cidrs, via := rec.FencedOf("east")
	switch {
	case rec.Primary != "west":
		t.Errorf("record primary %q, want west: %+v", rec.Primary, rec)
	case via != "west" || !slices.Equal(cidrs, f.plan.Sites[0].Fence.CIDRs):
		t.Errorf("record holds %v fenced through %q, want %v through west", cidrs, via, f.plan.Sites[0].Fence.CIDRs)
	case rec.LastAction == nil || rec.LastAction.RunID != run.GetRunID() || rec.LastAction.Outcome != workflows.StateCompleted:
		t.Errorf("record's last action %+v, want this failover completed", rec.LastAction)
	}
}

// TestRecordContinuesAsNewAfterItsRunLength: a record that has taken 500
// changes continues as new, carrying its state, so that its history
// stays small however long the plan lives; before that it goes on.
func TestRecordContinuesAsNewAfterItsRunLength(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := recorderEnv(&s)
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	const runLength = 500
	env.RegisterDelayedCallback(func() {
		for i := range runLength {
			env.SignalWorkflow(workflows.SignalRecord, sealFor(t, env, workflows.RecordChange{At: at.Add(time.Duration(i) * time.Second), Primary: fmt.Sprint("site-", i)}))
		}
	}, time.Minute)
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Hour)
	env.ExecuteWorkflow(workflows.PlanRecorder, recordStart(t, env))
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("after %d changes the record ended with %v, want it to continue as new", runLength, err)
	}
	var in workflows.PlanRecordInput
	mustOK(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &in))
	if in.Record.Changes != runLength || in.Record.Primary != fmt.Sprint("site-", runLength-1) || in.Record.Plan != "shop" {
		t.Fatalf("the record continued as new with %d changes, primary %q, plan %q; want %d, site-%d, shop",
			in.Record.Changes, in.Record.Primary, in.Record.Plan, runLength, runLength-1)
	}
}
