package main

import (
	"html"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// TestRenderProtectionDeadPrimary: a protection whose primary stopped
// answering 25 s ago (its last sync), against a 10 s target, as Protect's
// watch leaves it at a tick a second ago: the lag aged to 24 s and judged
// out of RPO, the reason counting from the first poll left unanswered.
// Status shows that look as it is (24 s, not now minus the last sync),
// says since when the primary has not answered, shows a group in ERROR
// with the storage's reason, and ten seconds later shows the same look:
// it is protection's, as of its time, and the metrics carry the same.
func TestRenderProtectionDeadPrimary(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	ps := &workflows.ProtectState{Primary: "east", Enabled: true, Polls: 7, RPOTarget: 10 * time.Second, OutOfRPO: true,
		Looked:           now.Add(-time.Second),
		Unreachable:      "the storage of east has not answered a poll for 24s",
		UnreachableSince: now.Add(-25 * time.Second),
		Groups: map[string]workflows.GroupHealth{
			"db":   {LastSync: now.Add(-25 * time.Second), Checked: now.Add(-20 * time.Second), Lag: 24 * time.Second, OutOfRPO: true, Error: "not answered yet", Why: "the storage of east (the primary) did not answer"},
			"logs": {LastSync: now.Add(-2 * time.Second), Checked: now.Add(-time.Second), Lag: time.Second, Status: "ERROR", Message: "image split-brain detected"},
		}}
	render := func(at time.Time) string {
		var b strings.Builder
		if err := renderProtection(&b, "shop", ps, at, ""); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	out := render(now)
	t.Log("\n" + out)
	for _, want := range []string{"OUT OF RPO as of", "PRIMARY east UNREACHABLE since", "the storage of east has not answered a poll for 24s"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q", want)
		}
	}
	if later := render(now.Add(10 * time.Second)); later != out {
		t.Errorf("ten seconds later status aged protection's look by its own clock:\n%s", later)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 2 && f[0] == "db":
			if f[2] != "24s" || !strings.Contains(line, "out of RPO: the storage of east (the primary) did not answer") {
				t.Errorf("db: %q; want protection's 24s lag, out of RPO and why", line)
			}
		case len(f) > 2 && f[0] == "logs":
			if f[2] != "1s" || !strings.Contains(line, "ERROR") || !strings.Contains(line, "split-brain") {
				t.Errorf("logs: %q; want a 1s lag, ERROR and why", line)
			}
		}
	}
}

// TestRenderProtectionBlamesTheReplica: a plan out of RPO because its
// replica takes no syncs while the primary answers says so in its row,
// with no word of the primary being unreachable; a group protection
// judged within the target is not out of RPO, however old its last sync
// is by the reader's clock.
func TestRenderProtectionBlamesTheReplica(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	why := "east (the primary) answers, but west (the replica) has taken no sync since 2026-12-07T11:57:00Z: replication to west stopped"
	ps := &workflows.ProtectState{Primary: "east", Enabled: true, Polls: 30, RPOTarget: 2 * time.Minute, OutOfRPO: true, Looked: now,
		Groups: map[string]workflows.GroupHealth{
			"db":  {LastSync: now.Add(-3 * time.Minute), Checked: now, Lag: 3 * time.Minute, OutOfRPO: true, Why: why},
			"web": {LastSync: now.Add(-150 * time.Second), Checked: now, Lag: 110 * time.Second},
		}}
	var b strings.Builder
	if err := renderProtection(&b, "shop", ps, now, ""); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "out of RPO: "+why) || strings.Contains(out, "UNREACHABLE") {
		t.Errorf("the replica's stop is not told as such:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "web" && (f[2] != "1m50s" || strings.Contains(line, "out of RPO")) {
			t.Errorf("web: %q; want protection's 1m50s, within the target", line)
		}
	}
}

