package orchestrators_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/orchestrators"
	"github.com/drover-dr/drover/plans"
)

func execWorkload(h plans.ExecHooks) orchestrators.Workload {
	return orchestrators.Workload{Plan: "shop", Site: "west", Name: "pg", Action: "failover", Exec: &h}
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestExecHooks(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "running")
	x := orchestrators.NewExec(plans.Exec{Shell: "/bin/sh", Env: map[string]string{"MARKER": marker}, Timeout: plans.Duration(10 * time.Second)})
	w := execWorkload(plans.ExecHooks{
		Start:  `echo "starting $DROVER_WORKLOAD on $DROVER_SITE for $DROVER_ACTION of $DROVER_PLAN ($DROVER_HOOK)"; touch "$MARKER"`,
		Stop:   `rm -f "$MARKER"; echo stopped >&2`,
		Health: `test -e "$MARKER" || { echo "no marker"; exit 1; }`,
	})
	ctx := ctxT(t)

	h, err := x.CheckHealth(ctx, w)
	if err != nil || h.Healthy || h.Detail != "no marker" {
		t.Fatalf("health before start = %+v, %v; want not healthy, detail from the hook's output", h, err)
	}
	out, err := x.StartWorkload(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	if want := "starting pg on west for failover of shop (start)\n"; out != want {
		t.Fatalf("start output %q, want %q", out, want)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the start hook did not run: %v", err)
	}
	if h, err := x.CheckHealth(ctx, w); err != nil || !h.Healthy {
		t.Fatalf("health after start = %+v, %v", h, err)
	}
	out, err = x.StopWorkload(ctx, w)
	if err != nil || out != "stopped\n" {
		t.Fatalf("stop = %q, %v; want stderr captured", out, err)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatal("the stop hook did not run")
	}
	d, err := x.DescribeWorkload(ctx, w)
	if err != nil || !d.Exists || !strings.Contains(d.Detail, "/bin/sh") {
		t.Fatalf("describe = %+v, %v", d, err)
	}
	noHealth := execWorkload(plans.ExecHooks{Start: "true", Stop: "true"})
	if h, err := x.CheckHealth(ctx, noHealth); err != nil || !h.Healthy {
		t.Fatalf("no health hook = %+v, %v; want healthy", h, err)
	}
}

func TestExecFailures(t *testing.T) {
	x := orchestrators.NewExec(plans.Exec{Shell: "/bin/sh", Timeout: plans.Duration(10 * time.Second)})
	ctx := ctxT(t)
	for _, tc := range []struct {
		name      string
		hooks     plans.ExecHooks
		temporary bool
		msg       string
		output    string
	}{
		{"failure exit code", plans.ExecHooks{Start: "echo 'unit pg.service not found' >&2; exit 3"}, false, "start hook exited 3", "unit pg.service not found"},
		{"try-again exit code (default 75)", plans.ExecHooks{Start: "echo busy; exit 75"}, true, "start hook exited 75", "busy"},
		{"the plan's try-again codes", plans.ExecHooks{Start: "exit 4", RetryExitCodes: []int{4, 5}}, true, "start hook exited 4", ""},
		{"an empty list (retryExitCodes: []): no code tries again", plans.ExecHooks{Start: "exit 75", RetryExitCodes: plans.ExitCodes{}}, false, "start hook exited 75", ""},
		{"75 is not special when the plan lists others", plans.ExecHooks{Start: "exit 75", RetryExitCodes: []int{4}}, false, "start hook exited 75", ""},
		{"timeout ends the hook and its children", plans.ExecHooks{Start: "echo begun; sleep 30 & wait", Timeout: plans.Duration(200 * time.Millisecond)}, true, "start hook timed out after 200ms", "begun"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := x.StartWorkload(ctx, execWorkload(tc.hooks))
			var e *orchestrators.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T), want *orchestrators.Error", err, err)
			}
			if e.Temporary != tc.temporary || orchestrators.IsTemporary(err) != tc.temporary {
				t.Fatalf("temporary = %v, want %v (%v)", e.Temporary, tc.temporary, err)
			}
			if e.Msg != tc.msg || e.Site != "west" || e.Workload != "pg" {
				t.Fatalf("error %+v, want message %q for pg on west", e, tc.msg)
			}
			if !strings.Contains(out, tc.output) || !strings.Contains(e.Output, tc.output) {
				t.Fatalf("output %q / %q lacks %q", out, e.Output, tc.output)
			}
		})
	}
}

