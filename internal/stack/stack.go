package stack

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"gopkg.in/yaml.v3"

	"github.com/drover-dr/drover/internal/codec"
	"github.com/drover-dr/drover/internal/freeport"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// SiteLayout is where one simulated site listens.
type SiteLayout struct {
	Name    string `json:"name"`
	GRPC    string `json:"grpc"`
	Data    string `json:"data"`
	Control string `json:"control"`
	// Client is the loopback address the site's nodes (and its writer)
	// connect from; the plan fences it.
	Client string `json:"client"`
	// Endpoint is the address the example plan names for this site, which
	// the stack's copy of the plan replaces with GRPC.
	Endpoint string `json:"-"`
}

// Layout is where the stack's processes listen.
type Layout struct {
	Temporal string       `json:"temporal"`
	UI       string       `json:"ui"`
	Metrics  string       `json:"metrics"`
	Sites    []SiteLayout `json:"sites"`
}

// Fixed is the layout of `make up`: the Temporal CLI's default ports, so
// drctl and the UI work without settings, and the sites where
// plans/examples/demo.yaml expects them.
func Fixed() Layout {
	return Layout{Temporal: "127.0.0.1:7233", UI: "127.0.0.1:8233", Metrics: "127.0.0.1:9464", Sites: []SiteLayout{
		{Name: "east", GRPC: "127.0.0.1:7300", Data: "127.0.0.1:7301", Control: "127.0.0.1:7302", Client: "127.0.0.2", Endpoint: "127.0.0.1:7300"},
		{Name: "west", GRPC: "127.0.0.1:7400", Data: "127.0.0.1:7401", Control: "127.0.0.1:7402", Client: "127.0.0.3", Endpoint: "127.0.0.1:7400"},
	}}
}

// Free is Fixed with every port chosen free, so a demo can run beside a
// stack that is up (or beside tests). The ports are held back from
// automatic allocation (freeport) until the stack's processes bind them.
func Free() (Layout, error) {
	l := Fixed()
	addrs := make([]string, 9)
	for i := range addrs {
		addr, err := freeport.Addr("127.0.0.1")
		if err != nil {
			return l, err
		}
		addrs[i] = addr
	}
	l.Temporal, l.UI, l.Metrics = addrs[0], addrs[1], addrs[2]
	for i := range l.Sites {
		l.Sites[i].GRPC, l.Sites[i].Data, l.Sites[i].Control = addrs[3+3*i], addrs[4+3*i], addrs[5+3*i]
	}
	return l, nil
}

// PlanHead is the start of a plan for the stack's sites as Fixed lays
// them out (Start points the endpoints at the running stack): the header
// and each site, fenced by its client address, with exec hooks of the
// given timeout. The caller appends volumeGroups, workloads and policy.
func PlanHead(name string, execTimeout time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: drover.dev/v1alpha1\nkind: FailoverPlan\nmetadata:\n  name: %s\nsites:\n", name)
	for _, site := range Fixed().Sites {
		fmt.Fprintf(&b, "  - name: %s\n    storage: {endpoint: %q}\n    fence: {cidrs: [%s/32]}\n    orchestrator: {exec: {timeout: %v}}\n",
			site.Name, site.Endpoint, site.Client, execTimeout)
	}
	return b.String()
}

