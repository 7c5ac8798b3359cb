package activities_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/nomadfake"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/orchestrators"
	"github.com/drover-dr/drover/plans"
)

// nomadPlan is a plan whose site "west" runs Nomad at addr, with the
// workload "web" on job jobID from a job file.
func nomadPlan(t *testing.T, addr, jobID, command string, token *plans.SecretRef) *plans.Plan {
	t.Helper()
	file := nomadfake.WriteJobFile(t, nomadfake.ServiceJob(jobID, 1, command))
	p := &plans.Plan{Metadata: plans.Metadata{Name: "shop"},
		Sites: []plans.Site{{Name: "west", Orchestrator: plans.Orchestrator{Nomad: &plans.Nomad{Address: addr, Token: token}}}},
		Workloads: []plans.Workload{{Name: "web", HealthTimeout: plans.Duration(30 * time.Second),
			Sites: map[string]plans.WorkloadRef{"west": {Nomad: &plans.NomadJob{Job: jobID, JobFile: file}}}}},
	}
	p.ApplyDefaults()
	return p
}

func workloadInput(t *testing.T, p *plans.Plan) activities.WorkloadInput {
	t.Helper()
	in, err := activities.WorkloadInputFor(p, "west", "web", "failover")
	mustOK(t, err)
	return in
}

// TestNomadWorkloadActivities: start, wait healthy and stop a Nomad
// workload through the activities, with the ACL token resolved from the
// worker's environment and kept out of errors.
func TestNomadWorkloadActivities(t *testing.T) {
	f := nomadfake.Start(t)
	f.Token = "acl-" + strings.Repeat("7", 20)
	t.Setenv("DROVER_NOMADTEST_TOKEN", f.Token)
	p := nomadPlan(t, f.URL, "web", "/bin/sleep", &plans.SecretRef{Env: "DROVER_NOMADTEST"})
	x := activities.NewWorkloads()
	env := activityEnv(t, newStorage(t))
	env.RegisterActivity(x)
	in := workloadInput(t, p)

	v, err := env.ExecuteActivity(x.StartWorkload, in)
	mustOK(t, err)
	var out activities.WorkloadOutput
	mustOK(t, v.Get(&out))
	if !strings.Contains(out.Output, `registered job "web"`) {
		t.Fatalf("start output %q", out.Output)
	}
	v, err = env.ExecuteActivity(x.WaitHealthy, activities.HealthInput{WorkloadInput: in, Timeout: 30 * time.Second, Interval: 20 * time.Millisecond})
	mustOK(t, err)
	var h activities.HealthOutcome
	mustOK(t, v.Get(&h))
	if !h.Health.Healthy || h.Polls < 2 {
		t.Fatalf("WaitHealthy = %+v; want healthy after a few checks (allocations start pending)", h)
	}
	v, err = env.ExecuteActivity(x.DescribeWorkload, in)
	mustOK(t, err)
	var d orchestrators.Description
	mustOK(t, v.Get(&d))
	if !d.Exists || d.Groups["web"] != 1 {
		t.Fatalf("describe = %+v", d)
	}
	_, err = env.ExecuteActivity(x.StopWorkload, in)
	mustOK(t, err)
	if calls := f.Calls(); !slices.Contains(calls, "DELETE /v1/job/web") {
		t.Fatalf("the agent saw %v, want a deregister", calls)
	}

	// A wrong token is final, and the error does not carry it.
	t.Setenv("DROVER_NOMADTEST_TOKEN", "not-the-token-value")
	_, err = env.ExecuteActivity(x.StopWorkload, in)
	if final, msg := wantType(t, err, activities.ErrWorkloadError); !final || strings.Contains(msg, "not-the-token-value") || strings.Contains(msg, f.Token) {
		t.Fatalf("wrong token: final=%v %q", final, msg)
	}
	// A missing token is a setup error.
	t.Setenv("DROVER_NOMADTEST_TOKEN", "")
	os.Unsetenv("DROVER_NOMADTEST_TOKEN")
	_, err = env.ExecuteActivity(x.StopWorkload, in)
	wantType(t, err, activities.ErrSecretUnavailable)
}

