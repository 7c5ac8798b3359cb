package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/wftest"
)

// flaky is a storage call for the retry loop's tests: each attempt is
// recorded (when it started in the workflow's time, how long its
// deadlines gave it, whether it ran local) and fails as told.
type flaky struct {
	mu       sync.Mutex
	attempts []attempt
	// fail answers the n-th attempt (from 1): nil for success.
	fail func(n int) error
	// hold is how long the first attempt runs before it answers.
	hold time.Duration
	// noticing: the first attempt runs until its deadline and answers
	// with its context's error, as a storage call cut by it does.
	noticing bool
	// now is the workflow's clock (the test environment's).
	now func() time.Time
}

type attempt struct {
	local bool
	// deadline is how long the attempt's timeouts give it: the smaller of
	// its start-to-close and schedule-to-close timeouts, as the SDK sets
	// its context's deadline from them. Read from the options, not from
	// the clock: the deadline less the start time also holds the time
	// the machine took between the two reads, a second and more under
	// load.
	deadline time.Duration
	at       time.Time // the workflow time it started at
}

// limitOf is the time an attempt's timeouts give it (see attempt.deadline).
func limitOf(info activity.Info) time.Duration {
	d := info.StartToCloseTimeout
	if s := info.ScheduleToCloseTimeout; s > 0 && (d <= 0 || s < d) {
		d = s
	}
	return d
}

func (f *flaky) PromoteVolume(ctx context.Context, _ string) (string, error) {
	info := activity.GetInfo(ctx)
	f.mu.Lock()
	n := len(f.attempts) + 1
	f.attempts = append(f.attempts, attempt{local: info.IsLocalActivity, deadline: limitOf(info), at: f.now()})
	f.mu.Unlock()
	if n == 1 && f.noticing {
		<-ctx.Done()
		return "", ctx.Err()
	}
	if n == 1 && f.hold > 0 {
		// A call that does not notice its deadline: the attempt is cut
		// by its timeout, not by an error of its own.
		time.Sleep(f.hold)
	}
	if err := f.fail(n); err != nil {
		return "", err
	}
	return "promoted", nil
}

// retriedRun is what the test workflow saw: the call's result and error,
// and the step it ran for.
type retriedRun struct {
	Out  string
	Err  string
	Step Step
}

// runRetried runs one call through retried in a test workflow, with o's
// retry policy and limits, the first attempt local, and returns what it
// saw and the attempts the storage got.
func runRetried(t *testing.T, o workflow.ActivityOptions, f *flaky) (retriedRun, []attempt) {
	t.Helper()
	return runCall(t, f, func(ctx workflow.Context) (string, error) {
		return retried[string](ctx, o, f.PromoteVolume, "vg-1", true)
	})
}

// runCall runs call in a test workflow, for the step it runs for, and
// returns what it saw and the attempts the storage got.
func runCall(t *testing.T, f *flaky, call func(ctx workflow.Context) (string, error)) (retriedRun, []attempt) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := wftest.New(&s)
	env.RegisterActivity(f)
	f.now = env.Now
	wf := func(ctx workflow.Context) (retriedRun, error) {
		step := &Step{ID: "promote/west/vg-1"}
		ctx = workflow.WithValue(ctx, stepKey{}, step)
		out, err := call(ctx)
		r := retriedRun{Out: out, Step: *step}
		if err != nil {
			r.Err = err.Error()
		}
		return r, nil
	}
	env.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: "retriedTest"})
	env.ExecuteWorkflow("retriedTest")
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var r retriedRun
	if err := env.GetWorkflowResult(&r); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return r, slices.Clone(f.attempts)
}

func unavailable(int) error {
	return temporal.NewApplicationError("the storage cluster is rebalancing", "UNAVAILABLE")
}

// offsets gives each attempt's schedule time from the first one's.
func offsets(as []attempt) []time.Duration {
	var d []time.Duration
	for _, a := range as {
		d = append(d, a.at.Sub(as[0].at).Round(time.Second))
	}
	return d
}