// Options say where the stack runs from.
type Options struct {
	// Dir holds the state, the logs, the plan copy and the pid file.
	Dir string
	// Bin holds temporal, worker and drover-sim.
	Bin string
	// Plan is the example plan whose site endpoints the stack fills in.
	Plan string
	// Groups are the volume groups each site holds (default: the demo
	// plan's vg-db and vg-web).
	Groups []sim.GroupSpec
	Layout Layout
	// Detach leaves the processes running after this one exits (make up).
	Detach bool
	// StorageOnly starts the sites alone: no Temporal, no worker.
	StorageOnly bool
	// SignOriginal also writes the signature of Plan beside it, when
	// the stack's copy is the same plan (the fixed layout of make up),
	// so that drctl finds it for the plan file itself.
	SignOriginal bool
	// Driver is the sites' driver profile (sim.DriverSpec when empty).
	Driver string
	// ScheduleMinute is how long a minute of a schedulingInterval lasts
	// on the sites (drover-sim's scheduleMinute; a minute when zero).
	ScheduleMinute time.Duration
	// MirrorRestart is drover-sim's mirrorRestart: how long, under the
	// ceph-csi profile, a site's primary copies answer as real ceph-csi
	// does after their peer restarts from a power loss (the simulator's
	// default when zero).
	MirrorRestart time.Duration
	// ScheduleRace is drover-sim's scheduleRace (ceph-csi profile): a
	// demotion that its copy's snapshot schedule comes round in leaves the
	// copy primary again just after it, as Ceph does.
	ScheduleRace bool
	// SQL runs the Temporal server built from its Go module on a
	// throwaway PostgreSQL cluster, set up as in production (schemas,
	// namespace, search attributes), instead of the dev server. Bin then
	// also holds temporal-server and temporal-sql-tool.
	SQL bool
	// Secrets, when set, are required by both sites' fence and
	// replication calls (drover-sim's secrets).
	Secrets map[string]string
	// Worker is the workflow worker's binary (Bin's worker when empty),
	// and WorkerArgs are flags added to those the stack gives it: e.g. a
	// previous build and its --build-id, for an upgrade run.
	Worker     string
	WorkerArgs []string
	// TemporalArgs are flags added to the dev server's (not the SQL
	// server's), e.g. dynamic config a test needs.
	TemporalArgs []string
	// Out receives progress lines.
	Out io.Writer
}

// Stack is a started stack.
type Stack struct {
	Options
	// PlanFile is the plan copy with this stack's endpoints.
	PlanFile string
	procs    []*proc
	temporal client.Client
	// pgDir is the PostgreSQL cluster of a SQL stack, removed by Stop.
	pgDir string
	// peerToken is the sites' shared secret for their peer API.
	peerToken string
}

// proc is one process of the stack.
type proc struct {
	Name string `yaml:"name"`
	PID  int    `yaml:"pid"`
	Bin  string `yaml:"bin"`
	env  []string
	args []string
	cred *syscall.Credential
	cmd  *exec.Cmd
	done chan struct{}
	// listen are the addresses it listens on, for a process that is not
	// one of the stack's own (a further worker).
	listen []string
	// started is when this process was spawned; killed, that the stack
	// ended it on purpose (Kill, Restart, Stop).
	started time.Time
	killed  bool
}

const pidFile = "pids.yaml"

// Start starts the stack and waits until every part answers. On error it
// stops what it started.
func Start(ctx context.Context, o Options) (s *Stack, err error) {
	s = &Stack{Options: o}
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return nil, err
	}
	s.peerToken = hex.EncodeToString(token)
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	if running, _ := readPIDs(o.Dir); len(alive(running)) > 0 {
		return nil, fmt.Errorf("a stack already runs from %s (pids in %s); stop it with make down", o.Dir, filepath.Join(o.Dir, pidFile))
	}
	for _, addr := range s.addrs() {
		if err := free(addr); err != nil {
			return nil, fmt.Errorf("%v: is a stack up (make down stops it) or another program using it?", err)
		}
	}
	defer func() {
		if err != nil {
			s.Stop()
			s = nil
		}
	}()
	if err := s.writePlan(); err != nil {
		return s, err
	}
	if o.SQL && !o.StorageOnly {
		if err := s.startSQL(ctx); err != nil {
			return s, err
		}
	} else if !o.StorageOnly {
		s.say("starting the Temporal dev server on %s (UI http://%s, database %s)", o.Layout.Temporal, o.Layout.UI, filepath.Join(o.Dir, "temporal.db"))
		host, port, _ := net.SplitHostPort(o.Layout.Temporal)
		_, uiPort, _ := net.SplitHostPort(o.Layout.UI)
		args := []string{"server", "start-dev", "--ip", host, "--port", port,
			"--ui-port", uiPort, "--db-filename", filepath.Join(o.Dir, "temporal.db"), "--log-level", "warn",
			// An activity the workflow's own worker can run starts in the
			// reply to the workflow task, without a trip through matching.
			"--dynamic-config-value", "system.enableActivityEagerExecution=true",
			// One partition per task queue: a task goes straight to a
			// waiting poller instead of being forwarded between partitions
			// (DR actions are few; a queue's throughput is not the limit).
			"--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
			"--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
			// The database in write-ahead-log mode, every commit synced:
			// as durable as SQLite's default rollback journal, with one
			// sync per commit instead of several (every start, task and
			// signal is a commit).
			"--sqlite-pragma", "journal_mode=wal",
			"--sqlite-pragma", "synchronous=full"}
		for _, name := range SearchAttributes {
			args = append(args, "--search-attribute", name+"=Keyword")
		}
		args = append(args, o.TemporalArgs...)
		if err := s.Spawn("temporal", filepath.Join(o.Bin, "temporal"), nil, args...); err != nil {
			return s, err
		}
	}
	for _, site := range o.Layout.Sites {
		cfg, err := s.writeSiteConfig(site)
		if err != nil {
			return s, err
		}
		s.say("starting site %s: CSI-Addons on %s, data on %s, control on http://%s", site.Name, site.GRPC, site.Data, site.Control)
		if err := s.Spawn("sim-"+site.Name, filepath.Join(o.Bin, "drover-sim"), nil, "--config", cfg, "--log-level", "warn"); err != nil {
			return s, err
		}
	}
	for _, site := range o.Layout.Sites {
		if err := s.waitReady(ctx, "sim-"+site.Name); err != nil {
			return s, err
		}
	}
	if o.StorageOnly {
		return s, nil
	}
	if err := s.waitReady(ctx, "temporal"); err != nil {
		return s, err
	}
	if _, err := s.signPlans(); err != nil {
		return s, err
	}
	if _, err := s.recordKey(); err != nil {
		return s, err
	}
	s.say("starting the worker (metrics on http://%s/metrics)", o.Layout.Metrics)
	worker := o.Worker
	if worker == "" {
		worker = filepath.Join(o.Bin, "worker")
	}
	if err := s.spawnWorker("worker", worker, o.Layout.Metrics, o.WorkerArgs); err != nil {
		return s, err
	}
	return s, s.waitReady(ctx, "worker")
}

