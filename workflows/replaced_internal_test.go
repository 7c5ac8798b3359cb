package workflows

import (
	"maps"
	"testing"

	"github.com/drover-dr/drover/orchestrators"
	"github.com/drover-dr/drover/plans"
)

// standInFixture is a plan whose Nomad jobs at east and west use group
// db (v1, v2), and the record of a reprotect of volumes restored from
// point P: r1 and r2 stand in for v1 and v2 at both sites; v1's Nomad
// volume is pg-data at west (r1's Nomad volume pg-data-pit-FO) and
// pg-data-east at east (r1's copy registered as pg-data-east-pit-RP);
// Nomad knows neither v2.
func standInFixture() (*plans.Plan, *ReplacedEntry) {
	job := func(id string) plans.WorkloadRef { return plans.WorkloadRef{Nomad: &plans.NomadJob{Job: id}} }
	p := &plans.Plan{
		VolumeGroups: []plans.VolumeGroup{{Name: "db", Sites: map[string]plans.GroupRef{
			"east": {Volumes: []string{"v1", "v2"}}, "west": {Volumes: []string{"v1", "v2"}}}}},
		Workloads: []plans.Workload{
			{Name: "pg", VolumeGroups: []string{"db"}, Sites: map[string]plans.WorkloadRef{"east": job("pg"), "west": job("pg")}},
			{Name: "web", VolumeGroups: []string{"other"}, Sites: map[string]plans.WorkloadRef{"east": job("web")}},
		},
	}
	rep := &ReplacedEntry{Point: "P", Groups: map[string]map[string][]StandIn{"db": {
		"west": {{Name: "v1", ID: "r1", Nomad: &RestoredNomad{ID: "pg-data-pit-FO", Namespace: "default", Replica: "pg-data"}}, {Name: "v2", ID: "r2"}},
		"east": {{Name: "v1", ID: "r1", Nomad: &RestoredNomad{ID: "pg-data-east-pit-RP", Namespace: "default", Replica: "pg-data-east"}}, {Name: "v2", ID: "r2"}},
	}}}
	return p, rep
}

// TestReplacedPlanStartsNomadJobsOnTheStandIns: with the volumes of a
// reprotect standing in, every Nomad job of a site starts on that
// site's stand-ins (each replica's Nomad volume mapped to its
// stand-in's there, whichever groups the job lists: a job mounting a
// kept replica never starts on it), with the stand-ins of its own groups
// in its meta; the plan itself is not changed.
func TestReplacedPlanStartsNomadJobsOnTheStandIns(t *testing.T) {
	p, rep := standInFixture()
	q := replacedPlan(p, rep)
	for _, c := range []struct {
		w, site string
		vols    map[string]string
		meta    map[string]string
	}{
		{"pg", "west", map[string]string{"pg-data": "pg-data-pit-FO"}, map[string]string{"DROVER_VOLUME_V1": "r1", "DROVER_VOLUME_V2": "r2"}},
		{"pg", "east", map[string]string{"pg-data-east": "pg-data-east-pit-RP"}, map[string]string{"DROVER_VOLUME_V1": "r1", "DROVER_VOLUME_V2": "r2"}},
		{"web", "east", map[string]string{"pg-data-east": "pg-data-east-pit-RP"}, map[string]string{}},
	} {
		var r *plans.NomadRestore
		for _, w := range q.Workloads {
			if w.Name == c.w {
				r = w.Sites[c.site].Nomad.Restore
			}
		}
		if r == nil || r.Point != "P" || !maps.Equal(r.Volumes, c.vols) || !maps.Equal(r.Meta, c.meta) {
			t.Fatalf("%s at %s starts with %+v; want volumes %v, meta %v", c.w, c.site, r, c.vols, c.meta)
		}
	}
	for _, w := range p.Workloads {
		for site, ref := range w.Sites {
			if ref.Nomad.Restore != nil {
				t.Fatalf("replacedPlan changed the plan's %s at %s", w.Name, site)
			}
		}
	}
}