// TestRetriedCountsItsAttempts: a call that always fails with a
// retryable error is tried MaximumAttempts times in all, the first on
// the workflow's worker and the rest as regular activities, with the
// policy's back-off between them (1 s, then 2 s); the step counts each
// failed attempt that is tried again and says what comes next.
func TestRetriedCountsItsAttempts(t *testing.T) {
	f := &flaky{fail: unavailable}
	r, as := runRetried(t, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumAttempts: 3},
	}, f)
	if len(as) != 3 {
		t.Fatalf("the storage got %d attempts, want 3 (MaximumAttempts)", len(as))
	}
	if !as[0].local || as[1].local || as[2].local {
		t.Errorf("attempts local: %v %v %v, want the first only", as[0].local, as[1].local, as[2].local)
	}
	if got, want := offsets(as), []time.Duration{0, time.Second, 3 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("attempts at %v, want %v (back-off 1 s, then 2 s)", got, want)
	}
	if got, want := []time.Duration{as[0].deadline, as[1].deadline, as[2].deadline}, []time.Duration{localBudget, 30 * time.Second, 30 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("attempts' deadlines %v, want %v (the local budget, then with no time limit the whole timeout)", got, want)
	}
	if !strings.Contains(r.Err, "rebalancing") || r.Out != "" {
		t.Errorf("result %q, error %q: want the last attempt's error", r.Out, r.Err)
	}
	if r.Step.Retries != 2 {
		t.Errorf("step retries %d, want 2 (the two attempts tried again)", r.Step.Retries)
	}
	if want := "PromoteVolume: attempt 2 failed, next in 2s"; r.Step.Note != want {
		t.Errorf("step note %q, want %q", r.Step.Note, want)
	}
	if !strings.Contains(r.Step.LastError, "rebalancing") {
		t.Errorf("step's last error %q", r.Step.LastError)
	}
}

// TestRetriedSaysTheFirstHandsOver: the note after a failed local first
// attempt says the call goes on as a regular activity; a call that
// succeeds on its second attempt returns its result.
func TestRetriedSaysTheFirstHandsOver(t *testing.T) {
	var notes []string
	f := &flaky{fail: func(n int) error {
		if n == 1 {
			return unavailable(n)
		}
		return nil
	}}
	r, as := runRetried(t, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 3 * time.Second},
	}, f)
	notes = append(notes, r.Step.Note)
	if len(as) != 2 || r.Out != "promoted" || r.Err != "" {
		t.Fatalf("%d attempts, result %q, error %q: want 2, promoted, none", len(as), r.Out, r.Err)
	}
	if want := []string{"PromoteVolume: attempt 1 failed, next in 3s; it goes on as a regular activity"}; !slices.Equal(notes, want) {
		t.Errorf("notes %q, want %q", notes, want)
	}
	if got := offsets(as); got[1] != 3*time.Second {
		t.Errorf("second attempt after %v, want 3s (InitialInterval)", got[1])
	}
}

// TestRetriedKeepsToItsTimeLimit: with a time limit (the call's
// ScheduleToCloseTimeout) of 7 s and back-offs of 1, 2 and 4 s, the
// attempts run at 0, 1 and 3 s: a fourth would start at 7 s, the limit
// itself, so the call ends with the third attempt's error. Each regular
// attempt gets what is left of the limit as its deadline (6 s, then 4 s),
// never more than its own start-to-close timeout.
func TestRetriedKeepsToItsTimeLimit(t *testing.T) {
	f := &flaky{fail: unavailable}
	r, as := runRetried(t, workflow.ActivityOptions{
		StartToCloseTimeout:    5 * time.Second,
		ScheduleToCloseTimeout: 7 * time.Second,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2},
	}, f)
	if got, want := offsets(as), []time.Duration{0, time.Second, 3 * time.Second}; !slices.Equal(got, want) {
		t.Fatalf("attempts at %v, want %v (none at or past the 7 s limit)", got, want)
	}
	if got, want := []time.Duration{as[1].deadline, as[2].deadline}, []time.Duration{5 * time.Second, 4 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("regular attempts' deadlines %v, want %v (their 5 s timeout, then the 4 s left)", got, want)
	}
	if !strings.Contains(r.Err, "rebalancing") || r.Step.Retries != 2 {
		t.Errorf("error %q, retries %d: want the last attempt's error after 2 retries", r.Err, r.Step.Retries)
	}
}