// spawnWorker starts a workflow worker of the stack: its Temporal, its
// identity, the stack's plan key, metrics on metrics, then args.
func (s *Stack) spawnWorker(name, bin, metrics string, args []string) error {
	all := append([]string{"--metrics", metrics, "--identity", s.WorkerIdentity(name), "--trusted-plan-key", s.PublicKey()}, args...)
	// The record key goes in the environment, which a build older than
	// record seals ignores (an upgrade test runs one), not as a flag it
	// would refuse.
	return s.Spawn(name, bin, []string{"TEMPORAL_ADDRESS=" + s.Layout.Temporal, "TEMPORAL_NAMESPACE=default",
		"DROVER_RECORD_KEY_FILE=" + s.RecordKeyFile()}, all...)
}

// StartWorker starts a further workflow worker beside the stack's, as
// its worker is started (metrics on a free port of its own), from bin
// with args added (e.g. another build and its --build-id, for an
// upgrade), and waits until it polls. name must start with "worker-";
// Kill, Restart and Stop know it by that name.
func (s *Stack) StartWorker(ctx context.Context, name, bin string, args ...string) error {
	if !strings.HasPrefix(name, "worker-") {
		return fmt.Errorf("a further worker's name must start with \"worker-\", not %q", name)
	}
	metrics, err := freeport.Addr("127.0.0.1")
	if err != nil {
		return err
	}
	s.say("starting %s from %s (metrics on http://%s/metrics)", name, bin, metrics)
	if err := s.spawnWorker(name, bin, metrics, args); err != nil {
		return err
	}
	p, err := s.proc(name)
	if err != nil {
		return err
	}
	p.listen = []string{metrics}
	return s.waitReady(ctx, name)
}

func (s *Stack) say(format string, a ...any) {
	if s.Out != nil {
		fmt.Fprintf(s.Out, "stack: "+format+"\n", a...)
	}
}

func (s *Stack) addrs() []string {
	l := s.Layout
	out := []string{l.Temporal, l.UI, l.Metrics}
	for _, site := range l.Sites {
		out = append(out, site.GRPC, site.Data, site.Control)
	}
	return out
}

func free(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("address %s is in use", addr)
	}
	return lis.Close()
}

func dials(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// ready reports whether url answers 200.
func ready(url string) bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func answers(url string) bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode < 500
}

