package main

import (
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/workflows"
)

// TestRenderProtectionDeadPrimary: a protection whose primary stopped
// answering 25 s ago, against a 10 s target, with a last look 20 s old
// that still saw a 5 s lag, reads as out of RPO with a 25 s lag, says
// the primary is unreachable and since when, and a group in ERROR shows
// the storage's reason.
func TestRenderProtectionDeadPrimary(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	ps := &workflows.ProtectState{Primary: "east", Enabled: true, Polls: 7, RPOTarget: 10 * time.Second,
		Unreachable:      "the storage of east has not answered a poll for 5s",
		UnreachableSince: now.Add(-25 * time.Second),
		Groups: map[string]workflows.GroupHealth{
			"db":   {LastSync: now.Add(-25 * time.Second), Checked: now.Add(-20 * time.Second), Lag: 5 * time.Second},
			"logs": {LastSync: now.Add(-2 * time.Second), Checked: now.Add(-time.Second), Lag: time.Second, Status: "ERROR", Message: "image split-brain detected"},
		}}
	var b strings.Builder
	if err := renderProtection(&b, ps, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Log("\n" + out)
	for _, want := range []string{"OUT OF RPO", "PRIMARY east UNREACHABLE since", "(25s)", "has not answered a poll"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q", want)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 2 && f[0] == "db":
			if f[2] != "25s" || !strings.Contains(line, "out of RPO") {
				t.Errorf("db: %q; want a 25s lag, out of RPO", line)
			}
		case len(f) > 2 && f[0] == "logs":
			if !strings.Contains(line, "ERROR") || !strings.Contains(line, "split-brain") {
				t.Errorf("logs: %q; want ERROR and why", line)
			}
		}
	}
}
