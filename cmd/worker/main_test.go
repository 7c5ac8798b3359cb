package main_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestBadInput: bad flags exit 2 with a message; an unreachable Temporal
// exits 3 and says what to do.
func TestBadInput(t *testing.T) {
	bin := filepath.Join(bintest.Build(t, "worker"), "worker")
	for _, c := range []struct {
		args []string
		env  string
		code int
		want string
	}{
		{[]string{"--log-format", "xml"}, "", 2, "want text or json"},
		{[]string{"--no-such-flag"}, "", 2, "flag provided but not defined"},
		{[]string{"stray"}, "", 2, "unexpected arguments"},
		{[]string{"--connect-timeout", "0s"}, "", 2, "want a positive duration"},
		{[]string{"--metrics", "", "--connect-timeout", "2s"}, "TEMPORAL_ADDRESS=" + simtest.FreeAddr(t), 3, "cannot reach Temporal"},
	} {
		cmd := exec.Command(bin, c.args...)
		cmd.Env = append(os.Environ(), c.env)
		out, err := cmd.CombinedOutput()
		if code := bintest.ExitCode(err); code != c.code || !strings.Contains(string(out), c.want) {
			t.Errorf("worker %v: exit %d, output %q; want exit %d and %q", c.args, code, out, c.code, c.want)
		}
	}
}

// TestWorkerWaitsForItsNamespace: a worker started before its namespace
// exists waits, saying so, and starts once the namespace is there; one
// whose namespace never comes exits 3 and says to create it.
func TestWorkerWaitsForItsNamespace(t *testing.T) {
	bin := filepath.Join(bintest.Build(t, "worker"), "worker")
	srv := devserver.Start(t, nil)
	env := []string{"TEMPORAL_ADDRESS=" + srv.Address(), "TEMPORAL_NAMESPACE=later"}

	cmd := exec.Command(bin, "--metrics", "", "--connect-timeout", "1s")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if code := bintest.ExitCode(err); code != 3 || !strings.Contains(string(out), "the namespace does not exist") {
		t.Fatalf("worker without its namespace: exit %d, output:\n%s\nwant exit 3 and a hint to create it", code, out)
	}

	w := bintest.Start(t, env, bin, "--metrics", "", "--connect-timeout", "2m")
	simtest.Eventually(t, 30*time.Second, "the worker to say it waits", func() bool {
		return strings.Contains(w.Log.String(), "Temporal is not ready; retrying")
	})
	if strings.Contains(w.Log.String(), "worker started") {
		t.Fatalf("the worker started without its namespace:\n%s", w.Log)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := srv.Client.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: "later", WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	simtest.Eventually(t, time.Minute, "the worker to start once its namespace exists", func() bool {
		return strings.Contains(w.Log.String(), "worker started")
	})
	if err := w.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ended, err := w.Wait(30 * time.Second); !ended || err != nil {
		t.Fatalf("worker after SIGTERM: ended %v, %v\n%s", ended, err, w.Log)
	}
}

// TestWorkerServesActionsAndMetrics runs the built worker against the dev
// server: it carries out a failover and a round of Protect, its metrics
// endpoint then shows Drover's own metrics next to the SDK's, and SIGTERM
// stops it cleanly.
func TestWorkerServesActionsAndMetrics(t *testing.T) {
	bin := filepath.Join(bintest.Build(t, "worker"), "worker")
	srv := devserver.Start(t, nil)
	east, west := simtest.StartPair(t, simtest.Options{Interval: 20 * time.Millisecond,
		TweakA: func(c *sim.Config) { c.Name = "east" }, TweakB: func(c *sim.Config) { c.Name = "west" }})
	p := &plans.Plan{APIVersion: plans.APIVersion, Kind: plans.Kind, Metadata: plans.Metadata{Name: "shop"},
		Sites: []plans.Site{
			{Name: "east", Storage: plans.Storage{Endpoint: east.Endpoint()}, Fence: plans.Fence{CIDRs: []string{simtest.NodeA + "/32"}}},
			{Name: "west", Storage: plans.Storage{Endpoint: west.Endpoint()}, Fence: plans.Fence{CIDRs: []string{simtest.NodeB + "/32"}}},
		},
		VolumeGroups: []plans.VolumeGroup{{Name: "db", Sites: map[string]plans.GroupRef{"east": {GroupID: "vg-1"}, "west": {GroupID: "vg-1"}}}},
	}
	p.ApplyDefaults()

	metrics := simtest.FreeAddr(t)
	logs := &simtest.Buffer{}
	cmd := exec.Command(bin, "--metrics", metrics, "--log-format", "json")
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+srv.Address(), "TEMPORAL_NAMESPACE=default")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	simtest.Eventually(t, 30*time.Second, "the worker to start", func() bool { return strings.Contains(logs.String(), "worker started") })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prot, err := workflows.StartProtect(ctx, srv.Client, p, "east", 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	simtest.Eventually(t, time.Minute, "a round of Protect", func() bool {
		ps, err := workflows.ReadProtect(ctx, srv.Client, "shop")
		return err == nil && ps.Polls > 0
	})
	if err := srv.Client.TerminateWorkflow(ctx, prot.GetID(), "", "test over"); err != nil {
		t.Fatal(err)
	}
	simtest.Eventually(t, time.Minute, "replication on west", func() bool {
		u := west.Snapshot().Unit("vg/vg-1")
		return u != nil && u.Enabled
	})
	east.Down()
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Plan: p, From: "east", To: "west"})
	if err != nil {
		t.Fatal(err)
	}
	var res workflows.FailoverResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("failover: %v\nworker log:\n%s", err, logs.String())
	}
	if u := west.Snapshot().Unit("vg/vg-1"); u == nil || u.Role != sim.RolePrimary {
		t.Fatalf("west's vg-1 after the failover: %+v", u)
	}

	var body string
	simtest.Eventually(t, 30*time.Second, "Drover's metrics", func() bool {
		resp, err := http.Get("http://" + metrics + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return strings.Contains(body, "drover_action_duration") && strings.Contains(body, "drover_replication_lag_seconds") &&
			strings.Contains(body, "temporal_workflow_completed")
	})
	for _, want := range []string{`action="failover"`, `plan="shop"`, `group="db"`, `outcome="completed"`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("worker after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not stop within 30s of SIGTERM")
	}
	if !strings.Contains(logs.String(), "worker stopped") {
		t.Fatalf("no clean stop in the log:\n%s", logs.String())
	}
}
