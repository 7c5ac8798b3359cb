package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/workflows"
)

// cephImage is the RBD image of a ceph-csi volume or snapshot id.
func cephImage(prefix, id string) string { return prefix + id[len(id)-36:] }

// readPoints reads the plan's points in time as drctl points -o json
// gives them.
func readPoints(t *testing.T, h *harness) (points []workflows.PointInTime, pruned int) {
	t.Helper()
	var l struct {
		Points      []workflows.PointInTime
		PrunedCount int
	}
	out := h.must("-o", "json", "points", "e2e")
	// What drctl says while it waits for a worker comes before the JSON.
	if i := strings.Index(out, "\n{"); i >= 0 && !strings.HasPrefix(out, "{") {
		out = out[i+1:]
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("drctl points -o json: %v\n%s", err, out)
	}
	return l.Points, l.PrunedCount
}

// pointImages are the RBD images of the points' copies and snapshots.
func pointImages(points []workflows.PointInTime) map[string]bool {
	out := map[string]bool{}
	for _, pt := range points {
		for _, g := range pt.Groups {
			for _, sn := range g.Snapshots {
				if len(sn.Copy) >= 36 {
					out[cephImage("csi-vol-", sn.Copy)] = true
				}
				if len(sn.ID) >= 36 {
					out[cephImage("csi-snap-", sn.ID)] = true
				}
			}
		}
	}
	return out
}

// cephPoints checks what protection made of policy.pointsInTime (cut:
// primary) on ceph-csi: points cut at east, each a snapshot made a volume
// whose mirroring ships it; each usable at west once its copies synced,
// where they are mirrored non-primary images; and the copies of the
// points it pruned gone from both clusters (images there before the test,
// an earlier test's, left out).
func cephPoints(t *testing.T, h *harness, e cephEnv, vols map[string]string, before map[string]bool) {
	t.Helper()
	var points []workflows.PointInTime
	var pruned int
	simtest.Eventually(t, 3*time.Minute, "points cut at east, usable at west, and one pruned", func() bool {
		points, pruned = readPoints(t, h)
		usable := 0
		for _, pt := range points {
			if pt.Usable() {
				usable++
			}
		}
		return usable >= 2 && pruned > 0
	})
	var synced []time.Duration
	var newest *workflows.PointInTime
	for i, pt := range points {
		if pt.Site != "west" || pt.CutAt != "east" || pt.Error != "" {
			t.Fatalf("point %s: site %s, cut at %s, error %q; want cut at east for west", pt.ID, pt.Site, pt.CutAt, pt.Error)
		}
		if pt.Usable() {
			synced = append(synced, pt.Synced.Sub(pt.Taken).Round(time.Second))
			newest = &points[i]
		}
	}
	// The newest usable point (never pruned): its copies are mirrored
	// replicas at west, of the volumes' size, primary at east.
	for _, g := range newest.Groups {
		for _, sn := range g.Snapshots {
			img := cephImage("csi-vol-", sn.Copy)
			if s := e.cli(t, "west", "rbd", "info", "rbd/"+img); !strings.Contains(s, "mirroring primary: false") || !strings.Contains(s, "size 64 MiB") {
				t.Fatalf("point %s: %s's copy %s on west is not a mirrored replica of the volume's size (64 MiB):\n%s", newest.ID, sn.Volume, img, s)
			}
			if s := e.cli(t, "east", "rbd", "info", "rbd/"+img); !strings.Contains(s, "mirroring primary: true") {
				t.Fatalf("point %s: %s's copy %s on east is not the mirrored primary:\n%s", newest.ID, sn.Volume, img, s)
			}
		}
	}
	// A pruned point's copies go from both clusters: only the kept
	// points' copies (and the plan's images) remain.
	var left []string
	simtest.Eventually(t, 3*time.Minute, "the pruned points' copies to be gone from both clusters", func() bool {
		points, _ = readPoints(t, h)
		kept := pointImages(points)
		left = nil
		for _, site := range []string{"east", "west"} {
			for _, img := range strings.Fields(e.cli(t, site, "rbd", "ls", "rbd")) {
				if strings.HasPrefix(img, "csi-vol-") && !kept[img] && !before[site+":"+img] &&
					!slices.Contains([]string{cephImage("csi-vol-", vols["db"]), cephImage("csi-vol-", vols["web"])}, img) {
					left = append(left, site+":"+img)
				}
			}
		}
		if len(left) > 0 {
			time.Sleep(5 * time.Second)
		}
		return len(left) == 0
	})
	t.Logf("ceph: points in time cut at east: %d listed, %d pruned so far; copies synced to west %v after each cut; no pruned point's copy left on either cluster",
		len(points), pruned, synced)
}

