// Package activities holds Drover's Temporal activities: one per
// CSI-Addons storage RPC, the polling activities built on them, the table
// that turns gRPC codes into retry decisions, endpoint dialing and secret
// resolution.
//
// # The activities
//
// Storage is a struct of dependencies (a Dialer that keeps one gRPC
// connection per endpoint, a SecretResolver); its methods are the
// activities. Register it once on a worker and refer to the methods from
// workflows through a nil pointer:
//
//	var st *activities.Storage
//	ctx = workflow.WithActivityOptions(ctx, activities.CallOptions(plan, "west", activities.RPCPromoteVolume))
//	err := workflow.ExecuteActivity(ctx, st.PromoteVolume, in).Get(ctx, nil)
//
// The identity service: GetIdentity, GetCapabilities, Probe. The fence
// service: FenceClusterNetwork, UnfenceClusterNetwork, ListClusterFence,
// GetFenceClients. The replication service: EnableVolumeReplication,
// DisableVolumeReplication, PromoteVolume, DemoteVolume, ResyncVolume,
// GetVolumeReplicationInfo. Two polling activities wait on long work:
// ResyncUntilReady calls ResyncVolume until ready=true, and WaitForSync
// polls GetVolumeReplicationInfo on the primary until a sync newer than a
// given time has completed. Both heartbeat their PollProgress; an attempt
// that follows a crash or a retried error resumes from it.
//
// The CSI controller (csi.go), for test recoveries, through the site's
// storage.csi endpoint: CreateSnapshot, CreateVolumeGroupSnapshot (a
// group's volumes at one point in time), CreateVolume (a writable copy of
// a snapshot), DeleteVolume, DeleteSnapshot, DeleteVolumeGroupSnapshot.
// The caller names what it creates, so a retried create finds the first
// one's object; the deletes answer OK for what is gone. Their rows of the
// classification table come from the CSI spec's error tables; a delete
// refused as "in use" (FAILED_PRECONDITION) is retried under the type
// InUse, so that FailedPrecondition stays final for every RPC. At a
// Nomad site, the volumes Nomad knows go through Nomad's CSI API instead,
// for a test recovery's copies and a failover to a point's restored
// volumes (Workloads: FindNomadVolumes, NomadSnapshot, NomadCopy,
// NomadDeleteCopy, NomadDeleteSnapshot), and a reprotect registers the
// copies the storage made of the restored volumes at the returned site
// (NomadRegister), classified as Nomad's answers.
//
// Two activities batch one site's calls for a large plan.
// SurveyReplication makes Protect's GetVolumeReplicationInfo calls of a
// poll round. ReplicateBatch makes one of the single calls (BatchRPCs:
// promote, demote, enable, disable) on many groups, at most the plan's
// parallelism at a time, one attempt per group classified by the same
// table, and reports each group's outcome (done, failed with the table's
// retry decision, or not started when it returns early to report
// progress); it heartbeats the groups done, and an attempt after a crash
// skips them. BatchInputFor builds its input from a plan.
//
// A promotion, demotion, enable or disable that a local attempt gives up
// on (the workflow cuts local attempts at a second) runs on to its own
// deadline as a flight of the worker (flight.go), and the next attempt of
// the same call of the same workflow run on this worker takes its
// outcome instead of making the call again: real drivers go on with a
// call its caller gave up on, and a second call costs the storage a
// second operation.
//
// Inputs and results are small plain structs. An Endpoint carries the
// address (unix:///path or host:port), TLS file paths, the secret
// reference, the plugin parameters and the call's deadline: names only,
// never a secret value. EndpointFor and ReplicationInputs build them from a
// plan. A replication call always sends replication_source and, for a
// single volume, volume_id as well, so drivers of either generation
// understand it.
//
// # Errors and retries
//
// Classify looks up what the caller does with a (RPC, gRPC code) pair, from
// the error tables of the fence and replication specs: ABORTED,
// UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED and, for replication
// RPCs, NOT_FOUND are retried with exponential back-off; INVALID_ARGUMENT,
// UNIMPLEMENTED, UNAUTHENTICATED, UNKNOWN and any code no table names are
// final; FAILED_PRECONDITION goes back to the workflow at once (it decides:
// wait, force, roll back); DisableVolumeReplication answering NOT_FOUND is
// done. Table lists every row; the tests walk it against the simulator.
//
// Every failure is a Temporal application error whose type names the
// condition (ErrOperationPending, ErrFailedPrecondition, ErrTLS, …), whose
// message names the RPC, the site, the volume or group and the plugin's own
// message, and whose details are a Failure (see FailureOf). A TLS handshake
// failure, an unusable endpoint and an unresolvable secret are final too.
//
// CallOptions builds the activity options of one call from the plan: the
// site's task queue, the RPC's deadline plus CallGrace per attempt, the
// plan's time limit over all attempts and its back-off, and the final
// error types. PollOptions does the same for the polling activities, with a
// heartbeat timeout. Workflows use these and nothing else.
//
// # Orchestrator activities
//
// Workloads holds StopWorkload, WaitStopped, StartWorkload, WaitHealthy,
// DescribeWorkload and CheckRestored (a failover to a point in time, or a
// reprotect of its restored volumes, reading a Nomad job as it will
// start it on them, changing nothing), which reach a site's CO through the orchestrators
// package (Nomad or exec hooks). A temporary CO error (unreachable, busy,
// a scale blocked by a deployment, a hook's try-again exit code) is
// ErrWorkloadRetry and retried with the plan's back-off; anything else is
// final (ErrWorkloadError). WaitHealthy polls with heartbeats and ends
// with ErrWorkloadUnhealthy as soon as waiting is pointless, or with
// ErrHealthTimeout after the workload's healthTimeout. WaitStopped waits,
// heartbeating, until nothing of a stopped workload runs, and ends with
// ErrStillRunning, naming what runs, past the plan's stopDeadline.
// WorkloadOptions, HealthOptions and StopWaitOptions build their activity
// options; WorkloadInputFor their
// inputs. The Nomad ACL token is a secret reference resolved on the worker.
//
// # Secrets
//
// A plan names a secret (an environment variable prefix, or a file of
// key=value lines or YAML); EnvFileSecrets resolves it on the worker at
// call time. Values go into the request and nowhere else: not into inputs,
// results, heartbeats, logs or errors. A plugin message that quotes a
// secret value is redacted before it becomes an error.
//
// Exec hooks get only the environment their plan entry names (env and
// secretEnv), never the worker's. Every value EnvFileSecrets resolves is
// remembered for the worker's life, and RedactResolved replaces all of
// them in whatever leaves a workload activity: hook output, CO messages,
// errors.
package activities
