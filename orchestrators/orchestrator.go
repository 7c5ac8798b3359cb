package orchestrators

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/drover-dr/drover/plans"
)

// Workload is one workload of a plan on one site, as the adapters see it.
type Workload struct {
	Plan string `json:"plan"`
	Site string `json:"site"`
	Name string `json:"name"`
	// Action is the DR action on whose behalf the call is made (failover,
	// failback, …); exec hooks receive it.
	Action string           `json:"action,omitempty"`
	Nomad  *plans.NomadJob  `json:"nomad,omitempty"`
	Exec   *plans.ExecHooks `json:"exec,omitempty"`
}

// Health is one look at a workload.
type Health struct {
	// Healthy: running as wanted.
	Healthy bool `json:"healthy"`
	// Failed: it will not become healthy without someone stepping in (a
	// failed deployment, a stopped job); waiting longer is pointless.
	Failed bool `json:"failed,omitempty"`
	// Detail says what was seen, for the step's progress.
	Detail string `json:"detail"`
	// Failing names the failing parts (allocations, units).
	Failing []string `json:"failing,omitempty"`
}

// Stopped is one look at a stopping workload.
type Stopped struct {
	// Stopped: nothing of the workload runs on the site any more (every
	// Nomad allocation of the job is terminal; the stopped hook exited 0).
	Stopped bool `json:"stopped"`
	// Running names what still runs: allocations, or what the stopped
	// hook said.
	Running []string `json:"running,omitempty"`
	// Detail says what was seen, for the step's progress.
	Detail string `json:"detail"`
}

// Volume is a storage volume a workload claims, as the CO knows it.
type Volume struct {
	ID          string `json:"id"`
	ExternalID  string `json:"externalID,omitempty"`
	PluginID    string `json:"pluginID,omitempty"`
	Schedulable bool   `json:"schedulable"`
	Registered  bool   `json:"registered"`
}

// Description is what a drill reports about a workload on a site.
type Description struct {
	Exists  bool           `json:"exists"`
	Status  string         `json:"status,omitempty"`
	Groups  map[string]int `json:"groups,omitempty"`
	Volumes []Volume       `json:"volumes,omitempty"`
	Detail  string         `json:"detail,omitempty"`
}

// Orchestrator is what the DR actions need from a container orchestrator,
// in the operator's words. Every method is safe to repeat: a retried stop
// of a stopped workload, or start of a started one, succeeds.
type Orchestrator interface {
	// StopWorkload asks the workload to stop; output is what the CO or
	// hook said. The CO may still be stopping it when this returns: a
	// planned move confirms the stop with WaitStopped.
	StopWorkload(ctx context.Context, w Workload) (output string, err error)
	// WaitStopped returns once nothing of the workload runs on the site,
	// or, when ctx ends first, the last look with ctx's error. every
	// paces the looks that cannot block (a hook; a retry after the CO did
	// not answer); seen, when not nil, gets every look.
	WaitStopped(ctx context.Context, w Workload, every time.Duration, seen func(Stopped)) (Stopped, error)
	// StartWorkload starts it, creating it when the plan says how.
	StartWorkload(ctx context.Context, w Workload) (output string, err error)
	// CheckHealth looks once; waiting is the caller's loop.
	CheckHealth(ctx context.Context, w Workload) (Health, error)
	// DescribeWorkload reports what exists, without changing anything.
	DescribeWorkload(ctx context.Context, w Workload) (Description, error)
}

// Error is a failed CO call. Temporary errors may succeed when retried (CO
// unreachable, busy, a hook's try-again exit code); the others will not.
type Error struct {
	Op       string // stop, start, health, describe
	Site     string
	Workload string
	// Action is the DR action the call was made for (failover, drill…).
	Action    string
	Temporary bool
	Msg       string
	// Output is the hook's or CO's output, when there is some.
	Output string
	Err    error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s workload %q on site %q", e.Op, e.Workload, e.Site)
	if e.Action != "" {
		s += " (" + e.Action + ")"
	}
	s += ": " + e.Msg
	if e.Output != "" {
		s += "\n" + e.Output
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// IsTemporary reports whether err is worth retrying.
func IsTemporary(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Temporary
}

func fail(op string, w Workload, temporary bool, cause error, format string, args ...any) *Error {
	return &Error{Op: op, Site: w.Site, Workload: w.Name, Action: w.Action, Temporary: temporary, Msg: fmt.Sprintf(format, args...), Err: cause}
}
