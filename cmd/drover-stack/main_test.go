package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
)

// binaries builds the commands the stack runs and links the Temporal CLI
// beside them.
func binaries(t *testing.T) string {
	t.Helper()
	devserver.Need(t)
	dir := bintest.Build(t, "drover-stack", "drctl", "worker", "drover-sim")
	if err := bintest.LinkTemporal(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// under lists the processes whose command line names dir: everything the
// stack starts names its run directory.
func under(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(b), dir) {
			continue
		}
		if stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); strings.Contains(string(stat), ") Z ") {
			continue
		}
		out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
	}
	return out
}

func stackArgs(bin, dir string, args ...string) []string {
	return append(args, "--dir", dir, "--bin", bin, "--plan", "../../plans/examples/demo.yaml")
}

func stackCmd(bin, dir string, args ...string) (*exec.Cmd, *simtest.Buffer) {
	cmd := exec.Command(filepath.Join(bin, "drover-stack"), stackArgs(bin, dir, args...)...)
	out := &simtest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	return cmd, out
}

// startDemo runs the demo in the background.
func startDemo(t *testing.T, bin, dir string) *bintest.Proc {
	return bintest.Start(t, nil, filepath.Join(bin, "drover-stack"), stackArgs(bin, dir, "demo")...)
}

// TestDemo runs the demo as make demo does: it ends with the success line,
// the RTO, the RPO and the invariant check, and leaves no process behind.
func TestDemo(t *testing.T) {
	bin := binaries(t)
	dir := filepath.Join(t.TempDir(), "demo")
	demo := startDemo(t, bin, dir)
	out := demo.Log
	ended, err := demo.Wait(5 * time.Minute)
	if !ended {
		_ = demo.Cmd.Process.Signal(syscall.SIGINT)
		demo.Wait(time.Minute)
		t.Fatalf("the demo did not end within 5 minutes:\n%s", out)
	}
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{"demo: SUCCESS", "failover RTO:", "RPO estimate:", "failback:       0 write(s) lost", "invariants ok", "0 violations", "the failover ran pinned to build", "stack: stopped temporal"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
	if left := under(t, dir); len(left) > 0 {
		t.Fatalf("the demo left processes running: %q", left)
	}
	t.Logf("demo output (end):\n%s", tail(out.String(), 1500))
}

// TestDemoInterrupted: Ctrl-C in the middle of the failover stops
// everything the demo started.
func TestDemoInterrupted(t *testing.T) {
	bin := binaries(t)
	dir := filepath.Join(t.TempDir(), "demo")
	demo := startDemo(t, bin, dir)
	out := demo.Log
	simtest.Eventually(t, 3*time.Minute, "the demo to reach the failover", func() bool { return strings.Contains(out.String(), "$ drctl failover") })
	if n := len(under(t, dir)); n < 4 {
		t.Fatalf("only %d stack processes run mid-demo", n)
	}
	if err := demo.Cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	ended, err := demo.Wait(time.Minute)
	if !ended {
		t.Fatalf("the demo did not stop within a minute of SIGINT:\n%s", out)
	}
	if code := bintest.ExitCode(err); code != 130 {
		t.Fatalf("interrupted demo: exit %d, want 130\n%s", code, out)
	}
	if !strings.Contains(out.String(), "interrupted; everything it started is stopped") {
		t.Errorf("no interruption message:\n%s", tail(out.String(), 1000))
	}
	if left := under(t, dir); len(left) > 0 {
		t.Fatalf("the interrupted demo left processes running: %q", left)
	}
}

// TestUpDown: up leaves the stack running in the background, drctl works
// against it, and down stops every process up started.
func TestUpDown(t *testing.T) {
	bin := binaries(t)
	dir := filepath.Join(t.TempDir(), "stack")
	cmd, out := stackCmd(bin, dir, "up", "--ports", "free")
	t.Cleanup(func() {
		down, _ := stackCmd(bin, dir, "down")
		_ = down.Run()
	})
	if err := cmd.Run(); err != nil {
		t.Fatalf("up: %v\n%s", err, out)
	}
	if n := len(under(t, dir)); n != 6 {
		t.Fatalf("%d stack processes after up, want 6 (temporal, two sites, worker, two writers): %q", n, under(t, dir))
	}
	addr := ""
	for _, line := range strings.Split(out.String(), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "export TEMPORAL_ADDRESS="); ok {
			addr = v
		}
	}
	drctl := exec.Command(filepath.Join(bin, "drctl"), "protect", "start", filepath.Join(dir, "demo.yaml"))
	drctl.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+addr)
	if b, err := drctl.CombinedOutput(); err != nil || !strings.Contains(string(b), "protection of plan \"demo\" from east runs") {
		t.Fatalf("drctl against the stack: %v\n%s", err, b)
	}
	// The stack signed its plan and its worker trusts only its key: the
	// protection runs, signed.
	var status []byte
	simtest.Eventually(t, time.Minute, "the protection to run signed", func() bool {
		st := exec.Command(filepath.Join(bin, "drctl"), "status", "demo")
		st.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+addr)
		status, _ = st.CombinedOutput()
		return strings.Contains(string(status), "plan signed by key ")
	})
	if !strings.Contains(string(status), "running") {
		t.Fatalf("the protection does not run:\n%s", status)
	}
	// Temporal's database is in write-ahead-log mode (bytes 18 and 19 of
	// an SQLite file's header are 2 for WAL, 1 for the rollback journal).
	head, err := os.ReadFile(filepath.Join(dir, "temporal.db"))
	if err != nil {
		t.Fatal(err)
	}
	if len(head) < 20 || string(head[:16]) != "SQLite format 3\x00" || head[18] != 2 || head[19] != 2 {
		t.Fatalf("temporal.db's header %q: want an SQLite database in WAL mode (versions 2, 2)", head[:min(len(head), 20)])
	}
	again, aout := stackCmd(bin, dir, "up", "--ports", "free")
	if err := again.Run(); bintest.ExitCode(err) != 1 || !strings.Contains(aout.String(), "a stack already runs from") {
		t.Fatalf("second up: %v\n%s", err, aout)
	}
	down, dout := stackCmd(bin, dir, "down")
	if err := down.Run(); err != nil {
		t.Fatalf("down: %v\n%s", err, dout)
	}
	if left := under(t, dir); len(left) > 0 {
		t.Fatalf("down left processes running: %q", left)
	}
	if !strings.Contains(dout.String(), "stopped temporal") {
		t.Fatalf("down: %s", dout)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
