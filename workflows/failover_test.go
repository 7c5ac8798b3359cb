package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/stretchr/testify/mock"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/grpc"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/internal/wftest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// fixture is a simulated pair, east primary and west secondary, with
// replication on and synced, a plan over it with two groups and two exec
// workloads of different priorities, and a log of the hooks that ran.
type fixture struct {
	east, west *simtest.Site
	plan       *plans.Plan
	hooks      string
	storage    *activities.Storage
	workloads  *activities.Workloads
	// onCall, when set, sees each activity call as it starts, before it
	// runs: a test looks at the storage at that moment.
	onCall func(call)
	// running, when set, answers which plans run an action of their own
	// (RunReader.RunningActions); by default none do.
	running func(plans []string) ([]string, error)
	// record holds the changes the actions sent to the plan's record.
	record   []workflows.RecordChange
	recordMu sync.Mutex // the environment sends changes from goroutines
	// onRPC, when set, sees every gRPC call as it reaches a site's
	// storage (site is "east" or "west"), before the storage handles it,
	// and its answer after: a test looks at the storage's state at the
	// moment the call arrives, whichever activity made it.
	onRPC func(site, method string, req any, handle func() (any, error)) (any, error)
	rpcMu sync.Mutex
	// retargets holds what the actions told the plan's protection.
	retargets []workflows.Retarget
	// metrics, when set, takes the workflows' metrics in testEnv.
	metrics client.MetricsHandler
	// trust, when set, is the plan check of testEnv; by default it
	// accepts unsigned plans.
	trust *activities.PlanTrust
}

// intercept is the gRPC interceptor of site's storage that hands each
// call to onRPC.
func (f *fixture) intercept(site string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		f.rpcMu.Lock()
		on := f.onRPC
		f.rpcMu.Unlock()
		if on == nil {
			return handler(ctx, req)
		}
		return on(site, path.Base(info.FullMethod), req, func() (any, error) { return handler(ctx, req) })
	}
}

// setOnRPC sets onRPC while the sites serve.
func (f *fixture) setOnRPC(on func(site, method string, req any, handle func() (any, error)) (any, error)) {
	f.rpcMu.Lock()
	defer f.rpcMu.Unlock()
	f.onRPC = on
}

func newFixture(t *testing.T) *fixture { return newFixtureN(t, 0) }

// newFixtureN adds extra groups vg-0001… of one volume each, at priorities
// 2 and 3.
func newFixtureN(t *testing.T, extra int) *fixture {
	return newFixtureWith(t, extra, 20*time.Millisecond)
}

