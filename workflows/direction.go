package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/plans"
)

// ErrWrongDirection ends an action whose direction contradicts what the
// storage reports, before any side effect.
const ErrWrongDirection = "WrongDirection"

// roleSample is the groups a failover's role check asks about, at the
// same time as the preflight: at most n (the calls the plan allows in
// flight, policy.parallelism), spread evenly over the plan's groups, so
// that one round trip answers and a partial failover (which promotes the
// first priorities first) does not fill the sample with promoted copies.
func roleSample(p *plans.Plan, n int) []plans.VolumeGroup {
	gs := p.VolumeGroups
	if n < 1 {
		n = 1
	}
	if len(gs) <= n {
		return gs
	}
	out := make([]plans.VolumeGroup, 0, n)
	for i := range n {
		out = append(out, gs[i*len(gs)/n])
	}
	return out
}

// roleCalls are the GetVolumeReplicationInfo calls on site that ask the
// roles of groups' copies, at most surveyBatch of them.
func roleCalls(p *plans.Plan, site string, groups []plans.VolumeGroup) ([]activities.ReplicationInput, error) {
	var calls []activities.ReplicationInput
	for i := range groups {
		ins, err := activities.GroupInputs(p, site, &groups[i], activities.RPCGetVolumeReplicationInfo, false)
		if err != nil {
			return nil, err
		}
		calls = append(calls, ins...)
		if len(calls) >= surveyBatch {
			return calls[:surveyBatch], nil
		}
	}
	return calls, nil
}

// notPrimaryYet asks the storage of site, with one GetVolumeReplicationInfo
// per source (at most surveyBatch of them, no retries), whether it already
// holds the primary copies: a driver answers it only for a primary copy.
// When every copy asked answers as primary, the failover would promote
// nothing and fence the healthy peer's clients: the action ends with
// ErrWrongDirection, naming the state. A copy that is not primary, or
// cannot be asked, lets the failover go on (a failover run again after a
// partial one finds some copies promoted).
//
// The survey's first attempt is a local activity, as single storage calls
// are (retried); its one attempt is all it gets.
func notPrimaryYet(ctx workflow.Context, p *plans.Plan, from, to string, groups []plans.VolumeGroup) (string, error) {
	calls, err := roleCalls(p, to, groups)
	if err != nil {
		return "", err
	}
	if len(calls) == 0 {
		return "no volume groups", nil
	}
	res, err := surveyOnce(ctx, p, to, calls)
	if err != nil {
		// Only an answer can contradict the failover: a check that got
		// none (a worker lost mid-call, the site's storage slow in a
		// disaster) must not end a failover, which the fence guards.
		return fmt.Sprintf("could not ask %s's storage for its roles, going on: %s", to, ErrorText(err)), nil
	}
	primary, notPrimary, failed := countRoles(res)
	if notPrimary == 0 && primary > 0 {
		// Every copy that answered is primary already; a call that
		// failed (a TLS error, a timeout) is no answer either way.
		also := ""
		if failed > 0 {
			also = fmt.Sprintf("; %d could not be asked", failed)
		}
		return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"the storage of %s reports its copies as primary already (%d of %d asked answer replication info as a primary%s): "+
				"a failover to %s would only fence %s's clients. Nothing was done; if you mean it, start the failover with --override-state",
			to, primary, len(calls), also, to, from), ErrWrongDirection, nil)
	}
	if notPrimary == 0 {
		return fmt.Sprintf("could not ask %s's storage for the roles of any of %d copies, going on", to, len(calls)), nil
	}
	return fmt.Sprintf("%d of %d copies asked on %s are not primary", notPrimary, len(calls), to), nil
}

// countRoles sorts a survey's answers: a copy that answers replication
// info is primary (NOT_FOUND too: primary, with no sync completed since
// it became so), one refused with FAILED_PRECONDITION is not (a driver
// answers only for a primary copy), and any other failure (unreachable,
// TLS, a timeout) is no answer.
func countRoles(res activities.SurveyResult) (primary, notPrimary, failed int) {
	for _, e := range res.Entries {
		switch roleIn(e) {
		case rolePrimary:
			primary++
		case roleSecondary:
			notPrimary++
		default:
			failed++
		}
	}
	return primary, notPrimary, failed
}

// The roles a survey's answer tells (roleIn).
const (
	rolePrimary   = "primary"
	roleSecondary = "secondary"
)

