package deploy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/freeport"
	"github.com/drover-dr/drover/internal/nomadfake"
	"github.com/drover-dr/drover/internal/release"
	"github.com/drover-dr/drover/plans"
)

// nomadJob is one job file of deploy/nomad and what it must be.
type nomadJob struct {
	file, vars string
	id         string // the job's id with vars
	queue      string // the task queue its worker polls
	args       []string
	planKeys   bool // the central worker trusts plan keys
}

// Both jobs run in the dev agent's datacenter, on its architecture.
var agentVars = fmt.Sprintf("datacenters = [\"dc1\"]\narch = %q\n", runtime.GOARCH)

var nomadJobs = []nomadJob{
	{file: "nomad/drover-worker.nomad.hcl", vars: agentVars, id: "drover-worker", queue: "drover", planKeys: true},
	{file: "nomad/drover-site-worker.nomad.hcl", vars: agentVars + "site = \"east\"\n", id: "drover-site-worker-east", queue: "drover-site-east", args: []string{"--site", "east"}},
}

// releaseVars name a release to run and its worker archive's checksum.
var releaseVars = "version = \"v1.4.0\"\nworker_checksum = \"" + testChecksum + "\"\n"

// nomadClient starts a real `nomad agent -dev` (skipping without one on
// PATH) and returns a client of it.
func nomadClient(t *testing.T) *api.Client {
	t.Helper()
	// The agent takes AWS_CA_BUNDLE for its own and fails when the
	// bundle is not what it expects.
	t.Setenv("AWS_CA_BUNDLE", "")
	os.Unsetenv("AWS_CA_BUNDLE")
	addr := nomadfake.Agent(t)
	c, err := api.NewClient(&api.Config{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// parseJob parses a job file the way the Nomad orchestrator adapter
// does: through the agent's /v1/jobs/parse, canonicalized.
func parseJob(t *testing.T, c *api.Client, j nomadJob, extraVars string) *api.Job {
	t.Helper()
	job, err := c.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: mustRead(t, j.file), Variables: j.vars + extraVars, Canonicalize: true})
	if err != nil {
		t.Fatalf("%s: %v", j.file, err)
	}
	return job
}

func mustRead(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestNomadJobSpecs parses each job file with a real Nomad agent and
// checks what docs/guides/deploy-nomad.md promises of it: a service job, two workers
// spread over nodes, health checks on /healthz and /readyz that gate
// deployments (the first restarting a hung worker), the TEMPORAL_* settings and storage secrets from the
// job's Nomad Variable through an env template, the central worker's
// plan keys from it, a stop that lets running calls finish, and memory
// limits.
func TestNomadJobSpecs(t *testing.T) {
	c := nomadClient(t)
	for _, j := range nomadJobs {
		job := parseJob(t, c, j, releaseVars)
		if *job.ID != j.id || *job.Type != "service" {
			t.Errorf("%s: job %q of type %q; want service job %q", j.file, *job.ID, *job.Type, j.id)
		}
		if len(job.TaskGroups) != 1 {
			t.Fatalf("%s: %d groups, want 1", j.file, len(job.TaskGroups))
		}
		g := job.TaskGroups[0]
		if *g.Count < 2 || len(g.Spreads) == 0 {
			t.Errorf("%s: %d worker(s), spread %v; want 2 or more spread over nodes", j.file, *g.Count, g.Spreads)
		}
		if g.Update == nil || *g.Update.HealthCheck != "checks" {
			t.Errorf("%s: deployments are not gated by the health checks: %+v", j.file, g.Update)
		}
		var paths []string
		for _, s := range g.Services {
			for _, ch := range s.Checks {
				if ch.Type == "http" && s.PortLabel == "http" {
					paths = append(paths, ch.Path)
				}
				// A hung worker is restarted by its liveness check.
				if ch.Path == "/healthz" && (ch.CheckRestart == nil || ch.CheckRestart.Limit < 1) {
					t.Errorf("%s: the /healthz check restarts nothing: check_restart %+v", j.file, ch.CheckRestart)
				}
			}
		}
		if !slices.Contains(paths, "/healthz") || !slices.Contains(paths, "/readyz") {
			t.Errorf("%s: HTTP checks on %v; want /healthz and /readyz on the worker's port", j.file, paths)
		}
		task := g.Tasks[0]
		args, _ := task.Config["args"].([]any)
		joined := fmt.Sprint(args...)
		if !strings.Contains(fmt.Sprint(args), "--metrics ${NOMAD_ADDR_http}") {
			t.Errorf("%s: the worker's HTTP endpoint is not on the checked port: %v", j.file, args)
		}
		for _, a := range j.args {
			if !strings.Contains(joined, a) {
				t.Errorf("%s: the worker lacks argument %q: %v", j.file, a, args)
			}
		}
		var env *api.Template
		for _, tp := range task.Templates {
			if tp.Envvars != nil && *tp.Envvars {
				env = tp
			}
		}
		if env == nil || !strings.Contains(*env.EmbeddedTmpl, `nomadVar "nomad/jobs/`+j.id+`"`) || !strings.HasPrefix(*env.DestPath, "secrets/") {
			t.Errorf("%s: no env template from the job's variable nomad/jobs/%s into secrets/: %+v", j.file, j.id, env)
		}
		if j.planKeys && (task.Env["DROVER_TRUSTED_PLAN_KEYS"] != "${NOMAD_SECRETS_DIR}/plan-keys.pub" || len(task.Templates) != 2) {
			t.Errorf("%s: the central worker does not trust plan keys from its variable: env %v", j.file, task.Env)
		}
		if task.KillTimeout == nil || *task.KillTimeout < 2*time.Minute {
			t.Errorf("%s: kill_timeout %v leaves running calls no time to finish", j.file, task.KillTimeout)
		}
		if r := task.Resources; r.MemoryMB == nil || r.MemoryMaxMB == nil || *r.MemoryMaxMB <= *r.MemoryMB {
			t.Errorf("%s: memory %v, memory_max %v; want both, the ceiling above", j.file, r.MemoryMB, r.MemoryMaxMB)
		}
		// The binary: by default the release's archive for the clients'
		// architecture, or downloaded from worker_url, into the task's
		// directory, its checksum checked.
		rel := "https://github.com/drover-dr/drover/releases/download/v1.4.0/" + release.Archive("worker", "v1.4.0", release.Platform{OS: "linux", Arch: runtime.GOARCH})
		if len(task.Artifacts) != 1 || *task.Artifacts[0].GetterSource != rel || task.Artifacts[0].GetterOptions["checksum"] != testChecksum ||
			task.Config["command"] != "${NOMAD_TASK_DIR}/drover/worker" {
			t.Errorf("%s: by default the job runs %v from artifacts %+v; want the release's archive %s, checksum checked", j.file, task.Config["command"], task.Artifacts, rel)
		}
		if len(job.Constraints) != 1 || job.Constraints[0].LTarget != "${attr.cpu.arch}" || job.Constraints[0].RTarget != runtime.GOARCH {
			t.Errorf("%s: constraints %+v; want the clients' architecture to be the archive's", j.file, job.Constraints)
		}
		if _, err := c.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: mustRead(t, j.file), Variables: j.vars, Canonicalize: true}); err == nil {
			t.Errorf("%s: parsed without a version and a checksum; want it refused", j.file)
		}
		url := "https://files.example/drover-worker.tar.gz"
		got := parseJob(t, c, j, fmt.Sprintf("worker_url = %q\nworker_checksum = \"sha256:abc\"\n", url)).TaskGroups[0].Tasks[0]
		if len(got.Artifacts) != 1 || *got.Artifacts[0].GetterSource != url || got.Artifacts[0].GetterOptions["checksum"] != "sha256:abc" ||
			got.Config["command"] != "${NOMAD_TASK_DIR}/drover/worker" || *got.Artifacts[0].RelativeDest != "local/drover" {
			t.Errorf("%s: with worker_url the job runs %v from artifacts %+v; want the archive from %s, checksum checked, unpacked into local/drover", j.file, got.Config["command"], got.Artifacts, url)
		}
	}
}

