package workflows_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// pointRPCs are the storage calls protection makes for its points only,
// at the primary when it cuts there: none of them is a failback's.
var pointRPCs = []string{"CreateVolumeGroupSnapshot", "CreateSnapshot", "CreateVolume", "DeleteVolumeGroupSnapshot",
	"DeleteSnapshot", "DeleteVolume", "EnableVolumeReplication", "DisableVolumeReplication"}

// rpcLog is the order in which storage calls began and ended at a site.
type rpcLog struct {
	mu     sync.Mutex
	events []string // "begin M" or "end M"
}

func (l *rpcLog) add(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *rpcLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// protectUntilAPoint starts the protection of f's plan from east and
// waits for its first point usable at west.
func protectUntilAPoint(t *testing.T, ctx context.Context, srv *devserver.Server, f *fixture) client.WorkflowRun {
	t.Helper()
	prot, err := workflows.StartProtect(ctx, srv.Client, f.plan, "east", 200*time.Millisecond, workflows.Origin{})
	mustOK(t, err)
	simtest.Eventually(t, time.Minute, "a first point usable at west", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		return err == nil && len(ps.Points) > 0 && ps.Points[0].Usable()
	})
	return prot
}

// holdAGroupSnapshot logs every call east's storage takes from now on
// ("begin M", "end M") and holds the next group snapshot there (a cut's)
// until release: it returns once that call has reached the storage, with
// when it did.
func holdAGroupSnapshot(t *testing.T, ctx context.Context, f *fixture) (log *rpcLog, at time.Time, release func()) {
	t.Helper()
	log = &rpcLog{}
	var (
		mu    sync.Mutex
		armed = true
		held  = make(chan time.Time, 1)
		gate  = make(chan struct{})
		once  sync.Once
	)
	release = func() { once.Do(func() { close(gate) }) }
	f.setOnRPC(func(site, method string, _ any, handle func() (any, error)) (any, error) {
		if site != "east" {
			return handle()
		}
		log.add("begin " + method)
		mu.Lock()
		hold := armed && method == "CreateVolumeGroupSnapshot"
		if hold {
			armed = false
		}
		mu.Unlock()
		if hold {
			held <- time.Now()
			<-gate
		}
		out, err := handle()
		log.add("end " + method)
		return out, err
	})
	select {
	case at = <-held:
	case <-ctx.Done():
		release()
		t.Fatal("no cut reached east's storage")
	}
	return log, at, release
}

