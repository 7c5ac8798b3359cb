package main

import (
	"testing"
	"time"

	"github.com/drover-dr/drover/workflows"
)

// TestPointTimeOfAnID: --point with a point's id picks that point,
// though the id is its cut's time to the second and the cut a fraction
// of a second later; with a time, the point cut at or before it; with
// newest, the newest.
func TestPointTimeOfAnID(t *testing.T) {
	cut := time.Date(2026, 11, 27, 13, 20, 45, 300_000_000, time.UTC)
	points := []workflows.PointInTime{
		{ID: "20261127T132044Z", Site: "west", Taken: cut.Add(-time.Second)},
		{ID: "20261127T132045Z", Site: "west", Taken: cut},
		{ID: "20261127T132046Z", Site: "west", Taken: cut.Add(time.Second)},
	}
	for in, want := range map[string]string{
		"20261127T132045Z":          "20261127T132045Z",
		"20261127t132044z":          "20261127T132044Z",
		"2026-11-27T13:20:45Z":      "20261127T132044Z",
		"2026-11-27T13:20:45.4Z":    "20261127T132045Z",
		"2026-11-27T14:20:45+01:00": "20261127T132044Z",
		"newest":                    "20261127T132046Z",
	} {
		at, err := parsePointTime(in)
		if err != nil {
			t.Fatalf("--point %s: %v", in, err)
		}
		pt, err := workflows.PointFor(points, "west", at)
		if err != nil || pt.ID != want {
			t.Errorf("--point %s picks %+v (%v), want %s", in, pt, err, want)
		}
	}
	if _, err := parsePointTime("yesterday"); err == nil {
		t.Errorf("--point yesterday was read")
	}
}
