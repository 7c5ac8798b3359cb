package workflows

import (
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
)

// Drover's own metrics, emitted through the workflow's metrics handler
// (not during replay) and served by the worker next to the SDK's.
const (
	// MetricActionDuration times each finished action; tags plan, action
	// and outcome (completed or aborted).
	MetricActionDuration = "drover_action_duration"
	// MetricStepFailures counts steps that failed for good; tags plan,
	// action and code (the failure's type, e.g. Unavailable, NotFenced).
	MetricStepFailures = "drover_step_failures"
	// MetricReplicationLag is each group's lag on its primary, in
	// seconds, as Protect last saw it; tags plan and group.
	MetricReplicationLag = "drover_replication_lag_seconds"
	// MetricOutOfRPO is 1 while a protected plan is out of its RPO target.
	MetricOutOfRPO = "drover_out_of_rpo"
	// MetricPrimaryUnreachable is 1 while the storage of a protected
	// plan's primary does not answer Protect's polls; tags plan and site.
	MetricPrimaryUnreachable = "drover_primary_unreachable"
	// MetricUnprotected is the seconds since a failover left a plan
	// without a replica, set each poll interval until a reprotect; 0
	// while the plan is protected. Tag plan.
	MetricUnprotected = "drover_unprotected"
	// MetricPointAge is the age in seconds of a plan's newest point in
	// time (policy.pointsInTime), or, while it has none, the time since
	// protection first looked for one; set each poll. Tag plan.
	MetricPointAge = "drover_point_age_seconds"
	// MetricPointMaxAge is the age the plan's policy allows its newest
	// point: every, plus the poll interval a cut waits for. Tag plan.
	MetricPointMaxAge = "drover_point_max_age_seconds"
	// MetricSignatureEnds is the seconds until the signature of a
	// protected plan ends, when it has an end (plans.Signature
	// ExpiresAt); set each poll. Protection ends with the signature.
	// Tag plan.
	MetricSignatureEnds = "drover_plan_signature_expiry_seconds"
	// MetricProtectionEnded is 1 once a plan's protection ended on its
	// own; tags plan and reason ("signature": the plan's signature
	// ended). It stays until protection of the plan reports again.
	MetricProtectionEnded = "drover_protection_ended"
)

// SignatureWarning is how long ahead of a plan's signature's end drctl
// status, the dashboard and the DroverPlanSignatureEnding alert warn.
const SignatureWarning = 7 * 24 * time.Hour

// EndedBySignature is the reason of MetricProtectionEnded when the
// plan's signature ended.
const EndedBySignature = "signature"

func (r *run) tags() map[string]string {
	return map[string]string{"plan": r.progress.Plan, "action": r.progress.Action}
}

// failureCode names an error for the step failure metric.
func failureCode(err error) string {
	var ae *temporal.ApplicationError
	switch {
	case temporal.IsCanceledError(err):
		return "Canceled"
	case errors.As(err, &ae) && ae.Type() != "":
		return ae.Type()
	case temporal.IsTimeoutError(err):
		return "Timeout"
	}
	return "Other"
}
