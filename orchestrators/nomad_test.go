package orchestrators_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/drover-dr/drover/internal/nomadfake"
	"github.com/drover-dr/drover/orchestrators"
	"github.com/drover-dr/drover/plans"
)

// agent is a Nomad HTTP API to test against: the fake, or a real agent.
type agent struct {
	addr string
	fake *nomadfake.Server // nil for a real agent
}

// eachAgent runs the test against the fake agent and, when a nomad binary
// is on PATH, against a real `nomad agent -dev`.
func eachAgent(t *testing.T, test func(t *testing.T, a agent)) {
	t.Run("fake", func(t *testing.T) {
		f := nomadfake.Start(t)
		test(t, agent{addr: f.URL, fake: f})
	})
	t.Run("agent", func(t *testing.T) {
		test(t, agent{addr: nomadfake.Agent(t)})
	})
}

func ptr[T any](v T) *T { return &v }

var (
	serviceJob = nomadfake.ServiceJob
	jobFile    = func(t *testing.T, j *api.Job) string { return nomadfake.WriteJobFile(t, j) }
)

func nomadFor(t *testing.T, a agent, token string) *orchestrators.Nomad {
	t.Helper()
	n, err := orchestrators.NewNomad("west", plans.Nomad{Address: a.addr}, token)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func workload(job *plans.NomadJob) orchestrators.Workload {
	return orchestrators.Workload{Plan: "shop", Site: "west", Name: "web", Action: "failover", Nomad: job}
}

// waitHealth polls CheckHealth until cond holds (bounded), and returns the
// last health seen.
func waitHealth(t *testing.T, n *orchestrators.Nomad, w orchestrators.Workload, what string, cond func(orchestrators.Health) bool) orchestrators.Health {
	t.Helper()
	ctx := ctxT(t)
	var h orchestrators.Health
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var err error
		if h, err = n.CheckHealth(ctx, w); err != nil {
			t.Fatal(err)
		}
		if cond(h) {
			return h
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; last health: %+v", what, h)
	return h
}

func healthy(h orchestrators.Health) bool { return h.Healthy }

// retryTemporary repeats op while it fails with a temporary error, as the
// activity's retry policy does (bounded).
func retryTemporary(t *testing.T, what string, op func() (string, error)) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := op()
		if err == nil {
			return out
		}
		if !orchestrators.IsTemporary(err) || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestNomadDeregisterLifecycle: a job that is not on the site is
// registered from the plan's job file, becomes healthy, is stopped by
// deregistering (it stays queryable, dead, allocations complete), and is
// started again by re-registering.
func TestNomadDeregisterLifecycle(t *testing.T) {
	eachAgent(t, func(t *testing.T, a agent) {
		n := nomadFor(t, a, "")
		ctx := ctxT(t)
		w := workload(&plans.NomadJob{Job: "web", JobFile: jobFile(t, serviceJob("web", 1, "/bin/sleep")), Stop: "deregister", Groups: map[string]int{"web": 2}})

		d, err := n.DescribeWorkload(ctx, w)
		if err != nil || d.Exists || !strings.Contains(d.Detail, "start registers it from") || d.Groups["web"] != 1 {
			t.Fatalf("describe before start = %+v, %v", d, err)
		}
		if h, err := n.CheckHealth(ctx, w); err != nil || !h.Failed || h.Healthy {
			t.Fatalf("health of a missing job = %+v, %v; want failed", h, err)
		}
		out, err := n.StartWorkload(ctx, w)
		if err != nil || !strings.Contains(out, "registered job \"web\" from") {
			t.Fatalf("start = %q, %v", out, err)
		}
		h := waitHealth(t, n, w, "the registered job to be healthy", healthy)
		if !strings.Contains(h.Detail, "2/2 allocations running") || !strings.Contains(h.Detail, "deployment successful") {
			t.Fatalf("healthy detail %q", h.Detail)
		}
		if d, err = n.DescribeWorkload(ctx, w); err != nil || !d.Exists || d.Status != "running" || d.Groups["web"] != 2 {
			t.Fatalf("describe after start = %+v, %v", d, err)
		}

		out, err = n.StopWorkload(ctx, w)
		if err != nil || !strings.Contains(out, "deregistered job \"web\"") {
			t.Fatalf("stop = %q, %v", out, err)
		}
		c, err := api.NewClient(&api.Config{Address: a.addr})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			j, _, err := c.Jobs().Info("web", nil)
			if err != nil {
				t.Fatalf("a deregistered job (no purge) must stay queryable: %v", err)
			}
			allocs, _, err := c.Jobs().Allocations("web", false, nil)
			if err != nil {
				t.Fatal(err)
			}
			complete := len(allocs) > 0
			for _, al := range allocs {
				complete = complete && al.DesiredStatus == "stop" && al.ClientStatus == "complete"
			}
			if *j.Stop && *j.Status == "dead" && complete {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after deregister: stop=%v status=%s allocations %d", *j.Stop, *j.Status, len(allocs))
			}
			time.Sleep(50 * time.Millisecond)
		}
		if h, err := n.CheckHealth(ctx, w); err != nil || !h.Failed || !strings.Contains(h.Detail, "stopped") {
			t.Fatalf("health of a stopped job = %+v, %v", h, err)
		}
		if out, err := n.StopWorkload(ctx, w); err != nil || !strings.Contains(out, "already stopped") {
			t.Fatalf("second stop = %q, %v; want a no-op", out, err)
		}

		out, err = n.StartWorkload(ctx, w)
		if err != nil || !strings.Contains(out, "re-registered stopped job") {
			t.Fatalf("restart = %q, %v", out, err)
		}
		waitHealth(t, n, w, "the re-registered job to be healthy", healthy)
		if out, err := n.StartWorkload(ctx, w); err != nil || !strings.Contains(out, "already running") {
			t.Fatalf("second start = %q, %v; want a no-op", out, err)
		}
	})
}

// TestNomadScaleMode: stop by scaling to zero and start by scaling back.
// While a job's first deployment runs, Nomad refuses to scale it; that is
// a temporary error, and retrying finishes the job.
func TestNomadScaleMode(t *testing.T) {
	eachAgent(t, func(t *testing.T, a agent) {
		n := nomadFor(t, a, "")
		ctx := ctxT(t)
		spec := serviceJob("api", 2, "/bin/sleep")
		// Long enough that the deployment still runs when the stop comes.
		spec.Update.MinHealthyTime = ptr(3 * time.Second)
		w := workload(&plans.NomadJob{Job: "api", JobFile: jobFile(t, spec), Stop: "scale", Groups: map[string]int{"web": 2}})
		if _, err := n.StartWorkload(ctx, w); err != nil {
			t.Fatal(err)
		}
		// A real agent creates the deployment when its scheduler has
		// handled the registration, a moment after the register returns.
		raw, err := api.NewClient(&api.Config{Address: a.addr})
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			d, _, err := raw.Jobs().LatestDeployment("api", nil)
			if err == nil && d != nil && d.Status == "running" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no running deployment of api after 30s: %+v, %v", d, err)
			}
		}
		_, err = n.StopWorkload(ctx, w)
		var e *orchestrators.Error
		if !errors.As(err, &e) || !e.Temporary || !strings.Contains(e.Msg, "blocked while the job's deployment runs") {
			t.Fatalf("scale during the first deployment: %v; want a temporary 'blocked' error", err)
		}
		out := retryTemporary(t, "stop by scaling", func() (string, error) { return n.StopWorkload(ctx, w) })
		if !strings.Contains(out, "scaled api.web from 2 to 0") {
			t.Fatalf("stop = %q", out)
		}
		if out, err := n.StopWorkload(ctx, w); err != nil || !strings.Contains(out, "already scaled to zero") {
			t.Fatalf("second stop = %q, %v", out, err)
		}
		out = retryTemporary(t, "start by scaling", func() (string, error) { return n.StartWorkload(ctx, w) })
		if !strings.Contains(out, "scaled api.web to 2") && !strings.Contains(out, "already running") {
			t.Fatalf("start = %q", out)
		}
		waitHealth(t, n, w, "the scaled-up job to be healthy", healthy)
	})
}

