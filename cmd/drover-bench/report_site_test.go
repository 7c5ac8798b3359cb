package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func siteRows() []siteRow {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	size := func(store string, plans, atOnce int) siteSize {
		return siteSize{store: store, plans: plans, atOnce: atOnce, groups: 10, tiers: 3, latency: ms(50)}
	}
	return []siteRow{
		{siteSize: size(storeDev, 10, 10), measured: ms(900), direct: ms(800), rto: ms(880), floor: ms(100), turns: ms(300), shaped: ms(400), events: 450, workerRSS: 40 << 20, temporalRSS: 150 << 20, server: "1.29.1"},
		{siteSize: size(storeSQL, 10, 10), measured: ms(1100), direct: ms(820), rto: ms(1050), events: 450, workerRSS: 41 << 20, temporalRSS: 200 << 20, server: "1.29.1"},
		{siteSize: size(storeDev, 100, 10), measured: ms(5500), direct: ms(5000), rto: ms(5400), floor: ms(500), turns: ms(1000), shaped: ms(1250), temporalCPU: ms(3000), workerCPU: ms(1000), machine: machineTimes{busy: ms(8000), iowait: ms(500), total: ms(10000)}, events: 4500, warnings: 1},
		{siteSize: size(storeSQL, 100, 10), measured: ms(6000), direct: ms(5000), rto: ms(5900), events: 4500},
	}
}

// TestSiteReport: the site table has a row per store and configuration
// with the ratio to the plain program of the same run, the stores side
// by side, and the goal judged at 100 plans on each store.
func TestSiteReport(t *testing.T) {
	o := options{sitePlans: []int{10, 100}, siteAtOnce: []int{10}, siteGroups: 10, siteTiers: 3, siteLatency: 50 * time.Millisecond,
		stores: []string{storeDev, storeSQL}, parallelism: 10}
	out := renderSite(o, siteRows())
	for _, want := range []string{
		"`make bench-sql SITE_FLAGS='--site-plans 10,100 --plans-at-once 10 --site-groups 10 --site-tiers 3 --site-latency 50ms --stores dev,sql --parallelism 10'`",
		"| Temporal 1.29.1 dev server on SQLite | 10 | 10 | 3 | 10 | 50ms | 900ms | 800ms | 1.12 | 880ms | 100ms | 1.00 | 300ms | 0.82 | 400ms | 0.75 | 45.0 | 40 MiB | 150 MiB |\n",
		"| Temporal 1.29.1 on PostgreSQL | 10 | 10 | 3 | 10 | 50ms | 1.1s | 820ms | 1.34 | 1.05s | 0s | 1.34 | — | — | — | — | 45.0 | 41 MiB | 200 MiB |\n",
		"| 10 | 10 | 900ms | 1.12 | 1.1s | 1.34 | 1.22 |\n",
		"| 100 | 10 | 5.5s | 1.10 | 6s | 1.20 | 1.09 |\n",
		"- 100 plans, 10 at once, Temporal dev server on SQLite: within 1.15 of the plain program: 1.100 (5.5s against 5s) — met; " +
			"the plain program plus a workflow running as many children that do nothing, tier by tier (500ms): 1.100 of the plain program; Drover 1.000 of that; " +
			"the plain program plus a workflow taking the design's turns (each plan's record asked to accept its version, then each child's checks, their settle and its end: 1s): 1.200 of the plain program; Drover 0.917 of that; " +
			"the plain program plus the same turns, each child carrying what its plan's failover carried in this run (its input, its tasks' markers, timers and activities, its record's changes, its result: 1.25s): 1.250 of the plain program; Drover 0.880 of that; " +
			"during the site failover the Temporal server process used 3s of CPU (30ms a plan) and the worker 1s, together ",
		"; every process counted, the cores were busy 80% of that time and waiting on disk 5%\n",
		"- 100 plans, 10 at once, Temporal on PostgreSQL: within 1.15 of the plain program: 1.200 (6s against 5s) — **not met**\n",
		"- no history or payload size warning from the server: 1 — **not met**\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the site report lacks %q:\n%s", want, out)
		}
	}
	if got := storesSideBySide(siteRows()[:1]); got != "" {
		t.Errorf("one store, yet a side-by-side table:\n%s", got)
	}
}