// TestFailbackPausesProtectionsPoints: a failback does not demote the
// primary while protection's calls for a point run there, and
// protection starts none from then until the failback has resynced.
// Protection cuts points at east, the primary (cut: primary); one cut's
// group snapshot is held at east's storage while a failback to west
// starts. The failback's step "pause protection's points" waits for it;
// no DemoteVolume reaches east until every point call there has ended,
// and no point call begins at east from the first demotion until the
// resync's last answer. The cut under way is cut short, and says why.
// Once the failback has moved protection to west, points are cut there.
func TestFailbackPausesProtectionsPoints(t *testing.T) {
	srv, f := pointsOnDevServer(t, plans.PointsInTime{Every: plans.Duration(time.Second), Keep: 3, Cut: plans.CutPrimary})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prot := protectUntilAPoint(t, ctx, srv, f)

	log, _, doRelease := holdAGroupSnapshot(t, ctx, f)
	defer doRelease()
	pointCall := func(m string) bool { return slices.Contains(pointRPCs, m) }
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, err)
	pause := "pause protection's points"
	waitFor(t, ctx, srv.Client, run, pause, workflows.StateRunning)
	time.Sleep(time.Second)
	if slices.Contains(log.all(), "begin DemoteVolume") {
		t.Fatalf("the failback demoted east while a cut's group snapshot ran there: %v", log.all())
	}
	doRelease()
	var fb workflows.FailbackResult
	mustOK(t, run.Get(ctx, &fb))
	allDone(t, fb.Progress)
	record(t, ctx, srv.Client, run, "failback-points")
	i := slices.IndexFunc(fb.Steps, func(s *workflows.Step) bool { return s.Name == pause })
	if i < 0 || !strings.Contains(fb.Steps[i].Output, "ended first") {
		t.Fatalf("the pause step: %+v; want it to say it waited for the cut's calls", fb.Steps)
	}
	t.Logf("%s: %s", pause, fb.Steps[i].Output)

	// The order at east.
	events := log.all()
	running := map[string]int{}
	demoted, resyncEnd := -1, -1
	for j, e := range events {
		kind, m, _ := strings.Cut(e, " ")
		if m == "ResyncVolume" && kind == "end" {
			resyncEnd = j
		}
	}
	for j, e := range events[:resyncEnd+1] {
		kind, m, _ := strings.Cut(e, " ")
		if kind == "begin" && m == "DemoteVolume" && demoted < 0 {
			demoted = j
			if n := running["point"]; n > 0 {
				t.Fatalf("east's first DemoteVolume began with %d point call(s) under way there: %v", n, events[:j+1])
			}
		}
		if !pointCall(m) {
			continue
		}
		if kind == "begin" {
			running["point"]++
			if demoted >= 0 {
				t.Fatalf("protection's %s began at east after the failback's demotion there, before its resync ended: %v", m, events[demoted:j+1])
			}
		} else {
			running["point"]--
		}
	}
	if demoted < 0 || resyncEnd < demoted {
		t.Fatalf("east saw no demotion then resync: %v", events)
	}

	// The cut under way was cut short, and says why.
	short := "cut short: protection's points were paused by run " + run.GetID()
	simtest.Eventually(t, time.Minute, "the cut short point in the record", func() bool {
		rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
		if err != nil || rec == nil {
			return false
		}
		return slices.ContainsFunc(rec.Points, func(pt workflows.PointInTime) bool { return strings.Contains(pt.Error, short) }) ||
			slices.ContainsFunc(rec.Pruned, func(x workflows.PrunedPoint) bool { return strings.Contains(x.Why, short) })
	})
	// Protection follows the failback to west and cuts there.
	done := time.Now()
	simtest.Eventually(t, time.Minute, "a point cut at west after the failback", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		if err != nil || ps.Primary != "west" || ps.PointsPaused != nil {
			return false
		}
		return slices.ContainsFunc(ps.Points, func(pt workflows.PointInTime) bool {
			return pt.CutAt == "west" && pt.Taken.After(done) && pt.Error == ""
		})
	})
	// The run of protection that took the pause, which the failback's
	// retarget ended.
	record(t, ctx, srv.Client, prot, "protect-paused")
	t.Logf("east's calls: %s", strings.Join(events, ", "))
}

// failbackAtGate starts a failback from east, where protection cuts
// points every 500 ms (cut: primary), to west, waiting at gate.
func failbackAtGate(t *testing.T, ctx context.Context, gate string) (*devserver.Server, client.WorkflowRun) {
	t.Helper()
	srv, f := pointsOnDevServer(t, plans.PointsInTime{Every: plans.Duration(500 * time.Millisecond), Keep: 3, Cut: plans.CutPrimary})
	protectUntilAPoint(t, ctx, srv, f)
	gated := *f.plan
	gated.Policy.Approvals = []string{gate}
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failback, workflows.FailbackInput{Plan: &gated, From: "east", To: "west"})
	mustOK(t, err)
	waitFor(t, ctx, srv.Client, run, "approve "+gate, workflows.StateWaiting)
	return srv, run
}