// TestNomadFailingWorkload: allocations that fail fail the deployment;
// the health check says so (waiting is pointless) and names them.
func TestNomadFailingWorkload(t *testing.T) {
	eachAgent(t, func(t *testing.T, a agent) {
		n := nomadFor(t, a, "")
		w := workload(&plans.NomadJob{Job: "broken", JobFile: jobFile(t, serviceJob("broken", 1, "/bin/false"))})
		if _, err := n.StartWorkload(ctxT(t), w); err != nil {
			t.Fatal(err)
		}
		h := waitHealth(t, n, w, "the deployment to fail", func(h orchestrators.Health) bool { return h.Failed })
		if h.Healthy || len(h.Failing) == 0 || !strings.Contains(h.Failing[0], "broken.web[0]") || !strings.Contains(h.Detail, "deployment failed") {
			t.Fatalf("failed health = %+v", h)
		}
	})
}

// TestNomadErrors: what cannot work fails for good with a message that
// says what to fix; an unreachable agent is temporary.
func TestNomadErrors(t *testing.T) {
	eachAgent(t, func(t *testing.T, a agent) {
		n := nomadFor(t, a, "")
		ctx := ctxT(t)
		_, err := n.StartWorkload(ctx, workload(&plans.NomadJob{Job: "ghost"}))
		if err == nil || orchestrators.IsTemporary(err) || !strings.Contains(err.Error(), `job "ghost" is not registered on this site and the plan names no jobFile`) {
			t.Fatalf("start of a missing job without a file: %v", err)
		}
		_, err = n.StartWorkload(ctx, workload(&plans.NomadJob{Job: "other", JobFile: jobFile(t, serviceJob("web", 1, "/bin/sleep"))}))
		if err == nil || orchestrators.IsTemporary(err) || !strings.Contains(err.Error(), `defines job "web", the plan wants "other"`) {
			t.Fatalf("job file of another job: %v", err)
		}
		if out, err := n.StopWorkload(ctx, workload(&plans.NomadJob{Job: "ghost"})); err != nil || !strings.Contains(out, "nothing to stop") {
			t.Fatalf("stop of a missing job = %q, %v; want done", out, err)
		}
		_, err = n.StartWorkload(ctx, workload(&plans.NomadJob{Job: "web", Groups: map[string]int{"db": 1}}))
		if err == nil || orchestrators.IsTemporary(err) {
			t.Fatalf("start of a missing job: %v", err)
		}
	})
}

