package main_test

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/codec"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/internal/testpki"
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
		{[]string{"--metrics", ""}, "", 2, "the worker runs only signed plans: give the public keys it trusts with --trusted-plan-key"},
		{[]string{"--trusted-plan-key", "/nonexistent.pub"}, "", 2, "no such file"},
		{[]string{"--trusted-plan-key", privateKeyFile(t)}, "", 2, "a private key does not belong on the worker"},
		{[]string{"--metrics", "", "--connect-timeout", "2s", "--allow-unsigned-plans"}, "TEMPORAL_ADDRESS=" + simtest.FreeAddr(t), 3, "cannot reach Temporal"},
		{[]string{"--metrics", "", "--connect-timeout", "2s", "--site", "east"}, "TEMPORAL_ADDRESS=" + simtest.FreeAddr(t), 3, "cannot reach Temporal"},
		// The keys from the environment, as the Nomad job gives them: a
		// missing one is refused; with a good one (a comma-separated
		// list) the worker goes on to connect.
		{[]string{"--metrics", ""}, "DROVER_TRUSTED_PLAN_KEYS=/nonexistent.pub", 2, "no such file"},
		{[]string{"--metrics", ""}, "DROVER_TRUSTED_PLAN_KEYS=" + publicKeyFile(t) + ", " + privateKeyFile(t), 2, "a private key does not belong on the worker"},
		{[]string{"--metrics", "", "--connect-timeout", "2s"}, "DROVER_TRUSTED_PLAN_KEYS=" + publicKeyFile(t) + "," + publicKeyFile(t) + "\nTEMPORAL_ADDRESS=" + simtest.FreeAddr(t), 3, "cannot reach Temporal"},
	} {
		cmd := exec.Command(bin, c.args...)
		cmd.Env = append(os.Environ(), strings.Split(c.env, "\n")...)
		out, err := cmd.CombinedOutput()
		if code := bintest.ExitCode(err); code != c.code || !strings.Contains(string(out), c.want) {
			t.Errorf("worker %v: exit %d, output %q; want exit %d and %q", c.args, code, out, c.code, c.want)
		}
	}
}

// keyPair writes a fresh plan signing key pair: the public key (PEM) a
// worker may trust, and the signing key, which it must not take for one.
func keyPair(t *testing.T) (pubFile, keyFile string, pub ed25519.PublicKey, key ed25519.PrivateKey) {
	t.Helper()
	pub, key, err := plans.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pb, err := plans.EncodePublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := plans.EncodePrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pubFile, keyFile = filepath.Join(dir, "plans.pub"), filepath.Join(dir, "plans.key")
	if err := os.WriteFile(pubFile, pb, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, kb, 0o600); err != nil {
		t.Fatal(err)
	}
	return pubFile, keyFile, pub, key
}

func publicKeyFile(t *testing.T) string {
	f, _, _, _ := keyPair(t)
	return f
}

func privateKeyFile(t *testing.T) string {
	_, f, _, _ := keyPair(t)
	return f
}