func TestExecOutputIsBounded(t *testing.T) {
	x := orchestrators.NewExec(plans.Exec{})
	out, err := x.StartWorkload(ctxT(t), execWorkload(plans.ExecHooks{Start: "i=0; while [ $i -lt 3000 ]; do echo line-$i-of-padding-text; i=$((i+1)); done"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) > orchestrators.MaxOutput+8 || !strings.HasPrefix(out, "[…]") || !strings.HasSuffix(out, "line-2999-of-padding-text\n") {
		t.Fatalf("output of %d bytes, starting %q: want the last %d bytes, marked as cut", len(out), out[:20], orchestrators.MaxOutput)
	}
}

func TestExecWithoutHooks(t *testing.T) {
	x := orchestrators.NewExec(plans.Exec{})
	_, err := x.StartWorkload(ctxT(t), orchestrators.Workload{Site: "west", Name: "pg"})
	if err == nil || orchestrators.IsTemporary(err) || !strings.Contains(err.Error(), "no exec hooks") {
		t.Fatalf("error %v, want a permanent 'no exec hooks'", err)
	}
}

// TestExecHookEnvironment: a hook sees PATH, HOME, the DROVER_* variables
// of its call and what the plan names, never the rest of the worker's
// environment (where storage secrets and Temporal credentials live); the
// values of its secrets are redacted from the output it leaves.
func TestExecHookEnvironment(t *testing.T) {
	const workerSecret = "worker-only-s3cr3t-value"
	const hookSecret = "hook-s3cr3t-9f2c"
	t.Setenv("DROVER_EAST_CSI_key", workerSecret)
	t.Setenv("TEMPORAL_API_KEY", workerSecret)
	resolved := map[string]string{}
	x := orchestrators.NewExec(plans.Exec{
		Env:       map[string]string{"SITE_MODE": "site", "OVERRIDDEN": "site"},
		SecretEnv: map[string]plans.SecretKey{"SITE_TOKEN": {Env: "APP", Key: "token"}},
	})
	x.Secret = func(k plans.SecretKey) (string, error) {
		resolved[k.Key] = k.Env
		return hookSecret, nil
	}
	out, err := x.StartWorkload(ctxT(t), execWorkload(plans.ExecHooks{
		Start: `env | sort; echo "token is $DB_PASSWORD"`,
		Env:   map[string]string{"OVERRIDDEN": "workload"},
		SecretEnv: map[string]plans.SecretKey{
			"DB_PASSWORD": {Env: "APP", Key: "password"},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			vars[k] = v
		}
	}
	want := map[string]string{
		"DROVER_PLAN": "shop", "DROVER_SITE": "west", "DROVER_WORKLOAD": "pg", "DROVER_ACTION": "failover", "DROVER_HOOK": "start",
		"SITE_MODE": "site", "OVERRIDDEN": "workload", "SITE_TOKEN": orchestrators.Redacted, "DB_PASSWORD": orchestrators.Redacted,
		"HOME": os.Getenv("HOME"), "PATH": os.Getenv("PATH"),
	}
	for k, v := range want {
		if vars[k] != v {
			t.Errorf("hook saw %s=%q, want %q", k, vars[k], v)
		}
	}
	// The shell adds a few of its own (PWD, SHLVL, _); nothing of the worker.
	for k := range vars {
		if _, ok := want[k]; !ok && k != "PWD" && k != "SHLVL" && k != "_" && k != "OLDPWD" {
			t.Errorf("hook saw %s, which the plan does not give it", k)
		}
	}
	if strings.Contains(out, workerSecret) || strings.Contains(out, hookSecret) {
		t.Errorf("a secret value is in the kept output:\n%s", out)
	}
	if !strings.Contains(out, "token is "+orchestrators.Redacted) {
		t.Errorf("output %q: want the echoed secret redacted", out)
	}
	if len(resolved) != 2 || resolved["token"] != "APP" || resolved["password"] != "APP" {
		t.Errorf("secrets resolved %v, want token and password of APP", resolved)
	}
}

// TestExecOutputRedactedBeforeTheCut: a secret that straddles the point
// where the kept tail begins is not left half visible.
func TestExecOutputRedactedBeforeTheCut(t *testing.T) {
	secret := strings.Repeat("k3y", 40) // 120 bytes
	x := orchestrators.NewExec(plans.Exec{SecretEnv: map[string]plans.SecretKey{"S": {Env: "X", Key: "k"}}})
	x.Secret = func(plans.SecretKey) (string, error) { return secret, nil }
	for pad := orchestrators.MaxOutput - 200; pad < orchestrators.MaxOutput+10; pad += 23 {
		out, err := x.StartWorkload(ctxT(t), execWorkload(plans.ExecHooks{
			Start: fmt.Sprintf(`printf '%%s' "$S"; head -c %d /dev/zero | tr '\0' x`, pad)}))
		if err != nil {
			t.Fatal(err)
		}
		if len(out) > orchestrators.MaxOutput+len("[…]") {
			t.Fatalf("kept %d bytes, want at most %d", len(out), orchestrators.MaxOutput)
		}
		if strings.Contains(out, "k3yk3y") {
			t.Fatalf("padding %d: part of the secret is in the kept output %q…", pad, out[:40])
		}

	}
}

// TestExecStoppedHook: a stop hook that returns while the workload still
// shuts down is confirmed by the stopped hook, polled until it exits 0;
// cut short, the wait names what still runs. Without a stopped hook the
// stop hook's return is the confirmation.
func TestExecStoppedHook(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "running")
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	x := orchestrators.NewExec(plans.Exec{Shell: "/bin/sh", Env: map[string]string{"MARKER": marker}, Timeout: plans.Duration(10 * time.Second)})
	w := execWorkload(plans.ExecHooks{
		Start: `touch "$MARKER"`,
		// Asks the workload to stop and returns at once, as `kill -TERM`
		// or `systemctl stop --no-block` do.
		Stop:    `(sleep 1; rm -f "$MARKER") >/dev/null 2>&1 &`,
		Stopped: `test -e "$MARKER" && { echo "pg (pid 4242) still running"; exit 1; }; echo "pg has exited"`,
	})
	ctx := ctxT(t)
	if _, err := x.StopWorkload(ctx, w); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	s, err := x.WaitStopped(short, w, 50*time.Millisecond, nil)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || s.Stopped || len(s.Running) != 1 || s.Running[0] != "pg (pid 4242) still running" {
		t.Fatalf("wait cut short = %+v, %v; want the hook's word on what runs", s, err)
	}
	looks := 0
	s, err = x.WaitStopped(ctx, w, 50*time.Millisecond, func(orchestrators.Stopped) { looks++ })
	if err != nil || !s.Stopped || s.Detail != "pg has exited" || looks < 2 {
		t.Fatalf("wait = %+v, %v after %d looks", s, err, looks)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatal("the wait returned while the workload still ran")
	}

	w.Exec.Stopped = ""
	if s, err := x.WaitStopped(ctx, w, time.Second, nil); err != nil || !s.Stopped || !strings.Contains(s.Detail, "no stopped hook") {
		t.Fatalf("without a stopped hook = %+v, %v", s, err)
	}
}
