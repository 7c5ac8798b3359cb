package deploy

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/drover-dr/drover/internal/evidence"
	"github.com/drover-dr/drover/workflows"
)

// TestPrometheusRules loads deploy/prometheus/drover-rules.yaml as
// Prometheus reads a rule file and checks each rule names only metrics
// the worker exports, under the names its Prometheus naming gives them
// (counters _total, timers _seconds), and says what it means; the
// reference's alert table (docs/reference/metrics.md) lists every alert,
// and its metric table every metric a worker exports.
func TestPrometheusRules(t *testing.T) {
	raw, err := os.ReadFile("prometheus/drover-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert       string
				Expr        string
				For         string
				Labels      map[string]string
				Annotations map[string]string
			}
		}
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatal(err)
	}
	exported := []string{
		workflows.MetricActionDuration + "_seconds_count", workflows.MetricStepFailures + "_total",
		workflows.MetricReplicationLag, workflows.MetricOutOfRPO, workflows.MetricUnprotected, workflows.MetricPointAge, workflows.MetricPointMaxAge,
		workflows.MetricSignatureEnds, workflows.MetricProtectionEnded, "temporal_num_pollers", "up",
		// drctl evidence collect's.
		evidence.MetricOverdue, evidence.MetricLastFailed, evidence.MetricNotStored,
	}
	readme, err := os.ReadFile("../docs/reference/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	// The evidence collector's alerts are in the evidence guide's table.
	guide, err := os.ReadFile("../docs/guides/evidence.md")
	if err != nil {
		t.Fatal(err)
	}
	readme = append(readme, guide...)
	metric := regexp.MustCompile(`\b(drover_[a-z_]+|temporal_[a-z_]+|up)\b[{\[ )]`)
	n := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" || r.Expr == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("rule %+v lacks an alert name, an expression or what it means", r)
			}
			if sev := r.Labels["severity"]; sev != "critical" && sev != "warning" {
				t.Errorf("%s: severity %q", r.Alert, sev)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
				}
			}
			found := metric.FindAllStringSubmatch(r.Expr+" ", -1)
			if len(found) == 0 {
				t.Errorf("%s: %q names no metric", r.Alert, r.Expr)
			}
			for _, m := range found {
				if !slices.Contains(exported, m[1]) {
					t.Errorf("%s: %q is no metric a worker exports (%v)", r.Alert, m[1], exported)
				}
			}
			if !strings.Contains(string(readme), "| `"+r.Alert+"` |") {
				t.Errorf("docs/reference/metrics.md's alert table lacks %s", r.Alert)
			}
		}
	}
	if n < 5 {
		t.Fatalf("only %d rules", n)
	}
	mine := []string{workflows.MetricActionDuration + "_seconds", workflows.MetricStepFailures + "_total",
		workflows.MetricReplicationLag, workflows.MetricOutOfRPO, workflows.MetricPrimaryUnreachable, workflows.MetricUnprotected,
		workflows.MetricPointAge, workflows.MetricPointMaxAge, workflows.MetricSignatureEnds, workflows.MetricProtectionEnded}
	for _, m := range mine {
		if !strings.Contains(string(readme), "| `"+m+"` |") {
			t.Errorf("docs/reference/metrics.md's metric table lacks %s", m)
		}
	}
	// What protection reports has its alert: a plan out of RPO, with no
	// replica, without a recent point, whose signature ends within the
	// week drctl status warns of, and whose protection ended on its own.
	exprs := map[string]string{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			exprs[r.Alert] = r.Expr
		}
	}
	ending := fmt.Sprintf("< %d", int(workflows.SignatureWarning.Seconds()))
	for _, w := range []struct{ alert, names, says string }{
		{"DroverOutOfRPO", workflows.MetricOutOfRPO, "== 1"},
		{"DroverUnprotected", workflows.MetricUnprotected, "> 0"},
		{"DroverPointInTimeLate", workflows.MetricPointAge, "> 0"},
		{"DroverPlanSignatureEnding", workflows.MetricSignatureEnds, ending},
		{"DroverProtectionEnded", workflows.MetricProtectionEnded, "== 1"},
		{"DroverTestOverdue", evidence.MetricOverdue, "== 1"},
		{"DroverTestFailed", evidence.MetricLastFailed, "== 1"},
		{"DroverEvidenceNotStored", evidence.MetricNotStored, "> 0"},
	} {
		expr, ok := exprs[w.alert]
		if !ok || !regexp.MustCompile(`\b`+w.names+`\b`).MatchString(expr) || !strings.Contains(expr, w.says) {
			t.Errorf("%s: %q, want an alert on %s %s", w.alert, expr, w.names, w.says)
		}
	}
	// Protection ended by its signature fires until the plan's
	// protection reports again, wherever it runs.
	if e := exprs["DroverProtectionEnded"]; !strings.HasSuffix(e, "unless on (plan) max by (plan) ("+workflows.MetricOutOfRPO+")") {
		t.Errorf("DroverProtectionEnded: %q, want it to end once the plan's protection reports", e)
	}
}
