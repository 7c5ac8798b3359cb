package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/drover-dr/drover/workflows"
)

// renderProtection writes what a plan's protection knows at now. The lag
// grows from Protect's last look on (now minus the last sync known),
// whether or not the primary answers, and a group past the plan's RPO
// target is out of RPO by it; an unreachable primary gets a line of its
// own, and a group the storage reports unhealthy shows why.
func renderProtection(w io.Writer, ps *workflows.ProtectState, now time.Time) error {
	lag := func(h workflows.GroupHealth) time.Duration {
		if h.LastSync.IsZero() || h.Checked.IsZero() {
			return h.Lag
		}
		return h.Lag + max(now.Sub(h.Checked), 0)
	}
	past := func(h workflows.GroupHealth) bool {
		return h.OutOfRPO || (ps.RPOTarget > 0 && lag(h) > ps.RPOTarget)
	}
	out := ps.OutOfRPO
	for _, h := range ps.Groups {
		out = out || past(h)
	}
	rpo := "within the RPO target"
	if out {
		rpo = "OUT OF RPO"
	}
	fmt.Fprintf(w, "  primary %s, replication enabled %v, %d polls, %s%s\n", ps.Primary, ps.Enabled, ps.Polls, rpo, byText(ps.By))
	if ps.Trust != "" {
		fmt.Fprintf(w, "  %s\n", ps.Trust)
	}
	if ps.Unreachable != "" {
		since := ""
		if !ps.UnreachableSince.IsZero() {
			since = fmt.Sprintf(" since %s (%v)", ps.UnreachableSince.Local().Format(time.TimeOnly), now.Sub(ps.UnreachableSince).Round(time.Second))
		}
		fmt.Fprintf(w, "  PRIMARY %s UNREACHABLE%s: %s; the lag counts from the last sync known\n", ps.Primary, since, oneLine(ps.Unreachable))
	}
	names := make([]string, 0, len(ps.Groups))
	for g := range ps.Groups {
		names = append(names, g)
	}
	sort.Strings(names)
	tw := newTable(w, "  GROUP", "LAST SYNC", "LAG", "STATUS", "NOTE")
	for _, g := range names {
		h := ps.Groups[g]
		last := "never"
		if !h.LastSync.IsZero() {
			last = h.LastSync.Local().Format(time.TimeOnly)
		}
		note := h.Error
		if note == "" && h.Status != "" && h.Status != "HEALTHY" {
			note = h.Message // why the storage reports ERROR or DEGRADED
			if note == "" {
				note = "the storage gives no reason"
			}
		}
		if past(h) {
			note = strings.TrimSpace("out of RPO " + note)
		}
		tw.row("  "+g, last, lag(h).Round(time.Millisecond).String(), h.Status, oneLine(note))
	}
	return tw.flush()
}

// oneLine puts a message on one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
