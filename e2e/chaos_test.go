package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// chaosCounts are what a chaos run did.
type chaosCounts struct {
	Runs, Actions                    int
	Kills, KillsInAction             int
	ServerRestarts, SiteOutages      int
	Bursts, Permanent, Paused, Fired int
	Violations                       int
}

func (c chaosCounts) String() string {
	return fmt.Sprintf("%d runs, %d actions, %d worker kills (%d inside an action), %d Temporal restarts, %d site outages, "+
		"%d fault bursts and %d permanent faults armed (%d injected errors fired), %d pauses resolved by the operator, %d invariant violations",
		c.Runs, c.Actions, c.Kills, c.KillsInAction, c.ServerRestarts, c.SiteOutages, c.Bursts, c.Permanent, c.Fired, c.Paused, c.Violations)
}

// envInt reads a positive number from the environment, or def.
func envInt(t *testing.T, name string, def uint64) uint64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// base slows every storage call a little, so that disruptions land inside
// actions rather than between them.
var base = sim.FaultRule{Method: "*", Latency: 100 * time.Millisecond}

// permanentMessage is the error of the fault that does not heal.
const permanentMessage = "chaos: a fault that waits for the operator"

// transient are the codes of a burst: the spec says retry on each.
var transient = []string{"ABORTED", "UNAVAILABLE", "DEADLINE_EXCEEDED"}

// calls are RPCs each action makes, by the site it makes them on; a
// permanent fault goes on the first, which the action cannot avoid.
var calls = map[string][]struct{ site, rpc string }{
	"failover":  {{"west", "PromoteVolume"}, {"west", "GetVolumeReplicationInfo"}, {"west", "FenceClusterNetwork"}, {"west", "GetFenceClients"}},
	"reprotect": {{"east", "DemoteVolume"}, {"east", "ResyncVolume"}, {"west", "UnfenceClusterNetwork"}, {"west", "GetVolumeReplicationInfo"}},
	"failback":  {{"west", "DemoteVolume"}, {"east", "PromoteVolume"}, {"east", "ResyncVolume"}, {"west", "GetVolumeReplicationInfo"}},
}

// forcedKinds is how many kinds of disruption the first actions force,
// one each: a fault burst, a permanent fault, a Temporal restart and a
// site outage.
const forcedKinds = 4

// TestChaos: failover, reprotect and failback, over and over, under
// seeded disruption, until DROVER_CHAOS_KILLS kills of the worker have
// landed inside actions. Every action must complete (after the operator's
// retry where a fault was permanent) and the invariants must hold after
// every run.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos run takes minutes; -short skips it")
	}
	seed := envInt(t, "DROVER_CHAOS_SEED", uint64(time.Now().UnixNano()))
	target := int(envInt(t, "DROVER_CHAOS_KILLS", 20))
	rng := rand.New(rand.NewPCG(seed, seed))
	var c chaosCounts
	fmt.Printf("chaos: seed %d (DROVER_CHAOS_SEED=%d replays it), until %d worker kills land inside actions\n", seed, seed, target)

	h := start(t, 6, 2)
	defer func() { // before the stack stops
		if n, err := h.fired(); err == nil {
			c.Fired = n
		}
		fmt.Printf("chaos: seed %d: %v\n", seed, c)
		if t.Failed() {
			fmt.Printf("chaos: FAILED; replay with DROVER_CHAOS_SEED=%d\n", seed)
		}
	}()
	h.baseFaults(base)
	h.must("protect", "start", h.plan, "--primary", "east", "--interval", "1s")
	h.startWriters()
	h.waitWrites("east", "acknowledged", acked, 40)
	// Every group replicating before the first action: an unplanned
	// failover that takes east down earlier finds a copy on west that was
	// never replicated, which the storage refuses to promote.
	h.waitProtected("e2e", 6)

	deadline := time.Now().Add(12 * time.Minute)
	// At least four actions: the first four each force one kind of
	// disruption, so a short run (a small DROVER_CHAOS_KILLS) covers all.
	for c.KillsInAction < target || c.Actions < forcedKinds {
		if time.Now().After(deadline) || c.Runs >= 4*target {
			chaosFatalf(t, "only %d of %d kills landed inside actions after %d runs", c.KillsInAction, target, c.Runs)
		}
		c.Runs++
		unplanned := rng.IntN(2) == 0
		fmt.Printf("chaos: run %d: %s failover to west, reprotect of east, failback to east\n", c.Runs, map[bool]string{true: "unplanned", false: "planned"}[unplanned])
		up := []string{"east", "west"}
		if unplanned {
			h.siteDown("east")
			up = []string{"west"}
		}
		h.chaosAction(rng, &c, "failover", up, "failover", h.plan, "--to", "west", "--yes")
		h.waitWrites("west", "acknowledged", acked, 10)
		if unplanned {
			h.siteUp("east")
		}
		h.chaosAction(rng, &c, "reprotect", []string{"east", "west"}, "reprotect", h.plan, "--yes")
		h.chaosAction(rng, &c, "failback", []string{"east", "west"}, "failback", h.plan, "--to", "east", "--yes")
		h.waitWrites("east", "acknowledged", acked, 10)

		r := sim.Check(h.states()...)
		c.Violations += len(r.Violations)
		fmt.Printf("chaos: run %d: %v\n", c.Runs, r)
		if !r.OK() {
			chaosFatalf(t, "run %d broke the invariants:\n%v", c.Runs, r)
		}
		if n := lostOn(r, "west"); n != 0 {
			chaosFatalf(t, "run %d: a failback lost %d acknowledged writes: %v", c.Runs, n, r.Lost)
		}
	}
	fired, err := h.fired()
	if err != nil {
		t.Fatal(err)
	}
	c.Fired = fired
	if c.Permanent == 0 || c.Paused == 0 || c.ServerRestarts == 0 || c.SiteOutages == 0 || c.Bursts == 0 || c.Fired == 0 {
		t.Errorf("a kind of disruption did not happen: %v", c)
	}
}

