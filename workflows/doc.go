// Package workflows holds Drover's DR actions as Temporal workflows, one
// file per action, each readable top to bottom.
//
// In place:
//
//   - Failover (failover.go): preflight of the surviving site, best-effort
//     stop of the lost site's workloads, fence and verify, forced promotion
//     of every volume group by priority with bounded parallelism, start of
//     the workloads by priority until healthy; the result has the RTO, the
//     RPO estimate and the timeline. With a point in time (PointAt), the
//     workloads start on volumes made from the point (below).
//
//   - Reprotect (reprotect.go): stop the returned site's workloads, demote
//     its stale primaries with force, resync until ready, wait for a sync
//     newer than the resync start, unfence.
//
//   - The steps more than one action runs (steps.go): the checks before
//     an action (checkSites, preflight, fresh), the per-group storage
//     calls behind GroupOp.do (replicate, resync, waitSync,
//     promoteAfterFinalSync), and startAll, stopAll and unfence.
//
//   - Failback (failback.go): planned move with no data loss: preflight
//     both sites and require fresh healthy replication, stop, demote
//     without force, read the roles back once the demotion settled (a
//     copy primary again, as Ceph's snapshot schedule makes one taken
//     across the demotion, is demoted again: redemote.go), promote
//     without force once the final sync landed, unfence, start, resync
//     the old primary until the new one shipped it a sync (a copy found
//     primary again there is demoted again once the new primary's
//     storage says so and nothing of the plan runs); a promotion that
//     fails for good rolls everything back.
//
//   - Drill (drill.go): every check of a failover or failback without a
//     state change (storage ready, secrets accepted, fencing possible,
//     replication fresh, workloads and their CSI volumes present), and
//     the steps the real action would take.
//
//   - Scheduled (scheduled.go): what a schedule (drctl schedule, on
//     Temporal Schedules) starts each time: the plan's drill, or its test
//     recovery run unattended (TestRecoveryInput.Unattended: a step that
//     fails for good fails it, and its workloads run for a time limit at
//     most), as a child under the plan's own id, so that a plan busy with
//     another action fails the scheduled run instead of running beside it.
//
//   - Protect (protect.go): long-running per plan (ProtectID); enables
//     replication on the primary, polls each group's last sync, lag and
//     status, marks the plan out of RPO past the target, records each
//     site's clients, and continues as new to keep its history small; a
//     round the primary does not answer is watched (the lag grows from
//     the last sync known, the primary is reported unreachable); an
//     answer that is no sync (NOT_FOUND, FAILED_PRECONDITION, a recorded
//     deviation read as recovering) is the primary answering; each group
//     out of RPO says which side stopped (GroupHealth.Why: the primary,
//     or the replica that takes no syncs while the primary answers);
//     ReadProtect gives a failover the recorded clients and last sync.
//     When a failover records its new primary (with the site it lost),
//     the record signals Protect (a retarget naming the lost site), so
//     that a small failover still runs in one workflow task: Protect
//     goes on unprotected on the new primary, polling no replication
//     and not the lost site, until a reprotect retargets it to the same
//     primary. Protect takes a retarget only with a worker's seal made
//     for the plan as a retarget (proof.go), once, and keeps what it
//     refused in its state. It reports the time left to its plan's
//     signature (MetricSignatureEnds) and ends at its first poll past
//     that end, saying so (ProtectState.Ended, the record,
//     MetricProtectionEnded), not silently at a later check.
//
//   - Points in time (points.go): with policy.pointsInTime, Protect cuts
//     a point at the site that is not primary each `every` (a group
//     snapshot per storage group, the loose volumes' snapshots together,
//     through the CSI controller calls of the test recovery), records
//     with it the last sync the primary reported before the cut and
//     whether each replica was in sync, and after each cut deletes the
//     points past keep or keepFor: never the newest, never a held one
//     (UpdateHoldPoint), never a site's newest point in sync (kept
//     beyond the policy, saying so), a failed cut's with the next cut. Points,
//     holds and prunes go to the plan's record; a protection started
//     anew takes over the record's points, and never points a state
//     given at its start names. With cut: primary, a point is cut at
//     the primary instead, each snapshot made a volume whose replication
//     is enabled (copyOut), and it is usable at the recovery site once
//     every copy reports a sync (syncPoints); its deletion turns each
//     copy's replication off and deletes it, never a volume the plan
//     acts on (deleteCopies). Only plans with the policy take this
//     path. A failback pauses the points before it demotes
//     (pausepoints.go, UpdatePausePoints, sealed): protection starts no
//     call for a point (a gate in call) until the failback's retarget,
//     or until it finds no run of the plan's action running and the
//     record naming its primary as the plan's (PauseEnded), and the
//     failback's step ends once the calls under way have. A test recovery from a point (pointuse.go, TestRecovery's
//     PointAt) names a time, and the worker picks the point from the
//     running protection's state or the record (HoldPoint): it holds
//     it under its run's name (ActionHolder), with the worker's seal,
//     which protection requires of such holds and releases, copies the
//     point's snapshots, and its cleanup deletes the copies, not the
//     snapshots, and releases the hold. A failover to a point
//     (pointfailover.go, FailoverInput's PointAt) holds its point the
//     same way after the preflight, before any side effect (a time with
//     no point ends it there, unpaused), promotes as always, then makes
//     one volume per point snapshot at To (KindRestore, through the CSI
//     controller, named by the run before each call) and starts the
//     workloads with them in DROVER_VOLUME_<VOLUME> and the point in
//     DROVER_POINT; it keeps the promoted replicas and its hold, and
//     notes the restored volumes in the record (RecordChange's
//     Restored, ended by the next primary an action records). At a
//     Nomad site it first, before the hold, finds the Nomad CSI volumes
//     of the plan's volumes and reads each job as it would start it
//     (CheckRestored): a job mounting a CSI volume the point does not
//     restore ends it there. A volume Nomad knows is restored through
//     Nomad's CSI API (NomadCopy, as Nomad volume VOLUME-pit-RUN8), and
//     the jobs start with their CSI volume sources on the restored
//     Nomad volumes (plans.NomadRestore); the record's note names them
//     (RestoredEntry.Nomad). A reprotect then (replaced.go) makes them
//     the protected ones: where Nomad runs the workloads it first, before
//     anything changes, finds the returned site's Nomad volumes of the
//     replicas, names the Nomad volume each copy will be registered as
//     (ReprotectResult.Registered) and reads every job of both sites as
//     it will start on the stand-ins (CheckRestored, KindCheckStandIns:
//     a refusal ends it unpaused); it demotes the returned site's copies
//     of the replicas with force and leaves them, enables replication on
//     the restored volumes (whose copies the returned site's storage
//     creates), waits for a sync of each, registers the copies with the
//     returned site's Nomad (NomadRegister, KindRegister) and records
//     which volume stands in for each of the plan's, with its Nomad
//     volume per site (RecordChange's Replaced, StandIn.Nomad). Every
//     workflow that acts on volumes reads that from the record once the
//     plan's signature has checked (trust: in the record's answer to the
//     plan's version, else with ViewRecord) and acts on the plan with
//     those volumes (replacedPlan), its hooks told them as
//     DROVER_VOLUME_<NAME> and its Nomad jobs started on the stand-ins'
//     Nomad volumes at each site (standInJobs, as plans.NomadRestore,
//     whatever action starts them; a test recovery's copies and a
//     failover to a later point compose with it); protection is given
//     the plan as signed and reads the record at each run. Failback
//     refuses a plan that runs on restored volumes no reprotect has
//     protected, and reads To's Nomad jobs on the stand-ins before it
//     stops or demotes anything (checkStandInJobs, unpaused).
//
//   - PlanRecorder (record.go): the plan's durable record (RecordID), a
//     long-lived workflow continued as new every few hundred changes:
//     primary site, what is fenced (CIDRs, through which site's storage,
//     by which run), the last action and its outcome, protection and its
//     lag, the newest plan version accepted, what it refused, and the
//     plan's points in time with the latest pruned, the volumes a
//     failover to a point restored, while the plan runs on them, and
//     the volumes that stand in for the plan's once a reprotect made
//     those the protected ones, with the replicas they replaced.
//     Actions send it their changes (a failover's fence inside the fence
//     step, before any promotion), each sealed by the worker with its
//     record key (proof.go): the record checks each seal in a local
//     activity and refuses, and keeps, any change or start without a
//     valid, fresh, unseen seal. ReadRecord reads it. A new run takes
//     over the last run a Drover worker made under its ID (takeover.go);
//     where runs are listed and none can be taken over, or none is left
//     while the plan's action or protection is listed as ended, it takes
//     nothing and refuses every plan version signed before it found so
//     (RecordUnproven), until the plan is signed again.
//
//   - Verify (verify.go): compares a record with what storage reports
//     (ListClusterFence on each site, replication on the recorded
//     primary) and names each drift; it changes nothing.
//
//   - TestRecovery (testrecovery.go): the plan's workloads brought up at
//     a site on point-in-time copies of its replicas (CSI snapshots and
//     volumes made from them), in isolation, then cleaned away; under
//     TestRecoveryID, never fencing, promoting or demoting, writing
//     nothing to the record; the cleanup runs in a disconnected context
//     whether the test ends, fails or is cancelled, and asks again by
//     name for what a create without an answer may have made. Its
//     QueryTestCopies names what it made; TestCleanup (same file, same
//     id) does the cleanup for a run that ended without one, deleting
//     what that run reports it made (read by the worker: RunReader),
//     never what its own input names, and only with a plan that names
//     the storage endpoint the run used for its site.
//
//   - SiteFailover (site.go): a lost site's plans failed over as one site
//     action (SiteActionID, one per site at a time): every plan's
//     signature checked first (Parallelism checks at a time, the first
//     alone), one fence per storage system of the
//     surviving site for the union of the CIDRs of the plans not running
//     an action of their own (RunReader.RunningActions; verified), then
//     each plan's own Failover as a child under the plan's action id,
//     tier by tier (metadata.tier), with SiteFence telling it what is
//     fenced already (nothing, where the operator skipped the site
//     fence or its verification). A plan running another action is reported busy,
//     with that action (RunReader.RunningAction); a tier with a plan that
//     did not complete pauses the site action. A site action that leaves
//     plans behind ends partial (StatePartial, SiteFailoverResult.LeftBehind),
//     each such plan with the command that recovers it; a plan's RPO is
//     the site action's start minus its last sync before the loss.
//     With Action reprotect, failback or drill it runs that action of
//     each plan instead (drctl prepares each plan's input), without the
//     site fence; a site drill's failed checks are outcomes, not pauses.
//
// An action that runs to its end with steps the operator skipped ends
// incomplete (StateIncomplete), not completed: each skipped step says
// what it left undone (Step.Undone, SkipMeans). After a skipped
// promotion, a workload starts only on copies its site's storage says
// are primary, unless the operator retries its start with --override.
//
// Every workflow carries the search attributes DroverPlan, DroverAction
// and DroverSite (Attributes), set at start and passed to children; on a
// namespace without them the workflows start without them.
//
// Plans arrive with their defaults filled (plans.ApplyDefaults, run by
// plans.Parse; a signature covers that effective plan): workflow code
// reads the policy as it is and applies no default of its own but
// policy.testTimeLimit's (DefaultTestTimeLimit), which came after
// signatures and stays out of what they cover, so that earlier ones
// still verify; drctl plan show prints it.
//
// Trusted plans (trust.go, invariant 9): every action, Protect and Verify
// first run the VerifyPlan local activity, which checks the plan's
// signature (Origin.Signature, plans.Sign) against the keys the worker
// trusts, and end with a non-retryable UntrustedPlan error when it fails,
// before any storage call or hook. A signed plan is then presented to
// the plan's record (AcceptPlanVersion, an update-with-start sealed by
// the worker): the record refuses a version of other content signed no
// later than the newest it accepted, one update at a time, and the
// action ends with UntrustedPlan. Each workflow sets its own search
// attributes and memo (who started it) when its starter did not, so a
// refused one shows under its plan. GroupBatch runs only as a child.
// A failover whose record does not answer (a workflow that is not
// Drover's record at its ID) goes on only with the operator's reason
// (Origin.RecordOverride, drctl failover --override), its version
// checked against the record's last Drover run's history; it keeps its
// changes, and RecordLater, its child, hands them to the record once
// one of Drover's answers (recordlater.go).
// Reprotect and Failback ask the storage of the site that must hold the
// primary copies before they demote anything (holdsPrimary,
// direction.go), whatever the record says.
// Origin.By records who started the action; approvals and resolutions
// record who gave them (Step.By).
//
// One action per plan: Start runs every action of a plan under one
// workflow id (ActionID) with the conflict policy Fail, and refuses a
// second with a *BusyError naming the running action.
//
// Versioning: a change of what a workflow does is a patch branch
// (workflow.GetVersion, its change ID a named constant beside the code
// it guards), since Protect and PlanRecorder run on across builds and
// the workers of a global namespace run unversioned, so a run may meet a
// build newer than the one it started on. testdata/ holds one history per
// workflow type and shape, recorded from the current code by `make
// histories` (the dev-server tests with DROVER_RECORD_HISTORIES=1): each
// plan action with a small plan and with one that fans out in batches, a
// GroupBatch child, Protect (and one that keeps points in time), the
// plan's record, Verify, a site failover
// and a Failover it runs as its child, a test recovery and its cleanup,
// a reprotect of restored volumes and a release (replaced.go), and a
// failover run without its record with its RecordLater hand-over.
// TestReplay replays them against the code and fails on a change that
// would break a running workflow, and when a registered workflow type
// has no history. A change of behaviour made on purpose is recorded again
// with `make histories`; the runs of the old code finish on the worker
// build they started on (Worker Versioning: Register pins every workflow
// but Protect and PlanRecorder, which auto-upgrade and whose histories
// from before a change stay in testdata/upgrade/ until it retires).
//
// Stop means stopped: Reprotect and Failback stop the old primary's
// workloads tier by tier, highest priority number first, and a workload's
// stop step ends only when nothing of it runs on the site (WaitStopped);
// no volume is demoted before. Past the plan's stopDeadline the step
// pauses, naming what still runs; skipping it needs an override. The
// failover's stop of a lost site stays best effort: the fence protects
// the data there.
//
// Reprotect and Failback end by protecting the plan from its new primary:
// they start Protect (a child that outlives them) or signal the running
// one to retarget, with the retarget sealed by the worker.
//
// Scale and speed (calls.go, groups.go):
//   - a single storage call (rpcCall) makes its attempts itself
//     (retried): the first as a local activity on the workflow's own
//     worker, cut at localBudget (1 s) so that no query waits longer, then
//     regular activities of one attempt each with the plan's back-off (a
//     workflow timer) and what is left of its time limit; the running
//     step counts the failed attempts (Step.Retries) and shows the last
//     error and a note. A driver may go on with a call the cut local
//     attempt gave up on (ceph-csi does) and answer the next ones ABORTED
//     while it runs: until that call's deadline such an answer is taken
//     as its own, and the next attempt comes after ownPendingPoll (500
//     ms), not after the back-off, single calls and batches alike. With
//     a site task queue every attempt is a regular
//     activity. Workload starts retry the same way, their first attempt
//     local too (a start hook cut at one second runs again as a regular
//     activity, as a retry would), and a health wait
//     returns with why it waits (the step's note) and goes on; its first
//     check is a local activity that returns at once, so a workload
//     healthy at once costs no turn through the server. The failover's
//     best-effort stop of a lost site's workloads makes its attempts the
//     same way, within the stop deadline. A local activity's answer
//     reaches the history only with the task that ran it: a failover's
//     and a failback's checks end their task (settle, a no-op regular
//     activity: a timer, however short, fires about a second late)
//     before the first side effect, so that a worker lost after a
//     promotion or demotion never leaves the next one to ask them again;
//   - a step's call on a site's own task queue (calls.go, sitewait.go)
//     is watched: while it sits there unstarted past siteWaitAfter (the
//     site's worker cut off from Temporal), the step stays running,
//     marked WaitsForWorker, its note naming the site, the queue and the
//     workers that last polled it (RunReader.SiteQueueWait, a local
//     activity on the workflows' worker, asks Temporal), and it goes on
//     by itself when a worker takes the call. A single call's attempt
//     on a site's queue waits there for a worker without a time limit,
//     and that wait does not count toward the plan's time limit, but
//     for the failover's best-effort stop of a lost site (queueBound).
//     Protect's calls are not watched;
//   - an action's changes to the plan's record (its start, a fence, the
//     primary, an unfence) go aside (record.go): sent from goroutines of
//     their own while the action goes on; the end goes aside last, and
//     the action waits once for them all. One goroutine sends them in
//     order: a change waits up to a second (less once the action
//     settles) and goes with those made meanwhile as one signal, the
//     first carrying the rest (More), so an action whose steps run in
//     one workflow task signals its record once. The worker sends that
//     signal, in a local activity (RecordSender, registered by the worker
//     that runs the workflows), so that it is taken within the task: a
//     small action runs in one workflow task. Without a record yet, or
//     without the activity, the workflow sends it. The record keeps a run's
//     end over a start that arrives after it (a change the worker could
//     not send and the workflow sent apart); a change the record did not
//     take is sent again as a step that pauses like any other. Polls that
//     heartbeat and all of Protect's calls stay regular activities that
//     Temporal retries; Protect polls in batched SurveyReplication
//     activities;
//   - a plan of more than GroupsPerChild groups fans out. Its single
//     calls on groups (promote, demote, enable, disable) run as one
//     ReplicateBatch activity per priority and one step per priority: the
//     activity keeps policy.parallelism calls in flight, makes one
//     attempt per group and returns every few seconds with the groups
//     done (the step's note), and the step retries the groups the
//     classification table lets it retry after the plan's back-off,
//     showing each failed round; a crashed worker's next attempt skips
//     the groups its heartbeat lists as done. On the workflow's own
//     worker the first attempt is a local activity that starts calls for
//     700 ms (localBatchReport): a batch done by then costs no turn
//     through the server, and what it left goes on as regular
//     activities. The operations that poll
//     (resync, wait for a sync, freshness checks, the failback's final
//     promotion) go to GroupBatch children of up to 100 groups, one step
//     per batch. Either way, a batch that failed on some groups pauses and
//     its retry runs only those.
//     A child's input names its operation by an identifier (OpKind),
//     the steps by its Text.
//
// Every action shares the bookkeeping in run.go:
//   - the "progress" query answers the timeline: each step's ID, name,
//     state, attempts, start and end, last error and output. The ID
//     (stepids.go) is the step's kind and subjects ("fence/east",
//     "start/west/web"), stable across releases; the name is display
//     text, written next to it in one place;
//   - a step that fails for good (after its activities' own retries)
//     pauses and waits for a "resolve" update (retry, skip or abort) that
//     names the step by its ID (or its name, as decisions recorded before
//     IDs did), or
//     ends the action when the plan's policy is onFailure: abort; skipping
//     a guard step (a fence a forced promotion relies on) needs an
//     explicit override;
//   - approval gates named in the plan wait for an "approve" update.
//
// Workflows call storage and orchestrator activities only with the options
// the activities package builds (activities.CallOptions and friends), so
// the retry behaviour of every call follows the specs' error tables.
package workflows