// roleIn reads one survey answer as countRoles does: rolePrimary,
// roleSecondary, or "" for no answer either way.
func roleIn(e activities.SurveyEntry) string {
	switch {
	case e.Error == "" || e.Type == activities.ErrNotFound:
		return rolePrimary
	case e.Type == activities.ErrFailedPrecondition:
		return roleSecondary
	}
	return ""
}

// surveyOnce asks site's storage the replication info of calls in one
// SurveyReplication with a single attempt (local first), as the role
// checks do: a check that got no answer decides for itself.
func surveyOnce(ctx workflow.Context, p *plans.Plan, site string, calls []activities.ReplicationInput) (activities.SurveyResult, error) {
	o := activities.CallOptions(p, site, activities.RPCGetVolumeReplicationInfo)
	o.ScheduleToCloseTimeout = o.StartToCloseTimeout
	o.RetryPolicy = &temporal.RetryPolicy{MaximumAttempts: 1}
	return retried[activities.SurveyResult](ctx, o, st.SurveyReplication, activities.SurveyInput{Calls: calls, Parallelism: p.Policy.Parallelism}, o.TaskQueue == "")
}

// ErrRolesUnknown ends a reprotect or failback whose check of the roles
// got no answer from storage: nothing was done.
const ErrRolesUnknown = "RolesUnknown"

// holdsPrimary is the check a reprotect or a failback makes before it
// demotes anything: the storage of site, which the action keeps (or
// leaves) as the primary, must answer for every copy asked that it is
// primary. Whatever the plan's record says, a demotion of the other site
// while site holds a copy that is not primary would leave no primary
// copy of that volume at all. A copy that cannot be asked ends the
// action too: the action needs that site's storage anyway.
func holdsPrimary(ctx workflow.Context, r *run, p *plans.Plan, site, demoted, action string) error {
	s := r.add(checkRolesStep(site), false)
	s.State, s.Start, s.Attempts = StateRunning, workflow.Now(ctx), 1
	// A copy that could not be asked for a passing reason (UNAVAILABLE,
	// ABORTED, a deadline) is asked again under the plan's back-off,
	// within its time limit, as any call is: a storage that answers
	// late is no reason to give up an action.
	rt := p.Policy.Retry
	interval, most, coef := retryPace(rt)
	limit := rt.TimeLimit.D()
	if limit <= 0 {
		limit = 10 * time.Minute
	}
	var waited rolesUnknown // what the storage answered while the step waited
	for {
		out, again, err := primaryThere(ctx, p, site, demoted, action)
		s.Output, s.End = out, workflow.Now(ctx)
		if err == nil {
			s.State, s.Note = StateDone, ""
			if s.Retries > 0 {
				// The report keeps what the step waited out.
				how := "did not answer every copy"
				if waited.Recovering {
					how = "was recovering"
				}
				s.Output = fmt.Sprintf("%s, after %v in which %s's storage %s (it answered %s)", out, s.End.Sub(s.Start).Round(100*time.Millisecond), site, how, waited.Answer)
			}
			return nil
		}
		s.LastError = ErrorText(err)
		if !again || (rt.MaximumAttempts > 0 && s.Attempts >= rt.MaximumAttempts) || workflow.Now(ctx).Add(interval).Sub(s.Start) >= limit {
			s.State, s.Note = StateFailed, ""
			return err
		}
		s.Retries++
		d := unknownRoles(err)
		waited.Recovering = waited.Recovering || d.Recovering
		if waited.Answer == "" || d.Recovering {
			waited.Answer = d.Answer
		}
		s.Note = waitNote(d, site, interval, limit)
		if err := workflow.Sleep(ctx, interval); err != nil {
			return err
		}
		s.Attempts++
		interval = min(time.Duration(float64(interval)*coef), most)
	}
}