// TestRecordLineShowsTheNewestLook: the record keeps protection's lag as
// of its last report (528 ms, 40 s ago); status's record line shows it
// as it is, as of its time, never aged by drctl's clock. Once protection
// answers with a newer look, the record line (and its JSON) is that
// look, word for word what the protection lines say.
func TestRecordLineShowsTheNewestLook(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	r := &workflows.PlanRecord{Plan: "shop", Primary: "east", Protection: &workflows.ProtectionEntry{
		Primary: "east", Running: true, Enabled: true, LastSync: now.Add(-41 * time.Second), Lag: 528 * time.Millisecond, Checked: now.Add(-40 * time.Second)}}
	var b strings.Builder
	renderRecord(&b, r, now, "")
	out := b.String()
	t.Log("\n" + out)
	if !strings.Contains(out, "lag 528ms, within the RPO target (as of ") {
		t.Errorf("the record's protection line is not the record's look:\n%s", out)
	}
	ps := &workflows.ProtectState{Primary: "east", Enabled: true, Polls: 9, RPOTarget: 10 * time.Second, Looked: now.Add(-time.Second), OutOfRPO: true,
		Groups: map[string]workflows.GroupHealth{
			"db":  {LastSync: now.Add(-13 * time.Second), Checked: now.Add(-time.Second), Lag: 12230 * time.Millisecond, OutOfRPO: true},
			"web": {LastSync: now.Add(-2 * time.Second), Checked: now.Add(-time.Second), Lag: 814 * time.Millisecond},
		}}
	r.Protection = newestLook(r.Protection, ps, true)
	b.Reset()
	renderRecord(&b, r, now.Add(time.Minute), "")
	if !strings.Contains(b.String(), "lag 12.23s, OUT OF RPO (as of ") || r.Protection.Lag != 12230*time.Millisecond || !r.Protection.OutOfRPO {
		t.Errorf("the record line is not protection's newer look:\n%s", b.String())
	}
	// An older look than the record's is not taken.
	old := &workflows.ProtectState{Primary: "east", Looked: now.Add(-2 * time.Minute), Groups: map[string]workflows.GroupHealth{"db": {Lag: time.Hour}}}
	if got := newestLook(r.Protection, old, true); got != r.Protection {
		t.Errorf("an older look replaced the record's: %+v", got)
	}
}

// TestRecordLineAfterAReprotect: right after a reprotect, the record
// still holds protection's last report, from before it (unprotected,
// "next: drctl reprotect"); status says instead that the reprotect ended
// the unprotection and that protection has not reported since. Once
// protection reports after the reprotect, its report is shown.
func TestRecordLineAfterAReprotect(t *testing.T) {
	now := time.Date(2026, 11, 28, 2, 0, 0, 0, time.UTC)
	u := &workflows.Unprotection{Lost: "east", Since: now.Add(-10 * time.Minute), LastSync: now.Add(-11 * time.Minute)}
	r := &workflows.PlanRecord{Plan: "shop", Primary: "west",
		Protection: &workflows.ProtectionEntry{Primary: "west", Running: true, Unprotected: u, Checked: now.Add(-40 * time.Second)},
		LastAction: &workflows.ActionEntry{Action: "reprotect", WorkflowID: "drover-action-shop", From: "east", To: "west",
			Outcome: workflows.StateCompleted, Start: now.Add(-2 * time.Minute), End: now.Add(-5 * time.Second)}}
	var b strings.Builder
	renderRecord(&b, r, now, "")
	out := b.String()
	if strings.Contains(out, "UNPROTECTED") || strings.Contains(out, "next: drctl reprotect") || !strings.Contains(out, "reprotected at ") ||
		!strings.Contains(out, "protection has not reported since") {
		t.Errorf("right after a reprotect, the record's protection line:\n%s", out)
	}
	// Protection reported after the reprotect: its report stands.
	r.Protection = &workflows.ProtectionEntry{Primary: "west", Running: true, Enabled: true, LastSync: now.Add(-2 * time.Second), Checked: now.Add(-time.Second)}
	b.Reset()
	renderRecord(&b, r, now, "")
	if out := b.String(); strings.Contains(out, "not reported since") || !strings.Contains(out, "replication enabled true") {
		t.Errorf("protection's report after the reprotect is not shown:\n%s", out)
	}
	// A report of unprotection after the reprotect (a later failover
	// whose own record change has yet to come) is shown as it is.
	r.Protection = &workflows.ProtectionEntry{Primary: "west", Running: true, Unprotected: u, Checked: now.Add(-time.Second)}
	b.Reset()
	renderRecord(&b, r, now, "")
	if out := b.String(); !strings.Contains(out, "UNPROTECTED") {
		t.Errorf("an unprotection reported after the reprotect is hidden:\n%s", out)
	}
}