// TestNomadWorkerBuilds parses the central worker's job with two builds,
// as during an upgrade (docs/guides/nomad-worker.md, "Upgrading"): one group per build, named
// by it, each running its own binary as that build (--build-id), and
// otherwise the same group as without builds.
func TestNomadWorkerBuilds(t *testing.T) {
	c := nomadClient(t)
	j := nomadJobs[0]
	one := parseJob(t, c, j, "worker_binary = \"/usr/local/bin/worker\"\n")
	two := parseJob(t, c, j, `builds = {"1.4.0" = "/opt/drover/1.4.0/worker", "1.5.0" = "/opt/drover/1.5.0/worker"}`+"\n")
	if len(two.TaskGroups) != 2 {
		t.Fatalf("%d groups with two builds, want 2", len(two.TaskGroups))
	}
	base := one.TaskGroups[0]
	for i, build := range []string{"1.4.0", "1.5.0"} {
		g := two.TaskGroups[i]
		if *g.Name != "worker-"+build {
			t.Errorf("group %d is %q, want worker-%s", i, *g.Name, build)
		}
		task := g.Tasks[0]
		args, _ := task.Config["args"].([]any)
		if task.Config["command"] != "/opt/drover/"+build+"/worker" || fmt.Sprint(args[len(args)-2:]) != "[--build-id "+build+"]" {
			t.Errorf("group %s runs %v %v, want its build's binary with --build-id %s", *g.Name, task.Config["command"], args, build)
		}
		// The rest is the one group's: same checks, update, variable.
		g.Name, task.Config = base.Name, base.Tasks[0].Config
		if !reflect.DeepEqual(g, base) {
			t.Errorf("group of build %s differs from the one group beyond its name, binary and build ID:\n%+v\n%+v", build, g, base)
		}
	}
}

