// Package conformance checks a CSI-Addons endpoint against the identity,
// fence and replication specs, as csi-sanity does for CSI: `drctl
// conformance` runs it against a driver vendor's endpoint, and Drover's
// tests run it against drover-sim in both of its driver profiles.
//
// # What it checks
//
//   - identity: Probe, GetIdentity and GetCapabilities answer; every RPC of
//     an advertised capability answers (anything but UNIMPLEMENTED), and
//     every RPC of one not advertised answers UNIMPLEMENTED.
//   - replication, for a scratch volume and a scratch volume group on a pair
//     of peered endpoints (A holds the primary copies; the source exists on
//     A with replication disabled, B's copy may appear only once A's
//     replication is on): enable twice, info before and after the first
//     sync (a last sync time neither in the future nor before the enable),
//     the refusals the spec's error tables list that can be provoked
//     without harm (an unknown ID on every replication RPC, in the
//     driver's own ID format where the scratch ID is ceph-csi's; an empty
//     source, info on a secondary, resync of a primary, promote without
//     force while the peer is primary, and while it is also unreachable),
//     with the link cut an unforced promotion of the peer refused while
//     the demoted copy's final sync cannot land, demote twice, a planned
//     promotion twice, resync until the copy follows, a forced
//     promotion while the peer is primary (a split brain), a resync without force that must not discard the diverged
//     copy (a refusal counts only from a copy read back as secondary, and
//     not the refusal a primary's resync got), with both copies demoted
//     an unforced promotion of the diverged copy refused, with the link
//     cut a forced resync never ready, forced demote and resync back to
//     the starting roles, GetReplicationDestinationInfo when advertised (a
//     group's map holds two or more volumes), and disable twice
//     (NOT_FOUND counts as done). Every call that changes a role or
//     disables replication is read back from the storage and judged by
//     what it did.
//   - fence: fence twice, list, get clients, unfence twice on a
//     documentation CIDR (default 192.0.2.1/32, TEST-NET-1), fence and
//     unfence beside it two blocks of other lengths in one call each
//     (DefaultExtraCIDRs, TEST-NET-2), and the refusal of an invalid CIDR
//     and of an empty list. Every fence found before the run must still
//     be listed after each call; the clean-up fences again any the driver
//     lifted and unfences any it fenced otherwise than asked, and says so.
//
// Each check names the spec section it enforces and runs under a deadline
// of its own. Every planned check is in the report: when a step the later
// ones need fails, they are listed as skipped with the reason. Checks that
// need what no CSI-Addons call can do (cut the replication link, write to a
// copy) run only with a hook command for it, and otherwise skip saying so. The scratch resources are put back as they were found: the
// replication checks end with both sources disabled and A's copies primary,
// the fence checks with the fences as found; when a run is cut short (a
// failed step, Ctrl-C) a clean-up with its own deadline does the same, in
// an order that leaves no split brain and no orphan copy: B demoted, A
// primary (forced only if B's demotion never reaches it), B resynced to
// follow A (forced only if its copy diverged), A's replication disabled
// before B's. Each step is read back and reported as the storage answers
// it; replication left on is reported with the roles read back.
//
// # A driver that hangs
//
// Config.Progress hears, while a call goes unanswered, which call of
// which check waits and how long its deadline has left. A check whose
// call the driver sat on for most of its deadline fails saying the driver
// hangs, and the checks after it are listed as not run: a driver that
// hangs one call (ceph-csi with a Ceph user its cluster refuses) hangs
// them all. Neither such a driver nor one that left the last call of an
// interrupted run hanging is asked to clean up, since its clean-up calls
// would hang too: the clean-up says what may be left. Config.Abandon ends
// a clean-up under way (a second Ctrl-C).
//
// # Recorded driver deviations
//
// Where a driver answers otherwise than the spec and the answer is a
// recorded deviation of that driver (activities.Deviations: the same table
// Drover's own calls read, each row with the driver's code it is read from
// and where it was measured), the check passes and names the row. Any
// other code fails the check.
package conformance
