// Package e2e proves Drover end to end, the way an operator runs it: the
// real Temporal dev server with a file database, the worker and drctl
// binaries, each simulated storage site a drover-sim process, and an
// application writing on each site's client address. Its tests are the
// proof; the package has no code of its own.
//
// TestScenarios walks one stack through what a DR tool must get right:
// plans with mistakes refused with exit code 2, a drill that leaves the
// storage state files byte for byte as they were, an unplanned failover
// while the applications write (and a second failover refused while it
// runs), the reprotect of the returned site, and a failback that loses no
// acknowledged write. The simulator's invariant checker runs after each.
//
// TestCephCSICycle runs drctl conformance and then one failover,
// reprotect and failback on sites that answer as ceph-csi does
// (drover-sim --driver ceph-csi): no ListClusterFence, its codes and its
// parameter validation, with a plan of values ceph-csi accepts.
//
// TestTestRecoveryWhileWriting runs a test recovery at west while the
// application writes on east, with the worker killed mid-test; the
// replicas stay as they were and nothing is left.
//
// TestPointInTimeStory writes damage at T while protection cuts points
// in time at west, lists them, and runs two test recoveries from two
// points: the newest holds the damage, the one at T the clean data and
// no write made after T; then it loses east and fails over to the clean
// point: the application runs at west on volumes restored from it, the
// promoted replicas keep the damage, and a failback is refused; with
// east back, the reprotect protects the restored volumes and the
// failback moves them to east with every block the point held and
// every write made at west since.
//
// TestSiteFailoverOfThreePlans loses east under three signed plans in
// two tiers and fails them all over as one site action (one fence, tier
// 1 after tier 0), then renders its report in Markdown and HTML.
//
// TestChaos repeats failover, reprotect and failback under disruption
// from a seeded random source: kill -9 of the worker at random points of
// an action and a restart, a restart of the Temporal dev server in the
// middle of an action, a storage site taken down and brought back, bursts
// of ABORTED, UNAVAILABLE and DEADLINE_EXCEEDED, and now and then a fault
// that does not heal, which must pause the action for the operator. Every
// action must end completed and every invariant must hold. It prints the
// seed and the counts; DROVER_CHAOS_SEED replays a run and
// DROVER_CHAOS_KILLS sets how many kills land inside actions (default 20).
//
// TestUpgrade, which make e2e-upgrade runs (it skips without the
// previous build, DROVER_E2E_UPGRADE_FROM and DROVER_E2E_UPGRADE_REV),
// upgrades the worker from the build of an earlier commit to this
// checkout's while a protected plan's failover waits at its gate, and
// rolls back while a failback waits at its gate: each action ends on the
// build it started on, Protect and the record move to the build made
// current, a new action runs there, and a build's worker stops only once
// Temporal lists nothing running on it and calls it drained.
//
// TestSitesAsNetworks (make e2e-sites) makes the sites networks: a
// network namespace per site and one for the WAN (veths into it, joined
// by a repeater in the test that holds each frame 20 ms, checked by a
// measured round trip), and in each site its own
// PostgreSQL, Temporal cluster (from deploy/temporal's production
// configuration, the two joined for multi-cluster replication, the
// drover namespace global and active at east, the search attributes
// registered once, at east), storage and worker. East is cut off while
// it writes; drctl failover at west is refused naming the unreachable
// active cluster, then takes the namespace over and fails over; the
// zombie east runs on; after the heal east's cluster names west active,
// east's worker pauses, the protection's history is west's, east's
// clients are fenced on west's storage, reprotect and failback lose no
// write west acknowledged, and drctl at either site tells the same.
// The only invariant violations allowed are the partition's own: east's
// storage taking its own clients' writes after west's promotion, before
// it could learn of the fence. It needs root and ip netns, and skips
// unless DROVER_E2E_SITES names the directory of the Temporal server and
// its SQL tool. TestSitesWithTemporalOutside runs the same cycle with
// the other layout: the one Temporal cluster in a third namespace on the
// WAN, polled by both sites' workers; the failover needs no takeover.
//
// The tests need the Temporal CLI (make temporal); make test builds it.
// make e2e-sql runs TestScenarios on the production path instead: the
// Temporal server built from its Go module on PostgreSQL, its schemas,
// namespace and search attributes set up as docs/guides/deploy-nomad.md ("Running it
// for real") says (DROVER_E2E_SQL names the directory of the server and its
// SQL tool).
package e2e
