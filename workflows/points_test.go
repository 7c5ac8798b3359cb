package workflows_test

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// pointsFixture is the fixture with the members of both sites' storage
// groups listed and points in time asked for.
func pointsFixture(t *testing.T, pit plans.PointsInTime) *fixture {
	t.Helper()
	f := newFixture(t)
	for i, g := range f.plan.VolumeGroups {
		for site, ref := range g.Sites {
			switch ref.GroupID {
			case "vg-1":
				ref.Members = []string{"v1", "v2"}
			case "vg-2":
				ref.Members = []string{"v3"}
			}
			f.plan.VolumeGroups[i].Sites[site] = ref
		}
	}
	f.plan.Policy.PointsInTime = &pit
	return f
}

// pointsOnDevServer is a fixture whose plan cuts points as pit says,
// with a worker of its activities on a dev server of its own.
func pointsOnDevServer(t *testing.T, pit plans.PointsInTime) (*devserver.Server, *fixture) {
	t.Helper()
	srv := devserver.Start(t, nil)
	f := pointsFixture(t, pit)
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
	return srv, f
}

// deadline sets the plan's deadline of rpc's calls.
func (f *fixture) deadline(rpc string, d time.Duration) {
	if f.plan.Policy.Deadlines == nil {
		f.plan.Policy.Deadlines = map[string]plans.Duration{}
	}
	f.plan.Policy.Deadlines[rpc] = plans.Duration(d)
}

// snapshotsOn are the ids of the snapshots and group snapshots site's
// storage holds.
func snapshotsOn(s *simtest.Site) (snaps, groups []string) {
	st := s.Snapshot()
	for _, sn := range st.Snapshots {
		snaps = append(snaps, sn.ID)
	}
	for _, g := range st.GroupSnapshots {
		groups = append(groups, g.ID)
	}
	sort.Strings(snaps)
	sort.Strings(groups)
	return snaps, groups
}

// snapshotsOf are the ids of the snapshots and group snapshots points
// made.
func snapshotsOf(points []workflows.PointInTime) (snaps, groups []string) {
	for _, pt := range points {
		for _, g := range pt.Groups {
			if g.GroupSnapshot != "" {
				groups = append(groups, g.GroupSnapshot)
			}
			for _, sn := range g.Snapshots {
				snaps = append(snaps, sn.ID)
			}
		}
	}
	sort.Strings(snaps)
	sort.Strings(groups)
	return snaps, groups
}

// pointChanges are the points and prunes protection sent the record.
func (f *fixture) pointChanges() (points []workflows.PointInTime, pruned []workflows.PrunedPoint) {
	f.recordMu.Lock()
	defer f.recordMu.Unlock()
	for _, c := range f.record {
		if c.Point != nil {
			points = append(points, *c.Point)
		}
		if c.Pruned != nil {
			pruned = append(pruned, *c.Pruned)
		}
	}
	return points, pruned
}

// checkKept holds the points protection keeps to what west's storage
// holds: the snapshots of those points, no other, and none on east (the
// primary).
func checkKept(t *testing.T, f *fixture, kept []workflows.PointInTime) {
	t.Helper()
	wantSnaps, wantGroups := snapshotsOf(kept)
	snaps, groups := snapshotsOn(f.west)
	if !slices.Equal(snaps, wantSnaps) || !slices.Equal(groups, wantGroups) {
		t.Fatalf("west holds snapshots %v and group snapshots %v; the points kept made %v and %v", snaps, groups, wantSnaps, wantGroups)
	}
	if s, g := snapshotsOn(f.east); len(s)+len(g) > 0 {
		t.Fatalf("points were cut on the primary east: %v %v", s, g)
	}
	for _, pt := range kept {
		// Two storage groups of one group snapshot each and a loose
		// volume: four snapshots.
		if pt.Site != "west" || !pt.Usable() || len(pt.Groups) != 3 || len(pt.Held) == 0 && pt.PruneError != "" {
			t.Fatalf("point %+v", pt)
		}
		n := 0
		for _, g := range pt.Groups {
			n += len(g.Snapshots)
		}
		if n != 4 {
			t.Fatalf("point %s has %d snapshots, want 4", pt.ID, n)
		}
	}
}