// TestStandInJobsComposeWithCopiesAndPoints: a test recovery's copy of a
// job on stand-ins mounts the copy of the stand-in in place of both the
// stand-in and the replica it replaced (as Nomad has it, the job may
// still name the replica); a failover to a later point starts it on the
// newly restored volume in place of both too. Neither leaves a source
// on the kept replica.
func TestStandInJobsComposeWithCopiesAndPoints(t *testing.T) {
	p, rep := standInFixture()
	q := replacedPlan(p, rep)
	tp := testPlan(q, "east", []TestCopy{{Group: "db", Volume: "r1", Copy: "c1", Nomad: &orchestrators.CSIVolume{ID: "pg-data-east-pit-RP"}, NomadCopy: "pg-data-east-pit-RP-test"}})
	var tj *plans.NomadJob
	for _, w := range tp.Workloads {
		if w.Name == "pg-test" {
			tj = w.Sites["east"].Nomad
		}
	}
	want := map[string]string{"pg-data-east-pit-RP": "pg-data-east-pit-RP-test", "pg-data-east": "pg-data-east-pit-RP-test"}
	if tj == nil || tj.Test == nil || !maps.Equal(tj.Test.Volumes, want) || tj.Restore != nil {
		t.Fatalf("the test copy of pg: %+v; want volumes %v and no restore", tj, want)
	}
	nj := q.Workloads[0].Sites["west"].Nomad
	got := nomadRestored(q.Workloads[0], nj, "P2", []RestoredVolume{{Group: "db", Volume: "r1", ID: "r1b",
		Nomad: &orchestrators.CSIVolume{ID: "pg-data-pit-FO"}, NomadID: "pg-data-pit-FO2"}})
	if w := map[string]string{"pg-data-pit-FO": "pg-data-pit-FO2", "pg-data": "pg-data-pit-FO2"}; !maps.Equal(got.Restore.Volumes, w) {
		t.Fatalf("a failover to a later point starts pg on %v, want %v", got.Restore.Volumes, w)
	}
}

// TestStandInsNamedAfterTheRestoringRun: the Nomad volumes a reprotect
// registers are named after the failover that restored the volumes, read
// from the record's note (its hold on the point, else its run), so that
// every run of the reprotect asks for the same names.
func TestStandInsNamedAfterTheRestoringRun(t *testing.T) {
	for _, c := range []struct {
		rs   RestoredEntry
		want string
	}{
		{RestoredEntry{Holder: ActionHolder("drover-action-shop", "019abcde-0000-7000-8000-000000000001"), By: "drover-action-shop run other"}, "019abcde-0000-7000-8000-000000000001"},
		{RestoredEntry{By: "drover-action-shop run 019abcde-0000-7000-8000-000000000002"}, "019abcde-0000-7000-8000-000000000002"},
		{RestoredEntry{Holder: "alice@host"}, ""},
		{RestoredEntry{}, ""},
	} {
		if got := restoringRun(&c.rs); got != c.want {
			t.Fatalf("restoringRun(%+v) = %q, want %q", c.rs, got, c.want)
		}
	}
	if got := restoredNomadID("pg-data-east", restoringRun(&RestoredEntry{Holder: ActionHolder("w", "019abcde-1111")})); got != "pg-data-east-pit-cde-1111" {
		t.Fatalf("named %q", got)
	}
}

// TestRunTagTellsRunsOfTheSameMinuteApart: run ids begin with their time
// (UUIDv7), so two failovers a minute apart share their first
// characters: the names their volumes are asked for under must differ
// all the same, or the second would be handed the first's volume.
func TestRunTagTellsRunsOfTheSameMinuteApart(t *testing.T) {
	a, b := "019ac4f2-5b1e-7d21-9a0c-4f6e1b2c3d4e", "019ac4f2-8c03-7e55-b1d2-9a8b7c6d5e4f"
	if restoredName("shop", a, "v1") == restoredName("shop", b, "v1") || restoredNomadID("pg", a) == restoredNomadID("pg", b) || nomadCopyID("pg", a) == nomadCopyID("pg", b) {
		t.Fatalf("runs %s and %s name their volumes alike: %s", a, b, restoredName("shop", a, "v1"))
	}
	if got := RunTag(a); got != "1b2c3d4e" {
		t.Fatalf("RunTag(%s) = %q", a, got)
	}
}
