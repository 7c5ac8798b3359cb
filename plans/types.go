package plans

import (
	"fmt"
	"strings"
	"time"
)

// APIVersion and Kind identify a Drover plan document.
const (
	APIVersion = "drover.dev/v1alpha1"
	Kind       = "FailoverPlan"
)

// Plan describes one protected application set across two sites: where
// their storage and orchestrators are, which volume groups replicate, which
// workloads run on them, and how DR actions behave.
type Plan struct {
	APIVersion   string        `yaml:"apiVersion" json:"apiVersion" required:"true" doc:"Plan format version: drover.dev/v1alpha1."`
	Kind         string        `yaml:"kind" json:"kind" required:"true" doc:"Document kind: FailoverPlan."`
	Metadata     Metadata      `yaml:"metadata" json:"metadata" required:"true"`
	Sites        []Site        `yaml:"sites" json:"sites" required:"true" doc:"Exactly two sites."`
	VolumeGroups []VolumeGroup `yaml:"volumeGroups" json:"volumeGroups" required:"true" doc:"The replicated volume groups (or ungrouped volumes)."`
	Workloads    []Workload    `yaml:"workloads,omitempty" json:"workloads,omitempty" doc:"Workloads to stop and start around the storage steps."`
	Policy       Policy        `yaml:"policy,omitempty" json:"policy,omitempty" doc:"How DR actions behave; every field has a default."`
}