// newFixtureWith is newFixtureN with the sites' sync interval.
func newFixtureWith(t *testing.T, extra int, interval time.Duration) *fixture {
	t.Helper()
	groups := append([]sim.GroupSpec{{ID: "vg-1", Volumes: []string{"v1", "v2"}}, {ID: "vg-2", Volumes: []string{"v3"}}}, sim.GenerateGroups(extra, 1)...)
	f := &fixture{}
	east, west := simtest.StartPair(t, simtest.Options{Interval: interval, Groups: groups, Volumes: []string{"solo"},
		TweakA: func(c *sim.Config) { c.Name, c.Intercept = "east", f.intercept("east") },
		TweakB: func(c *sim.Config) { c.Name, c.Intercept = "west", f.intercept("west") }})
	hooks := filepath.Join(t.TempDir(), "hooks.log")
	hook := func(what string) plans.ExecHooks {
		return plans.ExecHooks{
			Start: fmt.Sprintf(`echo "%s start $DROVER_SITE" >> %s`, what, hooks),
			Stop:  fmt.Sprintf(`echo "%s stop $DROVER_SITE" >> %s`, what, hooks),
		}
	}
	refs := func(what string) map[string]plans.WorkloadRef {
		e, w := hook(what), hook(what)
		return map[string]plans.WorkloadRef{"east": {Exec: &e}, "west": {Exec: &w}}
	}
	p := &plans.Plan{
		APIVersion: plans.APIVersion, Kind: plans.Kind, Metadata: plans.Metadata{Name: "shop"},
		Sites: []plans.Site{
			{Name: "east", Storage: plans.Storage{Endpoint: east.Endpoint()}, Fence: plans.Fence{CIDRs: []string{simtest.NodeA + "/32"}},
				Orchestrator: plans.Orchestrator{Exec: &plans.Exec{}}},
			{Name: "west", Storage: plans.Storage{Endpoint: west.Endpoint()}, Fence: plans.Fence{CIDRs: []string{simtest.NodeB + "/32"}},
				Orchestrator: plans.Orchestrator{Exec: &plans.Exec{}}},
		},
		VolumeGroups: []plans.VolumeGroup{
			{Name: "loose", Priority: 1, Sites: map[string]plans.GroupRef{"east": {Volumes: []string{"solo"}}, "west": {Volumes: []string{"solo"}}}},
			{Name: "db", Priority: 0, Sites: map[string]plans.GroupRef{"east": {GroupID: "vg-1"}, "west": {GroupID: "vg-1"}}},
			{Name: "logs", Priority: 0, Sites: map[string]plans.GroupRef{"east": {GroupID: "vg-2"}, "west": {GroupID: "vg-2"}}},
		},
		Workloads: []plans.Workload{
			{Name: "web", Priority: 2, Sites: refs("web")},
			{Name: "pg", Priority: 1, Sites: refs("pg")},
		},
	}
	for i, g := range groups[2:] {
		p.VolumeGroups = append(p.VolumeGroups, plans.VolumeGroup{Name: g.ID, Priority: 2 + i%2,
			Sites: map[string]plans.GroupRef{"east": {GroupID: g.ID}, "west": {GroupID: g.ID}}})
	}
	p.ApplyDefaults()
	f.east, f.west, f.plan, f.hooks, f.storage, f.workloads = east, west, p, hooks, activities.NewStorage(), activities.NewWorkloads()
	t.Cleanup(func() { f.storage.Close() })

	// Replication on, data written on east and shipped to west.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, site := range []string{"east", "west"} {
		for _, g := range p.VolumeGroups {
			ins, err := activities.ReplicationInputs(p, site, g.Name, activities.RPCEnableVolumeReplication, false)
			mustOK(t, err)
			for _, in := range ins {
				mustOK(t, f.storage.EnableVolumeReplication(ctx, in))
			}
		}
	}
	c, err := sim.NewClient(east.DataAddr(), simtest.NodeA, "east-node")
	mustOK(t, err)
	defer c.Close()
	_, err = c.Write(ctx, "v1", 0, []byte("order 1"))
	mustOK(t, err)
	after := time.Now()
	for _, g := range p.VolumeGroups { // every source has synced once
		ins, err := activities.ReplicationInputs(p, "east", g.Name, activities.RPCGetVolumeReplicationInfo, false)
		mustOK(t, err)
		for _, in := range ins {
			_, err = f.storage.WaitForSync(ctx, activities.WaitSyncInput{Call: in, After: after, Interval: 10 * time.Millisecond})
			mustOK(t, err)
		}
	}
	return f
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// call is one activity call as the test environment saw it.
type call struct {
	name, site, subject string
	force               bool
}

func (c call) String() string { return strings.TrimSpace(c.name + " " + c.site + " " + c.subject) }

