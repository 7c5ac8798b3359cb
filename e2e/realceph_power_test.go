package e2e_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/workflows"
)

// cephRun starts a plan's action with drctl (args), observes it to its
// end within limit (a pause or a failure ends the test with the storage's
// evidence), and returns its result and what drctl watch showed.
func cephRun[T any](t *testing.T, h *harness, e cephEnv, images map[string]string, limit time.Duration, args ...string) (T, string) {
	t.Helper()
	var res T
	h.must(args...)
	e.observe(t, h, workflows.ActionID("e2e"), limit, images)
	out := cephAction(t, h, "watch", "e2e")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.c.GetWorkflow(ctx, workflows.ActionID("e2e"), "").Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	return res, out
}

// siteDaemons are the processes of a site that scripts/ceph/up.sh
// records, in the order a site starts them.
var siteDaemons = []string{"mon", "osd", "mgr", "rbd-mirror", "cephcsi"}

// powerLoss kills (SIGKILL) every daemon of site's cluster, its ceph-csi
// and the processes of pidFiles (its writer) at once, as a power cut
// does: nothing is frozen, nothing flushes.
func (e cephEnv) powerLoss(t *testing.T, site string, pidFiles ...string) {
	t.Helper()
	e.kill(t, site, siteDaemons, pidFiles...)
}

// kill SIGKILLs daemons of site (as up.sh names them: mon, osd, mgr,
// rbd-mirror, cephcsi) and the processes of pidFiles at once.
func (e cephEnv) kill(t *testing.T, site string, daemons []string, pidFiles ...string) {
	t.Helper()
	for _, d := range daemons {
		pidFiles = append(pidFiles, filepath.Join(e["DROVER_CEPH_STATEDIR"], "pids", site+"-"+d+".pid"))
	}
	signalPIDFiles(t, syscall.SIGKILL, pidFiles)
}

// restart starts site's daemons again as up.sh started them
// (scripts/ceph/restart.sh), and waits until its cluster serves: its OSD
// up and the images listed.
func (e cephEnv) restart(t *testing.T, site string) {
	t.Helper()
	e.restartDaemons(t, site, siteDaemons)
}

// restartDaemons starts daemons of site again (scripts/ceph/restart.sh)
// and waits until its cluster serves.
func (e cephEnv) restartDaemons(t *testing.T, site string, daemons []string) {
	t.Helper()
	var names []string
	for _, d := range daemons {
		names = append(names, site+"-"+d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", append([]string{"../scripts/ceph/restart.sh", e["DROVER_CEPH_STATEDIR"]}, names...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("restart %s: %v\n%s", site, err, out)
	}
	simtest.Eventually(t, 3*time.Minute, site+"'s cluster to serve again after the restart", func() bool {
		s, err := e.try(site, "ceph", "osd", "stat")
		if err != nil || !strings.Contains(s, "1 up") {
			time.Sleep(time.Second)
			return false
		}
		_, err = e.try(site, "rbd", "ls", e["DROVER_CEPH_POOL"])
		return err == nil
	})
}

// answerLog records what a site's ceph-csi answers to
// GetVolumeReplicationInfo of one volume, asked every few seconds: each
// change of answer with its time, so that a test can say how long each
// answer lasted.
type answerLog struct {
	mu      sync.Mutex
	t0      time.Time
	changes []answerChange
}

type answerChange struct {
	at     time.Duration
	answer string
}

// watchInfo asks endpoint for vol's replication info every 3 s until ctx
// ends, from t0 on.
func watchInfo(ctx context.Context, t *testing.T, endpoint string, secrets map[string]string, vol string, t0 time.Time) *answerLog {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	l := &answerLog{t0: t0}
	go func() {
		defer conn.Close()
		rc := replication.NewControllerClient(conn)
		for {
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			_, err := rc.GetVolumeReplicationInfo(cctx, &replication.GetVolumeReplicationInfoRequest{
				VolumeId: vol, Secrets: secrets, ReplicationSource: &replication.ReplicationSource{Type: &replication.ReplicationSource_Volume{
					Volume: &replication.ReplicationSource_VolumeSource{VolumeId: vol}}}})
			cancel()
			if ctx.Err() != nil {
				return
			}
			a := "OK"
			if err != nil {
				st := status.Convert(err)
				msg := st.Message()
				if i := strings.Index(msg, ": "); i > 0 && strings.HasPrefix(msg, "failed to get last sync info") {
					msg = msg[:i] + ": " + strings.TrimSpace(strings.SplitN(msg[i+2:], ":", 2)[0])
				}
				a = st.Code().String() + " " + msg
			}
			l.add(a)
			select {
			case <-ctx.Done():
				return
			case <-time.After(3 * time.Second):
			}
		}
	}()
	return l
}

func (l *answerLog) add(a string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.changes); n > 0 && l.changes[n-1].answer == a {
		return
	}
	l.changes = append(l.changes, answerChange{at: time.Since(l.t0), answer: a})
}

