// Package names is the one place for the names the worker, drctl and the
// workflows share: task queues, workflow ids, workflow types, and the
// names of queries, updates and signals. A name spelled twice drifts;
// spelled here, a rename is one edit.
package names

// Task queues.
const (
	// TaskQueue is the main worker's queue: the workflows, and the
	// activities of every site without a queue of its own.
	TaskQueue = "drover"
	// SiteTaskQueuePrefix starts the default queue of a site's own worker.
	SiteTaskQueuePrefix = "drover-site-"
)

// Deployment is the Worker Deployment the workflow worker's builds belong
// to: each build is one of its versions.
const Deployment = "drover"

// SiteTaskQueue is the default task queue of a site's own worker; a plan
// routes a site's calls there with sites[].taskQueue.
func SiteTaskQueue(site string) string { return SiteTaskQueuePrefix + site }

// Workflow id prefixes, each followed by the plan's name.
const (
	// ActionIDPrefix: the one DR action of a plan at a time (failover,
	// reprotect, failback, drill).
	ActionIDPrefix = "drover-action-"
	// ProtectIDPrefix: the plan's protection.
	ProtectIDPrefix = "drover-protect-"
	// RecordIDPrefix: the plan's durable record.
	RecordIDPrefix = "drover-record-"
	// VerifyIDPrefix: a comparison of the record with storage.
	VerifyIDPrefix = "drover-verify-"
	// SiteActionIDPrefix, followed by a site's name rather than a plan's:
	// the one site action (drctl failover --site) on that site at a time.
	SiteActionIDPrefix = "drover-site-action-"
	// TestRecoveryIDPrefix: a plan's test recovery, apart from its DR
	// actions so that a real failover never waits for a test.
	TestRecoveryIDPrefix = "drover-test-"
)

// ActionID is the workflow id of a plan's DR action.
func ActionID(plan string) string { return ActionIDPrefix + plan }

// ProtectID is the workflow id of a plan's protection.
func ProtectID(plan string) string { return ProtectIDPrefix + plan }

// RecordID is the workflow id of a plan's record.
func RecordID(plan string) string { return RecordIDPrefix + plan }

// VerifyID is the workflow id of a plan's verification.
func VerifyID(plan string) string { return VerifyIDPrefix + plan }

// IDPrefixes are every prefix above, longest first.
var IDPrefixes = []string{ProtectIDPrefix, ActionIDPrefix, RecordIDPrefix, VerifyIDPrefix, TestRecoveryIDPrefix}

// Workflow types.
const (
	Failover     = "Failover"
	Reprotect    = "Reprotect"
	Failback     = "Failback"
	Drill        = "Drill"
	Protect      = "Protect"
	GroupBatch   = "GroupBatch"
	PlanRecorder = "PlanRecorder"
	Verify       = "Verify"
	SiteFailover = "SiteFailover"
	TestRecovery = "TestRecovery"
	TestCleanup  = "TestCleanup"
)

// ActionTypes are the workflow types of DR actions.
var ActionTypes = []string{Failover, Reprotect, Failback, Drill}

// Queries, updates and signals.
const (
	QueryProgress     = "progress"
	UpdateResolve     = "resolve"
	UpdateApprove     = "approve"
	QueryProtect      = "protect"
	UpdateStopProtect = "stop"
	SignalRetarget    = "retarget"
	QueryRecord       = "record"
	SignalRecord      = "record"
	UpdatePlanVersion = "plan-version"
	UpdateHoldPoint   = "hold-point"
	UpdatePausePoints = "pause-points"
)

// Search attributes every Drover workflow carries, registered on the
// namespace (see docs/guides/deploy-nomad.md, step 3): the plan, the action (failover, reprotect,
// failback, drill, protect, record, verify) and the site it acts towards.
const (
	AttrPlan   = "DroverPlan"
	AttrAction = "DroverAction"
	AttrSite   = "DroverSite"
)

// SearchAttributes are the three, all of type Keyword.
var SearchAttributes = []string{AttrPlan, AttrAction, AttrSite}