// waitFor polls cond every 100ms for at most d. It gives up at once
// when a process of the stack has ended unasked, naming it.
func (s *Stack) waitFor(ctx context.Context, d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if err := s.Ended(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not come up within %v", what, d)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// Ended names the processes of the stack that have ended without the
// stack ending them, each with its exit status and the end of its log;
// nil when every process runs or was stopped on purpose.
func (s *Stack) Ended() error {
	var errs []error
	for _, p := range s.procs {
		if p.done == nil || p.killed {
			continue
		}
		select {
		case <-p.done:
			errs = append(errs, s.withLog(fmt.Errorf("%s (pid %d) ended: %v", p.Name, p.PID, p.cmd.ProcessState), p.Name))
		default:
		}
	}
	return errors.Join(errs...)
}

// withLog adds the tail of a process's log to an error.
func (s *Stack) withLog(err error, name string) error {
	b, _ := os.ReadFile(s.logPath(name))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return fmt.Errorf("%w; the end of %s:\n%s", err, s.logPath(name), b)
}

func (s *Stack) logPath(name string) string { return filepath.Join(s.Dir, name+".log") }

// writePlan writes the example plan with this stack's endpoints.
func (s *Stack) writePlan() error {
	b, err := os.ReadFile(s.Plan)
	if err != nil {
		return err
	}
	text := string(b)
	for _, site := range s.Layout.Sites {
		if !strings.Contains(text, site.Endpoint) {
			return fmt.Errorf("%s does not name endpoint %s for site %s", s.Plan, site.Endpoint, site.Name)
		}
		text = strings.ReplaceAll(text, site.Endpoint, site.GRPC)
	}
	s.PlanFile = filepath.Join(s.Dir, filepath.Base(s.Plan))
	return os.WriteFile(s.PlanFile, []byte(text), 0o644)
}

// SigningKey is the stack's plan signing key: made at the first start,
// kept with the stack's state. Its public key (PublicKey) is the one the
// stack's worker trusts.
func (s *Stack) SigningKey() string { return filepath.Join(s.Dir, "plan-signing.key") }

// PublicKey is the public half of SigningKey.
func (s *Stack) PublicKey() string { return filepath.Join(s.Dir, "plan-signing.pub") }

// SignatureValidity is how long the stack's signatures are good: as
// long as drctl's by default, so that a copy of the demo plan's
// signature, collected by a reader of the namespace, does not run the
// plan for ever. The stack signs its plans again at every start.
const SignatureValidity = 30 * 24 * time.Hour

// Sign signs a plan with the stack's key, for an action started through
// the Temporal client, good for SignatureValidity.
func (s *Stack) Sign(p *plans.Plan) (*plans.Signature, error) {
	key, err := plans.ReadPrivateKey(s.SigningKey())
	if err != nil {
		return nil, err
	}
	return plans.Sign(p, key, time.Now(), SignatureValidity)
}

// RecordKeyFile is the file of the key the stack's worker seals its
// records' changes with.
func (s *Stack) RecordKeyFile() string { return filepath.Join(s.Dir, "record.key") }

// recordKey makes the key the stack's worker seals its records' changes
// with, kept with the stack's state so that a worker started again (or
// a second one) holds the same.
func (s *Stack) recordKey() (string, error) {
	f := s.RecordKeyFile()
	if _, err := os.Stat(f); err == nil {
		return f, nil
	}
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return "", err
	}
	return f, os.WriteFile(f, []byte(hex.EncodeToString(k)+"\n"), 0o600)
}

// signPlans makes the stack's key pair when there is none, and signs the
// stack's plan copy (PLAN.sig beside it, which drctl sends with the
// plan), and with SignOriginal the plan itself. It returns the public
// key file for the worker.
func (s *Stack) signPlans() (string, error) {
	if _, err := os.Stat(s.SigningKey()); os.IsNotExist(err) {
		pub, key, err := plans.GenerateKey()
		if err != nil {
			return "", err
		}
		kb, err := plans.EncodePrivateKey(key)
		if err != nil {
			return "", err
		}
		pb, err := plans.EncodePublicKey(pub)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(s.SigningKey(), kb, 0o600); err != nil {
			return "", err
		}
		if err := os.WriteFile(s.PublicKey(), pb, 0o644); err != nil {
			return "", err
		}
	}
	files := []string{s.PlanFile}
	if s.SignOriginal {
		files = append(files, s.Plan)
	}
	var first []byte
	for _, f := range files {
		p, err := plans.Load(f)
		if err != nil {
			return "", fmt.Errorf("sign %s: %w", f, err)
		}
		canon, err := plans.CanonicalJSON(p)
		if err != nil {
			return "", err
		}
		if first == nil {
			first = canon
		} else if !bytes.Equal(first, canon) {
			continue // the copy differs (other ports): only the copy is signed
		}
		sig, err := s.Sign(p)
		if err != nil {
			return "", err
		}
		if err := plans.WriteSignature(plans.SignatureFile(f), sig); err != nil {
			return "", err
		}
		s.say("signed %s with the stack's key %s (%s)", f, sig.KeyID(), s.SigningKey())
	}
	return s.PublicKey(), nil
}

// StateDir is where a site keeps its persisted state.
func (s *Stack) StateDir(site string) string { return filepath.Join(s.Dir, site) }

// writeSiteConfig writes one site's drover-sim configuration: the
// stack's groups, the first site primary, replication to the other site.
func (s *Stack) writeSiteConfig(site SiteLayout) (string, error) {
	peer := ""
	for _, o := range s.Layout.Sites {
		if o.Name != site.Name {
			peer = o.Data
		}
	}
	cfg := sim.Config{Name: site.Name, GRPCAddr: site.GRPC, DataAddr: site.Data, ControlAddr: site.Control, PeerAddr: peer, PeerToken: s.peerToken,
		StateDir: s.StateDir(site.Name), Primary: site.Name == s.Layout.Sites[0].Name, SyncInterval: time.Second, Groups: s.Groups, Driver: s.Driver,
		ScheduleMinute: s.ScheduleMinute, MirrorRestart: s.MirrorRestart, ScheduleRace: s.ScheduleRace, Secrets: s.Secrets}
	if len(cfg.Groups) == 0 {
		cfg.Groups = []sim.GroupSpec{{ID: "vg-db", Volumes: []string{"db-data", "db-wal"}}, {ID: "vg-web", Volumes: []string{"web-assets"}}}
	}
	b, err := yaml.Marshal(map[string]any{"sites": []sim.Config{cfg}})
	if err != nil {
		return "", err
	}
	path := filepath.Join(s.Dir, site.Name+".yaml")
	return path, os.WriteFile(path, b, 0o600)
}

// Spawn starts one process with its output in <dir>/<name>.log and
// records it in the pid file. A process of the same name that has ended
// is replaced, and its log goes on in the same file.
func (s *Stack) Spawn(name, bin string, env []string, args ...string) error {
	return s.spawn(name, bin, nil, env, args...)
}

// spawn is Spawn as the user of cred (nil: this process's).
func (s *Stack) spawn(name, bin string, cred *syscall.Credential, env []string, args ...string) error {
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s is not built (%v): run make build temporal", bin, err)
	}
	at := -1
	for i, p := range s.procs {
		if p.Name == name {
			if p.running() {
				return fmt.Errorf("%s already runs (pid %d)", name, p.PID)
			}
			at = i
		}
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if at >= 0 {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	logf, err := os.OpenFile(s.logPath(name), flags, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a Ctrl-C in the terminal reaches this
	// program, which stops the stack in order. Without Detach the
	// processes also die with this one if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	if !s.Detach {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %v", name, err)
	}
	p := &proc{Name: name, PID: cmd.Process.Pid, Bin: bin, env: env, args: args, cred: cred, cmd: cmd, done: make(chan struct{}), started: time.Now()}
	go func() { _ = cmd.Wait(); close(p.done) }()
	if at < 0 {
		s.procs = append(s.procs, p)
	} else {
		s.procs[at] = p
	}
	return s.savePIDs()
}

func (s *Stack) proc(name string) (*proc, error) {
	for _, p := range s.procs {
		if p.Name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("the stack has no process %q", name)
}

// Kill ends one of the stack's processes with SIGKILL, as a crash would,
// and waits until it is gone.
func (s *Stack) Kill(name string) error {
	p, err := s.proc(name)
	if err != nil {
		return err
	}
	if !p.running() {
		return fmt.Errorf("%s (pid %d) is not running", name, p.PID)
	}
	p.killed = true
	if err := p.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill %s (pid %d): %v", name, p.PID, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) still runs 10s after SIGKILL", name, p.PID)
	}
}

// Terminate stops one of the stack's processes as an operator would:
// SIGTERM, then SIGKILL if it has not ended within 20 seconds. Restart
// starts it again.
func (s *Stack) Terminate(name string) error {
	p, err := s.proc(name)
	if err != nil {
		return err
	}
	if !p.running() {
		return fmt.Errorf("%s (pid %d) is not running", name, p.PID)
	}
	return stopAll([]*proc{p}, s.Out)
}

// Restart starts a process of the stack again with the arguments it
// first had, stopping it first (SIGTERM) if it still runs, and waits
// until it answers.
func (s *Stack) Restart(ctx context.Context, name string) error {
	p, err := s.proc(name)
	if err != nil {
		return err
	}
	if p.running() {
		if err := stopAll([]*proc{p}, s.Out); err != nil {
			return err
		}
	}
	// Its ports are free since it stopped: hold them until it binds them
	// again, or the Temporal dev server's internal services, which ask
	// for ports of their own as it starts, may take its UI's port.
	for _, addr := range s.listens(name) {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			err := freeport.Hold(addr)
			if err == nil || time.Now().After(deadline) {
				break
			}
		}
	}
	listen := p.listen
	if err := s.spawn(name, p.Bin, p.cred, p.env, p.args...); err != nil {
		return err
	}
	if q, err := s.proc(name); err == nil {
		q.listen = listen
	}
	return s.waitReady(ctx, name)
}