// TestPointsPrunedByCount: with pointsInTime every minute, keep 2,
// protection cuts a point at west (the replicas' site) each minute and,
// after each cut, deletes the points beyond the newest two: west's
// storage holds the snapshots of the two newest points and nothing
// else, east none; the record got every point and every prune with
// why.
func TestPointsPrunedByCount(t *testing.T) {
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(time.Minute), Keep: 2})
	env, _ := f.testEnv(t)
	got := stateThenStop(t, env, 4*time.Minute+30*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	mustOK(t, env.GetWorkflowError())
	s := *got
	if s == nil {
		t.Fatal("no state read")
	}
	sent, pruned := f.pointChanges()
	var ids []string
	for _, pt := range sent {
		if !slices.Contains(ids, pt.ID) {
			ids = append(ids, pt.ID)
		}
	}
	if len(ids) < 4 {
		t.Fatalf("%d points cut in 4m30s at one a minute: %v", len(ids), ids)
	}
	if len(s.Points) != 2 || s.PrunedCount != len(ids)-2 || len(pruned) != len(ids)-2 {
		t.Fatalf("%d points cut; kept %d, pruned %d (record told of %d)", len(ids), len(s.Points), s.PrunedCount, len(pruned))
	}
	// The newest two are kept, oldest first.
	if s.Points[0].ID != ids[len(ids)-2] || s.Points[1].ID != ids[len(ids)-1] {
		t.Fatalf("kept %s and %s; cut %v", s.Points[0].ID, s.Points[1].ID, ids)
	}
	for i, x := range pruned {
		if x.ID != ids[i] || x.Why != "beyond the newest 2 (keep)" || x.Site != "west" {
			t.Fatalf("pruned %+v, want %s beyond the newest 2", x, ids[i])
		}
	}
	checkKept(t, f, s.Points)
}

// TestPointsPrunedByAge: with keepFor 2m30s and no count, each cut
// deletes the points older than 2m30s at that moment and keeps the
// others.
func TestPointsPrunedByAge(t *testing.T) {
	keepFor := 2*time.Minute + 30*time.Second
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(time.Minute), KeepFor: plans.Duration(keepFor)})
	env, _ := f.testEnv(t)
	got := stateThenStop(t, env, 5*time.Minute+30*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	mustOK(t, env.GetWorkflowError())
	s := *got
	if s == nil || len(s.Points) == 0 {
		t.Fatalf("state %+v", s)
	}
	newest := s.Points[len(s.Points)-1]
	_, pruned := f.pointChanges()
	if len(pruned) == 0 || s.PrunedCount != len(pruned) {
		t.Fatalf("pruned %d, the record told of %d", s.PrunedCount, len(pruned))
	}
	for _, pt := range s.Points {
		if newest.Taken.Sub(pt.Taken) > keepFor {
			t.Fatalf("point %s, %v older than the newest, was kept past keepFor %v", pt.ID, newest.Taken.Sub(pt.Taken), keepFor)
		}
	}
	for _, x := range pruned {
		if x.Pruned.Sub(x.Taken) <= keepFor || !strings.Contains(x.Why, "keepFor") {
			t.Fatalf("point %s pruned %v after its cut: %s", x.ID, x.Pruned.Sub(x.Taken), x.Why)
		}
	}
	if len(s.Points) != 3 {
		t.Fatalf("kept %d points of one a minute for 2m30s, want 3", len(s.Points))
	}
	checkKept(t, f, s.Points)
}