// testEnv is a test workflow environment with the real activities
// registered and every activity call recorded in order.
func (f *fixture) testEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, *[]call) {
	t.Helper()
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	if f.metrics != nil {
		ts.SetMetricsHandler(f.metrics)
	}
	env := wftest.New(&ts)
	workflows.Register(env)
	trust := f.trust
	if trust == nil {
		trust = &activities.PlanTrust{AllowUnsigned: true}
	}
	env.RegisterActivity(trust)
	// The worker's seal of the changes the workflow sends its record
	// (no client: it signals nothing itself).
	env.RegisterActivity(&workflows.RecordSender{})
	env.RegisterActivity(f.storage)
	env.RegisterActivity(f.workloads)
	// Which plans run an action of their own: none here (the site test
	// with a busy plan runs on the dev server, as cmd/drctl's).
	env.RegisterActivity(&workflows.RunReader{})
	env.OnActivity("RunningActions", mock.Anything, mock.Anything).Return(func(_ context.Context, plans []string) ([]string, error) {
		if f.running != nil {
			return f.running(plans)
		}
		return nil, nil
	}).Maybe()
	calls := &[]call{}
	add := func(info *activity.Info, in map[string]any) {
		switch info.ActivityType.Name {
		case "VerifyPlan", "SendRecordChange", "SealRecordChange", "StartedBy", "RunningActions", "Settle", "ViewRecord":
			// The plan check, the worker's read of and signal to the
			// plan's record (not registered here: the workflow signals
			// it, as below), are no calls to storage or a CO.
			return
		}
		c := call{name: info.ActivityType.Name}
		if c.name == "ReplicateBatch" && in != nil {
			// A batch is one call of its RPC per group, as the storage sees it.
			site, _ := in["endpoint"].(map[string]any)["site"].(string)
			force, _ := in["force"].(bool)
			items, _ := in["items"].([]any)
			for _, it := range items {
				for _, src := range it.(map[string]any)["sources"].([]any) {
					s := src.(map[string]any)
					b := call{name: in["rpc"].(string), site: site, force: force,
						subject: strings.ReplaceAll(fmt.Sprint(s["groupID"], s["volumeID"]), "<nil>", "")}
					*calls = append(*calls, b)
					if f.onCall != nil {
						f.onCall(b)
					}
				}
			}
			return
		}
		if in != nil {
			switch {
			case in["endpoint"] != nil:
				c.site, _ = in["endpoint"].(map[string]any)["site"].(string)
			case in["call"] != nil:
				c.site, _ = in["call"].(map[string]any)["endpoint"].(map[string]any)["site"].(string)
			case in["calls"] != nil: // a batch of one site's calls
				if cs, _ := in["calls"].([]any); len(cs) > 0 {
					c.site, _ = cs[0].(map[string]any)["endpoint"].(map[string]any)["site"].(string)
				}
			case in["workload"] != nil:
				w := in["workload"].(map[string]any)
				c.site, _ = w["site"].(string)
				c.subject, _ = w["name"].(string)
			}
			c.force, _ = in["force"].(bool)
			if cl, ok := in["call"].(map[string]any); ok {
				// A polling call (ResyncUntilReady): its call's force and source.
				c.force, _ = cl["force"].(bool)
				in = cl
			}
			if src, ok := in["source"].(map[string]any); ok {
				c.subject = fmt.Sprint(src["groupID"], src["volumeID"])
				c.subject = strings.ReplaceAll(c.subject, "<nil>", "")
			}
		}
		*calls = append(*calls, c)
		if f.onCall != nil {
			f.onCall(c)
		}
	}
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		var in map[string]any
		if args.Get(&in) != nil {
			in = nil
		}
		add(info, in)
	})
	// The plan's record is a workflow of its own, elsewhere: the
	// environment keeps the changes sent to it.
	env.OnSignalExternalWorkflow(mock.Anything, workflows.RecordID(f.plan.Metadata.Name), "", workflows.SignalRecord, mock.Anything).Return(
		func(_, _, _, _ string, arg any) error {
			f.recordMu.Lock()
			defer f.recordMu.Unlock()
			// A signal may carry more changes, sent together: the
			// changes are kept one by one, in order.
			c := arg.(workflows.RecordChange)
			more := c.More
			c.More = nil
			f.record = append(f.record, c)
			f.record = append(f.record, more...)
			return nil
		})
	// So is each plan's protection: the environment keeps what a
	// failover tells it (a site action's plans each tell their own).
	anyProtect := mock.MatchedBy(func(id string) bool { return strings.HasPrefix(id, workflows.ProtectIDPrefix) })
	env.OnSignalExternalWorkflow(mock.Anything, anyProtect, "", workflows.SignalRetarget, mock.Anything).Return(
		func(_, _, _, _ string, arg any) error {
			f.recordMu.Lock()
			defer f.recordMu.Unlock()
			f.retargets = append(f.retargets, arg.(workflows.Retarget))
			return nil
		}).Maybe()
	// Single storage calls run as local activities; their arguments come
	// unencoded.
	env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, args []any) {
		var in map[string]any
		if len(args) == 1 {
			if data, err := json.Marshal(args[0]); err == nil && json.Unmarshal(data, &in) != nil {
				in = nil
			}
		}
		add(info, in)
	})
	return env, calls
}