// listens are the addresses the named process of the stack listens on.
func (s *Stack) listens(name string) []string {
	l := s.Layout
	switch name {
	case "temporal":
		if !s.SQL {
			return []string{l.Temporal, l.UI}
		}
	case "worker":
		return []string{l.Metrics}
	}
	if p, err := s.proc(name); err == nil && p.listen != nil {
		return p.listen
	}
	for _, site := range l.Sites {
		if "sim-"+site.Name == name {
			return []string{site.GRPC, site.Data, site.Control}
		}
	}
	return nil
}

// waitReady waits until the named process answers: the Temporal frontend
// and UI, a site's control API; the worker, once it polls its task queue.
func (s *Stack) waitReady(ctx context.Context, name string) error {
	l := s.Layout
	var err error
	switch {
	case name == "temporal" && s.SQL:
		err = s.waitFor(ctx, 2*time.Minute, "the Temporal server", func() bool { return s.serverAnswers(ctx) })
	case name == "temporal":
		err = s.waitFor(ctx, 2*time.Minute, "the Temporal dev server", func() bool { return dials(l.Temporal) && answers("http://"+l.UI) })
	case name == "worker" || strings.HasPrefix(name, "worker-"):
		err = s.waitFor(ctx, time.Minute, name+" to poll its task queue", func() bool { return s.workerPolls(ctx, name) })
	case strings.HasPrefix(name, "sim-"):
		for _, site := range l.Sites {
			if "sim-"+site.Name == name {
				err = s.waitFor(ctx, 30*time.Second, "site "+site.Name, func() bool { return answers("http://" + site.Control + "/healthz") })
			}
		}
	}
	if err != nil {
		return s.withLog(err, name)
	}
	return nil
}