// TestSectionsReadBack: the chart takes the figures of the section a run
// did not measure from its table; what it reads is what was written.
func TestSectionsReadBack(t *testing.T) {
	o := options{sitePlans: []int{10, 100}, siteAtOnce: []int{10}, siteGroups: 10, siteTiers: 3, siteLatency: 50 * time.Millisecond,
		stores: []string{storeDev, storeSQL}, parallelism: 10, latencies: []time.Duration{0}, sizes: []int{1}, seqLimit: time.Minute}
	sites := parseSiteRows(renderSite(o, siteRows()))
	if len(sites) != 4 {
		t.Fatalf("read %d site rows back, want 4", len(sites))
	}
	for i, want := range siteRows() {
		got := sites[i]
		if got.store != want.store || got.plans != want.plans || got.atOnce != want.atOnce || got.groups != want.groups || got.tiers != want.tiers ||
			got.latency != want.latency || got.measured != want.measured || got.direct != want.direct {
			t.Errorf("site row %d read back as %+v, want %+v", i, got.siteSize, want.siteSize)
		}
	}
	rows := []row{
		{groups: 1, latency: 0, ideal: 2 * time.Millisecond, measured: 72 * time.Millisecond, direct: 8 * time.Millisecond, sequential: 7 * time.Millisecond, events: 25},
		{groups: 5000, latency: 50 * time.Millisecond, ideal: 25 * time.Second, measured: 27790 * time.Millisecond, direct: 27120 * time.Millisecond, events: 60},
	}
	back := parseRows(render(o, rows))
	if len(back) != 2 {
		t.Fatalf("read %d rows back, want 2", len(back))
	}
	for i, want := range rows {
		got := back[i]
		if got.groups != want.groups || got.latency != want.latency || got.ideal != want.ideal || got.measured != want.measured ||
			got.direct != want.direct || got.sequential != want.sequential {
			t.Errorf("row %d read back as %+v, want %+v", i, got, want)
		}
	}
	if back[1].sequential != 0 {
		t.Errorf("a sequential run not made read back as %v", back[1].sequential)
	}
	if parseRows("no table here") != nil || parseSiteRows("") != nil {
		t.Error("rows read from text without a table")
	}
}

// TestSpliceSections: each section goes between its own markers and
// leaves the other, and the text around them, as they were.
func TestSpliceSections(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	text := "intro\n" + beginMarker + "\nper-plan rows\n" + endMarker + "\nmiddle\n" + siteBeginMarker + "\nold site rows\n" + siteEndMarker + "\nend\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := splice(path, "new site rows\n", siteBeginMarker, siteEndMarker); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "intro\n" + beginMarker + "\nper-plan rows\n" + endMarker + "\nmiddle\n" + siteBeginMarker + "\nnew site rows\n" + siteEndMarker + "\nend\n"
	if string(b) != want {
		t.Errorf("after the splice:\n%s\nwant:\n%s", b, want)
	}
	if got := section(string(b), beginMarker, endMarker); got != "\nper-plan rows\n" {
		t.Errorf("the per-plan section reads %q", got)
	}
}

// TestChartShowsSiteRows: the chart has a panel for the site rows, a
// point per row and series, and still draws without per-plan rows.
func TestChartShowsSiteRows(t *testing.T) {
	rows := []row{
		{groups: 1, latency: 0, ideal: 2 * time.Millisecond, measured: 72 * time.Millisecond},
		{groups: 100, latency: 0, ideal: 2 * time.Millisecond, measured: 189 * time.Millisecond},
	}
	svg := chart(rows, siteRows())
	for _, want := range []string{
		"site failover: 10 groups a plan, 3 tiers, 50ms",
		"<title>measured, dev server, 10 at once, 100 plans: 5.5s</title>",
		"<title>direct, PostgreSQL, 10 at once, 10 plans: 820ms</title>",
		"plugin latency 0s",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("the chart lacks %q", want)
		}
	}
	// Measured and ideal of each per-plan row, measured and direct of
	// each site row.
	if n, want := strings.Count(svg, "<circle"), 2*len(rows)+2*len(siteRows()); n != want {
		t.Errorf("%d points, want %d", n, want)
	}
	if svg := chart(nil, siteRows()); !strings.Contains(svg, "site failover") || strings.Contains(svg, "plugin latency") {
		t.Errorf("a chart of site rows alone:\n%s", svg)
	}
	if svg := chart(rows, nil); strings.Contains(svg, "site failover") {
		t.Error("a site panel without site rows")
	}
}

// TestMachineCPU: the machine's CPU times grow while this process
// computes, and busy and I/O wait stay within the total.
func TestMachineCPU(t *testing.T) {
	before, err := machineCPU()
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
	}
	after, err := machineCPU()
	if err != nil {
		t.Fatal(err)
	}
	d := after.since(before)
	if d.busy <= 0 || d.busy+d.iowait > d.total {
		t.Fatalf("200 ms of computing: busy %v, I/O wait %v of %v", d.busy, d.iowait, d.total)
	}
}