// TestNomadRainbow runs the central worker's job on a real `nomad agent
// -dev` through an upgrade as docs/guides/nomad-worker.md says: one build, then the new
// build added beside it, then the old one dropped. Adding the new build
// must leave the old build's workers as they are (same allocations, no
// restart), and both must poll Temporal as their build; dropping the old
// build stops its workers alone.
func TestNomadRainbow(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Nomad agent and the Temporal dev server")
	}
	c := nomadClient(t)
	bins := bintest.Build(t, "worker")
	srv := devserver.Start(t, nil)
	j := nomadJobs[0]
	pub, _, err := plans.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pem, err := plans.EncodePublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Variables().Create(&api.Variable{Path: "nomad/jobs/" + j.id,
		Items: api.VariableItems{"TEMPORAL_ADDRESS": srv.Address(), "TEMPORAL_NAMESPACE": "default", "plan_keys": string(pem)}}, nil); err != nil {
		t.Fatal(err)
	}
	worker := filepath.Join(bins, "worker")
	run := func(builds ...string) {
		t.Helper()
		var m []string
		for _, b := range builds {
			m = append(m, fmt.Sprintf("%q = %q", b, worker))
		}
		job := parseJob(t, c, j, fmt.Sprintf("driver = \"raw_exec\"\ncount = 1\nbuilds = {%s}\n", strings.Join(m, ", ")))
		for _, g := range job.TaskGroups {
			g.Spreads = nil // one node
		}
		if _, _, err := c.Jobs().Register(job, nil); err != nil {
			t.Fatalf("run the job with builds %v: %v", builds, err)
		}
	}
	stopJobAtEnd(t, c, j.id)

	run("one")
	first := waitGroups(t, c, j.id, "worker-one")
	waitPolling(t, srv, "one")
	run("one", "two")
	both := waitGroups(t, c, j.id, "worker-one", "worker-two")
	waitPolling(t, srv, "two")
	if both["worker-one"].ID != first["worker-one"].ID || both["worker-one"].TaskStates["worker"].Restarts != 0 {
		t.Fatalf("adding build two replaced or restarted build one's worker: allocation %s (restarts %d), was %s",
			both["worker-one"].ID, both["worker-one"].TaskStates["worker"].Restarts, first["worker-one"].ID)
	}
	run("two")
	last := waitGroups(t, c, j.id, "worker-two")
	if last["worker-two"].ID != both["worker-two"].ID || last["worker-two"].TaskStates["worker"].Restarts != 0 {
		t.Fatalf("dropping build one replaced or restarted build two's worker")
	}
	t.Logf("build one's worker ran on through the addition of build two (allocation %s), build two's through the removal of build one (allocation %s)",
		first["worker-one"].ID[:8], last["worker-two"].ID[:8])
}

