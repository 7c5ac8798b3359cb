package e2e_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"google.golang.org/grpc"
	"gopkg.in/yaml.v3"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/codec"
	"github.com/drover-dr/drover/internal/stack"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
)

// The rig of TestSitesAsNetworks: in each site's network namespace a
// PostgreSQL cluster of its own, a Temporal server on it (the site's
// cluster of a multi-cluster pair), the site's storage (drover-sim) and
// the site's worker. Every port is the same in each site: the namespaces
// keep them apart.

const (
	sitesNamespace = "drover"
	pgPort         = "5432"
	frontendPort   = 7233
	storagePort    = 7300 // CSI-Addons; data +1, control +2
	metricsPort    = 9464
)

// sitesBin, from DROVER_E2E_SITES (make e2e-sites), is the directory of
// the Temporal server and its SQL tool.
var sitesBin = os.Getenv("DROVER_E2E_SITES")

type rig struct {
	t     *testing.T
	dir   string
	pgDir string
	net   *wan
	procs []*rigProc
	token string // the sites' peer token
	key   string // the plan signing key
	pub   string
	// record is the record key every workflow worker shares: a
	// record refuses the changes another key sealed.
	record string
	// up are the sites, east (the primary, the namespace's active
	// cluster) first.
	up []*siteNet
	// zombie is the site cut off while the other took over (check).
	zombie *siteNet
	// temporal is each site's Temporal server, by site name.
	temporal map[string]*rigProc
}

type rigProc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func (r *rig) say(format string, a ...any) {
	r.t.Logf("%s sites: %s", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, a...))
}

// spawn starts bin in site's namespace (as user postgres when asPG), its
// output in DIR/name.log. Its PID is the program's: ip netns exec and
// setpriv exec it.
func (r *rig) spawn(name string, s *siteNet, asPG bool, env []string, bin string, args ...string) *rigProc {
	r.t.Helper()
	argv := []string{"netns", "exec", s.ns}
	if asPG {
		argv = append(argv, "setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--")
	}
	argv = append(append(argv, bin), args...)
	logf, err := os.OpenFile(filepath.Join(r.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("ip", argv...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start %s: %v", name, err)
	}
	p := &rigProc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	r.procs = append(r.procs, p)
	return p
}

// run runs a program in site's namespace to its end, within limit.
func (r *rig) run(s *siteNet, limit time.Duration, env []string, bin string, args ...string) (string, int) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", s.ns, bin}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), bintest.ExitCode(err)
}

// tool runs a tool and fails the test unless it exits 0.
func (r *rig) tool(s *siteNet, bin string, args ...string) string {
	r.t.Helper()
	out, code := r.run(s, 2*time.Minute, nil, bin, args...)
	if code != 0 {
		r.t.Fatalf("%s %s at %s: exit %d\n%s", filepath.Base(bin), strings.Join(args, " "), s.name, code, out)
	}
	return out
}

// retry runs a tool until it exits 0, for at most limit.
func (r *rig) retry(s *siteNet, limit time.Duration, bin string, args ...string) {
	r.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		out, code := r.run(s, time.Minute, nil, bin, args...)
		if code == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s %s at %s: still exit %d after %v\n%s", filepath.Base(bin), strings.Join(args, " "), s.name, code, limit, out)
		}
		time.Sleep(time.Second)
	}
}