// TestHeldPointIsNeverPruned: a point held (UpdateHoldPoint, as a test
// recovery or failover from it will) stays however old and however many
// newer points there are, with keep 1 and keepFor 1m; a hold of a point
// that does not exist is refused. Released, it goes with the next cut.
func TestHeldPointIsNeverPruned(t *testing.T) {
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(time.Minute), Keep: 1, KeepFor: plans.Duration(time.Minute)})
	env, _ := f.testEnv(t)
	var first string
	var refused, notHeld error
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(workflows.QueryProtect)
		mustOK(t, err)
		var s workflows.ProtectState
		mustOK(t, v.Get(&s))
		if len(s.Points) != 1 {
			t.Errorf("points at 30s: %+v", s.Points)
			return
		}
		first = s.Points[0].ID
		send(t, env, workflows.UpdateHoldPoint, workflows.PointHold{Point: first, By: "drover-test-shop"}, nil, nil)
		send(t, env, workflows.UpdateHoldPoint, workflows.PointHold{Point: "19990101T000000Z", By: "drover-test-shop"},
			func() { t.Error("a hold of no point was taken") }, func(err error) { refused = err })
	}, 30*time.Second)
	var heldSnaps, heldGroups []string
	held := stateAt(t, env, 4*time.Minute+30*time.Second, func() {
		heldSnaps, heldGroups = snapshotsOn(f.west)
		// A release by someone who holds nothing releases nothing
		// (issue 56), and says so.
		send(t, env, workflows.UpdateHoldPoint, workflows.PointHold{Point: first, By: "mallory", Release: true},
			func() { t.Error("a release by someone who holds nothing was taken") }, func(err error) { notHeld = err })
		send(t, env, workflows.UpdateHoldPoint, workflows.PointHold{Point: first, By: "drover-test-shop", Release: true}, nil, nil)
	})
	released := stateThenStop(t, env, 5*time.Minute+30*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	mustOK(t, env.GetWorkflowError())
	if refused == nil || !strings.Contains(refused.Error(), "no point") {
		t.Fatalf("the hold of no point: %v", refused)
	}
	if notHeld == nil || !strings.Contains(notHeld.Error(), `mallory holds no hold of point`) || !strings.Contains(notHeld.Error(), "held by drover-test-shop") {
		t.Fatalf("the release by someone who holds nothing: %v", notHeld)
	}
	s := *held
	if s == nil || len(s.Points) != 2 || s.Points[0].ID != first || !slices.Equal(s.Points[0].Held, []string{"drover-test-shop"}) {
		t.Fatalf("at 4m30s, with %s held, the points are %+v", first, s.Points)
	}
	if s.PrunedCount < 3 {
		t.Fatalf("at 4m30s only %d points were pruned", s.PrunedCount)
	}
	if wantSnaps, wantGroups := snapshotsOf(s.Points); !slices.Equal(heldSnaps, wantSnaps) || !slices.Equal(heldGroups, wantGroups) {
		t.Fatalf("at 4m30s west held %v and %v; the points kept made %v and %v", heldSnaps, heldGroups, wantSnaps, wantGroups)
	}
	// The record knows it is held.
	sent, _ := f.pointChanges()
	if i := slices.IndexFunc(sent, func(pt workflows.PointInTime) bool { return pt.ID == first && len(pt.Held) == 1 }); i < 0 {
		t.Fatalf("the record was not told of the hold: %+v", sent)
	}
	// Released, the next cut prunes it.
	r := *released
	if r == nil || len(r.Points) != 1 || r.Points[0].ID == first {
		t.Fatalf("after the release the points are %+v", r.Points)
	}
	if !slices.ContainsFunc(r.Pruned, func(x workflows.PrunedPoint) bool { return x.ID == first }) {
		t.Fatalf("%s is not among the pruned: %+v", first, r.Pruned)
	}
	checkKept(t, f, r.Points)
}

