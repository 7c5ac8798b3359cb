package workflows

import (
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
	if why := prunable(s.Points, &plansPointsKeep1, at.Add(time.Hour), "", true); why[s.Points[0].ID] != "" || why[s.Points[1].ID] == "" {
		t.Fatalf("a point held by b is pruned: %v", why)
	}
}