// waitGroups waits until the job's running allocations are one per group
// named, each with its checks passing, and none of another group runs;
// it returns them by group.
func waitGroups(t *testing.T, c *api.Client, job string, groups ...string) map[string]*api.Allocation {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var seen []string
	for ; time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		allocs, _, err := c.Jobs().Allocations(job, false, nil)
		if err != nil {
			continue
		}
		out := map[string]*api.Allocation{}
		seen = seen[:0]
		ok := true
		for _, stub := range allocs {
			if stub.ClientStatus == "complete" || stub.ClientStatus == "failed" || stub.ClientStatus == "lost" {
				continue
			}
			seen = append(seen, stub.TaskGroup+" "+stub.ClientStatus)
			if !slices.Contains(groups, stub.TaskGroup) || stub.ClientStatus != "running" || out[stub.TaskGroup] != nil {
				ok = false
				continue
			}
			a, _, err := c.Allocations().Info(stub.ID, nil)
			checks, cerr := c.Allocations().Checks(stub.ID, nil)
			if err != nil || cerr != nil || len(checks) != 2 {
				ok = false
				continue
			}
			for _, ch := range checks {
				ok = ok && ch.Status == "success"
			}
			out[stub.TaskGroup] = a
		}
		if ok && len(out) == len(groups) {
			return out
		}
	}
	t.Fatalf("job %s: want one running allocation with passing checks of each of %v and no other within 2 minutes; last saw %v", job, groups, seen)
	return nil
}

// waitPolling waits until Temporal lists a worker of the job polling the
// workflow task queue as build.
func waitPolling(t *testing.T, srv *devserver.Server, build string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for ; time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		resp, err := srv.Client.DescribeTaskQueue(t.Context(), "drover", enums.TASK_QUEUE_TYPE_WORKFLOW)
		if err == nil && slices.ContainsFunc(resp.GetPollers(), func(p *taskqueuepb.PollerInfo) bool {
			return strings.HasPrefix(p.GetIdentity(), "drover-worker/") && p.GetDeploymentOptions().GetBuildId() == build
		}) {
			return
		}
	}
	t.Fatalf("Temporal lists no worker of build %s polling", build)
}

// stopJobAtEnd stops the job before the agent stops (a dev agent that
// stops leaves its raw_exec tasks running) and waits until its tasks
// have ended.
func stopJobAtEnd(t *testing.T, c *api.Client, id string) {
	t.Cleanup(func() {
		if _, _, err := c.Jobs().Deregister(id, false, nil); err != nil {
			t.Errorf("stop job %s: %v", id, err)
			return
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
			allocs, _, err := c.Jobs().Allocations(id, true, nil)
			live := err != nil
			for _, a := range allocs {
				live = live || a.ClientStatus == "running" || a.ClientStatus == "pending"
			}
			if !live {
				c.Jobs().Deregister(id, true, nil)
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("the workers of job %s still run a minute after it was stopped", id)
				return
			}
		}
	})
}