// TestPointsResumeWhenThePausingActionEnds: a failback that waits for an
// approval after its demotion keeps protection's points paused (no cut
// in several of their intervals), while protection still polls every
// group's replication; once it ends (here terminated) protection finds
// it gone and cuts again.
func TestPointsResumeWhenThePausingActionEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, run := failbackAtGate(t, ctx, "beforePromote")
	ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
	mustOK(t, err)
	if ps.PointsPaused == nil || !strings.Contains(ps.PointsPaused.By, run.GetRunID()) {
		t.Fatalf("protection's pause while the failback waits: %+v; want the failback's", ps.PointsPaused)
	}
	last, paused := ps.LastCut, time.Now()
	time.Sleep(3 * time.Second) // six of the points' intervals
	ps, err = workflows.ReadProtect(ctx, srv.Client, "shop")
	mustOK(t, err)
	if !ps.LastCut.Equal(last) {
		t.Fatalf("protection cut at %v while the failback that paused its points waited (last cut before: %v)", ps.LastCut, last)
	}
	// Replication is still polled (docs/guides/point-in-time.md, "A failback pauses the
	// points").
	if len(ps.Groups) == 0 {
		t.Fatal("protection reports no group")
	}
	for g, h := range ps.Groups {
		if !h.Checked.After(paused) {
			t.Errorf("group %s: replication last checked at %v, before the points were paused at %v", g, h.Checked, paused)
		}
	}
	mustOK(t, srv.Client.TerminateWorkflow(ctx, run.GetID(), run.GetRunID(), "the test ends it"))
	ended := time.Now()
	simtest.Eventually(t, time.Minute, "a cut after the failback ended", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		return err == nil && ps.PointsPaused == nil && ps.LastCut.After(ended)
	})
	t.Logf("no cut from %v while the failback waited; cut again after it ended", last)

	// Forged pauses: none takes, and protection goes on cutting.
	var sent workflows.PointsPause
	it := srv.Client.GetWorkflowHistory(ctx, workflows.ProtectID("shop"), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		mustOK(t, err)
		if a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes(); a != nil && a.GetAcceptedRequest().GetInput().GetName() == workflows.UpdatePausePoints {
			mustOK(t, converter.GetDefaultDataConverter().FromPayloads(a.GetAcceptedRequest().GetInput().GetArgs(), &sent))
		}
	}
	if sent.Proof == nil {
		t.Fatal("no sealed pause in protection's history")
	}
	now := time.Now()
	by := workflows.ActionHolder(workflows.ActionID("shop"), "0f3c-forged")
	otherKey, err := (&workflows.RecordSender{Key: []byte(strings.Repeat("k", 32))}).SealPauseAt("shop", workflows.PointsPause{By: by}, now)
	mustOK(t, err)
	hold, err := (&workflows.RecordSender{}).SealHoldAt("shop", workflows.PointHold{By: by}, now)
	mustOK(t, err)
	for _, a := range []struct {
		name string
		pp   workflows.PointsPause
		says string
	}{
		{"no seal", workflows.PointsPause{By: by}, "no worker's seal"},
		{"no run of the plan's action", workflows.PointsPause{By: "someone"}, "is no run of plan"},
		{"another workflow's run", workflows.PointsPause{By: workflows.ActionHolder("never-ends", "r1")}, "is no run of plan"},
		{"another key's seal", otherKey, "not one of this worker's record key"},
		{"a hold's seal", workflows.PointsPause{By: by, Proof: hold.Proof}, "not one of this worker's record key"},
		{"the failback's sealed pause sent again", sent, "sent again"},
	} {
		h, err := srv.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: workflows.ProtectID("shop"), UpdateName: workflows.UpdatePausePoints,
			Args: []any{a.pp}, WaitForStage: client.WorkflowUpdateStageCompleted})
		if err == nil {
			err = h.Get(ctx, nil)
		}
		if err == nil || !strings.Contains(err.Error(), a.says) {
			t.Errorf("%s: %v; want a refusal saying %q", a.name, err, a.says)
		}
	}
	after := time.Now()
	simtest.Eventually(t, time.Minute, "a cut after the forged pauses", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		return err == nil && ps.PointsPaused == nil && ps.LastCut.After(after)
	})
}

// TestPointsStayPausedAfterAFailbackThatPromoted: a failback that ended
// after it promoted west (here terminated at its beforeStart gate, the
// record naming west the primary) leaves east demoted and not resynced
// under protection, which still runs from east: the points stay paused
// (no cut in several of their intervals), until protection moves on.
func TestPointsStayPausedAfterAFailbackThatPromoted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, run := failbackAtGate(t, ctx, "beforeStart")
	simtest.Eventually(t, time.Minute, "the record to name west the primary", func() bool {
		rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
		return err == nil && rec != nil && rec.Primary == "west"
	})
	mustOK(t, srv.Client.TerminateWorkflow(ctx, run.GetID(), run.GetRunID(), "the test ends it after the promotion"))
	ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
	mustOK(t, err)
	last := ps.LastCut
	time.Sleep(3 * time.Second) // six of the points' intervals, each a round asking whether the pause ended
	ps, err = workflows.ReadProtect(ctx, srv.Client, "shop")
	mustOK(t, err)
	if ps.Primary != "east" || ps.PointsPaused == nil || !ps.LastCut.Equal(last) {
		t.Fatalf("after a failback that promoted west ended: protection from %s, paused %+v, last cut %v (before: %v); want east's points still paused",
			ps.Primary, ps.PointsPaused, ps.LastCut, last)
	}
}

