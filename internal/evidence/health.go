package evidence

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// Kinds of test a plan's policy.drills asks for, as a record's Action
// names them.
var Kinds = []string{"drill", "test recovery"}

// Health is where one kind of test of one plan stands, from the
// evidence: when it last succeeded, whether its newest run failed, and
// whether it is overdue against how often the plan says it must succeed.
type Health struct {
	Plan string `json:"plan"`
	Kind string `json:"kind"`
	// Every is how often it must succeed (policy.drills); zero: the plan
	// does not say.
	Every       time.Duration `json:"every,omitempty"`
	LastSuccess time.Time     `json:"lastSuccess,omitzero"`
	// LastRun and LastVerdict are the newest run's.
	LastRun     time.Time `json:"lastRun,omitzero"`
	LastVerdict string    `json:"lastVerdict,omitempty"`
	// Due is when the next success is due (LastSuccess + Every; zero
	// without Every); Overdue once that has passed, or when no success
	// is on record at all.
	Due     time.Time `json:"due,omitzero"`
	Overdue bool      `json:"overdue"`
}

// Failed tells a newest run that did not meet its plan's targets.
func (h Health) Failed() bool { return h.LastVerdict != "" && h.LastVerdict != Met }

// HealthOf is where each kind of test of plan stands, from its entries
// (oldest first, as List returns them), against every (by kind; the
// newest record's own Every where every has none). Kinds with neither a
// run nor a requirement are left out.
func HealthOf(plan string, entries []Entry, every map[string]time.Duration, now time.Time) []Health {
	var out []Health
	for _, kind := range Kinds {
		h := Health{Plan: plan, Kind: kind, Every: every[kind]}
		for _, e := range entries {
			if e.Action != kind {
				continue
			}
			h.LastRun, h.LastVerdict = e.Start, e.Verdict
			if e.Verdict == Met {
				h.LastSuccess = e.End
				if h.LastSuccess.IsZero() {
					h.LastSuccess = e.Start
				}
			}
			if every[kind] == 0 && e.Every > 0 {
				h.Every = e.Every
			}
		}
		if h.LastRun.IsZero() && h.Every == 0 {
			continue
		}
		if h.Every > 0 {
			if !h.LastSuccess.IsZero() {
				h.Due = h.LastSuccess.Add(h.Every)
			}
			h.Overdue = h.LastSuccess.IsZero() || now.After(h.Due)
		}
		out = append(out, h)
	}
	return out
}

// Plans are the plans a store holds evidence of.
func (d Dir) Plans() ([]string, error) {
	des, err := os.ReadDir(d.Root)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var out []string
	for _, de := range des {
		if de.IsDir() && !strings.HasPrefix(de.Name(), ".") {
			out = append(out, de.Name())
		}
	}
	return out, nil
}

// The metrics the collector serves (drctl evidence collect --metrics).
const (
	MetricLastSuccess = "drover_test_last_success_timestamp_seconds"
	MetricEvery       = "drover_test_required_every_seconds"
	MetricOverdue     = "drover_test_overdue"
	MetricLastFailed  = "drover_test_last_failed"
	MetricNotStored   = "drover_evidence_not_stored"
)

// WriteMetrics writes hs, and the number of runs whose evidence the last
// round could not store, in Prometheus' text format.
func WriteMetrics(w io.Writer, hs []Health, notStored int) error {
	var b strings.Builder
	help := func(name, typ, text string) { fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, typ) }
	label := func(h Health) string {
		return fmt.Sprintf(`{plan=%q,kind=%q}`, h.Plan, strings.ReplaceAll(h.Kind, " ", "-"))
	}
	hs = slices.Clone(hs)
	slices.SortFunc(hs, func(x, y Health) int { return strings.Compare(x.Plan+"/"+x.Kind, y.Plan+"/"+y.Kind) })
	help(MetricLastSuccess, "gauge", "When a plan's drill or test recovery last succeeded (its run's end), from the evidence store.")
	for _, h := range hs {
		if !h.LastSuccess.IsZero() {
			fmt.Fprintf(&b, "%s%s %d\n", MetricLastSuccess, label(h), h.LastSuccess.Unix())
		}
	}
	help(MetricEvery, "gauge", "How often the plan's policy.drills says the test must succeed.")
	for _, h := range hs {
		if h.Every > 0 {
			fmt.Fprintf(&b, "%s%s %g\n", MetricEvery, label(h), h.Every.Seconds())
		}
	}
	help(MetricOverdue, "gauge", "1 when a test the plan's policy.drills asks for has not succeeded within its interval (or never).")
	for _, h := range hs {
		if h.Every > 0 {
			fmt.Fprintf(&b, "%s%s %d\n", MetricOverdue, label(h), b2i(h.Overdue))
		}
	}
	help(MetricLastFailed, "gauge", "1 when the newest run of the test failed or missed the plan's targets.")
	for _, h := range hs {
		if !h.LastRun.IsZero() {
			fmt.Fprintf(&b, "%s%s %d\n", MetricLastFailed, label(h), b2i(h.Failed()))
		}
	}
	help(MetricNotStored, "gauge", "Runs whose evidence the collector's last round could not store.")
	fmt.Fprintf(&b, "%s %d\n", MetricNotStored, notStored)
	_, err := io.WriteString(w, b.String())
	return err
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
