package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/drover-dr/drover/workflows"
)

// TestProtectionNote: a failover from east whose plan's protection runs
// from west is told so (it knows no sync from east), not that the plan
// has no protection state; a plan with no protection running is told it
// is not protected; a protection that could not be read says why.
func TestProtectionNote(t *testing.T) {
	west := &workflows.ProtectState{Primary: "west", Enabled: true, Polls: 3}
	cases := []struct {
		name     string
		ps       *workflows.ProtectState
		err      error
		notFound bool
		want     []string
		not      string
	}{
		{"protection from the other site", west, nil, false,
			[]string{`protection of plan "shop" runs from west, not from east`, "no sync from east", "RPO will be unknown"}, "no protection state"},
		{"no protection", nil, errors.New("workflow not found"), true,
			[]string{`plan "shop" is not protected`, "drctl protect start"}, "runs from"},
		{"unreadable", nil, errors.New("deadline exceeded"), false,
			[]string{"could not be read (deadline exceeded)"}, "not protected"},
	}
	for _, c := range cases {
		got := protectionNote("shop", "east", c.ps, c.err, c.notFound)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: note %q lacks %q", c.name, got, w)
			}
		}
		if strings.Contains(got, c.not) {
			t.Errorf("%s: note %q says %q", c.name, got, c.not)
		}
	}
}
