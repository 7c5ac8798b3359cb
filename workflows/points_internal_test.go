package workflows

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/plans"
)

// plansPointsKeep1 keeps one point, for a minute.
var plansPointsKeep1 = plans.PointsInTime{Every: plans.Duration(time.Minute), Keep: 1, KeepFor: plans.Duration(time.Minute)}

// TestHoldOfAPointBeingPruned: protection refuses to hold or release a
// point it is deleting (the hold would hold nothing, and the record would
// hear of the point after its deletion), a point that is not there, and
// a failed cut (no point to recover to); a release of a failed cut is
// taken, and holds are counted per holder.
func TestHoldOfAPointBeingPruned(t *testing.T) {
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	s := &ProtectState{Points: []PointInTime{
		{ID: pointID(at), Site: "west", Taken: at},
		{ID: pointID(at.Add(time.Minute)), Site: "west", Taken: at.Add(time.Minute), Error: "the cut failed on db: refused"},
	}}
	pruning := map[string]bool{s.Points[0].ID: true}
	for _, tc := range []struct {
		h    PointHold
		want string
	}{
		{PointHold{Point: s.Points[0].ID, By: "drover-test-shop"}, "is being pruned"},
		{PointHold{Point: "20200101T000000Z", By: "drover-test-shop"}, "no point"},
		{PointHold{Point: s.Points[1].ID, By: "drover-test-shop"}, "no point to recover to"},
		{PointHold{Point: s.Points[0].ID}, "names the point and who holds it"},
		{PointHold{Point: s.Points[0].ID, By: "drover-test-shop", Release: true}, "is being pruned"},
		{PointHold{Point: s.Points[1].ID, By: "drover-test-shop", Release: true}, ""},
	} {
		err := s.validHold(tc.h, pruning)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("hold %+v: %v, want %q", tc.h, err, tc.want)
		}
	}
	delete(pruning, s.Points[0].ID)
	for _, by := range []string{"a", "b", "a"} {
		h := PointHold{Point: s.Points[0].ID, By: by}
		if err := s.validHold(h, pruning); err != nil {
			t.Fatal(err)
		}
		if _, err := s.hold(h); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(s.Points[0].Held, ","); got != "a,b" {
		t.Fatalf("held by %q, want a,b", got)
	}
	if _, err := s.hold(PointHold{Point: s.Points[0].ID, By: "a", Release: true}); err != nil || strings.Join(s.Points[0].Held, ",") != "b" {
		t.Fatalf("after a's release held by %v (%v)", s.Points[0].Held, err)
	}
	s.Points = append(s.Points, PointInTime{ID: pointID(at.Add(2 * time.Minute)), Site: "west", Taken: at.Add(2 * time.Minute)})
	if why, _ := prunable(s.Points, &plansPointsKeep1, at.Add(time.Hour), "", true, true); why[s.Points[0].ID] != "" || why[s.Points[1].ID] == "" {
		t.Fatalf("a point held by b is pruned: %v", why)
	}
}

