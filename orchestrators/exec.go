package orchestrators

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/drover-dr/drover/plans"
)

// MaxOutput is how much of a hook's output is kept: its last bytes, which
// is where the reason for a failure usually is.
const MaxOutput = 16 << 10

// Exec runs a site's hooks: the plan gives stop, start and health commands
// per workload; any CO that a shell can drive (systemd, Docker Compose,
// Swarm, Podman) fits.
type Exec struct {
	// Shell runs each command as `Shell -c command` (default /bin/sh).
	Shell string
	// Env is added to the worker's environment for every hook.
	Env map[string]string
	// Timeout bounds one hook when the workload sets none.
	Timeout time.Duration
}

// NewExec builds the adapter of a site's exec settings.
func NewExec(cfg plans.Exec) *Exec {
	return &Exec{Shell: cfg.Shell, Env: cfg.Env, Timeout: cfg.Timeout.D()}
}

// StopWorkload runs the stop hook.
func (x *Exec) StopWorkload(ctx context.Context, w Workload) (string, error) {
	h, err := hooks(w, "stop")
	if err != nil {
		return "", err
	}
	return x.run(ctx, w, "stop", h.Stop, h)
}

// StartWorkload runs the start hook.
func (x *Exec) StartWorkload(ctx context.Context, w Workload) (string, error) {
	h, err := hooks(w, "start")
	if err != nil {
		return "", err
	}
	return x.run(ctx, w, "start", h.Start, h)
}

// CheckHealth runs the health hook: exit 0 is healthy, anything else not
// yet. Without a health hook a started workload counts as healthy.
func (x *Exec) CheckHealth(ctx context.Context, w Workload) (Health, error) {
	h, err := hooks(w, "health")
	if err != nil {
		return Health{}, err
	}
	if strings.TrimSpace(h.Health) == "" {
		return Health{Healthy: true, Detail: "no health hook: healthy once started"}, nil
	}
	out, err := x.run(ctx, w, "health", h.Health, h)
	if err == nil {
		return Health{Healthy: true, Detail: lastLine(out, "health hook exited 0")}, nil
	}
	var e *Error
	if errors.As(err, &e) && e.Err != nil {
		var exit *exec.ExitError
		if errors.As(e.Err, &exit) {
			return Health{Detail: lastLine(out, e.Msg)}, nil
		}
	}
	return Health{}, err
}

// DescribeWorkload reports the hooks; it runs nothing, since a hook may
// change state.
func (x *Exec) DescribeWorkload(_ context.Context, w Workload) (Description, error) {
	h, err := hooks(w, "describe")
	if err != nil {
		return Description{}, err
	}
	shell := x.shell()
	if _, err := exec.LookPath(shell); err != nil {
		return Description{}, fail("describe", w, false, err, "shell %s: %v", shell, err)
	}
	d := fmt.Sprintf("exec hooks via %s: start %q, stop %q", shell, h.Start, h.Stop)
	if h.Health != "" {
		d += fmt.Sprintf(", health %q", h.Health)
	}
	return Description{Exists: true, Detail: d}, nil
}

func hooks(w Workload, op string) (*plans.ExecHooks, error) {
	if w.Exec == nil {
		return nil, fail(op, w, false, nil, "the plan gives no exec hooks for this workload on this site")
	}
	return w.Exec, nil
}

func (x *Exec) shell() string {
	if x.Shell != "" {
		return x.Shell
	}
	return plans.DefaultShell
}

// run runs one hook under its timeout in a process group of its own, so
// that a timeout also ends whatever the hook started.
func (x *Exec) run(ctx context.Context, w Workload, op, command string, h *plans.ExecHooks) (string, error) {
	timeout := h.Timeout.D()
	if timeout <= 0 {
		timeout = x.Timeout
	}
	if timeout <= 0 {
		timeout = plans.DefaultExecTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, x.shell(), "-c", command)
	cmd.Env = hookEnv(x.Env, w, op)
	out := &tail{max: MaxOutput}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	text := out.String()
	if err == nil {
		return text, nil
	}
	if ctx.Err() == context.DeadlineExceeded {
		e := fail(op, w, true, err, "%s hook timed out after %v", op, timeout)
		e.Output = text
		return text, e
	}
	if ctx.Err() != nil {
		return text, ctx.Err()
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code := exit.ExitCode()
		retry := slices.Contains(h.RetryExitCodes, code)
		if h.RetryExitCodes == nil {
			retry = code == plans.DefaultRetryExitCode
		}
		e := fail(op, w, retry, err, "%s hook exited %d", op, code)
		e.Output = text
		return text, e
	}
	return text, fail(op, w, false, err, "run %s hook with %s: %v", op, x.shell(), err)
}

// hookEnv is the worker's environment, the site's extra variables, and
// what the hook is run for.
func hookEnv(extra map[string]string, w Workload, op string) []string {
	env := os.Environ()
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+extra[k])
	}
	return append(env,
		"DROVER_PLAN="+w.Plan,
		"DROVER_SITE="+w.Site,
		"DROVER_WORKLOAD="+w.Name,
		"DROVER_ACTION="+w.Action,
		"DROVER_HOOK="+op,
	)
}

func lastLine(out, fallback string) string {
	out = strings.TrimSpace(out)
	if out == "" {
		return fallback
	}
	if i := strings.LastIndexByte(out, '\n'); i >= 0 {
		return out[i+1:]
	}
	return out
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu        sync.Mutex
	max       int
	buf       bytes.Buffer
	truncated bool
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.max {
		t.buf.Reset()
		p = p[len(p)-t.max:]
		t.truncated = true
	} else if over := t.buf.Len() + len(p) - t.max; over > 0 {
		t.buf.Next(over)
		t.truncated = true
	}
	t.buf.Write(p)
	return n, nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.truncated {
		return "[…]" + t.buf.String()
	}
	return t.buf.String()
}
