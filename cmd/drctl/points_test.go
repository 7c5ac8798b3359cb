package main_test

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/workflows"
)

// TestPointsOnDevServer: a plan with policy.pointsInTime (every second,
// keep 2), protected by the worker on the dev server: drctl points
// lists the two newest points at west, text and JSON, each with the
// last sync it holds; status shows them and what was pruned; west's
// storage holds exactly their snapshots; the worker's metrics give the
// newest point's age and the age the policy allows. Protection stopped
// leaves its points in the record; started again, it takes them over
// and prunes them. Stopped for good, its gauges leave /metrics. A
// failover to the older point names it first, holds it, and status says
// the plan runs on the volumes restored from it; a failback is then
// refused (as one site action too) until a reprotect has made the
// restored volumes the protected ones, which status then says; the
// failback then runs. drctl release is refused before the reprotect,
// frees the point and the kept replicas after it, and then finds nothing
// to release.
func TestPointsOnDevServer(t *testing.T) {
	bins := bintest.Build(t, "drctl", "worker")
	srv := devserver.Start(t, nil)
	east, west := eastWest(t)
	shop := twoSitePlan(t, east, west, "shop", `volumeGroups:
  - name: db
    sites: {east: {groupID: vg-1, members: [v1, v2]}, west: {groupID: vg-1, members: [v1, v2]}}
  - name: loose
    sites: {east: {volumes: [solo]}, west: {volumes: [solo]}}
policy:
  pointsInTime: {every: 1s, keep: 2}
`)
	c, metrics := workerOn(t, bins, srv)

	c.ok(nil, "protect", "start", shop, "--primary", "east", "--interval", "200ms")
	var l pointsOut
	simtest.Eventually(t, 2*time.Minute, "two points and a prune", func() bool {
		l = pointsOut{}
		code, out, _ := c.run("-o", "json", "points", "shop")
		return code == 0 && parse(out, &l) && len(l.Points) == 2 && l.PrunedCount >= 1
	})
	for _, pt := range l.Points {
		if pt.Site != "west" || !pt.Usable() || pt.LastSync.IsZero() || pt.LastSync.After(pt.Taken) || len(pt.Groups) != 2 {
			t.Fatalf("point %+v", pt)
		}
	}
	if !l.Points[0].Taken.Before(l.Points[1].Taken) {
		t.Fatalf("points out of order: %s, %s", l.Points[0].ID, l.Points[1].ID)
	}
	code, out, errs := c.run("points", "shop")
	if code != 0 || !strings.Contains(out, "plan shop: 2 point(s) in time") || !strings.Contains(out, "HOLDS UP TO (LAST SYNC)") ||
		!strings.Contains(out, l.Points[0].ID) || !strings.Contains(out, "pruned: ") || !strings.Contains(out, "beyond the newest 2 (keep)") ||
		strings.Contains(out, "no points are cut") || l.NotCut != nil {
		t.Fatalf("drctl points: exit %d\n%s%s", code, out, errs)
	}
	t.Logf("drctl points shop:\n%s", out)
	code, out, errs = c.run("status", "shop")
	if code != 0 || !regexp.MustCompile(`points in time: 2, the newest \S+ at west`).MatchString(out) || !strings.Contains(out, "pruned: ") {
		t.Fatalf("drctl status: exit %d\n%s%s", code, out, errs)
	}
	t.Logf("drctl status shop:\n%s", out)

	// The metrics: the newest point's age, and what the policy allows
	// (every 1s and the poll interval of 200ms).
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	gauge := func(name string) float64 {
		m := regexp.MustCompile(`\n` + name + `\{[^}]*plan="shop"[^}]*\} (\S+)\n`).FindSubmatch(raw)
		if m == nil {
			t.Fatalf("metrics lack %s of plan shop", name)
		}
		v, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if age, allowed := gauge(workflows.MetricPointAge), gauge(workflows.MetricPointMaxAge); age < 0 || allowed != 1.2 {
		t.Fatalf("point age %v, allowed %v (want 1.2)", age, allowed)
	}

	// An operator's hold: the point outlives the pruning around it until
	// released.
	code, out, errs = c.run("points", "shop", "--hold", "newest", "--by", "alice")
	m := regexp.MustCompile(`point (\S+) held by alice; held by alice\n`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("drctl points --hold newest: exit %d\n%s%s", code, out, errs)
	}
	aliceHeld := m[1]
	if code, _, errs := c.run("points", "shop", "--hold", "19990101T000000Z"); code != 1 || !strings.Contains(errs, "no point") {
		t.Fatalf("a hold of no point: exit %d, %s", code, errs)
	}
	if code, _, errs := c.run("points", "shop", "--hold", "newest", "--by", "run drover-test-shop/x"); code != 2 || !strings.Contains(errs, "an action's hold") {
		t.Fatalf("an operator's hold named as an action's: exit %d, %s", code, errs)
	}
	simtest.Eventually(t, time.Minute, "newer points pruned around alice's", func() bool {
		l = pointsOut{}
		code, out, _ := c.run("-o", "json", "points", "shop")
		return code == 0 && parse(out, &l) && len(l.Points) == 3 && l.Points[0].ID == aliceHeld &&
			slices.Equal(l.Points[0].Held, []string{"alice"}) && l.Points[1].Taken.Sub(l.Points[0].Taken) > 2*time.Second
	})
	// Someone who holds nothing releases nothing, and is told so
	// (issue 56): alice's hold stays.
	if code, out, errs := c.run("points", "shop", "--release", aliceHeld, "--by", "mallory"); code != 2 ||
		!strings.Contains(errs, "mallory holds no hold of point") || !strings.Contains(errs, "held by alice") || strings.Contains(out, "released") {
		t.Fatalf("a release by someone who holds nothing: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = c.run("points", "shop", "--release", aliceHeld, "--by", "alice")
	if code != 0 || !strings.Contains(out, "alice's hold released; held by nobody") {
		t.Fatalf("drctl points --release: exit %d\n%s%s", code, out, errs)
	}
	simtest.Eventually(t, time.Minute, "alice's point pruned once released", func() bool {
		l = pointsOut{}
		code, out, _ := c.run("-o", "json", "points", "shop")
		return code == 0 && parse(out, &l) && !slices.ContainsFunc(l.Points, func(x workflows.PointInTime) bool { return x.ID == aliceHeld })
	})

	// A test recovery from the newest point holds it under the test's
	// run while it runs, and releases it at its end.
	if code, _, errs := c.run("test-recovery", shop, "--at", "west", "--point", "yesterday"); code != 2 || !strings.Contains(errs, "--point \"yesterday\"") {
		t.Fatalf("a --point drctl cannot read: exit %d, %s", code, errs)
	}
	c.ok(nil, "test-recovery", shop, "--at", "west", "--point", "newest")
	heldBy := func(l pointsOut) string {
		for _, pt := range l.Points {
			for _, h := range pt.Held {
				return pt.ID + " " + h
			}
		}
		return ""
	}
	simtest.Eventually(t, time.Minute, "the point held by the test", func() bool {
		l = pointsOut{}
		code, out, _ := c.run("-o", "json", "points", "shop")
		return code == 0 && parse(out, &l) && strings.Contains(heldBy(l), " run drover-test-shop/")
	})
	code, out, errs = c.run("points", "shop")
	if code != 0 || !strings.Contains(out, "run drover-test-shop/") {
		t.Fatalf("drctl points while a test holds a point: exit %d\n%s%s", code, out, errs)
	}
	c.ok(nil, "approve", "drover-test-shop", "--yes")
	simtest.Eventually(t, time.Minute, "the test's hold released", func() bool {
		l = pointsOut{}
		code, out, _ := c.run("-o", "json", "points", "shop")
		return code == 0 && parse(out, &l) && heldBy(l) == ""
	})

	// Stopped, protection leaves its points in the record and on west.
	c.ok(nil, "protect", "stop", "shop")
	var before pointsOut
	c.ok(&before, "points", "shop")
	if len(before.Points) < 2 {
		t.Fatalf("after the stop the record holds %+v", before.Points)
	}
	// It still answers queries, with its last state: drctl points says
	// it cuts no point.
	if before.NotCut == nil || before.NotCut.Reason != "stopped" {
		t.Fatalf("after the stop drctl points gives notCut %+v", before.NotCut)
	}
	if code, out, errs := c.run("points", "shop"); code != 0 || !strings.Contains(out, "no points are cut: the plan's protection is not running; drctl protect start") {
		t.Fatalf("drctl points after the stop: exit %d\n%s%s", code, out, errs)
	}
	checkWest(t, west, before.Points)
	// Started again, it takes them over: they are pruned in their turn.
	c.ok(nil, "protect", "start", shop, "--primary", "east", "--interval", "200ms")
	simtest.Eventually(t, 2*time.Minute, "the points from before the stop pruned", func() bool {
		l = pointsOut{}
		code, out, _ := c.run("-o", "json", "points", "shop")
		if code != 0 || !parse(out, &l) {
			return false
		}
		for _, pt := range before.Points {
			if slices.ContainsFunc(l.Points, func(x workflows.PointInTime) bool { return x.ID == pt.ID }) {
				return false
			}
		}
		return len(l.Points) == 2
	})
	c.ok(nil, "protect", "stop", "shop")
	c.ok(&l, "points", "shop")
	checkWest(t, west, l.Points)
	// As the other protection gauges, they leave once protection ends.
	simtest.Eventually(t, 30*time.Second, "the points' gauges to leave /metrics", func() bool {
		resp, err := http.Get("http://" + metrics + "/metrics")
		if err != nil {
			return false
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return !strings.Contains(string(raw), workflows.MetricPointAge) && !strings.Contains(string(raw), workflows.MetricPointMaxAge)
	})

	// A failover to the older of the points names it before it starts,
	// holds it (in the record: protection is stopped), and status says
	// the plan runs on volumes restored from it.
	pick := l.Points[0]
	if code, _, errs := c.run("failover", shop, "--to", "west", "--point", "yesterday", "--yes"); code != 2 || !strings.Contains(errs, "--point \"yesterday\"") {
		t.Fatalf("a --point drctl cannot read: exit %d, %s", code, errs)
	}
	code, out, errs = c.run("failover", shop, "--to", "west", "--point", pick.ID, "--yes", "--wait")
	if code != 0 || !strings.Contains(errs, "point: the record picks "+pick.ID+" now") || !strings.Contains(out, "point "+pick.ID) {
		t.Fatalf("drctl failover --point %s: exit %d\n%s%s", pick.ID, code, out, errs)
	}
	simtest.Eventually(t, time.Minute, "status to say the plan runs on the restored volumes", func() bool {
		code, out, _ := c.run("status", "shop")
		return code == 0 && strings.Contains(out, "running on volumes restored from point "+pick.ID+" at west") && strings.Contains(out, "the replicas are kept")
	})
	code, out, errs = c.run("points", "shop")
	if code != 0 || !strings.Contains(out, "run drover-action-shop/") {
		t.Fatalf("drctl points after a failover to a point: exit %d\n%s%s", code, out, errs)
	}
	// A failback would act on the replicas, not on the restored volumes:
	// refused, nothing done; as one site action too, the plan left out
	// with why.
	if code, _, errs := c.run("failback", shop, "--to", "east", "--yes"); code != 2 || !strings.Contains(errs, "runs on volumes restored from point "+pick.ID) || !strings.Contains(errs, "Nothing was done") {
		t.Fatalf("drctl failback after a failover to a point: exit %d, %s", code, errs)
	}
	code, out, errs = c.run("failback", "--site", "west", "--to", "east", filepath.Dir(shop), "--yes")
	if code == 0 || !strings.Contains(out+errs, "runs on volumes restored from point "+pick.ID) {
		t.Fatalf("drctl failback --site after a failover to a point: exit %d\n%s%s", code, out, errs)
	}
	// A failover away from the restored volumes before the reprotect:
	// east holds no copy of them, and drctl says so before it asks.
	if code, _, errs := c.run("failover", shop, "--to", "east"); code != 2 || !strings.Contains(errs, "warning: plan \"shop\" runs at west on volumes restored from point "+pick.ID) ||
		!strings.Contains(errs, "east holds no copy of them") || !strings.Contains(errs, "not confirmed") {
		t.Fatalf("drctl failover away from the restored volumes: exit %d, %s", code, errs)
	}
	// Nothing to release before the reprotect.
	if code, _, errs := c.run("release", shop, "--yes"); code != 2 || !strings.Contains(errs, "Reprotect first") {
		t.Fatalf("drctl release before the reprotect: exit %d, %s", code, errs)
	}
	// A reprotect makes the restored volumes the protected ones; the
	// failback then moves them.
	if code, out, errs := c.run("reprotect", shop, "--yes", "--wait"); code != 0 || !strings.Contains(out, "record the restored volumes as the protected ones") {
		t.Fatalf("drctl reprotect after a failover to a point: exit %d\n%s%s", code, out, errs)
	}
	simtest.Eventually(t, time.Minute, "status to say the restored volumes are protected", func() bool {
		code, out, _ := c.run("status", "shop")
		return code == 0 && strings.Contains(out, "the plan runs on the volumes restored from point "+pick.ID) && strings.Contains(out, "the replicas they replaced are kept") &&
			!strings.Contains(out, "running on volumes restored")
	})
	if code, out, errs := c.run("failback", shop, "--to", "east", "--yes", "--wait"); code != 0 {
		t.Fatalf("drctl failback after the reprotect: exit %d\n%s%s", code, out, errs)
	}
	// drctl release frees the point and the kept replicas, once.
	if code, out, errs := c.run("release", shop, "--yes", "--wait"); code != 0 || !strings.Contains(out, "nothing kept any more") {
		t.Fatalf("drctl release: exit %d\n%s%s", code, out, errs)
	}
	simtest.Eventually(t, time.Minute, "status to say the replicas were released", func() bool {
		code, out, _ := c.run("status", "shop")
		return code == 0 && strings.Contains(out, "the replicas they replaced were released")
	})
	if code, _, errs := c.run("release", shop, "--yes"); code != 2 || !strings.Contains(errs, "keeps nothing to release") {
		t.Fatalf("a second drctl release: exit %d, %s", code, errs)
	}
}

// pointsOut is drctl points -o json.
type pointsOut struct {
	Plan        string
	Points      []workflows.PointInTime
	Pruned      []workflows.PrunedPoint
	PrunedCount int
	NotCut      *struct{ Reason string }
}

func parse(out string, v any) bool { return json.Unmarshal([]byte(out), v) == nil }

// checkWest holds west's snapshots to those points made: every
// snapshot and group snapshot of a point that can be recovered to is
// there, and nothing else but what a cut stopped short asked for (by
// the names recorded before its calls).
func checkWest(t *testing.T, west *simtest.Site, points []workflows.PointInTime) {
	t.Helper()
	named, must := map[string]bool{}, map[string]bool{}
	for _, pt := range points {
		for _, g := range pt.Groups {
			var names []string
			if g.GroupSnapshotName != "" {
				names = append(names, g.GroupSnapshotName)
			}
			for _, sn := range g.Snapshots {
				if sn.Name != "" {
					names = append(names, sn.Name)
				}
			}
			for _, n := range names {
				named[n] = true
				// A point whose pruning failed (a stop cut it short)
				// may have lost some of its snapshots already.
				must[n] = must[n] || (pt.Usable() && pt.PruneError == "")
			}
		}
	}
	st := west.Snapshot()
	var got []string
	for _, g := range st.GroupSnapshots {
		got = append(got, g.Name)
	}
	for _, sn := range st.Snapshots {
		if sn.Group == "" {
			got = append(got, sn.Name)
		}
	}
	for _, n := range got {
		if !named[n] {
			t.Fatalf("west holds %s, of no point the record holds (%v)", n, got)
		}
		delete(must, n)
	}
	for n, m := range must {
		if m {
			t.Fatalf("west lacks %s of a point the record holds", n)
		}
	}
}
