// Package devserver runs the real Temporal dev server (`temporal server
// start-dev`, built from its Go module by `make temporal`) for tests, bound
// to loopback and stopped when the test ends.
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
	"strings"
	"sync"
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
	if dir, err := os.Getwd(); err == nil {
		for d := dir; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				p := filepath.Join(d, "bin", "temporal")
				if _, err := os.Stat(p); err == nil {
					return p
				}
				break
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if p, err := exec.LookPath("temporal"); err == nil {
		return p
	}
	return ""
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
// discard). Without the binary the test is skipped with the command that
// builds it, except under CI, where that is a failure.
func Start(t testing.TB, logger log.Logger) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		msg := "the Temporal dev server is not built: run `make temporal` (or set DROVER_TEMPORAL)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if logger == nil {
		logger = log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	lb := &simtest.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:  bin,
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
