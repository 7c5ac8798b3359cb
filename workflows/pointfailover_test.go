package workflows_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"go.temporal.io/sdk/testsuite"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/nomadfake"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestFailoverToAPoint: on the dev server, with protection cutting a
// point every 2 s (keep 4), a write "clean" on east, then "damage" once
// a point holds "clean".
//
// A failover to west from a time before any point ends at its point
// step: no storage call of the failover's own reached either site (no
// fence, no promotion) and no hook ran (not even the lost site's stop).
//
// A failover to the clean point cancelled at a gate before its fence
// keeps its hold on the point.
//
// A failover to west from the time of the clean point fences and
// promotes as always, then makes a volume from each of the point's
// snapshots at west and starts the workloads on them: the restored v1
// holds "clean", the promoted replica holds "damage" and is kept, and
// the hooks saw DROVER_VOLUME_V1 and DROVER_POINT. The point is held by
// the failover's run once it ended, and protection, unprotected on west,
// keeps it. The result and the plan's record name the point, the
// restored volumes and the writes discarded.
func TestFailoverToAPoint(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(2 * time.Second), Keep: 4})
	for _, w := range f.plan.Workloads {
		h := w.Sites["west"].Exec
		h.Start = fmt.Sprintf(`echo "%s start $DROVER_SITE v1=$DROVER_VOLUME_V1 solo=$DROVER_VOLUME_SOLO point=$DROVER_POINT" >> %s`, w.Name, f.hooks)
	}
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	_, clean := cleanThenDamage(t, ctx, srv, f)
	ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
	mustOK(t, err)

	// Every storage call that reaches a site from now on.
	seen := f.recordRPCs()
	hooksRan := func() string {
		b, err := os.ReadFile(f.hooks)
		if os.IsNotExist(err) {
			return ""
		}
		mustOK(t, err)
		return string(b)
	}

	// (b) No point at or before the time: nothing happens.
	before := hooksRan()
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west",
		LastSync: ps.LastSync(), Clients: ps.Clients["east"], PointAt: clean.Taken.Add(-time.Hour)})
	mustOK(t, err)
	var res workflows.FailoverResult
	err = run.Get(ctx, &res)
	if err == nil || !strings.Contains(err.Error(), "drctl points") {
		t.Fatalf("a failover to a time before any point: %v", err)
	}
	if !slices.Contains(seen(), "west Probe") {
		t.Fatalf("the preflight's Probe of west was not seen: %v", seen())
	}
	for _, c := range seen() {
		if !strings.HasSuffix(c, "Probe") && !strings.HasSuffix(c, "GetCapabilities") && !strings.HasSuffix(c, "GetVolumeReplicationInfo") &&
			!strings.Contains(c, "Snapshot") {
			// Protection's polls and cuts go on; the failover's own calls
			// are the preflight's and the roles check's only.
			t.Fatalf("a failover with no point made %q: %v", c, seen())
		}
	}
	v, err := srv.Client.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), workflows.QueryProgress)
	mustOK(t, err)
	var failed workflows.Progress
	mustOK(t, v.Get(&failed))
	if s := stepOf(t, failed, "point/west"); s.State != workflows.StateFailed || stepOf(t, failed, "fence/east").State != workflows.StatePending ||
		stepOf(t, failed, "stop-workloads/east").State != workflows.StatePending {
		t.Fatalf("the point step is %s, the fence %s", s.State, stepOf(t, failed, "fence/east").State)
	}
	if got := hooksRan(); got != before {
		t.Fatalf("a failover with no point ran hooks: %q", strings.TrimPrefix(got, before))
	}
	if u := f.west.Snapshot().Unit("vg/vg-1"); u.Role == sim.RolePrimary {
		t.Fatalf("a failover with no point promoted west's vg-1")
	}

	// A failover that ends after its point step, before its restore
	// (cancelled at a gate before the fence), keeps its hold.
	gated := *f.plan
	gated.Policy.Approvals = []string{"beforeFence"}
	run, err = workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Plan: &gated, From: "east", To: "west",
		LastSync: ps.LastSync(), Clients: ps.Clients["east"], PointAt: clean.Taken})
	mustOK(t, err)
	cancelled := workflows.ActionHolder(run.GetID(), run.GetRunID())
	waitFor(t, ctx, srv.Client, run, "approve beforeFence", workflows.StateWaiting)
	mustOK(t, srv.Client.CancelWorkflow(ctx, run.GetID(), run.GetRunID()))
	if err := run.Get(ctx, nil); err == nil {
		t.Fatalf("the cancelled failover completed")
	}

	// (a) The clean point.
	run, err = workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west",
		LastSync: ps.LastSync(), Clients: ps.Clients["east"], PointAt: clean.Taken})
	mustOK(t, err)
	holder := workflows.ActionHolder(run.GetID(), run.GetRunID())
	mustOK(t, run.Get(ctx, &res))
	allDone(t, res.Progress)
	if res.Point == nil || res.Point.ID != clean.ID {
		t.Fatalf("the failover went to point %+v, want %s", res.Point, clean.ID)
	}
	restored := map[string]string{}
	for _, v := range res.Restored {
		restored[v.Volume] = v.ID
	}
	if len(restored) != 4 || restored["v1"] == "" {
		t.Fatalf("restored %+v", res.Restored)
	}
	west := f.west.Snapshot()
	i := slices.IndexFunc(west.Clones, func(c sim.CloneState) bool { return c.ID == restored["v1"] })
	if i < 0 {
		t.Fatalf("west has no volume %s: %+v", restored["v1"], west.Clones)
	}
	if want := "drover-pit-shop-" + workflows.RunTag(run.GetRunID()) + "-v1"; west.Clones[i].Name != want {
		t.Fatalf("the restored v1 is named %q, want %q", west.Clones[i].Name, want)
	}
	if got := string(west.Clones[i].Blocks[0].Data); got != "clean" {
		t.Fatalf("the restored v1 holds %q, want the point's clean data", got)
	}
	u := west.Unit("vg/vg-1")
	if u == nil || u.Role != sim.RolePrimary || string(u.Blocks["v1"][0].Data) != "damage" {
		t.Fatalf("west's vg-1 after the failover: %+v; want it promoted and kept with the damage", u)
	}
	want := fmt.Sprintf("pg start west v1=%s solo=%s point=%s", restored["v1"], restored["solo"], clean.ID)
	if got := hooksRan(); !strings.Contains(got, want) || !strings.Contains(got, "web start west v1="+restored["v1"]) {
		t.Fatalf("the hooks ran %q; want %q", got, want)
	}
	if d := res.Discarded; d == nil || !d.From.Equal(clean.LastSync) || !d.To.Equal(ps.LastSync()) || d.Span != d.To.Sub(d.From) || d.Span <= 0 {
		t.Fatalf("discarded %+v; want from the point's last sync %v to the last sync known %v", res.Discarded, clean.LastSync, ps.LastSync())
	}
	if s := stepOf(t, res.Progress, "restore/west"); !strings.Contains(s.Output, "discarded: the writes from") || !strings.Contains(s.Output, clean.ID) {
		t.Fatalf("the restore step says %q", s.Output)
	}
	for _, c := range seen() {
		if strings.HasSuffix(c, "DeleteVolume") || strings.Contains(c, "Demote") {
			t.Fatalf("a failover to a point made %q", c)
		}
	}

	// Held by the failover's run after it ended, and kept by protection,
	// which goes on unprotected on west and prunes nothing.
	simtest.Eventually(t, time.Minute, "protection unprotected on west", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		return err == nil && ps.Primary == "west" && ps.Unprotected != nil && ps.Polls > 0
	})
	ps, err = workflows.ReadProtect(ctx, srv.Client, "shop")
	mustOK(t, err)
	polls := ps.Polls
	simtest.Eventually(t, time.Minute, "protection polling on past two cuts' time", func() bool {
		ps, err = workflows.ReadProtect(ctx, srv.Client, "shop")
		return err == nil && ps.Polls > polls+25
	})
	if i := slices.IndexFunc(ps.Points, func(x workflows.PointInTime) bool { return x.ID == clean.ID }); i < 0 || !slices.Equal(ps.Points[i].Held, []string{cancelled, holder}) {
		t.Fatalf("after the failover protection's points are %+v; want %s held by %s and %s", ps.Points, clean.ID, cancelled, holder)
	}
	if !slices.ContainsFunc(f.west.Snapshot().Snapshots, func(s sim.SnapshotState) bool { return s.ID == clean.Groups[0].Snapshots[0].ID }) {
		t.Fatalf("the point's snapshot %s is gone", clean.Groups[0].Snapshots[0].ID)
	}
	simtest.Eventually(t, time.Minute, "the record to say the plan runs on the restored volumes", func() bool {
		rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
		if err != nil || rec == nil || rec.Restored == nil {
			return false
		}
		i := slices.IndexFunc(rec.Points, func(x workflows.PointInTime) bool { return x.ID == clean.ID })
		return rec.Primary == "west" && rec.Restored.Point == clean.ID && rec.Restored.Site == "west" &&
			rec.Restored.Volumes["v1"] == restored["v1"] && i >= 0 && slices.Contains(rec.Points[i].Held, holder)
	})
}

