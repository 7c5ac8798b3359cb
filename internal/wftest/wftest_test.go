package wftest_test

import (
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/internal/wftest"
)

// TestDeadlockIsStillCaught: a workflow that blocks its goroutine
// outside the SDK's control is still failed as a deadlock under the
// longer limit, rather than hanging the test.
func TestDeadlockIsStillCaught(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	env := wftest.New(&ts)
	block := make(chan struct{})
	defer close(block)
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		<-block
		return nil
	}, workflow.RegisterOptions{Name: "stuck"})
	start := time.Now()
	env.ExecuteWorkflow("stuck")
	err := env.GetWorkflowError()
	if err == nil || !strings.Contains(err.Error(), "Potential deadlock detected") {
		t.Fatalf("a workflow blocked outside the SDK ended with %v; want a potential deadlock", err)
	}
	// Not a timing assertion on the code under test: the limit is ours,
	// and a detector that fired at the SDK's one second would not be
	// the one this package sets.
	if took := time.Since(start); took < wftest.DeadlockTimeout {
		t.Fatalf("the deadlock was called after %v, before the %v limit this package sets", took, wftest.DeadlockTimeout)
	}
}
