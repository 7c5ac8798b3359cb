package workflows_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// inFlight wraps the real PromoteVolume activity of an environment and
// counts the calls running at once. Each call waits, at most 300 ms (a
// local attempt has a second), for limit calls to be running before it
// goes on, so that a bound that lets more through is seen.
type inFlight struct {
	mu        sync.Mutex
	now, most int
}

func (n *inFlight) wrap(env *testsuite.TestWorkflowEnvironment, st *activities.Storage, limit int) {
	env.OnActivity(st.PromoteVolume, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.ReplicationInput) error {
		n.mu.Lock()
		n.now++
		n.most = max(n.most, n.now)
		n.mu.Unlock()
		for end := time.Now().Add(800 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			n.mu.Lock()
			full := n.now >= limit
			n.mu.Unlock()
			if full {
				break
			}
		}
		time.Sleep(50 * time.Millisecond) // let any call the bound should hold back start
		n.mu.Lock()
		n.now--
		n.mu.Unlock()
		return st.PromoteVolume(ctx, in)
	})
}

// TestFailoverHonoursParallelism: a failover keeps at most
// policy.parallelism promotions in flight, and uses that many: priority 2
// holds three groups, the plan allows two at a time.
func TestFailoverHonoursParallelism(t *testing.T) {
	f := newFixtureN(t, 6) // priority 2 and 3 hold three groups each
	f.plan.Policy.Parallelism = 2
	f.east.Down()
	env, _ := f.env(t)
	var n inFlight
	n.wrap(env, f.storage, 2)
	env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, env.GetWorkflowError())
	if n.most != 2 {
		t.Fatalf("%d promotions were in flight at once; the plan allows 2", n.most)
	}
	allRoles(t, f.west, sim.RolePrimary)
}

// TestLargeFailoverPassesParallelism: a plan that promotes its groups in
// ReplicateBatch activities hands each batch the plan's parallelism, the
// bound the activity keeps on its calls in flight.
func TestLargeFailoverPassesParallelism(t *testing.T) {
	f := newFixtureN(t, 150)
	f.plan.Policy.Parallelism = 3
	f.east.Down()
	env, _ := f.env(t)
	var mu sync.Mutex
	var seen []int
	env.OnActivity(f.storage.ReplicateBatch, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in activities.BatchInput) (activities.BatchResult, error) {
			mu.Lock()
			seen = append(seen, in.Parallelism)
			mu.Unlock()
			return f.storage.ReplicateBatch(ctx, in)
		})
	env.ExecuteWorkflow(workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"})
	mustOK(t, env.GetWorkflowError())
	if len(seen) == 0 {
		t.Fatal("no ReplicateBatch ran")
	}
	for _, p := range seen {
		if p != 3 {
			t.Fatalf("batches ran with parallelism %v; the plan says 3", seen)
		}
	}
	allRoles(t, f.west, sim.RolePrimary)
}
