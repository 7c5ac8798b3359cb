package workflows_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"

	"github.com/drover-dr/drover/internal/nomadfake"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// nomadSites moves the fixture's workloads to Nomad: each site gets a fake
// agent, pg (priority 1) and web (priority 2) become jobs registered from
// job files on start; webCommand is what web's task runs on west.
func (f *fixture) nomadSites(t *testing.T, webCommand string) (east, west *nomadfake.Server) {
	t.Helper()
	east, west = nomadfake.Start(t), nomadfake.Start(t)
	for _, a := range []*nomadfake.Server{east, west} {
		a.StartDelay, a.HealthyAfter = 20*time.Millisecond, 20*time.Millisecond
	}
	f.plan.Sites[0].Orchestrator = plans.Orchestrator{Nomad: &plans.Nomad{Address: east.URL}}
	f.plan.Sites[1].Orchestrator = plans.Orchestrator{Nomad: &plans.Nomad{Address: west.URL}}
	job := func(id, command string) *plans.NomadJob {
		return &plans.NomadJob{Job: id, Stop: plans.DefaultNomadStop, JobFile: nomadfake.WriteJobFile(t, nomadfake.ServiceJob(id, 1, command))}
	}
	for i := range f.plan.Workloads {
		w := &f.plan.Workloads[i]
		westCmd := "/bin/sleep"
		if w.Name == "web" {
			westCmd = webCommand
		}
		w.HealthTimeout = plans.Duration(time.Minute)
		w.Sites = map[string]plans.WorkloadRef{"east": {Nomad: job(w.Name, "/bin/sleep")}, "west": {Nomad: job(w.Name, westCmd)}}
	}
	return east, west
}

// TestFailoverStartsNomadJobsByPriority: the failover registers and waits
// for pg (priority 1) before it starts web (priority 2) on west's Nomad.
func TestFailoverStartsNomadJobsByPriority(t *testing.T) {
	f := newFixture(t)
	_, west := f.nomadSites(t, "/bin/sleep")
	f.east.Down()
	var res workflows.FailoverResult
	calls, err := f.run(t, workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"}, &res)
	mustOK(t, err)
	allDone(t, res.Progress)
	inOrder(t, calls,
		[3]string{"StartWorkload", "west", "pg"},
		[3]string{"WaitHealthy", "west", "pg"},
		[3]string{"StartWorkload", "west", "web"},
		[3]string{"WaitHealthy", "west", "web"})
	got := west.Calls()
	if len(got) < 2 || got[0] != "PUT /v1/jobs" || west.Job("", "pg") == nil || west.Job("", "web") == nil {
		t.Fatalf("west's agent saw %v", got)
	}
	for _, s := range res.Steps {
		if s.Name == "start web on west" && !strings.Contains(s.Output, "deployment successful") {
			t.Fatalf("web's step says %q", s.Output)
		}
	}
}

// TestFailoverPausesOnUnhealthyWorkload: a workload whose deployment fails
// pauses the failover at its start step, after the storage is promoted,
// for the operator to decide.
func TestFailoverPausesOnUnhealthyWorkload(t *testing.T) {
	f := newFixture(t)
	f.nomadSites(t, "/bin/false")
	f.east.Down()
	env, calls := f.env(t)
	var paused string
	env.RegisterDelayedCallback(func() {
		if s := pausedStep(t, env); s != nil {
			paused = s.Name + ": " + s.LastError
		}
		send(t, env, workflows.UpdateResolve, workflows.Decision{Step: "start web on west", Action: workflows.DecisionAbort}, nil, nil)
	}, time.Hour)
	env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	if !strings.HasPrefix(paused, "start web on west: ") || !strings.Contains(paused, "will not become healthy") || !strings.Contains(paused, "web.web[0]") {
		t.Fatalf("paused: %q", paused)
	}
	var ae *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &ae) || ae.Type() != workflows.ErrAborted {
		t.Fatalf("error %v, want the operator's abort", err)
	}
	inOrder(t, *calls,
		[3]string{"PromoteVolume", "west", "vg-1"},
		[3]string{"WaitHealthy", "west", "pg"},
		[3]string{"WaitHealthy", "west", "web"})
}

// TestHealthWaitSaysNomadIsUnreachable: when west's Nomad stops answering
// while a failover waits for web to become healthy, the running start
// step's note says that Nomad is unreachable (read with the progress
// query on the dev server, as drctl reads it) instead of staying silent
// until the health timeout.
func TestHealthWaitSaysNomadIsUnreachable(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a dev server")
	}
	srv := devserver.Start(t, nil)
	f := newFixture(t)
	_, west := f.nomadSites(t, "/bin/sleep")
	for i := range f.plan.Workloads {
		if f.plan.Workloads[i].Name == "web" {
			f.plan.Workloads[i].HealthTimeout = plans.Duration(40 * time.Second)
		}
	}
	f.plan.Policy.OnFailure = "abort"
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	west.HealthyAfter = time.Hour // web never becomes healthy
	f.east.Down()
	run, err := workflows.Start(ctx, srv.Client, "shop", workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, err)
	defer func() {
		_ = srv.Client.TerminateWorkflow(context.Background(), run.GetID(), run.GetRunID(), "test over")
	}()

	closed, note := false, ""
	deadline := time.Now().Add(35 * time.Second)
	for time.Now().Before(deadline) && note == "" {
		v, err := srv.Client.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), workflows.QueryProgress)
		mustOK(t, err)
		var p workflows.Progress
		mustOK(t, v.Get(&p))
		for _, s := range p.Steps {
			if s.Name != "start web on west" || s.State != workflows.StateRunning {
				continue
			}
			if !closed && west.Job("", "web") != nil {
				west.Close() // Nomad on west stops answering
				closed = true
			}
			if closed && strings.Contains(s.Note, "unreachable") {
				note = s.Note
			}
		}
		if p.State != workflows.StateRunning {
			t.Fatalf("the failover ended (%s) before the health wait said why it waits", p.State)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !closed {
		t.Fatal("web was never registered on west")
	}
	if !strings.HasPrefix(note, "not healthy yet: ") {
		t.Fatalf("the running start step's note never said Nomad is unreachable (got %q)", note)
	}
	t.Logf("note: %s", note)
}
