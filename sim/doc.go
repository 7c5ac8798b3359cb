// Package sim is a storage-site simulator that speaks CSI-Addons the way
// real replicated storage drivers do, so that Drover's demos, drills and
// tests run against real gRPC over real sockets.
//
// # What a site serves
//
// A Site serves identity.Identity, fence.FenceController and
// replication.Controller on a unix socket or TCP address (optionally TLS or
// mutual TLS), a block data path over HTTP (PUT/GET
// /v1/volumes/{vol}/blocks/{n}), the replication link its peer connects to
// (/v1/peer/* on the same port, admitted only with the pair's shared
// PeerToken), and a control API (state, faults, site and link down/up, power loss) that stays up
// while the site is down. cmd/drover-sim runs one or several sites per
// process.
//
// Beside CSI-Addons, a site serves the CSI spec's csi.v1 Identity,
// Controller and GroupController for test recoveries (csi.go):
// point-in-time snapshots of its copies (CreateSnapshot, and
// CreateVolumeGroupSnapshot, which cuts a group's volumes at one point),
// writable volumes created from them (CreateVolume; independent of the
// replica, on the same data path and behind the same fence, not
// replicated until EnableVolumeReplication names one: it then becomes a
// replicated volume of its own, primary there, whose copy the peer
// creates under the same id with the first sync, as RBD mirroring does
// for an image; made.go), ListSnapshots and the deletes. A replicated
// volume cannot be deleted through CSI, but for one made replicated here
// whose replication is off: its peer then drops the copy its first sync
// created while that copy is secondary (peer /v1/peer/drop), at once or,
// when the link is down, once it is back (siteFile.Dropped, told again
// each round). ReplicasUnchanged (check.go) compares two states of a
// site to show that its replicas were left alone.
//
// # The storage model
//
// The unit of replication is a volume group, or a volume that belongs to
// none. Each site holds a copy of every unit with a role (primary or
// secondary), a replication-enabled flag, a demoted flag and a resync
// state. Writes are accepted only by a primary copy; each gets a sequence
// number and the copy's epoch, and is persisted before it is acknowledged.
//
// A primary ships its changes to the peer every interval (the site's, or a
// unit's schedulingInterval parameter, in minutes of Config.ScheduleMinute),
// as snapshot-based mirroring does:
// GetVolumeReplicationInfo reports the point in time the peer holds
// (last_sync_time), how long shipping it took and how many bytes it moved,
// and a status (HEALTHY, DEGRADED when the link or the peer is down so the
// lag grows, ERROR on split-brain).
//
// Every promotion starts a new epoch; a copy's lineage records where each
// epoch forked. A copy that went past a fork (it took writes its peer never
// saw before the peer was promoted) has diverged: it is demoted with force
// and resynced with force, which discards its divergent writes and replaces
// its data with the primary's. Under the spec profile ResyncVolume without
// force refuses a diverged copy with FAILED_PRECONDITION and answers
// UNAVAILABLE while it cannot ask the peer whether the copy diverged; a
// copy that never diverged resyncs without force; ready=true comes once the
// full copy has arrived. A promotion without force needs the peer demoted and
// its final sync received; a demotion without force needs the peer
// reachable so that the final sync can ship. Errors follow the spec's
// tables: INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, ABORTED for a
// concurrent call on the same unit, UNIMPLEMENTED, UNAUTHENTICATED when
// configured secrets are missing from a fence or replication call (the
// identity calls carry no secrets and are always answered), UNKNOWN when
// the site cannot persist. Every RPC is idempotent.
//
// # Fencing
//
// The two sites of a pair form one fence domain: a fence set through either
// site applies to both, is pushed to the peer at once, exchanged on every
// round and adopted by a site that comes back before it serves I/O. The
// data path refuses reads and writes from any client whose source address
// falls in a fenced CIDR; clients bind to 127.0.0.2, 127.0.0.3, … to stand
// for the nodes of different sites. GetFenceClients reports the clients a
// site has served.
//
// # Driver profiles and breaks
//
// Config.Driver picks how a site answers where drivers differ: "spec" (the
// default) follows the CSI-Addons specs strictly; "ceph-csi" answers as
// ceph-csi's RBD driver at commit 52fcb7b does on real Ceph (its parameter
// validation, error codes, identity, capabilities, the RPCs it lacks or
// that panic, its volume ID format), each difference citing the ceph-csi
// function it is read from and where it was measured (profile.go,
// ceph.go). Its mirroring is RBD's snapshot mirroring as ceph-csi drives
// it: EnableVolumeReplication ships the image once; only PromoteVolume
// with a schedulingInterval adds the schedule that keeps snapshots
// coming; ResyncVolume answers ready=true only when both copies are
// non-primary and in sync, ready=false on a copy replaying a live
// primary, INTERNAL "no snapshot details" on one just demoted or
// split-brained, and with force re-creates a copy that is still the image
// a demotion stamped (UNAVAILABLE, then ABORTED or NOT_FOUND while it is
// re-created). Config.Breaks makes
// a site break one rule on purpose (a non-idempotent RPC, a wrong code,
// force ignored, a fence left in place), so that the conformance suite can
// be shown to catch it (breaks.go).
//
// # Faults, persistence, invariants
//
// FaultRule injects latency and error codes per RPC, by count or
// probability, at start-up or at run time (a latency the caller gives up
// on ends with it, or, Detached and under the ceph-csi profile, runs to
// its end holding the volume, as ceph-csi's calls do), or makes a fence
// call answer success without taking effect; Site.Down/Up and SetLink take a
// site or its link away and back, Site.PowerLoss takes it away as a power
// cut does (after Up it is a restarted site, whose peer's ceph-csi
// primaries answer without its mirror status for Config.MirrorRestart);
// Config.ScheduleRace makes a ceph-csi copy whose demotion spans a tick of
// its snapshot schedule primary again just after (as Ceph does), and a
// latency rule with a count delays only that many calls;
// SetReady makes Probe answer not ready
// while the site serves. State lives in a directory (site.json and one
// file per unit) written atomically, so a killed site restarts with
// every acknowledged write and role. Check verifies, over the sites'
// states, that no two primaries accepted writes at once, that no fenced
// client's write was accepted (an unfence counts only if a site of the
// pair made it, not one forged on its peer API), that the writes lost on a failover are
// exactly those acknowledged after the last completed sync, and that every
// copy's data is what its surviving writes say.
package sim