// TestPointHoldsLastSyncAndSaysNotInSync: a point holds the replicas'
// data as of the last sync the primary reported before the cut, and
// records that sync; with the link between the sites cut and a write on
// the primary that never shipped, the next point says its replicas were
// not in sync (the primary reports replication DEGRADED), records the
// last sync before the cut, and its snapshot holds the data of that
// sync, not the write.
func TestPointHoldsLastSyncAndSaysNotInSync(t *testing.T) {
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(time.Minute), Keep: 5})
	env, _ := f.testEnv(t)
	ctx := context.Background()
	var synced time.Time
	env.RegisterDelayedCallback(func() {
		// A shipping round under way when the link is cut still ships:
		// the write comes once east reports the link down.
		f.east.SetLink(false)
		ins, err := activities.ReplicationInputs(f.plan, "east", "db", activities.RPCGetVolumeReplicationInfo, false)
		mustOK(t, err)
		for deadline := time.Now().Add(20 * time.Second); ; {
			info, err := f.storage.GetVolumeReplicationInfo(ctx, ins[0])
			mustOK(t, err)
			if info.Status == "DEGRADED" {
				synced = info.LastSyncTime
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("east still reports %+v with the link cut", info)
			}
			time.Sleep(20 * time.Millisecond)
		}
		c, err := sim.NewClient(f.east.DataAddr(), simtest.NodeA, "east-node")
		mustOK(t, err)
		defer c.Close()
		_, err = c.Write(ctx, "v1", 0, []byte("never shipped"))
		mustOK(t, err)
	}, 30*time.Second)
	got := stateThenStop(t, env, 90*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	mustOK(t, env.GetWorkflowError())
	s := *got
	if s == nil || len(s.Points) != 2 {
		t.Fatalf("state %+v", s)
	}
	before, after := s.Points[0], s.Points[1]
	if before.NotInSync != "" || before.LastSync.IsZero() || before.Lag < 0 {
		t.Fatalf("the point cut in sync: %+v", before)
	}
	if !strings.Contains(after.NotInSync, "db: replication DEGRADED") || !after.Usable() {
		t.Fatalf("the point cut with the link down: usable %v, not in sync %q", after.Usable(), after.NotInSync)
	}
	var db workflows.PointGroup
	for _, g := range after.Groups {
		if g.Group == "db" {
			db = g
		}
	}
	if !db.LastSync.Equal(synced) || db.Lag != after.Taken.Sub(synced) {
		t.Fatalf("the point records db's last sync %v (lag %v); east's last sync was %v", db.LastSync, db.Lag, synced)
	}
	i := slices.IndexFunc(db.Snapshots, func(sn workflows.PointSnapshot) bool { return sn.Volume == "v1" })
	if i < 0 {
		t.Fatalf("db's snapshots %+v", db.Snapshots)
	}
	st := f.west.Snapshot()
	j := slices.IndexFunc(st.Snapshots, func(sn sim.SnapshotState) bool { return sn.ID == db.Snapshots[i].ID })
	if j < 0 {
		t.Fatalf("west holds no snapshot %s", db.Snapshots[i].ID)
	}
	if data := string(st.Snapshots[j].Blocks[0].Data); data != "order 1" {
		t.Fatalf("the point's v1 holds %q, want the data of the last sync before it", data)
	}
	if data := string(f.east.Snapshot().Unit("vg/vg-1").Blocks["v1"][0].Data); data != "never shipped" {
		t.Fatalf("east holds %q", data)
	}
}