// TestWorkerWaitsForItsNamespace: a worker started before its namespace
// exists waits, saying so, and starts once the namespace is there; one
// whose namespace never comes exits 3 and says to create it.
func TestWorkerWaitsForItsNamespace(t *testing.T) {
	bin := filepath.Join(bintest.Build(t, "worker"), "worker")
	srv := devserver.Start(t, nil)
	env := []string{"TEMPORAL_ADDRESS=" + srv.Address(), "TEMPORAL_NAMESPACE=later"}

	cmd := exec.Command(bin, "--metrics", "", "--connect-timeout", "3s", "--allow-unsigned-plans")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if code := bintest.ExitCode(err); code != 3 || !strings.Contains(string(out), "the namespace does not exist") {
		t.Fatalf("worker without its namespace: exit %d, output:\n%s\nwant exit 3 and a hint to create it", code, out)
	}

	w := bintest.Start(t, env, bin, "--metrics", "", "--connect-timeout", "2m", "--allow-unsigned-plans")
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
	if !strings.Contains(w.Log.String(), "level=WARN msg=\"--allow-unsigned-plans: this worker runs plans without a signature") {
		t.Errorf("the worker runs unsigned plans without a warning at start:\n%s", w.Log)
	}
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
	east, west := eastWest(t)
	p, origin, pub, pubFile := signedShop(t, east, west)

	metrics := simtest.FreeAddr(t)
	logs := &simtest.Buffer{}
	cmd := exec.Command(bin, "--metrics", metrics, "--log-format", "json", "--trusted-plan-key", pubFile)
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
	prot, err := workflows.StartProtect(ctx, srv.Client, p, "east", 50*time.Millisecond, origin)
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
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Origin: origin, Plan: p, From: "east", To: "west"})
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
	if !strings.HasPrefix(res.Trust, "plan signed by key "+plans.KeyID(pub)) || res.By != "test" {
		t.Fatalf("failover result: trust %q, by %q; want the signer and test", res.Trust, res.By)
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
			strings.Contains(body, "drover_primary_unreachable") && strings.Contains(body, "temporal_workflow_completed")
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

// eastWest starts a pair of simulated sites named east and west that
// replicate every 20 ms.
func eastWest(t *testing.T) (east, west *simtest.Site) {
	return simtest.StartPair(t, simtest.Options{Interval: 20 * time.Millisecond,
		TweakA: func(c *sim.Config) { c.Name = "east" }, TweakB: func(c *sim.Config) { c.Name = "west" }})
}

// signedShop is a plan of one group over east and west, signed by a key
// whose public half is in pubFile, and the origin that carries it.
func signedShop(t *testing.T, east, west *simtest.Site) (*plans.Plan, workflows.Origin, ed25519.PublicKey, string) {
	t.Helper()
	p := &plans.Plan{APIVersion: plans.APIVersion, Kind: plans.Kind, Metadata: plans.Metadata{Name: "shop"},
		Sites: []plans.Site{
			{Name: "east", Storage: plans.Storage{Endpoint: east.Endpoint()}, Fence: plans.Fence{CIDRs: []string{simtest.NodeA + "/32"}}},
			{Name: "west", Storage: plans.Storage{Endpoint: west.Endpoint()}, Fence: plans.Fence{CIDRs: []string{simtest.NodeB + "/32"}}},
		},
		VolumeGroups: []plans.VolumeGroup{{Name: "db", Sites: map[string]plans.GroupRef{"east": {GroupID: "vg-1"}, "west": {GroupID: "vg-1"}}}},
	}
	p.ApplyDefaults()

	pubFile, _, pub, key := keyPair(t)
	sig, err := plans.Sign(p, key, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	origin := workflows.Origin{Signature: sig, By: "test"}
	return p, origin, pub, pubFile
}

// TestProtectionGaugesLeaveWithProtection: while a plan is protected
// its gauges are on the worker's /metrics, past --metrics-ttl since
// protection started (each round sets them again); once its Protect
// workflow ends they are gone within --metrics-ttl, so that
// DroverProtectionSilent can fire and a last drover_out_of_rpo of 1 does
// not keep DroverOutOfRPO firing.
func TestProtectionGaugesLeaveWithProtection(t *testing.T) {
	bin := filepath.Join(bintest.Build(t, "worker"), "worker")
	srv := devserver.Start(t, nil)
	east, west := eastWest(t)
	p, origin, _, pubFile := signedShop(t, east, west)
	scrape := startScraped(t, bin, srv, pubFile, "5s")
	gauges := []string{"drover_out_of_rpo{", "drover_replication_lag_seconds{", "drover_primary_unreachable{"}
	has := func(body string) (n int) {
		for _, g := range gauges {
			if strings.Contains(body, g) && strings.Contains(body, `plan="shop"`) {
				n++
			}
		}
		return n
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prot, err := workflows.StartProtect(ctx, srv.Client, p, "east", 50*time.Millisecond, origin)
	if err != nil {
		t.Fatal(err)
	}
	simtest.Eventually(t, time.Minute, "the plan's gauges", func() bool { return has(scrape()) == len(gauges) })
	time.Sleep(6 * time.Second) // past the ttl; rounds set them every 50 ms
	if body := scrape(); has(body) != len(gauges) {
		t.Fatalf("a protected plan's gauges left /metrics while it was protected:\n%s", body)
	}
	if err := srv.Client.TerminateWorkflow(ctx, prot.GetID(), "", "protection stopped"); err != nil {
		t.Fatal(err)
	}
	var body string
	simtest.Eventually(t, 30*time.Second, "the gauges to leave /metrics", func() bool {
		body = scrape()
		return has(body) == 0 && strings.Contains(body, "temporal_")
	})
	if !strings.Contains(body, "process_resident_memory_bytes") {
		t.Errorf("the worker's /metrics lacks the process's own:\n%s", body)
	}
}

// TestStopLetsRunningCallsFinish: SIGTERM while a site worker's storage
// call takes 5 s lets the call complete and be reported, and the worker
// then exits 0. While it stops, /readyz answers 503 again (a service
// check takes it out) and /healthz 200.
func TestStopLetsRunningCallsFinish(t *testing.T) {
	bin := filepath.Join(bintest.Build(t, "worker"), "worker")
	srv := devserver.Start(t, nil)
	east, west := simtest.StartPair(t, simtest.Options{
		TweakA: func(c *sim.Config) { c.Name = "east" }, TweakB: func(c *sim.Config) { c.Name = "west" }})
	p := &plans.Plan{APIVersion: plans.APIVersion, Kind: plans.Kind, Metadata: plans.Metadata{Name: "slow"},
		Sites: []plans.Site{
			{Name: "east", Storage: plans.Storage{Endpoint: east.Endpoint()}, Fence: plans.Fence{CIDRs: []string{simtest.NodeA + "/32"}}},
			{Name: "west", Storage: plans.Storage{Endpoint: west.Endpoint()}, Fence: plans.Fence{CIDRs: []string{simtest.NodeB + "/32"}},
				TaskQueue: "drover-site-west"},
		},
		VolumeGroups: []plans.VolumeGroup{{Name: "db", Sites: map[string]plans.GroupRef{"east": {GroupID: "vg-1"}, "west": {GroupID: "vg-1"}}}},
	}
	p.ApplyDefaults()
	if err := west.SetFaults([]sim.FaultRule{{Method: "ListClusterFence", Latency: 5 * time.Second, Count: 1}}); err != nil {
		t.Fatal(err)
	}
	env := []string{"TEMPORAL_ADDRESS=" + srv.Address()}
	bintest.Start(t, env, bin, "--metrics", "", "--allow-unsigned-plans")
	addr := simtest.FreeAddr(t)
	site := bintest.Start(t, env, bin, "--metrics", addr, "--site", "west")
	get := func(path string) int {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	simtest.Eventually(t, 30*time.Second, "the site worker to be ready", func() bool { return get("/readyz") == 200 })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A site worker runs its site's activities only (SECURITY.md): it
	// polls its activity queue, and no workflow queue, nor the central
	// one.
	polls := func(queue string, typ enums.TaskQueueType) bool {
		resp, err := srv.Client.DescribeTaskQueue(ctx, queue, typ)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(resp.GetPollers(), func(p *taskqueuepb.PollerInfo) bool {
			return strings.HasPrefix(p.GetIdentity(), fmt.Sprintf("%d@", site.Cmd.Process.Pid))
		})
	}
	if !polls("drover-site-west", enums.TASK_QUEUE_TYPE_ACTIVITY) {
		t.Fatal("the site worker does not poll drover-site-west for activities")
	}
	for _, q := range []string{"drover-site-west", workflows.TaskQueue} {
		if polls(q, enums.TASK_QUEUE_TYPE_WORKFLOW) {
			t.Fatalf("the site worker polls %s for workflow tasks", q)
		}
	}
	if polls(workflows.TaskQueue, enums.TASK_QUEUE_TYPE_ACTIVITY) {
		t.Fatal("the site worker polls the central queue for activities")
	}
	run, err := workflows.Start(ctx, srv.Client, "slow", workflows.Drill, workflows.DrillInput{Plan: p, Action: "failover", From: "east", To: "west"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Client.TerminateWorkflow(context.Background(), run.GetID(), "", "test over")
	const slow = "secrets accepted on west"
	stepOf := func() *workflows.Step {
		v, err := srv.Client.QueryWorkflow(ctx, run.GetID(), "", workflows.QueryProgress)
		var pr workflows.Progress
		if err != nil || v.Get(&pr) != nil {
			return nil
		}
		for _, s := range pr.Steps {
			if s.Name == slow {
				return s
			}
		}
		return nil
	}
	simtest.Eventually(t, time.Minute, "the slow ListClusterFence to be under way", func() bool {
		s := stepOf()
		return s != nil && s.State == workflows.StateRunning
	})
	// The step shows running once scheduled; the site worker has the call
	// once Temporal lists the activity started.
	simtest.Eventually(t, time.Minute, "the site worker to take the slow call", func() bool {
		d, err := srv.Client.DescribeWorkflowExecution(ctx, run.GetID(), "")
		if err != nil {
			return false
		}
		for _, a := range d.GetPendingActivities() {
			if a.GetState() == enums.PENDING_ACTIVITY_STATE_STARTED && strings.HasPrefix(a.GetLastWorkerIdentity(), fmt.Sprintf("%d@", site.Cmd.Process.Pid)) {
				return true
			}
		}
		return false
	})
	time.Sleep(time.Second) // well inside the 5 s call
	if err := site.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	simtest.Eventually(t, 3*time.Second, "/readyz to answer 503 while the worker stops", func() bool { return get("/readyz") == 503 })
	if code := get("/healthz"); code != 200 {
		t.Fatalf("/healthz while the worker stops: %d, want 200", code)
	}
	ended, err := site.Wait(time.Minute)
	if !ended || err != nil {
		t.Fatalf("site worker after SIGTERM: ended %v, %v\n%s", ended, err, site.Log)
	}
	if !strings.Contains(site.Log.String(), "worker stopped") {
		t.Fatalf("no clean stop in the log:\n%s", site.Log)
	}
	// The call finished and its result reached the workflow: no other
	// worker serves west's queue, so nobody else could have run it.
	simtest.Eventually(t, 30*time.Second, "the slow step to be done", func() bool {
		s := stepOf()
		return s != nil && s.State == workflows.StateDone
	})
	if s := stepOf(); s.Attempts != 1 || s.LastError != "" {
		t.Fatalf("the slow step: %+v", s)
	}
}

// TestHealthReadinessAndCodec: /healthz answers as soon as the worker
// runs, /readyz only once Temporal lists it polling its task queues (and
// not while it waits for its namespace); /codec/decode decodes a
// compressed payload for the Temporal UI, with the CORS origin given.
func TestHealthReadinessAndCodec(t *testing.T) {
	bin := filepath.Join(bintest.Build(t, "worker"), "worker")
	srv := devserver.Start(t, nil)
	addr := simtest.FreeAddr(t)
	w := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + srv.Address(), "TEMPORAL_NAMESPACE=notyet"}, bin,
		"--metrics", addr, "--connect-timeout", "2m", "--codec-cors-origin", "http://localhost:8233", "--allow-unsigned-plans")
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	simtest.Eventually(t, 30*time.Second, "the worker to wait for its namespace", func() bool {
		return strings.Contains(w.Log.String(), "Temporal is not ready; retrying")
	})
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz while waiting: %d", code)
	}
	if code, body := get("/readyz"); code != 503 {
		t.Errorf("/readyz while waiting for the namespace: %d %s", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := srv.Client.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: "notyet", WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	simtest.Eventually(t, time.Minute, "/readyz to answer 200", func() bool { code, _ := get("/readyz"); return code == 200 })
	// The worker logs before it turns ready, but its log reaches this
	// test through a pipe, later than the HTTP answer may.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(w.Log.String(), "worker ready"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("ready, but the log does not say so:\n%s", w.Log)
		}
	}

	// A payload as a large workflow input travels: compressed.
	big := strings.Repeat(`{"name":"vg"},`, codec.Threshold/8)
	enc, err := codec.Converter().ToPayload(big)
	if err != nil {
		t.Fatal(err)
	}
	if string(enc.Metadata["encoding"]) != "binary/zlib" {
		t.Fatalf("the test payload is not compressed: %s", enc.Metadata["encoding"])
	}
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{enc}})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/codec/decode", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Namespace", "notyet")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var decoded commonpb.Payloads
	if resp.StatusCode != 200 || protojson.Unmarshal(out, &decoded) != nil || len(decoded.Payloads) != 1 {
		t.Fatalf("/codec/decode: %d %.200s", resp.StatusCode, out)
	}
	if got := decoded.Payloads[0]; string(got.Metadata["encoding"]) != "json/plain" || !strings.Contains(string(got.Data), `{\"name\":\"vg\"}`) {
		t.Fatalf("/codec/decode answered %s %.100s", got.Metadata["encoding"], got.Data)
	}
	if o := resp.Header.Get("Access-Control-Allow-Origin"); o != "http://localhost:8233" {
		t.Errorf("CORS origin %q", o)
	}
	pre, _ := http.NewRequest(http.MethodOptions, "http://"+addr+"/codec/decode", nil)
	pre.Header.Set("Origin", "http://localhost:8233")
	presp, err := http.DefaultClient.Do(pre)
	if err != nil {
		t.Fatal(err)
	}
	presp.Body.Close()
	if presp.StatusCode/100 != 2 || !strings.Contains(presp.Header.Get("Access-Control-Allow-Headers"), "X-Namespace") {
		t.Errorf("CORS preflight: %d %v", presp.StatusCode, presp.Header)
	}

	if err := w.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ended, err := w.Wait(time.Minute); !ended || err != nil {
		t.Fatalf("worker after SIGTERM: %v %v", ended, err)
	}
}