// String gives each answer with when it began and how long it lasted.
func (l *answerLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for i, c := range l.changes {
		end := "still at the end"
		if i+1 < len(l.changes) {
			end = fmt.Sprintf("for %s", (l.changes[i+1].at - c.at).Round(time.Second))
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "+%s %s (%s)", c.at.Round(time.Second), c.answer, end)
	}
	return b.String()
}

// TestRealCephPowerLoss loses the primary site to a power cut on real
// Ceph: every process of east (mon, mgr, OSD on BlueStore, rbd-mirror,
// its ceph-csi) and its writer killed at once mid-write, nothing frozen.
// The failover to west fences east's clients and starts the application
// there; east's daemons restart 20 s later; then, with no operator in
// between, the reprotect (started at once) waits out the answers west's
// ceph-csi gives while east's mirroring comes back, with a note of what
// the storage answered, and resyncs east; the failback loses no
// acknowledged write and the images end byte-identical. How long each
// of west's answers lasted after the restart is logged.
func TestRealCephPowerLoss(t *testing.T) {
	r := startCephRig(t, "drover-pl-")
	e, h, ctx, dir, secrets, vols, images := r.e, r.h, r.ctx, r.dir, r.secrets, r.vols, r.images

	started, first := r.protectFromEast(t)
	// A second round of syncs: the loss comes mid-schedule, as it would.
	simtest.Eventually(t, 3*time.Minute, "protection to record a second sync", func() bool {
		ps, err := workflows.ReadProtect(ctx, h.c, "e2e")
		return err == nil && ps.LastSync().After(first)
	})
	t.Logf("ceph: power loss: protected, two syncs %s after protection started", time.Since(started).Round(time.Second))

	halfDeadReplica(t, r)

	ps, err := workflows.ReadProtect(ctx, h.c, "e2e")
	if err != nil {
		t.Fatal(err)
	}
	lastSync := ps.LastSync()
	time.Sleep(10 * time.Second) // mid-write, mid-schedule
	e.powerLoss(t, "east", filepath.Join(dir, "east.pid"))
	lost := time.Now()
	t.Logf("ceph: east lost power at %s (every daemon, its ceph-csi and its writer SIGKILLed), %s after its last sync",
		lost.UTC().Format("15:04:05"), lost.Sub(lastSync).Round(time.Second))

	cephAction(t, h, "failover", h.plan, "--to", "west", "--yes", "--wait")
	var fo workflows.FailoverResult
	if err := h.c.GetWorkflow(ctx, workflows.ActionID("e2e"), "").Get(ctx, &fo); err != nil {
		t.Fatal(err)
	}
	allDone(t, fo.Progress)
	eastAcks, _ := cephAcks(t, filepath.Join(dir, "east.acks"))
	atRisk := 0
	for _, a := range eastAcks {
		if a.At.After(lastSync) {
			atRisk++
		}
	}
	t.Logf("ceph: power loss: failover to west: RTO %s (the action), %s from the loss; RPO %s; %d of east's %d acknowledged writes came after its last sync",
		fo.RTO.Round(time.Millisecond), time.Since(lost).Round(time.Second), lost.Sub(lastSync).Round(time.Second), atRisk, len(eastAcks))
	waitAcks(t, filepath.Join(dir, "west.acks"), 10)

	// East comes back 20 s after the loss, every daemon a new process on
	// the disks it had.
	time.Sleep(time.Until(lost.Add(20 * time.Second)))
	restarted := time.Now()
	e.restart(t, "east")
	t.Logf("ceph: power loss: east restarted, its cluster serving %s after the restart began", time.Since(restarted).Round(time.Second))
	wctx, stopWatch := context.WithCancel(ctx)
	answers := watchInfo(wctx, t, e.site("west", "CSIADDONS_ENDPOINT"), secrets, vols["db"], restarted)
	defer stopWatch()

	// No operator in between: the reprotect starts at once.
	rs := time.Now()
	rp, _ := cephRun[workflows.ReprotectResult](t, h, e, images, 12*time.Minute, "reprotect", h.plan, "--yes")
	allDone(t, rp.Progress)
	for _, s := range rp.Steps {
		if s.Name == "check roles on west" {
			t.Logf("ceph: power loss: reprotect's role check: %d attempts, %s: %s", s.Attempts, s.End.Sub(s.Start).Round(time.Second), s.Output)
		}
	}
	t.Logf("ceph: power loss: reprotect took %s, started %s after the restart began", time.Since(rs).Round(time.Second), rs.Sub(restarted).Round(time.Second))
	for _, img := range images {
		if s := e.cli(t, "east", "rbd", "info", "rbd/"+img); !strings.Contains(s, "mirroring primary: false") {
			t.Fatalf("%s on east after the reprotect is not a replica:\n%s", img, s)
		}
	}

	simtest.Eventually(t, 4*time.Minute, "protection from west to record a sync", func() bool {
		ps, err := workflows.ReadProtect(ctx, h.c, "e2e")
		return err == nil && ps.Primary == "west" && ps.LastSync().After(rs)
	})
	stopWatch()
	t.Logf("ceph: power loss: west's ceph-csi on db's replication info after east's restart: %s", answers)

	fb := time.Now()
	fbRes, fbOut := cephRun[workflows.FailbackResult](t, h, e, images, 8*time.Minute, "failback", h.plan, "--to", "east", "--yes")
	allDone(t, fbRes.Progress)
	pausedBeforeDemote(t, fbRes, fbOut)
	t.Logf("ceph: power loss: failback to east took %s", time.Since(fb).Round(time.Second))
	t.Logf("ceph: power loss: all %d of west's acknowledged writes, and east's %d acknowledged before its last sync, are on east", r.acksOnEast(t, eastAcks, lastSync), len(eastAcks)-atRisk)

	waitAcks(t, filepath.Join(dir, "east.acks"), 10)
	t.Logf("ceph: power loss: images byte-identical on both sites: %d bytes compared", r.identicalAfterStop(t))
}

