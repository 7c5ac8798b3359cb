package main_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestReport: after a failover whose promotion an auditor approved,
// drctl report writes, in Markdown, in self-contained HTML and as JSON,
// the plan with the digest of its canonical form, who started the
// failover and who approved it, every step with its start, end and
// tries, the RTO, the RPO, the fenced CIDR and a timeline (a Mermaid
// chart, an inline SVG with a bar per step).
func TestReport(t *testing.T) {
	st := newSiteStack(t)
	c := st.c
	shop := st.plan(t, "", "shop", "west", 0, "{groupID: vg-1}", simtest.NodeA+"/32", "  approvals: [beforePromote]\n")
	st.protect(shop)
	st.east.Down()
	c.ok(nil, "--by", "operator@example", "failover", shop, "--to", "west", "--yes")
	c.eventually("the promotion gate", "shop", func(s statusOut) bool { return stepIn(s, workflows.StateWaiting) })
	// The promotion fails twice, then goes through: three tries.
	if err := st.west.SetFaults([]sim.FaultRule{{Method: "PromoteVolume", Code: "UNAVAILABLE", Count: 2, Message: "injected"}}); err != nil {
		t.Fatal(err)
	}
	c.ok(nil, "--by", "auditor@example", "approve", "shop", "--yes")
	var o outcome
	c.ok(&o, "watch", "shop")
	var res workflows.FailoverResult
	if err := json.Unmarshal(o.Result, &res); err != nil || o.Status != "completed" {
		t.Fatalf("failover: %v %+v", err, o)
	}
	p, err := plans.Load(shop)
	if err != nil {
		t.Fatal(err)
	}
	canon, err := plans.CanonicalJSON(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(canon)
	digest := "sha256:" + hex.EncodeToString(sum[:])

	// JSON: the data.
	code, out, errs := c.run("-o", "json", "report", "shop")
	var r struct {
		WorkflowID, Status, StartedBy string
		Plans                         []struct{ Name, Digest string }
		Approvals                     []struct{ Step, By string }
		Steps                         []struct {
			ID, Name, State string
			Tries           int
		}
		RTO    int64
		Fenced []string
	}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("report -o json: exit %d\n%s%s", code, out, errs)
	}
	if r.WorkflowID != workflows.ActionID("shop") || r.Status != "completed" || r.StartedBy != "operator@example" ||
		len(r.Plans) != 1 || r.Plans[0].Digest != digest || len(r.Approvals) != 1 || r.Approvals[0].By != "auditor@example" ||
		r.RTO != int64(res.RTO) || len(r.Fenced) != 1 || r.Fenced[0] != simtest.NodeA+"/32" || len(r.Steps) != len(res.Steps) {
		t.Fatalf("report data: %+v\nwant digest %s, RTO %v, %d steps", r, digest, res.RTO, len(res.Steps))
	}
	// Tries count every call, as status and the dashboard count them.
	for _, s := range r.Steps {
		if s.ID == "promote/west/data" && s.Tries != 3 {
			t.Errorf("the promotion's tries in the report's data: %d, want 3 (two failed calls and the one that went through)", s.Tries)
		}
	}

	// Markdown.
	code, md, errs := c.run("report", "shop")
	if code != 0 {
		t.Fatalf("report: exit %d\n%s%s", code, md, errs)
	}
	for _, want := range []string{"# Failover: shop", digest, "| Started by | operator@example |", "approve beforePromote by auditor@example",
		"| RTO | ", "| Fenced CIDRs | " + simtest.NodeA + "/32 |", "```mermaid\ngantt", "| promote data on west | done |"} {
		if !strings.Contains(md, want) {
			t.Errorf("the Markdown report lacks %q:\n%s", want, md)
		}
	}
	if m := regexp.MustCompile(`\n\| promote data on west \| done \|[^|\n]*\|[^|\n]*\|[^|\n]*\| (\d+) \|`).FindStringSubmatch(md); m == nil || m[1] != "3" {
		t.Errorf("the Markdown report's promotion tries: %q, want 3", m)
	}
	if n := strings.Count(md, "\n    ") - 2; n != len(res.Steps) { // the chart's rows, less its two settings
		t.Errorf("the chart has %d rows for %d steps", n, len(res.Steps))
	}

	// HTML: one file, nothing fetched.
	file := filepath.Join(t.TempDir(), "report.html")
	if code, out, errs := c.run("report", "shop", "--format", "html", "-f", file); code != 0 {
		t.Fatalf("report --format html: exit %d\n%s%s", code, out, errs)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	for _, want := range []string{"<svg", digest, "auditor@example", "operator@example", simtest.NodeA + "/32", "promote data on west"} {
		if !strings.Contains(html, want) {
			t.Errorf("the HTML report lacks %q", want)
		}
	}
	if m := regexp.MustCompile(`promote/west/data</code></td><td class="state-done">done</td><td>[^<]*</td><td>[^<]*</td><td>[^<]*</td><td>(\d+)</td>`).FindStringSubmatch(html); m == nil || m[1] != "3" {
		t.Errorf("the HTML report's promotion tries: %q, want 3", m)
	}
	if n := strings.Count(html, "<rect "); n != len(res.Steps) {
		t.Errorf("the timeline has %d bars for %d steps", n, len(res.Steps))
	}
	if ext := regexp.MustCompile(`(?i)(src|href)\s*=|<link|<script|@import|url\(`).FindString(html); ext != "" {
		t.Errorf("the HTML report loads something (%q): it must stand alone", ext)
	}
	c.want(2, "want md or html", "report", "shop", "--format", "pdf")
	c.want(2, "knows no run", "report", "nothing-here")
}
