package e2e_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// ledger is the block the story's damage lands on: the writers use
// blocks 0 to 63.
const ledger = 100

// TestPointInTimeStory: the application writes on east while protection
// replicates to west and cuts a point in time there every 2 s. At T the
// application's ledger is overwritten ("ENCRYPTED"), and the damage
// replicates: west's replica holds it. drctl points lists the points. A
// test recovery from the newest point finds the damage on its copy; a
// test recovery from T finds the clean ledger, and on its copy every
// write the application made up to the point's last sync, none made
// after T. Each test holds its point while it runs, and its cleanup
// deletes its copies but not the point's snapshots. Then east is lost
// and the failover to the clean point brings the application up on
// volumes made from it at west: the restored ledger is clean, the
// promoted replica keeps the damage, the record says so, and a
// failback is refused while no reprotect has protected the restored
// volumes. The application writes on at west; east comes back; the
// reprotect makes the restored volumes the protected ones (east's copies
// of the replicas demoted and kept), and the failback moves them to
// east: east holds every block the point held, the ledger written at
// west and the write made after the reprotect; the kept replicas are
// as they were.
func TestPointInTimeStory(t *testing.T) {
	var marker, copyFile string
	h := startWith(t, 2, 2, func(text string) string {
		text = regexp.MustCompile(`\{east: \{groupID: (vg-[0-9]+)\}, west: \{groupID: (vg-[0-9]+)\}\}`).
			ReplaceAllString(text, `{east: {groupID: $1, members: [$1-vol-1]}, west: {groupID: $2, members: [$2-vol-1]}}`)
		west := regexp.MustCompile(`(?m)^(      west:\n        exec: \{start: "touch ([^"]+)app-running\.west")`)
		m := west.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no exec hooks for west in the plan:\n%s", text)
		}
		marker, copyFile = m[2]+"test-running.west", m[2]+"test-copy.west"
		text = strings.Replace(text, m[1], m[1]+`, testStart: "echo $DROVER_COPY_VG_0001_VOL_1 > `+copyFile+`; touch `+marker+`", testStop: "rm -f `+marker+`", testHealth: "test -f `+marker+`"`, 1)
		return strings.Replace(text, "policy:\n", "policy:\n  pointsInTime: {every: 2s, keep: 30}\n", 1)
	}, nil)
	h.must("protect", "start", h.plan, "--primary", "east", "--interval", "500ms")
	h.startWriters()
	east := h.st.Layout.Sites[0]
	app, err := sim.NewClient(east.Data, east.Client, "east-ledger")
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	ctx := context.Background()
	if _, err := app.Write(ctx, "vg-0001-vol-1", ledger, []byte("ledger: clean")); err != nil {
		t.Fatal(err)
	}
	h.waitProtected("e2e", 2)
	points := func() []workflows.PointInTime {
		var l struct{ Points []workflows.PointInTime }
		out := h.must("-o", "json", "points", "e2e")
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatalf("drctl points -o json: %v\n%s", err, out)
		}
		return l.Points
	}
	// A point that holds the clean ledger, then the damage at T.
	syncedAfter := func(at time.Time) bool {
		for _, pt := range points() {
			if pt.Usable() && pt.LastSync.After(at) {
				return true
			}
		}
		return false
	}
	wrote := time.Now()
	simtest.Eventually(t, time.Minute, "a point with the clean ledger", func() bool { return syncedAfter(wrote) })
	T := time.Now()
	if _, err := app.Write(ctx, "vg-0001-vol-1", ledger, []byte("ledger: ENCRYPTED")); err != nil {
		t.Fatal(err)
	}
	simtest.Eventually(t, time.Minute, "a point with the damage", func() bool { return syncedAfter(T) })
	out := h.must("points", "e2e")
	if !strings.Contains(out, "point(s) in time") {
		t.Fatalf("drctl points:\n%s", out)
	}
	for _, s := range h.states() {
		if s.Site == "west" {
			if got := string(s.Unit("vg/vg-0001").Blocks["vg-0001-vol-1"][ledger].Data); got != "ledger: ENCRYPTED" {
				t.Fatalf("west's replica holds %q: the damage should have replicated", got)
			}
		}
	}

	// test runs a test recovery from point, and returns the point it
	// used and the data of its copy of the ledger's volume.
	test := func(point string) (workflows.PointInTime, map[int64]sim.Block) {
		t.Helper()
		h.must("test-recovery", h.plan, "--at", "west", "--point", point)
		id := workflows.TestRecoveryID("e2e")
		simtest.Eventually(t, time.Minute, "the test workload on the copies", func() bool {
			_, err := os.Stat(marker)
			return err == nil
		})
		b, err := os.ReadFile(copyFile)
		if err != nil {
			t.Fatal(err)
		}
		copyID := strings.TrimSpace(string(b))
		var blocks map[int64]sim.Block
		for _, s := range h.states() {
			for _, c := range s.Clones {
				if s.Site == "west" && c.ID == copyID {
					blocks = c.Blocks
				}
			}
		}
		if blocks == nil {
			t.Fatalf("the test's copy %q of vg-0001-vol-1 is not on west", copyID)
		}
		var held *workflows.PointInTime
		for _, pt := range points() {
			for _, by := range pt.Held {
				if strings.HasPrefix(by, "run "+id+"/") {
					held = &pt
				}
			}
		}
		if held == nil {
			t.Fatalf("no point is held by the test:\n%s", h.must("points", "e2e"))
		}
		h.must("approve", id, "--yes")
		end := h.must("watch", id)
		if !strings.Contains(end, "every copy deleted; the snapshots of point "+held.ID+" kept (protection's), its hold released") {
			t.Fatalf("the test's end:\n%s", end)
		}
		return *held, blocks
	}
	newest, damaged := test("newest")
	if got := string(damaged[ledger].Data); got != "ledger: ENCRYPTED" || !newest.LastSync.After(T) {
		t.Fatalf("the newest point (%s, last sync %s) has the ledger %q", newest.ID, newest.LastSync, got)
	}
	clean, blocks := test(T.UTC().Format(time.RFC3339Nano))
	if got := string(blocks[ledger].Data); got != "ledger: clean" || clean.Taken.After(T) {
		t.Fatalf("the point at T (%s, cut %s, T %s) has the ledger %q", clean.ID, clean.Taken, T, got)
	}
	// The application's writes on the clean copy: none after T, and the
	// newest within a second of the point's last sync.
	var newestWrite time.Time
	for i, b := range blocks {
		m := regexp.MustCompile(`^east write \d+ at (\S+)$`).FindSubmatch(b.Data)
		if i == ledger || m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, string(m[1]))
		if err != nil {
			t.Fatal(err)
		}
		if at.After(T) {
			t.Fatalf("the copy of the point at T holds a write made after T (%s): %q", T, b.Data)
		}
		if at.After(newestWrite) {
			newestWrite = at
		}
	}
	if newestWrite.Before(clean.LastSync.Add(-time.Second)) {
		t.Fatalf("the point's last sync is %s, its newest write of the application %s", clean.LastSync, newestWrite)
	}
	// The points outlive the tests: their snapshots are on west.
	for _, s := range h.states() {
		if s.Site != "west" {
			continue
		}
		if len(s.Clones) != 0 {
			t.Fatalf("%d copies left on west", len(s.Clones))
		}
		for _, pt := range []workflows.PointInTime{newest, clean} {
			for _, g := range pt.Groups {
				for _, sn := range g.Snapshots {
					found := false
					for _, x := range s.Snapshots {
						found = found || x.ID == sn.ID
					}
					if !found {
						t.Fatalf("point %s's snapshot %s is gone from west", pt.ID, sn.ID)
					}
				}
			}
		}
	}
	h.check()
	t.Logf("point at T: %s (last sync %s, lag %v); newest: %s", clean.ID, clean.LastSync.Format(time.RFC3339Nano), clean.Lag, newest.ID)

	// East is lost; the failover to the clean point fences and promotes
	// as any failover, then brings the application up on volumes made
	// from the point.
	h.stopWriters()
	h.siteDown("east")
	out = h.must("failover", h.plan, "--to", "west", "--point", clean.ID, "--yes", "--wait")
	if !strings.Contains(out, "restore the volumes from the point at west") || !strings.Contains(out, "the workloads run on volumes restored from point "+clean.ID+" (held); discarded: the writes from") {
		t.Fatalf("the failover to the point:\n%s", out)
	}
	rec, err := workflows.ReadRecord(ctx, h.c, "e2e")
	if err != nil || rec.Restored == nil || rec.Restored.Point != clean.ID || rec.Primary != "west" {
		t.Fatalf("the record after the failover to %s: %+v, %v", clean.ID, rec, err)
	}
	restored := rec.Restored.Volumes["vg-0001-vol-1"]
	for _, s := range h.states() {
		if s.Site != "west" {
			continue
		}
		if got := string(s.Unit("vg/vg-0001").Blocks["vg-0001-vol-1"][ledger].Data); got != "ledger: ENCRYPTED" || s.Unit("vg/vg-0001").Role != sim.RolePrimary {
			t.Fatalf("the promoted replica: role %s, ledger %q (kept as it was)", s.Unit("vg/vg-0001").Role, got)
		}
		found := false
		for _, c := range s.Clones {
			if c.ID == restored {
				found = true
				if got := string(c.Blocks[ledger].Data); got != "ledger: clean" {
					t.Fatalf("the restored volume %s holds %q", restored, got)
				}
			}
		}
		if !found {
			t.Fatalf("no restored volume %q on west", restored)
		}
	}
	if !h.runningOn("west") {
		t.Fatal("the application does not run on west")
	}
	if out, code := h.drctl("failback", h.plan, "--to", "east", "--yes"); code != 2 || !strings.Contains(out, "Reprotect first") {
		t.Fatalf("a failback of a plan on restored volumes: exit %d\n%s", code, out)
	}
	h.check()

	// The application writes on at west, on the restored volume.
	westSite := h.st.Layout.Sites[1]
	wapp, err := sim.NewClient(westSite.Data, westSite.Client, "west-ledger")
	if err != nil {
		t.Fatal(err)
	}
	defer wapp.Close()
	if _, err := wapp.Write(ctx, restored, ledger, []byte("ledger: restored, then written at west")); err != nil {
		t.Fatal(err)
	}

	// East is back: the reprotect makes the restored volumes the
	// protected ones, east's copies of the replicas demoted and kept;
	// the failback moves the restored volumes to east with no loss.
	h.siteUp("east")
	out = h.must("reprotect", h.plan, "--yes", "--wait")
	if !strings.Contains(out, "record the restored volumes as the protected ones") {
		t.Fatalf("the reprotect of the restored volumes:\n%s", out)
	}
	if out := h.must("status", "e2e"); !strings.Contains(out, "the plan runs on the volumes restored from point "+clean.ID) {
		t.Fatalf("status after the reprotect:\n%s", out)
	}
	if _, err := wapp.Write(ctx, restored, ledger+1, []byte("written after the reprotect")); err != nil {
		t.Fatal(err)
	}
	h.must("failback", h.plan, "--to", "east", "--yes", "--wait")
	if !h.runningOn("east") {
		t.Fatal("the application does not run on east after the failback")
	}
	var westRestored map[string]map[int64]sim.Block
	for _, s := range h.states() {
		if s.Site == "west" {
			u := s.Unit("vol/" + restored)
			if u == nil || u.Role != sim.RoleSecondary {
				t.Fatalf("west's restored volume after the failback: %+v", u)
			}
			westRestored = u.Blocks
			if got := string(s.Unit("vg/vg-0001").Blocks["vg-0001-vol-1"][ledger].Data); got != "ledger: ENCRYPTED" {
				t.Fatalf("west's kept replica holds %q", got)
			}
		}
	}
	for _, s := range h.states() {
		if s.Site != "east" {
			continue
		}
		u := s.Unit("vol/" + restored)
		if u == nil || u.Role != sim.RolePrimary {
			t.Fatalf("east's copy of the restored volume after the failback: %+v", u)
		}
		if got, want := string(u.Blocks[restored][ledger].Data), "ledger: restored, then written at west"; got != want {
			t.Fatalf("east's ledger after the failback: %q, want %q", got, want)
		}
		if got := string(u.Blocks[restored][ledger+1].Data); got != "written after the reprotect" {
			t.Fatalf("east lost the write made after the reprotect: %q", got)
		}
		// Every block the application wrote before T, as the point held
		// it, is on east now.
		for i, b := range blocks {
			if i == ledger {
				continue
			}
			if got := u.Blocks[restored][i].Data; string(got) != string(b.Data) {
				t.Fatalf("block %d on east after the failback: %q, the point held %q", i, got, b.Data)
			}
		}
		if len(u.Blocks[restored]) != len(westRestored[restored]) {
			t.Fatalf("east holds %d blocks of the restored volume, west %d", len(u.Blocks[restored]), len(westRestored[restored]))
		}
		if g := s.Unit("vg/vg-0001"); g.Role != sim.RoleSecondary || !g.Demoted {
			t.Fatalf("east's kept replica after the failback: role %s, demoted %v", g.Role, g.Demoted)
		}
	}
	h.check()
}
