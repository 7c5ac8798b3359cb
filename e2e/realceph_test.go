package e2e_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	enumspb "go.temporal.io/api/enums/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/internal/stack"
	"github.com/drover-dr/drover/workflows"
)

// cephEnv is what scripts/ceph/up.sh wrote about the clusters it brought
// up (STATEDIR/env, KEY=value lines).
type cephEnv map[string]string

func readCephEnv(t *testing.T, path string) cephEnv {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	e := cephEnv{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			e[k] = v
		}
	}
	return e
}

// site is a site's value of key: DROVER_CEPH_<SITE>_<KEY>.
// csiSecrets are the secrets ceph-csi's calls need (its user and key),
// and a secret file in dir holding them, as a plan names it.
func (e cephEnv) csiSecrets(t *testing.T, dir string) (map[string]string, string) {
	t.Helper()
	key, err := os.ReadFile(e["DROVER_CEPH_CSI_KEY_FILE"])
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{"userID": e["DROVER_CEPH_CSI_USER"], "userKey": strings.TrimSpace(string(key))}
	file := filepath.Join(dir, "ceph-csi.secret")
	if err := os.WriteFile(file, []byte(fmt.Sprintf("userID=%s\nuserKey=%s\n", secrets["userID"], secrets["userKey"])), 0o600); err != nil {
		t.Fatal(err)
	}
	return secrets, file
}

func (e cephEnv) site(site, key string) string {
	return e["DROVER_CEPH_"+strings.ToUpper(site)+"_"+key]
}

// cli runs the ceph or rbd CLI as the admin of site's cluster; an error
// ends the test.
func (e cephEnv) cli(t *testing.T, site, tool string, args ...string) string {
	t.Helper()
	out, err := e.try(site, tool, args...)
	if err != nil {
		t.Fatalf("%s %s on %s: %v\n%s", tool, strings.Join(args, " "), site, err, out)
	}
	return out
}

// try runs the ceph or rbd CLI as the admin of site's cluster, within a
// minute: its output, and its standard error after it on failure.
func (e cephEnv) try(site, tool string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, tool, append([]string{"-c", e.site(site, "CONF")}, args...)...).Output()
	if ee, ok := err.(*exec.ExitError); ok {
		out = append(out, ee.Stderr...)
	}
	return string(out), err
}

// appCmd is the shell command that runs the application's script with
// args as a client of site's application user connecting from client's
// address (the client shim), against conf.
func (e cephEnv) appCmd(app, client, conf string, args ...string) string {
	return fmt.Sprintf("env LD_PRELOAD=%s %s=%s /usr/bin/python3 %s %s %s %s-app %s", e["DROVER_CEPH_CLIENT_SHIM"], e["DROVER_CEPH_CLIENT_ADDR_VAR"],
		e.site(client, "APP_ADDR"), app, args[0], conf, client, strings.Join(args[1:], " "))
}

// freeze stops (SIGSTOP) or resumes (SIGCONT) every daemon of site's
// cluster and its ceph-csi: the site is cut off, its processes alive, as
// behind a partition.
func (e cephEnv) freeze(t *testing.T, site string, sig syscall.Signal) {
	t.Helper()
	pids, _ := filepath.Glob(filepath.Join(e["DROVER_CEPH_STATEDIR"], "pids", site+"-*.pid"))
	if len(pids) == 0 {
		t.Fatalf("no daemons of %s recorded", site)
	}
	signalPIDFiles(t, sig, pids)
}

// signalPIDFiles sends sig to the process of each PID file.
func signalPIDFiles(t *testing.T, sig syscall.Signal, files []string) {
	t.Helper()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var pid int
		if _, err := fmt.Sscan(string(b), &pid); err != nil || pid <= 1 {
			t.Fatalf("%s: no pid", f)
		}
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatalf("signal %v to %s (%d): %v", sig, f, pid, err)
		}
	}
}

// resume resumes site's daemons (SIGCONT) and waits until its cluster
// serves again. A cluster stopped whole, as a site that lost power or its
// network, comes back with its placement groups' read leases expired: on
// a one-OSD cluster an op can stay delayed for minutes behind a lease or
// a map that will not come (a PG "laggy", or an unwatch on an image's
// header that holds every later op on it), where a returning site's
// restarted OSDs would peer afresh. resume gives the cluster 20 s, then,
// when an OSD still holds an op older than 15 s or a PG is laggy, marks
// the site's OSDs down so that they re-peer, as an operator would, says
// so, and waits until they are up with no op held.
func (e cephEnv) resume(t *testing.T, site string) {
	t.Helper()
	e.freeze(t, site, syscall.SIGCONT)
	time.Sleep(20 * time.Second)
	osds := strings.Fields(e.cli(t, site, "ceph", "osd", "ls"))
	held := func() []string {
		var out []string
		for _, id := range osds {
			s, err := e.try(site, "ceph", "tell", "osd."+id, "dump_ops_in_flight", "-f", "json")
			if err != nil {
				out = append(out, fmt.Sprintf("osd.%s does not answer: %v", id, err))
				continue
			}
			var d struct {
				Ops []struct {
					Description string  `json:"description"`
					Age         float64 `json:"age"`
				} `json:"ops"`
			}
			if err := cephJSON(s, &d); err != nil {
				t.Fatalf("ceph tell osd.%s dump_ops_in_flight on %s: %v\n%s", id, site, err, s)
			}
			for _, op := range d.Ops {
				if op.Age > 15 {
					out = append(out, fmt.Sprintf("osd.%s holds %s for %.0f s", id, op.Description, op.Age))
				}
			}
		}
		out = append(out, e.laggy(t, site)...)
		return out
	}
	stuck := held()
	if len(stuck) == 0 {
		return
	}
	t.Logf("ceph: %s 20 s after the resume: %s; its OSDs marked down to re-peer", site, strings.Join(stuck, "; "))
	for _, id := range osds {
		e.cli(t, site, "ceph", "osd", "down", id)
	}
	simtest.Eventually(t, 2*time.Minute, site+"'s OSDs up again with no op held", func() bool {
		var d struct {
			OSDs []struct {
				Up int `json:"up"`
			} `json:"osds"`
		}
		s, err := e.try(site, "ceph", "osd", "dump", "-f", "json")
		if err != nil || cephJSON(s, &d) != nil {
			return false
		}
		for _, o := range d.OSDs {
			if o.Up != 1 {
				return false
			}
		}
		return len(held()) == 0
	})
}

