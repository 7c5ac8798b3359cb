package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
)

// vtError is what west's storage answers the promotion of one group,
// again and again: longer than a line, with wide and accented
// characters.
const vtError = "the replication daemon of west (réplication, 東京リージョン) is restarting after an upgrade and refuses " +
	"promotions until it has reloaded its peers; retry in a few seconds (cause: rbd-mirror restart)"

// TestWatchFitsAnEightyColumnTerminal follows a real failover with drctl
// watch in a terminal of 80×24: fourteen groups whose names make every
// step row wider than the terminal, one of them refused again and again
// with an error longer than a line (wide characters in it), then for
// good (the plan aborts on a failure). Every line drctl writes, the live
// view's and the closing table's, fits in the 80 columns (nothing wraps
// on the terminal), the live view never takes more rows than the screen
// has (so the scrollback does not grow from redraw to redraw), and the
// action is headed failed at the refused step.
func TestWatchFitsAnEightyColumnTerminal(t *testing.T) {
	bins := bintest.Build(t, "worker")
	srv := devserver.Start(t, nil)
	var groups []sim.GroupSpec
	var planGroups strings.Builder
	for i := range 14 {
		id := fmt.Sprintf("vg-%d", i)
		groups = append(groups, sim.GroupSpec{ID: id, Volumes: []string{fmt.Sprintf("v%d", i)}})
		fmt.Fprintf(&planGroups, "  - name: orders-database-of-the-online-shop-in-the-european-region-%02d\n    sites: {east: {groupID: %s}, west: {groupID: %s}}\n", i, id, id)
	}
	east, west := simtest.StartPair(t, simtest.Options{Interval: 50 * time.Millisecond, Groups: groups,
		TweakA: func(c *sim.Config) { c.Name = "east" }, TweakB: func(c *sim.Config) { c.Name = "west" }})
	plan := filepath.Join(t.TempDir(), "shop.yaml")
	body := fmt.Sprintf(`apiVersion: drover.dev/v1alpha1
kind: FailoverPlan
metadata: {name: shop}
sites:
  - name: east
    storage: {endpoint: %q}
    fence: {cidrs: [%s/32]}
    orchestrator: {exec: {}}
  - name: west
    storage: {endpoint: %q}
    fence: {cidrs: [%s/32]}
    orchestrator: {exec: {}}
volumeGroups:
%spolicy:
  onFailure: abort
  parallelism: 2
  retry: {initialInterval: 50ms, maximumInterval: 200ms}
`, east.Endpoint(), simtest.NodeA, west.Endpoint(), simtest.NodeB, planGroups.String())
	if err := os.WriteFile(plan, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	worker := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + srv.Address()}, filepath.Join(bins, "worker"), "--metrics", "", "--allow-unsigned-plans")
	simtest.Eventually(t, 30*time.Second, "the worker to start", func() bool { return strings.Contains(worker.Log.String(), "worker started") })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	drctl := func(stdout io.Writer, args ...string) (int, string) {
		var errb strings.Builder
		code := runContext(ctx, append([]string{"--address", srv.Address()}, args...), strings.NewReader(""), stdout, &errb)
		return code, errb.String()
	}
	if code, errs := drctl(io.Discard, "protect", "start", plan, "--primary", "east", "--interval", "200ms"); code != 0 {
		t.Fatalf("protect start: exit %d\n%s", code, errs)
	}
	simtest.Eventually(t, time.Minute, "a sync of every group", func() bool {
		var b strings.Builder
		var st planStatus
		if code, _ := drctl(&b, "-o", "json", "status", "shop"); code != 0 || json.Unmarshal([]byte(b.String()), &st) != nil || st.Protection == nil {
			return false
		}
		synced := 0
		for _, g := range st.Protection.Groups {
			if !g.LastSync.IsZero() {
				synced++
			}
		}
		return synced == len(groups)
	})
	if err := west.SetFaults([]sim.FaultRule{
		{Method: "PromoteVolume", Code: "UNAVAILABLE", Count: 25, Subject: "vg-9", Message: vtError},
		{Method: "PromoteVolume", Code: "INVALID_ARGUMENT", Count: 1, Subject: "vg-9", Message: "refused for good: " + vtError},
	}); err != nil {
		t.Fatal(err)
	}
	east.Down()
	if code, errs := drctl(io.Discard, "failover", plan, "--to", "west", "--yes"); code != 0 {
		t.Fatalf("failover: exit %d\n%s", code, errs)
	}
	term := newVT(t, 80, 24)
	code, errs := drctl(term, "watch", "shop")
	out := term.text()
	t.Logf("exit %d\n%s\n%s", code, out, errs)
	if code != exitFailed {
		t.Errorf("watch of the failed action: exit %d, want %d", code, exitFailed)
	}
	if len(term.ups) < 3 {
		t.Fatalf("the live view redrew %d times: too few to judge", len(term.ups))
	}
	if term.wraps > 0 {
		t.Errorf("%d characters went past the 80th column onto the next row", term.wraps)
	}
	for i, n := range term.ups {
		if n > 0 {
			t.Errorf("at redraw %d the scrollback held %d rows: the live view outgrew the screen", i+1, n)
			break
		}
	}
	if want := `failover of plan "shop": failed at step "promote orders-database-of-the-online-shop-in-the-european-region-09 on west"`; !strings.Contains(strings.ReplaceAll(out, "\n    ", " "), want) {
		t.Errorf("the closing table is not headed %q", want)
	}
	viewsOfShop(t, drctl, errs)
}

// viewsOfShop are what drctl watch (its closing error), list, status and
// report say of the failed failover of shop: its state and its took.
func viewsOfShop(t *testing.T, drctl func(io.Writer, ...string) (int, string), watchErr string) {
	t.Helper()
	const state = `failed at step "promote orders-database-of-the-online-shop-in-the-european-region-09 on west"`
	tookRE := regexp.MustCompile(`(?m)^drctl: drover-action-shop (.*) after ([0-9.hms]+):`)
	m := tookRE.FindStringSubmatch(watchErr)
	if m == nil || m[1] != state {
		t.Fatalf("watch's closing error does not say %s after how long: %q", state, watchErr)
	}
	want := m[2]
	var list, status, report strings.Builder
	// Visibility learns of the close a moment after it.
	simtest.Eventually(t, 30*time.Second, "list to show the failover closed", func() bool {
		list.Reset()
		drctl(&list, "list")
		return strings.Contains(list.String(), " failed ")
	})
	drctl(&status, "status", "shop")
	drctl(&report, "report", "shop")
	var row []string
	for _, ln := range strings.Split(list.String(), "\n") {
		if f := strings.Fields(ln); len(f) > 5 && f[0] == "shop" && f[1] == "Failover" {
			row = f
		}
	}
	t.Logf("watch: %s\nlist: %v\n%s\n%s", m[0], row, status.String(), report.String())
	if row == nil || row[2] != "failed" || row[5] != want {
		t.Errorf("list's row of the failover: %v; want failed, took %s as watch said", row, want)
	}
	for _, w := range []string{"last action: Failover, " + state + ", started ", ", took " + want + " (workflow", `failover of plan "shop": ` + state} {
		if !strings.Contains(strings.ReplaceAll(status.String(), "\n    ", " "), w) {
			t.Errorf("status lacks %q", w)
		}
	}
	for _, w := range []string{"| Status | " + state + " |", "| Took | " + want + " |"} {
		if !strings.Contains(report.String(), w) {
			t.Errorf("the report lacks %q", w)
		}
	}
}
