package workflows_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/nomadfake"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// madeUnits are the keys of the units site's storage made replicated
// from volumes created through CSI (primary copies of points cut there),
// and of the copies its peer's syncs created.
func madeUnits(st *sim.State) (made, fromPeer []string) {
	for _, u := range st.Units {
		switch {
		case u.Made:
			made = append(made, u.Key())
		case u.FromPeer:
			fromPeer = append(fromPeer, u.Key())
		}
	}
	slices.Sort(made)
	slices.Sort(fromPeer)
	return made, fromPeer
}

// writeReachesEast writes data to block n of volume vol, a replicated
// volume of its own, at west, and waits for east's copy to hold it.
func writeReachesEast(t *testing.T, ctx context.Context, f *fixture, vol string, n int64, data string) {
	t.Helper()
	wc, err := sim.NewClient(f.west.DataAddr(), simtest.NodeB, "west-node")
	mustOK(t, err)
	defer wc.Close()
	_, err = wc.Write(ctx, vol, n, []byte(data))
	mustOK(t, err)
	simtest.Eventually(t, time.Minute, "the write at east", func() bool {
		u := f.east.Snapshot().Unit("vol/" + vol)
		return u != nil && string(u.Blocks[vol][n].Data) == data
	})
}

// copyKeys are the unit keys of the copies of points.
func copyKeys(points []workflows.PointInTime) []string {
	var out []string
	for _, pt := range points {
		for _, g := range pt.Groups {
			for _, sn := range g.Snapshots {
				if sn.Copy != "" {
					out = append(out, "vol/"+sn.Copy)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestPointsCutAtThePrimary: on the dev server, with
// policy.pointsInTime.cut: primary (keep 2), protection cuts each point
// at east, the primary: a group snapshot of vg-1's members, a volume of
// each snapshot and its replication enabled, so that west's storage
// creates a copy of it; a point is usable at west once every copy has
// synced, and holds every write acknowledged before its cut. Pruning
// deletes a point's copies at east, and west's go with them: the copies
// the storage holds are those of the points protection keeps. A test
// recovery at west from such a point is refused (its copies there are
// replicas) before it holds the point. A failover to the clean point promotes its copies at west
// in place of making volumes: the application finds "clean" there while
// the replica holds "damage". The reprotect demotes and resyncs east's
// copies of them (their replication was on), and a write at west
// reaches east. Once the release frees the point and protection prunes
// it, the copies the plan now runs on are left, replication on at both
// sites: a point's deletion never touches a volume the plan acts on.
func TestPointsCutAtThePrimary(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(2 * time.Second), Keep: 2, Cut: plans.CutPrimary})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run, fo, clean, restored := failoverToTheCleanPoint(t, ctx, srv, f)
	if clean.CutAt != "east" || clean.Site != "west" || clean.Synced.IsZero() || !clean.LastSync.Equal(clean.Taken) || clean.NotInSync != "" {
		t.Fatalf("the clean point: cut at %q for %q, synced %v, holds up to %v (cut %v), not in sync %q; want cut at east for west, synced, holding its cut",
			clean.CutAt, clean.Site, clean.Synced, clean.LastSync, clean.Taken, clean.NotInSync)
	}
	var v1 string
	for _, g := range clean.Groups {
		for _, sn := range g.Snapshots {
			if sn.Volume == "v1" {
				v1 = sn.Copy
			}
		}
	}
	if v1 == "" || restored["v1"] != v1 || fo.Restored[0].Copy == "" {
		t.Fatalf("the failover restored %v (%+v); want the clean point's copy of v1, %q, promoted", restored, fo.Restored, v1)
	}
	west := f.west.Snapshot()
	if u := west.Unit("vol/" + v1); u == nil || u.Role != sim.RolePrimary || string(u.Blocks[v1][0].Data) != "clean" {
		t.Fatalf("west's copy of v1 after the failover: %+v; want it primary, holding clean", u)
	}
	if u := west.Unit("vg/vg-1"); u.Role != sim.RolePrimary || string(u.Blocks["v1"][0].Data) != "damage" {
		t.Fatalf("west's replica vg-1: %s holding %q; want the kept primary with the damage", u.Role, u.Blocks["v1"][0].Data)
	}

	// A test recovery at west from a point cut at east: refused.
	tr, err := workflows.StartTestRecovery(ctx, srv.Client, workflows.TestRecoveryInput{Plan: f.plan, At: "west", PointAt: clean.Taken})
	mustOK(t, err)
	hold := "hold the point in time at west"
	waitFor(t, ctx, srv.Client, tr, hold, workflows.StatePaused)
	var p workflows.Progress
	v, err := srv.Client.QueryWorkflow(ctx, tr.GetID(), tr.GetRunID(), workflows.QueryProgress)
	mustOK(t, err)
	mustOK(t, v.Get(&p))
	if i := slices.IndexFunc(p.Steps, func(s *workflows.Step) bool { return s.Name == hold }); !strings.Contains(p.Steps[i].LastError, "a test recovery from it runs there") {
		t.Fatalf("a test recovery at west from a point cut at east paused on %q", p.Steps[i].LastError)
	}
	// Refused before it was held: paused there, it holds nothing.
	ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
	mustOK(t, err)
	for _, pt := range ps.Points {
		if slices.Contains(pt.Held, workflows.ActionHolder(tr.GetID(), tr.GetRunID())) {
			t.Fatalf("the refused test recovery holds point %s while it waits for the operator", pt.ID)
		}
	}
	uh, err := srv.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: tr.GetID(), RunID: tr.GetRunID(), UpdateName: workflows.UpdateResolve,
		Args: []any{workflows.Decision{Step: hold, Action: workflows.DecisionAbort}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	mustOK(t, err)
	mustOK(t, uh.Get(ctx, nil))
	_ = tr.Get(ctx, nil)
	v, err = srv.Client.QueryWorkflow(ctx, tr.GetID(), tr.GetRunID(), workflows.QueryProgress)
	mustOK(t, err)
	mustOK(t, v.Get(&p))
	// The abort ends the test, not its cleanup, which has no hold to
	// release and does not say it released one.
	if i := slices.IndexFunc(p.Steps, func(s *workflows.Step) bool { return s.Kind() == workflows.KindCleanup }); i < 0 || p.Steps[i].State != workflows.StateDone ||
		strings.Contains(p.Steps[i].Output, "released") {
		t.Fatalf("the aborted test recovery's cleanup: %+v", p.Steps)
	}
	if made := f.west.Snapshot().Clones; len(made) != 0 {
		t.Fatalf("the refused test recovery made %d volume(s) at west", len(made))
	}

	rp, err := workflows.Start(ctx, srv.Client, "shop", workflows.Reprotect, workflows.ReprotectInput{Plan: f.plan, From: "east", To: "west", Fenced: fo.Fenced})
	mustOK(t, err)
	var res workflows.ReprotectResult
	mustOK(t, rp.Get(ctx, &res))
	allDone(t, res.Progress)
	east := f.east.Snapshot()
	for vol, id := range restored {
		e := east.Unit("vol/" + id)
		if e == nil || e.Role != sim.RoleSecondary || !e.InSync || !e.Enabled {
			t.Fatalf("east's copy of the restored %s (%s): %+v; want a secondary in sync", vol, id, e)
		}
	}
	writeReachesEast(t, ctx, f, v1, 1, "after the reprotect")

	// The release frees the point; protection, now cutting at west,
	// prunes it: the copies the plan runs on stay, replicated.
	rl, err := workflows.Start(ctx, srv.Client, "shop", workflows.Release, workflows.ReleaseInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, err)
	mustOK(t, rl.Get(ctx, nil))
	holder := workflows.ActionHolder(run.GetID(), run.GetRunID())
	var last *workflows.ProtectState
	defer func() {
		if t.Failed() && last != nil {
			for _, pt := range last.Points {
				t.Logf("point %s site %s cut at %s synced %v error %q held %v prune error %q", pt.ID, pt.Site, pt.CutAt, pt.Synced, pt.Error, pt.Held, pt.PruneError)
			}
		}
	}()
	simtest.Eventually(t, time.Minute, "the clean point pruned, points cut at west", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		if err != nil || ps.Primary != "west" {
			return false
		}
		last = ps
		atWest := 0
		for _, pt := range ps.Points {
			if pt.ID == clean.ID || slices.Contains(pt.Held, holder) {
				return false
			}
			if pt.CutAt == "west" && pt.Usable() {
				atWest++
			}
		}
		return atWest > 0
	})
	east, west = f.east.Snapshot(), f.west.Snapshot()
	for vol, id := range restored {
		w, e := west.Unit("vol/"+id), east.Unit("vol/"+id)
		if w == nil || w.Role != sim.RolePrimary || !w.Enabled || e == nil || e.Role != sim.RoleSecondary || !e.Enabled {
			t.Fatalf("the restored %s (%s) after its point was pruned: west %+v, east %+v; want it replicated from west", vol, id, w, e)
		}
	}
	if got := string(west.Unit("vol/" + v1).Blocks[v1][1].Data); got != "after the reprotect" {
		t.Fatalf("west's v1 holds %q", got)
	}

	// The copies the storage holds are those of the points protection
	// keeps, and the restored volumes: pruned points' copies are gone at
	// both sites.
	standIns := copyKeys([]workflows.PointInTime{clean})
	var why string
	simtest.Eventually(t, time.Minute, "the copies held to be the kept points' and the restored volumes'", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		if err != nil || ps.PrunedCount == 0 {
			return false
		}
		for _, site := range []*simtest.Site{f.east, f.west} {
			name, other := "east", "west"
			if site == f.west {
				name, other = "west", "east"
			}
			var cutHere, cutThere []workflows.PointInTime
			for _, pt := range ps.Points {
				switch pt.CutAt {
				case name:
					cutHere = append(cutHere, pt)
				case other:
					cutThere = append(cutThere, pt)
				}
			}
			made, fromPeer := madeUnits(site.Snapshot())
			want := copyKeys(cutHere)
			if name == "east" {
				want = append(want, standIns...)
				slices.Sort(want)
			}
			if !slices.Equal(made, want) {
				why = name + " made " + strings.Join(made, " ") + "; want " + strings.Join(want, " ")
				return false
			}
			for _, k := range fromPeer {
				if !slices.Contains(copyKeys(cutThere), k) && !(name == "west" && slices.Contains(standIns, k)) {
					why = name + " holds " + k + ", the copy of no point kept"
					return false
				}
			}
		}
		return true
	})
	if why != "" {
		t.Logf("(settled after: %s)", why)
	}
	if r := sim.Check(f.east.Snapshot(), f.west.Snapshot()); !r.OK() {
		t.Fatalf("%s", r)
	}
}

// TestPointCopiesEnabledAgainUntilTheStorageTakes: a storage that
// answers a copy's enable ABORTED for longer than a call's deadline
// (ceph-csi while it flattens a volume made of a snapshot, a large one)
// gets the enable again at the next poll rounds: the points cut
// meanwhile wait, never failed, and become usable at west once the
// storage takes their enables and their copies have synced.
func TestPointCopiesEnabledAgainUntilTheStorageTakes(t *testing.T) {
	srv, f := pointsOnDevServer(t, plans.PointsInTime{Every: plans.Duration(time.Second), Keep: 5, Cut: plans.CutPrimary})
	f.deadline(activities.RPCEnableVolumeReplication, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := workflows.StartProtect(ctx, srv.Client, f.plan, "east", 200*time.Millisecond, workflows.Origin{})
	mustOK(t, err)
	var first workflows.PointInTime
	simtest.Eventually(t, time.Minute, "a first point usable at west", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		if err != nil || len(ps.Points) == 0 || !ps.Points[0].Usable() {
			return false
		}
		first = ps.Points[0]
		return true
	})
	mustOK(t, f.east.SetFaults([]sim.FaultRule{{Method: "EnableVolumeReplication", Code: "ABORTED", Probability: 1, Message: "flatten is in progress for image"}}))
	// Two points cut while every enable is refused: each waits.
	var waiting []workflows.PointInTime
	simtest.Eventually(t, 2*time.Minute, "two points waiting for their copies' enables", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		if err != nil {
			return false
		}
		waiting = nil
		for _, pt := range ps.Points {
			if pt.Error != "" {
				t.Fatalf("point %s failed while the storage refused its enables for now: %s", pt.ID, pt.Error)
			}
			if pt.Taken.After(first.Taken) && pt.Pending() && pt.Enabled() == 0 {
				waiting = append(waiting, pt)
			}
		}
		return len(waiting) >= 2
	})
	mustOK(t, f.east.SetFaults(nil))
	var usable string
	simtest.Eventually(t, time.Minute, "a waiting point usable at west", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		if err != nil {
			return false
		}
		left := 0
		for _, pt := range ps.Points {
			if !slices.ContainsFunc(waiting, func(w workflows.PointInTime) bool { return w.ID == pt.ID }) {
				continue
			}
			if pt.Error != "" {
				t.Fatalf("point %s failed: %s", pt.ID, pt.Error)
			}
			if pt.Usable() {
				usable = pt.ID
				return true
			}
			left++
		}
		if left == 0 {
			t.Fatalf("the waiting points were pruned before their copies synced")
		}
		return false
	})
	rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
	mustOK(t, err)
	for _, x := range rec.Pruned {
		if strings.HasPrefix(x.Why, "its cut failed") {
			t.Fatalf("point %s was pruned as failed: %s", x.ID, x.Why)
		}
	}
	t.Logf("%d enables answered ABORTED; point %s usable at west once they were taken", f.east.FaultCounts()["EnableVolumeReplication:"+codes.Aborted.String()], usable)
}

