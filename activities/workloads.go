package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/orchestrators"
	"github.com/drover-dr/drover/plans"
)

// Error types of the orchestrator activities.
const (
	ErrWorkloadRetry     = "WorkloadRetry"        // the CO is unreachable or busy, or a hook said try again
	ErrWorkloadError     = "WorkloadError"        // the CO refused, or a hook failed
	ErrWorkloadUnhealthy = "WorkloadUnhealthy"    // it will not become healthy by waiting
	ErrHealthTimeout     = "HealthTimeout"        // not healthy within the workload's healthTimeout
	ErrStillRunning      = "WorkloadStillRunning" // not stopped within the plan's stopDeadline
)

// Workloads holds the orchestrator activities: stop, start, wait until
// healthy and describe a workload on a site, through the site's adapter.
type Workloads struct {
	Secrets SecretResolver
}

// NewWorkloads returns the orchestrator activities, resolving the Nomad
// token from the worker's environment and files.
func NewWorkloads() *Workloads { return &Workloads{Secrets: EnvFileSecrets{}} }

// WorkloadInput addresses one workload on one site. The orchestrator
// settings hold names only: the Nomad token is a secret reference.
type WorkloadInput struct {
	Orchestrator plans.Orchestrator     `json:"orchestrator"`
	Workload     orchestrators.Workload `json:"workload"`
}

// WorkloadOutput is what the CO or the hook said.
type WorkloadOutput struct {
	Output string `json:"output"`
}

// WorkloadInputFor builds the input for a workload of the plan on a site.
func WorkloadInputFor(p *plans.Plan, site, workload, action string) (WorkloadInput, error) {
	s := p.Site(site)
	if s == nil {
		return WorkloadInput{}, fmt.Errorf("plan %q has no site %q", p.Metadata.Name, site)
	}
	for _, w := range p.Workloads {
		if w.Name != workload {
			continue
		}
		ref, ok := w.Sites[site]
		if !ok {
			return WorkloadInput{}, fmt.Errorf("workload %q has nothing on site %q", workload, site)
		}
		return WorkloadInput{Orchestrator: s.Orchestrator, Workload: orchestrators.Workload{
			Plan: p.Metadata.Name, Site: site, Name: workload, Action: action, Nomad: ref.Nomad, Exec: ref.Exec}}, nil
	}
	return WorkloadInput{}, fmt.Errorf("plan %q has no workload %q", p.Metadata.Name, workload)
}

// adapter builds the site's orchestrator adapter for one call; the Nomad
// token is resolved here, on the worker.
func (x *Workloads) adapter(op string, in WorkloadInput) (orchestrators.Orchestrator, error) {
	o := in.Orchestrator
	switch {
	case o.Exec != nil:
		e := orchestrators.NewExec(*o.Exec)
		e.Secret = func(k plans.SecretKey) (string, error) {
			m, err := x.Secrets.Resolve(k.Ref())
			if err != nil {
				return "", err
			}
			v, ok := m[k.Key]
			if !ok {
				return "", fmt.Errorf("the secret has no key %q", k.Key)
			}
			return v, nil
		}
		e.Redact = RedactResolved
		return e, nil
	case o.Nomad != nil:
		token := ""
		if o.Nomad.Token != nil {
			secrets, err := x.Secrets.Resolve(o.Nomad.Token)
			if err != nil {
				return nil, workloadSetupError(op, in, ErrSecretUnavailable, err)
			}
			if token = secrets["TOKEN"]; token == "" {
				return nil, workloadSetupError(op, in, ErrSecretUnavailable, errors.New("the Nomad token secret has no TOKEN key"))
			}
		}
		n, err := orchestrators.NewNomad(in.Workload.Site, *o.Nomad, token)
		if err != nil {
			return nil, workloadSetupError(op, in, ErrWorkloadError, err)
		}
		if in.Workload.Action == orchestrators.ActionTestRecovery {
			n.UseTestNamespace(o.Nomad.TestNamespace)
		}
		return n, nil
	default:
		return nil, workloadSetupError(op, in, ErrWorkloadError, errors.New("the site has no orchestrator"))
	}
}

func workloadSetupError(op string, in WorkloadInput, typ string, err error) error {
	return temporal.NewNonRetryableApplicationError(
		RedactResolved(fmt.Sprintf("%s workload %q on site %q: %v", op, in.Workload.Name, in.Workload.Site, err)), typ, nil)
}

// workloadError turns an adapter error into the activity's: temporary
// ones are retried with the plan's back-off, the rest are final.
func workloadError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	msg := RedactResolved(err.Error())
	if orchestrators.IsTemporary(err) {
		return temporal.NewApplicationError(msg, ErrWorkloadRetry)
	}
	return temporal.NewNonRetryableApplicationError(msg, ErrWorkloadError, nil)
}