// chaosAction starts an action with drctl and disrupts it: kill -9 of the
// worker once or twice at random points (then a restart), and by chance
// a burst of transient faults, a fault that does not heal, a restart of
// the Temporal dev server and an outage of a site that is up. It returns
// when the action completed.
func (h *harness) chaosAction(rng *rand.Rand, c *chaosCounts, name string, up []string, args ...string) {
	h.t.Helper()
	c.Actions++
	// The first forcedKinds actions each get one kind of disruption for
	// sure, so every run covers all of them; after that, chance decides.
	must := func(n int) bool { return c.Actions == n }
	rules := map[string][]sim.FaultRule{"east": {base}, "west": {base}}
	var armed []string
	if rng.Float64() < 0.5 || must(1) {
		call := calls[name][rng.IntN(len(calls[name]))]
		r := sim.FaultRule{Method: call.rpc, Code: transient[rng.IntN(len(transient))], Count: 1 + rng.IntN(3)}
		rules[call.site] = append(rules[call.site], r)
		armed = append(armed, fmt.Sprintf("%s %s×%d on %s", r.Method, r.Code, r.Count, call.site))
		c.Bursts++
	}
	permanent := rng.Float64() < 0.15 || must(2)
	if permanent {
		call := calls[name][0]
		rules[call.site] = append(rules[call.site], sim.FaultRule{Method: call.rpc, Code: "INVALID_ARGUMENT", Count: 1_000_000,
			Message: permanentMessage})
		armed = append(armed, fmt.Sprintf("%s INVALID_ARGUMENT for good on %s", call.rpc, call.site))
		c.Permanent++
	}
	for site, r := range rules {
		h.faults(site, r...)
	}
	h.must(args...)
	var did []string
	kills := 1
	if rng.IntN(3) == 0 {
		kills = 2
	}
	for range kills {
		time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Second))))
		in := h.actionStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
		if err := h.st.Kill("worker"); err != nil {
			h.t.Fatal(err)
		}
		c.Kills++
		if in {
			c.KillsInAction++
		}
		did = append(did, map[bool]string{true: "killed the worker inside the action", false: "killed the worker after the action"}[in])
		time.Sleep(time.Duration(rng.Int64N(int64(time.Second))))
		h.restart("worker")
	}
	if rng.Float64() < 0.2 || must(3) {
		time.Sleep(time.Duration(rng.Int64N(int64(time.Second))))
		h.restart("temporal")
		c.ServerRestarts++
		did = append(did, "restarted Temporal")
	}
	if rng.Float64() < 0.25 || must(4) {
		site := up[rng.IntN(len(up))]
		h.siteDown(site)
		time.Sleep(500*time.Millisecond + time.Duration(rng.Int64N(int64(1500*time.Millisecond))))
		h.siteUp(site)
		c.SiteOutages++
		did = append(did, "took "+site+" down and up")
	}
	fmt.Printf("chaos:   %s: armed [%s]; %s\n", name, strings.Join(armed, ", "), strings.Join(did, ", "))
	h.finish(c, name, permanent)
	h.baseFaults(base)
}