// TestFailbackWaitsForAPointCallItGaveUpOn: a point call whose deadline
// passed (the storage still at it, as ceph-csi's librbd calls run to
// their end) counts as under way for as long again: the failback's
// demotion does not begin before the storage has answered it.
func TestFailbackWaitsForAPointCallItGaveUpOn(t *testing.T) {
	srv, f := pointsOnDevServer(t, plans.PointsInTime{Every: plans.Duration(time.Second), Keep: 3, Cut: plans.CutPrimary})
	f.deadline(activities.RPCCreateVolumeGroupSnapshot, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	protectUntilAPoint(t, ctx, srv, f)

	log, at, release := holdAGroupSnapshot(t, ctx, f)
	defer release()
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, err)
	// The call's deadline passes at 2 s; the storage answers at 3.5 s,
	// within the 7 s more (its deadline and grace) the pause waits.
	time.Sleep(time.Until(at.Add(3500 * time.Millisecond)))
	if slices.Contains(log.all(), "begin DemoteVolume") {
		t.Fatalf("the failback demoted east while a point call it gave up on still ran there: %v", log.all())
	}
	release()
	var fb workflows.FailbackResult
	mustOK(t, run.Get(ctx, &fb))
	events := log.all()
	end, demote := slices.Index(events, "end CreateVolumeGroupSnapshot"), slices.Index(events, "begin DemoteVolume")
	if end < 0 || demote < 0 || demote < end {
		t.Fatalf("east's calls: %v; want the held group snapshot answered before the first demotion", events)
	}
	i := slices.IndexFunc(fb.Steps, func(s *workflows.Step) bool { return s.Name == "pause protection's points" })
	if i < 0 || !strings.Contains(fb.Steps[i].Output, "ended without the storage's answer") {
		t.Fatalf("the pause step: %+v", fb.Steps)
	}
	t.Logf("pause protection's points: %s", fb.Steps[i].Output)
}

// TestPausePointsStepIsAGuard: the failback's pause of protection's
// points is a guard (docs/guides/point-in-time.md, "A failback pauses the points"). Where the
// pause cannot be made (here the worker has no client to reach
// protection), the failback pauses at that step before any demotion; a
// skip without --override is refused, one with it is taken, with the
// operator's name, and only then does the failback demote and go on.
func TestPausePointsStepIsAGuard(t *testing.T) {
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(time.Minute), Keep: 3})
	env, calls := f.env(t)
	var paused *workflows.Step
	var refused error
	var skipped, demotedWhilePaused bool
	env.RegisterDelayedCallback(func() {
		paused = pausedStep(t, env)
		demotedWhilePaused = indexOf(*calls, "DemoteVolume", "", "") >= 0
		if paused == nil {
			return
		}
		send(t, env, workflows.UpdateResolve, workflows.Decision{Step: paused.ID, Action: workflows.DecisionSkip, By: "operator"},
			func() { t.Error("a skip of the pause step without override was accepted") }, func(err error) { refused = err })
		send(t, env, workflows.UpdateResolve, workflows.Decision{Step: paused.ID, Action: workflows.DecisionSkip, Override: true, By: "operator"},
			func() { skipped = true }, nil)
	}, time.Hour)
	env.ExecuteWorkflow(workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, env.GetWorkflowError())
	if paused == nil || paused.Name != "pause protection's points" || !paused.Guard {
		t.Fatalf("after an hour the paused step is %+v; want the guard that pauses protection's points", paused)
	}
	if demotedWhilePaused {
		t.Fatal("a copy was demoted while the pause step was paused")
	}
	if refused == nil || !strings.Contains(refused.Error(), "needs --override") {
		t.Fatalf("skip of the pause step without override: %v; want a refusal that asks for --override", refused)
	}
	if !skipped {
		t.Fatal("the skip of the pause step with override was not accepted")
	}
	var fb workflows.FailbackResult
	mustOK(t, env.GetWorkflowResult(&fb))
	for _, s := range fb.Steps {
		if s.ID == paused.ID && (s.State != workflows.StateSkipped || s.By != "operator") {
			t.Errorf("the pause step ended %s by %q; want skipped by the operator", s.State, s.By)
		}
	}
	// It ran to its end with a step skipped: incomplete.
	if fb.State != workflows.StateIncomplete || indexOf(*calls, "DemoteVolume", "east", "") < 0 {
		t.Fatalf("the failback ended %s after the skip; calls:\n%v", fb.State, *calls)
	}
}

