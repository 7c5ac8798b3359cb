package main

import (
	"strings"
	"testing"
	"time"
)

// TestTargets: each target is judged from the rows of one run: the
// events target on what each group adds beyond the action's fixed steps,
// the 20,000-group row against the 5,000-group row of the same latency.
func TestTargets(t *testing.T) {
	rows := []row{
		{groups: 1, measured: 230 * time.Millisecond, events: 83, tasks: 9, turn: 20 * time.Millisecond, empty: 25 * time.Millisecond},
		{groups: 1000, measured: 500 * time.Millisecond, sequential: 400 * time.Millisecond, events: 92},
		{groups: 5000, measured: 1500 * time.Millisecond, sequential: 2500 * time.Millisecond, events: 85, peakRSS: 50 << 20},
		{groups: 20000, measured: 7 * time.Second, events: 20083},
	}
	out := targets(rows)
	for _, want := range []string{
		"- 1000 groups at 0 ms at least as fast as the sequential loop: 0.80× — **not met**",
		"- 5000 groups at 0 ms at least as fast as the sequential loop: 1.67× — met",
		"- 5,000 groups at 0 ms in 3 s or less: 1.5s — met",
		"- one group at 0 ms in 100 ms or less: 230ms — **not met** (9 workflow tasks, a median of 20ms apart: 160ms of turns through the server; a workflow that does nothing takes 25ms here)",
		"beyond the 83 of the action's fixed steps: at most 1.000 (at 20000 groups) — met",
		"- 20,000 groups at 0s within 4.5× the 5,000-group time: 4.67× (7s against 1.5s) — **not met**",
		"- worker peak RSS at 5,000 groups 100 MiB or less: 50 MiB — met",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the targets lack %q:\n%s", want, out)
		}
	}
	one := rows[0]
	one.tasks, one.rto = 1, 40*time.Millisecond
	if out := targets([]row{one}); !strings.Contains(out, "230ms — **not met** (one workflow task, no turn through the server between steps; its steps took 40ms; a workflow that does nothing takes 25ms here)") {
		t.Errorf("a one-task failover's target:\n%s", out)
	}
	rows[2].direct, rows[3].direct = time.Second, 6*time.Second
	if out := targets(rows); !strings.Contains(out, "4.67× (7s against 1.5s) — **not met**; the same path run directly: 6.00× (6s against 1s)\n") {
		t.Errorf("the 20,000-group target without the direct program's own growth:\n%s", out)
	}
	// The 100-group row at 50 ms: the design's own turns before the
	// first side effect, as the failover's history gave them, in its
	// floor.
	hundred := row{groups: 100, latency: 50 * time.Millisecond, ideal: 550 * time.Millisecond, measured: 800 * time.Millisecond,
		direct: 700 * time.Millisecond, empty: 15 * time.Millisecond, checks: 25 * time.Millisecond, settle: 20 * time.Millisecond}
	if out := targets([]row{hundred}); !strings.Contains(out, "the plan's signature and version check with its record (25ms) and the settle that ends the checks' task (20ms); direct plus them and the workflow that does nothing: 1.086 of direct, Drover 1.053 of that\n") {
		t.Errorf("the 100-group target's floor:\n%s", out)
	}
	// With the failover's own turns, carrying what it carried: direct,
	// the check and the shaped workflow (700+25+40 ms).
	hundred.shaped = 40 * time.Millisecond
	if out := targets([]row{hundred}); !strings.Contains(out, "; direct plus the check with the record and a workflow taking this failover's own turns, carrying what it carried (its input, its tasks' markers, timers and activities, its record's changes, its result), without a storage call (40ms): 1.093 of direct, Drover 1.046 of that\n") {
		t.Errorf("the 100-group target's shaped floor:\n%s", out)
	}
	rows[3].events = 50083
	if out := targets(rows); !strings.Contains(out, "at most 2.500 (at 20000 groups) — **not met**") {
		t.Errorf("2.5 events per group passed:\n%s", out)
	}
}

// TestMedianRow: a row measured several times takes the run of the
// median failover time, the median of each baseline, and lists every
// run's time under the table.
func TestMedianRow(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	runs := []row{
		{groups: 1, measured: ms(300), direct: ms(20), sequential: ms(15), empty: ms(40), tasks: 3},
		{groups: 1, measured: ms(120), direct: ms(30), sequential: ms(19), empty: ms(60), tasks: 1},
		{groups: 1, measured: ms(150), direct: ms(25), sequential: ms(11), empty: ms(50), tasks: 2},
	}
	r := medianRow(runs)
	if r.measured != ms(150) || r.tasks != 2 || r.direct != ms(25) || r.sequential != ms(15) || r.empty != ms(50) {
		t.Errorf("median row: measured %v, tasks %d, direct %v, sequential %v, empty %v; want 150ms of the run with 2 tasks, 25ms, 15ms, 50ms",
			r.measured, r.tasks, r.direct, r.sequential, r.empty)
	}
	if got := runsNote([]row{r}); !strings.Contains(got, "- 1 groups at 0s: 300ms, 120ms, 150ms\n") {
		t.Errorf("the note of the runs:\n%s", got)
	}
	if one := medianRow(runs[:1]); one.measured != ms(300) || len(one.runs) != 0 || runsNote([]row{one}) != "" {
		t.Errorf("a row measured once: %+v, note %q", one, runsNote([]row{one}))
	}
}