// TestVersion: worker --version prints the module version and the
// revision it was built from.
func TestVersion(t *testing.T) {
	dir := t.TempDir()
	build := exec.Command("go", "build", "-ldflags", "-X github.com/drover-dr/drover/internal/version.Revision=0123456789ab", "-o", dir+"/worker", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command(dir+"/worker", "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "worker (devel) (revision 0123456789ab") {
		t.Fatalf("worker --version: %v %q", err, out)
	}
}

// TestMetricsWebConfig: with a Prometheus web configuration file the
// HTTP endpoint serves TLS only and asks for basic auth; a bad file is
// refused at start with exit 2.
func TestMetricsWebConfig(t *testing.T) {
	bin := filepath.Join(bintest.Build(t, "worker"), "worker")
	dir := t.TempDir()
	ca, err := testpki.NewCA("metrics")
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.WriteFiles(dir, "worker")
	if err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret-scrape"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "web.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  prometheus: %s\n",
		files.Cert, files.Key, hash)), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("tls_server_config:\n  cert_file: /nonexistent\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--web-config", bad, "--allow-unsigned-plans").CombinedOutput()
	if code := bintest.ExitCode(err); code != 2 || !strings.Contains(string(out), "--web-config") {
		t.Fatalf("a bad web config: exit %d, %s; want 2 naming --web-config", code, out)
	}

	addr := simtest.FreeAddr(t)
	// Temporal never answers: the endpoint serves while the worker waits.
	w := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + simtest.FreeAddr(t)}, bin, "--metrics", addr, "--web-config", cfg,
		"--connect-timeout", "2m", "--allow-unsigned-plans")
	simtest.Eventually(t, 30*time.Second, "the HTTP endpoint", func() bool { return strings.Contains(w.Log.String(), "HTTP endpoint") })
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(caPEM)
	tlsClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(c *http.Client, url, user, pass string) (int, error) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get(tlsClient, "https://"+addr+"/metrics", "prometheus", "s3cret-scrape"); err != nil || code != http.StatusOK {
		t.Fatalf("scrape over TLS with the password: %d, %v", code, err)
	}
	for _, c := range []struct{ user, pass string }{{"", ""}, {"prometheus", "wrong"}} {
		if code, err := get(tlsClient, "https://"+addr+"/metrics", c.user, c.pass); err != nil || code != http.StatusUnauthorized {
			t.Fatalf("scrape with %q/%q: %d, %v; want 401", c.user, c.pass, code, err)
		}
	}
	if code, err := get(&http.Client{Timeout: 5 * time.Second}, "http://"+addr+"/metrics", "prometheus", "s3cret-scrape"); err == nil && code == http.StatusOK {
		t.Fatal("the endpoint answered plain HTTP")
	}
}