// TestRecordShowsWhatItRefused: drctl status shows the plan version the
// record holds and what it refused, with the workflow id each refusal
// came from (SECURITY.md: refused attempts are visible to the operator).
func TestRecordShowsWhatItRefused(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	r := &workflows.PlanRecord{Plan: "shop", Primary: "west",
		Version: &workflows.PlanVersion{SignedAt: now.Add(-time.Hour), KeyID: "10bef59f99336889", Accepted: now, Workflow: "Failover", WorkflowID: "drover-action-shop"},
		Refused: []workflows.RefusedEntry{{What: "plan version signed at 2026-11-23T10:00:00Z", Reason: "a newer version of the plan was accepted", From: "not-drover", At: now},
			{What: "change primary east", Reason: "it carries no worker's seal", From: workflows.UnknownSender, At: now}},
		RefusedCount: 2}
	var b strings.Builder
	renderRecord(&b, r, now, "")
	out := b.String()
	for _, want := range []string{"plan version: signed ", "by key 10bef59f99336889", "REFUSED: 2 attempt(s)", "from workflow not-drover: a newer version of the plan was accepted",
		"change primary east from an unknown sender: it carries no worker's seal"} {
		if !strings.Contains(out, want) {
			t.Errorf("status does not say %q:\n%s", want, out)
		}
	}
}

// TestProtectionShowsRefusedRetargets: drctl status shows the retargets
// protection refused, protected or not, with why and who they name.
func TestProtectionShowsRefusedRetargets(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	refused := []workflows.RefusedEntry{{What: "retarget to west, unprotected (east lost)", Reason: "it carries no worker's seal", From: "forged", At: now}}
	for _, ps := range []*workflows.ProtectState{
		{Primary: "west", Enabled: true, Polls: 3, Groups: map[string]workflows.GroupHealth{}, Refused: refused, RefusedCount: 2},
		{Primary: "west", Polls: 3, Groups: map[string]workflows.GroupHealth{}, Refused: refused, RefusedCount: 2,
			Unprotected: &workflows.Unprotection{Lost: "east", Since: now.Add(-time.Minute)}},
	} {
		var b strings.Builder
		if err := renderProtection(&b, "shop", ps, now, ""); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"REFUSED: 2 retarget(s)", "retarget to west, unprotected (east lost) said to be from forged: it carries no worker's seal"} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("status does not say %q:\n%s", want, b.String())
			}
		}
	}
}

// TestRenderUnprotected: after a failover the plan runs on west with no
// replica. Status says so in its protection and record lines: since when
// (the time grows with the clock), the last sync that reached east, and
// the command that protects it again; nothing is out of RPO.
func TestRenderUnprotected(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	u := &workflows.Unprotection{Lost: "east", Since: now.Add(-2 * time.Minute), LastSync: now.Add(-130 * time.Second), By: "drover-action-shop"}
	ps := &workflows.ProtectState{Primary: "west", Polls: 4, RPOTarget: 10 * time.Second, Groups: map[string]workflows.GroupHealth{}, Unprotected: u}
	r := &workflows.PlanRecord{Plan: "shop", Primary: "west", Protection: &workflows.ProtectionEntry{
		Primary: "west", Running: true, LastSync: u.LastSync, Checked: now.Add(-time.Minute), Unprotected: u}}
	for _, at := range []time.Duration{0, time.Minute} {
		var b strings.Builder
		if err := renderProtection(&b, "shop", ps, now.Add(at), ""); err != nil {
			t.Fatal(err)
		}
		renderRecord(&b, r, now.Add(at), "")
		out := b.String()
		since := (2*time.Minute + at).String()
		for _, want := range []string{
			"\n  UNPROTECTED: running on west, no replica since " + u.Since.Local().Format(time.DateTime) + " (" + since + "): east was lost",
			"  protection: running from west, UNPROTECTED: running on west, no replica since " + u.Since.Local().Format(time.DateTime) + " (" + since + ")",
			"its last sync known " + u.LastSync.Local().Format(time.DateTime),
			"next: drctl reprotect shop once east is back",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("status %v later lacks %q:\n%s", at, want, out)
			}
		}
		if strings.Contains(out, "RPO") || strings.Contains(out, "lag") {
			t.Errorf("an unprotected plan is judged by its lag:\n%s", out)
		}
	}
}