// TestNewestInSyncPointIsNeverPruned: with keep 2 and the link between
// the sites cut after the first point, every later point at west is not
// in sync; pruning still keeps the first, the newest point at west that
// was in sync, however many newer points there are, says on it why it is
// kept beyond keep, and prunes the points not in sync beyond the newest
// two as usual.
func TestNewestInSyncPointIsNeverPruned(t *testing.T) {
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(time.Minute), Keep: 2})
	env, _ := f.testEnv(t)
	env.RegisterDelayedCallback(func() {
		f.east.SetLink(false)
		ins, err := activities.ReplicationInputs(f.plan, "east", "db", activities.RPCGetVolumeReplicationInfo, false)
		mustOK(t, err)
		for deadline := time.Now().Add(20 * time.Second); ; {
			info, err := f.storage.GetVolumeReplicationInfo(context.Background(), ins[0])
			mustOK(t, err)
			if info.Status == "DEGRADED" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("east still reports %+v with the link cut", info)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}, 30*time.Second)
	got := stateThenStop(t, env, 4*time.Minute+30*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	mustOK(t, env.GetWorkflowError())
	s := *got
	if s == nil || len(s.Points) == 0 {
		t.Fatalf("state %+v", s)
	}
	sent, pruned := f.pointChanges()
	var first workflows.PointInTime
	for _, pt := range sent {
		if first.ID == "" || pt.Taken.Before(first.Taken) {
			first = pt
		}
	}
	if first.NotInSync != "" || !first.Usable() {
		t.Fatalf("the first point, cut with the link up: %+v", first)
	}
	if len(pruned) < 2 {
		t.Fatalf("pruned %+v: the points not in sync beyond the newest 2 were kept", pruned)
	}
	for _, x := range pruned {
		if x.ID == first.ID {
			t.Fatalf("the newest point in sync at west, %s, was pruned: %s", x.ID, x.Why)
		}
	}
	if len(s.Points) != 3 || s.Points[0].ID != first.ID {
		t.Fatalf("kept %+v; want %s and the newest two", s.Points, first.ID)
	}
	for _, pt := range s.Points[1:] {
		if pt.NotInSync == "" || pt.Kept != "" {
			t.Fatalf("point %s cut with the link down: not in sync %q, kept %q", pt.ID, pt.NotInSync, pt.Kept)
		}
	}
	if want := "the newest point in sync at west, kept though beyond the newest 2 (keep)"; s.Points[0].Kept != want {
		t.Fatalf("%s is kept for %q, want %q", first.ID, s.Points[0].Kept, want)
	}
	// The record, which drctl points reads, is told why.
	if !slices.ContainsFunc(sent, func(pt workflows.PointInTime) bool { return pt.ID == first.ID && pt.Kept == s.Points[0].Kept }) {
		t.Fatalf("the record was not told why %s is kept", first.ID)
	}
	checkKept(t, f, s.Points)
}

// TestFailedCutsAreCleanedAndTheNewestKept: while west's storage refuses
// group snapshots, each cut fails (the point says why, and is no point
// to recover to) and its loose volume's snapshot, which was made, is
// deleted with the next cut; the points that can be recovered to stay
// past keepFor while no newer one is cut. Once a cut succeeds again,
// the old points and the failed one go, and west holds only the new
// point's snapshots.
func TestFailedCutsAreCleanedAndTheNewestKept(t *testing.T) {
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(time.Minute), KeepFor: plans.Duration(time.Minute)})
	env, _ := f.testEnv(t)
	env.RegisterDelayedCallback(func() {
		mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "CreateVolumeGroupSnapshot", Code: "INVALID_ARGUMENT", Count: 1000, Message: "injected"}}))
	}, 90*time.Second)
	var during []string
	failing := stateAt(t, env, 3*time.Minute+30*time.Second, func() {
		during, _ = snapshotsOn(f.west)
		mustOK(t, f.west.SetFaults(nil))
	})
	got := stateThenStop(t, env, 4*time.Minute+30*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	mustOK(t, env.GetWorkflowError())
	s := *failing
	if s == nil || len(s.Points) != 3 {
		t.Fatalf("points while the cuts fail: %+v", s)
	}
	first, failed := s.Points[0], s.Points[2]
	if !first.Usable() || !s.Points[1].Usable() || failed.Usable() || !strings.Contains(failed.Error, "injected") {
		t.Fatalf("the first points %+v, %+v; the last failed cut %+v", first, s.Points[1], failed)
	}
	if failed.Taken.Sub(first.Taken) <= 2*time.Minute {
		t.Fatalf("the points %s and %s", first.ID, failed.ID)
	}
	// West holds the two points' four snapshots each and the failed
	// cut's loose one: the earlier failed cut's went with the later cut.
	if len(during) != 9 {
		t.Fatalf("while the cuts failed west held %d snapshots: %v", len(during), during)
	}
	_, pruned := f.pointChanges()
	nFailed := 0
	for _, x := range pruned {
		if strings.HasPrefix(x.Why, "its cut failed") {
			nFailed++
		}
	}
	if nFailed < 1 {
		t.Fatalf("failed cuts pruned: %d (%+v)", nFailed, pruned)
	}
	r := *got
	if r == nil || len(r.Points) != 1 || !r.Points[0].Usable() || r.Points[0].ID == first.ID {
		t.Fatalf("after the storage took group snapshots again: %+v", r.Points)
	}
	if !slices.ContainsFunc(r.Pruned, func(x workflows.PrunedPoint) bool { return x.ID == first.ID && strings.Contains(x.Why, "keepFor") }) {
		t.Fatalf("%s was not pruned for its age: %+v", first.ID, r.Pruned)
	}
	checkKept(t, f, r.Points)
}