// env is testEnv for the actions. Reprotect and failback end by starting
// Protect, a child that would outlive them and run on here forever: the
// environment records it instead.
func (f *fixture) env(t *testing.T) (*testsuite.TestWorkflowEnvironment, *[]call) {
	env, calls := f.testEnv(t)
	env.OnWorkflow(workflows.Protect, mock.Anything, mock.Anything).Return(
		func(_ workflow.Context, in workflows.ProtectInput) (*workflows.ProtectState, error) {
			*calls = append(*calls, call{name: "Protect", site: in.Primary})
			return &workflows.ProtectState{Primary: in.Primary}, nil
		})
	return env, calls
}

// send sends an update from inside the test environment. accepted and
// rejected, when not nil, see the outcome; by default a rejection fails
// the test.
func send(t *testing.T, env *testsuite.TestWorkflowEnvironment, name string, arg any, accepted func(), rejected func(error)) {
	if accepted == nil {
		accepted = func() {}
	}
	if rejected == nil {
		rejected = func(err error) { t.Errorf("update %s rejected: %v", name, err) }
	}
	env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{OnAccept: accepted, OnReject: rejected, OnComplete: func(any, error) {}}, arg)
}

// progressOf answers the progress query from inside the test environment.
func progressOf(t *testing.T, env *testsuite.TestWorkflowEnvironment) workflows.Progress {
	t.Helper()
	v, err := env.QueryWorkflow(workflows.QueryProgress)
	mustOK(t, err)
	var p workflows.Progress
	mustOK(t, v.Get(&p))
	return p
}

// pausedStep is the step waiting for the operator, if any.
func pausedStep(t *testing.T, env *testsuite.TestWorkflowEnvironment) *workflows.Step {
	t.Helper()
	for _, s := range progressOf(t, env).Steps {
		if s.State == workflows.StatePaused {
			return s
		}
	}
	return nil
}

func indexOf(calls []call, name, site, subject string) int {
	for i, c := range calls {
		if c.name == name && (site == "" || c.site == site) && (subject == "" || c.subject == subject) {
			return i
		}
	}
	return -1
}

func lastIndexOf(calls []call, name string) int {
	last := -1
	for i, c := range calls {
		if c.name == name {
			last = i
		}
	}
	return last
}