// TestRetriedGivesTheLastAttemptASecond: an attempt whose limit is all
// but spent still gets a deadline of one second, not a few milliseconds.
func TestRetriedGivesTheLastAttemptASecond(t *testing.T) {
	f := &flaky{fail: func(n int) error {
		if n < 3 {
			return unavailable(n)
		}
		return nil
	}}
	r, as := runRetried(t, workflow.ActivityOptions{
		StartToCloseTimeout:    10 * time.Second,
		ScheduleToCloseTimeout: 3500 * time.Millisecond,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2},
	}, f)
	if len(as) != 3 || r.Out != "promoted" {
		t.Fatalf("%d attempts, result %q (%s): want 3, promoted", len(as), r.Out, r.Err)
	}
	if got, want := []time.Duration{as[1].deadline, as[2].deadline}, []time.Duration{2500 * time.Millisecond, time.Second}; !slices.Equal(got, want) {
		t.Errorf("regular attempts' deadlines %v, want %v (2.5 s left, then 0.5 s raised to 1 s)", got, want)
	}
}

// TestRetriedStopsAtAFinalError: an error the classification marks as
// not worth another attempt ends the call at once.
func TestRetriedStopsAtAFinalError(t *testing.T) {
	f := &flaky{fail: func(int) error {
		return temporal.NewNonRetryableApplicationError("no such volume group", "NOT_FOUND", nil)
	}}
	r, as := runRetried(t, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second},
	}, f)
	if len(as) != 1 || !strings.Contains(r.Err, "no such volume group") || r.Step.Retries != 0 {
		t.Errorf("%d attempts, error %q, retries %d: want 1, the error, 0", len(as), r.Err, r.Step.Retries)
	}
}

// TestRetriedHandsALongCallOver: a local first attempt cut at the local
// budget is not a failure: the call runs again at once as a regular
// activity with its whole deadline, and nothing counts as retried.
func TestRetriedHandsALongCallOver(t *testing.T) {
	f := &flaky{fail: func(int) error { return nil }, hold: localBudget + 500*time.Millisecond}
	r, as := runRetried(t, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 5 * time.Second, MaximumAttempts: 1},
	}, f)
	if len(as) != 2 || r.Out != "promoted" {
		t.Fatalf("%d attempts, result %q (%s): want 2, promoted", len(as), r.Out, r.Err)
	}
	if !as[0].local || as[1].local || as[1].deadline != 30*time.Second {
		t.Errorf("attempts %+v: want a local one, then a regular one with the whole 30 s", as)
	}
	if got := offsets(as); got[1] != 0 {
		t.Errorf("the regular attempt came after %v, want at once", got[1])
	}
	if r.Step.Retries != 0 || r.Step.Note != "PromoteVolume took over 1s; it goes on as a regular activity" {
		t.Errorf("step retries %d, note %q", r.Step.Retries, r.Step.Note)
	}

	// A call whose own deadline is the local budget has had its whole
	// deadline: its timeout is a failed attempt, the last of one.
	f = &flaky{fail: func(int) error { return nil }, hold: localBudget + 500*time.Millisecond}
	r, as = runRetried(t, workflow.ActivityOptions{
		StartToCloseTimeout: localBudget,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 5 * time.Second, MaximumAttempts: 1},
	}, f)
	if len(as) != 1 || r.Err == "" {
		t.Errorf("a call timed out at its own deadline: %d attempts, error %q; want 1 and its timeout", len(as), r.Err)
	}
}

// TestRetriedHandsOverACallCutByItsOwnContext: a local first attempt
// whose call notices the local budget and answers with its context's
// error (as storage calls do) is cut as one that did not answer: it
// hands over to a regular activity with the whole deadline, even where
// the policy allows a single attempt.
func TestRetriedHandsOverACallCutByItsOwnContext(t *testing.T) {
	f := &flaky{fail: func(int) error { return nil }, noticing: true}
	r, as := runRetried(t, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 5 * time.Second, MaximumAttempts: 1},
	}, f)
	if len(as) != 2 || r.Out != "promoted" || !as[0].local || as[1].local || as[1].deadline != 30*time.Second {
		t.Fatalf("%d attempts %+v, result %q (%s): want a local one, then a regular one with the whole 30 s, promoted", len(as), as, r.Out, r.Err)
	}
	if r.Step.Retries != 0 {
		t.Errorf("step retries %d, want none: the cut is no failure", r.Step.Retries)
	}
}