// cephPointStory is the point-in-time story on real Ceph, once the plan
// runs on east again: east's writer writes; "damage" is written over a
// block it wrote on db; a point cut after it ships. Two test recoveries
// at east, one from the last point before the damage (its copy of db
// holds no damage) and one from the damaged point (it does). A failover
// to west to the clean point, east up (as a ransomware recovery goes):
// east's writer stopped, east fenced, west's replicas promoted and kept,
// the point's copies promoted at west: they hold every write east's
// writer had acknowledged before the cut and no damage, and west's
// writer writes on them. The reprotect demotes and resyncs east's copies
// of them; the failback brings the plan to east on them, holding every
// write west acknowledged; the release turns the kept replicas'
// mirroring off where they are primary. The restored images end
// byte-identical on both clusters.
func cephPointStory(t *testing.T, ctx context.Context, h *harness, e cephEnv, dir, app string, images map[string]string, secrets map[string]string) {
	t.Helper()
	start := time.Now()
	runHook(t, e.appCmd(app, "east", e.site("east", "CONF"), "write", "east", filepath.Join(dir, "east.acks"), "0", images["db"], images["web"]),
		filepath.Join(dir, "east"))
	waitAcks(t, filepath.Join(dir, "east.acks"), 10)

	// A point after the writer started, then the damage, then a point
	// after it, each usable at west.
	// newest is the newest point usable at west cut between after and
	// before.
	newest := func(after, before time.Time) *workflows.PointInTime {
		points, _ := readPoints(t, h)
		for i := len(points) - 1; i >= 0; i-- {
			if pt := points[i]; pt.Usable() && pt.CutAt == "east" && pt.Taken.After(after) && pt.Taken.Before(before) {
				return &pt
			}
		}
		return nil
	}
	var clean, damaged *workflows.PointInTime
	simtest.Eventually(t, 4*time.Minute, "a point cut after the writer started, usable at west", func() bool {
		clean = newest(start, time.Now())
		return clean != nil
	})
	const damageOff = "409600" // db's block 100, which east's writer wrote
	damagedAt := time.Now()
	if out, err := hook(e.appCmd(app, "east", e.site("east", "CONF"), "mark", images["db"], damageOff, "damage")); err != nil {
		t.Fatalf("the damage: %v\n%s", err, out)
	}
	simtest.Eventually(t, 4*time.Minute, "a point cut after the damage, usable at west", func() bool {
		damaged = newest(damagedAt, time.Now())
		return damaged != nil
	})
	clean = newest(start, damagedAt)
	for _, pt := range []*workflows.PointInTime{clean, damaged} {
		if pt.Lag != 0 {
			t.Fatalf("point %s, cut at the primary, has lag %s", pt.ID, pt.Lag)
		}
	}
	t.Logf("ceph: damage written at %s; clean point %s, damaged point %s", damagedAt.UTC().Format("15:04:05"), clean.ID, damaged.ID)

	// Two test recoveries at east, from the two points.
	result := filepath.Join(dir, "test-recovery.result")
	id := workflows.TestRecoveryID("e2e")
	for _, c := range []struct {
		pt   *workflows.PointInTime
		want string
	}{{clean, ", 0 damaged"}, {damaged, ", 1 damaged"}} {
		began := time.Now()
		h.must("test-recovery", h.plan, "--at", "east", "--point", c.pt.ID)
		state, failed := settled(t, h, id, 5*time.Minute, "the test workloads to run on the point's copies")
		b, _ := os.ReadFile(result)
		res := string(b)
		if state != workflows.StateWaiting {
			t.Fatalf("the test recovery from point %s stopped at %s\n%s", c.pt.ID, failed, res)
		}
		if !strings.Contains(res, c.want) {
			t.Fatalf("the test recovery from point %s read %q, want %q", c.pt.ID, strings.TrimSpace(res), c.want)
		}
		h.must("approve", id, "--yes")
		if out := h.must("watch", id); !strings.Contains(out, "released") {
			t.Fatalf("the test recovery from point %s ended:\n%s", c.pt.ID, out)
		}
		t.Logf("ceph: test recovery at east from point %s: %s (%s)", c.pt.ID, strings.TrimSpace(res), time.Since(began).Round(time.Second))
	}

	// The failover to the clean point, east up. East's writes that count
	// are this writer's: the earlier one's after its last sync were
	// discarded by the first reprotect.
	var eastAcks []cephAck
	all, _ := cephAcks(t, filepath.Join(dir, "east.acks"))
	for _, a := range all {
		if a.At.After(start) {
			eastAcks = append(eastAcks, a)
		}
	}
	westBefore, _ := cephAcks(t, filepath.Join(dir, "west.acks"))
	began := time.Now()
	cephAction(t, h, "failover", h.plan, "--to", "west", "--point", clean.ID, "--yes", "--wait")
	var fo workflows.FailoverResult
	if err := h.c.GetWorkflow(ctx, workflows.ActionID("e2e"), "").Get(ctx, &fo); err != nil {
		t.Fatal(err)
	}
	allDone(t, fo.Progress)
	restored := map[string]string{} // the plan's image → the restored one
	for _, v := range fo.Restored {
		if v.Copy == "" {
			t.Fatalf("the failover made %s from a snapshot, not the point's copy", v.Volume)
		}
		restored[cephImage("csi-vol-", v.Volume)] = cephImage("csi-vol-", v.ID)
	}
	t.Logf("ceph: failover to point %s: RTO %s; %s", clean.ID, fo.RTO.Round(time.Millisecond), fo.Discarded.Text())
	for plan, img := range restored {
		if s := e.cli(t, "west", "rbd", "info", "rbd/"+img); !strings.Contains(s, "mirroring primary: true") {
			t.Fatalf("the restored %s on west is not primary:\n%s", img, s)
		}
		if s := e.cli(t, "west", "rbd", "info", "rbd/"+plan); !strings.Contains(s, "mirroring primary: true") {
			t.Fatalf("the kept replica %s on west is not primary:\n%s", plan, s)
		}
	}
	if b := export(t, e, "west", images["db"]); !bytes.HasPrefix(b[409600:], []byte("damage")) {
		t.Fatalf("west's kept replica of db lacks the damage")
	}
	if b := export(t, e, "west", restored[images["db"]]); bytes.HasPrefix(b[409600:], []byte("damage")) {
		t.Fatalf("the restored db on west holds the damage")
	}
	checkAcksAt(t, e, "west", "east", restored, eastAcks, clean.Taken)
	held := 0
	for _, a := range eastAcks {
		if !a.At.After(clean.Taken) {
			held++
		}
	}
	waitAcks(t, filepath.Join(dir, "west.acks"), 10)
	westAcks, _ := cephAcks(t, filepath.Join(dir, "west.acks"))
	for _, a := range westAcks[len(westBefore):] {
		if !slices.Contains(mapValues(restored), a.Image) {
			t.Fatalf("west's writer wrote to %s, not to a restored image", a.Image)
		}
	}
	t.Logf("ceph: the restored images on west hold all %d of east's writes acknowledged before the cut, no damage; west's writer writes on them (%s after the failover began)",
		held, time.Since(began).Round(time.Second))

	// Reprotect: east's copies of the restored volumes demoted and
	// resynced from west.
	rs := time.Now()
	h.must("reprotect", h.plan, "--yes")
	e.observe(t, h, workflows.ActionID("e2e"), 10*time.Minute, restored)
	cephAction(t, h, "watch", "e2e")
	for _, img := range restored {
		if s := e.cli(t, "east", "rbd", "info", "rbd/"+img); !strings.Contains(s, "mirroring primary: false") {
			t.Fatalf("east's copy of the restored %s is not a replica after the reprotect:\n%s", img, s)
		}
	}
	if out := h.must("status", "e2e"); !strings.Contains(out, "restored from point "+clean.ID) {
		t.Fatalf("drctl status after the reprotect does not name the restored volumes:\n%s", out)
	}
	t.Logf("ceph: reprotect of the restored volumes took %s", time.Since(rs).Round(time.Second))

	// Failback to east on the restored volumes.
	simtest.Eventually(t, 3*time.Minute, "protection from west to record a sync of the restored volumes", func() bool {
		ps, err := workflows.ReadProtect(ctx, h.c, "e2e")
		return err == nil && ps.Primary == "west" && ps.LastSync().After(rs)
	})
	waitAcks(t, filepath.Join(dir, "west.acks"), 5)
	fb := time.Now()
	fbRes, fbOut := cephRun[workflows.FailbackResult](t, h, e, restored, 6*time.Minute, "failback", h.plan, "--to", "east", "--yes")
	pausedBeforeDemote(t, fbRes, fbOut)
	westAcks, _ = cephAcks(t, filepath.Join(dir, "west.acks"))
	checkAcksAt(t, e, "east", "west", restored, westAcks, time.Time{})
	t.Logf("ceph: failback to east on the restored volumes took %s; all %d of west's acknowledged writes are on east", time.Since(fb).Round(time.Second), len(westAcks))

	// Release: the kept replicas' mirroring off where they are primary
	// (west), nothing deleted.
	cephAction(t, h, "release", h.plan, "--yes", "--wait")
	for _, img := range images {
		s := e.cli(t, "west", "rbd", "info", "rbd/"+img)
		if strings.Contains(s, "mirroring state: enabled") {
			t.Fatalf("the kept %s on west still mirrors after the release:\n%s", img, s)
		}
	}
	t.Log("ceph: release: the kept replicas on west no longer mirror; both clusters keep them")

	waitAcks(t, filepath.Join(dir, "east.acks"), 10)
	runHook(t, "kill $(cat "+filepath.Join(dir, "east.pid")+")", "")
	stopped := time.Now()
	simtest.Eventually(t, 3*time.Minute, "a sync of the restored volumes from east begun after its writer stopped", func() bool {
		time.Sleep(time.Second)
		for _, v := range fo.Restored {
			if !lastSyncAfter(t, e, secrets, v.ID, stopped) {
				return false
			}
		}
		return true
	})
	for _, img := range restored {
		a, _ := exportSum(t, e, "east", img)
		b, _ := exportSum(t, e, "west", img)
		if a != b {
			t.Fatalf("the restored %s differs between east and west after the final sync", img)
		}
	}
	t.Logf("ceph: the point-in-time story took %s; the restored images byte-identical on both clusters", time.Since(start).Round(time.Second))
}

// checkAcksAt is checkAcks with each acknowledged write read where read
// says its image now is (an image a failover to a point replaced).
func checkAcksAt(t *testing.T, e cephEnv, site, writer string, read map[string]string, acks []cephAck, until time.Time) {
	t.Helper()
	data := map[string][]byte{}
	missing := 0
	for _, a := range acks {
		if !until.IsZero() && a.At.After(until) {
			continue
		}
		img := a.Image
		if r, ok := read[img]; ok {
			img = r
		}
		if data[img] == nil {
			data[img] = export(t, e, site, img)
		}
		b := data[img]
		if int64(len(b)) < a.Offset+cephBlockSize || !bytes.Equal(b[a.Offset:a.Offset+cephBlockSize], cephBlock(writer, a.Image, a.Seq)) {
			missing++
			if missing <= 5 {
				t.Errorf("%s's write %d to %s at %d, acknowledged at %s, is not on %s's %s", writer, a.Seq, a.Image, a.Offset, a.At.UTC().Format("15:04:05.000"), site, img)
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %s's acknowledged writes are lost on %s", missing, writer, site)
	}
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