// stop ends one process: SIGTERM, SIGKILL after 20 s.
func (p *rigProc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// close stops every process, newest first, deletes the namespaces and
// the PostgreSQL clusters.
func (r *rig) close() {
	for i := len(r.procs) - 1; i >= 0; i-- {
		r.procs[i].stop()
	}
	if r.net != nil {
		if err := r.net.close(); err != nil {
			r.t.Error(err)
		}
	}
	if r.pgDir != "" {
		_ = os.RemoveAll(r.pgDir)
	}
}

// ended names the processes that ended on their own.
func (r *rig) ended() []string {
	var out []string
	for _, p := range r.procs {
		select {
		case <-p.done:
			out = append(out, fmt.Sprintf("%s (pid %d): %v", p.name, p.cmd.Process.Pid, p.cmd.ProcessState))
		default:
		}
	}
	return out
}

func (r *rig) dumpLogs() {
	for _, p := range r.procs {
		b, _ := os.ReadFile(filepath.Join(r.dir, p.name+".log"))
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		r.t.Logf("---- the end of %s.log:\n%s", p.name, b)
	}
}

func (s *siteNet) frontend() string { return fmt.Sprintf("%s:%d", s.host, frontendPort) }
func (s *siteNet) storage() string  { return fmt.Sprintf("%s:%d", s.host, storagePort) }
func (s *siteNet) data() string     { return fmt.Sprintf("%s:%d", s.host, storagePort+1) }
func (s *siteNet) control() string  { return fmt.Sprintf("%s:%d", s.host, storagePort+2) }
func (s *siteNet) metrics() string  { return fmt.Sprintf("%s:%d", s.host, metricsPort) }

// startPostgres makes and starts the site's PostgreSQL cluster on its
// namespace's loopback and sets up the cluster's two Temporal databases.
func (r *rig) startPostgres(s *siteNet, pgBin string) {
	r.t.Helper()
	cred := pgUser(r.t)
	data := filepath.Join(r.pgDir, s.name)
	if err := os.MkdirAll(data, 0o700); err != nil {
		r.t.Fatal(err)
	}
	sock := filepath.Join(r.pgDir, s.name+"-socket")
	if err := os.MkdirAll(sock, 0o700); err != nil {
		r.t.Fatal(err)
	}
	pw := filepath.Join(r.pgDir, s.name+".pw")
	if err := os.WriteFile(pw, []byte("temporal\n"), 0o600); err != nil {
		r.t.Fatal(err)
	}
	for _, f := range []string{data, sock, pw} {
		if err := os.Chown(f, int(cred.Uid), int(cred.Gid)); err != nil {
			r.t.Fatal(err)
		}
	}
	initdb := exec.Command(filepath.Join(pgBin, "initdb"), "-D", data, "-U", "temporal", "--pwfile", pw, "--auth", "scram-sha-256", "-E", "UTF8", "--locale", "C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		r.t.Fatalf("initdb for %s: %v\n%s", s.name, err, out)
	}
	r.spawn("postgresql-"+s.name, s, true, nil, filepath.Join(pgBin, "postgres"), "-D", data, "-p", pgPort,
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+sock, "-c", "max_connections=100",
		"-c", "shared_buffers=16MB", "-c", "fsync=off")
	r.retry(s, time.Minute, filepath.Join(pgBin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", pgPort)
	for _, db := range []struct{ name, schema string }{{"temporal", "postgresql/v12/temporal"}, {"temporal_visibility", "postgresql/v12/visibility"}} {
		base := []string{"--plugin", "postgres12", "--ep", "127.0.0.1", "-p", pgPort, "-u", "temporal", "--pw", "temporal", "--db", db.name}
		for _, step := range [][]string{{"create-database"}, {"setup-schema", "-v", "0.0"}, {"update-schema", "--schema-name", db.schema}} {
			r.tool(s, filepath.Join(sitesBin, "temporal-sql-tool"), append(base, step...)...)
		}
	}
}

func pgUser(t *testing.T) *syscall.Credential {
	out, err := exec.Command("id", "-u", "postgres").Output()
	if err != nil {
		t.Skipf("no postgres user to run PostgreSQL as (install Debian's postgresql package): %v", err)
	}
	gid, _ := exec.Command("id", "-g", "postgres").Output()
	var uid, g uint32
	fmt.Sscan(string(out), &uid)
	fmt.Sscan(string(gid), &g)
	return &syscall.Credential{Uid: uid, Gid: g}
}

// startTemporal starts the site's Temporal cluster with the production
// configuration, deploy/temporal/config/production.yaml, set for two
// clusters as docs/guides/two-sites.md says: its own name, its own initial failover
// version, global namespaces, and the dynamic configuration beside it.
func (r *rig) startTemporal(s *siteNet, initialVersion int, global bool) *rigProc {
	r.t.Helper()
	root := filepath.Join(r.dir, "temporal-"+s.name)
	if err := os.MkdirAll(filepath.Join(root, "config"), 0o755); err != nil {
		r.t.Fatal(err)
	}
	for _, f := range []struct{ from, to string }{
		{filepath.Join("..", "deploy", "temporal", "config", "production.yaml"), filepath.Join(root, "config", "production.yaml")},
		{filepath.Join("..", "deploy", "temporal", "config", "dynamicconfig", "two-clusters.yaml"), filepath.Join(root, "two-clusters.yaml")},
	} {
		b, err := os.ReadFile(f.from)
		if err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(f.to, b, 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	env := []string{"POSTGRES_HOST=127.0.0.1", "POSTGRES_PORT=" + pgPort, "POSTGRES_USER=temporal", "POSTGRES_PASSWORD=temporal",
		"TEMPORAL_BIND_IP=" + s.host, fmt.Sprintf("TEMPORAL_PORT=%d", frontendPort), "TEMPORAL_METRICS=" + s.host + ":8000",
		"TEMPORAL_CLUSTER_NAME=" + s.name, fmt.Sprintf("TEMPORAL_INITIAL_FAILOVER_VERSION=%d", initialVersion)}
	if global {
		env = append(env, "TEMPORAL_GLOBAL_NAMESPACES=true", "TEMPORAL_DYNAMIC_CONFIG="+filepath.Join(root, "two-clusters.yaml"))
	}
	return r.spawn("temporal-"+s.name, s, false, env, filepath.Join(sitesBin, "temporal-server"),
		"--root", root, "--config", "config", "--env", "production", "--allow-no-auth", "start")
}

// startSim starts the site's storage: its groups, replication to the
// other site's data address across the WAN.
func (r *rig) startSim(s, peer *siteNet, primary bool, groups []sim.GroupSpec) {
	r.t.Helper()
	cfg := sim.Config{Name: s.name, GRPCAddr: s.storage(), DataAddr: s.data(), ControlAddr: s.control(), PeerAddr: peer.data(), PeerToken: r.token,
		StateDir: filepath.Join(r.dir, "storage-"+s.name), Primary: primary, SyncInterval: time.Second, Groups: groups}
	b, err := yaml.Marshal(map[string]any{"sites": []sim.Config{cfg}})
	if err != nil {
		r.t.Fatal(err)
	}
	path := filepath.Join(r.dir, "sim-"+s.name+".yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		r.t.Fatal(err)
	}
	r.spawn("sim-"+s.name, s, false, nil, filepath.Join(bin, "drover-sim"), "--config", path, "--log-level", "warn")
}

// temporalEnv points a Temporal tool at the site's own cluster.
func (s *siteNet) temporalEnv() []string {
	return []string{"TEMPORAL_ADDRESS=" + s.temporal.frontend(), "TEMPORAL_NAMESPACE=" + sitesNamespace}
}

// startWorker starts the site's worker against its own cluster.
func (r *rig) startWorker(s *siteNet) *rigProc {
	r.t.Helper()
	if r.record == "" {
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			r.t.Fatal(err)
		}
		r.record = hex.EncodeToString(k)
	}
	return r.spawn("worker-"+s.name, s, false, append(s.temporalEnv(), "DROVER_RECORD_KEY="+r.record), filepath.Join(bin, "worker"),
		"--metrics", s.metrics(), "--identity", "worker-"+s.name, "--trusted-plan-key", r.pub,
		"--versioning=false", "--connect-timeout", "2m", "--stop-timeout", "10s")
}

// workerReady reports whether the site's worker answers /readyz: Temporal
// lists it among the pollers of its task queues.
func (s *siteNet) workerReady() bool {
	c := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: dialer(s.ns, "")}}
	resp, err := c.Get("http://" + s.metrics() + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// client is a Temporal client of the site's cluster, dialled from inside
// its namespace.
func (r *rig) client(s *siteNet) client.Client {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := dialer(s.ns, "")
	c, err := client.DialContext(ctx, client.Options{HostPort: s.temporal.frontend(), Namespace: sitesNamespace, DataConverter: codec.Converter(),
		Logger: log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dial(ctx, "tcp", addr)
		})}}})
	if err != nil {
		r.t.Fatalf("Temporal client of %s: %v", s.name, err)
	}
	r.t.Cleanup(c.Close)
	return c
}