// cephJSON decodes the JSON a ceph command printed into v, from its
// first brace (the CLI may print a warning before it).
func cephJSON(out string, v any) error {
	i := strings.Index(out, "{")
	if i < 0 {
		return fmt.Errorf("no JSON in %q", out)
	}
	return json.Unmarshal([]byte(out[i:]), v)
}

// laggy lists the placement groups of site's cluster whose state says
// laggy or wait (ops delayed for a read lease).
func (e cephEnv) laggy(t *testing.T, site string) []string {
	t.Helper()
	out := e.cli(t, site, "ceph", "pg", "dump", "pgs_brief", "-f", "json")
	var d struct {
		PGStats []struct {
			PGID  string `json:"pgid"`
			State string `json:"state"`
		} `json:"pg_stats"`
	}
	if err := cephJSON(out, &d); err != nil {
		t.Fatalf("ceph pg dump on %s: %v\n%s", site, err, out)
	}
	var pgs []string
	for _, pg := range d.PGStats {
		for _, st := range strings.Split(pg.State, "+") {
			if st == "laggy" || st == "wait" {
				pgs = append(pgs, "PG "+pg.PGID+" "+pg.State)
			}
		}
	}
	return pgs
}

// cephRig is one test's plan on the real clusters: two volumes made on
// east, the plan (both sites' ceph-csi, their clients' CIDRs, the
// application as exec hooks that start and stop its writer), and a stack
// (Temporal, worker) running it.
type cephRig struct {
	e            cephEnv
	h            *harness
	ctx          context.Context
	dir, app     string
	secrets      map[string]string
	vols, images map[string]string
	// before are the images ("site:image") on the clusters when the rig
	// started: an earlier test's, which this one's checks leave out.
	before map[string]bool
}