// restart starts a stack process again and waits until it answers.
func (h *harness) restart(name string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := h.st.Restart(ctx, name); err != nil {
		h.t.Fatal(err)
	}
}

// finish waits for the action to complete. A step paused by a permanent
// fault is what the operator would see: the test clears the fault and
// retries the step with drctl resolve, as the operator would after the
// fix. A call that failed on the fault before it was cleared may pause
// its step after that (calls run in parallel): such a pause, with the
// fault's own error, is retried the same way. A pause for anything else,
// or an action that ends any other way, fails the test.
func (h *harness) finish(c *chaosCounts, name string, permanent bool) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	cleared := false
	for ; ; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			p, _ := h.progress()
			chaosFatalf(h.t, "the %s did not end within 5 minutes: %+v", name, p)
		}
		switch st := h.actionStatus(); st {
		case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
			if permanent {
				chaosFatalf(h.t, "the %s completed through a fault that does not heal", name)
			}
			return
		case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED:
		default:
			p, _ := h.progress()
			var steps strings.Builder
			if p != nil {
				for _, s := range p.Steps {
					fmt.Fprintf(&steps, "\n  %s: %s, %d tries: %s%s", s.Name, s.State, s.Attempts, s.LastError, s.Output)
				}
			}
			// The run's own error says why it ended.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			werr := h.c.GetWorkflow(ctx, workflows.ActionID("e2e"), "").Get(ctx, nil)
			cancel()
			chaosFatalf(h.t, "the %s ended %v: %v; progress %+v%s", name, st, werr, p, steps.String())
		}
		p, err := h.progress()
		if err != nil {
			continue // the server or the worker is coming back
		}
		var paused []*workflows.Step
		for _, s := range p.Steps {
			if s.State == workflows.StatePaused {
				paused = append(paused, s)
			}
		}
		if len(paused) == 0 {
			continue
		}
		for _, s := range paused {
			switch {
			case !permanent && !cleared:
				chaosFatalf(h.t, "the %s paused at %q with no permanent fault armed: %s", name, s.Name, s.LastError)
			case !strings.Contains(s.LastError, permanentMessage):
				chaosFatalf(h.t, "the %s paused at %q for another reason: %s", name, s.Name, s.LastError)
			}
		}
		h.baseFaults(base)
		for _, s := range paused {
			h.must("resolve", "e2e", "--retry", "--step", s.Name)
		}
		what := "for the permanent fault; cleared it"
		if cleared {
			what = "for the permanent fault by a call made before it was cleared"
		}
		fmt.Printf("chaos:   %s: paused at %d step(s) %s and retried with drctl resolve\n", name, len(paused), what)
		c.Paused++
		permanent, cleared = false, true
	}
}

// fired sums the injected errors that fired on both sites.
func (h *harness) fired() (int, error) {
	n := 0
	for site, ctl := range h.ctl {
		m, err := ctl.FaultsFired(context.Background())
		if err != nil {
			return 0, fmt.Errorf("faults fired on %s: %w", site, err)
		}
		for _, v := range m {
			n += v
		}
	}
	return n, nil
}

// chaosFatalf ends the chaos test with a message that is also printed as
// a "chaos:" line, which make e2e shows: the reason for a failure is then
// on the screen and in CI's log beside the seed that replays it, not only
// deep in the full log.
func chaosFatalf(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	fmt.Printf("chaos: FAILED: %.2000s\n", strings.ReplaceAll(msg, "\n", "\nchaos:   "))
	t.Fatal(msg)
}
