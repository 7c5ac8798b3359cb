package workflows_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/nomadfake"
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
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run, fo, clean, restored := failoverToTheCleanPoint(t, ctx, srv, f)
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

	writeReachesEast(t, ctx, f, v1, 1, "after the reprotect")

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

// TestReprotectOnNomad: on the dev server, with Nomad running the
// workloads at both sites (fake agents whose CSI controller plugin is
// each site's storage; an allocation whose CSI volume its namespace does
// not hold fails), east's Nomad knowing v1 as pg-data-east and solo as
// solo-vol-east (a block device), west's as pg-data and solo-vol. After a
// failover to the clean point (west's jobs on pg-data-pit-FO8 and
// solo-vol-pit-FO8):
//
// A reprotect while east's web would mount scratch, a CSI volume the
// plan does not protect, ends at its check of the jobs: nothing
// demoted at east, nothing registered with east's Nomad.
//
// Without scratch, the reprotect registers east's copies of the restored
// v1 and solo with east's Nomad as pg-data-east-pit-FO8 and
// solo-vol-east-pit-FO8 (named after the failover's run), with the plugin, namespace and capabilities of
// the volumes they stand in for, and the record names each stand-in's
// Nomad volume at both sites; west's jobs keep running on the restored
// volumes. A failback while east's web would mount scratch again ends
// at its check of east's jobs, with west's jobs and volumes as they
// were. The failback to east then starts east's jobs (pg registered
// before the failover, on pg-data-east) on the registered copies, never
// on the kept replicas' Nomad volumes, with the stand-in in pg's meta,
// and they become healthy on them; east's copy of the restored v1 is
// primary, holding "clean".
func TestReprotectOnNomad(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(2 * time.Second), Keep: 4})
	east, west := f.nomadSites(t, "/bin/sleep")
	east.AddPlugin("sim", f.east.Endpoint())
	west.AddPlugin("sim", f.west.Endpoint())
	for _, v := range [][2]string{{"pg-data", "v1"}, {"solo-vol", "solo"}} {
		west.AddVolume(api.CSIVolumeListStub{ID: v[0], Name: v[0], ExternalID: v[1], PluginID: "sim", Schedulable: true})
	}
	ec, err := api.NewClient(&api.Config{Address: east.URL})
	mustOK(t, err)
	block := []*api.CSIVolumeCapability{{AccessMode: api.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: api.CSIVolumeAttachmentModeBlockDevice}}
	fs := []*api.CSIVolumeCapability{{AccessMode: api.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: api.CSIVolumeAttachmentModeFilesystem}}
	for _, v := range []*api.CSIVolume{
		{ID: "pg-data-east", Name: "pg-data-east", ExternalID: "v1", PluginID: "sim", RequestedCapabilities: fs},
		{ID: "solo-vol-east", Name: "solo-vol-east", ExternalID: "solo", PluginID: "sim", RequestedCapabilities: block},
	} {
		_, err := ec.CSIVolumes().Register(v, nil)
		mustOK(t, err)
	}
	east.AddVolume(api.CSIVolumeListStub{ID: "scratch", Name: "scratch", ExternalID: "scratch-1", PluginID: "sim", Schedulable: true})
	jobs := map[string]*api.Job{}
	mounts := func(site, w string, sources ...string) {
		j := nomadfake.ServiceJob(w, 1, "/bin/sleep")
		j.TaskGroups[0].Volumes = map[string]*api.VolumeRequest{}
		for _, src := range sources {
			j.TaskGroups[0].Volumes[src] = &api.VolumeRequest{Name: src, Type: "csi", Source: src, AccessMode: "single-node-writer", AttachmentMode: "file-system"}
		}
		jobs[site+"/"+w] = j
		for i := range f.plan.Workloads {
			if f.plan.Workloads[i].Name == w {
				f.plan.Workloads[i].Sites[site].Nomad.JobFile = nomadfake.WriteJobFile(t, j)
			}
		}
	}
	mounts("west", "pg", "pg-data")
	mounts("west", "web", "solo-vol")
	mounts("east", "pg", "pg-data-east")
	mounts("east", "web", "solo-vol-east", "scratch")
	// pg runs at east before the failover, on the replica's volume.
	_, _, err = ec.Jobs().Register(jobs["east/pg"], nil)
	mustOK(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run, fo, _, restored := failoverToTheCleanPoint(t, ctx, srv, f)
	fo8 := workflows.RunTag(run.GetRunID())
	v1, solo := restored["v1"], restored["solo"]
	mountsOf := func(a *nomadfake.Server, w string) []string {
		j := a.Job("", w)
		if j == nil || j.Stop == nil || *j.Stop {
			return nil
		}
		var out []string
		for _, tg := range j.TaskGroups {
			for _, v := range tg.Volumes {
				out = append(out, v.Source)
			}
		}
		slices.Sort(out)
		return out
	}
	if got := mountsOf(west, "pg"); !slices.Equal(got, []string{"pg-data-pit-" + fo8}) {
		t.Fatalf("after the failover west's pg mounts %v", got)
	}
	registered := func() []string {
		var out []string
		for _, c := range east.Calls() {
			if strings.HasPrefix(c, "PUT /v1/volume/csi/") && !strings.HasSuffix(c, "/pg-data-east") && !strings.HasSuffix(c, "/solo-vol-east") {
				out = append(out, c)
			}
		}
		return out
	}

	// east's web would mount scratch.
	in := workflows.ReprotectInput{Plan: f.plan, From: "east", To: "west", Fenced: fo.Fenced}
	rp, err := workflows.Start(ctx, srv.Client, "shop", workflows.Reprotect, in)
	mustOK(t, err)
	if err := rp.Get(ctx, nil); err == nil || !strings.Contains(err.Error(), `mounts CSI volume "scratch"`) {
		t.Fatalf("a reprotect with east's web on scratch: %v", err)
	}
	if u := f.east.Snapshot().Unit("vg/vg-1"); u.Demoted || u.Role != sim.RolePrimary {
		t.Fatalf("the refused reprotect changed east's vg-1: %s, demoted %v", u.Role, u.Demoted)
	}
	if got := registered(); len(got) != 0 {
		t.Fatalf("the refused reprotect registered %v at east", got)
	}

	mounts("east", "web", "solo-vol-east")
	in.Plan = f.plan
	rp, err = workflows.Start(ctx, srv.Client, "shop", workflows.Reprotect, in)
	mustOK(t, err)
	var res workflows.ReprotectResult
	mustOK(t, rp.Get(ctx, &res))
	allDone(t, res.Progress)
	// Named after the failover's run, as the restored volumes at west
	// are: a reprotect started again asks for the same names.
	pgEast, soloEast := "pg-data-east-pit-"+fo8, "solo-vol-east-pit-"+fo8
	if len(res.Registered) != 2 {
		t.Fatalf("registered %+v", res.Registered)
	}
	for id, want := range map[string]struct {
		ext  string
		caps []*api.CSIVolumeCapability
	}{pgEast: {v1, nil}, soloEast: {solo, block}} {
		nv := east.Volume("default", id)
		if nv == nil || nv.ExternalID != want.ext || nv.PluginID != "sim" {
			t.Fatalf("east's Nomad has %s as %+v; want storage volume %s", id, nv, want.ext)
		}
		if want.caps != nil && (len(nv.RequestedCapabilities) != 1 || *nv.RequestedCapabilities[0] != *want.caps[0]) {
			t.Fatalf("%s was registered with capabilities %+v, want the replica's %+v", id, nv.RequestedCapabilities, want.caps[0])
		}
	}
	if got := mountsOf(west, "pg"); !slices.Equal(got, []string{"pg-data-pit-" + fo8}) {
		t.Fatalf("after the reprotect west's pg mounts %v", got)
	}
	simtest.Eventually(t, time.Minute, "the record to name each stand-in's Nomad volume", func() bool {
		rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
		if err != nil || rec == nil || rec.Replaced == nil {
			return false
		}
		g := rec.Replaced.Groups["db"]
		if len(g["east"]) != 2 || len(g["west"]) != 2 || g["east"][0].ID != v1 || g["east"][0].Nomad == nil || g["west"][0].Nomad == nil {
			return false
		}
		l := rec.Replaced.Groups["loose"]
		return *g["east"][0].Nomad == workflows.RestoredNomad{ID: pgEast, Namespace: "default", Replica: "pg-data-east"} &&
			*g["west"][0].Nomad == workflows.RestoredNomad{ID: "pg-data-pit-" + fo8, Namespace: "default", Replica: "pg-data"} &&
			g["east"][1].Nomad == nil && len(l["east"]) == 1 && l["east"][0].Nomad != nil && l["east"][0].Nomad.ID == soloEast
	})

	// A failback while east's web would mount scratch again (its job
	// edited since the reprotect) ends before anything is stopped or
	// demoted.
	mounts("east", "web", "solo-vol-east", "scratch")
	fb, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "west", To: "east"})
	mustOK(t, err)
	if err := fb.Get(ctx, nil); err == nil || !strings.Contains(err.Error(), `mounts CSI volume "scratch"`) {
		t.Fatalf("a failback with east's web on scratch: %v", err)
	}
	if u := f.west.Snapshot().Unit("vol/" + v1); u == nil || u.Role != sim.RolePrimary || mountsOf(west, "pg") == nil {
		t.Fatalf("the refused failback moved west: restored v1 %+v, west's pg mounts %v", u, mountsOf(west, "pg"))
	}
	mounts("east", "web", "solo-vol-east")
	fb, err = workflows.Start(ctx, srv.Client, "shop", workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "west", To: "east"})
	mustOK(t, err)
	var back workflows.FailbackResult
	mustOK(t, fb.Get(ctx, &back))
	allDone(t, back.Progress)
	for w, want := range map[string]string{"pg": pgEast, "web": soloEast} {
		if got := mountsOf(east, w); !slices.Equal(got, []string{want}) {
			t.Fatalf("after the failback east's %s mounts %v; want the stand-in %s", w, got, want)
		}
	}
	if m := east.Job("", "pg").Meta; m["DROVER_VOLUME_V1"] != v1 {
		t.Fatalf("east's pg has meta %v", m)
	}
	if u := f.east.Snapshot().Unit("vol/" + v1); u == nil || u.Role != sim.RolePrimary || string(u.Blocks[v1][0].Data) != "clean" {
		t.Fatalf("east's copy of the restored v1 after the failback: %+v", u)
	}
}

// failoverToTheCleanPoint starts f's worker, writes "clean" then
// "damage" on east while protection cuts points at west, and fails over
// to west at the point that holds "clean". It returns the failover's run
// and result, the point, and the restored volumes by the plan's volume.
func failoverToTheCleanPoint(t *testing.T, ctx context.Context, srv *devserver.Server, f *fixture) (client.WorkflowRun, workflows.FailoverResult, workflows.PointInTime, map[string]string) {
	t.Helper()
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
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
	return run, fo, clean, restored
}
