package orchestrators_test

import (
	"context"
	"errors"
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