// TestNomadJobsRun runs both job files on a real `nomad agent -dev`
// against the Temporal dev server, their settings in Nomad Variables as
// docs/guides/deploy-nomad.md says: each worker comes up, its /healthz and /readyz checks
// pass, and Temporal lists it polling its queue; the central worker,
// hung (SIGSTOP), is restarted by its /healthz check. It logs each worker's
// resident memory, the figure the job files' limits come from.
func TestNomadJobsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Nomad agent and the Temporal dev server")
	}
	c := nomadClient(t)
	bins := bintest.Build(t, "worker")
	srv := devserver.Start(t, nil)
	pub, _, err := plans.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pem, err := plans.EncodePublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	archive := serveWorkerArchive(t, filepath.Join(bins, "worker"))
	items := api.VariableItems{"TEMPORAL_ADDRESS": srv.Address(), "TEMPORAL_NAMESPACE": "default", "DROVER_STORAGE_EAST_userID": "drover"}
	for _, j := range nomadJobs {
		v := &api.Variable{Path: "nomad/jobs/" + j.id, Items: items}
		if j.planKeys {
			v.Items = api.VariableItems{"plan_keys": string(pem)}
			for k, val := range items {
				v.Items[k] = val
			}
		}
		if _, _, err := c.Variables().Create(v, nil); err != nil {
			t.Fatal(err)
		}
		// The central worker runs the binary where it lies; the site
		// worker's job downloads it as an archive, as docs/guides/nomad-worker.md
		// says a client without the binary gets it.
		vars := fmt.Sprintf("driver = \"raw_exec\"\nworker_binary = %q\ncount = 1\n", filepath.Join(bins, "worker"))
		if !j.planKeys {
			vars = fmt.Sprintf("driver = \"raw_exec\"\nworker_url = %q\nworker_checksum = %q\ncount = 1\n", archive.url, archive.checksum)
		}
		job := parseJob(t, c, j, vars)
		job.TaskGroups[0].Spreads = nil // one node
		if _, _, err := c.Jobs().Register(job, nil); err != nil {
			t.Fatalf("register %s: %v", j.id, err)
		}
		stopJobAtEnd(t, c, j.id)
	}
	for _, j := range nomadJobs {
		var alloc *api.Allocation
		var checks api.AllocCheckStatuses
		deadline := time.Now().Add(2 * time.Minute)
		for ok := false; !ok; time.Sleep(500 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no running allocation with passing checks within 2 minutes: %+v %+v", j.id, alloc, checks)
			}
			allocs, _, err := c.Jobs().Allocations(j.id, false, nil)
			if err != nil || len(allocs) == 0 || allocs[0].ClientStatus != "running" {
				continue
			}
			if alloc, _, err = c.Allocations().Info(allocs[0].ID, nil); err != nil {
				continue
			}
			if checks, err = c.Allocations().Checks(alloc.ID, nil); err != nil || len(checks) != 2 {
				continue
			}
			ok = true
			for _, ch := range checks {
				ok = ok && ch.Status == "success"
			}
		}
		resp, err := srv.Client.DescribeTaskQueue(t.Context(), j.queue, enums.TASK_QUEUE_TYPE_ACTIVITY)
		if err != nil || !slices.ContainsFunc(resp.GetPollers(), func(p *taskqueuepb.PollerInfo) bool { return strings.HasPrefix(p.GetIdentity(), j.id+"/") }) {
			t.Errorf("%s: Temporal lists no worker of the job polling %s: %v %v", j.id, j.queue, resp.GetPollers(), err)
		}
		stats, err := c.Allocations().Stats(alloc, nil)
		if err != nil {
			t.Fatal(err)
		}
		ms := stats.ResourceUsage.MemoryStats
		t.Logf("%s: running, checks %d/2 passing; resident memory %.1f MiB (peak %.1f MiB)", j.id, len(checks), float64(ms.RSS)/(1<<20), float64(ms.MaxUsage)/(1<<20))
		if j.id == nomadJobs[0].id {
			hangAndSeeRestarted(t, c, alloc, stats)
		}
	}
}

// workerArchive is the worker binary as a .tar.gz served over HTTP on
// loopback, and its checksum as a Nomad artifact takes it.
type workerArchive struct{ url, checksum string }

// serveWorkerArchive packs bin as "worker" into a .tar.gz and serves it
// on 127.0.0.1 until the test ends.
func serveWorkerArchive(t *testing.T, bin string) workerArchive {
	t.Helper()
	body, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: "worker", Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	port, err := freeport.Port("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/gzip")
		_, _ = w.Write(buf.Bytes())
	})}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return workerArchive{url: fmt.Sprintf("http://%s/drover-worker.tar.gz", ln.Addr()), checksum: "sha256:" + hex.EncodeToString(sum[:])}
}

// hangAndSeeRestarted stops (SIGSTOP) the processes of alloc's worker
// task, as a worker that hangs, and waits until Nomad has restarted the
// task on its failed /healthz checks and the new one's checks pass.
func hangAndSeeRestarted(t *testing.T, c *api.Client, alloc *api.Allocation, stats *api.AllocResourceUsage) {
	t.Helper()
	task := stats.Tasks["worker"]
	if task == nil || len(task.Pids) == 0 {
		t.Fatalf("the agent lists no process of the worker task: %+v", stats.Tasks)
	}
	before := alloc.TaskStates["worker"].Restarts
	for pid := range task.Pids {
		n, err := strconv.Atoi(pid)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(n, syscall.SIGSTOP); err != nil {
			t.Fatalf("stop the worker's process %d: %v", n, err)
		}
	}
	start := time.Now()
	deadline := start.Add(3 * time.Minute)
	for ; ; time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("a hung worker was not restarted within 3 minutes (restarts %d)", before)
		}
		a, _, err := c.Allocations().Info(alloc.ID, nil)
		if err != nil || a.TaskStates["worker"] == nil || a.TaskStates["worker"].Restarts == before || a.TaskStates["worker"].State != "running" {
			continue
		}
		checks, err := c.Allocations().Checks(alloc.ID, nil)
		ok := err == nil && len(checks) == 2
		for _, ch := range checks {
			ok = ok && ch.Status == "success"
		}
		if ok {
			t.Logf("%s: the hung worker was restarted after %v, its checks pass again", alloc.JobID, time.Since(start).Round(time.Second))
			return
		}
	}
}