// TestGaugesLeaveWhenProtectionFails: a plan's signature that ends stops
// its protection with UntrustedPlan (SECURITY.md), and its gauges leave
// /metrics then, not --metrics-ttl later: a last drover_out_of_rpo must
// not keep reporting for a plan no one protects. While it runs,
// drover_plan_signature_expiry_seconds says the time left; once it
// ended, drover_protection_ended says why, and stays.
func TestGaugesLeaveWhenProtectionFails(t *testing.T) {
	bin := filepath.Join(bintest.Build(t, "worker"), "worker")
	srv := devserver.Start(t, nil)
	east, west := eastWest(t)
	p, _, _, pubFile := signedShop(t, east, west)
	key, err := plans.ReadPrivateKey(strings.TrimSuffix(pubFile, ".pub") + ".key")
	if err != nil {
		t.Fatal(err)
	}
	scrape := startScraped(t, bin, srv, pubFile, "10m")
	// Signed once the worker runs, so that the first run's check passes
	// however long the worker took to start; a later run's fails.
	sig, err := plans.Sign(p, key, time.Now(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prot, err := workflows.StartProtect(ctx, srv.Client, p, "east", 20*time.Millisecond, workflows.Origin{Signature: sig, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Eventually(t, time.Minute, "the plan's out-of-RPO and signature gauges", func() bool {
		body := scrape()
		return strings.Contains(body, `drover_out_of_rpo{`) && strings.Contains(body, `drover_plan_signature_expiry_seconds{`)
	})
	run := srv.Client.GetWorkflow(ctx, prot.GetID(), "")
	if err := run.Get(ctx, nil); err == nil || !strings.Contains(err.Error(), "UntrustedPlan") || !strings.Contains(err.Error(), "protection ended: the plan's signature ended at") {
		t.Fatalf("protection past its plan's signature: %v, want UntrustedPlan saying it ended with the signature", err)
	}
	simtest.Eventually(t, 20*time.Second, "the gauges to leave /metrics with the failed protection, and its end to show", func() bool {
		body := scrape()
		return strings.Contains(body, "temporal_") && !strings.Contains(body, "drover_out_of_rpo{") &&
			!strings.Contains(body, "drover_replication_lag_seconds{") && !strings.Contains(body, "drover_primary_unreachable{") &&
			!strings.Contains(body, "drover_plan_signature_expiry_seconds{") && regexp.MustCompile(`drover_protection_ended\{[^}]*reason="signature"[^}]*\} 1`).MatchString(body)
	})
}

// startScraped starts the worker with its metrics on a free loopback
// port, trusting pubFile, with --metrics-ttl ttl, and waits until it has
// started: a scrape of its /metrics ("" while it does not answer).
func startScraped(t *testing.T, bin string, srv *devserver.Server, pubFile, ttl string) func() string {
	t.Helper()
	metrics := simtest.FreeAddr(t)
	w := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + srv.Address(), "TEMPORAL_NAMESPACE=default"}, bin,
		"--metrics", metrics, "--trusted-plan-key", pubFile, "--metrics-ttl", ttl)
	simtest.Eventually(t, 30*time.Second, "the worker to start", func() bool { return strings.Contains(w.Log.String(), "worker started") })
	return func() string {
		resp, err := http.Get("http://" + metrics + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
}