// StopWorkload stops a workload on a site.
func (x *Workloads) StopWorkload(ctx context.Context, in WorkloadInput) (WorkloadOutput, error) {
	a, err := x.adapter("stop", in)
	if err != nil {
		return WorkloadOutput{}, err
	}
	out, err := a.StopWorkload(ctx, in.Workload)
	return WorkloadOutput{Output: RedactResolved(out)}, workloadError(err)
}

// StopWaitInput drives WaitStopped.
type StopWaitInput struct {
	WorkloadInput
	// Deadline is the plan's stopDeadline, counted from the first attempt
	// (it survives a worker crash through the heartbeat).
	Deadline time.Duration `json:"deadline"`
	// Interval between looks that cannot block (a stopped hook); zero
	// means DefaultPollInterval.
	Interval time.Duration `json:"interval,omitempty"`
}

// StopOutcome is the confirmed stop and how long it took.
type StopOutcome struct {
	PollProgress
	Stopped orchestrators.Stopped `json:"stopped"`
}

// WaitStopped waits until nothing of the workload runs on the site: every
// allocation of its Nomad job terminal, or its stopped hook exiting 0. One
// still running after the deadline fails with ErrStillRunning, naming what
// runs; an unreachable CO in between is part of waiting.
func (x *Workloads) WaitStopped(ctx context.Context, in StopWaitInput) (StopOutcome, error) {
	a, err := x.adapter("stop", in.WorkloadInput)
	if err != nil {
		return StopOutcome{}, err
	}
	hb := startPoll(ctx)
	defer hb.stop()
	deadline := in.Deadline
	if deadline <= 0 {
		deadline = plans.DefaultStopDeadline
	}
	p := hb.polled()
	wctx, cancel := context.WithDeadline(ctx, p.Since.Add(deadline))
	defer cancel()
	interval := in.Interval
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	w := in.Workload
	s, err := a.WaitStopped(wctx, w, interval, func(orchestrators.Stopped) { p = hb.polled() })
	switch {
	case err == nil:
		return StopOutcome{PollProgress: p, Stopped: s}, nil
	case ctx.Err() != nil:
		return StopOutcome{PollProgress: p, Stopped: s}, ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		return StopOutcome{PollProgress: p, Stopped: s}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("workload %q on site %q still runs %v after its stop: %s; no volume of it is demoted while it runs",
				w.Name, w.Site, deadline, s.Detail), ErrStillRunning, nil, s)
	default:
		return StopOutcome{PollProgress: p, Stopped: s}, workloadError(err)
	}
}

// StopWaitOptions are the options of WaitStopped with the given deadline:
// one heartbeating attempt that may run past it by a call's length,
// retried only after a crash.
func StopWaitOptions(p *plans.Plan, site string, w orchestrators.Workload, deadline time.Duration) workflow.ActivityOptions {
	return HealthOptions(p, site, w, deadline)
}

// StartWorkload starts a workload on a site.
func (x *Workloads) StartWorkload(ctx context.Context, in WorkloadInput) (WorkloadOutput, error) {
	a, err := x.adapter("start", in)
	if err != nil {
		return WorkloadOutput{}, err
	}
	out, err := a.StartWorkload(ctx, in.Workload)
	return WorkloadOutput{Output: RedactResolved(out)}, workloadError(err)
}

// CheckRestored reads the Nomad job a failover to a point in time will
// start on the restored volumes (the workload's Nomad.Restore, the
// action a failover) and says which volumes it would mount, changing
// nothing; a job that would mount a volume the point did not restore is
// refused, as its start would be.
func (x *Workloads) CheckRestored(ctx context.Context, in WorkloadInput) (WorkloadOutput, error) {
	if in.Orchestrator.Nomad == nil {
		return WorkloadOutput{}, workloadSetupError("check", in, ErrWorkloadError, errors.New("the site's orchestrator is not Nomad"))
	}
	a, err := x.adapter("check", in)
	if err != nil {
		return WorkloadOutput{}, err
	}
	out, err := a.(*orchestrators.Nomad).CheckRestored(ctx, in.Workload)
	return WorkloadOutput{Output: RedactResolved(out)}, workloadError(err)
}

// DescribeWorkload reports a workload for a drill, changing nothing.
func (x *Workloads) DescribeWorkload(ctx context.Context, in WorkloadInput) (orchestrators.Description, error) {
	a, err := x.adapter("describe", in)
	if err != nil {
		return orchestrators.Description{}, err
	}
	d, err := a.DescribeWorkload(ctx, in.Workload)
	d.Detail = RedactResolved(d.Detail)
	return d, workloadError(err)
}