// TestFailoverDoesNotPauseThePoints: a failover of a plan with points
// takes no pause of protection's points (docs/guides/point-in-time.md, "A failback
// pauses the points"): it waits on no call of protection's, and here, where the
// pause could not be made (the worker has no client to reach
// protection), it would stop for the operator. It completes, with no
// such step.
func TestFailoverDoesNotPauseThePoints(t *testing.T) {
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(time.Minute), Keep: 3, Cut: plans.CutPrimary})
	f.east.Down()
	env, _ := f.env(t)
	env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, env.GetWorkflowError())
	var res workflows.FailoverResult
	mustOK(t, env.GetWorkflowResult(&res))
	if res.State != workflows.StateCompleted {
		t.Fatalf("the failover ended %s", res.State)
	}
	for _, s := range res.Steps {
		if s.Kind() == workflows.KindPausePoints {
			t.Fatalf("the failover took the step %q (%s)", s.Name, s.State)
		}
	}
}

// TestStartedStateNamesNoPause: a state given at a protection's start
// that says its points are paused (by a run of the plan's action that
// never ends, say) is not taken: a pause comes only sealed, by the
// update. Protection cuts points as the policy says.
func TestStartedStateNamesNoPause(t *testing.T) {
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(time.Minute), Keep: 3})
	env, _ := f.testEnv(t)
	got := stateThenStop(t, env, 2*time.Minute+30*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second,
		State: &workflows.ProtectState{Primary: "east", PointsPaused: &workflows.PointsPause{By: workflows.ActionHolder(workflows.ActionID("shop"), "never-ends")}}})
	mustOK(t, env.GetWorkflowError())
	s := *got
	if s == nil || s.PointsPaused != nil || len(s.Points) < 2 {
		t.Fatalf("state after a start that named a pause: %+v; want no pause and points cut", s)
	}
}

// TestNoCutWhilePointsArePaused: protection cuts no point while an
// action's pause holds, however due a cut is, and cuts again once the
// pause ends (in the test environment, no dev server). Protection of
// shop from east cuts at the primary, polling every 10 s. The pause
// comes while east's storage holds one of protection's calls for its
// points: the second cut's first group snapshot (a cut every minute), or
// a read of a pending point's copy before a cut that is due (a cut every
// 10 s). From then no storage call for a point begins at east (no
// snapshot, group snapshot, copy or enable, no prune), a cut under way
// is cut short naming the pausing run, and no point is cut in the four
// minutes of due cuts that follow. The pause ends (PauseEnded says so)
// and protection cuts again.
func TestNoCutWhilePointsArePaused(t *testing.T) {
	secondCut := func(n *int) func(string, any) bool {
		return func(method string, _ any) bool {
			if method != "CreateVolumeGroupSnapshot" {
				return false
			}
			*n++
			return *n == 3
		}
	}
	copyRead := func(method string, req any) bool {
		r, ok := req.(*replication.GetVolumeReplicationInfoRequest)
		return ok && method == "GetVolumeReplicationInfo" &&
			(strings.HasPrefix(r.GetVolumeId(), "clone-") || strings.HasPrefix(r.GetReplicationSource().GetVolume().GetVolumeId(), "clone-"))
	}
	var n int
	for _, c := range []struct {
		name  string
		every time.Duration
		pause func(method string, req any) bool
		short bool
	}{
		{"during a cut", time.Minute, secondCut(&n), true},
		{"before a due cut", 10 * time.Second, copyRead, false},
	} {
		t.Run(c.name, func(t *testing.T) { noCutWhilePaused(t, c.every, c.pause, c.short) })
	}
}

