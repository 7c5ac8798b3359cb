package evidence_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/evidence"
)

// TestHealth: a drill that succeeded within its interval is due at its
// success plus the interval and not overdue; past that it is overdue; a
// newest run that failed is marked failed, and the last success stays
// the one before it; a test recovery the plan asks for and never ran
// is overdue; the metrics say each of these.
func TestHealth(t *testing.T) {
	ok := func(kind string, start time.Time) evidence.Entry {
		return evidence.Entry{Record: evidence.Record{Action: kind, Start: start, End: start.Add(time.Minute), Verdict: evidence.Met}}
	}
	bad := func(kind string, start time.Time) evidence.Entry {
		return evidence.Entry{Record: evidence.Record{Action: kind, Start: start, End: start.Add(time.Minute), Verdict: "failed: site west down"}}
	}
	every := map[string]time.Duration{"drill": 24 * time.Hour, "test recovery": 90 * 24 * time.Hour}
	entries := []evidence.Entry{ok("drill", t0), bad("drill", t0.Add(2*time.Hour))}

	hs := evidence.HealthOf("shop", entries, every, t0.Add(3*time.Hour))
	if len(hs) != 2 {
		t.Fatalf("health: %+v", hs)
	}
	d, tr := hs[0], hs[1]
	if d.Kind != "drill" || !d.LastSuccess.Equal(t0.Add(time.Minute)) || !d.Due.Equal(t0.Add(24*time.Hour+time.Minute)) || d.Overdue || !d.Failed() {
		t.Errorf("drill, within its interval, newest run failed: %+v", d)
	}
	if tr.Kind != "test recovery" || !tr.Overdue || !tr.LastSuccess.IsZero() || tr.Failed() {
		t.Errorf("a test recovery never run: %+v", tr)
	}
	if later := evidence.HealthOf("shop", entries, every, t0.Add(25*time.Hour)); !later[0].Overdue {
		t.Errorf("drill past its interval: %+v", later[0])
	}
	if none := evidence.HealthOf("shop", nil, nil, t0); len(none) != 0 {
		t.Errorf("a plan with no runs and no policy: %+v", none)
	}

	var b strings.Builder
	if err := evidence.WriteMetrics(&b, hs, 1); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`drover_test_last_success_timestamp_seconds{plan="shop",kind="drill"} ` + itoa(t0.Add(time.Minute).Unix()),
		`drover_test_required_every_seconds{plan="shop",kind="test-recovery"} 7.776e+06`,
		`drover_test_overdue{plan="shop",kind="drill"} 0`,
		`drover_test_overdue{plan="shop",kind="test-recovery"} 1`,
		`drover_test_last_failed{plan="shop",kind="drill"} 1`,
		"drover_evidence_not_stored 1",
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), `drover_test_last_success_timestamp_seconds{plan="shop",kind="test-recovery"}`) {
		t.Errorf("a last success of a test never run:\n%s", b.String())
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
