package e2e_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/conformance"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/workflows"
)

// TestRealCephHungDriver gives real ceph-csi a Ceph user its clusters do
// not have: it answers its identity calls, and every storage call hangs
// for minutes. A drill's checks are each bounded by the drill's budget,
// the running one shows what it waits on, and the drill ends naming the
// checks the storage did not answer. drctl conformance shows each call
// left unanswered, fails at the first check's deadline saying the driver
// hangs, and asks it for no clean-up; interrupted, it ends at once.
func TestRealCephHungDriver(t *testing.T) {
	r := startCephRig(t, "drover-hung-")
	e, h, dir := r.e, r.h, r.dir

	// The plan's secret file names a user the clusters lack from now on:
	// the worker reads it at each call.
	wrong := "userID=csi\nuserKey=" + r.secrets["userKey"] + "\n"
	secretFile := filepath.Join(dir, "ceph-csi.secret")
	if err := os.WriteFile(secretFile, []byte(wrong), 0o600); err != nil {
		t.Fatal(err)
	}

	// The drill, watched while it runs.
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Minute)
	defer cancel()
	waitedOn := ""
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		for ctx.Err() == nil && waitedOn == "" {
			time.Sleep(time.Second)
			p, err := readProgress(ctx, h)
			if err != nil {
				continue
			}
			for _, s := range p.Steps {
				if s.State == workflows.StateRunning && strings.HasPrefix(s.Name, "replication of") && s.Note != "" {
					waitedOn = s.Name + ": " + s.Note
				}
			}
		}
	}()
	start := time.Now()
	out, code := h.drctlWithin(8*time.Minute, "drill", h.plan, "--to", "west", "--wait")
	took := time.Since(start)
	cancel()
	<-watching
	if code != 1 || !strings.Contains(out, "replication of db fresh on east") {
		t.Fatalf("the drill against a hung ceph-csi: exit %d, want 1 naming the replication checks:\n%s", code, out)
	}
	if waitedOn == "" {
		t.Fatalf("no running check of the drill said what it waited on:\n%s", out)
	}
	t.Logf("ceph: hung driver: the drill ended in %s (exit 1), each check within its %s budget; while it ran: %s", took.Round(time.Second), workflows.DrillCheckBudget, waitedOn)

	// drctl conformance with the same user, on the rig's db volume.
	args := []string{"conformance", "-o", "json", "--endpoint", e.site("east", "CSIADDONS_ENDPOINT"), "--peer-endpoint", e.site("west", "CSIADDONS_ENDPOINT"),
		"--secret-file", secretFile, "--param", "clusterID=" + e["DROVER_CEPH_CLUSTER_ID"], "--param", "mirroringMode=snapshot",
		"--param", "schedulingInterval=1m", "--volume", r.vols["db"], "--cidr", "192.0.2.1/32", "--timeout", "20s", "--sync-timeout", "40s"}
	var stdout, stderr simtest.Buffer
	cmd := exec.Command(filepath.Join(bin, "drctl"), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start = time.Now()
	err := cmd.Run()
	took = time.Since(start)
	var rep conformance.Report
	if code := bintest.ExitCode(err); code != 1 || json.Unmarshal([]byte(stdout.String()), &rep) != nil {
		t.Fatalf("conformance against the hung ceph-csi: exit %d, want 1 with a report\n%s\n%s", code, stdout.String(), stderr.String())
	}
	hung, notRun := "", 0
	for _, res := range rep.Results {
		switch {
		case res.Status == conformance.Fail && strings.Contains(res.Detail, "the driver hangs"):
			hung = res.ID + ": " + res.Detail
		case strings.HasPrefix(res.Detail, "not run: the driver left"):
			notRun++
		}
	}
	if hung == "" || notRun == 0 || !strings.Contains(stderr.String(), "waiting on endpoint's ") {
		t.Fatalf("conformance does not tell the hang (%q, %d not run):\n%s\n%s", hung, notRun, stdout.String(), stderr.String())
	}
	t.Logf("ceph: hung driver: drctl conformance ended in %s, exit 1: %s; %d checks not run; %d waiting lines on stderr",
		took.Round(time.Second), hung, notRun, strings.Count(stderr.String(), "waiting on"))

	// Interrupted while a call hangs, it ends at once.
	stdout, stderr = simtest.Buffer{}, simtest.Buffer{}
	cmd = exec.Command(filepath.Join(bin, "drctl"), append([]string{"conformance"}, args[3:]...)...) // as text
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Two notes of a call still unanswered: it has hung for two of its
	// check's wait notes, past the 5 s that make a driver hung.
	simtest.Eventually(t, 2*time.Minute, "a call left unanswered for a while", func() bool {
		return strings.Count(stderr.String(), "waiting on") >= 2
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("drctl conformance did not end after Ctrl-C:\n%s\n%s", stdout.String(), stderr.String())
	}
	if code := bintest.ExitCode(err); code != 130 {
		t.Fatalf("exit %d after Ctrl-C, want 130:\n%s\n%s", code, stdout.String(), stderr.String())
	}
	t.Logf("ceph: hung driver: drctl conformance ended %s after Ctrl-C (exit 130)", time.Since(sent).Round(time.Millisecond))
}

// readProgress asks the plan's running action for its progress.
func readProgress(ctx context.Context, h *harness) (workflows.Progress, error) {
	var p workflows.Progress
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := h.c.QueryWorkflow(qctx, workflows.ActionID("e2e"), "", workflows.QueryProgress)
	if err == nil {
		err = v.Get(&p)
	}
	return p, err
}