// WorkerIdentity is the identity the stack's worker of that name
// ("worker", or a further one's) polls with, and so completes its
// workflow and activity tasks with.
func (s *Stack) WorkerIdentity(name string) string { return "drover-stack-" + name + "@" + s.Dir }

// Client is the stack's Temporal client, with Drover's payload codec and
// a silent logger, dialled once; Stop closes it.
func (s *Stack) Client(ctx context.Context) (client.Client, error) {
	if s.StorageOnly {
		return nil, errors.New("a storage-only stack has no Temporal")
	}
	if s.temporal == nil {
		c, err := client.DialContext(ctx, client.Options{HostPort: s.Layout.Temporal, DataConverter: codec.Converter(),
			Logger: log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))})
		if err != nil {
			return nil, err
		}
		s.temporal = c
	}
	return s.temporal, nil
}

// workerPolls reports whether the named worker, as spawned last, has
// polled its task queue and says it is ready (/readyz): the worker's
// metrics answer before it has reached Temporal, and a worker that
// cannot start ends after that; a versioned worker turns ready once its
// build is registered with the deployment (and made current when the
// deployment had none).
func (s *Stack) workerPolls(ctx context.Context, name string) bool {
	p, err := s.proc(name)
	if err != nil {
		return false
	}
	if addrs := s.listens(name); len(addrs) == 0 || !ready("http://"+addrs[0]+"/readyz") {
		return false
	}
	c, err := s.Client(ctx)
	if err != nil {
		return false
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.DescribeTaskQueue(qctx, workflows.TaskQueue, enums.TASK_QUEUE_TYPE_WORKFLOW)
	if err != nil {
		return false
	}
	for _, poller := range resp.GetPollers() {
		// A second's slack: the server stamps the poll with its clock,
		// truncated.
		if poller.GetIdentity() == s.WorkerIdentity(name) && !poller.GetLastAccessTime().AsTime().Before(p.started.Add(-time.Second)) {
			return true
		}
	}
	return false
}

func (s *Stack) savePIDs() error {
	b, err := yaml.Marshal(s.procs)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.Dir, pidFile), b, 0o644)
}