// halfDeadReplica kills west's rbd-mirror while protection runs from
// east: the syncs stop, and protection must say the plan is out of RPO
// because the replica (west) takes no syncs while the primary (east)
// answers, never that east is unreachable. Restarted, the daemon
// brings the plan back within its RPO target with no one's help. On
// ceph-csi, east answers from the kill on that west's status is missing
// (a recorded deviation, read as passing): east answers, west is down or
// restarting.
func halfDeadReplica(t *testing.T, r *cephRig) {
	t.Helper()
	e, h, ctx := r.e, r.h, r.ctx
	blamed := ""
	look := func() *workflows.ProtectState {
		ps, err := workflows.ReadProtect(ctx, h.c, "e2e")
		if err != nil {
			return nil
		}
		if ps.Unreachable != "" && blamed == "" {
			blamed = ps.Unreachable
		}
		return ps
	}
	// The primary answers either with its last sync, which stays, or
	// (ceph-csi) that the replica's status is missing: both name the
	// replica.
	replicaWhy := func(ps *workflows.ProtectState, words string) string {
		for _, g := range []string{"db", "web"} {
			if gh := ps.Groups[g]; gh.OutOfRPO && strings.Contains(gh.Why, "east (the primary) answers") && strings.Contains(gh.Why, words) {
				return g + ": " + gh.Why
			}
		}
		return ""
	}
	e.kill(t, "west", []string{"rbd-mirror"})
	killed := time.Now()
	var why string
	simtest.Eventually(t, 5*time.Minute, "protection to say the replica west takes no syncs", func() bool {
		ps := look()
		if ps == nil {
			return false
		}
		why = replicaWhy(ps, "west (the replica)")
		return why != ""
	})
	out := h.must("status", "e2e")
	if !strings.Contains(out, "west (the replica)") || strings.Contains(out, "PRIMARY east UNREACHABLE") {
		t.Fatalf("drctl status with west's mirror daemon dead does not blame the replica alone:\n%s", out)
	}
	t.Logf("ceph: half-dead replica: west's rbd-mirror killed; out of RPO %s later: %s", time.Since(killed).Round(time.Second), why)

	e.restartDaemons(t, "west", []string{"rbd-mirror"})
	back := time.Now()
	recovering := ""
	simtest.Eventually(t, 6*time.Minute, "protection back within the RPO target with no one's help", func() bool {
		ps := look()
		if ps == nil {
			return false
		}
		if w := replicaWhy(ps, "mirror daemon is down or restarting"); w != "" && recovering == "" {
			recovering = fmt.Sprintf("%s after the restart: %s", time.Since(back).Round(time.Second), w)
		}
		return !ps.OutOfRPO && ps.Unreachable == ""
	})
	if blamed != "" {
		t.Fatalf("protection called the primary east unreachable while west's mirror daemon was down or restarting: %s", blamed)
	}
	if recovering != "" {
		t.Logf("ceph: half-dead replica: meanwhile %s", recovering)
	}
	t.Logf("ceph: half-dead replica: west's rbd-mirror restarted; back within the RPO target %s later, east never called unreachable", time.Since(back).Round(time.Second))
}
