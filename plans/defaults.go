package plans

import "time"

// Defaults, applied in one place (ApplyDefaults) so that `drctl plan show`
// prints exactly what an action will use.
const (
	DefaultParallelism        = 10
	DefaultRPOTarget          = 5 * time.Minute
	DefaultInitialInterval    = time.Second
	DefaultMaximumInterval    = time.Minute
	DefaultBackoffCoefficient = 2.0
	DefaultTimeLimit          = 10 * time.Minute
	DefaultCallDeadline       = 30 * time.Second
	DefaultStopDeadline       = 30 * time.Second
	DefaultHealthTimeout      = 5 * time.Minute
	DefaultExecTimeout        = 5 * time.Minute
	DefaultShell              = "/bin/sh"
	DefaultOnFailure          = "pause"
	DefaultNomadStop          = "deregister"
	DefaultRetryExitCode      = 75 // EX_TEMPFAIL
)

// DefaultDeadlines are the per-RPC deadlines a plan gets unless it sets its
// own: promotion and demotion can take long on real drivers (a forced
// promote can hang), the rest are quick. A promotion gets 3 minutes, as
// the kubernetes-csi-addons controller gives every call: ceph-csi runs
// its forced promotion under a timeout of 2 minutes of its own
// (ForcePromote in internal/rbd/mirror.go), and a deadline no longer
// than that would cut the call just as ceph-csi gives up on its own.
var DefaultDeadlines = map[string]time.Duration{
	"default":       DefaultCallDeadline,
	"PromoteVolume": 3 * time.Minute,
	"DemoteVolume":  2 * time.Minute,
	"ResyncVolume":  time.Minute,
}

// ApplyDefaults fills every field the plan left empty with its default.
// Zero means "default" for numbers and durations.
func (p *Plan) ApplyDefaults() {
	pol := &p.Policy
	if pol.Parallelism == 0 {
		pol.Parallelism = DefaultParallelism
	}
	if pol.RPOTarget == 0 {
		pol.RPOTarget = Duration(DefaultRPOTarget)
	}
	if pol.Retry.InitialInterval == 0 {
		pol.Retry.InitialInterval = Duration(DefaultInitialInterval)
	}
	if pol.Retry.MaximumInterval == 0 {
		pol.Retry.MaximumInterval = Duration(DefaultMaximumInterval)
	}
	if pol.Retry.BackoffCoefficient == 0 {
		pol.Retry.BackoffCoefficient = DefaultBackoffCoefficient
	}
	if pol.Retry.TimeLimit == 0 {
		pol.Retry.TimeLimit = Duration(DefaultTimeLimit)
	}
	if pol.Deadlines == nil {
		pol.Deadlines = map[string]Duration{}
	}
	for k, v := range DefaultDeadlines {
		if _, ok := pol.Deadlines[k]; !ok {
			pol.Deadlines[k] = Duration(v)
		}
	}
	if pol.StopDeadline == 0 {
		pol.StopDeadline = Duration(DefaultStopDeadline)
	}
	if pol.OnFailure == "" {
		pol.OnFailure = DefaultOnFailure
	}
	for i := range p.Sites {
		if e := p.Sites[i].Orchestrator.Exec; e != nil {
			if e.Shell == "" {
				e.Shell = DefaultShell
			}
			if e.Timeout == 0 {
				e.Timeout = Duration(DefaultExecTimeout)
			}
		}
	}
	for i := range p.Workloads {
		w := &p.Workloads[i]
		if w.HealthTimeout == 0 {
			w.HealthTimeout = Duration(DefaultHealthTimeout)
		}
		for site, ref := range w.Sites {
			if ref.Nomad != nil && ref.Nomad.Stop == "" {
				ref.Nomad.Stop = DefaultNomadStop
			}
			if ref.Exec != nil && ref.Exec.RetryExitCodes == nil {
				ref.Exec.RetryExitCodes = []int{DefaultRetryExitCode}
			}
			if ref.Exec != nil && ref.Exec.Timeout == 0 {
				if s := p.Site(site); s != nil && s.Orchestrator.Exec != nil {
					ref.Exec.Timeout = s.Orchestrator.Exec.Timeout
				}
			}
		}
	}
}

// Site returns the named site, or nil.
func (p *Plan) Site(name string) *Site {
	for i := range p.Sites {
		if p.Sites[i].Name == name {
			return &p.Sites[i]
		}
	}
	return nil
}

// Groups indexes the plan's volume groups by name, for code that looks up
// many of them: a plan may hold tens of thousands.
func (p *Plan) Groups() map[string]*VolumeGroup {
	m := make(map[string]*VolumeGroup, len(p.VolumeGroups))
	for i := range p.VolumeGroups {
		m[p.VolumeGroups[i].Name] = &p.VolumeGroups[i]
	}
	return m
}

// Deadline returns the deadline of one call of the named RPC.
func (p *Plan) Deadline(rpc string) time.Duration {
	if d, ok := p.Policy.Deadlines[rpc]; ok {
		return d.D()
	}
	if d, ok := p.Policy.Deadlines["default"]; ok {
		return d.D()
	}
	return DefaultCallDeadline
}