// TestProtectIntervalFollowsTheRPOTarget: protection's poll interval
// cannot silently exceed what the plan's RPO target allows: by default it
// is half the target when that is under 30 s, and a longer --interval
// than half the target is warned of.
func TestProtectIntervalFollowsTheRPOTarget(t *testing.T) {
	plan := func(target time.Duration) *plans.Plan {
		p := &plans.Plan{}
		p.Policy.RPOTarget = plans.Duration(target)
		return p
	}
	for _, c := range []struct {
		target, flag, want time.Duration
		warns              bool
	}{
		{10 * time.Second, 0, 5 * time.Second, false},
		{2 * time.Minute, 0, 30 * time.Second, false},
		{0, 0, 30 * time.Second, false},
		{10 * time.Second, 30 * time.Second, 30 * time.Second, true},
		{10 * time.Second, 5 * time.Second, 5 * time.Second, false},
		{time.Second, 0, time.Second, false},
	} {
		got, warn := protectInterval(plan(c.target), c.flag)
		if got != c.want || (warn != "") != c.warns {
			t.Errorf("target %v, --interval %v: %v, warning %q; want %v, a warning %v", c.target, c.flag, got, warn, c.want, c.warns)
		}
	}
}

// TestRecordSaysItWasRebuilt: a record that took over the last run under
// its ID says so in status, with the run, how it ended and what it passed
// over; one that found nothing to take over says that; one that found
// nothing it can trust says that no action runs until the plan is signed
// again, and once restored, by which version and whom.
func TestRecordSaysItWasRebuilt(t *testing.T) {
	now := time.Date(2026, 12, 7, 18, 0, 0, 0, time.UTC)
	r := &workflows.PlanRecord{Plan: "shop", Primary: "east", Rebuilt: &workflows.Rebuilt{From: "run-1", Status: "terminated",
		Closed: now.Add(-time.Minute), At: now, Note: "passed over run run-2 (on task queue \"evil\", not Drover's)"}}
	var b strings.Builder
	renderRecord(&b, r, now, "")
	if out := b.String(); !strings.Contains(out, "REBUILT at ") || !strings.Contains(out, "took over run run-1 (terminated at ") ||
		!strings.Contains(out, "passed over run run-2") {
		t.Errorf("status of a rebuilt record:\n%s", out)
	}
	r.Rebuilt = &workflows.Rebuilt{At: now, Note: "the earlier runs under the record's ID could not be read (visibility down): started empty"}
	b.Reset()
	renderRecord(&b, r, now, "")
	if out := b.String(); !strings.Contains(out, "STARTED ANEW at ") || !strings.Contains(out, "could not be read") {
		t.Errorf("status of a record started anew:\n%s", out)
	}
	r.Rebuilt = &workflows.Rebuilt{At: now, Unproven: true, Note: "no earlier run a Drover worker made could be read; passed over run run-2"}
	b.Reset()
	renderRecord(&b, r, now, "")
	if out := b.String(); !strings.Contains(out, "NOTHING TO TRUST since ") || !strings.Contains(out, "refuses every plan version signed before then") ||
		!strings.Contains(out, "drctl plan sign FILE") || !strings.Contains(out, "passed over run run-2") {
		t.Errorf("status of a record with nothing to trust:\n%s", out)
	}
	r.Rebuilt.Unproven = false
	r.Rebuilt.Restored = &workflows.PlanVersion{SignedAt: now.Add(time.Minute), KeyID: "k1", Workflow: "Drill", WorkflowID: "drover-action-shop", By: "alice@ops", Accepted: now.Add(2 * time.Minute)}
	b.Reset()
	renderRecord(&b, r, now, "")
	if out := b.String(); !strings.Contains(out, "RESTORED at ") || !strings.Contains(out, "by key k1, presented by Drill drover-action-shop (by alice@ops)") {
		t.Errorf("status of a restored record:\n%s", out)
	}
}

