package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/workflows"
)

// groupLag is a group's replication lag at now: now minus the last sync
// known, whether or not the primary answers, so that it grows by the
// wall clock while a site is down. Protect's Lag is the same difference
// taken at its own last look (a poll, or a tick of its watch while a
// poll round hangs, which leaves Checked at the last finished round): it
// is used only while no sync is known.
func groupLag(h workflows.GroupHealth, now time.Time) time.Duration {
	if h.LastSync.IsZero() {
		return h.Lag
	}
	return max(now.Sub(h.LastSync), 0)
}

// unreachableText says why the primary is taken as unreachable. Protect's
// watch words it "has not answered a poll for" the time since
// UnreachableSince at its last tick: the time is counted here from
// UnreachableSince to now, so that it grows by the wall clock.
func unreachableText(ps *workflows.ProtectState, now time.Time) string {
	why := oneLine(ps.Unreachable)
	if strings.Contains(why, "has not answered a poll for") && !ps.UnreachableSince.IsZero() {
		why = fmt.Sprintf("the storage of %s has not answered a poll for %v", ps.Primary, now.Sub(ps.UnreachableSince).Round(time.Second))
	}
	return why
}

// protectionAt is a copy of a protection's state as the text status
// tells it at now, for status -o json: each group's lag is now minus its
// last sync (groupLag) and out of RPO past the target, and the reason
// the primary is unreachable counts from UnreachableSince.
func protectionAt(ps *workflows.ProtectState, now time.Time) *workflows.ProtectState {
	c := *ps
	c.Groups = make(map[string]workflows.GroupHealth, len(ps.Groups))
	for g, h := range ps.Groups {
		h.Lag = groupLag(h, now)
		h.OutOfRPO = h.OutOfRPO || (ps.RPOTarget > 0 && h.Lag > ps.RPOTarget)
		c.OutOfRPO = c.OutOfRPO || h.OutOfRPO
		c.Groups[g] = h
	}
	if c.Unreachable != "" {
		c.Unreachable = unreachableText(ps, now)
	}
	return &c
}

// unprotectedText names the state of a plan a failover left without a
// replica, at now: where it runs, since when it has none, what last
// reached the lost site, and the command that protects it again, or,
// while a reprotect of the plan runs (reprotecting: its workflow ID),
// that one does. Status (its record and protection lines) and the
// dashboard say it alike.
func unprotectedText(plan, primary string, u *workflows.Unprotection, now time.Time, reprotecting string) string {
	last := "no sync of it was known"
	if !u.LastSync.IsZero() {
		last = "its last sync known " + u.LastSync.Local().Format(time.DateTime)
	}
	next := fmt.Sprintf("next: drctl reprotect %s once %s is back", plan, u.Lost)
	if reprotecting != "" {
		next = fmt.Sprintf("a reprotect runs (drctl watch %s)", reprotecting)
	}
	return fmt.Sprintf("UNPROTECTED: running on %s, no replica since %s (%v): %s was lost (%s); %s",
		primary, u.Since.Local().Format(time.DateTime), max(now.Sub(u.Since), 0).Round(time.Second), u.Lost, last, next)
}

// runningReprotect is the workflow ID of x when it is a reprotect that
// runs, else "".
func runningReprotect(x *execution) string {
	if x != nil && x.Type == names.Reprotect && x.Status == "running" {
		return x.WorkflowID
	}
	return ""
}

// renderProtection writes what a plan's protection knows at now. The lag
// grows from the last sync known (groupLag), whether or not the primary
// answers, and a group past the plan's RPO target is out of RPO by it;
// an unreachable primary gets a line of its own, and a group the storage
// reports unhealthy shows why.
func renderProtection(w io.Writer, plan string, ps *workflows.ProtectState, now time.Time, reprotecting string) error {
	if u := ps.Unprotected; u != nil {
		// No replica: nothing to lag, nothing out of RPO.
		fmt.Fprintf(w, "  primary %s, %d polls%s\n  %s\n", ps.Primary, ps.Polls, byText(ps.By), unprotectedText(plan, ps.Primary, u, now, reprotecting))
		if ps.Trust != "" {
			fmt.Fprintf(w, "  %s\n", ps.Trust)
		}
		renderRefusedRetargets(w, ps)
		return nil
	}
	lag := func(h workflows.GroupHealth) time.Duration { return groupLag(h, now) }
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
	renderRefusedRetargets(w, ps)
	if ps.Unreachable != "" {
		since := ""
		if !ps.UnreachableSince.IsZero() {
			since = fmt.Sprintf(" since %s (%v)", ps.UnreachableSince.Local().Format(time.TimeOnly), now.Sub(ps.UnreachableSince).Round(time.Second))
		}
		fmt.Fprintf(w, "  PRIMARY %s UNREACHABLE%s: %s; the lag counts from the last sync known\n", ps.Primary, since, unreachableText(ps, now))
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
			why := h.Why
			if why == "" && h.Error == "" && !h.LastSync.IsZero() {
				// Past the target by the wall clock since the last poll.
				why = fmt.Sprintf("%s (the primary) answered, but no sync has arrived since %s", ps.Primary, last)
			}
			parts := slices.DeleteFunc([]string{why, note}, func(x string) bool { return x == "" })
			note = strings.TrimSpace("out of RPO: " + strings.Join(parts, "; "))
			note = strings.TrimSuffix(note, ":")
		}
		tw.row("  "+g, last, lag(h).Round(time.Millisecond).String(), h.Status, oneLine(note))
	}
	return tw.flush()
}

// renderRefusedRetargets writes the latest retargets protection refused
// (without a worker's seal: SECURITY.md), with who they say sent them.
func renderRefusedRetargets(w io.Writer, ps *workflows.ProtectState) {
	if ps.RefusedCount == 0 {
		return
	}
	fmt.Fprintf(w, "  REFUSED: %d retarget(s) without a worker's valid seal; the latest:\n", ps.RefusedCount)
	for _, x := range ps.Refused[max(len(ps.Refused)-5, 0):] {
		from := ""
		if x.From != "" {
			from = " said to be from " + x.From
		}
		fmt.Fprintf(w, "    %s %s%s: %s\n", x.At.Local().Format(time.DateTime), x.What, from, oneLine(x.Reason))
	}
}

// oneLine puts a message on one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