func readPIDs(dir string) ([]*proc, error) {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return nil, err
	}
	var ps []*proc
	return ps, yaml.Unmarshal(b, &ps)
}

// alive keeps the processes that still run their recorded binary.
func alive(ps []*proc) []*proc {
	var out []*proc
	for _, p := range ps {
		if p.running() {
			out = append(out, p)
		}
	}
	return out
}

// running reports whether PID is alive and still the recorded binary (a
// PID can be reused after the process ended).
func (p *proc) running() bool {
	if p.done != nil {
		select {
		case <-p.done:
			return false
		default:
			return true
		}
	}
	if err := syscall.Kill(p.PID, 0); err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
	if err != nil {
		return false
	}
	argv0, _, _ := strings.Cut(string(b), "\x00")
	stat, _ := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/stat")
	if strings.Contains(string(stat), ") Z ") {
		return false // a zombie: ended, not yet reaped
	}
	return argv0 == p.Bin
}

// Stop ends the stack's processes, newest first: SIGTERM, then SIGKILL
// after 20 seconds. It returns the processes it had to kill.
func (s *Stack) Stop() error {
	if s.temporal != nil {
		s.temporal.Close()
		s.temporal = nil
	}
	err := stopAll(s.procs, s.Out)
	if err == nil {
		_ = os.Remove(filepath.Join(s.Dir, pidFile))
		if s.pgDir != "" {
			err = os.RemoveAll(s.pgDir)
		}
	}
	return err
}

// Down stops a detached stack from its pid file.
func Down(dir string, out io.Writer) error {
	ps, err := readPIDs(dir)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(out, "stack: nothing runs from %s\n", dir)
		return nil
	}
	if err != nil {
		return err
	}
	if err := stopAll(ps, out); err != nil {
		return err
	}
	return os.Remove(filepath.Join(dir, pidFile))
}

func stopAll(ps []*proc, out io.Writer) error {
	var errs []error
	for i := len(ps) - 1; i >= 0; i-- {
		p := ps[i]
		if !p.running() {
			continue
		}
		p.killed = true
		if err := syscall.Kill(p.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("stop %s (pid %d): %v", p.Name, p.PID, err))
			continue
		}
		deadline := time.Now().Add(20 * time.Second)
		for p.running() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if p.running() {
			if out != nil {
				fmt.Fprintf(out, "stack: %s (pid %d) ignored SIGTERM for 20s; killing it\n", p.Name, p.PID)
			}
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
			deadline = time.Now().Add(5 * time.Second)
			for p.running() && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
		}
		if p.running() {
			errs = append(errs, fmt.Errorf("%s (pid %d) is still running", p.Name, p.PID))
		} else if out != nil {
			fmt.Fprintf(out, "stack: stopped %s (pid %d)\n", p.Name, p.PID)
		}
	}
	return errors.Join(errs...)
}

// States reads every site's state through its control API, in the
// layout's order, for the simulator's invariant checker.
func (s *Stack) States(ctx context.Context) ([]*sim.State, error) {
	var out []*sim.State
	for _, site := range s.Layout.Sites {
		st, err := sim.NewControl(site.Control).State(ctx)
		if err != nil {
			return nil, fmt.Errorf("state of %s: %w", site.Name, err)
		}
		out = append(out, st)
	}
	return out, nil
}

// PIDs lists the stack's processes by name.
func (s *Stack) PIDs() map[string]int {
	m := map[string]int{}
	for _, p := range s.procs {
		m[p.Name] = p.PID
	}
	return m
}