// HealthInput drives WaitHealthy.
type HealthInput struct {
	WorkloadInput
	// Timeout is the workload's healthTimeout, counted from the first
	// attempt (it survives a worker crash through the heartbeat).
	Timeout time.Duration `json:"timeout"`
	// Interval between checks; zero means DefaultPollInterval.
	Interval time.Duration `json:"interval,omitempty"`
	// Report makes the activity return, not healthy yet, as soon as what
	// it sees differs from Known (what the workflow shows so far), so
	// that the step can say why it waits (the CO unreachable, the
	// allocations pending); the workflow then calls again with Since.
	Report bool   `json:"report,omitempty"`
	Known  string `json:"known,omitempty"`
	// Since is when the wait began, for a call that continues it.
	Since time.Time `json:"since,omitzero"`
}

// HealthOutcome is the healthy workload and how long it took, or, with
// Report, Waiting: why it is not healthy yet.
type HealthOutcome struct {
	PollProgress
	Health  orchestrators.Health `json:"health"`
	Waiting string               `json:"waiting,omitempty"`
}

// reportEvery is how often at most a health wait with Report returns to
// tell the workflow of a change, after its first report.
const reportEvery = 5 * time.Second

// WaitHealthy checks the workload until it is healthy. A workload that
// will not heal by waiting (a failed deployment) fails at once with
// ErrWorkloadUnhealthy; one still unhealthy after the timeout fails with
// ErrHealthTimeout. An unreachable CO in between is part of waiting.
func (x *Workloads) WaitHealthy(ctx context.Context, in HealthInput) (HealthOutcome, error) {
	a, err := x.adapter("health", in.WorkloadInput)
	if err != nil {
		return HealthOutcome{}, err
	}
	hb := startPoll(ctx)
	defer hb.stop()
	timeout := in.Timeout
	if timeout <= 0 {
		timeout = plans.DefaultHealthTimeout
	}
	w := in.Workload
	last := "no check answered yet"
	began := time.Now()
	for {
		h, err := a.CheckHealth(ctx, w)
		h.Detail = RedactResolved(h.Detail)
		p := hb.polled()
		if !in.Since.IsZero() && in.Since.Before(p.Since) {
			p.Since = in.Since
		}
		switch {
		case err != nil && !orchestrators.IsTemporary(err):
			return HealthOutcome{PollProgress: p}, workloadError(err)
		case err != nil:
			last = RedactResolved(err.Error())
		case h.Healthy:
			return HealthOutcome{PollProgress: p, Health: h}, nil
		case h.Failed:
			return HealthOutcome{PollProgress: p, Health: h}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("workload %q on site %q will not become healthy: %s", w.Name, w.Site, h.Detail), ErrWorkloadUnhealthy, nil, h)
		default:
			last = h.Detail
		}
		if time.Since(p.Since) >= timeout {
			return HealthOutcome{PollProgress: p}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("workload %q on site %q is not healthy after %v: %s", w.Name, w.Site, timeout, last), ErrHealthTimeout, nil)
		}
		if in.Report && last != in.Known && (in.Known == "" || time.Since(began) >= reportEvery) {
			return HealthOutcome{PollProgress: p, Waiting: last}, nil
		}
		if err := sleep(ctx, in.Interval); err != nil {
			return HealthOutcome{PollProgress: p}, err
		}
	}
}

// WorkloadOptions are the activity options of a stop, start or describe:
// one attempt may take the hook's or the site's exec timeout (a Nomad call
// the default call deadline), all attempts the plan's time limit.
func WorkloadOptions(p *plans.Plan, site string, w orchestrators.Workload) workflow.ActivityOptions {
	o := CallOptions(p, site, "default")
	per := p.Deadline("default")
	if w.Exec != nil && w.Exec.Timeout > 0 {
		per = w.Exec.Timeout.D()
	} else if s := p.Site(site); s != nil && s.Orchestrator.Exec != nil && s.Orchestrator.Exec.Timeout > 0 {
		per = s.Orchestrator.Exec.Timeout.D()
	}
	o.StartToCloseTimeout = per + CallGrace
	return o
}

// HealthOptions are the options of WaitHealthy for a workload with the
// given healthTimeout: one heartbeating attempt that may run past it by a
// check's length, retried only after a crash.
func HealthOptions(p *plans.Plan, site string, w orchestrators.Workload, timeout time.Duration) workflow.ActivityOptions {
	o := WorkloadOptions(p, site, w)
	o.StartToCloseTimeout = timeout + o.StartToCloseTimeout
	o.ScheduleToCloseTimeout = 2 * o.StartToCloseTimeout
	o.HeartbeatTimeout = DefaultHeartbeatTimeout
	return o
}