// startCephRig brings up a rig whose volumes' CSI names begin with
// prefix; it skips without real Ceph.
func startCephRig(t *testing.T, prefix string) *cephRig {
	t.Helper()
	envFile := os.Getenv("DROVER_CEPH_ENV")
	if envFile == "" {
		t.Skip("no real Ceph: make e2e-ceph brings it up and sets DROVER_CEPH_ENV")
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	e := readCephEnv(t, envFile)
	dir := t.TempDir()
	secrets, secretFile := e.csiSecrets(t, dir)
	app := filepath.Join(dir, "app.py")
	if err := os.WriteFile(app, []byte(cephApp), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever happened, east runs again, so down.sh can stop it, and
		// no writer outlives the test.
		e.freeze(t, "east", syscall.SIGCONT)
		for _, site := range []string{"east", "west"} {
			_ = exec.Command("sh", "-c", "kill $(cat "+filepath.Join(dir, site+".pid")+") 2>/dev/null").Run()
		}
	})

	// What an earlier test on the same clusters left is not this one's.
	before := map[string]bool{}
	for _, site := range []string{"east", "west"} {
		for _, img := range strings.Fields(e.cli(t, site, "rbd", "ls", "rbd")) {
			before[site+":"+img] = true
		}
	}

	// Two volumes, created as a CO would, through east's CSI controller.
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	t.Cleanup(cancel)
	vols := map[string]string{}
	images := map[string]string{}
	for _, name := range []string{"db", "web"} {
		id := cephCreateVolume(t, ctx, e.site("east", "CSI_ENDPOINT"), prefix+name, e, secrets)
		vols[name] = id
		images[name] = "csi-vol-" + id[len(id)-36:]
	}
	t.Logf("ceph: volumes db %s, web %s (images %s, %s)", vols["db"], vols["web"], images["db"], images["web"])

	// The plan: each site's ceph-csi, its clients' CIDR, the application
	// as exec hooks that start and stop its writer.
	var b strings.Builder
	b.WriteString("apiVersion: drover.dev/v1alpha1\nkind: FailoverPlan\nmetadata: {name: e2e}\nsites:\n")
	for _, site := range []string{"east", "west"} {
		fmt.Fprintf(&b, `  - name: %s
    storage:
      endpoint: %q
      csi: %q
      secret: {file: %q}
      parameters: {clusterID: %s}
      callParameters:
        CreateVolume: {pool: %s, imageFeatures: layering}
        EnableVolumeReplication: {flattenMode: force}
    fence: {cidrs: [%s]}
    orchestrator: {exec: {timeout: 60s}}
`, site, e.site(site, "CSIADDONS_ENDPOINT"), e.site(site, "CSI_ENDPOINT"), secretFile, e["DROVER_CEPH_CLUSTER_ID"], e["DROVER_CEPH_POOL"], e.site(site, "FENCE_CIDR"))
	}
	b.WriteString("volumeGroups:\n")
	for _, name := range []string{"db", "web"} {
		// One priority: the groups' forced resyncs, each a full copy,
		// run side by side.
		fmt.Fprintf(&b, "  - name: %s\n    sites: {east: {volumes: [%s]}, west: {volumes: [%s]}}\n    parameters: {mirroringMode: snapshot, schedulingInterval: 1m}\n",
			name, vols[name], vols[name])
	}
	b.WriteString("workloads:\n  - name: app\n    volumeGroups: [db, web]\n    healthTimeout: 90s\n    sites:\n")
	base := map[string]int{"east": 0, "west": 8192}
	// The writer is given each volume as the hooks see it: the volume a
	// failover to a point in time restored in its place, else the plan's.
	var volArgs []string
	for _, name := range []string{"db", "web"} {
		volArgs = append(volArgs, fmt.Sprintf("${%s:-%s}", workflows.VolumeEnv(vols[name]), vols[name]))
	}
	for _, site := range []string{"east", "west"} {
		pid, ack := filepath.Join(dir, site+".pid"), filepath.Join(dir, site+".acks")
		start := e.appCmd(app, site, e.site(site, "CONF"), append([]string{"write", site, ack, fmt.Sprint(base[site])}, volArgs...)...)
		fmt.Fprintf(&b, "      %s:\n        exec:\n          start: %q\n          stop: %q\n          stopped: %q\n          health: %q\n", site,
			"setsid "+start+" >>"+filepath.Join(dir, site+".out")+" 2>&1 </dev/null & echo $! >"+pid,
			"kill $(cat "+pid+") 2>/dev/null; true",
			"! kill -0 $(cat "+pid+") 2>/dev/null",
			"kill -0 $(cat "+pid+") && grep -q '^ack' "+ack)
		result := filepath.Join(dir, "test-recovery.result")
		fmt.Fprintf(&b, "          testStart: %q\n          testStop: %q\n          testHealth: %q\n",
			e.appCmd(app, site, e.site(site, "CONF"), "check", result)+" 2>>"+filepath.Join(dir, "check.err"), "rm -f "+result, "test -s "+result)
	}
	// Points in time, cut at the primary: ceph-csi cannot snapshot a
	// replica, so each point is a snapshot at the primary made a volume
	// whose mirroring ships it (flattenMode: force above: a volume made
	// of a snapshot is a clone, which RBD mirrors only flattened).
	b.WriteString("policy:\n  parallelism: 2\n  rpoTarget: 2m\n  retry: {initialInterval: 1s, maximumInterval: 15s, timeLimit: 8m}\n  pointsInTime: {every: 1m, keep: 3, cut: primary}\n")
	planFile := filepath.Join(dir, "e2e.yaml")
	if err := os.WriteFile(planFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	layout, err := stack.Free()
	if err != nil {
		t.Fatal(err)
	}
	layout.Sites = nil // the storage is real
	st, err := stack.Start(ctx, stack.Options{Dir: filepath.Join(dir, "run"), Bin: bin, Plan: planFile, Layout: layout, Out: logTo{t}, SQL: sqlBin != ""})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, st: st, dir: dir, plan: st.PlanFile, writers: map[string]*writer{}}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			h.dumpLogs()
			for _, site := range []string{"east", "west"} {
				b, _ := os.ReadFile(e.site(site, "CEPHCSI_LOG"))
				if len(b) > 8000 {
					b = b[len(b)-8000:]
				}
				t.Logf("---- the end of %s's ceph-csi log:\n%s", site, b)
			}
		}
	})
	if h.c, err = st.Client(ctx); err != nil {
		t.Fatal(err)
	}
	return &cephRig{e: e, h: h, ctx: ctx, dir: dir, app: app, secrets: secrets, vols: vols, images: images, before: before}
}