// TestNomadHCLJobFile: an HCL job file goes through the agent's parse
// endpoint before it is registered.
func TestNomadHCLJobFile(t *testing.T) {
	eachAgent(t, func(t *testing.T, a agent) {
		n := nomadFor(t, a, "")
		hcl := `# the cache, as the team deploys it
job "cache" {
  datacenters = ["*"]
  type = "service"
  group "web" {
    count = 1
    task "main" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["300"]
      }
    }
  }
}
`
		p := filepath.Join(t.TempDir(), "cache.nomad.hcl")
		if err := os.WriteFile(p, []byte(hcl), 0o600); err != nil {
			t.Fatal(err)
		}
		w := workload(&plans.NomadJob{Job: "cache", JobFile: p})
		if out, err := n.StartWorkload(ctxT(t), w); err != nil || !strings.Contains(out, "registered job \"cache\"") {
			t.Fatalf("start from HCL = %q, %v", out, err)
		}
		waitHealth(t, n, w, "the HCL job to be healthy", healthy)
	})
}

// TestNomadACLAndReachability needs the fake: it enforces a token and can
// be stopped on demand.
func TestNomadACLAndReachability(t *testing.T) {
	f := nomadfake.Start(t)
	f.Token = "s3cret-acl-token"
	ctx := ctxT(t)
	w := workload(&plans.NomadJob{Job: "web"})
	_, err := nomadFor(t, agent{addr: f.URL}, "wrong-token").StopWorkload(ctx, w)
	if err == nil || orchestrators.IsTemporary(err) || !strings.Contains(err.Error(), "check the site's ACL token") {
		t.Fatalf("wrong token: %v", err)
	}
	if strings.Contains(err.Error(), "wrong-token") || strings.Contains(err.Error(), f.Token) {
		t.Fatalf("the error %q carries a token", err)
	}
	if _, err := nomadFor(t, agent{addr: f.URL}, f.Token).StopWorkload(ctx, w); err != nil {
		t.Fatalf("right token: %v", err)
	}
	f.Close()
	_, err = nomadFor(t, agent{addr: f.URL}, f.Token).CheckHealth(ctx, w)
	if !orchestrators.IsTemporary(err) || !strings.Contains(err.Error(), "is unreachable") {
		t.Fatalf("agent down: %v; want temporary 'unreachable'", err)
	}
}