// NomadCSIInput is a test recovery's, or a failover to a point in
// time's, call on the Nomad CSI volumes of a site (Workload names the
// plan, the site and the action): find the volumes of storage ids Volumes, snapshot
// Volume under Name, copy it as volume ID of Namespace from Snapshot,
// delete copy ID of Namespace, or delete snapshot ID of Volume's plugin.
type NomadCSIInput struct {
	WorkloadInput
	Volumes   []string                `json:"volumes,omitempty"`
	Volume    orchestrators.CSIVolume `json:"volume,omitzero"`
	Name      string                  `json:"name,omitempty"`
	ID        string                  `json:"id,omitempty"`
	Namespace string                  `json:"namespace,omitempty"`
	Snapshot  string                  `json:"snapshot,omitempty"`
	// External is the storage volume a register names.
	External string `json:"external,omitempty"`
}

// NomadCSIInputFor is the input of a test recovery's Nomad CSI calls on
// site (a failover to a point in time sets its own action).
func NomadCSIInputFor(p *plans.Plan, site string) NomadCSIInput {
	var o plans.Orchestrator
	if s := p.Site(site); s != nil {
		o = s.Orchestrator
	}
	return NomadCSIInput{WorkloadInput: WorkloadInput{Orchestrator: o, Workload: orchestrators.Workload{
		Plan: p.Metadata.Name, Site: site, Name: "volumes", Action: orchestrators.ActionTestRecovery}}}
}

func (x *Workloads) nomad(op string, in NomadCSIInput) (*orchestrators.Nomad, error) {
	if in.Orchestrator.Nomad == nil {
		return nil, workloadSetupError(op, in.WorkloadInput, ErrWorkloadError, errors.New("the site's orchestrator is not Nomad"))
	}
	a, err := x.adapter(op, in.WorkloadInput)
	if err != nil {
		return nil, err
	}
	return a.(*orchestrators.Nomad), nil
}

// FindNomadVolumes finds the site's Nomad CSI volumes of storage volumes
// in.Volumes, by their external ids.
func (x *Workloads) FindNomadVolumes(ctx context.Context, in NomadCSIInput) (map[string]orchestrators.CSIVolume, error) {
	n, err := x.nomad("find volumes", in)
	if err != nil {
		return nil, err
	}
	out, err := n.CSIVolumes(ctx, in.Workload, in.Volumes)
	return out, workloadError(err)
}

// NomadSnapshot snapshots in.Volume under in.Name through Nomad.
func (x *Workloads) NomadSnapshot(ctx context.Context, in NomadCSIInput) (string, error) {
	n, err := x.nomad("snapshot", in)
	if err != nil {
		return "", err
	}
	id, err := n.CreateSnapshot(ctx, in.Workload, in.Volume, in.Name)
	return id, workloadError(err)
}

// NomadCopy creates Nomad volume in.ID of in.Namespace from snapshot
// in.Snapshot of in.Volume, and returns its storage id.
func (x *Workloads) NomadCopy(ctx context.Context, in NomadCSIInput) (string, error) {
	n, err := x.nomad("copy", in)
	if err != nil {
		return "", err
	}
	id, err := n.CreateVolume(ctx, in.Workload, in.Volume, in.ID, in.Name, in.Namespace, in.Snapshot)
	return id, workloadError(err)
}

// NomadRegister registers storage volume in.External as Nomad volume
// in.ID of in.Namespace, named in.Name, with in.Volume's plugin and
// capabilities (a reprotect of restored volumes: the copies the storage
// made at the returned site).
func (x *Workloads) NomadRegister(ctx context.Context, in NomadCSIInput) (string, error) {
	n, err := x.nomad("register", in)
	if err != nil {
		return "", err
	}
	out, err := n.RegisterVolume(ctx, in.Workload, in.Volume, in.ID, in.Name, in.Namespace, in.External)
	return out, workloadError(err)
}

// NomadDeleteCopy deletes Nomad volume in.ID of in.Namespace.
func (x *Workloads) NomadDeleteCopy(ctx context.Context, in NomadCSIInput) (struct{}, error) {
	n, err := x.nomad("delete copy", in)
	if err != nil {
		return struct{}{}, err
	}
	return struct{}{}, workloadError(n.DeleteVolume(ctx, in.Workload, in.ID, in.Namespace))
}

// NomadDeleteSnapshot deletes snapshot in.ID of in.Volume's plugin.
func (x *Workloads) NomadDeleteSnapshot(ctx context.Context, in NomadCSIInput) (struct{}, error) {
	n, err := x.nomad("delete snapshot", in)
	if err != nil {
		return struct{}{}, err
	}
	return struct{}{}, workloadError(n.DeleteSnapshot(ctx, in.Workload, in.Volume.PluginID, in.ID))
}