// TestFailoverSequence: east is lost; the failover runs every step in the
// design's order, fences east's clients before promoting anything,
// promotes by priority, starts workloads by priority, and leaves the
// simulated storage with west primary, east's client fenced and no
// invariant broken.
func TestFailoverSequence(t *testing.T) {
	f := newFixture(t)
	f.east.Down()
	env, calls := f.env(t)
	lastSync := time.Now().Add(-time.Minute)
	env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west", LastSync: lastSync})
	if !env.IsWorkflowCompleted() {
		t.Fatal("the failover did not complete")
	}
	mustOK(t, env.GetWorkflowError())
	var res workflows.FailoverResult
	mustOK(t, env.GetWorkflowResult(&res))

	// The preflight's two calls run at once, in either order.
	order := []int{
		min(indexOf(*calls, "Probe", "west", ""), indexOf(*calls, "GetCapabilities", "west", "")),
		max(indexOf(*calls, "Probe", "west", ""), indexOf(*calls, "GetCapabilities", "west", "")),
		indexOf(*calls, "StopWorkload", "east", ""),
		indexOf(*calls, "FenceClusterNetwork", "west", ""),
		indexOf(*calls, "ListClusterFence", "west", ""),
		indexOf(*calls, "PromoteVolume", "west", ""),
		indexOf(*calls, "StartWorkload", "west", ""),
	}
	for i := 1; i < len(order); i++ {
		if order[i-1] < 0 || order[i] < order[i-1] {
			t.Fatalf("calls out of order %v:\n%v", order, *calls)
		}
	}
	if lastIndexOf(*calls, "ListClusterFence") > indexOf(*calls, "PromoteVolume", "", "") {
		t.Fatal("a promotion happened before the fence was verified")
	}
	// Priority 0 (db, logs) before priority 1 (loose); pg before web.
	if i, j := lastIndexOf(*calls, "PromoteVolume"), indexOf(*calls, "PromoteVolume", "west", "solo"); j != i {
		t.Fatalf("the priority-1 volume was not promoted last:\n%v", *calls)
	}
	if indexOf(*calls, "StartWorkload", "west", "pg") > indexOf(*calls, "StartWorkload", "west", "web") {
		t.Fatalf("web (priority 2) started before pg (priority 1):\n%v", *calls)
	}
	for _, c := range *calls {
		if c.site == "east" && c.name != "StopWorkload" {
			t.Fatalf("a call went to the lost site: %v", c)
		}
	}

	for _, s := range res.Steps {
		if s.State != workflows.StateDone {
			t.Fatalf("step %q is %s (%s)", s.Name, s.State, s.LastError)
		}
	}
	if res.State != workflows.StateCompleted || !res.RPOKnown || res.RPO < 59*time.Second || !slices.Equal(res.Fenced, []string{"127.0.0.2/32"}) {
		t.Fatalf("result %+v", res)
	}
	hooks, err := os.ReadFile(f.hooks)
	mustOK(t, err)
	if want := "pg stop east\nweb stop east\npg start west\nweb start west\n"; !strings.HasSuffix(string(hooks), "pg start west\nweb start west\n") ||
		!strings.Contains(string(hooks), "pg stop east") || !strings.Contains(string(hooks), "web stop east") {
		t.Fatalf("hooks ran:\n%s\nwant like:\n%s", hooks, want)
	}

	// The storage: west primary everywhere, east's client fenced on west.
	state := f.west.Snapshot()
	for _, key := range []string{"vg/vg-1", "vg/vg-2", "vol/solo"} {
		if u := state.Unit(key); u == nil || u.Role != sim.RolePrimary {
			t.Fatalf("%s on west is not primary: %+v", key, u)
		}
	}
	c, err := sim.NewClient(f.west.DataAddr(), simtest.NodeA, "east-node")
	mustOK(t, err)
	defer c.Close()
	if _, err := c.Write(context.Background(), "v1", 1, []byte("from the lost site")); !errors.Is(err, sim.ErrFenced) {
		t.Fatalf("east's client wrote to west after the failover: %v", err)
	}
	mustOK(t, f.east.Up())
	if r := sim.Check(f.east.Snapshot(), f.west.Snapshot()); !r.OK() {
		t.Fatalf("invariants: %s", r)
	}
}

// TestFailoverPausesOnFenceFailure: a fence that fails for good pauses the
// action before anything is promoted; skipping it needs an override; a
// retry after the fault clears finishes the failover.
func TestFailoverPausesOnFenceFailure(t *testing.T) {
	f := newFixture(t)
	f.east.Down()
	mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "FenceClusterNetwork", Code: "UNKNOWN", Count: 1, Message: "fence agent crashed"}}))
	env, calls := f.env(t)
	var pausedSeen, skipRejected, retried bool
	env.RegisterDelayedCallback(func() {
		for _, s := range progressOf(t, env).Steps {
			if s.Name == "fence east" && s.State == workflows.StatePaused && strings.Contains(s.LastError, "fence agent crashed") {
				pausedSeen = true
			}
		}
		if indexOf(*calls, "PromoteVolume", "", "") >= 0 {
			t.Error("promoted while the fence step was paused")
		}
		send(t, env, workflows.UpdateResolve, workflows.Decision{Step: "fence east", Action: workflows.DecisionSkip},
			func() {}, func(err error) { skipRejected = strings.Contains(err.Error(), "needs --override") })
		// The retry names the step by its ID, as drctl status suggests.
		send(t, env, workflows.UpdateResolve, workflows.Decision{Step: "fence/east", Action: workflows.DecisionRetry},
			func() { retried = true }, nil)
	}, time.Hour)
	env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, env.GetWorkflowError())
	if !pausedSeen || !skipRejected || !retried {
		t.Fatalf("paused seen %v, skip without override rejected %v, retry accepted %v", pausedSeen, skipRejected, retried)
	}
	var res workflows.FailoverResult
	mustOK(t, env.GetWorkflowResult(&res))
	i := slices.IndexFunc(res.Steps, func(s *workflows.Step) bool { return s.Name == "fence east" })
	if i < 0 || res.Steps[i].Attempts != 2 || res.Steps[i].State != workflows.StateDone || res.Steps[i].ID != "fence/east" {
		t.Fatalf("fence step of %+v", res.Steps)
	}
	ids := map[string]string{}
	for _, s := range res.Steps {
		if s.ID == "" || ids[s.ID] != "" {
			t.Errorf("step %q has ID %q, empty or also that of %q", s.Name, s.ID, ids[s.ID])
		}
		ids[s.ID] = s.Name
	}
}