// TestPendingPointPrunedOnceALaterOneSynced: a point cut at the primary
// whose copies still ship is kept while no later point is usable, and
// pruned once a later one's copies have all synced (they never will
// now), even while usable points are not pruned; a held one is kept,
// and a later failed cut does not count.
func TestPendingPointPrunedOnceALaterOneSynced(t *testing.T) {
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	keep := plans.PointsInTime{Every: plans.Duration(time.Minute), Keep: 10, KeepFor: plans.Duration(24 * time.Hour), Cut: plans.CutPrimary}
	point := func(min int, synced bool, held []string, failed string) PointInTime {
		pt := PointInTime{ID: pointID(at.Add(time.Duration(min) * time.Minute)), Site: "west", CutAt: "east",
			Taken: at.Add(time.Duration(min) * time.Minute), Held: held, Error: failed}
		if synced {
			pt.Synced = pt.Taken.Add(20 * time.Second)
		}
		return pt
	}
	for _, tc := range []struct {
		name        string
		points      []PointInTime
		pruneUsable bool
		pruned      []int // indexes into points
	}{
		{"a later point synced", []PointInTime{point(0, false, nil, ""), point(1, true, nil, "")}, true, []int{0}},
		{"while usable points are kept", []PointInTime{point(0, false, nil, ""), point(1, true, nil, "")}, false, []int{0}},
		{"the newest still shipping", []PointInTime{point(0, true, nil, ""), point(1, false, nil, "")}, true, nil},
		{"both still shipping", []PointInTime{point(0, false, nil, ""), point(1, false, nil, "")}, true, nil},
		{"held", []PointInTime{point(0, false, []string{"drover-test-shop"}, ""), point(1, true, nil, "")}, true, nil},
		{"a later cut failed", []PointInTime{point(0, false, nil, ""), point(1, false, nil, "refused")}, true, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, _ := prunable(tc.points, &keep, at.Add(2*time.Minute), "", tc.pruneUsable, true)
			want := map[string]bool{}
			for _, i := range tc.pruned {
				want[tc.points[i].ID] = true
			}
			for i, pt := range tc.points {
				if got := why[pt.ID] != ""; got != want[pt.ID] {
					t.Errorf("point %d (pending %v, usable %v, held %v): pruned %v (%q), want %v", i, pt.Pending(), pt.Usable(), pt.Held, got, why[pt.ID], want[pt.ID])
				}
			}
			if tc.pruned != nil && tc.points[tc.pruned[0]].Pending() && !strings.Contains(why[tc.points[tc.pruned[0]].ID], "had not synced when a later point's had") {
				t.Errorf("why: %q", why[tc.points[tc.pruned[0]].ID])
			}
		})
	}
}

// TestPruneKeepsEachSitesNewestInSyncPoint: whatever keep and keepFor
// say, pruning keeps the newest point in sync of each site (the site a
// failover lost included), counted within keep when it is among the
// newest and kept besides, with why, when not; older points in sync and
// points not in sync go as the policy says. A failed cut, or a point
// cut at the primary whose copies still ship, is not in sync.
func TestPruneKeepsEachSitesNewestInSyncPoint(t *testing.T) {
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	point := func(min int, site, notInSync string) PointInTime {
		taken := at.Add(time.Duration(min) * time.Minute)
		return PointInTime{ID: pointID(taken), Site: site, Taken: taken, NotInSync: notInSync}
	}
	failed := point(7, "west", "")
	failed.Error = "the cut failed on db: refused"
	shipping := point(8, "west", "")
	shipping.CutAt = "east"
	points := []PointInTime{
		point(0, "east", ""), point(1, "east", ""), point(2, "east", ""), // cut while west was primary
		point(3, "west", ""), point(4, "west", ""),
		point(5, "west", "db: its replication could not be read"), point(6, "west", "db: its replication could not be read"),
		failed, shipping,
		point(9, "west", "db: its replication could not be read"),
	}
	for _, tc := range []struct {
		name   string
		pit    plans.PointsInTime
		kept   []int // usable points kept, indexes into points
		beside []int // of them, those kept beyond the policy
	}{
		{"keep 4", plans.PointsInTime{Keep: 4}, []int{2, 4, 5, 6, 9}, []int{2}},
		{"keep 1", plans.PointsInTime{Keep: 1}, []int{2, 4, 9}, []int{2, 4}},
		{"keepFor 3m", plans.PointsInTime{KeepFor: plans.Duration(3 * time.Minute)}, []int{2, 4, 9}, []int{2, 4}},
		{"keep 10", plans.PointsInTime{Keep: 10}, []int{0, 1, 2, 3, 4, 5, 6, 9}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, kept := prunable(points, &tc.pit, at.Add(10*time.Minute), points[9].ID, true, true)
			for i, pt := range points {
				if !pt.Usable() || pt.Pending() {
					continue
				}
				if want := slices.Contains(tc.kept, i); (why[pt.ID] == "") != want {
					t.Errorf("point %d at %s (in sync %v): pruned %q, want kept %v", i, pt.Site, pt.InSync(), why[pt.ID], want)
				}
				want := slices.Contains(tc.beside, i)
				if (kept[pt.ID] != "") != want || want && !strings.Contains(kept[pt.ID], "the newest point in sync at "+pt.Site+", kept though") {
					t.Errorf("point %d at %s: kept beside the policy %q, want %v", i, pt.Site, kept[pt.ID], want)
				}
			}
			if why[failed.ID] == "" {
				t.Errorf("the failed cut is kept")
			}
		})
	}
}
