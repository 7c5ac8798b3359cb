package workflows_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// pointHolding is the point of v1's snapshot holding data on west, if
// any of those in the plan's record does.
func pointHolding(f *fixture, points []workflows.PointInTime, data string) *workflows.PointInTime {
	st := f.west.Snapshot()
	for i := len(points) - 1; i >= 0; i-- {
		for _, g := range points[i].Groups {
			for _, sn := range g.Snapshots {
				if sn.Volume != "v1" {
					continue
				}
				if points[i].CutAt != "" {
					// Cut at the primary: its copy at west, once synced.
					if u := st.Unit("vol/" + sn.Copy); points[i].Usable() && u != nil && string(u.Blocks[sn.Copy][0].Data) == data {
						return &points[i]
					}
					continue
				}
				j := slices.IndexFunc(st.Snapshots, func(s sim.SnapshotState) bool { return s.ID == sn.ID })
				if j >= 0 && string(st.Snapshots[j].Blocks[0].Data) == data {
					return &points[i]
				}
			}
		}
	}
	return nil
}

// cleanThenDamage writes "clean" on east's v1, starts the plan's
// protection, waits for a point holding it, then writes "damage" and
// waits for a point holding that: it returns the protection and the
// clean point.
func cleanThenDamage(t *testing.T, ctx context.Context, srv *devserver.Server, f *fixture) (client.WorkflowRun, workflows.PointInTime) {
	t.Helper()
	east, err := sim.NewClient(f.east.DataAddr(), simtest.NodeA, "east-node")
	mustOK(t, err)
	defer east.Close()
	_, err = east.Write(ctx, "v1", 0, []byte("clean"))
	mustOK(t, err)
	prot, err := workflows.StartProtect(ctx, srv.Client, f.plan, "east", 200*time.Millisecond, workflows.Origin{})
	mustOK(t, err)
	var clean workflows.PointInTime
	simtest.Eventually(t, time.Minute, "a point holding the clean write", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		if err != nil {
			return false
		}
		if pt := pointHolding(f, ps.Points, "clean"); pt != nil {
			clean = *pt
			return true
		}
		return false
	})
	_, err = east.Write(ctx, "v1", 0, []byte("damage"))
	mustOK(t, err)
	simtest.Eventually(t, time.Minute, "a point holding the damage", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		return err == nil && pointHolding(f, ps.Points, "damage") != nil
	})
	return prot, clean
}