// TestWaitHealthyEnds: a failing deployment ends the wait at once, a slow
// one at the workload's health timeout; both are final.
func TestWaitHealthyEnds(t *testing.T) {
	f := nomadfake.Start(t)
	x := activities.NewWorkloads()
	env := activityEnv(t, newStorage(t))
	env.RegisterActivity(x)

	broken := workloadInput(t, nomadPlan(t, f.URL, "broken", "/bin/false", nil))
	_, err := env.ExecuteActivity(x.StartWorkload, broken)
	mustOK(t, err)
	_, err = env.ExecuteActivity(x.WaitHealthy, activities.HealthInput{WorkloadInput: broken, Timeout: time.Minute, Interval: 20 * time.Millisecond})
	if final, msg := wantType(t, err, activities.ErrWorkloadUnhealthy); !final || !strings.Contains(msg, "broken.web[0]") {
		t.Fatalf("failing workload: final=%v %q", final, msg)
	}

	f.StartDelay = time.Hour // allocations stay pending
	slow := workloadInput(t, nomadPlan(t, f.URL, "slow", "/bin/sleep", nil))
	_, err = env.ExecuteActivity(x.StartWorkload, slow)
	mustOK(t, err)
	_, err = env.ExecuteActivity(x.WaitHealthy, activities.HealthInput{WorkloadInput: slow, Timeout: 200 * time.Millisecond, Interval: 20 * time.Millisecond})
	if final, msg := wantType(t, err, activities.ErrHealthTimeout); !final || !strings.Contains(msg, "0/1 allocations running") {
		t.Fatalf("slow workload: final=%v %q", final, msg)
	}
}

// TestWaitStoppedEnds: a stop that Nomad accepted is confirmed only once
// every allocation is terminal; one still running past the deadline is a
// final ErrStillRunning naming the allocation. Against the fake agent and,
// when nomad is on PATH, a real one, with a task that takes seconds to
// shut down.
func TestWaitStoppedEnds(t *testing.T) {
	const shutdown = 3 * time.Second
	for _, agent := range []string{"fake", "agent"} {
		t.Run(agent, func(t *testing.T) {
			var addr string
			if agent == "fake" {
				f := nomadfake.Start(t)
				f.StartDelay, f.HealthyAfter, f.StopDelay = 10*time.Millisecond, 10*time.Millisecond, shutdown
				addr = f.URL
			} else {
				addr = nomadfake.Agent(t)
			}
			x := activities.NewWorkloads()
			env := activityEnv(t, newStorage(t))
			env.RegisterActivity(x)

			p := nomadPlan(t, addr, "slow", "/bin/sleep", nil)
			p.Workloads[0].Sites["west"].Nomad.JobFile = nomadfake.WriteJobFile(t, nomadfake.SlowStopJob("slow", 1, shutdown))
			in := workloadInput(t, p)
			_, err := env.ExecuteActivity(x.StartWorkload, in)
			mustOK(t, err)
			_, err = env.ExecuteActivity(x.WaitHealthy, activities.HealthInput{WorkloadInput: in, Timeout: time.Minute, Interval: 20 * time.Millisecond})
			mustOK(t, err)
			_, err = env.ExecuteActivity(x.StopWorkload, in)
			mustOK(t, err)
			_, err = env.ExecuteActivity(x.WaitStopped, activities.StopWaitInput{WorkloadInput: in, Deadline: 300 * time.Millisecond})
			if final, msg := wantType(t, err, activities.ErrStillRunning); !final || !strings.Contains(msg, "slow.web[0]") || !strings.Contains(msg, "running") {
				t.Fatalf("stop past its deadline: final=%v %q", final, msg)
			}
			v, err := env.ExecuteActivity(x.WaitStopped, activities.StopWaitInput{WorkloadInput: in, Deadline: time.Minute})
			mustOK(t, err)
			var out activities.StopOutcome
			mustOK(t, v.Get(&out))
			if !out.Stopped.Stopped || !strings.Contains(out.Stopped.Detail, "terminal") {
				t.Fatalf("confirmed stop = %+v", out)
			}
		})
	}
}

// TestExecHookRetries: a hook that exits with a try-again code is retried
// with the plan's back-off until it succeeds; one that fails is final.
func TestExecHookRetries(t *testing.T) {
	counter := filepath.Join(t.TempDir(), "tries")
	p := &plans.Plan{Metadata: plans.Metadata{Name: "shop"},
		Sites: []plans.Site{{Name: "west", Orchestrator: plans.Orchestrator{Exec: &plans.Exec{}}}},
		Workloads: []plans.Workload{{Name: "web", Sites: map[string]plans.WorkloadRef{"west": {Exec: &plans.ExecHooks{
			// Busy twice, then started.
			Start: `echo x >> "` + counter + `"; [ "$(wc -l < "` + counter + `")" -ge 3 ] || { echo busy; exit 75; }; echo started`,
			Stop:  `echo "no such unit"; exit 3`,
		}}}}},
	}
	p.ApplyDefaults()
	in := workloadInput(t, p)
	x := activities.NewWorkloads()
	var out activities.WorkloadOutput
	attempts, err := runActivity(t, []any{x}, activities.WorkloadOptions(p, "west", in.Workload), "StartWorkload", in, &out)
	mustOK(t, err)
	if len(attempts) != 3 || out.Output != "started\n" {
		t.Fatalf("%d attempts, output %q; want 3 and started", len(attempts), out.Output)
	}
	if g := gaps(attempts); !slices.Equal(g, []time.Duration{time.Second, 2 * time.Second}) {
		t.Fatalf("back-off %v", g)
	}
	attempts, err = runActivity(t, []any{x}, activities.WorkloadOptions(p, "west", in.Workload), "StopWorkload", in, nil)
	if len(attempts) != 1 {
		t.Fatalf("%d attempts of a failing stop hook, want 1", len(attempts))
	}
	if final, msg := wantType(t, err, activities.ErrWorkloadError); !final || !strings.Contains(msg, "stop hook exited 3") || !strings.Contains(msg, "no such unit") {
		t.Fatalf("failing hook: final=%v %q", final, msg)
	}
}