// Metadata names the plan.
type Metadata struct {
	Name        string            `yaml:"name" json:"name" required:"true" doc:"Plan name: lower-case letters, digits and dashes; DR action ids derive from it."`
	Description string            `yaml:"description,omitempty" json:"description,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
	Tier        int               `yaml:"tier,omitempty" json:"tier,omitempty" doc:"Order of the plan in a site action (drctl failover --site): lower tiers go first, the plans of a tier together (default 0)."`
}

// Site is one of the two sites: its storage endpoints, the client networks
// to fence when it is lost, and its orchestrator.
type Site struct {
	Name         string       `yaml:"name" json:"name" required:"true" doc:"Site name, used as a key in volumeGroups and workloads."`
	Storage      Storage      `yaml:"storage" json:"storage" required:"true"`
	Fence        Fence        `yaml:"fence,omitempty" json:"fence,omitempty"`
	TaskQueue    string       `yaml:"taskQueue,omitempty" json:"taskQueue,omitempty" doc:"Task queue of a worker inside this site for its storage and orchestrator calls; empty runs them on the main worker."`
	Orchestrator Orchestrator `yaml:"orchestrator" json:"orchestrator" required:"true"`
}

// Storage is how to reach a site's CSI-Addons driver, and its CSI
// controller.
type Storage struct {
	Endpoint       string                       `yaml:"endpoint,omitempty" json:"endpoint,omitempty" doc:"CSI-Addons endpoint for all three services: unix:///path or host:port."`
	Identity       string                       `yaml:"identity,omitempty" json:"identity,omitempty" doc:"Endpoint of the identity service, when it differs from endpoint."`
	Fence          string                       `yaml:"fence,omitempty" json:"fence,omitempty" doc:"Endpoint of the fence service, when it differs from endpoint."`
	Replication    string                       `yaml:"replication,omitempty" json:"replication,omitempty" doc:"Endpoint of the replication service, when it differs from endpoint."`
	CSI            string                       `yaml:"csi,omitempty" json:"csi,omitempty" doc:"Endpoint of the CSI controller (Controller and GroupController services: snapshots and copies for a test recovery), when it differs from endpoint."`
	TLS            *TLS                         `yaml:"tls,omitempty" json:"tls,omitempty"`
	Secret         *SecretRef                   `yaml:"secret,omitempty" json:"secret,omitempty" doc:"Secrets sent with every fence and replication call, resolved on the worker."`
	Parameters     map[string]string            `yaml:"parameters,omitempty" json:"parameters,omitempty" doc:"Plugin parameters sent with every call (ceph-csi wants clusterID)."`
	CallParameters map[string]map[string]string `yaml:"callParameters,omitempty" json:"callParameters,omitempty" doc:"Extra plugin parameters per RPC name, merged over parameters."`
}

// TLS configures TLS or mutual TLS to an endpoint. Paths are read on the
// worker.
type TLS struct {
	CA         string `yaml:"ca,omitempty" json:"ca,omitempty" doc:"PEM file of the CA that signed the server certificate."`
	Cert       string `yaml:"cert,omitempty" json:"cert,omitempty" doc:"PEM client certificate, for mutual TLS."`
	Key        string `yaml:"key,omitempty" json:"key,omitempty" doc:"PEM client key, for mutual TLS."`
	ServerName string `yaml:"serverName,omitempty" json:"serverName,omitempty" doc:"Name to verify the server certificate against."`
}

// SecretRef names a secret without holding it: the worker resolves it at
// call time, so secret values never enter workflow history.
type SecretRef struct {
	Env  string `yaml:"env,omitempty" json:"env,omitempty" doc:"Environment variable prefix: every variable PREFIX_KEY becomes secret KEY."`
	File string `yaml:"file,omitempty" json:"file,omitempty" doc:"File of key=value lines, or a YAML map."`
}

// Fence is what to fence when this site is lost.
type Fence struct {
	CIDRs       []string `yaml:"cidrs,omitempty" json:"cidrs,omitempty" doc:"Client CIDRs of this site's nodes; when empty, the clients last reported by GetFenceClients."`
	Unavailable bool     `yaml:"unavailable,omitempty" json:"unavailable,omitempty" doc:"The storage cannot fence this site's clients; a forced promotion then needs the operator's confirmation."`
}

// Orchestrator is the container orchestrator of a site: exactly one of
// nomad or exec.
type Orchestrator struct {
	Nomad *Nomad `yaml:"nomad,omitempty" json:"nomad,omitempty"`
	Exec  *Exec  `yaml:"exec,omitempty" json:"exec,omitempty"`
}

// Nomad is a Nomad cluster; empty fields fall back to the NOMAD_*
// environment variables on the worker.
type Nomad struct {
	Address   string     `yaml:"address,omitempty" json:"address,omitempty" doc:"Nomad HTTP API address, e.g. https://nomad.east:4646."`
	Region    string     `yaml:"region,omitempty" json:"region,omitempty"`
	Namespace string     `yaml:"namespace,omitempty" json:"namespace,omitempty"`
	Token     *SecretRef `yaml:"token,omitempty" json:"token,omitempty" doc:"ACL token reference; the secret's key TOKEN is the token."`
	TLS       *TLS       `yaml:"tls,omitempty" json:"tls,omitempty"`
	// TestNamespace isolates a test recovery's job copies and volume
	// copies from production jobs of the same names.
	TestNamespace string `yaml:"testNamespace,omitempty" json:"testNamespace,omitempty" doc:"Nomad namespace of a test recovery's job and volume copies (default: namespace); it must exist."`
}

// Exec runs hook commands for any other orchestrator. A hook's
// environment is PATH, HOME, the DROVER_* variables of the call, and what
// env and secretEnv here and in the workload's hooks name: never the
// worker's own environment.
type Exec struct {
	Shell     string               `yaml:"shell,omitempty" json:"shell,omitempty" doc:"Shell that runs the hooks (default /bin/sh)."`
	Env       map[string]string    `yaml:"env,omitempty" json:"env,omitempty" doc:"Extra environment for every hook: literal values."`
	SecretEnv map[string]SecretKey `yaml:"secretEnv,omitempty" json:"secretEnv,omitempty" doc:"Extra environment for every hook: secret values, resolved on the worker when the hook runs."`
	Timeout   Duration             `yaml:"timeout,omitempty" json:"timeout,omitempty" doc:"Default time limit of one hook (default 5m)."`
}

// SecretKey names one value of a secret: the key of a secret reference.
// The worker resolves it when a hook runs; the value never enters
// workflow history, and hook output kept in a step is redacted of it.
type SecretKey struct {
	Env  string `yaml:"env,omitempty" json:"env,omitempty" doc:"Environment variable prefix of the secret, as in a secret reference: the value is variable PREFIX_KEY."`
	File string `yaml:"file,omitempty" json:"file,omitempty" doc:"File of key=value lines, or a YAML map, holding the secret."`
	Key  string `yaml:"key" json:"key" required:"true" doc:"The secret's key whose value the variable takes."`
}

// Ref is the secret reference the key belongs to.
func (k SecretKey) Ref() *SecretRef { return &SecretRef{Env: k.Env, File: k.File} }

// VolumeGroup is one replicated volume group, named on each site.
type VolumeGroup struct {
	Name       string              `yaml:"name" json:"name" required:"true"`
	Priority   int                 `yaml:"priority,omitempty" json:"priority,omitempty" doc:"Lower promotes first; groups of equal priority promote together."`
	Sites      map[string]GroupRef `yaml:"sites" json:"sites" required:"true" doc:"The group on each site, keyed by site name."`
	Parameters map[string]string   `yaml:"parameters,omitempty" json:"parameters,omitempty" doc:"Plugin parameters for this group's replication calls (e.g. schedulingInterval)."`
}

// GroupRef is the group on one site: a volume group id, or the ids of
// ungrouped volumes.
type GroupRef struct {
	GroupID string   `yaml:"groupID,omitempty" json:"groupID,omitempty"`
	Volumes []string `yaml:"volumes,omitempty" json:"volumes,omitempty"`
	Members []string `yaml:"members,omitempty" json:"members,omitempty" doc:"With groupID: the group's volumes on this site, which a test recovery snapshots together."`
	// Names is set by the worker on its own copy of the plan, never
	// from a plan file: when other volumes stand in for the group's
	// (a reprotect after a failover to a point in time), Volumes are
	// theirs and Names the plan's names of the volumes they stand in
	// for, in the same order, for the hooks' DROVER_VOLUME_<NAME>.
	Names []string `yaml:"-" json:"names,omitempty"`
}

// Workload is an application that uses volume groups.
type Workload struct {
	Name          string                 `yaml:"name" json:"name" required:"true"`
	Priority      int                    `yaml:"priority,omitempty" json:"priority,omitempty" doc:"Lower starts first; workloads of equal priority start together."`
	HealthTimeout Duration               `yaml:"healthTimeout,omitempty" json:"healthTimeout,omitempty" doc:"How long to wait for the workload to be healthy (default 5m)."`
	VolumeGroups  []string               `yaml:"volumeGroups,omitempty" json:"volumeGroups,omitempty" doc:"Names of the volume groups it needs."`
	Sites         map[string]WorkloadRef `yaml:"sites" json:"sites" required:"true" doc:"The workload on each site, keyed by site name."`
}

// WorkloadRef is the workload on one site, in its orchestrator's terms.
type WorkloadRef struct {
	Nomad *NomadJob  `yaml:"nomad,omitempty" json:"nomad,omitempty"`
	Exec  *ExecHooks `yaml:"exec,omitempty" json:"exec,omitempty"`
}

// NomadJob is a Nomad job and how to stop and start it.
type NomadJob struct {
	Job     string         `yaml:"job" json:"job" required:"true" doc:"Nomad job id."`
	Groups  map[string]int `yaml:"groups,omitempty" json:"groups,omitempty" doc:"Task-group counts to scale to on start."`
	Stop    string         `yaml:"stop,omitempty" json:"stop,omitempty" doc:"deregister (default, without purge) or scale (task groups to zero)."`
	JobFile string         `yaml:"jobFile,omitempty" json:"jobFile,omitempty" doc:"HCL or JSON job file to register when the job does not exist."`
	// Test is set by a test recovery on its own copy of the plan, never
	// from a plan file: the job is then a copy of Test.Source.
	Test *NomadTest `yaml:"-" json:"test,omitempty"`
	// Restore is set by a failover to a point in time, or by any action
	// once a reprotect made the restored volumes the protected ones, on
	// its own copy of the plan, never from a plan file: the job then
	// starts on the volumes restored from the point (or those standing
	// in for the plan's at the site).
	Restore *NomadRestore `yaml:"-" json:"restore,omitempty"`
}

// NomadRestore starts a job on the volumes a failover to a point in time
// restored, or on those that stand in for the plan's after a reprotect:
// each CSI volume source replaced by its restored Nomad volume from
// Volumes (the replica's Nomad volume id → the restored one's, or the
// stand-in's at the site), and Meta (DROVER_POINT, DROVER_VOLUME_<VOLUME>)
// added to the job's meta.
type NomadRestore struct {
	Point   string            `json:"point"`
	Volumes map[string]string `json:"volumes,omitempty"`
	Meta    map[string]string `json:"meta,omitempty"`
}

// NomadTest makes a job a test recovery's copy of another: Source (read
// from SourceNamespace, else from the job file) registered as the job in
// Namespace, each CSI volume source replaced by its copy from Volumes.
type NomadTest struct {
	Source          string            `json:"source"`
	SourceNamespace string            `json:"sourceNamespace,omitempty"`
	Namespace       string            `json:"namespace,omitempty"`
	Volumes         map[string]string `json:"volumes,omitempty"`
}

// ExecHooks are the commands that stop, start and check a workload.
type ExecHooks struct {
	Start   string `yaml:"start" json:"start" required:"true"`
	Stop    string `yaml:"stop" json:"stop" required:"true" doc:"Stops the workload and returns only once it has stopped: a planned move demotes its volumes right after."`
	Stopped string `yaml:"stopped,omitempty" json:"stopped,omitempty" doc:"Exits 0 once nothing of the workload runs; polled after stop until it does, within policy.stopDeadline, before any volume is demoted."`
	Health  string `yaml:"health,omitempty" json:"health,omitempty" doc:"Exits 0 when healthy; retried until healthTimeout."`
	// The hooks of a test recovery (drctl test-recovery): they run the
	// workload on copies of its volumes, in isolation, with DROVER_COPY_*
	// naming the copies.
	TestStart  string   `yaml:"testStart,omitempty" json:"testStart,omitempty" doc:"Starts the workload for a test recovery, on the copies DROVER_COPY_<VOLUME> names; without it the workload is left out of test recoveries."`
	TestStop   string   `yaml:"testStop,omitempty" json:"testStop,omitempty" doc:"Stops the test recovery's workload and returns once it has stopped."`
	TestHealth string   `yaml:"testHealth,omitempty" json:"testHealth,omitempty" doc:"Exits 0 when the test recovery's workload is healthy."`
	Timeout    Duration `yaml:"timeout,omitempty" json:"timeout,omitempty" doc:"Time limit of one hook (default: the site's exec timeout)."`
	// Env and SecretEnv are this workload's hook environment, over the
	// site's.
	Env       map[string]string    `yaml:"env,omitempty" json:"env,omitempty" doc:"Environment of this workload's hooks, over the site's: literal values."`
	SecretEnv map[string]SecretKey `yaml:"secretEnv,omitempty" json:"secretEnv,omitempty" doc:"Environment of this workload's hooks, over the site's: secret values, resolved on the worker when the hook runs."`
	// RetryExitCodes are the exit codes that mean "not now, try again";
	// an empty list (not nil) says none does.
	RetryExitCodes ExitCodes `yaml:"retryExitCodes,omitempty" json:"retryExitCodes,omitzero" doc:"Exit codes of start and stop that mean try again (default [75], EX_TEMPFAIL); any other non-zero code fails the step."`
}

// ExitCodes is a list of exit codes where an empty list is a value of
// its own: `retryExitCodes: []` says no code means "try again", where a
// missing list takes the default. Only nil is left out of JSON and YAML,
// so the empty list survives a workflow input's round trip and the
// canonical JSON a signature covers (omitempty dropped it, and the
// default came back).
type ExitCodes []int

// IsZero is true for nil only: encoding/json's omitzero and yaml's
// omitempty leave out a missing list, not an empty one.
func (c ExitCodes) IsZero() bool { return c == nil }

// Policy is how DR actions behave.
type Policy struct {
	Parallelism   int                 `yaml:"parallelism,omitempty" json:"parallelism,omitempty" doc:"Volume groups promoted at once (default 10)."`
	RPOTarget     Duration            `yaml:"rpoTarget,omitempty" json:"rpoTarget,omitempty" doc:"Replication lag above this marks the plan out of RPO (default 5m)."`
	Retry         Retry               `yaml:"retry,omitempty" json:"retry,omitempty"`
	Deadlines     map[string]Duration `yaml:"deadlines,omitempty" json:"deadlines,omitempty" doc:"Deadline of one call, by RPC name, and 'default'."`
	StopDeadline  Duration            `yaml:"stopDeadline,omitempty" json:"stopDeadline,omitempty" doc:"Time allowed for a workload to stop (default 30s): in a failover, the best-effort stop of the lost site's workloads; in a reprotect or failback, the wait until nothing of a workload runs, past which the stop step pauses naming what still runs."`
	OnFailure     string              `yaml:"onFailure,omitempty" json:"onFailure,omitempty" doc:"What a step that fails for good does: pause (wait for the operator, default) or abort."`
	Approvals     []string            `yaml:"approvals,omitempty" json:"approvals,omitempty" doc:"Gates that wait for drctl approve: beforeFence, beforePromote, beforeStart, beforeDemote."`
	TestTimeLimit Duration            `yaml:"testTimeLimit,omitempty" json:"testTimeLimit,omitempty" doc:"How long a test recovery's workloads run on their copies before it cleans up without the operator's word (default 1h)."`
	PointsInTime  *PointsInTime       `yaml:"pointsInTime,omitempty" json:"pointsInTime,omitempty" doc:"Points in time: protection keeps snapshots of the replicas at the recovery site (the site that is not primary), cut on schedule and pruned by count or age."`
	Drills        *Drills             `yaml:"drills,omitempty" json:"drills,omitempty" doc:"How often each kind of test must succeed: past it without a success in the evidence store, the test is overdue (metric drover_test_overdue, alert DroverTestOverdue). See docs/guides/evidence.md."`
}

// Drills is how often a plan's tests must succeed. There is no default:
// a plan without it asks for none.
type Drills struct {
	Drill        Duration `yaml:"drill,omitempty" json:"drill,omitempty" doc:"A drill must succeed at least this often (e.g. 168h)."`
	TestRecovery Duration `yaml:"testRecovery,omitempty" json:"testRecovery,omitempty" doc:"A test recovery must succeed at least this often (e.g. 2160h)."`
}

// Every is how often the kind of test ("drill" or "test recovery") must
// succeed; zero when the plan does not say.
func (d *Drills) Every(kind string) time.Duration {
	if d == nil {
		return 0
	}
	switch kind {
	case "drill":
		return d.Drill.D()
	case "test recovery":
		return d.TestRecovery.D()
	}
	return 0
}

// PointsInTime is how protection keeps points in time: snapshots of every
// replica at the recovery site, a storage group's members cut together
// in one group snapshot, the loose volumes' snapshots taken together.
// There is no default: a plan without it keeps none, and a plan with it
// says how often and how many or how long.
type PointsInTime struct {
	Every   Duration `yaml:"every" json:"every" required:"true" doc:"How often protection cuts a point: at its first poll once this has passed since the last point (at least 1s)."`
	Keep    int      `yaml:"keep,omitempty" json:"keep,omitempty" doc:"How many points to keep: a new point prunes the oldest beyond this many (1 or more; give keep, keepFor or both)."`
	KeepFor Duration `yaml:"keepFor,omitempty" json:"keepFor,omitempty" doc:"How long to keep a point: a new point prunes those older than this (at least every; give keep, keepFor or both). With keep too, a point goes once either says so; the newest point is never pruned, nor each site's newest point in sync, nor a point held by a test recovery or failover."`
	Cut     string   `yaml:"cut,omitempty" json:"cut,omitempty" doc:"Where a point is cut: replicas (the default: snapshots of the replicas at the recovery site) or primary (snapshots at the primary, each made a volume whose replication ships it to the recovery site, for storage that cannot snapshot a replica, as ceph-csi cannot; a point is usable there once every copy has synced)."`
}

// The places a point in time is cut (PointsInTime.Cut).
const (
	CutReplicas = "replicas"
	CutPrimary  = "primary"
)

// Cuts are the values of policy.pointsInTime.cut.
var Cuts = []string{CutReplicas, CutPrimary}

// AtPrimary tells points cut at the primary and shipped to the recovery
// site as replicated copies.
func (pit *PointsInTime) AtPrimary() bool { return pit != nil && pit.Cut == CutPrimary }

// Retry is the back-off of storage and orchestrator calls.
type Retry struct {
	InitialInterval    Duration `yaml:"initialInterval,omitempty" json:"initialInterval,omitempty" doc:"First back-off (default 1s)."`
	MaximumInterval    Duration `yaml:"maximumInterval,omitempty" json:"maximumInterval,omitempty" doc:"Largest back-off (default 1m)."`
	BackoffCoefficient float64  `yaml:"backoffCoefficient,omitempty" json:"backoffCoefficient,omitempty" doc:"Growth of the back-off (default 2)."`
	MaximumAttempts    int      `yaml:"maximumAttempts,omitempty" json:"maximumAttempts,omitempty" doc:"Attempts before a step fails for good; 0 means bounded by timeLimit only."`
	TimeLimit          Duration `yaml:"timeLimit,omitempty" json:"timeLimit,omitempty" doc:"Total time for all attempts of one call (default 10m)."`
}

// Duration is a time.Duration written as "30s", "5m", "1h30m".
type Duration time.Duration

// D returns the duration as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats the duration as Go does ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalYAML writes the duration in its string form.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalText writes the duration in its string form (also for JSON).
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a duration in its string form.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	*d = v
	return err
}

// ParseDuration reads "30s", "5m", "1h30m", and "2d" for days.
func ParseDuration(s string) (Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok && n != "" && !strings.ContainsAny(n, "hmsuµn") {
		days, err := time.ParseDuration(n + "h")
		if err == nil {
			return Duration(days * 24), nil
		}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (e.g. 30s, 5m, 1h30m, 2d)", s)
	}
	return Duration(v), nil
}
