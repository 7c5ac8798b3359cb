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
//     of peered endpoints (A holds the primary copies, B the secondary):
//     enable twice, info before and after the first sync, the refusals the
//     spec's error tables list that can be provoked without harm (unknown
//     ID, empty source, info on a secondary, resync of a primary, promote
//     without force while the peer is primary, promote of a source not
//     replicated), demote twice, a planned promotion twice, resync until
//     ready, a forced promotion while the peer is primary, forced demote
//     and resync back to the starting roles, GetReplicationDestinationInfo
//     when advertised, and disable twice (NOT_FOUND counts as done).
//   - fence: fence twice, list, get clients, unfence twice on a
//     documentation CIDR (default 192.0.2.1/32, TEST-NET-1), and the
//     refusal of an invalid CIDR and of an empty list.
//
// Each check names the spec section it enforces and runs under a deadline
// of its own. The scratch resources are put back as they were found: the
// replication checks end with both sources disabled and A's copies primary,
// the fence checks with the CIDR unfenced; when a run is cut short (a
// failed step, Ctrl-C) a clean-up with its own deadline does the same.
//
// # Known driver deviations
//
// Where a driver's code answers a refusal with another code than the spec's
// table and Drover handles both alike (both are final refusals that change
// nothing), the check passes and says so; the table of such deviations
// names the driver and the function of its code the deviation is read from.
// Any other code fails the check.
package conformance
