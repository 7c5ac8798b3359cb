package workflows

import (
	"fmt"

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
	var calls []activities.ReplicationInput
	for i := range groups {
		ins, err := activities.GroupInputs(p, to, &groups[i], activities.RPCGetVolumeReplicationInfo, false)
		if err != nil {
			return "", err
		}
		calls = append(calls, ins...)
		if len(calls) >= surveyBatch {
			calls = calls[:surveyBatch]
			break
		}
	}
	if len(calls) == 0 {
		return "no volume groups", nil
	}
	o := activities.CallOptions(p, to, activities.RPCGetVolumeReplicationInfo)
	o.ScheduleToCloseTimeout = o.StartToCloseTimeout
	in := activities.SurveyInput{Calls: calls, Parallelism: p.Policy.Parallelism}
	o.RetryPolicy = &temporal.RetryPolicy{MaximumAttempts: 1}
	res, err := retried[activities.SurveyResult](ctx, o, st.SurveyReplication, in, o.TaskQueue == "")
	if err != nil {
		// Only an answer can contradict the failover: a check that got
		// none (a worker lost mid-call, the site's storage slow in a
		// disaster) must not end a failover, which the fence guards.
		return fmt.Sprintf("could not ask %s's storage for its roles, going on: %s", to, ErrorText(err)), nil
	}
	primary := 0
	for _, e := range res.Entries {
		if e.Error == "" {
			primary++
		}
	}
	if primary == len(calls) {
		return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"the storage of %s reports its copies as primary already (%d of %d asked answer replication info as a primary): "+
				"a failover to %s would only fence %s's clients. Nothing was done; if you mean it, start the failover with --override-state",
			to, primary, len(calls), to, from), ErrWrongDirection, nil)
	}
	return fmt.Sprintf("%d of %d copies asked on %s are not primary", len(calls)-primary, len(calls), to), nil
}