// TestTestRecoveryFromAPoint: on the dev server, with protection cutting
// a point every 2 s (keep 3), a write "clean" on east, then "damage"
// once a point holds "clean". A test recovery at west from the time of
// that point copies its snapshots, not the replicas: the test's copy of
// v1 holds "clean" while the replica holds "damage". While the test
// runs, the point is held under the run's name and is never pruned
// though newer points go; a release of that hold sent without the
// worker's seal is refused. Once the test ends, its copies are deleted,
// the point's snapshots kept, and the hold released (the point then goes
// with the next prune). With protection stopped, a second test holds
// its point in the plan's record; terminated, it ran no cleanup, and the
// cleanup workflow (drctl test-recovery --cleanup) deletes its copies,
// keeps the point's snapshots and releases the hold in the record.
func TestTestRecoveryFromAPoint(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(2 * time.Second), Keep: 3})
	addTestHooks(f)
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	prot, clean := cleanThenDamage(t, ctx, srv, f)

	run, err := workflows.StartTestRecovery(ctx, srv.Client, workflows.TestRecoveryInput{Plan: f.plan, At: "west", PointAt: clean.Taken})
	mustOK(t, err)
	holder := workflows.ActionHolder(run.GetID(), run.GetRunID())
	waitFor(t, ctx, srv.Client, run, "approve "+workflows.GateEndTest, workflows.StateWaiting)
	during := f.west.Snapshot()
	if len(during.Clones) != 4 {
		t.Fatalf("west holds %d copies during the test, want 4", len(during.Clones))
	}
	var v1 *sim.CloneState
	for i := range during.Clones {
		c := &during.Clones[i]
		for _, g := range clean.Groups {
			for _, sn := range g.Snapshots {
				if sn.Volume == "v1" && sn.ID == c.Snapshot {
					v1 = c
				}
			}
		}
	}
	if v1 == nil {
		t.Fatalf("no copy of the point's v1 snapshot: copies %+v, point %+v", during.Clones, clean)
	}
	if got := string(v1.Blocks[0].Data); got != "clean" {
		t.Fatalf("the copy of v1 holds %q, want the point's clean data", got)
	}
	if got := string(during.Unit("vg/vg-1").Blocks["v1"][0].Data); got != "damage" {
		t.Fatalf("west's replica holds %q; the damage should have replicated", got)
	}
	// Held under the run's name while newer points come and go.
	simtest.Eventually(t, time.Minute, "newer points pruned around the held one", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		if err != nil || ps.PrunedCount == 0 {
			return false
		}
		i := slices.IndexFunc(ps.Points, func(x workflows.PointInTime) bool { return x.ID == clean.ID })
		newest := workflows.NewestPoint(ps.Points)
		return i >= 0 && slices.Equal(ps.Points[i].Held, []string{holder}) && len(ps.Points) == 4 && newest != nil &&
			newest.Taken.Sub(clean.Taken) > 8*time.Second
	})
	update := func(name string, arg any) error {
		uh, err := srv.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: prot.GetID(), UpdateName: name,
			Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageCompleted})
		if err != nil {
			return err
		}
		return uh.Get(ctx, nil)
	}
	if err := update(workflows.UpdateHoldPoint, workflows.PointHold{Point: clean.ID, By: holder, Release: true}); err == nil || !strings.Contains(err.Error(), "seal") {
		t.Fatalf("a release of the test's hold without a seal: %v", err)
	}
	ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
	mustOK(t, err)
	if i := slices.IndexFunc(ps.Points, func(x workflows.PointInTime) bool { return x.ID == clean.ID }); i < 0 || !slices.Contains(ps.Points[i].Held, holder) {
		t.Fatalf("after the forged release the points are %+v", ps.Points)
	}

	mustOK(t, approve(ctx, srv.Client, run))
	var res workflows.TestRecoveryResult
	mustOK(t, run.Get(ctx, &res))
	if !res.Cleaned || res.Point == nil || res.Point.ID != clean.ID {
		t.Fatalf("test recovery: cleaned %v, point %+v", res.Cleaned, res.Point)
	}
	if s := stepOf(t, res.Progress, "point/west"); !strings.Contains(s.Output, "point "+clean.ID) {
		t.Fatalf("the point step says %q", s.Output)
	}
	if s := stepOf(t, res.Progress, "cleanup/west"); !strings.Contains(s.Output, "4 copies deleted;") || !strings.Contains(s.Output, clean.ID+" released") {
		t.Fatalf("the cleanup says %q", s.Output)
	}
	after := f.west.Snapshot()
	if len(after.Clones) != 0 {
		t.Fatalf("%d copies left on west", len(after.Clones))
	}
	for _, g := range clean.Groups {
		for _, sn := range g.Snapshots {
			if !slices.ContainsFunc(after.Snapshots, func(s sim.SnapshotState) bool { return s.ID == sn.ID }) {
				ps, _ := workflows.ReadProtect(ctx, srv.Client, "shop")
				if i := slices.IndexFunc(ps.Points, func(x workflows.PointInTime) bool { return x.ID == clean.ID }); i >= 0 {
					t.Fatalf("the point's snapshot %s was deleted by the test's cleanup", sn.ID)
				}
			}
		}
	}
	simtest.Eventually(t, time.Minute, "the released point pruned", func() bool {
		rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
		return err == nil && rec != nil && slices.ContainsFunc(rec.Pruned, func(x workflows.PrunedPoint) bool { return x.ID == clean.ID })
	})

	// Without protection, the hold goes to the record.
	mustOK(t, update(workflows.UpdateStopProtect, workflows.StopProtect{}))
	mustOK(t, prot.Get(ctx, nil))
	run, err = workflows.StartTestRecovery(ctx, srv.Client, workflows.TestRecoveryInput{Plan: f.plan, At: "west", PointAt: time.Now()})
	mustOK(t, err)
	holder = workflows.ActionHolder(run.GetID(), run.GetRunID())
	waitFor(t, ctx, srv.Client, run, "approve "+workflows.GateEndTest, workflows.StateWaiting)
	rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
	mustOK(t, err)
	newest := workflows.NewestPoint(rec.Points)
	if newest == nil || !slices.Equal(newest.Held, []string{holder}) {
		t.Fatalf("with protection stopped the record's points are %+v", rec.Points)
	}
	// Terminated, the test ran no cleanup: drctl test-recovery --cleanup's
	// workflow deletes its copies, keeps the point's snapshots and
	// releases its hold.
	mustOK(t, srv.Client.TerminateWorkflow(ctx, run.GetID(), run.GetRunID(), "test: ended without its cleanup"))
	if n := len(f.west.Snapshot().Clones); n != 4 {
		t.Fatalf("the terminated test left %d copies, want 4", n)
	}
	cr, err := workflows.StartTestCleanup(ctx, srv.Client, workflows.TestCleanupInput{Plan: f.plan, At: "west", Run: run.GetRunID()})
	mustOK(t, err)
	var cres workflows.TestCleanupResult
	mustOK(t, cr.Get(ctx, &cres))
	if !cres.Cleaned {
		t.Fatalf("the cleanup: %+v", cres)
	}
	simtest.Eventually(t, 30*time.Second, "the record's hold released", func() bool {
		rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
		i := slices.IndexFunc(rec.Points, func(x workflows.PointInTime) bool { return x.ID == newest.ID })
		return err == nil && i >= 0 && len(rec.Points[i].Held) == 0
	})
	st := f.west.Snapshot()
	if len(st.Clones) != 0 {
		t.Fatalf("%d copies left on west", len(st.Clones))
	}
	for _, g := range newest.Groups {
		for _, sn := range g.Snapshots {
			if !slices.ContainsFunc(st.Snapshots, func(s sim.SnapshotState) bool { return s.ID == sn.ID }) {
				t.Fatalf("the cleanup deleted the point's snapshot %s", sn.ID)
			}
		}
	}
}

