// Package wftest makes Temporal's test workflow environments for the
// project's tests, with a deadlock detector that a busy machine does not
// trip.
//
// The SDK calls a workflow task that holds its goroutine for more than a
// second a potential deadlock (TMPRL1101) and fails the test. On a
// machine at a load average of 20 on two cores, a task of a few hundred
// milliseconds of work can take longer than that without any fault of
// the code. A real deadlock never yields, however long it is given, so
// a longer limit still catches it (TestDeadlockIsStillCaught); it only
// takes longer to say so.
package wftest

import (
	"time"

	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
)

// DeadlockTimeout is how long a workflow task may hold its goroutine in
// a test before the environment calls it a deadlock.
const DeadlockTimeout = 15 * time.Second

// New returns ts's test workflow environment with the deadlock detector
// set to DeadlockTimeout.
func New(ts *testsuite.WorkflowTestSuite) *testsuite.TestWorkflowEnvironment {
	env := ts.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: DeadlockTimeout})
	return env
}