// keys makes the plan signing key pair.
func (r *rig) keys() {
	r.t.Helper()
	pub, key, err := plans.GenerateKey()
	if err != nil {
		r.t.Fatal(err)
	}
	kb, err := plans.EncodePrivateKey(key)
	if err != nil {
		r.t.Fatal(err)
	}
	pb, err := plans.EncodePublicKey(pub)
	if err != nil {
		r.t.Fatal(err)
	}
	r.key, r.pub = filepath.Join(r.dir, "plan-signing.key"), filepath.Join(r.dir, "plan-signing.pub")
	if err := os.WriteFile(r.key, kb, 0o600); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(r.pub, pb, 0o644); err != nil {
		r.t.Fatal(err)
	}
	tok := make([]byte, 16)
	_, _ = rand.Read(tok)
	r.token = hex.EncodeToString(tok)
}

// sitesPlan is the plan the test drives: the two sites by their
// namespaces' addresses, each fenced by its client address.
func (r *rig) sitesPlan(groups []sim.GroupSpec) string {
	var b strings.Builder
	b.WriteString("apiVersion: drover.dev/v1alpha1\nkind: FailoverPlan\nmetadata:\n  name: sites\nsites:\n")
	for _, s := range r.up {
		fmt.Fprintf(&b, "  - name: %s\n    storage: {endpoint: %q}\n    fence: {cidrs: [%s/32]}\n    orchestrator: {exec: {timeout: 10s}}\n", s.name, s.storage(), s.client)
	}
	b.WriteString("volumeGroups:\n")
	var gs []string
	for i, g := range groups {
		name := strings.TrimPrefix(g.ID, "vg-")
		gs = append(gs, name)
		fmt.Fprintf(&b, "  - name: %q\n    priority: %d\n    sites: {east: {groupID: %s}, west: {groupID: %s}}\n    parameters: {mirroringMode: snapshot, schedulingInterval: 1s}\n", name, i%2, g.ID, g.ID)
	}
	fmt.Fprintf(&b, "workloads:\n  - name: app\n    volumeGroups: [%s]\n    healthTimeout: 30s\n    sites:\n", strings.Join(gs, ", "))
	for _, s := range r.up {
		marker := filepath.Join(r.dir, "app-running."+s.name)
		fmt.Fprintf(&b, "      %s:\n        exec: {start: \"touch %s\", stop: \"rm -f %s\", health: \"test -f %s\"}\n", s.name, marker, marker, marker)
	}
	b.WriteString(`policy:
  parallelism: 4
  rpoTarget: 30s
  retry: {initialInterval: 200ms, maximumInterval: 2s, timeLimit: 5m}
  deadlines: {default: 2s, PromoteVolume: 3s, DemoteVolume: 3s, ResyncVolume: 3s}
`)
	path := filepath.Join(r.dir, "sites.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		r.t.Fatal(err)
	}
	return path
}