// TestStartedStateNamesNoPointToPrune: a Protect started (not continued
// by its own run) with a state that names a point made of a snapshot
// protection did not cut does not take it: after cuts that prune by
// count, that snapshot is still on west and the point is nowhere.
func TestStartedStateNamesNoPointToPrune(t *testing.T) {
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(time.Minute), Keep: 1})
	victim, err := f.storage.CreateSnapshot(context.Background(), activities.SnapshotInput{
		Endpoint: activities.Endpoint{Site: "west", Address: f.west.Endpoint()}, Name: "backup-of-v3", Volumes: []string{"v3"}})
	mustOK(t, err)
	forged := workflows.PointInTime{ID: "20200101T000000Z", Site: "west", Taken: time.Now().Add(-time.Hour),
		Groups: []workflows.PointGroup{{Group: "logs", Snapshots: []workflows.PointSnapshot{{Volume: "v3", ID: victim.ID}}}}}
	env, _ := f.testEnv(t)
	got := stateThenStop(t, env, 2*time.Minute+30*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second,
		State: &workflows.ProtectState{Primary: "east", Points: []workflows.PointInTime{forged}}})
	mustOK(t, env.GetWorkflowError())
	s := *got
	if s == nil || len(s.Points) != 1 || s.Points[0].ID == forged.ID || s.PrunedCount < 2 {
		t.Fatalf("state %+v", s)
	}
	for _, x := range s.Pruned {
		if x.ID == forged.ID {
			t.Fatalf("the forged point was pruned: %+v", x)
		}
	}
	snaps, _ := snapshotsOn(f.west)
	if !slices.Contains(snaps, victim.ID) {
		t.Fatalf("the snapshot protection did not cut, %s, was deleted: west holds %v", victim.ID, snaps)
	}
}

// TestPointsOnDevServer: on the dev server, protection of a plan with
// points every second, keep 1: a point held through the update is kept
// while newer ones are cut and pruned, the plan's record shows it held;
// a hold of no point is refused; released, the point is pruned and the
// record says so. With DROVER_RECORD_HISTORIES set (make histories) it
// records the Protect history for TestReplay.
func TestPointsOnDevServer(t *testing.T) {
	srv, f := pointsOnDevServer(t, plans.PointsInTime{Every: plans.Duration(time.Second), Keep: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prot, err := workflows.StartProtect(ctx, srv.Client, f.plan, "east", 200*time.Millisecond, workflows.Origin{})
	mustOK(t, err)
	hold := func(h workflows.PointHold) (*workflows.PointInTime, error) {
		uh, err := srv.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: prot.GetID(), UpdateName: workflows.UpdateHoldPoint,
			Args: []any{h}, WaitForStage: client.WorkflowUpdateStageCompleted})
		if err != nil {
			return nil, err
		}
		var pt workflows.PointInTime
		return &pt, uh.Get(ctx, &pt)
	}
	var held string
	simtest.Eventually(t, time.Minute, "a point to hold", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		if err != nil || workflows.NewestPoint(ps.Points) == nil {
			return false
		}
		held = workflows.NewestPoint(ps.Points).ID
		return true
	})
	pt, err := hold(workflows.PointHold{Point: held, By: "tester"})
	mustOK(t, err)
	if pt.ID != held || !slices.Equal(pt.Held, []string{"tester"}) {
		t.Fatalf("the hold answered %+v", pt)
	}
	if _, err := hold(workflows.PointHold{Point: "19990101T000000Z", By: "tester"}); err == nil || !strings.Contains(err.Error(), "no point") {
		t.Fatalf("a hold of no point: %v", err)
	}
	simtest.Eventually(t, time.Minute, "newer points pruned around the held one", func() bool {
		rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
		return err == nil && rec != nil && rec.PrunedCount >= 2 && len(rec.Points) == 2 && rec.Points[0].ID == held &&
			slices.Equal(rec.Points[0].Held, []string{"tester"})
	})
	_, err = hold(workflows.PointHold{Point: held, By: "tester", Release: true})
	mustOK(t, err)
	simtest.Eventually(t, time.Minute, "the released point pruned", func() bool {
		rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
		return err == nil && rec != nil && len(rec.Points) == 1 && rec.Points[0].ID != held &&
			slices.ContainsFunc(rec.Pruned, func(x workflows.PrunedPoint) bool { return x.ID == held })
	})
	uh, err := srv.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: prot.GetID(), UpdateName: workflows.UpdateStopProtect,
		Args: []any{workflows.StopProtect{}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	mustOK(t, err)
	mustOK(t, uh.Get(ctx, nil))
	mustOK(t, prot.Get(ctx, nil))
	record(t, ctx, srv.Client, prot, "protect-points")
}