// TestRealCeph runs the whole DR cycle on two real Ceph clusters through
// the real ceph-csi (make e2e-ceph brings them up and names them in
// DROVER_CEPH_ENV): protection that keeps syncing, a drill and a test
// recovery while the application writes, an unplanned failover with
// east cut off (its daemons stopped, alive) and its clients fenced on
// west's cluster, a split brain (east written as primary after the
// failover) that reprotect resolves with a forced resync, and a planned
// failback that loses no acknowledged write and leaves the images
// byte-identical. Every figure is logged as a "ceph:" line.
func TestRealCeph(t *testing.T) {
	protectFor := 5 * time.Minute
	if v := os.Getenv("DROVER_CEPH_PROTECT_FOR"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		protectFor = d
	}
	r := startCephRig(t, "drover-e2e-")
	e, h, ctx, dir, app, secrets, vols, images := r.e, r.h, r.ctx, r.dir, r.app, r.secrets, r.vols, r.images

	// The application runs on east; protection starts.
	started, _ := r.protectFromEast(t)
	t.Logf("ceph: first sync of both volumes %s after protection started", time.Since(started).Round(time.Second))

	// Protection for protectFor: the lag within the 2-minute RPO target
	// throughout, mirror snapshots that keep coming; a drill and a test
	// recovery on the way.
	var maxLag time.Duration
	syncs := map[string]map[time.Time]bool{"db": {}, "web": {}}
	drilled, tested := false, false
	for end := time.Now().Add(protectFor); time.Now().Before(end); {
		ps, err := workflows.ReadProtect(ctx, h.c, "e2e")
		if err != nil {
			t.Fatal(err)
		}
		var lags []string
		for _, g := range []string{"db", "web"} {
			gh := ps.Groups[g]
			lag := time.Since(gh.LastSync)
			maxLag = max(maxLag, lag)
			syncs[g][gh.LastSync] = true
			lags = append(lags, fmt.Sprintf("%s %s (last sync %s)", g, lag.Round(time.Second), gh.LastSync.UTC().Format("15:04:05")))
		}
		status := e.cli(t, "east", "rbd", "mirror", "image", "status", "rbd/"+images["db"])
		t.Logf("ceph: lag at %s: %s; east db: %s", time.Since(started).Round(time.Second), strings.Join(lags, ", "), mirrorState(status))
		if maxLag > 2*time.Minute {
			t.Fatalf("protection let the lag grow to %s, past the 2-minute RPO target", maxLag)
		}
		switch {
		case !drilled:
			out := h.must("drill", h.plan, "--to", "west", "--wait")
			if !strings.Contains(out, "completed") {
				t.Fatalf("the drill of the healthy plan:\n%s", out)
			}
			drilled = true
		case !tested:
			cephTestRecovery(t, h, e, dir)
			tested = true
		default:
			time.Sleep(15 * time.Second)
		}
	}
	for g, s := range syncs {
		if len(s) < int(protectFor/time.Minute)-1 {
			t.Fatalf("%s: %d distinct syncs in %s with a 1-minute schedule: protection does not keep syncing", g, len(s), protectFor)
		}
	}
	t.Logf("ceph: protection for %s: lag at most %s (RPO target 2m), %d and %d distinct syncs of db and web", protectFor, maxLag.Round(time.Second), len(syncs["db"]), len(syncs["web"]))
	cephPoints(t, h, e, vols, r.before)

	// Losing east: its daemons stop answering, its writer hangs.
	ps, err := workflows.ReadProtect(ctx, h.c, "e2e")
	if err != nil {
		t.Fatal(err)
	}
	lastSync := ps.LastSync()
	e.freeze(t, "east", syscall.SIGSTOP)
	lost := time.Now()
	t.Logf("ceph: east cut off at %s, %s after its last sync", lost.UTC().Format("15:04:05"), lost.Sub(lastSync).Round(time.Second))
	cephAction(t, h, "failover", h.plan, "--to", "west", "--yes", "--wait")
	took := time.Since(lost)
	var fo workflows.FailoverResult
	if err := h.c.GetWorkflow(ctx, workflows.ActionID("e2e"), "").Get(ctx, &fo); err != nil {
		t.Fatal(err)
	}
	allDone(t, fo.Progress)
	// The role check read west's answers: ceph-csi refuses replication
	// info on a replica in its own words, which say "not primary".
	for _, s := range fo.Steps {
		if s.Name == "check roles on west" && !strings.Contains(s.Output, "2 of 2 copies asked on west are not primary") {
			t.Fatalf("the failover's role check: %q, want west's two copies read as not primary", s.Output)
		}
	}
	for _, img := range images {
		if s := e.cli(t, "west", "rbd", "info", "rbd/"+img); !strings.Contains(s, "mirroring primary: true") {
			t.Fatalf("%s on west after the failover is not primary:\n%s", img, s)
		}
	}
	bl := e.cli(t, "west", "ceph", "osd", "blocklist", "ls")
	cidr := e.site("east", "FENCE_CIDR")
	addr, bits, _ := strings.Cut(cidr, "/")
	if !strings.Contains(bl, "cidr:"+addr+":0/"+bits) {
		t.Fatalf("west's blocklist does not hold east's clients %s:\n%s", cidr, bl)
	}
	// The fence rejects I/O: an east client cannot write to west's
	// copies, a west client can.
	if out, err := hook(e.appCmd(app, "east", e.site("west", "CONF"), "mark", images["db"], "67100672", "east-after-fence")); err == nil {
		t.Fatalf("an east client wrote to west's primary through the fence:\n%s", out)
	}
	if out, err := hook(e.appCmd(app, "west", e.site("west", "CONF"), "mark", images["db"], "67100672", "west-after-failover")); err != nil {
		t.Fatalf("a west client cannot write to west's primary: %v\n%s", err, out)
	}
	eastAcks, eastErrs := cephAcks(t, filepath.Join(dir, "east.acks"))
	atRisk := 0
	for _, a := range eastAcks {
		if a.At.After(lastSync) {
			atRisk++
		}
	}
	t.Logf("ceph: failover to west: RTO %s (the action), %s from the loss; RPO %s (east's last sync before the loss); "+
		"%d of east's %d acknowledged writes came after it; fence read back on west: %s", fo.RTO.Round(time.Millisecond), took.Round(time.Second),
		lost.Sub(lastSync).Round(time.Second), atRisk, len(eastAcks), strings.TrimSpace(grepLine(bl, "cidr:")))
	_ = eastErrs
	waitAcks(t, filepath.Join(dir, "west.acks"), 10)

	// The plan runs on west with no replica: protection follows the
	// record to west and says the plan is unprotected, where it would
	// poll the lost, fenced east as the primary, out of RPO.
	simtest.Eventually(t, time.Minute, "protection to follow west and name the plan unprotected", func() bool {
		ps, err := workflows.ReadProtect(ctx, h.c, "e2e")
		return err == nil && ps.Primary == "west" && ps.Unprotected != nil && ps.Unprotected.Lost == "east"
	})
	if out := h.must("status", "e2e"); !strings.Contains(out, "UNPROTECTED") {
		t.Fatalf("drctl status after the failover does not say the plan is unprotected:\n%s", out)
	}
	t.Log("ceph: after the failover, protection follows west and drctl status names the plan unprotected")

	// East returns with its copies still primary and is written as
	// primary: a split brain. Reprotect discards east's side.
	e.resume(t, "east")
	splitOff := "67104768" // the images' last block, outside the writers'
	// A cluster resumed after a stop needs a few seconds before it
	// answers again (its monitor's lease, its OSD's heartbeats).
	simtest.Eventually(t, 2*time.Minute, "east, back, to take a write as primary", func() bool {
		_, err := hook(e.appCmd(app, "east", e.site("east", "CONF"), "mark", images["db"], splitOff, "split-brain-on-east"))
		return err == nil
	})
	t.Log("ceph: split brain: east's db written as primary after the failover")
	rs := time.Now()
	h.must("reprotect", h.plan, "--yes")
	e.observe(t, h, workflows.ActionID("e2e"), 10*time.Minute, images)
	out := cephAction(t, h, "watch", "e2e")
	t.Logf("ceph: reprotect took %s", time.Since(rs).Round(time.Second))
	var rp workflows.ReprotectResult
	if err := h.c.GetWorkflow(ctx, workflows.ActionID("e2e"), "").Get(ctx, &rp); err != nil {
		t.Fatal(err)
	}
	allDone(t, rp.Progress)
	discarded := ""
	for _, s := range rp.Steps {
		if strings.HasPrefix(s.Name, "resync db") {
			discarded = s.Output
		}
	}
	if !strings.Contains(discarded, "forced resync") || !strings.Contains(discarded, "discarded") {
		t.Fatalf("reprotect does not record the discarded side:\n%s", out)
	}
	t.Logf("ceph: reprotect's resync of db: %s", discarded)
	for _, img := range images {
		if s := e.cli(t, "east", "rbd", "info", "rbd/"+img); !strings.Contains(s, "mirroring primary: false") {
			t.Fatalf("%s on east after reprotect is not a replica:\n%s", img, s)
		}
	}
	if bl := e.cli(t, "west", "ceph", "osd", "blocklist", "ls"); strings.Contains(bl, "cidr:"+addr) {
		t.Fatalf("reprotect left east's clients fenced on west:\n%s", bl)
	}
	simtest.Eventually(t, 3*time.Minute, "east's db to hold west's copy, not its own split-brain write", func() bool {
		b := export(t, e, "east", images["db"])
		return !bytes.HasPrefix(b[67104768:], []byte("split-brain-on-east")) && bytes.HasPrefix(b[67100672:], []byte("west-after-failover"))
	})
	t.Log("ceph: east's split-brain write is gone from east's copy; it holds west's")

	// A planned failback: no acknowledged write lost, then the images
	// byte-identical.
	simtest.Eventually(t, 3*time.Minute, "protection from west to record a sync", func() bool {
		ps, err := workflows.ReadProtect(ctx, h.c, "e2e")
		return err == nil && ps.Primary == "west" && ps.LastSync().After(rs)
	})
	fb := time.Now()
	h.must("failback", h.plan, "--to", "east", "--yes")
	e.observe(t, h, workflows.ActionID("e2e"), 6*time.Minute, images)
	fbOut := cephAction(t, h, "watch", "e2e")
	t.Logf("ceph: failback to east took %s", time.Since(fb).Round(time.Second))
	// The old primary follows the new one: each resync of west ended on
	// east's word that it shipped west a sync of its own lineage.
	var fbRes workflows.FailbackResult
	if err := h.c.GetWorkflow(ctx, workflows.ActionID("e2e"), "").Get(ctx, &fbRes); err != nil {
		t.Fatal(err)
	}
	resyncs := 0
	for _, s := range fbRes.Steps {
		if strings.HasPrefix(s.Name, "resync ") {
			resyncs++
			if !strings.Contains(s.Output, "east shipped") {
				t.Fatalf("the failback's %s did not end on a sync from east:\n%s", s.Name, fbOut)
			}
		}
	}
	if resyncs != 2 {
		t.Fatalf("the failback resynced %d groups on west, want 2:\n%s", resyncs, fbOut)
	}
	pausedBeforeDemote(t, fbRes, fbOut)
	t.Logf("ceph: failback: all %d of west's acknowledged writes, and east's %d acknowledged before its last sync, are on east", r.acksOnEast(t, eastAcks, lastSync), len(eastAcks)-atRisk)

	waitAcks(t, filepath.Join(dir, "east.acks"), 10)
	t.Logf("ceph: images byte-identical on both sites: %d bytes compared", r.identicalAfterStop(t))

	cephPointStory(t, ctx, h, e, dir, app, images, secrets)
}

