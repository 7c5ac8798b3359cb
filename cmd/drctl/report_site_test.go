package main

import (
	"bytes"
	"html"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/drover-dr/drover/workflows"
)

// siteReport is the report of a site failover of two plans that ended
// partial: shop moved; loose was running a drill, found busy at the tier's
// first try, retried by the operator, then skipped, and left behind. The
// site fenced east through two storage systems whose step names differ
// only at their ends.
func siteReport() (*Report, *result) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	fence := func(id, name string, s, e int) ReportStep {
		return ReportStep{ID: id, Name: name, State: workflows.StateDone, Start: at(s), End: at(e), Took: at(e).Sub(at(s)), Tries: 1}
	}
	steps := []ReportStep{
		fence("site-fence/west/1", "fence east through the storage of west at 127.0.0.1:41001 clusterID=alpha", 0, 1),
		fence("site-verify-fence/west/1", "verify the fence of east through the storage of west at 127.0.0.1:41001 clusterID=alpha", 1, 2),
		fence("site-fence/west/2", "fence east through the storage of west at 127.0.0.1:41002 clusterID=beta", 2, 3),
		fence("site-verify-fence/west/2", "verify the fence of east through the storage of west at 127.0.0.1:41002 clusterID=beta", 3, 4),
		{ID: "tier/0", Name: "tier 0: 2 plan(s)", State: workflows.StateSkipped, Start: at(4), End: at(60), Tries: 2},
	}
	outcomes := []workflows.PlanOutcome{
		{Plan: "shop", Tier: 0, Workflow: workflows.ActionID("shop"), State: workflows.StateCompleted, RTO: 9 * time.Second, RPO: 3 * time.Second, RPOKnown: true},
		{Plan: "loose", Tier: 0, Workflow: workflows.ActionID("loose"), State: workflows.OutcomeBusy, Busy: "drill", FirstBusy: at(5), FirstBusyTry: 1,
			Error:   `plan "loose" is running a drill of its own`,
			Recover: "drctl cancel " + workflows.ActionID("loose") + " (its running drill), then drctl failover plans/loose.yaml --to west"},
	}
	r := &Report{WorkflowID: workflows.SiteActionID("east"), RunID: "r1", Action: workflows.ActionSiteFailover, Status: workflows.StatePartial,
		Plans: []ReportPlan{{Name: "shop"}, {Name: "loose"}}, Start: t0, End: at(60), Steps: steps, RTO: 60 * time.Second,
		Decisions:   []ReportSigner{{Step: "tier 0: 2 plan(s)", By: "oncall@example", At: at(30), Decision: workflows.DecisionRetry}},
		PlanResults: outcomes, LeftBehind: []string{"loose"}, Generated: at(61)}
	res := &result{Progress: workflows.Progress{Action: workflows.ActionSiteFailover, Plan: "site-east", Start: t0, End: at(60)},
		RTO: 60 * time.Second, Plans: outcomes, LeftBehind: []string{"loose"}}
	return r, res
}