// TestRecordRestoredUntilTheNextMove: the record says the plan runs on
// restored volumes from the failover's note (sent after its primary)
// until an action records a primary again; protection's summaries leave
// it.
func TestRecordRestoredUntilTheNextMove(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := recorderEnv(&s)
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	restored := &workflows.RestoredEntry{Point: "20261127T115900Z", Site: "west", Volumes: map[string]string{"v1": "clone-1"}, By: "failover", At: at}
	steps := []struct {
		c    workflows.RecordChange
		want *workflows.RestoredEntry
	}{
		{workflows.RecordChange{Primary: "west", More: []workflows.RecordChange{{Restored: restored}}}, restored},
		{workflows.RecordChange{Protection: &workflows.ProtectionEntry{Primary: "west", Enabled: true}}, restored},
		{workflows.RecordChange{Primary: "east"}, nil},
	}
	var got []string
	changes := make([]workflows.RecordChange, len(steps))
	for i, st := range steps {
		changes[i] = st.c
	}
	applyToRecord(t, env, at, changes, func(i int, _ workflows.RecordChange, rec workflows.PlanRecord) {
		st := steps[i]
		if (rec.Restored == nil) != (st.want == nil) || (st.want != nil && (rec.Restored.Point != st.want.Point || rec.Restored.Volumes["v1"] != "clone-1")) {
			got = append(got, fmt.Sprintf("after change %d: restored %+v, want %+v", i, rec.Restored, st.want))
		}
	})
	if len(got) > 0 {
		t.Fatal(strings.Join(got, "\n"))
	}
}