// TestFailoverSkipsFenceWithOverride: a fence that fails for good pauses
// the failover before anything is promoted; a skip of the fence step
// without an override is refused, and one with it is taken: the step ends
// skipped, with the operator's name on it. A skipped fence still has its
// verification run, which reads the fence back, finds nothing fenced and
// pauses too (it is a guard as well); once that is skipped with an
// override in turn, the failover promotes every group on west and starts
// the workloads. Nothing is reported or recorded as fenced, and west does
// not fence east's client.
func TestFailoverSkipsFenceWithOverride(t *testing.T) {
	f := newFixture(t)
	f.east.Down()
	mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "FenceClusterNetwork", Code: "INVALID_ARGUMENT", Count: 1000, Message: "fence agent misconfigured"}}))
	env, calls := f.env(t)
	var fencePaused, verifyPaused *workflows.Step
	var refused error
	var skipped, verifySkipped, promotedWhilePaused bool
	env.RegisterDelayedCallback(func() {
		fencePaused = pausedStep(t, env)
		promotedWhilePaused = indexOf(*calls, "PromoteVolume", "", "") >= 0
		send(t, env, workflows.UpdateResolve, workflows.Decision{Step: "fence/east", Action: workflows.DecisionSkip, By: "operator"},
			func() { t.Error("a skip of the fence step without override was accepted") }, func(err error) { refused = err })
		send(t, env, workflows.UpdateResolve, workflows.Decision{Step: "fence/east", Action: workflows.DecisionSkip, Override: true, By: "operator"},
			func() { skipped = true }, nil)
	}, time.Hour)
	env.RegisterDelayedCallback(func() {
		verifyPaused = pausedStep(t, env)
		promotedWhilePaused = promotedWhilePaused || indexOf(*calls, "PromoteVolume", "", "") >= 0
		send(t, env, workflows.UpdateResolve, workflows.Decision{Step: "verify-fence/east", Action: workflows.DecisionSkip, Override: true, By: "operator"},
			func() { verifySkipped = true }, nil)
	}, 2*time.Hour)
	env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	if err := env.GetWorkflowError(); err != nil {
		for _, s := range progressOf(t, env).Steps {
			t.Logf("%s: %s %d %s", s.ID, s.State, s.Attempts, s.LastError)
		}
		t.Fatal(err)
	}
	if fencePaused == nil || fencePaused.ID != "fence/east" || !strings.Contains(fencePaused.LastError, "fence agent misconfigured") {
		t.Fatalf("after an hour the paused step is %+v, want the fence with its error", fencePaused)
	}
	if refused == nil || !strings.Contains(refused.Error(), "needs --override") {
		t.Fatalf("skip of the fence step without override: %v; want a refusal that asks for --override", refused)
	}
	if !skipped {
		t.Fatal("the skip of the fence step with override was not accepted")
	}
	if verifyPaused == nil || verifyPaused.ID != "verify-fence/east" || !strings.Contains(verifyPaused.LastError, "does not list "+simtest.NodeA+"/32 as fenced") {
		t.Fatalf("after two hours the paused step is %+v, want the fence's verification finding nothing fenced", verifyPaused)
	}
	if !verifySkipped {
		t.Fatal("the skip of the verification with override was not accepted")
	}
	if promotedWhilePaused {
		t.Fatal("a group was promoted while a fence step was paused")
	}
	if i, j := indexOf(*calls, "ListClusterFence", "west", ""), indexOf(*calls, "PromoteVolume", "", ""); i < 0 || j < i {
		t.Fatalf("the skipped fence was not read back before the promotion:\n%v", *calls)
	}

	var res workflows.FailoverResult
	mustOK(t, env.GetWorkflowResult(&res))
	// Run to its end with its fence skipped: incomplete, and says so.
	if res.State != workflows.StateIncomplete || len(workflows.Undone(&res.Progress)) != 2 ||
		!strings.Contains(workflows.Undone(&res.Progress)[0], "east's clients may not be fenced off the storage") {
		t.Fatalf("the failover is %s, undone %q; want incomplete, the fence's two steps undone", res.State, workflows.Undone(&res.Progress))
	}
	for _, s := range res.Steps {
		want := workflows.StateDone
		if s.ID == "fence/east" || s.ID == "verify-fence/east" {
			want = workflows.StateSkipped
			if s.By != "operator" || s.Attempts != 1 || s.End.IsZero() {
				t.Errorf("step %s: by %q after %d attempt(s), end %v; want the operator's skip of the first", s.ID, s.By, s.Attempts, s.End)
			}
		}
		if s.State != want {
			t.Errorf("step %s is %s (%s), want %s", s.ID, s.State, s.LastError, want)
		}
	}
	state := f.west.Snapshot()
	for _, key := range []string{"vg/vg-1", "vg/vg-2", "vol/solo"} {
		if u := state.Unit(key); u == nil || u.Role != sim.RolePrimary {
			t.Fatalf("%s on west is not primary: %+v", key, u)
		}
	}
	for _, fe := range state.Fences {
		if fe.Fenced {
			t.Errorf("west fences %s though the fence was skipped", fe.CIDR)
		}
	}
	if len(res.Fenced) != 0 {
		t.Errorf("the result reports %v fenced", res.Fenced)
	}
	f.recordMu.Lock()
	defer f.recordMu.Unlock()
	for _, c := range f.record {
		if c.Fenced != nil {
			t.Errorf("the record was told of a fence: %+v", c.Fenced)
		}
	}
	if !slices.ContainsFunc(f.record, func(c workflows.RecordChange) bool { return c.Primary == "west" }) {
		t.Errorf("the record was not told west is primary: %+v", f.record)
	}
}

