package main_test

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/freeport"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestOneLookInEveryView: a plan protected with a 3 s RPO target, polled
// once (an interval of an hour), its replication healthy at the poll
// (the simulator syncs every 50 ms). Five seconds later, past the target
// by the reader's clock since the last sync, every view tells the same
// look at one instant: each group's lag in status's table, in its JSON,
// on the dashboard and on the worker's /metrics; the plan's lag (the
// largest) and RPO state in status's record line, its protection line,
// the record's JSON and drover_out_of_rpo. None ages the lag by its own
// clock, so none says out of RPO.
func TestOneLookInEveryView(t *testing.T) {
	lagText := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	bins := bintest.Build(t, "drctl", "worker")
	srv := devserver.Start(t, nil)
	east, west := simtest.StartPair(t, simtest.Options{Interval: 50 * time.Millisecond,
		Groups: []sim.GroupSpec{{ID: "vg-1", Volumes: []string{"v1"}}, {ID: "vg-2", Volumes: []string{"v2"}}},
		TweakA: func(c *sim.Config) { c.Name = "east" }, TweakB: func(c *sim.Config) { c.Name = "west" }})
	path := twoSitePlan(t, east, west, "look", `volumeGroups:
  - name: db
    sites: {east: {groupID: vg-1}, west: {groupID: vg-1}}
  - name: logs
    sites: {east: {groupID: vg-2}, west: {groupID: vg-2}}
policy:
  rpoTarget: 3s
  retry: {initialInterval: 50ms, maximumInterval: 200ms}
`)
	c, metrics := workerOn(t, bins, srv)

	// One look: the first poll, then none for an hour.
	c.ok(nil, "protect", "start", path, "--primary", "east", "--interval", "1h")
	type look struct {
		Protection *workflows.ProtectState
		Record     *workflows.PlanRecord
	}
	var js look
	simtest.Eventually(t, 30*time.Second, "protection's first look in the record", func() bool {
		js = look{}
		c.ok(&js, "status", "look")
		return js.Protection != nil && !js.Protection.Looked.IsZero() && js.Record != nil && js.Record.Protection != nil &&
			!js.Protection.Groups["db"].LastSync.IsZero() && !js.Protection.Groups["logs"].LastSync.IsZero()
	})
	port, err := freeport.Port("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	dash := fmt.Sprintf("127.0.0.1:%d", port)
	ui := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + c.addr, "TEMPORAL_NAMESPACE=default"}, c.bin, "ui", "--listen", dash, "--every", "200ms")
	simtest.Eventually(t, 30*time.Second, "the dashboard to serve", func() bool { return strings.Contains(ui.Log.String(), "dashboard on http://"+dash) })
	// Past the target by the reader's clock since the last sync.
	time.Sleep(5 * time.Second)

	get := func(url string) string {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	// At one instant (protection looks again only in an hour).
	js = look{}
	c.ok(&js, "status", "look")
	_, text, _ := c.run("status", "look")
	page := get("http://" + dash + "/")
	prom := get("http://" + metrics + "/metrics")
	t.Logf("status:\n%s", text)

	ps := js.Protection
	t.Logf("status -o json: polls %d, looked %v, groups %+v", ps.Polls, ps.Looked, ps.Groups)
	if ps.Polls != 1 {
		t.Fatalf("protection polled %d times, want 1: the instant is not one", ps.Polls)
	}
	var most time.Duration
	for _, g := range []string{"db", "logs"} {
		h := ps.Groups[g]
		most = max(most, h.Lag)
		if h.OutOfRPO || h.Lag > 3*time.Second {
			t.Fatalf("group %s at protection's look: %+v, want healthy", g, h)
		}
		want := lagText(h.Lag)
		row := regexp.MustCompile(`(?m)^\s+` + g + `\s+\S+\s+(\S+)\s+(.*)$`).FindStringSubmatch(text)
		if row == nil || row[1] != want || strings.Contains(row[2], "out of RPO") {
			t.Errorf("status's row of %s: %q; want lag %s, within the target", g, row, want)
		}
		cell := regexp.MustCompile(`data-group="` + g + `">\s*<td>[^<]*</td><td>[^<]*</td><td>` + g + `</td>\s*<td class="(\w+)">([^<]*)</td>`).FindStringSubmatch(page)
		if cell == nil || cell[2] != want || cell[1] != "ok" {
			t.Errorf("the dashboard's lag of %s: %q; want %s, ok", g, cell, want)
		}
		m := regexp.MustCompile(`drover_replication_lag_seconds\{[^}]*group="` + g + `"[^}]*plan="look"[^}]*\} (\S+)`).FindStringSubmatch(prom)
		if m == nil {
			t.Errorf("no lag of %s on /metrics", g)
			continue
		}
		if v, err := strconv.ParseFloat(m[1], 64); err != nil || math.Abs(v-h.Lag.Seconds()) > 1e-6 {
			t.Errorf("/metrics' lag of %s: %s; want %v", g, m[1], h.Lag.Seconds())
		}
	}
	rec := js.Record.Protection
	if rec.Lag != most || rec.OutOfRPO || !rec.Checked.Equal(ps.Looked) {
		t.Errorf("the record's protection in status -o json: %+v; want lag %v as of %v, within the target", rec, most, ps.Looked)
	}
	if !strings.Contains(text, "lag "+lagText(most)+", within the RPO target (as of ") || strings.Contains(text, "OUT OF RPO") {
		t.Errorf("status's record line does not say lag %s within the target", lagText(most))
	}
	if !regexp.MustCompile(`\ndrover_out_of_rpo\{[^}]*plan="look"[^}]*\} 0\n`).MatchString(prom) {
		t.Errorf("drover_out_of_rpo of the plan is not 0")
	}
}

// twoSitePlan writes plan name over the pair east and west (their
// storage, east fenced by NodeA, west by NodeB, exec hooks), with rest
// (its volume groups, policy, …) after the sites, and returns its path.
func twoSitePlan(t *testing.T, east, west *simtest.Site, name, rest string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".yaml")
	body := fmt.Sprintf(`apiVersion: drover.dev/v1alpha1
kind: FailoverPlan
metadata: {name: %s}
sites:
  - name: east
    storage: {endpoint: %q}
    fence: {cidrs: [%s/32]}
    orchestrator: {exec: {}}
  - name: west
    storage: {endpoint: %q}
    fence: {cidrs: [%s/32]}
    orchestrator: {exec: {}}
%s`, name, east.Endpoint(), simtest.NodeA, west.Endpoint(), simtest.NodeB, rest)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// workerOn starts a worker (unsigned plans allowed) on srv with its
// metrics on a free address, and returns a drctl for srv and that
// address.
func workerOn(t *testing.T, bins string, srv *devserver.Server) (cli, string) {
	t.Helper()
	metrics := simtest.FreeAddr(t)
	worker := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + srv.Address()}, filepath.Join(bins, "worker"), "--metrics", metrics, "--allow-unsigned-plans")
	simtest.Eventually(t, 30*time.Second, "the worker to start", func() bool { return strings.Contains(worker.Log.String(), "worker started") })
	return cli{t: t, bin: filepath.Join(bins, "drctl"), addr: srv.Address()}, metrics
}