// approve ends a test recovery (gate endTest).
func approve(ctx context.Context, c client.Client, run client.WorkflowRun) error {
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), RunID: run.GetRunID(),
		UpdateName: workflows.UpdateApprove, Args: []any{workflows.Approval{Gate: workflows.GateEndTest, By: "test"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		return err
	}
	return h.Get(ctx, nil)
}

// TestFirstPointReachesANewRecord: protection of a plan that has no
// record yet sends its state and its first point in time at once; the
// first starts the record, and the point, sent while that start is not
// yet taken, must still reach it (it was lost, and with it the point from
// drctl points and from the next protection's pruning).
func TestFirstPointReachesANewRecord(t *testing.T) {
	srv, f := pointsOnDevServer(t, plans.PointsInTime{Every: plans.Duration(time.Hour), Keep: 3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prot, err := workflows.StartProtect(ctx, srv.Client, f.plan, "east", 200*time.Millisecond, workflows.Origin{})
	mustOK(t, err)
	var first string
	simtest.Eventually(t, 30*time.Second, "the first point cut", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		if err != nil || len(ps.Points) == 0 {
			return false
		}
		first = ps.Points[0].ID
		return true
	})
	simtest.Eventually(t, 20*time.Second, "the first point in the plan's record", func() bool {
		rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
		return err == nil && rec != nil && slices.ContainsFunc(rec.Points, func(x workflows.PointInTime) bool { return x.ID == first })
	})
	uh, err := srv.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: prot.GetID(), UpdateName: workflows.UpdateStopProtect,
		Args: []any{workflows.StopProtect{}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	mustOK(t, err)
	mustOK(t, uh.Get(ctx, nil))
}

// TestPointForPicksTheNewestAtOrBefore: a recovery goes back to the
// newest point cut at its site at or before its time, never a failed
// cut, never another site's; PointNewest picks the newest there is; with
// none, the refusal says what there is.
func TestPointForPicksTheNewestAtOrBefore(t *testing.T) {
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	points := []workflows.PointInTime{
		{ID: "a", Site: "west", Taken: at},
		{ID: "b", Site: "west", Taken: at.Add(time.Minute)},
		{ID: "c", Site: "west", Taken: at.Add(2 * time.Minute), Error: "the cut failed"},
		{ID: "d", Site: "east", Taken: at.Add(3 * time.Minute)},
	}
	for _, c := range []struct {
		t    time.Time
		want string
	}{{at, "a"}, {at.Add(90 * time.Second), "b"}, {at.Add(time.Hour), "b"}, {workflows.PointNewest, "b"}} {
		pt, err := workflows.PointFor(points, "west", c.t)
		if err != nil || pt.ID != c.want {
			t.Errorf("at %s: %+v, %v; want %s", c.t, pt, err, c.want)
		}
	}
	if _, err := workflows.PointFor(points, "west", at.Add(-time.Second)); err == nil || !strings.Contains(err.Error(), "(3 later, 0 whose cut failed)") {
		t.Errorf("before every point: %v", err)
	}
	if _, err := workflows.PointFor(nil, "west", workflows.PointNewest); err == nil || !strings.Contains(err.Error(), "no point in time at west: drctl points") {
		t.Errorf("newest of none: %v", err)
	}
}

// TestActionHoldSealTakenOnce: protection takes an action's sealed hold
// once: the same seal sent again is refused, in the same run and after
// protection continued as new (the seals it took go with it), so that a
// hold read from its history cannot pin a point that was released.
func TestActionHoldSealTakenOnce(t *testing.T) {
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(time.Hour), Keep: 5})
	by := workflows.ActionHolder("drover-test-shop", "r1")
	seal := func(env *testsuite.TestWorkflowEnvironment, h workflows.PointHold) workflows.PointHold {
		h, err := (&workflows.RecordSender{}).SealHoldAt("shop", h, env.Now())
		mustOK(t, err)
		return h
	}
	var hold workflows.PointHold
	var twice, again error
	// update sends a hold, and gives its outcome (the seal is checked
	// once the update is accepted) to done.
	update := func(env *testsuite.TestWorkflowEnvironment, h workflows.PointHold, done func(error)) {
		env.UpdateWorkflow(workflows.UpdateHoldPoint, "", &testsuite.TestUpdateCallback{OnAccept: func() {},
			OnReject: done, OnComplete: func(_ any, err error) { done(err) }}, h)
	}
	must := func(err error) {
		if err != nil {
			t.Errorf("a hold or release refused: %v", err)
		}
	}
	// Both runs start at the same time: the next run's first cut is the
	// same point (a run started anew takes no points from its input).
	start := time.Now().Truncate(time.Second)
	env, _ := f.testEnv(t)
	env.SetStartTime(start)
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(workflows.QueryProtect)
		mustOK(t, err)
		var s workflows.ProtectState
		mustOK(t, v.Get(&s))
		if len(s.Points) == 0 {
			t.Error("no point at 30s")
			return
		}
		hold = seal(env, workflows.PointHold{Point: s.Points[0].ID, By: by})
		update(env, hold, must)
		update(env, hold, func(err error) { twice = err })
	}, 30*time.Second)
	env.RegisterDelayedCallback(func() {
		update(env, seal(env, workflows.PointHold{Point: hold.Point, By: by, Release: true}), must)
	}, 40*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	next := continuedAs(t, env)
	if twice == nil || !strings.Contains(twice.Error(), "taken before") {
		t.Fatalf("the same hold's seal again: %v", twice)
	}
	if len(next.Seen) != 2 {
		t.Fatalf("protection continued with %d seals taken, want the hold's and the release's", len(next.Seen))
	}
	// The next run, the hold's seal sent again within its ten minutes.
	env, _ = f.testEnv(t)
	env.SetStartTime(start)
	env.RegisterDelayedCallback(func() {
		update(env, hold, func(err error) { again = err })
	}, 15*time.Second)
	held := stateThenStop(t, env, 30*time.Second)
	env.ExecuteWorkflow(workflows.Protect, next)
	if again == nil || !strings.Contains(again.Error(), "taken before") {
		t.Fatalf("the hold's seal again after protection continued as new: %v", again)
	}
	if s := *held; s == nil || len(s.Points) == 0 || len(s.Points[0].Held) != 0 {
		t.Fatalf("after the replayed hold the state is %+v", s)
	}
}