// TestNomadVolumes needs the fake: a dev agent has no CSI plugin to
// register volumes with. Describe reports each CSI volume the job claims
// and whether it is registered on the site.
func TestNomadVolumes(t *testing.T) {
	f := nomadfake.Start(t)
	f.AddVolume(api.CSIVolumeListStub{ID: "pg-data", Name: "pg-data", ExternalID: "0001-0009-rbd-east-0000000000000001",
		PluginID: "rbd.csi.ceph.com", Provider: "rbd.csi.ceph.com", Schedulable: true})
	j := serviceJob("pg", 1, "/bin/sleep")
	j.TaskGroups[0].Volumes = map[string]*api.VolumeRequest{
		"data": {Name: "data", Type: "csi", Source: "pg-data"},
		"wal":  {Name: "wal", Type: "csi", Source: "pg-wal"},
		"tmp":  {Name: "tmp", Type: "host", Source: "scratch"},
	}
	n := nomadFor(t, agent{addr: f.URL}, "")
	w := workload(&plans.NomadJob{Job: "pg", JobFile: jobFile(t, j)})
	if _, err := n.StartWorkload(ctxT(t), w); err != nil {
		t.Fatal(err)
	}
	d, err := n.DescribeWorkload(ctxT(t), w)
	if err != nil {
		t.Fatal(err)
	}
	want := []orchestrators.Volume{
		{ID: "pg-data", ExternalID: "0001-0009-rbd-east-0000000000000001", PluginID: "rbd.csi.ceph.com", Schedulable: true, Registered: true},
		{ID: "pg-wal"},
	}
	if !slices.Equal(d.Volumes, want) {
		t.Fatalf("volumes = %+v, want %+v", d.Volumes, want)
	}
}