// TestFailoverToAPointCutAtThePrimaryOnNomad: where Nomad runs west's
// workloads, a failover to a point cut at the primary promotes the
// point's copies at west and registers each one whose replica Nomad
// knows as a Nomad volume (pg-data-pit-RUN8, external id the copy's,
// made of no snapshot: the copy exists already); the jobs mount those,
// never the replicas', and become healthy on them (the fake fails an
// allocation whose CSI volume is missing); the restored v1 holds
// "clean", the replica "damage".
func TestFailoverToAPointCutAtThePrimaryOnNomad(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(2 * time.Second), Keep: 4, Cut: plans.CutPrimary})
	_, west := f.nomadSites(t, "/bin/sleep")
	west.AddPlugin("sim", f.west.Endpoint())
	for _, v := range [][2]string{{"pg-data", "v1"}, {"solo-vol", "solo"}} {
		west.AddVolume(api.CSIVolumeListStub{ID: v[0], Name: v[0], ExternalID: v[1], PluginID: "sim", Schedulable: true})
	}
	for w, src := range map[string]string{"pg": "pg-data", "web": "solo-vol"} {
		j := nomadfake.ServiceJob(w, 1, "/bin/sleep")
		j.TaskGroups[0].Volumes = map[string]*api.VolumeRequest{src: {Name: src, Type: "csi", Source: src, AccessMode: "single-node-writer", AttachmentMode: "file-system"}}
		for i := range f.plan.Workloads {
			if f.plan.Workloads[i].Name == w {
				f.plan.Workloads[i].Sites["west"].Nomad.JobFile = nomadfake.WriteJobFile(t, j)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run, res, clean, _ := failoverToTheCleanPoint(t, ctx, srv, f)
	allDone(t, res.Progress)
	run8 := workflows.RunTag(run.GetRunID())
	byVol := map[string]workflows.RestoredVolume{}
	for _, v := range res.Restored {
		byVol[v.Volume] = v
	}
	for w, nomadID := range map[string]string{"pg": "pg-data-pit-" + run8, "web": "solo-vol-pit-" + run8} {
		var want workflows.RestoredVolume
		for _, v := range res.Restored {
			if v.NomadID == nomadID {
				want = v
			}
		}
		if want.Copy == "" || want.ID != want.Copy {
			t.Fatalf("%s: restored %+v; want the point's copy promoted", nomadID, res.Restored)
		}
		nv := west.Volume("default", nomadID)
		if nv == nil || nv.ExternalID != want.Copy || nv.SnapshotID != "" || nv.PluginID != "sim" {
			t.Fatalf("west's Nomad has %s as %+v; want it registered on the copy %s", nomadID, nv, want.Copy)
		}
		j := west.Job("", w)
		if j == nil || j.Stop == nil || *j.Stop || len(j.TaskGroups[0].Volumes) != 1 {
			t.Fatalf("west's Nomad has job %s %+v", w, j)
		}
		for _, vr := range j.TaskGroups[0].Volumes {
			if vr.Source != nomadID {
				t.Fatalf("job %s mounts %q, want %q", w, vr.Source, nomadID)
			}
		}
	}
	st := f.west.Snapshot()
	v1 := byVol["v1"].Copy
	if u := st.Unit("vol/" + v1); u == nil || u.Role != sim.RolePrimary || string(u.Blocks[v1][0].Data) != "clean" {
		t.Fatalf("west's restored v1 (the point's copy): %+v; want it primary, holding clean", u)
	}
	if u := st.Unit("vg/vg-1"); u == nil || u.Role != sim.RolePrimary || string(u.Blocks["v1"][0].Data) != "damage" {
		t.Fatalf("west's vg-1 after the failover: %+v; want it promoted and kept with the damage", u)
	}
	if clean.CutAt != "east" {
		t.Fatalf("the clean point was cut at %q", clean.CutAt)
	}
}
