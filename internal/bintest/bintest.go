// Package bintest builds the project's commands for tests that run them
// as real processes, and runs those processes with their output captured
// and a guaranteed stop at the end of the test.
package bintest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
)

// Build compiles the named commands (directories under cmd/) into one
// temporary directory and returns it.
func Build(t testing.TB, cmds ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := BuildInto(dir, cmds...); err != nil {
		t.Fatal(err)
	}
	return dir
}

// BuildInto compiles the named commands into dir, for a TestMain that
// builds once for every test of its package.
func BuildInto(dir string, cmds ...string) error {
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %v", err)
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, c := range cmds {
		args = append(args, "./cmd/"+c)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(root)))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v: %v\n%s", cmds, err, out)
	}
	return nil
}

// LinkTemporal links the Temporal CLI into dir, where the stack looks for
// it beside the project's commands: the one make temporal built, or one
// built now (devserver.Ensure). It says what to run when there is none.
func LinkTemporal(dir string) error {
	temporal, err := devserver.Ensure()
	if err != nil {
		return err
	}
	return os.Symlink(temporal, filepath.Join(dir, "temporal"))
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
