package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/conformance"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/internal/testpki"
	"github.com/drover-dr/drover/sim"
)

// simPair is two peered drover-sim processes: east holds the primary
// copies of vol-1 and vg-0001, west the secondary ones.
type simPair struct {
	east, west         string // unix:// endpoints
	eastCtl, westCtl   string
	eastData, westData string
}

func startSimPair(t *testing.T, bins, driver string, extra ...string) simPair {
	t.Helper()
	dir := simtest.SockDir(t)
	return startSimPairAt(t, bins, driver, "unix://"+filepath.Join(dir, "east.sock"), "unix://"+filepath.Join(dir, "west.sock"), extra...)
}

// startSimPairAt serves the pair's CSI-Addons endpoints at the given
// addresses (unix:// or host:port).
func startSimPairAt(t *testing.T, bins, driver, eastGRPC, westGRPC string, extra ...string) simPair {
	t.Helper()
	eastData, westData := simtest.FreeAddr(t), simtest.FreeAddr(t)
	p := simPair{east: eastGRPC, west: westGRPC, eastCtl: simtest.FreeAddr(t), westCtl: simtest.FreeAddr(t), eastData: eastData, westData: westData}
	start := func(name, grpcAddr, data, peer, ctl string, primary bool) {
		args := []string{"--driver", driver, "--name", name, "--grpc", grpcAddr, "--data", data, "--peer", peer,
			"--control", ctl, "--groups", "1", "--volume", "vol-1", "--interval", "100ms", "--log-level", "warn"}
		if primary {
			args = append(args, "--primary")
		}
		if driver == sim.DriverCephCSI {
			args = append(args, "--schedule-minute", cephMinute.String())
		}
		args = append(args, extra...)
		bintest.Start(t, nil, filepath.Join(bins, "drover-sim"), args...)
	}
	start("east", p.east, eastData, westData, p.eastCtl, true)
	start("west", p.west, westData, eastData, p.westCtl, false)
	for _, s := range []string{p.east, p.west} {
		simtest.Eventually(t, 20*time.Second, "endpoint "+s, func() bool {
			if path, ok := strings.CutPrefix(s, "unix://"); ok {
				_, err := os.Stat(path)
				return err == nil
			}
			c, err := net.DialTimeout("tcp", s, time.Second)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
	}
	return p
}

// cephParams are values a real ceph-csi accepts: a clusterID for its fence
// calls, and snapshot mirroring on ceph-csi's shortest schedule, as the
// suite's run against real ceph-csi asks. The ceph-csi profile, as
// ceph-csi, ships a primary's changes only on the schedule PromoteVolume
// adds (besides the snapshots enable, promote and a resync take): without
// one, no sync newer than the last comes, and a resync of a copy that a
// forced resync already re-created never shows it follows.
var cephParams = []string{"--param", "clusterID=rook-ceph", "--param", "mirroringMode=snapshot", "--param", "schedulingInterval=1m"}

// cephMinute is how long a minute of schedule lasts on the ceph-csi sites
// of these tests: their "1m" takes a mirror snapshot every second.
const cephMinute = time.Second

type conformanceRun struct {
	code   int
	report conformance.Report
	stdout string
	stderr string
}

func runConformance(t *testing.T, bins string, p simPair, extra ...string) conformanceRun {
	t.Helper()
	args := append([]string{"conformance", "-o", "json", "--endpoint", p.east, "--peer-endpoint", p.west,
		"--volume", "vol-1", "--group", "vg-0001", "--timeout", "10s", "--sync-timeout", "30s"}, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bins, "drctl"), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := conformanceRun{code: bintest.ExitCode(err), stdout: out.String(), stderr: errb.String()}
	if r.code == 0 || r.code == 1 {
		if jerr := json.Unmarshal(out.Bytes(), &r.report); jerr != nil {
			t.Fatalf("drctl %v: exit %d, output is not a report: %v\n%s\n%s", args, r.code, jerr, out.String(), errb.String())
		}
	}
	return r
}

func (r conformanceRun) with(s conformance.Status) []string {
	var ids []string
	for _, c := range r.report.Results {
		if c.Status == s {
			ids = append(ids, c.ID)
		}
	}
	sort.Strings(ids)
	return ids
}

func (r conformanceRun) result(id string) conformance.Result {
	for _, c := range r.report.Results {
		if c.ID == id {
			return c
		}
	}
	return conformance.Result{}
}

func TestConformanceAgainstSimulator(t *testing.T) {
	if testing.Short() {
		t.Skip("runs drover-sim processes")
	}
	bins := bintest.Build(t, "drctl", "drover-sim")

	t.Run("spec profile passes", func(t *testing.T) {
		p := startSimPair(t, bins, sim.DriverSpec)
		junit := filepath.Join(t.TempDir(), "conformance.xml")
		r := runConformance(t, bins, p, append([]string{"--junit", junit}, simHooks(t, p)...)...)
		if r.code != 0 {
			t.Fatalf("exit %d, failed: %v\n%s", r.code, r.with(conformance.Fail), r.stderr)
		}
		if skipped := r.with(conformance.Skip); len(skipped) > 0 {
			t.Errorf("the spec profile serves every RPC, yet checks skipped: %v", skipped)
		}
		for _, id := range []string{"replication/volume/destination-info", "replication/group/destination-info", "fence/list", "fence/get-clients", "replication/group/promote-force"} {
			if got := r.result(id); got.Status != conformance.Pass || got.Spec == "" {
				t.Errorf("%s: %+v, want a pass that cites its spec", id, got)
			}
		}
		if len(r.report.Results) < 50 {
			t.Errorf("only %d checks ran", len(r.report.Results))
		}
		// The JUnit file says the same.
		raw, err := os.ReadFile(junit)
		if err != nil {
			t.Fatal(err)
		}
		var js struct {
			Suites []struct {
				Tests    int `xml:"tests,attr"`
				Failures int `xml:"failures,attr"`
			} `xml:"testsuite"`
		}
		if err := xml.Unmarshal(raw, &js); err != nil || len(js.Suites) != 1 {
			t.Fatalf("junit: %v\n%s", err, raw)
		}
		if js.Suites[0].Tests != len(r.report.Results) || js.Suites[0].Failures != 0 {
			t.Errorf("junit: %d tests, %d failures; want %d, 0", js.Suites[0].Tests, js.Suites[0].Failures, len(r.report.Results))
		}
		// Left as found: replication off on both sites, east primary, no fence.
		assertLeftAsFound(t, p)
		if len(r.report.Unchecked) != 0 {
			t.Errorf("a run with every hook left rules unchecked: %q", r.report.Unchecked)
		}
		// And a second run, without hooks, passes as well, and lists
		// what it did not check; with --require-hooks those fail.
		hooked := []string{"replication/group/diverge-write", "replication/group/info-link-down", "replication/group/promote-unforced-peer-unreachable-refused",
			"replication/group/promote-unforced-diverged-refused", "replication/group/resync-force-link-down", "replication/group/promote-before-final-sync-refused",
			"replication/volume/diverge-write", "replication/volume/info-link-down", "replication/volume/promote-unforced-peer-unreachable-refused",
			"replication/volume/promote-unforced-diverged-refused", "replication/volume/resync-force-link-down", "replication/volume/promote-before-final-sync-refused"}
		sort.Strings(hooked)
		r2 := runConformance(t, bins, p)
		if r2.code != 0 {
			t.Fatalf("second run: exit %d, failed %v", r2.code, r2.with(conformance.Fail))
		}
		var unchecked []string
		for _, u := range r2.report.Unchecked {
			id, _, _ := strings.Cut(u, ": ")
			unchecked = append(unchecked, id)
		}
		sort.Strings(unchecked)
		if !slices.Equal(unchecked, hooked) {
			t.Fatalf("a run without hooks lists as not checked %q, want %v", r2.report.Unchecked, hooked)
		}
		r3 := runConformance(t, bins, p, "--require-hooks")
		if got := r3.with(conformance.Fail); r3.code != 1 || !slices.Equal(got, hooked) {
			t.Fatalf("--require-hooks without hooks: exit %d, failed %v; want 1 and %v", r3.code, got, hooked)
		}
	})

	t.Run("ceph-csi profile passes with its known deviations", func(t *testing.T) {
		p := startSimPair(t, bins, sim.DriverCephCSI, "--volume", cephVolume)
		r := runConformance(t, bins, p, append(append(slices.Clone(cephParams), "--volume", cephVolume), simHooks(t, p)...)...)
		if r.code != 0 {
			t.Fatalf("exit %d, failed: %v", r.code, r.with(conformance.Fail))
		}
		if r.report.Driver != sim.CephCSIDriverName {
			t.Errorf("driver %q, want %q", r.report.Driver, sim.CephCSIDriverName)
		}
		for _, id := range []string{"replication/volume/resync-primary-refused", "replication/group/info-secondary-refused", "fence/invalid-cidr-refused"} {
			if d := r.result(id).Detail; !strings.Contains(d, "a recorded deviation of rbd.csi.ceph.com") || !strings.Contains(d, "internal/csi-addons/rbd/") {
				t.Errorf("%s: %q, want the ceph-csi deviation cited", id, d)
			}
		}
		wantSkip := []string{"fence/get-clients", "fence/list", "replication/group/destination-info", "replication/volume/destination-info"}
		if got := r.with(conformance.Skip); !slices.Equal(got, wantSkip) {
			t.Errorf("skipped %v, want %v", got, wantSkip)
		}
		assertLeftAsFound(t, p)
	})

	// Each break makes the simulator break one rule; the suite must fail
	// exactly the checks that enforce it.
	breaks := []struct {
		driver, brk string
		params      []string
		want        []string
	}{
		{sim.DriverSpec, "nonidempotent:EnableVolumeReplication", nil,
			[]string{"replication/group/enable-idempotent", "replication/volume/enable-idempotent"}},
		{sim.DriverSpec, "nonidempotent:PromoteVolume", nil,
			[]string{"replication/group/promote-idempotent", "replication/volume/promote-idempotent"}},
		{sim.DriverSpec, "nonidempotent:DisableVolumeReplication", nil,
			[]string{"replication/group/disable-idempotent", "replication/volume/disable-idempotent"}},
		{sim.DriverSpec, "noop:PromoteVolume", nil,
			[]string{"replication/group/promote-unforced-refused", "replication/group/unknown-id/PromoteVolume",
				"replication/volume/promote-unforced-refused", "replication/volume/unknown-id/PromoteVolume"}},
		{sim.DriverSpec, "nonidempotent:FenceClusterNetwork", nil, []string{"fence/fence-idempotent"}},
		{sim.DriverSpec, "nonidempotent:UnfenceClusterNetwork", nil, []string{"fence/unfence-idempotent"}},
		{sim.DriverSpec, "ignoreforce:DemoteVolume", nil,
			[]string{"replication/group/demote-force", "replication/volume/demote-force"}},
		{sim.DriverSpec, "wrongcode:ResyncVolume:INTERNAL", nil,
			[]string{"replication/group/resync-primary-refused", "replication/group/unknown-id/ResyncVolume",
				"replication/volume/resync-primary-refused", "replication/volume/unknown-id/ResyncVolume"}},
		{sim.DriverSpec, "ignoreforce:PromoteVolume", nil,
			[]string{"replication/group/promote-force", "replication/volume/promote-force"}},
		{sim.DriverSpec, "keepfence", nil, []string{"fence/unfence", "fence/unfence-several"}},
		{sim.DriverSpec, "noop:DemoteVolume", nil, []string{"replication/group/demote", "replication/group/unknown-id/DemoteVolume",
			"replication/volume/demote", "replication/volume/unknown-id/DemoteVolume"}},
		{sim.DriverSpec, "wrongcode:FenceClusterNetwork:INTERNAL", nil,
			[]string{"fence/empty-cidrs-refused", "fence/invalid-cidr-refused"}},
		{sim.DriverCephCSI, "nonidempotent:DemoteVolume", cephParams,
			[]string{"replication/group/demote-idempotent", "replication/volume/demote-idempotent"}},
		{sim.DriverCephCSI, "wrongcode:ResyncVolume:UNKNOWN", cephParams,
			[]string{"replication/group/resync-primary-refused", "replication/group/unknown-id/ResyncVolume",
				"replication/volume/resync-primary-refused", "replication/volume/unknown-id/ResyncVolume"}},
	}
	for _, b := range breaks {
		t.Run(b.driver+" "+b.brk+" is caught", func(t *testing.T) {
			// Each on a pair of its own, mostly waiting on the sites: two
			// at a time, once the subtests above have run.
			t.Parallel()
			sims, params := []string{"--break", b.brk}, b.params
			if b.driver == sim.DriverCephCSI {
				// A scratch volume in ceph-csi's format, so that the
				// suite's unknown IDs are well formed: ceph-csi answers
				// INTERNAL for an ID it cannot decode.
				sims = append(sims, "--volume", cephVolume)
				params = append(slices.Clone(params), "--volume", cephVolume)
			}
			p := startSimPair(t, bins, b.driver, sims...)
			r := runConformance(t, bins, p, params...)
			if r.code != 1 {
				t.Fatalf("exit %d, want 1 (a check failed)\n%s", r.code, r.stderr)
			}
			if got := r.with(conformance.Fail); !slices.Equal(got, b.want) {
				for _, id := range got {
					t.Logf("%s: %s", id, r.result(id).Detail)
				}
				t.Fatalf("failed %v, want exactly %v", got, b.want)
			}
		})
	}

	t.Run("a plan's sites give the endpoints", func(t *testing.T) {
		p := startSimPair(t, bins, sim.DriverCephCSI, "--secret", "userID=csi-rbd", "--secret", "userKey=k3y", "--volume", cephVolume)
		dir := t.TempDir()
		secret := filepath.Join(dir, "ceph-secret")
		if err := os.WriteFile(secret, []byte("userID=csi-rbd\nuserKey=k3y\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		plan := filepath.Join(dir, "plan.yaml")
		var b strings.Builder
		b.WriteString("apiVersion: drover.dev/v1alpha1\nkind: FailoverPlan\nmetadata: {name: conf}\nsites:\n")
		for _, s := range []struct{ name, ep, client string }{{"east", p.east, "127.0.0.2"}, {"west", p.west, "127.0.0.3"}} {
			b.WriteString("  - name: " + s.name + "\n    storage: {endpoint: \"" + s.ep + "\", secret: {file: " + secret +
				"}, parameters: {clusterID: rook-ceph, mirroringMode: snapshot, schedulingInterval: 1m}}\n    fence: {cidrs: [" + s.client + "/32]}\n    orchestrator: {exec: {timeout: 10s}}\n")
		}
		b.WriteString("volumeGroups:\n  - name: g\n    sites: {east: {groupID: vg-0001}, west: {groupID: vg-0001}}\n")
		b.WriteString("workloads:\n  - name: app\n    volumeGroups: [g]\n    sites:\n")
		for _, s := range []string{"east", "west"} {
			b.WriteString("      " + s + ":\n        exec: {start: \"true\", stop: \"true\", health: \"true\"}\n")
		}
		if err := os.WriteFile(plan, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(filepath.Join(bins, "drctl"), "conformance", "-o", "json", "--plan", plan, "--site", "east", "--peer", "west",
			"--volume", cephVolume, "--group", "vg-0001", "--timeout", "10s", "--sync-timeout", "30s")
		out, err := cmd.Output()
		if code := bintest.ExitCode(err); code != 0 {
			t.Fatalf("exit %d\n%s", code, out)
		}
		var rep conformance.Report
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatal(err)
		}
		r := conformanceRun{report: rep}
		if got := r.result("replication/group/resync-force"); got.Status != conformance.Pass {
			t.Errorf("the plan's secrets and parameters did not reach the calls: %+v", got)
		}
		if strings.Contains(string(out), "k3y") {
			t.Error("a secret value is in the report")
		}
	})

	t.Run("TCP with mutual TLS", func(t *testing.T) {
		ca, err := testpki.NewCA("storage-ca")
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		server, err := ca.WriteFiles(dir, "sim")
		if err != nil {
			t.Fatal(err)
		}
		client, err := ca.WriteFiles(dir, "drctl")
		if err != nil {
			t.Fatal(err)
		}
		p := startSimPairAt(t, bins, sim.DriverSpec, simtest.FreeAddr(t), simtest.FreeAddr(t),
			"--tls-cert", server.Cert, "--tls-key", server.Key, "--tls-client-ca", server.CA)
		r := runConformance(t, bins, p, "--tls-ca", server.CA, "--tls-cert", client.Cert, "--tls-key", client.Key)
		if r.code != 0 {
			t.Fatalf("exit %d, failed %v\n%s", r.code, r.with(conformance.Fail), r.stderr)
		}
		// Without a client certificate the endpoint refuses the suite.
		r = runConformance(t, bins, p, "--tls-ca", server.CA)
		if r.code != 1 || r.result("identity/endpoint/probe").Status != conformance.Fail {
			t.Fatalf("without a client certificate: exit %d, probe %+v; want the probe failed", r.code, r.result("identity/endpoint/probe"))
		}
	})

	t.Run("dry run makes no call", func(t *testing.T) {
		dir := simtest.SockDir(t)
		// Nothing listens on these sockets: a call would fail.
		p := simPair{east: "unix://" + filepath.Join(dir, "none-a.sock"), west: "unix://" + filepath.Join(dir, "none-b.sock")}
		cmd := exec.Command(filepath.Join(bins, "drctl"), "conformance", "--dry-run", "--endpoint", p.east,
			"--peer-endpoint", p.west, "--volume", "vol-1", "--group", "vg-0001")
		out, err := cmd.CombinedOutput()
		if code := bintest.ExitCode(err); code != 0 {
			t.Fatalf("exit %d\n%s", code, out)
		}
		for _, want := range []string{"endpoint PromoteVolume volume=\"vol-1\" force", "peer ResyncVolume group=\"vg-0001\" force",
			"endpoint FenceClusterNetwork cidrs=[192.0.2.1/32]", "none was made"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("dry run does not list %q:\n%s", want, out)
			}
		}
	})

	t.Run("bad input exits 2", func(t *testing.T) {
		for _, args := range [][]string{
			{"conformance"},
			{"conformance", "--endpoint", "unix:///x.sock", "--cidr", "not-a-cidr"},
			{"conformance", "--endpoint", "unix:///x.sock", "--volume", "v"},
			{"conformance", "--endpoint", "unix://relative.sock"},
			{"conformance", "--endpoint", "unix:///x.sock", "--param", "novalue"},
		} {
			out, err := exec.Command(filepath.Join(bins, "drctl"), args...).CombinedOutput()
			if code := bintest.ExitCode(err); code != 2 {
				t.Errorf("drctl %v: exit %d, want 2\n%s", args, code, out)
			}
		}
	})

	t.Run("a hung driver: each wait shown, Ctrl-C ends it at once", func(t *testing.T) {
		// EnableVolumeReplication of the scratch volume never answers, as
		// ceph-csi's calls hang with a Ceph user its cluster refuses.
		p := startSimPair(t, bins, sim.DriverSpec, "--fault", "EnableVolumeReplication,latency=10m,subject=vol-1")
		var out, errb simtest.Buffer
		d := startDrctl(t, bins, &out, &errb, "conformance", "--endpoint", p.east, "--peer-endpoint", p.west,
			"--volume", "vol-1", "--timeout", "3s", "--sync-timeout", "5m")
		// The wait is shown while it lasts, with the check and the call.
		simtest.Eventually(t, time.Minute, "drctl to say what it waits on", func() bool {
			return strings.Contains(errb.String(), "replication/volume/enable: waiting on ")
		})
		simtest.Eventually(t, time.Minute, "the call to be unanswered for a while", func() bool {
			return strings.Contains(errb.String(), "EnableVolumeReplication for 6s")
		})
		d.interrupt()
		// A clean-up against the hung driver would take its calls'
		// deadlines, minutes in all.
		if code := d.exit(30*time.Second, "after Ctrl-C against a hung driver"); code != exitInterrupted {
			t.Fatalf("exit %d, want %d\n%s\n%s", code, exitInterrupted, out.String(), errb.String())
		}
		if !strings.Contains(out.String(), "clean-up: volume clean-up: not tried: the driver left endpoint EnableVolumeReplication unanswered") ||
			!strings.Contains(out.String(), "disable its replication by hand") {
			t.Errorf("the report does not say why nothing was put back, nor what to check:\n%s", out.String())
		}
		if t.Failed() {
			t.Logf("drctl conformance said:\n%s\n%s", out.String(), errb.String())
		}
	})

	t.Run("a hung driver fails the run at its first deadline", func(t *testing.T) {
		// With no Ctrl-C, the check whose call the driver sits on fails at
		// its deadline, and no later check or clean-up call waits on the
		// driver again: the run ends then, not a deadline per check later.
		p := startSimPair(t, bins, sim.DriverSpec, "--fault", "EnableVolumeReplication,latency=10m,subject=vol-1")
		var out, errb simtest.Buffer
		d := startDrctl(t, bins, &out, &errb, "conformance", "-o", "json", "--endpoint", p.east, "--peer-endpoint", p.west,
			"--volume", "vol-1", "--timeout", "2s", "--sync-timeout", "12s")
		if code := d.exit(90*time.Second, "after the driver hung"); code != exitFailed {
			t.Fatalf("exit %d, want %d\n%s\n%s", code, exitFailed, out.String(), errb.String())
		}
		var rep conformance.Report
		if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
			t.Fatalf("no report: %v\n%s", err, out.String())
		}
		hung, after, enable := false, 0, "not in the report"
		for _, r := range rep.Results {
			switch {
			case r.ID == "replication/volume/enable":
				enable = fmt.Sprintf("%s: %s (%s)", r.Status, r.Detail, r.Duration)
				hung = r.Status == conformance.Fail && strings.Contains(r.Detail, "the driver hangs")
			case hung && r.Status == conformance.Skip:
				if strings.Contains(r.Detail, "not run: the driver left endpoint EnableVolumeReplication unanswered") {
					after++
				}
			case hung:
				t.Errorf("%s ran after the driver hung: %s %s", r.ID, r.Status, r.Detail)
			}
		}
		if !hung || after == 0 || len(rep.Cleanup) == 0 || !strings.Contains(rep.Cleanup[0], "not tried: the driver left") {
			t.Fatalf("the hang is not told as such (enable %s; %d checks after it not run, clean-up %q):\n%s\n%s", enable, after, rep.Cleanup, errb.String(), out.String())
		}
	})

	t.Run("a second Ctrl-C leaves the clean-up", func(t *testing.T) {
		// The clean-up's first step, a demotion of the peer's copy, takes
		// minutes: a second Ctrl-C leaves it and what follows.
		p := startSimPair(t, bins, sim.DriverSpec, "--fault", "PromoteVolume,latency=1500ms", "--fault", "DemoteVolume,latency=5m,subject=vol-1")
		var out, errb simtest.Buffer
		d := startDrctl(t, bins, &out, &errb, "conformance", "--endpoint", p.east, "--peer-endpoint", p.west,
			"--volume", "vol-1", "--timeout", "2m", "--sync-timeout", "5m")
		ctl := sim.NewControl(p.eastCtl)
		simtest.Eventually(t, 30*time.Second, "replication enabled on east", func() bool {
			st, err := ctl.State(context.Background())
			return err == nil && st.Unit("vol/vol-1") != nil && st.Unit("vol/vol-1").Enabled
		})
		d.interrupt()
		simtest.Eventually(t, 30*time.Second, "the clean-up to wait on the demotion", func() bool {
			return strings.Contains(errb.String(), "Ctrl-C again to leave it as it is") && strings.Contains(errb.String(), "DemoteVolume for ")
		})
		d.interrupt()
		if code := d.exit(30*time.Second, "leaving the clean-up after a second Ctrl-C"); code != exitInterrupted {
			t.Fatalf("exit %d, want %d\n%s\n%s", code, exitInterrupted, out.String(), errb.String())
		}
		if !strings.Contains(errb.String(), "leaving the clean-up") || !strings.Contains(out.String(), "clean-up: volume demote") {
			t.Errorf("the left clean-up is not reported:\n%s\n%s", out.String(), errb.String())
		}
	})

	t.Run("interrupted run puts the scratch resources back", func(t *testing.T) {
		// A slow PromoteVolume keeps the run inside the replication
		// checks when Ctrl-C arrives.
		p := startSimPair(t, bins, sim.DriverSpec, "--fault", "PromoteVolume,latency=1500ms")
		cmd := exec.Command(filepath.Join(bins, "drctl"), "conformance", "--endpoint", p.east, "--peer-endpoint", p.west,
			"--volume", "vol-1", "--group", "vg-0001", "--timeout", "10s")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		// Wait until replication is on, then interrupt.
		ctl := sim.NewControl(p.eastCtl)
		simtest.Eventually(t, 30*time.Second, "replication enabled on east", func() bool {
			st, err := ctl.State(context.Background())
			return err == nil && st.Unit("vol/vol-1") != nil && st.Unit("vol/vol-1").Enabled
		})
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		var err error
		select {
		case err = <-done:
		case <-time.After(90 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("drctl did not stop after Ctrl-C\n%s", out.String())
		}
		if code := bintest.ExitCode(err); code != exitInterrupted {
			t.Fatalf("exit %d, want %d\n%s", code, exitInterrupted, out.String())
		}
		if !strings.Contains(out.String(), "clean-up: volume") {
			t.Errorf("no clean-up reported:\n%s", out.String())
		}
		assertLeftAsFound(t, p)
		if t.Failed() {
			t.Logf("drctl conformance said:\n%s", out.String())
		}
	})
}

// assertLeftAsFound: replication disabled on both sites, east's copies
// primary, west's secondary, and nothing fenced.
func assertLeftAsFound(t *testing.T, p simPair) {
	t.Helper()
	for _, site := range []struct {
		name, ctl string
		role      sim.Role
	}{{"east", p.eastCtl, sim.RolePrimary}, {"west", p.westCtl, sim.RoleSecondary}} {
		st, err := sim.NewControl(site.ctl).State(context.Background())
		if err != nil {
			t.Fatalf("%s state: %v", site.name, err)
		}
		for _, key := range []string{"vol/vol-1", "vg/vg-0001"} {
			if st.Unit(key) == nil {
				t.Fatalf("%s: no unit %s", site.name, key)
			}
		}
		for _, u := range st.Units {
			if u.Enabled || u.Role != site.role {
				t.Errorf("%s %s: enabled=%v role=%s, want disabled and %s", site.name, u.Key(), u.Enabled, u.Role, site.role)
			}
		}
		for _, f := range st.Fences {
			if f.Fenced {
				t.Errorf("%s: %s left fenced", site.name, f.CIDR)
			}
		}
	}
}

// drctlRun is drctl running as a process.
type drctlRun struct {
	t         *testing.T
	cmd       *exec.Cmd
	done      chan error
	out, errb *simtest.Buffer
}

// startDrctl starts drctl with args, its standard output to out and its
// standard error to errb.
func startDrctl(t *testing.T, bins string, out, errb *simtest.Buffer, args ...string) *drctlRun {
	t.Helper()
	cmd := exec.Command(filepath.Join(bins, "drctl"), args...)
	cmd.Stdout, cmd.Stderr = out, errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &drctlRun{t: t, cmd: cmd, done: make(chan error, 1), out: out, errb: errb}
	go func() { d.done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return d
}

// interrupt sends it Ctrl-C.
func (d *drctlRun) interrupt() {
	d.t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGINT); err != nil {
		d.t.Fatal(err)
	}
}

// exit waits within limit for it to end and returns its exit code; the
// test fails, saying what drctl did not do (what), when it does not.
func (d *drctlRun) exit(limit time.Duration, what string) int {
	d.t.Helper()
	select {
	case err := <-d.done:
		return bintest.ExitCode(err)
	case <-time.After(limit):
		_ = d.cmd.Process.Kill()
		d.t.Fatalf("drctl did not end %s within %s\n%s\n%s", what, limit, d.out, d.errb)
		return 0
	}
}
