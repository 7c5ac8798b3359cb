package e2e_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/stack"
	"github.com/drover-dr/drover/workflows"
)

// TestSiteFailoverOfThreePlans: three signed plans (a and b in tier 0,
// c in tier 1), each of one volume group of the stack, protected from
// east while an application writes on east. East is lost: drctl failover
// --site east --to west fails all three over as one site action, tier 1
// after tier 0, with one fence for their clients; each plan's workload
// runs on west. drctl report renders the site action in Markdown and as
// one self-contained HTML page, and the invariants hold.
func TestSiteFailoverOfThreePlans(t *testing.T) {
	h := start(t, 3, 2)
	dir := filepath.Join(h.dir, "plans")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	markers := map[string]string{}
	for i, p := range []struct {
		name string
		tier int
	}{{"site-a", 0}, {"site-b", 0}, {"site-c", 1}} {
		group := fmt.Sprintf("vg-%04d", i+1)
		var b strings.Builder
		b.WriteString(stack.PlanHead(p.name, 10*time.Second))
		fmt.Fprintf(&b, "volumeGroups:\n  - name: data\n    sites: {east: {groupID: %s}, west: {groupID: %s}}\n    parameters: {mirroringMode: snapshot, schedulingInterval: 1s}\n", group, group)
		markers[p.name] = filepath.Join(h.dir, p.name+"-running.west")
		fmt.Fprintf(&b, "workloads:\n  - name: app\n    healthTimeout: 30s\n    sites:\n      east: {exec: {start: \"true\", stop: \"true\"}}\n      west: {exec: {start: \"touch %[1]s\", stop: \"rm -f %[1]s\", health: \"test -f %[1]s\"}}\n", markers[p.name])
		b.WriteString("policy:\n  rpoTarget: 30s\n  retry: {initialInterval: 200ms, maximumInterval: 2s, timeLimit: 3m}\n  deadlines: {default: 2s, PromoteVolume: 3s}\n")
		text := regexp.MustCompile(`(?m)^  name: `+p.name+`$`).ReplaceAllString(b.String(), fmt.Sprintf("  name: %s\n  tier: %d", p.name, p.tier))
		for _, site := range h.st.Layout.Sites {
			text = strings.ReplaceAll(text, site.Endpoint, site.GRPC)
		}
		file := filepath.Join(dir, p.name+".yaml")
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		h.must("plan", "sign", file, "--key", h.st.SigningKey())
		h.must("protect", "start", file, "--primary", "east", "--interval", "1s")
	}
	h.startWriters()
	h.waitWrites("east", "acknowledged", acked, 40)
	for name := range markers {
		h.waitProtected(name, 1)
	}

	h.siteDown("east")
	out := h.must("-o", "json", "failover", "--site", "east", "--to", "west", dir, "--yes", "--wait")
	var o struct {
		Status string
		Result workflows.SiteFailoverResult
	}
	if err := json.Unmarshal([]byte(out), &o); err != nil || o.Status != "completed" || len(o.Result.Plans) != 3 {
		t.Fatalf("site failover: %v\n%s", err, out)
	}
	step := func(id string) *workflows.Step {
		i := slices.IndexFunc(o.Result.Steps, func(s *workflows.Step) bool { return s.ID == id })
		if i < 0 {
			t.Fatalf("no step %s", id)
		}
		return o.Result.Steps[i]
	}
	if c := step("plan-failover/site-c"); c.Start.Before(step("plan-failover/site-a").End) || c.Start.Before(step("plan-failover/site-b").End) {
		t.Errorf("tier 1 started before tier 0 ended")
	}
	if n := len(slices.DeleteFunc(slices.Clone(o.Result.Steps), func(s *workflows.Step) bool { return s.Kind() != workflows.KindSiteFence })); n != 1 {
		t.Errorf("%d site fences, want one for the three plans' storage", n)
	}
	for name, m := range markers {
		if _, err := os.Stat(m); err != nil {
			t.Errorf("plan %s's workload does not run on west: %v", name, err)
		}
	}

	id := workflows.SiteActionID("east")
	md := h.must("report", id)
	for _, want := range []string{"# Site failover: site-a, site-b, site-c", "## Plans' outcomes", "| site-c | 1 | completed |", "```mermaid"} {
		if !strings.Contains(md, want) {
			t.Errorf("the Markdown report lacks %q", want)
		}
	}
	file := filepath.Join(h.dir, "site-report.html")
	h.must("report", id, "--format", "html", "-f", file)
	html, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), "<svg") || !strings.Contains(string(html), "fail over plan site-c") {
		t.Errorf("the HTML report lacks the timeline")
	}
	if ext := regexp.MustCompile(`(?i)(src|href)\s*=|<link|<script|url\(`).FindString(string(html)); ext != "" {
		t.Errorf("the HTML report loads something: %q", ext)
	}
	h.stopWriters()
	h.check()
}