// TestPointsOutliveAFailover: a failover's word moves protection to the
// new primary, unprotected, carrying its points; the continued run cuts
// none (the lost site holds no replica to cut) and prunes none, however
// far past keepFor they get: west's storage still holds them all.
func TestPointsOutliveAFailover(t *testing.T) {
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(time.Minute), KeepFor: plans.Duration(time.Minute)})
	env, _ := f.testEnv(t)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.SignalRetarget, sealedRetarget(t, env, workflows.Retarget{Primary: "west", Lost: "east", At: env.Now(), By: "drover-shop"}))
	}, 2*time.Minute+30*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second})
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("error %v, want continue-as-new on the failover's word", err)
	}
	var next workflows.ProtectInput
	mustOK(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	if next.State == nil || next.State.Unprotected == nil || len(next.State.Points) != 2 {
		t.Fatalf("continued with %+v", next.State)
	}
	carried := next.State.Points
	before, _ := snapshotsOn(f.west)

	// The run the server continues it as, unprotected on west.
	env, calls := f.testEnv(t)
	env.SetContinuedExecutionRunID("the-run-before")
	got := stateThenStop(t, env, 5*time.Minute)
	env.ExecuteWorkflow(workflows.Protect, next)
	mustOK(t, env.GetWorkflowError())
	s := *got
	if s == nil || s.Unprotected == nil || len(s.Points) != 2 || s.Points[0].ID != carried[0].ID || s.Points[1].ID != carried[1].ID {
		t.Fatalf("unprotected for 5 minutes the points are %+v", s)
	}
	for _, name := range []string{"CreateSnapshot", "CreateVolumeGroupSnapshot", "DeleteSnapshot", "DeleteVolumeGroupSnapshot"} {
		if i := indexOf(*calls, name, "", ""); i >= 0 {
			t.Fatalf("an unprotected protection called %v", (*calls)[i])
		}
	}
	if after, _ := snapshotsOn(f.west); !slices.Equal(before, after) {
		t.Fatalf("west held %v at the failover, %v after", before, after)
	}
	checkKept(t, f, s.Points)
}

// TestCutWithoutAnswerIsDeletedByName: a cut whose creates never
// answered (protection stopped or moved while the storage worked) is
// recorded with the names it asked under; the next cut asks for each
// again by name, which answers what the first create made, and deletes
// it: west keeps no snapshot of it.
func TestCutWithoutAnswerIsDeletedByName(t *testing.T) {
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(time.Minute), Keep: 3})
	// What the unanswered group snapshot made on west.
	e := activities.Endpoint{Site: "west", Address: f.west.Endpoint()}
	made, err := f.storage.CreateVolumeGroupSnapshot(context.Background(), activities.SnapshotInput{Endpoint: e, Name: "drover-pit-shop-cut-short-db", Volumes: []string{"v1", "v2"}})
	mustOK(t, err)
	short := workflows.PointInTime{ID: "20200101T000000Z", Site: "west", Taken: time.Now().Add(-time.Hour), Error: "the cut was cut short (protection stopped or moved)",
		Groups: []workflows.PointGroup{
			{Group: "db", GroupSnapshotName: "drover-pit-shop-cut-short-db", Members: []string{"v1", "v2"}},
			{Group: "loose", Snapshots: []workflows.PointSnapshot{{Volume: "solo", Name: "drover-pit-shop-cut-short-loose-solo"}}},
		}}
	env, _ := f.testEnv(t)
	env.SetContinuedExecutionRunID("the-run-before")
	got := stateThenStop(t, env, 30*time.Second)
	env.ExecuteWorkflow(workflows.Protect, workflows.ProtectInput{Plan: f.plan, Primary: "east", Interval: 10 * time.Second,
		State: &workflows.ProtectState{Primary: "east", Enabled: true, Points: []workflows.PointInTime{short}}})
	mustOK(t, env.GetWorkflowError())
	s := *got
	if s == nil || len(s.Points) != 1 || s.Points[0].ID == short.ID || s.PrunedCount != 1 || s.Pruned[0].ID != short.ID {
		t.Fatalf("state %+v", s)
	}
	st := f.west.Snapshot()
	for _, g := range st.GroupSnapshots {
		if g.ID == made.ID {
			t.Fatalf("the group snapshot the unanswered cut made, %s, is still on west", made.ID)
		}
	}
	for _, sn := range st.Snapshots {
		if sn.Name == "drover-pit-shop-cut-short-loose-solo" {
			t.Fatalf("the loose snapshot asked again by name was left on west: %s", sn.ID)
		}
	}
	checkKept(t, f, s.Points)
}
