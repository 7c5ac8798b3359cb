package devserver_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/workflows"
)

// TestWarningsSeen: the server's size warnings reach Warnings, so a test
// that finds none has really looked. 700 KiB of random bytes (which the
// client's codec cannot shrink) are over the 512 KiB blob warn limit.
func TestWarningsSeen(t *testing.T) {
	srv := devserver.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	noise := make([]byte, 700<<10)
	if _, err := rand.Read(noise); err != nil {
		t.Fatal(err)
	}
	run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "big-input", TaskQueue: "nobody-polls"},
		"Anything", noise)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Client.TerminateWorkflow(context.Background(), run.GetID(), "", "test over")
	for len(srv.Warnings("exceeds the warning limit")) == 0 {
		if ctx.Err() != nil {
			t.Fatal("no blob size warning in the server's log")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if w := srv.Warnings("exceeds the warning limit"); !strings.Contains(w[0], "big-input") {
		t.Fatalf("warning %q does not name the workflow", w[0])
	}
}

// TestSearchAttributesRegistered: the dev server has Drover's search
// attributes, as an operator registers them on a real namespace.
func TestSearchAttributesRegistered(t *testing.T) {
	srv := devserver.Start(t, nil)
	missing, err := workflows.MissingAttributes(context.Background(), srv.Client, "default")
	if err != nil || len(missing) != 0 {
		t.Fatalf("missing %v, %v", missing, err)
	}
}

// TestEnsureBuildsOrSaysHowToGetIt: without a CLI to find, Ensure builds
// one at the Makefile's pin into the module's bin/, and when that fails
// (here: a version no proxy serves, with the proxy off) its error says to
// run make temporal; a CLI in bin/ is found without building. A test that
// needs the dev server thus never skips in silence.
func TestEnsureBuildsOrSaysHowToGetIt(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":   "module example.com/fresh\n",
		"Makefile": "TEMPORAL_CLI ?= v0.0.99-none\n",
	} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("DROVER_TEMPORAL", "")
	t.Setenv("PATH", filepath.Dir(goBin)) // no temporal on it
	t.Setenv("GOPROXY", "off")
	t.Chdir(root)
	_, err = devserver.Ensure()
	if err == nil || !strings.Contains(err.Error(), "run `make temporal`") || !strings.Contains(err.Error(), "v0.0.99-none") {
		t.Fatalf("Ensure without a CLI or a way to build it: %v, want the build's failure and how to get it", err)
	}
	// Need, which Start calls, fails the test with it: no skip, CI or not.
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		rec := &outcome{TB: t}
		devserver.Need(rec)
		if rec.skipped != "" || !strings.Contains(rec.failed, "run `make temporal`") {
			t.Fatalf("Need with CI=%q: skipped %q, failed %q; want a failure saying to run make temporal", ci, rec.skipped, rec.failed)
		}
	}
	cli := filepath.Join(root, "bin", "temporal")
	if err := os.WriteFile(cli, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := devserver.Ensure(); err != nil || got != cli {
		t.Fatalf("Ensure with bin/temporal: %q, %v; want %s", got, err, cli)
	}
}

// outcome is a test's view of what Need did to it: failed or skipped,
// with the message (it does not stop the calling goroutine).
type outcome struct {
	testing.TB
	failed, skipped string
}

func (o *outcome) Helper()                   {}
func (o *outcome) Fatal(args ...any)         { o.failed = fmt.Sprint(args...) }
func (o *outcome) Fatalf(f string, a ...any) { o.failed = fmt.Sprintf(f, a...) }
func (o *outcome) Skip(args ...any)          { o.skipped = fmt.Sprint(args...) }
func (o *outcome) Skipf(f string, a ...any)  { o.skipped = fmt.Sprintf(f, a...) }
func (o *outcome) SkipNow()                  { o.skipped = "SkipNow" }

// TestServerDiesWithItsTest: a test binary that dies without its cleanups
// (a timeout's panic, a kill) takes the dev server it started with it,
// where it used to leave it running with no parent. The test runs itself
// again as such a binary: it starts a server, says where it listens and
// exits at once.
func TestServerDiesWithItsTest(t *testing.T) {
	if os.Getenv("DROVER_DEVSERVER_ORPHAN") != "" {
		srv := devserver.Start(t, nil)
		fmt.Println("frontend", srv.Address())
		// Idle, as a server is when its test hangs: nothing of it writes
		// to its output, whose pipe the exit breaks.
		srv.Client.Close()
		time.Sleep(3 * time.Second)
		os.Exit(3) // no cleanup runs, as after a timeout
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestServerDiesWithItsTest$")
	cmd.Env = append(os.Environ(), "DROVER_DEVSERVER_ORPHAN=1")
	out, _ := cmd.Output()
	var addr string
	for _, line := range strings.Split(string(out), "\n") {
		if a, ok := strings.CutPrefix(line, "frontend "); ok {
			addr = strings.TrimSpace(a)
		}
	}
	if addr == "" {
		t.Fatalf("the child test started no server:\n%s", out)
	}
	listens := func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	for end := time.Now().Add(30 * time.Second); listens(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(end) {
			killListener(t, addr)
			t.Fatalf("the dev server at %s outlived the test binary that started it", addr)
		}
	}
}

// killListener ends the process that listens on addr: the orphaned server
// this test's child started.
func killListener(t *testing.T, addr string) {
	_, port, _ := strings.Cut(addr, ":")
	out, _ := exec.Command("ss", "-Hltnp", "sport = :"+port).Output()
	for _, f := range strings.Split(string(out), "pid=")[1:] {
		var pid int
		if _, err := fmt.Sscanf(f, "%d", &pid); err == nil && pid > 1 {
			t.Logf("ending the orphaned server (pid %d)", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