// drctl runs drctl at a site, against its own cluster, signing plans
// with the rig's key.
func (r *rig) drctl(s *siteNet, args ...string) (string, int) {
	r.t.Helper()
	out, code := r.run(s, 5*time.Minute, append(s.temporalEnv(), "DROVER_PLAN_SIGNING_KEY="+r.key), filepath.Join(bin, "drctl"), args...)
	r.t.Logf("$ drctl %s  (at %s, exit %d)\n%s", strings.Join(args, " "), s.name, code, out)
	return out, code
}

func (r *rig) mustDrctl(s *siteNet, args ...string) string {
	r.t.Helper()
	out, code := r.drctl(s, args...)
	if code != 0 {
		r.t.Fatalf("drctl %s at %s exited %d", strings.Join(args, " "), s.name, code)
	}
	return out
}

// control is the site's storage control API, reached inside its
// namespace.
func (s *siteNet) control_() *sim.Control { return sim.NewControlVia(s.control(), dialer(s.ns, "")) }

// writer is the site's application: it writes from the site's client
// address to the site's storage.
func (s *siteNet) writer(volumes []string) *stack.Writer {
	return stack.NewWriterVia(s.name, volumes, sim.NewClientVia(s.data(), s.name+"-app", dialer(s.ns, s.client)))
}
