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

// newestLook is what status shows of a plan's protection in its record
// line and its JSON: the record's copy, or protection's own summary
// (workflows.ProtectState.Summary) when protection answered with a
// newer look. The record takes the lag only every few polls; protection
// judges it every poll, and every view shows that judgment as it is,
// never aged by its own clock.
func newestLook(rec *workflows.ProtectionEntry, ps *workflows.ProtectState, running bool) *workflows.ProtectionEntry {
	if ps == nil || ps.Looked.IsZero() || (rec != nil && !ps.Looked.After(rec.Checked)) {
		return rec
	}
	return ps.Summary(running, ps.Looked)
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

// renderProtection writes what a plan's protection knows: each group's
// lag and RPO state as protection judged them at its last look (the same
// figures as the metrics, the dashboard and the record line), an
// unreachable primary on a line of its own, and why a group the storage
// reports unhealthy is so.
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
	rpo := "within the RPO target"
	if ps.OutOfRPO {
		rpo = "OUT OF RPO"
	}
	asOf := ""
	if !ps.Looked.IsZero() {
		asOf = " as of " + ps.Looked.Local().Format(time.TimeOnly)
	}
	fmt.Fprintf(w, "  primary %s, replication enabled %v, %d polls, %s%s%s\n", ps.Primary, ps.Enabled, ps.Polls, rpo, asOf, byText(ps.By))
	if ps.Trust != "" {
		fmt.Fprintf(w, "  %s\n", ps.Trust)
	}
	renderRefusedRetargets(w, ps)
	if ps.Unreachable != "" {
		since := ""
		if !ps.UnreachableSince.IsZero() {
			since = " since " + ps.UnreachableSince.Local().Format(time.TimeOnly)
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
		if h.OutOfRPO {
			parts := slices.DeleteFunc([]string{h.Why, note}, func(x string) bool { return x == "" })
			note = strings.TrimSpace("out of RPO: " + strings.Join(parts, "; "))
			note = strings.TrimSuffix(note, ":")
		}
		tw.row("  "+g, last, lagText(h.Lag), h.Status, oneLine(note))
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

// lagText is how every view writes a lag: to the millisecond.
func lagText(d time.Duration) string { return d.Round(time.Millisecond).String() }

// oneLine puts a message on one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
