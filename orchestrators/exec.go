package orchestrators

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/drover-dr/drover/plans"
)

// MaxOutput is how much of a hook's output is kept: its last bytes, which
// is where the reason for a failure usually is. The output is read into a
// larger tail first and redacted there, so that a secret value the cut
// would split is replaced whole before the last MaxOutput bytes are kept.
const MaxOutput = 4 << 10

// readOutput is the tail of a hook's output read before redaction.
const readOutput = 64 << 10

// DefaultPath is a hook's PATH when the worker has none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Exec runs a site's hooks: the plan gives stop, start and health commands
// per workload; any CO that a shell can drive (systemd, Docker Compose,
// Swarm, Podman) fits.
//
// A hook's environment is PATH and HOME (the worker's, or defaults), the
// site's and the workload's env and secretEnv, and DROVER_PLAN,
// DROVER_SITE, DROVER_WORKLOAD, DROVER_ACTION and DROVER_HOOK: nothing
// else of the worker's environment, which holds storage secrets and
// Temporal credentials.
type Exec struct {
	// Shell runs each command as `Shell -c command` (default /bin/sh).
	Shell string
	// Env and SecretEnv are the site's hook environment; a workload's own
	// entries override them.
	Env       map[string]string
	SecretEnv map[string]plans.SecretKey
	// Secret resolves a secretEnv entry when a hook runs; nil refuses
	// every secretEnv entry.
	Secret func(plans.SecretKey) (string, error)
	// Redact, when set, is applied to the output kept from a hook, after
	// the values of the hook's own secrets are replaced.
	Redact func(string) string
	// Timeout bounds one hook when the workload sets none.
	Timeout time.Duration
}

// NewExec builds the adapter of a site's exec settings.
func NewExec(cfg plans.Exec) *Exec {
	return &Exec{Shell: cfg.Shell, Env: cfg.Env, SecretEnv: cfg.SecretEnv, Timeout: cfg.Timeout.D()}
}

// StopWorkload runs the stop hook.
func (x *Exec) StopWorkload(ctx context.Context, w Workload) (string, error) {
	h, err := hooks(w, "stop")
	if err != nil {
		return "", err
	}
	return x.run(ctx, w, "stop", h.Stop, h)
}

// WaitStopped confirms the stop. The stop hook must return only once the
// workload has stopped; a plan that cannot promise that (a hook that asks
// a supervisor to stop something and returns) gives a stopped hook, run
// every interval until it exits 0. A non-zero exit means not yet; its last
// line of output names what still runs.
func (x *Exec) WaitStopped(ctx context.Context, w Workload, every time.Duration, seen func(Stopped)) (Stopped, error) {
	h, err := hooks(w, "stopped")
	if err != nil {
		return Stopped{}, err
	}
	if strings.TrimSpace(h.Stopped) == "" {
		s := Stopped{Stopped: true, Detail: "no stopped hook: the stop hook's return confirms the stop"}
		if seen != nil {
			seen(s)
		}
		return s, nil
	}
	if every <= 0 {
		every = time.Second
	}
	last := Stopped{Detail: "the stopped hook has not answered yet"}
	for {
		out, err := x.run(ctx, w, "stopped", h.Stopped, h)
		var e *Error
		var exit *exec.ExitError
		switch {
		case err == nil:
			last = Stopped{Stopped: true, Detail: lastLine(out, "stopped hook exited 0")}
		case ctx.Err() != nil:
			return last, ctx.Err()
		case errors.As(err, &e) && errors.As(e.Err, &exit):
			still := lastLine(out, e.Msg)
			last = Stopped{Running: []string{still}, Detail: "still running: " + still}
		case IsTemporary(err):
			last.Detail = err.Error()
		default:
			return last, err
		}
		if seen != nil {
			seen(last)
		}
		if last.Stopped {
			return last, nil
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return last, ctx.Err()
		case <-t.C:
		}
	}
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
	if h.Stopped != "" {
		d += fmt.Sprintf(", stopped %q", h.Stopped)
	}
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
	env, secrets, err := x.hookEnv(w, op, h)
	if err != nil {
		return "", fail(op, w, false, err, "%s hook environment: %v", op, err)
	}
	cmd := exec.CommandContext(ctx, x.shell(), "-c", command)
	cmd.Env = env
	out := &tail{max: readOutput}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	err = cmd.Run()
	text := x.keep(out.String(), secrets)
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

// hookEnv is a hook's whole environment: PATH, HOME, the site's and then
// the workload's env and secretEnv, and what the hook is run for. It also
// returns the secret values it resolved, for redaction.
func (x *Exec) hookEnv(w Workload, op string, h *plans.ExecHooks) ([]string, []string, error) {
	vars := map[string]string{"PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME")}
	if vars["PATH"] == "" {
		vars["PATH"] = DefaultPath
	}
	if vars["HOME"] == "" {
		vars["HOME"] = "/"
	}
	var secrets []string
	layer := func(env map[string]string, secret map[string]plans.SecretKey) error {
		for k, v := range env {
			vars[k] = v
		}
		for _, k := range slices.Sorted(maps.Keys(secret)) {
			if x.Secret == nil {
				return fmt.Errorf("secretEnv %s: no secret resolver on this worker", k)
			}
			v, err := x.Secret(secret[k])
			if err != nil {
				return fmt.Errorf("secretEnv %s: %w", k, err)
			}
			vars[k] = v
			secrets = append(secrets, v)
		}
		return nil
	}
	if err := layer(x.Env, x.SecretEnv); err != nil {
		return nil, nil, err
	}
	if err := layer(h.Env, h.SecretEnv); err != nil {
		return nil, nil, err
	}
	vars["DROVER_PLAN"], vars["DROVER_SITE"], vars["DROVER_WORKLOAD"] = w.Plan, w.Site, w.Name
	vars["DROVER_ACTION"], vars["DROVER_HOOK"] = w.Action, op
	env := make([]string, 0, len(vars))
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		env = append(env, k+"="+vars[k])
	}
	return env, secrets, nil
}

// keep is the part of a hook's output a step keeps: every secret value
// replaced, then the last MaxOutput bytes.
func (x *Exec) keep(out string, secrets []string) string {
	out = Redact(out, secrets)
	if x.Redact != nil {
		out = x.Redact(out)
	}
	if len(out) <= MaxOutput {
		return out
	}
	cut := len(out) - MaxOutput
	for cut < len(out) && !utf8.RuneStart(out[cut]) {
		cut++
	}
	return "[…]" + strings.TrimPrefix(out[cut:], "[…]")
}

// Redacted replaces a secret value in text.
const Redacted = "[redacted]"

// Redact replaces every value of secrets found in s, longest first so
// that a value containing another is replaced whole. Values shorter than
// three bytes are left: replacing them would garble the text and hide
// nothing.
func Redact(s string, secrets []string) string {
	if s == "" || len(secrets) == 0 {
		return s
	}
	vals := make([]string, 0, len(secrets))
	for _, v := range secrets {
		if len(v) >= 3 {
			vals = append(vals, v)
		}
	}
	sort.Slice(vals, func(i, j int) bool { return len(vals[i]) > len(vals[j]) })
	for _, v := range vals {
		s = strings.ReplaceAll(s, v, Redacted)
	}
	return s
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