// protectFromEast starts the application's writer on east and protection
// from east, and waits for protection to record a sync of both volumes:
// when protection started, and that sync.
func (r *cephRig) protectFromEast(t *testing.T) (started, first time.Time) {
	t.Helper()
	e, h := r.e, r.h
	runHook(t, e.appCmd(r.app, "east", e.site("east", "CONF"), "write", "east", filepath.Join(r.dir, "east.acks"), "0", r.images["db"], r.images["web"]),
		filepath.Join(r.dir, "east"))
	h.must("protect", "start", h.plan, "--primary", "east", "--interval", "5s")
	started = time.Now()
	simtest.Eventually(t, 3*time.Minute, "protection to record a sync of both volumes", func() bool {
		ps, err := workflows.ReadProtect(r.ctx, h.c, "e2e")
		if err == nil && ps != nil && len(ps.Groups) == 2 && !ps.LastSync().IsZero() {
			first = ps.LastSync()
			return true
		}
		return false
	})
	return started, first
}

// acksOnEast checks, after a failback to east, that east holds every
// write west's writer acknowledged and every one of eastAcks made before
// lastSync; it returns how many west's were.
func (r *cephRig) acksOnEast(t *testing.T, eastAcks []cephAck, lastSync time.Time) int {
	t.Helper()
	westAcks, _ := cephAcks(t, filepath.Join(r.dir, "west.acks"))
	checkAcks(t, r.e, "east", "west", westAcks, time.Time{})
	checkAcks(t, r.e, "east", "east", eastAcks, lastSync)
	return len(westAcks)
}