// settle ends the workflow task before an action's first side effect, so
// that the answers of the checks before it are in the history by then.
// A check is a local activity, whose answer reaches the history only with
// the task that asked it; a worker lost later in that same task, after
// promotions or demotions, would leave the next worker to ask again and
// find the copies in the roles the action itself gave them: a failover
// would end as if it had done nothing, half done, and a failback would
// pause on its own demotion. (Reprotect's check asks the site it keeps
// as the primary, which the reprotect does not change.)
//
// A regular activity that does nothing (SettleActivity, which Register
// registers with the workflows) ends the task:
// one turn through the server, the worker running it from the completed
// task's reply where the server dispatches activities eagerly. A timer
// would end it too, but the server fires none sooner than about a second
// after it is set (its timer queue reads no task due before now plus
// history.timerProcessorMaxTimeShift, a second by default): a timer of a
// millisecond cost every failover and failback a second.
func settle(ctx workflow.Context) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	return workflow.ExecuteActivity(ctx, SettleActivity).Get(ctx, nil)
}

// SettleActivity is the name of the activity that does nothing, which
// settle runs to end a workflow task.
const SettleActivity = "Settle"

func settleActivity(context.Context) error { return nil }

// rolesUnknown is the detail of a role check some copies did not answer:
// the first answer that was no role, and whether the storage gave it
// while it recovers (a recorded deviation of a driver that says so).
type rolesUnknown struct {
	Answer     string `json:"answer"`
	Recovering bool   `json:"recovering,omitempty"`
}

// unknownRoles is the detail of primaryThere's ErrRolesUnknown.
func unknownRoles(err error) rolesUnknown {
	var d rolesUnknown
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.HasDetails() {
		_ = ae.Details(&d)
	}
	return d
}

// waitNote is the note of a role check that asks again after interval:
// what the storage answered, and whether it is recovering or out of
// reach, within the step's time limit.
func waitNote(d rolesUnknown, site string, interval, limit time.Duration) string {
	state := "did not answer every copy"
	if d.Recovering {
		state = "is recovering (an answer its driver gives while the site's replication comes back)"
	}
	if d.Answer == "" {
		return fmt.Sprintf("%s's storage %s; asking again in %v, within the step's %v limit", site, state, interval, limit)
	}
	return fmt.Sprintf("%s's storage %s: it answered %s; asking again in %v, within the step's %v limit", site, state, d.Answer, interval, limit)
}

// passing are the error types of a role query that may answer when
// asked again.
var passing = []string{activities.ErrOperationPending, activities.ErrUnavailable, activities.ErrDeadlineExceeded, activities.ErrResourceExhausted}

// primaryThere asks site's storage for the roles of a sample of the
// plan's copies; again tells whether an error may pass when asked again.
func primaryThere(ctx workflow.Context, p *plans.Plan, site, demoted, action string) (out string, again bool, err error) {
	calls, err := roleCalls(p, site, roleSample(p, max(p.Policy.Parallelism, surveyBatch)))
	if err != nil {
		return "", false, err
	}
	if len(calls) == 0 {
		return "no volume groups", false, nil
	}
	res, err := surveyOnce(ctx, p, site, calls)
	if err != nil {
		return "", activities.Retryable(err), temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"could not ask %s's storage which copies are primary: %s. Nothing was done: a %s demotes %s only once %s's storage says it holds the primary copies; start it again when it answers",
			site, ErrorText(err), action, demoted, site), ErrRolesUnknown, nil)
	}
	primary, notPrimary, failed := countRoles(res)
	if notPrimary > 0 {
		return "", false, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"the storage of %s reports %d of %d copies asked as not primary, where the %s needs %s to hold the primary copies before it demotes %s (which may hold the only primary ones). "+
				"Nothing was done. The storage is the truth, whatever the plan's record says: see drctl status PLAN --verify",
			site, notPrimary, len(calls), action, site, demoted), ErrWrongDirection, nil)
	}
	if failed > 0 {
		again = true
		answer, recovering := "", false
		for _, e := range res.Entries {
			if e.Error != "" && e.Type != activities.ErrNotFound && e.Type != activities.ErrFailedPrecondition {
				if !slices.Contains(passing, e.Type) {
					again = false
				}
				if answer == "" {
					answer = e.Error
				}
				recovering = recovering || activities.Recovering(e.Error)
			}
		}
		return "", again, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"%d of %d copies asked on %s could not be asked which role they hold (%d answered as primary; the storage answered: %s). Nothing was done: a %s demotes %s only once %s's storage says it holds every primary copy; start it again when it answers",
			failed, len(calls), site, primary, answer, action, demoted, site), ErrRolesUnknown, nil, rolesUnknown{Answer: answer, Recovering: recovering})
	}
	return fmt.Sprintf("%d of %d copies asked on %s are primary", primary, len(calls), site), false, nil
}
