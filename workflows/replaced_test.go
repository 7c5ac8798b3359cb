package workflows_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestReprotectMakesTheRestoredVolumesTheProtectedOnes: on the dev
// server, after a failover to the clean point (the damage on the
// replicas), a reprotect of the plan makes the restored volumes the
// protected ones (a failback before it is refused by the worker:
// it would move the replicas; protection then polls them and cuts its points of
// them at east): east's copies of the replicas demoted and left with
// their data, west's promoted replicas kept primary with the damage,
// replication enabled on the restored volumes, whose copies east's
// storage creates, and the record says which volume stands in for
// which. A write on the restored v1 at west then reaches east's copy;
// a failback, started with the plan file as it was, moves the restored
// volumes, not the replicas: east's copy of the restored v1 becomes
// primary, holding "clean" and the write, the hooks at east see it as
// DROVER_VOLUME_V1, and east's copy of the replicas is untouched. A
// release then frees the failover's hold on the point and turns the kept
// replicas' replication off, deleting nothing; a second finds nothing to
// release. With DROVER_RECORD_HISTORIES set (make histories) it records
// the reprotect's and the release's histories for TestReplay.
func TestReprotectMakesTheRestoredVolumesTheProtectedOnes(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(2 * time.Second), Keep: 4})
	for _, w := range f.plan.Workloads {
		for _, site := range []string{"east", "west"} {
			h := w.Sites[site].Exec
			h.Start = fmt.Sprintf(`echo "%s start $DROVER_SITE v1=$DROVER_VOLUME_V1" >> %s`, w.Name, f.hooks)
		}
	}
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	_, clean := cleanThenDamage(t, ctx, srv, f)
	ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
	mustOK(t, err)
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west",
		LastSync: ps.LastSync(), Clients: ps.Clients["east"], PointAt: clean.Taken})
	mustOK(t, err)
	var fo workflows.FailoverResult
	mustOK(t, run.Get(ctx, &fo))
	restored := map[string]string{}
	for _, v := range fo.Restored {
		restored[v.Volume] = v.ID
	}
	v1 := restored["v1"]
	eastV1 := f.east.Snapshot().Unit("vg/vg-1").Blocks["v1"][0].Data

	// Before the reprotect, a failback would move the replicas the
	// failover went back from: the worker refuses it, nothing moved.
	fb, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "west", To: "east"})
	mustOK(t, err)
	if err := fb.Get(ctx, nil); err == nil || !strings.Contains(err.Error(), "reprotect first") {
		t.Fatalf("a failback before the reprotect: %v", err)
	}
	if u := f.west.Snapshot().Unit("vg/vg-1"); u.Role != sim.RolePrimary {
		t.Fatalf("the refused failback demoted west's vg-1")
	}

	rp, err := workflows.Start(ctx, srv.Client, "shop", workflows.Reprotect, workflows.ReprotectInput{Plan: f.plan, From: "east", To: "west", Fenced: fo.Fenced})
	mustOK(t, err)
	var res workflows.ReprotectResult
	mustOK(t, rp.Get(ctx, &res))
	allDone(t, res.Progress)
	east, west := f.east.Snapshot(), f.west.Snapshot()
	if u := east.Unit("vg/vg-1"); u.Role != sim.RoleSecondary || !u.Demoted || string(u.Blocks["v1"][0].Data) != string(eastV1) {
		t.Fatalf("east's vg-1 after the reprotect: role %s demoted %v, v1 %q; want demoted, holding %q as before", u.Role, u.Demoted, u.Blocks["v1"][0].Data, eastV1)
	}
	if u := west.Unit("vg/vg-1"); u.Role != sim.RolePrimary || string(u.Blocks["v1"][0].Data) != "damage" {
		t.Fatalf("west's vg-1 after the reprotect: %s holding %q; want the kept primary with the damage", u.Role, u.Blocks["v1"][0].Data)
	}
	for vol, id := range restored {
		w, e := west.Unit("vol/"+id), east.Unit("vol/"+id)
		if w == nil || w.Role != sim.RolePrimary || e == nil || e.Role != sim.RoleSecondary || !e.InSync {
			t.Fatalf("restored %s (%s): west %+v, east %+v; want replicated from west", vol, id, w, e)
		}
	}
	if got := string(east.Unit("vol/" + v1).Blocks[v1][0].Data); got != "clean" {
		t.Fatalf("east's copy of the restored v1 holds %q", got)
	}
	simtest.Eventually(t, time.Minute, "the record to name the volumes that stand in", func() bool {
		rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
		if err != nil || rec == nil || rec.Replaced == nil || rec.Restored != nil {
			return false
		}
		g := rec.Replaced.Groups["db"]
		return rec.Replaced.Point == clean.ID && len(g["west"]) == 2 && g["west"][0] == workflows.StandIn{Name: "v1", ID: v1} &&
			g["east"][0] == workflows.StandIn{Name: "v1", ID: v1} && rec.Replaced.Kept["db"]["west"].GroupID == "vg-1"
	})

	// Protection polls the restored volumes (the kept replicas, never
	// resynced, would report the split), and cuts its points of them at
	// east.
	simtest.Eventually(t, time.Minute, "protection healthy on the restored volumes, a point cut at east", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		if err != nil || ps.Primary != "west" || ps.Unprotected != nil || len(ps.Groups) != len(f.plan.VolumeGroups) {
			return false
		}
		for _, g := range ps.Groups {
			if g.Error != "" || g.Status != "HEALTHY" || !g.LastSync.After(res.ResyncStart) {
				return false
			}
		}
		for _, pt := range ps.Points {
			if pt.Site != "east" || pt.Error != "" || !pt.Taken.After(res.ResyncStart) || pt.NotInSync != "" {
				continue
			}
			for _, g := range pt.Groups {
				if g.Group == "db" && len(g.Snapshots) > 0 && g.Snapshots[0].Volume == v1 {
					return true
				}
			}
		}
		return false
	})

	wc, err := sim.NewClient(f.west.DataAddr(), simtest.NodeB, "west-node")
	mustOK(t, err)
	defer wc.Close()
	_, err = wc.Write(ctx, v1, 1, []byte("after the reprotect"))
	mustOK(t, err)
	simtest.Eventually(t, time.Minute, "the write at east", func() bool {
		u := f.east.Snapshot().Unit("vol/" + v1)
		return u != nil && string(u.Blocks[v1][1].Data) == "after the reprotect"
	})

	before, err := os.ReadFile(f.hooks)
	mustOK(t, err)
	fb, err = workflows.Start(ctx, srv.Client, "shop", workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "west", To: "east"})
	mustOK(t, err)
	var back workflows.FailbackResult
	mustOK(t, fb.Get(ctx, &back))
	allDone(t, back.Progress)
	east = f.east.Snapshot()
	u := east.Unit("vol/" + v1)
	if u.Role != sim.RolePrimary || string(u.Blocks[v1][0].Data) != "clean" || string(u.Blocks[v1][1].Data) != "after the reprotect" {
		t.Fatalf("east's copy of the restored v1 after the failback: %s holding %q, %q", u.Role, u.Blocks[v1][0].Data, u.Blocks[v1][1].Data)
	}
	if g := east.Unit("vg/vg-1"); g.Role != sim.RoleSecondary || string(g.Blocks["v1"][0].Data) != string(eastV1) {
		t.Fatalf("the failback moved east's kept vg-1: %s holding %q", g.Role, g.Blocks["v1"][0].Data)
	}
	after, err := os.ReadFile(f.hooks)
	mustOK(t, err)
	if got := strings.TrimPrefix(string(after), string(before)); !strings.Contains(got, "pg start east v1="+v1) {
		t.Fatalf("the hooks at east ran %q; want pg started on %s", got, v1)
	}
	if r := sim.Check(f.east.Snapshot(), f.west.Snapshot()); !r.OK() {
		t.Fatalf("%s", r)
	}
	record(t, ctx, srv.Client, rp, "reprotect-restored")

	// drctl release: the failover's hold on its point released, the kept
	// replicas' replication off at west, where they are primary; nothing
	// deleted; the record keeps nothing any more. A second release finds
	// nothing to release.
	holder := workflows.ActionHolder(run.GetID(), run.GetRunID())
	rl, err := workflows.Start(ctx, srv.Client, "shop", workflows.Release, workflows.ReleaseInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, err)
	var rel workflows.ReleaseResult
	mustOK(t, rl.Get(ctx, &rel))
	allDone(t, rel.Progress)
	record(t, ctx, srv.Client, rl, "release")
	if rel.Point != clean.ID || rel.Released["db"]["west"].GroupID != "vg-1" {
		t.Fatalf("released %s and %+v", rel.Point, rel.Released)
	}
	east, west = f.east.Snapshot(), f.west.Snapshot()
	if u := west.Unit("vg/vg-1"); u == nil || u.Enabled || u.Role != sim.RolePrimary || string(u.Blocks["v1"][0].Data) != "damage" {
		t.Fatalf("west's kept vg-1 after the release: %+v; want it there, primary, replication off", u)
	}
	if u := east.Unit("vg/vg-1"); u == nil || string(u.Blocks["v1"][0].Data) != string(eastV1) {
		t.Fatalf("east's kept vg-1 after the release: %+v", u)
	}
	simtest.Eventually(t, time.Minute, "the point no longer held by the failover, the record keeping nothing", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		if err != nil {
			return false
		}
		for _, pt := range ps.Points {
			if pt.ID == clean.ID && slices.Contains(pt.Held, holder) {
				return false
			}
		}
		rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
		return err == nil && rec.Replaced != nil && rec.Replaced.Kept == nil && rec.Replaced.Holder == "" && len(rec.Replaced.Groups) == len(f.plan.VolumeGroups)
	})
	rl, err = workflows.Start(ctx, srv.Client, "shop", workflows.Release, workflows.ReleaseInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, err)
	if err := rl.Get(ctx, nil); err == nil || !strings.Contains(err.Error(), "keeps nothing to release") {
		t.Fatalf("a second release: %v", err)
	}
}

// TestReprotectOfRestoredVolumesNotOnNomadYet: the reprotect of volumes
// a failover to a point restored, for a plan whose workloads Nomad runs,
// is refused before any storage call or hook.
func TestReprotectOfRestoredVolumesNotOnNomadYet(t *testing.T) {
	f := newFixture(t)
	f.plan.Sites[1].Orchestrator = plans.Orchestrator{Nomad: &plans.Nomad{Address: "http://127.0.0.1:1"}}
	env, calls := f.env(t)
	env.OnActivity("ViewRecord", mock.Anything, mock.Anything).Return(workflows.RecordView{
		Restored: &workflows.RestoredEntry{Point: "20261127T120000Z", Site: "west", Volumes: map[string]string{"v1": "clone-1"}}}, nil)
	env.ExecuteWorkflow(workflows.Reprotect, workflows.ReprotectInput{Plan: f.plan, From: "east", To: "west"})
	if err := env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), "not there yet") {
		t.Fatalf("a reprotect of restored volumes under Nomad: %v", err)
	}
	if len(*calls) != 0 {
		t.Fatalf("the refused reprotect made %v", *calls)
	}
}