// identicalAfterStop stops east's writer, waits for a sync from east
// begun after it, and compares each image on both sites byte for byte:
// the bytes compared.
func (r *cephRig) identicalAfterStop(t *testing.T) int64 {
	t.Helper()
	e := r.e
	runHook(t, "kill $(cat "+filepath.Join(r.dir, "east.pid")+")", "")
	stopped := time.Now()
	simtest.Eventually(t, 3*time.Minute, "a sync from east begun after its writer stopped", func() bool {
		time.Sleep(time.Second) // ceph-csi holds a volume's lock while it answers
		for _, name := range []string{"db", "web"} {
			if !lastSyncAfter(t, e, r.secrets, r.vols[name], stopped) {
				return false
			}
		}
		return true
	})
	var compared int64
	for _, img := range r.images {
		a, n := exportSum(t, e, "east", img)
		b, _ := exportSum(t, e, "west", img)
		if a != b {
			t.Fatalf("%s differs between east (%s) and west (%s) after the final sync", img, a, b)
		}
		compared += n
	}
	return compared
}

// runHook runs a shell command as a hook would, in the background when
// pidPrefix names where its pid goes.
func runHook(t *testing.T, cmd, pidPrefix string) {
	t.Helper()
	if pidPrefix != "" {
		cmd = "setsid " + cmd + " >>" + pidPrefix + ".out 2>&1 </dev/null & echo $! >" + pidPrefix + ".pid"
	}
	if out, err := hook(cmd); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
}

func hook(cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sh", "-c", cmd).CombinedOutput()
	return string(out), err
}

func grepLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// mirrorState is the peer's state in rbd mirror image status: its
// state and the time of the last snapshot it holds.
func mirrorState(status string) string {
	var parts []string
	for _, l := range strings.Split(status, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "state:"):
			parts = append(parts, strings.Join(strings.Fields(l), " "))
		case strings.Contains(l, "local_snapshot_timestamp"):
			if _, v, ok := strings.Cut(l, `"local_snapshot_timestamp":`); ok {
				if sec, err := strconv.ParseInt(strings.SplitN(v, ",", 2)[0], 10, 64); err == nil {
					parts = append(parts, "peer snapshot "+time.Unix(sec, 0).UTC().Format("15:04:05"))
				}
			}
		}
	}
	return strings.Join(parts, ", ")
}

// waitAcks waits for n more acknowledged writes in a writer's log.
func waitAcks(t *testing.T, path string, n int) {
	t.Helper()
	from, _ := cephAcks(t, path)
	simtest.Eventually(t, 2*time.Minute, fmt.Sprintf("%d more writes acknowledged in %s", n, filepath.Base(path)), func() bool {
		acks, _ := cephAcks(t, path)
		return len(acks) >= len(from)+n
	})
}

// export reads a whole image of site's cluster.
func export(t *testing.T, e cephEnv, site, image string) []byte {
	t.Helper()
	f := filepath.Join(t.TempDir(), image)
	e.cli(t, site, "rbd", "export", "--no-progress", "rbd/"+image, f)
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func exportSum(t *testing.T, e cephEnv, site, image string) (string, int64) {
	t.Helper()
	b := export(t, e, site, image)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), int64(len(b))
}

// checkAcks fails the test unless every write writer acknowledged (before
// until, when set) is intact on site's images.
func checkAcks(t *testing.T, e cephEnv, site, writer string, acks []cephAck, until time.Time) {
	t.Helper()
	checkAcksAt(t, e, site, writer, nil, acks, until)
}