// TestFailoverUnfencedNeedsConfirmation: a site declared unfenceable is
// never promoted over without the operator's confirmation; aborting the
// paused action ends it with nothing promoted.
func TestFailoverUnfencedNeedsConfirmation(t *testing.T) {
	f := newFixture(t)
	f.east.Down()
	f.plan.Sites[0].Fence = plans.Fence{Unavailable: true}
	env, calls := f.env(t)
	env.RegisterDelayedCallback(func() {
		send(t, env, workflows.UpdateResolve, workflows.Decision{Step: "fence east", Action: workflows.DecisionAbort}, nil, nil)
	}, time.Hour)
	env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	var ae *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &ae) || ae.Type() != workflows.ErrAborted || !strings.Contains(ae.Error(), "confirmation") {
		t.Fatalf("error %v, want an abort that says a confirmation was needed", err)
	}
	if indexOf(*calls, "PromoteVolume", "", "") >= 0 || indexOf(*calls, "FenceClusterNetwork", "", "") >= 0 {
		t.Fatalf("calls after the refusal: %v", *calls)
	}

	// With the confirmation, the failover goes through without a fence.
	env2, calls2 := f.env(t)
	env2.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west", ConfirmUnfenced: true})
	mustOK(t, env2.GetWorkflowError())
	if indexOf(*calls2, "FenceClusterNetwork", "", "") >= 0 || indexOf(*calls2, "PromoteVolume", "west", "vg-1") < 0 {
		t.Fatalf("confirmed unfenced failover calls: %v", *calls2)
	}
}

