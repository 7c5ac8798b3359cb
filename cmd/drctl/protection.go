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
	if ps.Ended != "" {
		fmt.Fprintf(w, "  %s\n", endedText(ps.Ended))
	}
	if u := ps.Unprotected; u != nil {
		// No replica: nothing to lag, nothing out of RPO.
		fmt.Fprintf(w, "  primary %s, %d polls%s\n  %s\n", ps.Primary, ps.Polls, byText(ps.By), unprotectedText(plan, ps.Primary, u, now, reprotecting))
		if ps.Trust != "" {
			fmt.Fprintf(w, "  %s\n", ps.Trust)
		}
		renderSignature(w, plan, ps, now)
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
	renderSignature(w, plan, ps, now)
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

// renderSignature writes when the plan's signature ends, while
// protection runs (after its end, Ended says it all).
func renderSignature(w io.Writer, plan string, ps *workflows.ProtectState, now time.Time) {
	if ps.Ended != "" {
		return
	}
	if text, _ := signatureText(plan, ps.SignatureEnds, now); text != "" {
		fmt.Fprintf(w, "  %s\n", text)
	}
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

// signatureText says when the signature of a protected plan ends, seen
// at now: plainly, with what to do, from workflows.SignatureWarning
// before its end (warn), and that protection ends at its next poll once
// it has ended. "" for a signature with no end. Status and the
// dashboard say it alike.
func signatureText(plan string, ends, now time.Time) (text string, warn bool) {
	if ends.IsZero() {
		return "", false
	}
	at := ends.Local().Format("2006-01-02 15:04")
	left := ends.Sub(now)
	switch {
	case left <= 0:
		return fmt.Sprintf("WARNING: the plan's signature ended %s (%s ago): protection ends at its next poll; sign it again (drctl plan sign PLAN.yaml --key KEY) and drctl protect start %s",
			at, leftText(-left), plan), true
	case left <= workflows.SignatureWarning:
		return fmt.Sprintf("WARNING: the plan's signature ends %s (in %s), and protection with it: sign it again: drctl plan sign PLAN.yaml --key KEY, then drctl protect stop %s and drctl protect start %s (a running protection keeps its signature)",
			at, leftText(left), plan, plan), true
	}
	return fmt.Sprintf("the plan's signature ends %s (in %s); protection ends with it", at, leftText(left)), false
}

// leftText writes a time left in days and hours, or hours and minutes
// under a day, or minutes under an hour.
func leftText(d time.Duration) string {
	switch {
	case d >= 24*time.Hour:
		h := int(d.Round(time.Hour).Hours())
		if h%24 == 0 {
			return fmt.Sprintf("%dd", h/24)
		}
		return fmt.Sprintf("%dd%dh", h/24, h%24)
	case d >= time.Hour:
		m := int(d.Round(time.Minute).Minutes())
		return fmt.Sprintf("%dh%dm", m/60, m%60)
	}
	return fmt.Sprintf("%dm", int(d.Round(time.Minute).Minutes()))
}

// endedText is why protection ended on its own (workflows.ProtectState
// Ended), as status and the dashboard show it.
func endedText(ended string) string {
	if rest, ok := strings.CutPrefix(ended, "protection ended: "); ok {
		return "PROTECTION ENDED: " + rest
	}
	return ended
}

// protectionWarning is what the dashboard shows on a plan's row of its
// protection's end: why it ended, or its signature's end ahead, from
// workflows.SignatureWarning before it; "" otherwise.
func protectionWarning(plan string, ps *workflows.ProtectState, now time.Time) string {
	if ps.Ended != "" {
		return endedText(ps.Ended)
	}
	if text, warn := signatureText(plan, ps.SignatureEnds, now); warn {
		return text
	}
	return ""
}

// lagText is how every view writes a lag: to the millisecond.
func lagText(d time.Duration) string { return d.Round(time.Millisecond).String() }

// oneLine puts a message on one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