// lastSyncAfter asks east's ceph-csi whether vol's last sync began after t0.
func lastSyncAfter(t *testing.T, e cephEnv, secrets map[string]string, vol string, t0 time.Time) bool {
	t.Helper()
	conn, err := grpc.NewClient(e.site("east", "CSIADDONS_ENDPOINT"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := replication.NewControllerClient(conn).GetVolumeReplicationInfo(ctx, &replication.GetVolumeReplicationInfoRequest{
		VolumeId: vol, Secrets: secrets, ReplicationSource: &replication.ReplicationSource{Type: &replication.ReplicationSource_Volume{
			Volume: &replication.ReplicationSource_VolumeSource{VolumeId: vol}}}})
	return err == nil && r.GetLastSyncTime().AsTime().After(t0)
}

// cephCreateVolume creates a 64 MiB volume through a CSI controller.
func cephCreateVolume(t *testing.T, ctx context.Context, endpoint, name string, e cephEnv, secrets map[string]string) string {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := csi.NewControllerClient(conn).CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name:          name,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 64 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}},
		Parameters: map[string]string{"clusterID": e["DROVER_CEPH_CLUSTER_ID"], "pool": e["DROVER_CEPH_POOL"], "imageFeatures": "layering"},
		Secrets:    secrets,
	})
	if err != nil {
		t.Fatalf("CreateVolume %s: %v", name, err)
	}
	return r.GetVolume().GetVolumeId()
}

// within tells whether every entry of a listing is in another: nothing
// was left behind (what was there may have gone: a pruned point's
// trash).
func within(after, before []string) bool {
	for _, x := range after {
		if !slices.Contains(before, x) {
			return false
		}
	}
	return true
}

// cephTestRecovery runs a test recovery while east writes. At west,
// ceph-csi cannot snapshot the replicas (a non-primary image is read
// only): the recovery pauses at its first snapshot, naming the recorded
// deviation, and an abort leaves nothing behind. At east it runs on
// snapshots and clones of the images, the test workload reads them, and
// its cleanup leaves nothing behind either.
func cephTestRecovery(t *testing.T, h *harness, e cephEnv, dir string) {
	t.Helper()
	// What a site's pool holds, but the points in time's images, which
	// protection cuts and prunes meanwhile (those of the points listed
	// at the first listing or now).
	seen := pointImages(nil)
	listing := func(site string) []string {
		points, _ := readPoints(t, h)
		for img := range pointImages(points) {
			seen[img] = true
		}
		var out []string
		for _, l := range strings.Fields(e.cli(t, site, "rbd", "ls", "rbd")) {
			if seen[l] {
				continue
			}
			out = append(out, l)
			for _, s := range strings.Split(strings.TrimSpace(e.cli(t, site, "rbd", "snap", "ls", "--all", "rbd/"+l)), "\n") {
				if f := strings.Fields(s); len(f) > 1 && f[0] != "SNAPID" && !strings.Contains(s, "mirror") {
					out = append(out, l+"@"+f[1])
				}
			}
		}
		for _, l := range strings.Split(strings.TrimSpace(e.cli(t, site, "rbd", "trash", "ls", "rbd")), "\n") {
			if f := strings.Fields(l); len(f) > 1 && !seen[f[1]] {
				out = append(out, f...)
			}
		}
		slices.Sort(out)
		return out
	}
	id := workflows.TestRecoveryID("e2e")
	before := listing("west")
	h.must("test-recovery", h.plan, "--at", "west")
	_, paused := settled(t, h, id, 2*time.Minute, "the test recovery at west to pause at its snapshot")
	if !strings.Contains(paused, "ceph-csi/snapshot-replica-read-only") {
		t.Fatalf("the test recovery at west paused on %q, want the recorded deviation", paused)
	}
	h.must("resolve", id, "--abort", "--yes")
	h.drctl("watch", id)
	if after := listing("west"); !within(after, before) {
		t.Fatalf("the aborted test recovery left something on west: before %v, after %v", before, after)
	}
	t.Logf("ceph: test recovery at west: paused as recorded (%s), aborted, nothing left", paused)

	before = listing("east")
	start := time.Now()
	h.must("test-recovery", h.plan, "--at", "east")
	result := filepath.Join(dir, "test-recovery.result")
	state, failed := settled(t, h, id, 5*time.Minute, "the test workloads to run on the copies")
	if state != workflows.StateWaiting {
		res, _ := os.ReadFile(result)
		errs, _ := os.ReadFile(filepath.Join(dir, "check.err"))
		t.Fatalf("the test recovery at east stopped at %s\n%s%s", failed, res, errs)
	}
	res, _ := os.ReadFile(result)
	during := listing("east")
	h.must("approve", id, "--yes")
	out := h.must("watch", id)
	if !strings.Contains(out, "every copy and snapshot deleted") {
		t.Fatalf("the test recovery's end:\n%s", out)
	}
	// ceph-csi deletes through the trash and the manager's tasks: what a
	// delete moved there goes within a while.
	var after []string
	deleted := time.Now()
	simtest.Eventually(t, 3*time.Minute, "the test recovery's images, snapshots and trash to be gone from east", func() bool {
		after = listing("east")
		if !within(after, before) {
			t.Logf("left on east %s after the cleanup: %v", time.Since(deleted).Round(time.Second), after)
			time.Sleep(5 * time.Second)
			return false
		}
		return true
	})
	t.Logf("ceph: test recovery at east: %s; %d images and snapshots while it ran, %d before and after (the trash empty %s after the cleanup); %s",
		strings.TrimSpace(string(res)), len(during), len(after), time.Since(deleted).Round(time.Second), time.Since(start).Round(time.Second))
}

