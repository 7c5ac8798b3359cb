// Package bintest builds the project's commands for tests that run them
// as real processes, and runs those processes with their output captured
// and a guaranteed stop at the end of the test.
package bintest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/simtest"
)

// Build compiles the named commands (directories under cmd/) into one
// temporary directory and returns it.
func Build(t testing.TB, cmds ...string) string {
	t.Helper()
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, c := range cmds {
		args = append(args, "./cmd/"+c)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(root)))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", cmds, err, out)
	}
	return dir
}

// ExitCode is a finished command's exit code (-1 when it did not run).
func ExitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// Proc is a background process of a test.
type Proc struct {
	Cmd      *exec.Cmd
	Log      *simtest.Buffer
	done     chan error
	err      error
	finished bool
}

// Start runs bin with args and extra environment in the background; the
// test's cleanup kills it if it is still running.
func Start(t testing.TB, env []string, bin string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Cmd: exec.Command(bin, args...), Log: &simtest.Buffer{}, done: make(chan error, 1)}
	p.Cmd.Env = append(os.Environ(), env...)
	p.Cmd.Stdout, p.Cmd.Stderr = p.Log, p.Log
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { p.done <- p.Cmd.Wait() }()
	t.Cleanup(func() {
		if !p.finished {
			_ = p.Cmd.Process.Kill()
			p.Wait(10 * time.Second)
		}
	})
	return p
}

// Wait waits up to d for the process to end: whether it ended, and its
// error.
func (p *Proc) Wait(d time.Duration) (bool, error) {
	if p.finished {
		return true, p.err
	}
	select {
	case p.err = <-p.done:
		p.finished = true
		return true, p.err
	case <-time.After(d):
		return false, nil
	}
}
