// Package devserver runs the real Temporal dev server (`temporal server
// start-dev`, built from its Go module by `make temporal`) for tests, bound
// to loopback and stopped when the test ends. A test that needs it and
// finds no CLI builds one as `make temporal` does, or fails saying how to
// get it: it never skips (Ensure, Need).
package devserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/drover-dr/drover/internal/codec"
	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/internal/simtest"
)

// Binary finds the temporal CLI: $DROVER_TEMPORAL, else bin/temporal in the
// module root, else temporal on PATH. It returns "" when there is none.
func Binary() string {
	if p := os.Getenv("DROVER_TEMPORAL"); p != "" {
		return p
	}
	if root := moduleRoot(); root != "" {
		p := filepath.Join(root, "bin", "temporal")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("temporal"); err == nil {
		return p
	}
	return ""
}

// moduleRoot is the directory of the go.mod above the working directory
// (a test runs in its package's directory), or "".
func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}

// howToGet is what a test that cannot find or build the CLI says.
const howToGet = "the Temporal dev server is needed and not built: run `make temporal` " +
	"(it builds the Temporal CLI into bin/), or set DROVER_TEMPORAL to a temporal CLI"

// Ensure returns the temporal CLI, building it when Binary finds none:
// into the module's bin/, from the Temporal CLI's Go module at the version
// the Makefile pins (TEMPORAL_CLI), as `make temporal` does. Test packages
// that run at once build it once: each waits for a lock in bin/ and looks
// again. When it cannot be built, the error says how to get it.
func Ensure() (string, error) {
	if p := Binary(); p != "" {
		return p, nil
	}
	root := moduleRoot()
	if root == "" {
		return "", errors.New(howToGet)
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		return "", fmt.Errorf("%s (%v)", howToGet, err)
	}
	m := regexp.MustCompile(`(?m)^TEMPORAL_CLI\s*\?=\s*(\S+)`).FindSubmatch(mk)
	if m == nil {
		return "", fmt.Errorf("%s (the Makefile pins no TEMPORAL_CLI)", howToGet)
	}
	bin := filepath.Join(root, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", fmt.Errorf("%s (%v)", howToGet, err)
	}
	lock, err := os.OpenFile(filepath.Join(bin, ".temporal.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("%s (%v)", howToGet, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("%s (lock %s: %v)", howToGet, lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	target := filepath.Join(bin, "temporal")
	if _, err := os.Stat(target); err == nil {
		return target, nil // another package built it meanwhile
	}
	fmt.Fprintf(os.Stderr, "devserver: building the Temporal CLI %s into %s (first time only, a few minutes)\n", m[1], bin)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", "github.com/temporalio/cli/cmd/temporal@"+string(m[1]))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOBIN="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		tail := strings.TrimSpace(string(out))
		if len(tail) > 2000 {
			tail = "…" + tail[len(tail)-2000:]
		}
		return "", fmt.Errorf("%s; building it here failed: %v\n%s", howToGet, err, tail)
	}
	return target, nil
}

// Need is Ensure for a test: the CLI, found or built, or the test fails
// saying how to get it. A test that needs the dev server never skips: a
// safety test that skips in silence guards nothing.
func Need(t testing.TB) string {
	t.Helper()
	p, err := Ensure()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Server is a running dev server and a client of it.
type Server struct {
	Client client.Client
	srv    *testsuite.DevServer
	log    *simtest.Buffer

	stop    sync.Once
	stopErr error
}

// Warnings returns the lines of the server's log that contain any of the
// substrings (the server logs at warn level and above).
func (s *Server) Warnings(subs ...string) []string {
	var out []string
	for _, line := range strings.Split(s.log.String(), "\n") {
		for _, sub := range subs {
			if strings.Contains(line, sub) {
				out = append(out, line)
				break
			}
		}
	}
	return out
}

// Start runs a dev server for the test, with logger for its client (nil:
// discard). Without the binary it builds it (Need), or fails the test
// saying how to get it: it never skips.
func Start(t testing.TB, logger log.Logger) *Server {
	t.Helper()
	bin := Need(t)
	if logger == nil {
		logger = log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	lb := &simtest.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:  withParent(t, bin),
		ClientOptions: &client.Options{Logger: logger, DataConverter: codec.Converter()},
		LogLevel:      "warn",
		ExtraArgs:     searchAttributes(),
		Stdout:        lb,
		Stderr:        lb,
	})
	if err != nil {
		t.Fatalf("start the Temporal dev server (%s): %v", bin, err)
	}
	s := &Server{Client: srv.Client(), srv: srv, log: lb}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Logf("stop the Temporal dev server: %v", err)
		}
	})
	return s
}

// withParent returns a command that runs bin so that it is killed when the
// test binary that starts it dies: a test that times out panics past its
// cleanups, and a killed one runs none, which left dev servers running
// with no parent. It is a script beside bin that execs bin under setpriv
// --pdeathsig KILL (util-linux); without setpriv, bin itself.
func withParent(t testing.TB, bin string) string {
	t.Helper()
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return bin
	}
	script := "#!/bin/sh\n# Written by the tests (internal/devserver): the dev server dies with its parent.\nexec " +
		shellQuote(setpriv) + " --pdeathsig KILL -- " + shellQuote(bin) + " \"$@\"\n"
	path := bin + ".with-parent"
	if b, err := os.ReadFile(path); err == nil && string(b) == script {
		return path
	}
	// Several test binaries may write it at once: each renames its own.
	tmp := fmt.Sprintf("%s.%d", path, os.Getpid())
	if err := os.WriteFile(tmp, []byte(script), 0o755); err != nil {
		t.Logf("the dev server will not die with its parent: %v", err)
		return bin
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		t.Logf("the dev server will not die with its parent: %v", err)
		return bin
	}
	return path
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Stop stops the server before the test ends, for a test of what its
// clients do when it is gone; the test's cleanup does not stop it again.
func (s *Server) Stop() error {
	s.stop.Do(func() { s.stopErr = s.srv.Stop() })
	return s.stopErr
}

// searchAttributes registers Drover's search attributes, as an operator
// must on a real cluster.
func searchAttributes() []string {
	var args []string
	for _, name := range names.SearchAttributes {
		args = append(args, "--search-attribute", name+"=Keyword")
	}
	return args
}

// Address is the frontend host:port.
func (s *Server) Address() string { return s.srv.FrontendHostPort() }

// String describes the server for test logs.
func (s *Server) String() string { return fmt.Sprintf("temporal dev server at %s", s.Address()) }

// BareNamespace registers namespace name without Drover's search
// attributes (as an operator who has not registered them has it) and
// returns a client of it once it takes work: first, the namespace is
// known to every part of the server only after a moment, so start is
// tried until it no longer answers that the namespace is not found, and
// any other error fails the test. The client is closed when the test
// ends.
func (s *Server) BareNamespace(t testing.TB, name string, start func(client.Client) error) client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Client.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: name, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)}); err != nil {
		t.Fatalf("register namespace %s: %v", name, err)
	}
	c, err := client.NewClientFromExisting(s.Client, client.Options{Namespace: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	simtest.Eventually(t, 30*time.Second, "namespace "+name+" to take work", func() bool {
		err := start(c)
		var nf *serviceerror.NamespaceNotFound
		if errors.As(err, &nf) {
			return false
		}
		if err != nil {
			t.Fatalf("in namespace %s: %v", name, err)
		}
		return true
	})
	return c
}