// TestFailoverToAPointOnNomad: as TestFailoverToAPoint, at a west whose
// workloads Nomad runs (the fake agent, the simulator its CSI controller
// plugin), where Nomad knows v1 as CSI volume pg-data, which job pg
// mounts, and solo as solo-vol, which job web mounts.
//
// While web also mounts scratch, a Nomad volume of no volume of the
// plan, a failover to the clean point ends at its point step: nothing
// held, no fence or promotion, no job registered on west.
//
// Without scratch, the failover to the clean point restores v1 and solo
// through Nomad (Nomad volumes pg-data-pit-RUN8 and solo-vol-pit-RUN8,
// made from the point's snapshots on west's storage), v2 and v3 through
// the CSI controller, and registers pg and web mounting the restored
// Nomad volumes, never the replicas', with the point in their meta; both
// become healthy on them (the fake fails an allocation whose CSI volume
// is missing). The restored v1 holds "clean", the promoted replica
// "damage". The record names each restored volume's Nomad volume and the
// replica's it replaced.
func TestFailoverToAPointOnNomad(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := pointsFixture(t, plans.PointsInTime{Every: plans.Duration(2 * time.Second), Keep: 4})
	_, west := f.nomadSites(t, "/bin/sleep")
	west.AddPlugin("sim", f.west.Endpoint())
	for _, v := range [][2]string{{"pg-data", "v1"}, {"solo-vol", "solo"}, {"scratch", "scratch-1"}} {
		west.AddVolume(api.CSIVolumeListStub{ID: v[0], Name: v[0], ExternalID: v[1], PluginID: "sim", Schedulable: true})
	}
	mounts := func(w string, sources ...string) {
		j := nomadfake.ServiceJob(w, 1, "/bin/sleep")
		j.TaskGroups[0].Volumes = map[string]*api.VolumeRequest{}
		for _, src := range sources {
			j.TaskGroups[0].Volumes[src] = &api.VolumeRequest{Name: src, Type: "csi", Source: src, AccessMode: "single-node-writer", AttachmentMode: "file-system"}
		}
		for i := range f.plan.Workloads {
			if f.plan.Workloads[i].Name == w {
				f.plan.Workloads[i].Sites["west"].Nomad.JobFile = nomadfake.WriteJobFile(t, j)
			}
		}
	}
	mounts("pg", "pg-data")
	mounts("web", "solo-vol", "scratch")
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	_, clean := cleanThenDamage(t, ctx, srv, f)
	ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
	mustOK(t, err)
	seen := f.recordRPCs()
	in := workflows.FailoverInput{Plan: f.plan, From: "east", To: "west", LastSync: ps.LastSync(), Clients: ps.Clients["east"], PointAt: clean.Taken}

	// web would mount scratch, which the point does not restore.
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failover, in)
	mustOK(t, err)
	refused := workflows.ActionHolder(run.GetID(), run.GetRunID())
	var res workflows.FailoverResult
	err = run.Get(ctx, &res)
	if err == nil || !strings.Contains(err.Error(), `mounts CSI volume "scratch", which the point in time`) {
		t.Fatalf("a failover to a point with web on scratch: %v", err)
	}
	v, err := srv.Client.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), workflows.QueryProgress)
	mustOK(t, err)
	var failed workflows.Progress
	mustOK(t, v.Get(&failed))
	if s := stepOf(t, failed, "point/west"); s.State != workflows.StateFailed || stepOf(t, failed, "fence/east").State != workflows.StatePending {
		t.Fatalf("the point step is %s, the fence %s", s.State, stepOf(t, failed, "fence/east").State)
	}
	for _, c := range seen() {
		// GetFenceClients and ListClusterFence only read (protection and
		// the preflight ask them): what must not happen is a change.
		if strings.HasSuffix(c, "FenceClusterNetwork") || strings.Contains(c, "Promote") || strings.HasSuffix(c, "CreateVolume") {
			t.Fatalf("a refused failover to a point made %q: %v", c, seen())
		}
	}
	if west.Job("", "pg") != nil || west.Job("", "web") != nil {
		t.Fatalf("a refused failover registered a job on west: %v", west.Calls())
	}
	ps, err = workflows.ReadProtect(ctx, srv.Client, "shop")
	mustOK(t, err)
	for _, pt := range ps.Points {
		if slices.Contains(pt.Held, refused) {
			t.Fatalf("the refused failover holds point %s", pt.ID)
		}
	}

	// Without scratch.
	mounts("web", "solo-vol")
	run, err = workflows.Start(ctx, srv.Client, "shop", workflows.Failover, in)
	mustOK(t, err)
	mustOK(t, run.Get(ctx, &res))
	allDone(t, res.Progress)
	run8 := workflows.RunTag(run.GetRunID())
	byVol := map[string]workflows.RestoredVolume{}
	for _, v := range res.Restored {
		byVol[v.Volume] = v
	}
	if len(byVol) != 4 || byVol["v1"].NomadID != "pg-data-pit-"+run8 || byVol["solo"].NomadID != "solo-vol-pit-"+run8 ||
		byVol["v2"].NomadID != "" || byVol["v3"].NomadID != "" {
		t.Fatalf("restored %+v", res.Restored)
	}
	for w, want := range map[string]workflows.RestoredVolume{"pg": byVol["v1"], "web": byVol["solo"]} {
		j := west.Job("", w)
		if j == nil || j.Stop == nil || *j.Stop || len(j.TaskGroups) != 1 || len(j.TaskGroups[0].Volumes) != 1 {
			t.Fatalf("west's Nomad has job %s %+v", w, j)
		}
		for _, vr := range j.TaskGroups[0].Volumes {
			if vr.Source != want.NomadID {
				t.Fatalf("job %s mounts %q, want the restored %q", w, vr.Source, want.NomadID)
			}
		}
		if j.Meta["DROVER_POINT"] != clean.ID {
			t.Fatalf("job %s has meta %v", w, j.Meta)
		}
		nv := west.Volume("default", want.NomadID)
		if nv == nil || nv.ExternalID != want.ID || nv.SnapshotID != want.Snapshot || nv.PluginID != "sim" {
			t.Fatalf("west's Nomad has %s as %+v; want volume %s from snapshot %s", want.NomadID, nv, want.ID, want.Snapshot)
		}
	}
	if m := west.Job("", "pg").Meta; m["DROVER_VOLUME_V1"] != byVol["v1"].ID {
		t.Fatalf("pg's meta %v", m)
	}
	st := f.west.Snapshot()
	i := slices.IndexFunc(st.Clones, func(c sim.CloneState) bool { return c.ID == byVol["v1"].ID })
	if i < 0 || string(st.Clones[i].Blocks[0].Data) != "clean" || st.Clones[i].Name != "drover-pit-shop-"+run8+"-v1" {
		t.Fatalf("west's restored v1: %+v", st.Clones)
	}
	if u := st.Unit("vg/vg-1"); u == nil || u.Role != sim.RolePrimary || string(u.Blocks["v1"][0].Data) != "damage" {
		t.Fatalf("west's vg-1 after the failover: %+v; want it promoted and kept with the damage", u)
	}
	for _, c := range seen() {
		if strings.HasSuffix(c, "DeleteVolume") || strings.Contains(c, "Demote") {
			t.Fatalf("a failover to a point made %q", c)
		}
	}
	if s := stepOf(t, res.Progress, "point/west"); !strings.Contains(s.Output, "2 of 4 volume(s) are Nomad CSI volumes, restored through Nomad") {
		t.Fatalf("the point step says %q", s.Output)
	}
	simtest.Eventually(t, time.Minute, "the record to name the restored Nomad volumes", func() bool {
		rec, err := workflows.ReadRecord(ctx, srv.Client, "shop")
		if err != nil || rec == nil || rec.Restored == nil {
			return false
		}
		return rec.Restored.Point == clean.ID && rec.Restored.Volumes["v1"] == byVol["v1"].ID &&
			rec.Restored.Nomad["v1"] == workflows.RestoredNomad{ID: "pg-data-pit-" + run8, Namespace: "default", Replica: "pg-data"} &&
			len(rec.Restored.Nomad) == 2
	})
}

// recordRPCs records every storage call that reaches a site of f from
// now on ("west PromoteVolume"); the function returns them so far.
func (f *fixture) recordRPCs() func() []string {
	var mu sync.Mutex
	var rpcs []string
	f.setOnRPC(func(site, method string, _ any, handle func() (any, error)) (any, error) {
		mu.Lock()
		rpcs = append(rpcs, site+" "+method)
		mu.Unlock()
		return handle()
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(rpcs)
	}
}