// TestFailoverApprovalGate: with a beforePromote gate, nothing is promoted
// until an approve update arrives.
func TestFailoverApprovalGate(t *testing.T) {
	f := newFixture(t)
	f.east.Down()
	f.plan.Policy.Approvals = []string{"beforePromote"}
	env, calls := f.env(t)
	var waited bool
	env.RegisterDelayedCallback(func() {
		waited = indexOf(*calls, "ListClusterFence", "west", "") >= 0 && indexOf(*calls, "PromoteVolume", "", "") < 0
		send(t, env, workflows.UpdateApprove, workflows.Approval{Gate: "beforeStart"},
			func() { t.Error("approved a gate that is not waiting") }, func(error) {})
		send(t, env, workflows.UpdateApprove, workflows.Approval{Gate: "beforePromote", By: "ops"}, nil, nil)
	}, time.Hour)
	env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, env.GetWorkflowError())
	if !waited {
		t.Fatalf("the gate did not hold the promotion back: %v", *calls)
	}
	// The gate's step is done, and says who approved it.
	var res workflows.FailoverResult
	mustOK(t, env.GetWorkflowResult(&res))
	i := slices.IndexFunc(res.Steps, func(s *workflows.Step) bool { return s.Name == "approve beforePromote" })
	if i < 0 || res.Steps[i].State != workflows.StateDone || res.Steps[i].By != "ops" {
		t.Fatalf("the gate's step in %+v, want it done and approved by ops", res.Progress)
	}
}

// TestFailoverSkippedPromotionIsIncomplete: west's storage refuses to
// promote db for good; the operator skips that promotion. The failover
// goes on, but does not start web (which uses every group) on west's
// copies, which west's storage says are secondary: its start pauses,
// naming db, while pg (which uses only logs, promoted) starts. Skipped
// too, the failover ends incomplete, not completed, and says what each
// skip left undone. Retried with --override instead, web starts on them,
// and the failover is still incomplete: db's promotion was skipped.
func TestFailoverSkippedPromotionIsIncomplete(t *testing.T) {
	for _, override := range []bool{false, true} {
		t.Run(fmt.Sprintf("override=%v", override), func(t *testing.T) {
			f := newFixture(t)
			f.plan.Workloads[1].VolumeGroups = []string{"logs"} // pg
			f.east.Down()
			mustOK(t, f.west.SetFaults([]sim.FaultRule{{Method: "PromoteVolume", Subject: "vg-1", Code: "INVALID_ARGUMENT", Count: 1000, Message: "image is locked by another client"}}))
			env, _ := f.env(t)
			var promote, start *workflows.Step
			env.RegisterDelayedCallback(func() {
				promote = pausedStep(t, env)
				if promote != nil {
					send(t, env, workflows.UpdateResolve, workflows.Decision{Step: promote.ID, Action: workflows.DecisionSkip, By: "operator"}, nil, nil)
				}
			}, time.Hour)
			env.RegisterDelayedCallback(func() {
				start = pausedStep(t, env)
				if start == nil {
					return
				}
				d := workflows.Decision{Step: start.ID, Action: workflows.DecisionSkip, By: "operator"}
				if override {
					d.Action, d.Override = workflows.DecisionRetry, true
				}
				send(t, env, workflows.UpdateResolve, d, nil, nil)
			}, 2*time.Hour)
			env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
			mustOK(t, env.GetWorkflowError())
			if promote == nil || promote.ID != "promote/west/db" {
				t.Fatalf("paused after an hour: %+v, want db's promotion on west", promote)
			}
			if start == nil || start.ID != "start/west/web" || !strings.Contains(start.LastError, "db (secondary)") || strings.Contains(start.LastError, "logs") {
				t.Fatalf("paused after two hours: %+v, want web's start, refused for db's secondary copies", start)
			}
			var res workflows.FailoverResult
			mustOK(t, env.GetWorkflowResult(&res))
			if res.State != workflows.StateIncomplete {
				t.Fatalf("the failover is %s, want %s", res.State, workflows.StateIncomplete)
			}
			undone := workflows.Undone(&res.Progress)
			want := []string{"promote db on west skipped: the copies of db on west were not promoted: they may still be secondary, and no workload starts on them without --override"}
			if !override {
				want = append(want, "start web on west skipped: web was not started on west")
			}
			if !slices.Equal(undone, want) {
				t.Errorf("undone: %q, want %q", undone, want)
			}
			hooks, err := os.ReadFile(f.hooks)
			mustOK(t, err)
			if !strings.Contains(string(hooks), "pg start west") || strings.Contains(string(hooks), "web start west") != override {
				t.Errorf("hooks run:\n%s\nwant pg started on west, web only with the override", hooks)
			}
		})
	}
}