// TestReleaseWithoutItsAnswerFindsTheHeldPoint: a run whose hold's
// answer was lost releases without naming the point (PointUse without
// Point): the worker releases the point the run holds, not the one its
// time picks now, a newer point cut since (--point newest).
func TestReleaseWithoutItsAnswerFindsTheHeldPoint(t *testing.T) {
	srv, f := pointsOnDevServer(t, plans.PointsInTime{Every: plans.Duration(time.Second), Keep: 5})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	protectUntilAPoint(t, ctx, srv, f)
	rs := &workflows.RecordSender{Client: srv.Client}
	by := workflows.ActionHolder(workflows.TestRecoveryID("shop"), "0f3c")
	held, err := rs.HoldPoint(ctx, workflows.PointUse{Plan: "shop", Site: "west", At: workflows.PointNewest, By: by})
	mustOK(t, err)
	simtest.Eventually(t, time.Minute, "a newer point", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		return err == nil && slices.ContainsFunc(ps.Points, func(pt workflows.PointInTime) bool { return pt.Usable() && pt.Taken.After(held.Taken) })
	})
	got, err := rs.HoldPoint(ctx, workflows.PointUse{Plan: "shop", Site: "west", At: workflows.PointNewest, By: by, Release: true})
	mustOK(t, err)
	if got.ID != held.ID || slices.Contains(got.Held, by) {
		t.Fatalf("the release without a point released %q (held by %v); want %q, the point the run held", got.ID, got.Held, held.ID)
	}
	ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
	mustOK(t, err)
	for _, pt := range ps.Points {
		if slices.Contains(pt.Held, by) {
			t.Fatalf("point %s is still held by the released run", pt.ID)
		}
	}
}