// TestSiteReportHTML: the HTML report of a site action that left a plan
// behind gives each plan's RPO (as the Markdown does), "-" for the RTO and
// RPO of the plan that did not move (not 0s), when the plan was first
// found busy and with what, the command that recovers it, whether the
// operator's decision was a retry or a skip, and timeline labels that
// fit their column and stay apart for steps whose names differ.
func TestSiteReportHTML(t *testing.T) {
	r, _ := siteReport()
	var b bytes.Buffer
	if err := r.HTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if !strings.Contains(page, "<th>RPO</th>") {
		t.Error("the plans' outcomes have no RPO column")
	}
	cell := func(plan, class string) string {
		m := regexp.MustCompile(`(?s)<tr class="outcome" data-plan="` + plan + `">.*?<td class="` + class + `">(.*?)</td>`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no %s cell for plan %s in\n%s", class, plan, page)
		}
		return html.UnescapeString(m[1])
	}
	if got := cell("shop", "rpo"); got != "3s" {
		t.Errorf("shop's RPO %q, want 3s", got)
	}
	if rto, rpo := cell("loose", "rto"), cell("loose", "rpo"); rto != "-" || rpo != "-" {
		t.Errorf("loose, left behind: RTO %q, RPO %q; want - and -", rto, rpo)
	}
	if got := cell("loose", "busy"); !strings.Contains(got, "drill") || !strings.Contains(got, "try 1") || !strings.Contains(got, "2026-03-01 12:00:05") {
		t.Errorf("loose's busy cell %q: want the drill and its first busy try, 1 at 12:00:05", got)
	}
	if got := cell("loose", "recover"); !strings.Contains(got, "drctl cancel "+workflows.ActionID("loose")) || !strings.Contains(got, "drctl failover plans/loose.yaml --to west") {
		t.Errorf("loose's recover cell %q: want the cancel and the failover that recover it", got)
	}
	for _, want := range []string{"retry of tier 0: 2 plan(s) by oncall@example", "<td>partial</td>", "Left behind", "RTO of the plans that moved"} {
		if !strings.Contains(html.UnescapeString(page), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	// The timeline's labels: each fits the label column, and names that
	// differ are shown apart.
	labels := regexp.MustCompile(`<text x="-8"[^>]*><title>(.*?)</title>(.*?)</text>`).FindAllStringSubmatch(page, -1)
	if len(labels) != len(r.Steps) {
		t.Fatalf("%d timeline labels for %d steps", len(labels), len(r.Steps))
	}
	shown := map[string]string{}
	for _, l := range labels {
		name, label := html.UnescapeString(l[1]), html.UnescapeString(l[2])
		if n := utf8.RuneCountInString(label); n > labelRunes {
			t.Errorf("label %q: %d characters, more than the column's %d", label, n, labelRunes)
		}
		if other, dup := shown[label]; dup && other != name {
			t.Errorf("steps %q and %q both shown as %q", other, name, label)
		}
		shown[label] = name
	}
	// The Markdown has the same "-" for the plan left behind.
	b.Reset()
	if err := r.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| loose | 0 | busy | - | - |") {
		t.Errorf("the Markdown's row of loose lacks - for its RTO and RPO:\n%s", b.String())
	}
}

// TestSiteSummaryPartial: drctl's closing lines of a site action that
// left a plan behind say it ended partial and name the plan, and give the
// command that recovers it; no site-wide RTO is claimed.
func TestSiteSummaryPartial(t *testing.T) {
	_, res := siteReport()
	var out bytes.Buffer
	a := &app{stdout: &out}
	a.summary(res, "1m18.13s")
	got := out.String()
	for _, want := range []string{
		"site failover from east ended PARTIAL",
		"1 of 2 plan(s) left behind (loose)",
		"to recover plan loose: drctl cancel " + workflows.ActionID("loose") + " (its running drill), then drctl failover plans/loose.yaml --to west",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if head, _, _ := strings.Cut(got, "\n"); strings.Contains(head, "site-wide RTO") || strings.Contains(head, "completed") {
		t.Errorf("a partial site action's summary claims completion or a site-wide RTO:\n%s", got)
	}
}

// TestRPOIsAnEstimate: a failover's RPO is the time from the last sync
// protection recorded to the action's start, an estimate: the report
// says so, as drctl watch's summary does, with the same figure.
func TestRPOIsAnEstimate(t *testing.T) {
	r := &Report{WorkflowID: workflows.ActionID("shop"), Action: "failover", RTO: 9 * time.Second, RPO: 3517 * time.Millisecond, RPOKnown: true}
	var md bytes.Buffer
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	var sum bytes.Buffer
	a := &app{stdout: &sum}
	a.summary(&result{Progress: workflows.Progress{Action: "failover", Plan: "shop"}, RTO: r.RTO, RPO: r.RPO, RPOKnown: true}, "12s")
	if !strings.Contains(md.String(), "| RPO | estimate 3.52s |") || !strings.Contains(sum.String(), "RPO estimate 3.52s") {
		t.Errorf("the report and the summary do not give the RPO as the same estimate:\n%s\n%s", md.String(), sum.String())
	}
	r.RPOKnown = false
	md.Reset()
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| RPO | unknown (protection had recorded no sync) |") {
		t.Errorf("the report of an RPO not known:\n%s", md.String())
	}
}