// TestHookOutputRedactedOfResolvedSecrets: hook output leaves the
// activity redacted of every secret value the worker has resolved, also
// of a storage secret the hook reads by itself (here from a file) and of
// the hook's own secretEnv, in its output and in its error.
func TestHookOutputRedactedOfResolvedSecrets(t *testing.T) {
	const storageSecret = "storage-key-7d41c0ffee"
	const hookSecret = "hook-password-0b5e"
	t.Setenv("DROVER_REDACTTEST_userKey", storageSecret)
	t.Setenv("DROVER_HOOKTEST_password", hookSecret)
	if _, err := (activities.EnvFileSecrets{}).Resolve(&plans.SecretRef{Env: "DROVER_REDACTTEST"}); err != nil {
		t.Fatal(err)
	}
	leak := filepath.Join(t.TempDir(), "leak")
	mustOK(t, os.WriteFile(leak, []byte("key="+storageSecret+"\n"), 0o600))
	p := &plans.Plan{Metadata: plans.Metadata{Name: "shop"},
		Sites: []plans.Site{{Name: "west", Orchestrator: plans.Orchestrator{Exec: &plans.Exec{
			SecretEnv: map[string]plans.SecretKey{"PASSWORD": {Env: "DROVER_HOOKTEST", Key: "password"}}}}}},
		Workloads: []plans.Workload{{Name: "web", Sites: map[string]plans.WorkloadRef{"west": {Exec: &plans.ExecHooks{
			Start: "cat " + leak + "; echo pw=$PASSWORD",
			Stop:  "cat " + leak + "; echo pw=$PASSWORD; exit 3",
		}}}}},
	}
	in := workloadInput(t, p)
	x := activities.NewWorkloads()
	out, err := x.StartWorkload(t.Context(), in)
	mustOK(t, err)
	if want := "key=[redacted]\npw=[redacted]\n"; out.Output != want {
		t.Fatalf("start output %q, want %q", out.Output, want)
	}
	_, err = x.StopWorkload(t.Context(), in)
	if err == nil || !strings.Contains(err.Error(), "exited 3") {
		t.Fatalf("stop error %v, want the hook's exit 3", err)
	}
	if strings.Contains(err.Error(), storageSecret) || strings.Contains(err.Error(), hookSecret) || !strings.Contains(err.Error(), "pw=[redacted]") {
		t.Fatalf("stop error carries a secret or lost the output: %v", err)
	}
}

// TestWaitHealthyReportsUnreachable: a health wait on a Nomad that does
// not answer returns at once with the reason it waits, for the step's
// note, instead of staying silent until the health timeout; called again
// with what it said and when it began, it keeps waiting and counts the
// timeout from the first call.
func TestWaitHealthyReportsUnreachable(t *testing.T) {
	addr := "http://" + simtest.FreeAddr(t) // nothing listens there
	x := activities.NewWorkloads()
	env := activityEnv(t, newStorage(t))
	env.RegisterActivity(x)
	in := workloadInput(t, nomadPlan(t, addr, "web", "/bin/sleep", nil))

	start := time.Now()
	v, err := env.ExecuteActivity(x.WaitHealthy, activities.HealthInput{WorkloadInput: in, Timeout: time.Minute,
		Interval: 20 * time.Millisecond, Report: true})
	mustOK(t, err)
	var h activities.HealthOutcome
	mustOK(t, v.Get(&h))
	if h.Health.Healthy || !strings.Contains(h.Waiting, "unreachable") || time.Since(start) > 10*time.Second {
		t.Fatalf("WaitHealthy on a dead Nomad = %+v after %v; want it back at once saying Nomad is unreachable", h, time.Since(start))
	}
	t.Logf("waiting: %s", h.Waiting)

	// Told what it said, it waits on; the timeout counts from Since.
	_, err = env.ExecuteActivity(x.WaitHealthy, activities.HealthInput{WorkloadInput: in, Timeout: time.Minute,
		Interval: 20 * time.Millisecond, Report: true, Known: h.Waiting, Since: time.Now().Add(-time.Minute)})
	if final, msg := wantType(t, err, activities.ErrHealthTimeout); !final || !strings.Contains(msg, "unreachable") {
		t.Fatalf("continued wait: final=%v %q", final, msg)
	}
}