// allDone fails the test unless every step of an action is done.
func allDone(t *testing.T, p workflows.Progress) {
	t.Helper()
	for _, s := range p.Steps {
		if s.State != workflows.StateDone {
			t.Fatalf("%s: step %q is %s (%s)", p.Action, s.Name, s.State, s.LastError)
		}
	}
}

// cephAction runs drctl for an action on real Ceph, which may take
// minutes (a forced resync re-copies the image), and fails the test
// unless it exits 0.
func cephAction(t *testing.T, h *harness, args ...string) string {
	t.Helper()
	out, code := h.drctlWithin(10*time.Minute, args...)
	if code != 0 {
		t.Fatalf("drctl %s exited %d:\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// observe waits, within limit, for the action running as workflow id to
// end. A step that pauses or fails ends the test there, with what each
// site's storage says of the images (their snapshots, mirror status and
// info) and the end of each site's ceph-csi and rbd-mirror logs: the
// evidence a pause on real storage needs, taken while it holds.
func (e cephEnv) observe(t *testing.T, h *harness, id string, limit time.Duration, images map[string]string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for ; time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d, err := h.c.DescribeWorkflowExecution(ctx, id, "")
		var p workflows.Progress
		if err == nil {
			if v, qerr := h.c.QueryWorkflow(ctx, id, "", "progress"); qerr == nil {
				_ = v.Get(&p)
			}
		}
		cancel()
		if err != nil {
			continue
		}
		if d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return
		}
		for _, s := range p.Steps {
			if s.State == workflows.StatePaused || s.State == workflows.StateFailed {
				t.Fatalf("%s: step %q %s: %s\n%s", id, s.Name, s.State, s.LastError, e.evidence(images))
			}
		}
	}
	t.Fatalf("%s did not end within %s\n%s", id, limit, e.evidence(images))
}

// evidence is what both sites' storage says of the images, and the end of
// their ceph-csi and rbd-mirror logs.
func (e cephEnv) evidence(images map[string]string) string {
	var b strings.Builder
	run := func(site, tool string, args ...string) {
		out, err := e.try(site, tool, args...)
		fmt.Fprintf(&b, "---- %s: %s %s (%v)\n%s", site, tool, strings.Join(args, " "), err, out)
	}
	tail := func(what, file string, n int) {
		data, err := os.ReadFile(file)
		lines := strings.Split(string(data), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		fmt.Fprintf(&b, "---- the end of %s (%v)\n%s\n", what, err, strings.Join(lines, "\n"))
	}
	for _, site := range []string{"east", "west"} {
		for _, img := range images {
			run(site, "rbd", "snap", "ls", "--all", "rbd/"+img)
			run(site, "rbd", "mirror", "image", "status", "rbd/"+img)
		}
		tail(site+"'s ceph-csi log", e.site(site, "CEPHCSI_LOG"), 120)
		tail(site+"'s rbd-mirror log", filepath.Join(e["DROVER_CEPH_STATEDIR"], site, "log", "client.rbd-mirror.local.log"), 80)
	}
	return b.String()
}

// settled waits until a step of run id waits for the operator's word
// (its gate), pauses or fails: that step's state and its name and error.
func settled(t *testing.T, h *harness, id string, limit time.Duration, what string) (string, string) {
	t.Helper()
	var state string
	var detail string
	simtest.Eventually(t, limit, what, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		v, err := h.c.QueryWorkflow(ctx, id, "", "progress")
		if err != nil {
			return false
		}
		var p workflows.Progress
		if v.Get(&p) != nil {
			return false
		}
		for _, s := range p.Steps {
			switch s.State {
			case workflows.StateWaiting, workflows.StatePaused, workflows.StateFailed:
				state, detail = s.State, s.Name+": "+s.LastError
				return true
			}
		}
		return false
	})
	return state, detail
}

// pausedBeforeDemote fails t unless the failback (res, as drctl watch
// showed it: out) paused protection's points, done, before its first
// demotion began: protection cut points at the primary it demoted.
func pausedBeforeDemote(t *testing.T, res workflows.FailbackResult, out string) {
	t.Helper()
	p := slices.IndexFunc(res.Steps, func(s *workflows.Step) bool { return s.Kind() == workflows.KindPausePoints })
	d := slices.IndexFunc(res.Steps, func(s *workflows.Step) bool { return s.Kind() == workflows.StepKind(workflows.OpDemote) })
	if p < 0 || d < 0 || res.Steps[p].State != workflows.StateDone || res.Steps[d].Start.Before(res.Steps[p].End) {
		t.Fatalf("the failback did not pause protection's points before it demoted:\n%s", out)
	}
	t.Logf("ceph: failback: %s: %s; the demotion began %v after it", res.Steps[p].Name, res.Steps[p].Output,
		res.Steps[d].Start.Sub(res.Steps[p].End).Round(time.Millisecond))
}
