package stack

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/freeport"
	"github.com/drover-dr/drover/internal/names"
)

// The production-like Temporal of Options.SQL: the Temporal server built
// from its Go module (bin/temporal-server) with its SQL tool
// (bin/temporal-sql-tool), on a throwaway PostgreSQL cluster of the
// machine's PostgreSQL binaries. The setup is the one docs/guides/deploy-nomad.md
// ("Running it for real") gives an operator: both schemas with the SQL
// tool, then the namespace and Drover's search attributes with the
// temporal CLI.

// SQLNamespace is the namespace the SQL stack creates, and its retention.
const (
	SQLNamespace = "default"
	SQLRetention = "72h"
)

// SearchAttributes are the custom search attributes Drover's workflows
// carry, registered on the namespace as an operator must.
var SearchAttributes = names.SearchAttributes

// sqlUser and sqlPassword are the throwaway cluster's database role.
const (
	sqlUser     = "temporal"
	sqlPassword = "temporal"
)

// PostgresBin finds the directory of PostgreSQL's server programs:
// $DROVER_POSTGRES_BIN, else initdb on PATH, else the newest of Debian's
// /usr/lib/postgresql/*/bin. It returns "" when there is none.
func PostgresBin() string {
	if d := os.Getenv("DROVER_POSTGRES_BIN"); d != "" {
		return d
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(real)
		}
		return filepath.Dir(p)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) < pgVersion(dirs[j]) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i]
		}
	}
	return ""
}

func pgVersion(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// sqlPorts are the ports of PostgreSQL and the server's services beside
// the frontend (Layout.Temporal).
type sqlPorts struct {
	postgres                         int
	frontendMembership, frontendHTTP int
	history, historyMembership       int
	matching, matchingMembership     int
	worker, workerMembership         int
	metrics                          int
}

func freeSQLPorts() (sqlPorts, error) {
	var p sqlPorts
	for _, port := range []*int{&p.postgres, &p.frontendHTTP, &p.history, &p.matching, &p.worker, &p.metrics} {
		n, err := freeport.Port("127.0.0.1")
		if err != nil {
			return p, err
		}
		*port = n
	}
	// The server records its services' membership ports in a smallint
	// column of its SQL schema: they must be below 32768, where Linux
	// hands out no ephemeral port either.
	used := map[int]bool{}
	for _, port := range []*int{&p.frontendMembership, &p.historyMembership, &p.matchingMembership, &p.workerMembership} {
		n, err := lowPort(used)
		if err != nil {
			return p, err
		}
		*port = n
	}
	return p, nil
}

// lowPort picks a port of 20000-32767 that 127.0.0.1 can bind now and
// that is not in used.
func lowPort(used map[int]bool) (int, error) {
	for range 100 {
		n := 20000 + rand.IntN(32768-20000)
		if used[n] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(n)))
		if err != nil {
			continue
		}
		l.Close()
		used[n] = true
		return n, nil
	}
	return 0, errors.New("no free port below 32768 on 127.0.0.1 for the Temporal server's membership")
}