// TestNomadWaitStopped: Nomad accepts a stop at once, but a task that
// takes seconds to shut down keeps its allocation running meanwhile.
// StopWorkload returns while it runs; WaitStopped returns only after
// Nomad recorded every task finished, and, cut short, names the
// allocations still running. Both stop modes.
func TestNomadWaitStopped(t *testing.T) {
	const shutdown = 3 * time.Second
	eachAgent(t, func(t *testing.T, a agent) {
		if a.fake != nil {
			a.fake.StopDelay = shutdown
		}
		n := nomadFor(t, a, "")
		raw, err := api.NewClient(&api.Config{Address: a.addr})
		if err != nil {
			t.Fatal(err)
		}
		for _, mode := range []string{"deregister", "scale"} {
			id := "slow-" + mode
			w := workload(&plans.NomadJob{Job: id, JobFile: jobFile(t, nomadfake.SlowStopJob(id, 2, shutdown)), Stop: mode, Groups: map[string]int{"web": 2}})
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			if _, err := n.StartWorkload(ctx, w); err != nil {
				t.Fatal(err)
			}
			waitHealth(t, n, w, id+" to be healthy", healthy)
			retryTemporary(t, "stop "+id, func() (string, error) { return n.StopWorkload(ctx, w) })
			stopped := time.Now()

			short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
			s, err := n.WaitStopped(short, w, 100*time.Millisecond, nil)
			cancelShort()
			if !errors.Is(err, context.DeadlineExceeded) || s.Stopped || len(s.Running) != 2 ||
				!strings.Contains(s.Detail, "2 of 2 allocation(s) of job \""+id+"\" still running") || !strings.Contains(s.Running[0], id+".web[") {
				t.Fatalf("%s: wait cut short right after the stop = %+v, %v; want both allocations named as running", mode, s, err)
			}

			var looks int
			s, err = n.WaitStopped(ctx, w, 100*time.Millisecond, func(orchestrators.Stopped) { looks++ })
			confirmed := time.Now()
			if err != nil || !s.Stopped || len(s.Running) != 0 || !strings.Contains(s.Detail, "are terminal") {
				t.Fatalf("%s: wait = %+v, %v", mode, s, err)
			}
			// Blocking queries: a handful of looks, not one per poll.
			if looks > 10 {
				t.Errorf("%s: %d looks in %v; want blocking queries", mode, looks, confirmed.Sub(stopped))
			}
			allocs, _, err := raw.Jobs().Allocations(id, true, nil)
			if err != nil || len(allocs) != 2 {
				t.Fatalf("%s: allocations %d, %v", mode, len(allocs), err)
			}
			for _, al := range allocs {
				if al.ClientStatus != api.AllocClientStatusComplete {
					t.Fatalf("%s: %s is %s after the wait", mode, al.Name, al.ClientStatus)
				}
				for name, ts := range al.TaskStates {
					// Nomad's own record: the task finished after its
					// shutdown delay, and before the wait returned.
					if ts.FinishedAt.IsZero() || ts.FinishedAt.After(confirmed) || ts.FinishedAt.Before(stopped.Add(shutdown-time.Second)) {
						t.Fatalf("%s: task %s of %s finished at %v; stop at %v, wait returned at %v", mode, name, al.Name,
							ts.FinishedAt, stopped, confirmed)
					}
				}
			}
		}
		// A job that is not registered has nothing running.
		if s, err := n.WaitStopped(ctxT(t), workload(&plans.NomadJob{Job: "ghost"}), time.Second, nil); err != nil || !s.Stopped {
			t.Fatalf("wait for a job that does not exist = %+v, %v", s, err)
		}
	})
}

// TestNomadJobFileErrors: a job file Nomad cannot parse is reported with
// the plan's jobFile path and the line and column, not the agent's
// "input.hcl", and with the operation that read it: start, or describe
// in a drill.
func TestNomadJobFileErrors(t *testing.T) {
	eachAgent(t, func(t *testing.T, a agent) {
		n := nomadFor(t, a, "")
		p := filepath.Join(t.TempDir(), "cache.nomad.hcl")
		if err := os.WriteFile(p, []byte("job \"cache\" {\n  type = \"service\" ,\n}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		w := workload(&plans.NomadJob{Job: "cache", JobFile: p})
		_, err := n.StartWorkload(ctxT(t), w)
		if err == nil || orchestrators.IsTemporary(err) || !strings.Contains(err.Error(), p+":2,") || strings.Contains(err.Error(), "input.hcl") ||
			!strings.HasPrefix(err.Error(), `start workload "web" on site "west" (failover): job file `) {
			t.Fatalf("start from a broken job file: %v", err)
		}
		w.Action = "drill"
		_, err = n.DescribeWorkload(ctxT(t), w)
		if err == nil || !strings.Contains(err.Error(), p+":2,") || strings.Contains(err.Error(), "input.hcl") ||
			!strings.HasPrefix(err.Error(), `describe workload "web" on site "west" (drill): job file `) {
			t.Fatalf("drill of a broken job file: %v", err)
		}
	})
}