// TestBackoff: the pause after the n-th failed attempt grows by the
// coefficient from the initial interval and stops at the maximum; an
// unset interval is 1 s and an unset coefficient 2.
func TestBackoff(t *testing.T) {
	rp := &temporal.RetryPolicy{InitialInterval: 2 * time.Second, BackoffCoefficient: 3, MaximumInterval: 20 * time.Second}
	var got []time.Duration
	for n := 1; n <= 4; n++ {
		got = append(got, backoff(rp, n))
	}
	if want := []time.Duration{2 * time.Second, 6 * time.Second, 18 * time.Second, 20 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("back-offs %v, want %v", got, want)
	}
	if got := backoff(&temporal.RetryPolicy{}, 3); got != 4*time.Second {
		t.Errorf("default back-off after 3 failures %v, want 4s", got)
	}
	if got := backoff(&temporal.RetryPolicy{InitialInterval: 30 * time.Second, MaximumInterval: 10 * time.Second}, 1); got != 10*time.Second {
		t.Errorf("an initial interval over the maximum: %v, want 10s", got)
	}
	if got := backoff(&temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 4 * time.Second}, 3); got != 4*time.Second {
		t.Errorf("back-off reaching the maximum exactly: %v, want 4s", got)
	}
	if got := backoff(&temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 1}, 3); got != time.Second {
		t.Errorf("back-off with coefficient 1 after 3 failures: %v, want 1s", got)
	}
	if !isTimeout(temporal.NewTimeoutError(0, nil)) || isTimeout(errors.New("x")) {
		t.Error("isTimeout")
	}
}

// TestFailureCode: the step failure metric's code is the error's type
// when it has one, and says a cancellation or a timeout apart from the
// rest.
func TestFailureCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{temporal.NewApplicationError("no such group", "NOT_FOUND"), "NOT_FOUND"},
		{temporal.NewApplicationError("untyped", ""), "Other"},
		{temporal.NewCanceledError(), "Canceled"},
		{temporal.NewTimeoutError(0, nil), "Timeout"},
		{errors.New("plain"), "Other"},
	} {
		if got := failureCode(c.err); got != c.want {
			t.Errorf("failureCode(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestRPCCallMakesItsOwnAttempts: a storage call makes its attempts
// itself (retried), so that the step shows each failed one, where one
// local activity with the whole retry policy would retry unseen.
func TestRPCCallMakesItsOwnAttempts(t *testing.T) {
	f := &flaky{fail: func(n int) error {
		if n < 3 {
			return unavailable(n)
		}
		return nil
	}}
	o := workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5}}
	r, as := runCall(t, f, func(ctx workflow.Context) (string, error) {
		return rpcCall[string](ctx, o, f.PromoteVolume, "vg-1")
	})
	if r.Out != "promoted" || len(as) != 3 || r.Step.Retries != 2 || as[1].local {
		t.Errorf("result %q (%s) after %d attempts, step retries %d, second attempt local %v; want promoted after 3, 2 retries shown, regular",
			r.Out, r.Err, len(as), r.Step.Retries, len(as) > 1 && as[1].local)
	}
}

// TestCutAtBudget: a local attempt ended at its deadline, whichever way
// the SDK reports it: its own timeout, the call's context error as the
// test environment passes it, or that error as a real worker's
// converter turns it into an application error. A call's other errors,
// and a deadline the storage reported, are failures.
func TestCutAtBudget(t *testing.T) {
	fc := temporal.GetDefaultFailureConverter()
	converted := fc.FailureToError(fc.ErrorToFailure(context.DeadlineExceeded))
	for _, c := range []struct {
		name string
		err  error
		cut  bool
	}{
		{"the SDK's timeout", temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil), true},
		{"the context's error", fmt.Errorf("promote: %w", context.DeadlineExceeded), true},
		{"the context's error converted", converted, true},
		{"the storage's DEADLINE_EXCEEDED", temporal.NewApplicationError("PromoteVolume: DeadlineExceeded", activities.ErrDeadlineExceeded), false},
		{"an unavailable storage", unavailable(1), false},
	} {
		if got := cutAtBudget(c.err); got != c.cut {
			t.Errorf("%s (%v): cut %v, want %v", c.name, c.err, got, c.cut)
		}
	}
}