// postgresCredential is who runs PostgreSQL: this process's user, or the
// postgres user of Debian's packages when this process is root (initdb
// and postgres refuse to run as root).
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root and there is no postgres user to run it as (%v): install Debian's postgresql package or run as another user", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// startSQL starts PostgreSQL in a fresh cluster, sets up Temporal's two
// schemas, starts the Temporal server on them, and creates the namespace
// and the search attributes. What it started, Stop stops.
func (s *Stack) startSQL(ctx context.Context) error {
	pgBin := PostgresBin()
	if pgBin == "" {
		return errors.New("PostgreSQL is not installed: install Debian's postgresql package (apt-get install postgresql) or set DROVER_POSTGRES_BIN to the directory of initdb")
	}
	for _, name := range []string{"temporal-server", "temporal-sql-tool", "temporal"} {
		if _, err := os.Stat(filepath.Join(s.Bin, name)); err != nil {
			return fmt.Errorf("%s is not built (%v): run make temporal-server temporal", filepath.Join(s.Bin, name), err)
		}
	}
	ports, err := freeSQLPorts()
	if err != nil {
		return err
	}
	cred, err := postgresCredential()
	if err != nil {
		return err
	}
	// The cluster lives outside Dir, whose parents may be closed to the
	// postgres user; Stop removes it.
	s.pgDir, err = os.MkdirTemp("", "drover-postgresql-")
	if err != nil {
		return err
	}
	if cred != nil {
		if err := os.Chown(s.pgDir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	pwfile := filepath.Join(s.pgDir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(sqlPassword+"\n"), 0o600); err != nil {
		return err
	}
	if cred != nil {
		if err := os.Chown(pwfile, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	data := filepath.Join(s.pgDir, "data")
	s.say("initialising a PostgreSQL cluster in %s (%s)", data, pgBin)
	initdb := exec.CommandContext(ctx, filepath.Join(pgBin, "initdb"), "-D", data, "-U", sqlUser, "--pwfile", pwfile,
		"--auth", "scram-sha-256", "-E", "UTF8", "--locale", "C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}
	s.say("starting PostgreSQL on 127.0.0.1:%d", ports.postgres)
	if err := s.spawn("postgresql", filepath.Join(pgBin, "postgres"), cred, nil, "-D", data, "-p", strconv.Itoa(ports.postgres),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+s.pgDir, "-c", "max_connections=200"); err != nil {
		return err
	}
	pgAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports.postgres))
	if err := s.waitFor(ctx, time.Minute, "PostgreSQL", func() bool {
		return exec.CommandContext(ctx, filepath.Join(pgBin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(ports.postgres)).Run() == nil
	}); err != nil {
		return s.withLog(err, "postgresql")
	}
	if err := s.setupSchemas(ctx, ports.postgres); err != nil {
		return err
	}
	root := filepath.Join(s.Dir, "temporal-server")
	if err := writeServerConfig(root, s.Layout.Temporal, pgAddr, ports); err != nil {
		return err
	}
	s.say("starting the Temporal server on %s (PostgreSQL at %s)", s.Layout.Temporal, pgAddr)
	if err := s.Spawn("temporal", filepath.Join(s.Bin, "temporal-server"), nil,
		"--root", root, "--config", "config", "--env", "temporal", "--allow-no-auth", "start"); err != nil {
		return err
	}
	if err := s.waitReady(ctx, "temporal"); err != nil {
		return err
	}
	return s.createNamespace(ctx)
}

// setupSchemas creates Temporal's two databases and their schemas at the
// server's version, with the server's own SQL tool.
func (s *Stack) setupSchemas(ctx context.Context, port int) error {
	for _, db := range []struct{ name, schema string }{{"temporal", "postgresql/v12/temporal"}, {"temporal_visibility", "postgresql/v12/visibility"}} {
		s.say("setting up database %s (schema %s)", db.name, db.schema)
		base := []string{"--plugin", "postgres12", "--ep", "127.0.0.1", "-p", strconv.Itoa(port), "-u", sqlUser, "--pw", sqlPassword, "--db", db.name}
		for _, step := range [][]string{{"create-database"}, {"setup-schema", "-v", "0.0"}, {"update-schema", "--schema-name", db.schema}} {
			if err := s.runTool(ctx, "temporal-sql-tool", append(base, step...)...); err != nil {
				return err
			}
		}
	}
	return nil
}

// createNamespace creates the namespace with its retention and registers
// Drover's search attributes on it, with the temporal CLI.
func (s *Stack) createNamespace(ctx context.Context) error {
	s.say("creating namespace %s (retention %s) and search attributes %s", SQLNamespace, SQLRetention, strings.Join(SearchAttributes, ", "))
	if err := s.runTool(ctx, "temporal", "operator", "namespace", "create", "--address", s.Layout.Temporal,
		"--namespace", SQLNamespace, "--retention", SQLRetention); err != nil {
		return err
	}
	args := []string{"operator", "search-attribute", "create", "--address", s.Layout.Temporal, "--namespace", SQLNamespace}
	for _, name := range SearchAttributes {
		args = append(args, "--name", name, "--type", "Keyword")
	}
	// The server's frontends see a new namespace only at their next
	// namespace cache refresh (seconds): until then the call answers that
	// the namespace is not found. Creating the same attributes again is
	// a no-op, so retry.
	deadline := time.Now().Add(time.Minute)
	for {
		err := s.runTool(ctx, "temporal", args...)
		if err == nil || time.Now().After(deadline) || !strings.Contains(err.Error(), "not found") {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Second):
		}
	}
}

// runTool runs a program of Bin to its end, its output in tools.log.
func (s *Stack) runTool(ctx context.Context, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(s.Bin, name), args...).CombinedOutput()
	if f, ferr := os.OpenFile(s.logPath("tools"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); ferr == nil {
		fmt.Fprintf(f, "$ %s %s\n%s\n", name, strings.Join(args, " "), out)
		f.Close()
	}
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// serverAnswers reports whether the Temporal server's frontend answers
// its health check.
func (s *Stack) serverAnswers(ctx context.Context) bool {
	if !dials(s.Layout.Temporal) {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := s.Client(cctx)
	if err != nil {
		return false
	}
	_, err = c.CheckHealth(cctx, &client.CheckHealthRequest{})
	return err == nil
}

// writeServerConfig writes the server's configuration as root/config/temporal.yaml:
// PostgreSQL for both stores, every service on loopback.
func writeServerConfig(root, frontend, pgAddr string, p sqlPorts) error {
	host, fport, err := net.SplitHostPort(frontend)
	if err != nil {
		return err
	}
	store := func(db string, conns int) string {
		return fmt.Sprintf(`      sql:
        pluginName: postgres12
        databaseName: %s
        connectAddr: %q
        connectProtocol: tcp
        user: %s
        password: %s
        maxConns: %d
        maxIdleConns: %d
        maxConnLifetime: 1h
`, db, pgAddr, sqlUser, sqlPassword, conns, conns)
	}
	service := func(name string, grpc, membership int, extra string) string {
		return fmt.Sprintf("  %s:\n    rpc:\n      grpcPort: %d\n      membershipPort: %d\n      bindOnIP: %s\n%s", name, grpc, membership, host, extra)
	}
	fp, _ := strconv.Atoi(fport)
	cfg := `log:
  stdout: true
  level: warn
persistence:
  defaultStore: default
  visibilityStore: visibility
  numHistoryShards: 4
  datastores:
    default:
` + store("temporal", 20) + `    visibility:
` + store("temporal_visibility", 10) + `global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: ` + host + `
  metrics:
    prometheus:
      framework: tally
      timerType: histogram
      listenAddress: "` + net.JoinHostPort(host, strconv.Itoa(p.metrics)) + `"
services:
` + service("frontend", fp, p.frontendMembership, fmt.Sprintf("      httpPort: %d\n", p.frontendHTTP)) +
		service("history", p.history, p.historyMembership, "") +
		service("matching", p.matching, p.matchingMembership, "") +
		service("worker", p.worker, p.workerMembership, "") + `clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: "` + frontend + `"
dcRedirectionPolicy:
  policy: noop
`
	dir := filepath.Join(root, "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "temporal.yaml"), []byte(cfg), 0o644)
}
