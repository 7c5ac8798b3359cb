package workflows_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/nomadfake"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/orchestrators"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// shutdown is how long the tasks of the stop tests take to exit once
// Nomad asks them to.
const shutdown = 3 * time.Second

// slowNomadOnEast runs the fixture's workloads on east as Nomad jobs at
// addr (web priority 2, pg priority 1) whose tasks take shutdown to stop,
// started and healthy; west keeps its exec hooks.
func (f *fixture) slowNomadOnEast(t *testing.T, addr string) {
	t.Helper()
	f.plan.Sites[0].Orchestrator = plans.Orchestrator{Nomad: &plans.Nomad{Address: addr}}
	n, err := orchestrators.NewNomad("east", plans.Nomad{Address: addr}, "")
	mustOK(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for i := range f.plan.Workloads {
		w := &f.plan.Workloads[i]
		ref := &plans.NomadJob{Job: w.Name, Stop: plans.DefaultNomadStop, JobFile: nomadfake.WriteJobFile(t, nomadfake.SlowStopJob(w.Name, 1, shutdown))}
		w.Sites["east"] = plans.WorkloadRef{Nomad: ref}
		wl := orchestrators.Workload{Plan: "shop", Site: "east", Name: w.Name, Nomad: ref}
		_, err := n.StartWorkload(ctx, wl)
		mustOK(t, err)
		for {
			h, err := n.CheckHealth(ctx, wl)
			mustOK(t, err)
			if h.Healthy {
				break
			}
			if ctx.Err() != nil || h.Failed {
				t.Fatalf("%s on east: %+v", w.Name, h)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// taskTimes reads, from Nomad, when a job's tasks were told to stop (the
// first Killing event) and when the last one finished.
func taskTimes(t *testing.T, addr, job string) (killing, finished time.Time) {
	t.Helper()
	c, err := api.NewClient(&api.Config{Address: addr})
	mustOK(t, err)
	// Read once every allocation is terminal, so that a run that went on
	// while one still ran fails on the times below.
	var allocs []*api.AllocationListStub
	simtest.Eventually(t, 60*time.Second, "the allocations of "+job+" to be terminal", func() bool {
		allocs, _, err = c.Jobs().Allocations(job, true, nil)
		mustOK(t, err)
		for _, a := range allocs {
			if a.ClientStatus != api.AllocClientStatusComplete {
				return false
			}
		}
		return len(allocs) > 0
	})
	for _, a := range allocs {
		for name, ts := range a.TaskStates {
			if ts.FinishedAt.IsZero() {
				t.Fatalf("task %s of %s has no finish time: %+v", name, a.Name, ts)
			}
			if ts.FinishedAt.After(finished) {
				finished = ts.FinishedAt
			}
			for _, ev := range ts.Events {
				if ev.Type == api.TaskKilling && (killing.IsZero() || time.Unix(0, ev.Time).Before(killing)) {
					killing = time.Unix(0, ev.Time)
				}
			}
		}
	}
	if killing.IsZero() {
		t.Fatalf("job %s: Nomad recorded no %q event", job, api.TaskKilling)
	}
	return killing, finished
}

// demotedAt is when the site's copy of a unit was last demoted, as the
// storage recorded it.
func demotedAt(t *testing.T, s *simtest.Site, key string) time.Time {
	t.Helper()
	u := s.Snapshot().Unit(key)
	if u == nil {
		t.Fatalf("no unit %s on %s", key, s.Name())
	}
	var at time.Time
	for _, c := range u.RoleChanges {
		if c.Role == sim.RoleSecondary {
			at = c.Time
		}
	}
	if at.IsZero() {
		t.Fatalf("%s on %s was never demoted: %+v", key, s.Name(), u.RoleChanges)
	}
	return at
}

// TestPlannedStopsBeforeDemoting: a failback from east, or a reprotect
// of east after a failover, where east's Nomad jobs take seconds to shut
// down, demotes no volume on east until Nomad itself has recorded every
// task of every workload finished, and stops the tiers in reverse
// priority, each confirmed down before the next is told to stop: web
// (priority 2) has finished before pg (priority 1) is killed. Run against
// the fake agent and, when nomad is on PATH, a real one.
func TestPlannedStopsBeforeDemoting(t *testing.T) {
	for _, action := range []string{"failback", "reprotect"} {
		for _, agent := range []string{"fake", "agent"} {
			t.Run(action+"/"+agent, func(t *testing.T) {
				var addr string
				if agent == "fake" {
					// Each runs on its own fake agent and simulated sites,
					// and waits seconds for the slow stops: alongside each
					// other. (A real agent is one for all: one at a time.)
					t.Parallel()
					a := nomadfake.Start(t)
					a.StartDelay, a.HealthyAfter, a.StopDelay = 20*time.Millisecond, 20*time.Millisecond, shutdown
					addr = a.URL
				} else {
					addr = nomadfake.Agent(t)
				}
				f := newFixture(t)
				var wf, in any = workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "east", To: "west"}
				if action == "reprotect" {
					// West takes over; east comes back with its jobs
					// running again.
					f.east.Down()
					_, err := f.run(t, workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"}, nil)
					mustOK(t, err)
					mustOK(t, f.east.Up())
					wf, in = workflows.Reprotect, workflows.ReprotectInput{Plan: f.plan, From: "east", To: "west"}
				}
				f.slowNomadOnEast(t, addr)
				env, _ := f.env(t)
				// The tasks' shutdowns take real time.
				env.SetTestTimeout(2 * time.Minute)
				env.ExecuteWorkflow(wf, in)
				mustOK(t, env.GetWorkflowError())
				var res workflows.Progress
				if action == "reprotect" {
					var r workflows.ReprotectResult
					mustOK(t, env.GetWorkflowResult(&r))
					res = r.Progress
				} else {
					var r workflows.FailbackResult
					mustOK(t, env.GetWorkflowResult(&r))
					res = r.Progress
				}
				allDone(t, res)

				webKilled, webDone := taskTimes(t, addr, "web")
				pgKilled, pgDone := taskTimes(t, addr, "pg")
				if webDone.Sub(webKilled) < shutdown-time.Second {
					t.Fatalf("web took %v to stop; the test needs a slow stop", webDone.Sub(webKilled))
				}
				if !pgKilled.After(webDone) {
					t.Fatalf("pg (priority 1) was told to stop at %v, before web (priority 2) finished at %v", pgKilled, webDone)
				}
				last := webDone
				if pgDone.After(last) {
					last = pgDone
				}
				for _, key := range []string{"vg/vg-1", "vg/vg-2", "vol/solo"} {
					if at := demotedAt(t, f.east, key); !at.After(last) {
						t.Fatalf("%s on east was demoted at %v, while a task still ran (the last finished at %v)", key, at, last)
					}
				}
				for _, s := range res.Steps {
					if strings.HasPrefix(s.Name, "stop ") && (!s.Guard || !strings.Contains(s.Output, "are terminal")) {
						t.Fatalf("step %q: guard=%v output %q; want a guard that names the terminal allocations", s.Name, s.Guard, s.Output)
					}
				}
			})
		}
	}
}

// TestStopPastDeadlinePauses: a workload still running after the plan's
// stopDeadline pauses its stop step, naming the allocation that runs; no
// volume is demoted meanwhile; a retry once it has stopped carries on.
func TestStopPastDeadlinePauses(t *testing.T) {
	a := nomadfake.Start(t)
	a.StartDelay, a.HealthyAfter, a.StopDelay = 20*time.Millisecond, 20*time.Millisecond, shutdown
	f := newFixture(t)
	f.slowNomadOnEast(t, a.URL)
	f.plan.Policy.StopDeadline = plans.Duration(500 * time.Millisecond)
	env, calls := f.env(t)
	env.SetTestTimeout(2 * time.Minute)
	// Both tiers outlast the deadline: web (priority 2) pauses first, and
	// once it is retried, pg.
	var paused []*workflows.Step
	var demotedWhilePaused bool
	var skipRefused error
	resolve := func(job string) func() {
		return func() {
			s := pausedStep(t, env)
			paused = append(paused, s)
			demotedWhilePaused = demotedWhilePaused || indexOf(*calls, "DemoteVolume", "", "") >= 0
			if s == nil {
				return
			}
			send(t, env, workflows.UpdateResolve, workflows.Decision{Step: s.Name, Action: workflows.DecisionSkip},
				func() { t.Error("a skip of a stop step without override was accepted") }, func(err error) { skipRefused = err })
			simtest.Eventually(t, 30*time.Second, job+" to stop on east", func() bool {
				j := a.Job("", job)
				return j != nil && *j.Status == "dead"
			})
			send(t, env, workflows.UpdateResolve, workflows.Decision{Step: s.Name, Action: workflows.DecisionRetry}, nil, nil)
		}
	}
	env.RegisterDelayedCallback(resolve("web"), time.Hour)
	env.RegisterDelayedCallback(resolve("pg"), 2*time.Hour)
	env.ExecuteWorkflow(workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "east", To: "west"})
	if err := env.GetWorkflowError(); err != nil {
		for _, s := range progressOf(t, env).Steps {
			t.Logf("%s: %s %d %s", s.Name, s.State, s.Attempts, s.LastError)
		}
		t.Fatal(err)
	}
	for i, job := range []string{"web", "pg"} {
		if len(paused) <= i || paused[i] == nil || paused[i].Name != "stop "+job+" on east" || !strings.Contains(paused[i].LastError, job+".web[0]") ||
			!strings.Contains(paused[i].LastError, "still running") || !strings.Contains(paused[i].LastError, "500ms") {
			t.Fatalf("paused steps %+v; want %s's stop (number %d) naming its running allocation", paused, job, i+1)
		}
	}
	if demotedWhilePaused {
		t.Fatal("a volume was demoted while the stop step was paused")
	}
	if i, j := indexOf(*calls, "WaitStopped", "east", "pg"), indexOf(*calls, "DemoteVolume", "east", ""); i < 0 || j < i {
		t.Fatalf("pg's stop and the demotion are missing or out of order:\n%v", *calls)
	}
	// The operator cannot skip a stop step without an override.
	if skipRefused == nil || !strings.Contains(skipRefused.Error(), "needs --override") {
		t.Fatalf("skip of the paused stop step: %v; want a refusal", skipRefused)
	}
}

// TestLostSiteStopCutAndRunAgain: in a failover, the best-effort stop of
// a lost site's workload makes its first attempt as a local activity cut
// at one second, then runs the hook again as a regular activity within
// the stop deadline, as docs/design/architecture.md tells hook writers. A stop hook that
// takes 1.5 s is started twice, the first run cut before its end, the
// second run to its end, and the step reports the workload asked to
// stop: the lost site is not waited for, so nothing says it stopped.
func TestLostSiteStopCutAndRunAgain(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := newFixture(t)
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	log := filepath.Join(t.TempDir(), "stop.log")
	for i, w := range f.plan.Workloads {
		if w.Name == "web" {
			f.plan.Workloads[i].Sites["east"].Exec.Stop = fmt.Sprintf(`echo begun >> %s; sleep 1.5; echo ended >> %s`, log, log)
		}
	}
	f.east.Down()
	_, res := failOverEast(t, ctx, srv, f)
	cutThenRunWhole(t, log, "stop")
	i := slices.IndexFunc(res.Steps, func(s *workflows.Step) bool { return s.ID == "stop-workloads/east" })
	if i < 0 || !strings.Contains(res.Steps[i].Output, "web: asked to stop (not confirmed") || strings.Contains(res.Steps[i].Output, "web: stopped") {
		t.Fatalf("stop step of %+v, want web reported asked to stop, not stopped", res.Steps)
	}
}

// TestWorkloadStartCutAndRunAgain: a workload's start makes its first
// attempt as a local activity cut at one second, then runs the hook again
// as a regular activity, as docs/design/architecture.md tells hook writers. A start hook
// that takes 1.5 s is started twice, the first run cut before its end,
// the second run to its end, and the workload comes up.
func TestWorkloadStartCutAndRunAgain(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := newFixture(t)
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	log := filepath.Join(t.TempDir(), "start.log")
	for i, w := range f.plan.Workloads {
		if w.Name == "web" {
			ex := f.plan.Workloads[i].Sites["west"].Exec
			ex.Start = fmt.Sprintf(`echo begun >> %s; sleep 1.5; echo ended >> %s; %s`, log, log, ex.Start)
		}
	}
	f.east.Down()
	_, res := failOverEast(t, ctx, srv, f)
	cutThenRunWhole(t, log, "start")
	i := slices.IndexFunc(res.Steps, func(s *workflows.Step) bool { return s.ID == "start/west/web" })
	// The cut is not a failure: the step counts no failed try.
	if i < 0 || res.Steps[i].Retries != 0 || !strings.Contains(res.Steps[i].Output, "healthy") {
		t.Fatalf("start step of %+v, want web started and healthy with no failed try", res.Steps)
	}
}

// cutThenRunWhole checks the log of a hook that echoes "begun" and, 1.5 s
// later, "ended": its first run was cut at one second, the second ran to
// its end.
func cutThenRunWhole(t *testing.T, log, hook string) {
	t.Helper()
	b, err := os.ReadFile(log)
	mustOK(t, err)
	if got := strings.Fields(string(b)); !slices.Equal(got, []string{"begun", "begun", "ended"}) {
		t.Errorf("the %s hook ran as %v, want begun (cut at 1 s), begun, ended", hook, got)
	}
}