// noCutWhilePaused runs TestNoCutWhilePointsArePaused's protection,
// cutting every every, paused as east's storage takes the first call
// for which pause says so; short: a cut is under way then.
func noCutWhilePaused(t *testing.T, every time.Duration, pause func(method string, req any) bool, short bool) {
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(every), Keep: 10, Cut: plans.CutPrimary})
	env, _ := f.testEnv(t)
	by := workflows.ActionHolder(workflows.ActionID("shop"), "r-pausing")

	var ended atomic.Bool
	env.OnActivity("PauseEnded", mock.Anything, mock.Anything).Return(func(_ context.Context, in workflows.PauseEndInput) (string, error) {
		if in.By != by {
			t.Errorf("PauseEnded asked of %q, want %q", in.By, by)
		}
		if ended.Load() {
			return "the action that paused them ended", nil
		}
		return "", nil
	})
	// The pause is in effect once its seal is checked (a local activity:
	// the handler sets the pause in the workflow task that follows). The
	// environment names a completed local activity by its wrapper, so the
	// check is found by its ID when it starts. (The fixture's listener of
	// local activities' starts is replaced: this test reads no calls.)
	checked := make(chan struct{})
	var checkOnce sync.Once
	var checkID atomic.Value
	env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
		if info.ActivityType.Name == "CheckRecordProof" {
			checkID.Store(info.ActivityID)
		}
	})
	env.SetOnLocalActivityCompletedListener(func(info *activity.Info, _ converter.EncodedValue, _ error) {
		if id, _ := checkID.Load().(string); id != "" && id == info.ActivityID {
			checkOnce.Do(func() { close(checked) })
		}
	})
	var (
		accepted, completed atomic.Bool
		rejected            atomic.Value
	)
	log := &rpcLog{}
	var (
		pauseMu  sync.Mutex
		pausedAt time.Time
	)
	f.setOnRPC(func(site, method string, req any, handle func() (any, error)) (any, error) {
		if site != "east" {
			return handle()
		}
		log.add("begin " + method)
		pauseMu.Lock()
		now := pausedAt.IsZero() && pause(method, req)
		if now {
			pausedAt = env.Now()
		}
		pauseMu.Unlock()
		if now {
			// The pause comes while the storage holds this call.
			pp, err := (&workflows.RecordSender{}).SealPauseAt("shop", workflows.PointsPause{By: by}, pausedAt)
			mustOK(t, err)
			env.UpdateWorkflow(workflows.UpdatePausePoints, "", &testsuite.TestUpdateCallback{
				OnAccept:   func() { accepted.Store(true) },
				OnReject:   func(err error) { rejected.Store(err.Error()); checkOnce.Do(func() { close(checked) }) },
				OnComplete: func(any, error) { completed.Store(true) }}, pp)
			select {
			case <-checked:
			case <-time.After(time.Minute):
				t.Error("the pause's seal was not checked within a minute")
			}
			log.add("paused")
		}
		out, err := handle()
		log.add("end " + method)
		return out, err
	})
	var endAt time.Time
	env.RegisterDelayedCallback(func() {
		endAt = env.Now()
		log.add("pause ends")
		ended.Store(true)
	}, 4*time.Minute+5*time.Second)
	got := stateThenStop(t, env, 6*time.Minute+5*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	mustOK(t, env.GetWorkflowError())
	if r := rejected.Load(); r != nil {
		t.Fatalf("the pause was refused: %v", r)
	}
	if !accepted.Load() || !completed.Load() {
		t.Fatalf("the pause: accepted %v, answered %v", accepted.Load(), completed.Load())
	}
	events := log.all()
	from, to := slices.Index(events, "paused"), slices.Index(events, "pause ends")
	if from < 0 || to < from {
		t.Fatalf("east's calls: %v; want the pause, then its end", events)
	}
	pointCall := func(m string) bool { return slices.Contains(append(pointRPCs, "CreateVolumeGroupSnapshot"), m) }
	for _, e := range events[from:to] {
		if kind, m, _ := strings.Cut(e, " "); kind == "begin" && pointCall(m) {
			t.Fatalf("protection's %s began at east while its points were paused: %v", m, events[from:to])
		}
	}
	if !slices.ContainsFunc(events[to:], func(e string) bool { return e == "begin CreateVolumeGroupSnapshot" }) {
		t.Fatalf("no cut at east after the pause ended: %v", events[to:])
	}

	// The points protection told its record of: the first, the second
	// cut short (pruned once the cuts went on), none while paused, then
	// cuts again.
	s := *got
	if s == nil {
		t.Fatal("no state read")
	}
	sent, _ := f.pointChanges()
	cutShort := "cut short: protection's points were paused by " + by
	shorts, after := 0, 0
	for _, pt := range append(sent, s.Points...) {
		switch {
		case pt.Taken.After(endAt):
			after++
		case pt.Taken.Before(pausedAt):
		case short && strings.Contains(pt.Error, cutShort):
			shorts++
		default:
			t.Fatalf("point %s cut at %v while the points were paused (from %v to %v): %+v", pt.ID, pt.Taken, pausedAt, endAt, pt)
		}
	}
	if short && shorts == 0 {
		t.Fatalf("no point cut short by the pause: %+v", sent)
	}
	if after == 0 {
		t.Fatalf("no point cut after the pause ended at %v: %+v", endAt, s.Points)
	}
	if s.PointsPaused != nil {
		t.Fatalf("still paused at the end: %+v", s.PointsPaused)
	}
}