// TestStatusWarnsOfTheSignaturesEnd: status says when a protected plan's
// signature ends; from a week before, plainly, as a warning with what to
// do (sign again, restart protection), in the protection lines and the
// record's, and the dashboard says the same on the plan's row. Once
// protection ended because of it, status and the dashboard say so, with
// what to do, and the record's line says it ended.
func TestStatusWarnsOfTheSignaturesEnd(t *testing.T) {
	now := time.Date(2026, 12, 28, 8, 0, 0, 0, time.UTC)
	soon := now.Add(6*24*time.Hour + 4*time.Hour)
	later := now.Add(20 * 24 * time.Hour)
	ps := func(ends time.Time) *workflows.ProtectState {
		return &workflows.ProtectState{Primary: "east", Enabled: true, Polls: 3, Looked: now, SignatureEnds: ends,
			Groups: map[string]workflows.GroupHealth{"db": {LastSync: now, Checked: now}}}
	}
	protection := func(s *workflows.ProtectState) string {
		var b strings.Builder
		if err := renderProtection(&b, "shop", s, now, ""); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	record := func(e *workflows.ProtectionEntry) string {
		var b strings.Builder
		renderRecord(&b, &workflows.PlanRecord{Plan: "shop", Primary: "east", Protection: e}, now, "")
		return b.String()
	}
	warning := "WARNING: the plan's signature ends " + soon.Local().Format("2006-01-02 15:04") + " (in 6d4h), and protection with it: sign it again: drctl plan sign"
	restart := "then drctl protect stop shop and drctl protect start shop"
	out := protection(ps(soon))
	if !strings.Contains(out, warning) || !strings.Contains(out, restart) {
		t.Errorf("6d4h before the end, protection lacks %q … %q:\n%s", warning, restart, out)
	}
	if out := record(ps(soon).Summary(true, now)); !strings.Contains(out, warning) {
		t.Errorf("6d4h before the end, the record's line lacks the warning:\n%s", out)
	}
	if got := protectionWarning("shop", ps(soon), now); !strings.HasPrefix(got, warning) {
		t.Errorf("the dashboard's warning: %q", got)
	}
	out = protection(ps(later))
	if want := "the plan's signature ends " + later.Local().Format("2006-01-02 15:04") + " (in 20d)"; !strings.Contains(out, want) || strings.Contains(out, "WARNING") {
		t.Errorf("20 days before the end: want %q and no warning:\n%s", want, out)
	}
	if out := record(ps(later).Summary(true, now)) + protectionWarning("shop", ps(later), now); strings.Contains(out, "signature") {
		t.Errorf("20 days before the end, the record's line or the dashboard warns:\n%s", out)
	}
	if out := protection(ps(time.Time{})); strings.Contains(out, "signature") {
		t.Errorf("a signature with no end is announced:\n%s", out)
	}

	ended := ps(now.Add(-time.Minute))
	ended.Ended = "protection ended: the plan's signature ended at " + now.Add(-time.Minute).Format(time.RFC3339) + "; sign it again and drctl protect start shop"
	said := "PROTECTION ENDED: the plan's signature ended at " + now.Add(-time.Minute).Format(time.RFC3339) + "; sign it again and drctl protect start shop"
	if out := protection(ended); !strings.Contains(out, said) || strings.Contains(out, "WARNING") {
		t.Errorf("protection ended by its signature: want %q alone:\n%s", said, out)
	}
	if out := record(ended.Summary(false, now)); !strings.Contains(out, "protection: ended from east") || !strings.Contains(out, said) {
		t.Errorf("the record's line of protection ended by its signature:\n%s", out)
	}
	if got := protectionWarning("shop", ended, now); got != said {
		t.Errorf("the dashboard says %q, want %q", got, said)
	}
}

// TestDashboardRowWarnsOfTheSignaturesEnd: the overview shows the
// warning of a plan's protection on the plan's own row.
func TestDashboardRowWarnsOfTheSignaturesEnd(t *testing.T) {
	say := "WARNING: the plan's signature ends soon"
	var b strings.Builder
	err := uiTemplates.ExecuteTemplate(&b, "overview", map[string]any{"Now": time.Now(),
		"Plans": []planView{{Plan: "shop", Primary: "east", Groups: []groupView{{Name: "db"}}, Ending: say}, {Plan: "logs", Primary: "east", Groups: []groupView{{Name: "db"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	out := html.UnescapeString(b.String())
	if !strings.Contains(out, `<tr class="ending" data-plan="shop"><td></td><td colspan="6" class="bad ending">`+say+"</td></tr>") || strings.Count(out, say) != 1 {
		t.Errorf("the overview lacks the warning on shop's row:\n%s", out)
	}
}
