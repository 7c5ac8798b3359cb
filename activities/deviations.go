package activities

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drover-dr/drover/csiaddons/identity"
)

// Deviation is a way a real driver answers a call otherwise than the
// CSI-Addons spec, read from the driver's code and measured against the
// driver itself. Drover reads such an answer as the spec's code for the
// same condition (Means), and only when both hold: the endpoint that
// answered names itself as the driver (GetIdentity on the same
// connection), and the answer is the driver's own (the code and the
// words of Message). A server that claims the driver's name without its
// behaviour gains nothing, and none that has the behaviour gains more
// than it could by answering Means itself: every Means below is an
// answer any server may give.
type Deviation struct {
	// ID names the deviation in logs, reports and the conformance table.
	ID string
	// Driver is the name the driver reports (GetIdentity); a name ending
	// in "."+Driver matches too (Rook prefixes its namespace).
	Driver string
	// Versions says which versions of the driver it was read from and
	// measured on, and where it changes.
	Versions string
	RPC      string
	Code     codes.Code
	// Message matches the driver's own words for the condition.
	Message *regexp.Regexp
	// Means is the spec's code for the same condition.
	Means codes.Code
	// Classify: Drover's calls read the answer as Means. Without it the
	// row only excuses the code in the conformance suite, where Drover
	// handles both codes alike (both final refusals that changed nothing).
	Classify bool
	// Source is where in the driver's code the answer comes from.
	Source string
	// Measured is where the answer was seen.
	Measured string
}

// The ceph-csi releases the rows below were read from and measured on.
const (
	cephCSIName     = "rbd.csi.ceph.com"
	cephCSIVersions = "ceph-csi 3.12 (commit 52fcb7b, 2024-10-22) and earlier"
	cephMeasured    = "make e2e-ceph: ceph-csi 52fcb7b on Ceph 16.2.15"
)

// Deviations are the recorded deviations, by driver. Drover's calls read a
// row's code as Means only with Classify; the conformance suite
// (internal/conformance) reads this same table, where every row excuses
// its code for the check that wants Means.
var Deviations = []Deviation{
	{
		ID: "ceph-csi/list-fence-panics", Driver: cephCSIName, Versions: cephCSIVersions,
		RPC: RPCListClusterFence, Code: codes.Internal,
		Message: regexp.MustCompile(`^panic .*nil pointer dereference`), Means: codes.Unimplemented, Classify: true,
		Source: "internal/csi-addons/rbd/network_fence.go: FenceControllerServer embeds a nil *UnimplementedFenceControllerServer; " +
			"the promoted ListClusterFence panics and internal/csi-common/utils.go panicHandler answers INTERNAL",
		Measured: cephMeasured,
	},
	{
		ID: "ceph-csi/resync-no-sync-info", Driver: cephCSIName, Versions: cephCSIVersions + "; later releases read a missing sync time as not syncing",
		RPC: RPCResyncVolume, Code: codes.Internal,
		Message: regexp.MustCompile(`failed to get last sync info`), Means: codes.Unavailable, Classify: true,
		Source: "internal/csi-addons/rbd/replication.go: ResyncVolume -> checkVolumeResyncStatus -> getLastSyncInfo fails while the " +
			"local image is demoted, starting its replay or bootstrapping after a resync (\"no snapshot details\")",
		Measured: cephMeasured,
	},
	{
		ID: "ceph-csi/enable-peer-creating-internal", Driver: cephCSIName, Versions: cephCSIVersions,
		RPC: RPCEnableVolumeReplication, Code: codes.Internal,
		Message: regexp.MustCompile(`^failed to enable mirroring on ".*" with error: rbd: ret=-22, Invalid argument$`), Means: codes.Unavailable,
		Source: "internal/csi-addons/rbd/replication.go: EnableVolumeReplication enables mirroring on an image whose mirroring state is not enabled; " +
			"the peer's copy, while rbd-mirror still creates it, is in that state, and internal/rbd/mirror.go EnableMirroring's librbd MirrorEnable " +
			"refuses it (EINVAL), answered INTERNAL",
		Measured: "drctl conformance against ceph-csi 52fcb7b on Ceph 16.2.15 (scripts/ceph/up.sh): EnableVolumeReplication on the peer right after " +
			"the primary's answered NOT_FOUND for 2 s, then this once as the copy appeared, then OK",
	},
	{
		ID: "ceph-csi/resync-recreating-not-enabled", Driver: cephCSIName, Versions: cephCSIVersions,
		RPC: RPCResyncVolume, Code: codes.InvalidArgument,
		Message: regexp.MustCompile(`^image mirroring is not enabled$`), Means: codes.Unavailable, Classify: true,
		Source: "internal/csi-addons/rbd/replication.go: ResyncVolume refuses an image whose mirroring state is not enabled; " +
			"after a forced resync (librbd MirrorResync) rbd-mirror deletes and recreates the image, whose state is not enabled until its bootstrap ends",
		Measured: "drctl conformance against ceph-csi 52fcb7b on Ceph 16.2.15 (scripts/ceph/up.sh): a forced resync of a split-brain copy answered " +
			"UNAVAILABLE for 23 s, NOT_FOUND for 30 s while the copy was deleted, then this as the new copy appeared; " +
			"an unforced resync right after enable and demote answered it twice as the peer's copy appeared",
	},
	{
		ID: "ceph-csi/resync-recreating-no-local-status", Driver: cephCSIName, Versions: cephCSIVersions,
		RPC: RPCResyncVolume, Code: codes.Unknown,
		Message: regexp.MustCompile(`^failed to get local status: `), Means: codes.Unavailable, Classify: true,
		Source: "internal/csi-addons/rbd/replication.go: ResyncVolume returns the failure of GetLocalSiteStatus as a plain error (UNKNOWN); " +
			"after a forced resync the local site's status of the recreated image is not there yet (\"RBD image not found\")",
		Measured: "drctl conformance against ceph-csi 52fcb7b on Ceph 16.2.15 (scripts/ceph/up.sh): a forced resync of a split-brain copy answered " +
			"UNAVAILABLE for 23 s, NOT_FOUND for 30 s while the copy was deleted, then, as the new copy appeared, this for 27 s before OK",
	},
	{
		ID: "ceph-csi/disable-peer-deleted-internal", Driver: cephCSIName, Versions: cephCSIVersions,
		RPC: RPCDisableVolumeReplication, Code: codes.Internal,
		Message: regexp.MustCompile(`^failed to open image ".*" with error: Failed as image not found`), Means: codes.NotFound, Classify: true,
		Source: "internal/csi-addons/rbd/replication.go: DisableVolumeReplication opens the image after looking the volume up; " +
			"when rbd-mirror deletes the peer's copy in between (its primary's replication was just disabled), the open fails and is answered INTERNAL",
		Measured: "drctl conformance against ceph-csi 52fcb7b on Ceph 16.2.15 (scripts/ceph/up.sh): DisableVolumeReplication on the peer 0.25 s after the " +
			"primary's answered this once, then NOT_FOUND",
	},
	{
		ID: "ceph-csi/info-secondary-invalid", Driver: cephCSIName, Versions: cephCSIVersions,
		RPC: RPCGetVolumeReplicationInfo, Code: codes.InvalidArgument,
		Message: regexp.MustCompile(`image is not in primary state`), Means: codes.FailedPrecondition, Classify: true,
		Source: "internal/csi-addons/rbd/replication.go: ReplicationServer.GetVolumeReplicationInfo; read as FAILED_PRECONDITION " +
			"because the role checks (failover, reprotect, failback, status --verify) take that code, the spec's, as \"not primary\"",
		Measured: cephMeasured + "; on real Ceph a failover's role check said it \"could not ask\" west's copies, which had answered",
	},
	{
		ID: "ceph-csi/info-no-remote-status", Driver: cephCSIName, Versions: cephCSIVersions,
		RPC: RPCGetVolumeReplicationInfo, Code: codes.Internal,
		Message: regexp.MustCompile(`^failed to get remote status: RBD image not found`), Means: codes.Unavailable, Classify: true,
		Source: "internal/csi-addons/rbd/replication.go: ReplicationServer.GetVolumeReplicationInfo answers INTERNAL when the image's global mirror " +
			"status holds no peer site's status (internal/rbd/mirror.go GetRemoteSiteStatus: librbd's ErrNotExist, \"RBD image not found\"); " +
			"the statuses of the other site's rbd-mirror go when it dies, and a restarted one reports again only once its image replayers run: " +
			"the storage is recovering, and the answer passes",
		Measured: "make e2e-ceph's power loss (ceph-csi 52fcb7b on Ceph 16.2.15): the surviving site's primary copies answered it for at " +
			"least 74 s after the lost site's daemons restarted, then NOT_FOUND \"no snapshot details\" until the reprotect's resync, then their syncs",
	},
	{
		ID: "ceph-csi/resync-primary-invalid", Driver: cephCSIName, Versions: cephCSIVersions,
		RPC: RPCResyncVolume, Code: codes.InvalidArgument,
		Message: regexp.MustCompile(`image is in primary state`), Means: codes.FailedPrecondition,
		Source:   "internal/csi-addons/rbd/replication.go: ReplicationServer.ResyncVolume",
		Measured: cephMeasured,
	},
	{
		ID: "ceph-csi/snapshot-replica-read-only", Driver: cephCSIName, Versions: cephCSIVersions,
		RPC: RPCCreateSnapshot, Code: codes.Internal,
		Message: regexp.MustCompile(`Read-only file system`), Means: codes.FailedPrecondition, Classify: true,
		Source: "internal/rbd/snapshot.go: createSnapshot runs rbd snap create on the source image, which a mirrored " +
			"non-primary image refuses (EROFS); ControllerServer.CreateSnapshot answers INTERNAL. A test recovery on " +
			"ceph-csi runs at the site that holds the primary copies, and its points in time are cut there (policy.pointsInTime.cut: primary)",
		Measured: cephMeasured,
	},
	{
		ID: "ceph-csi/fence-invalid-cidr-internal", Driver: cephCSIName, Versions: cephCSIVersions,
		RPC: RPCFenceClusterNetwork, Code: codes.Internal,
		Message: regexp.MustCompile(`^failed to fence CIDR block`), Means: codes.InvalidArgument,
		Source: "internal/csi-addons/rbd/network_fence.go: FenceControllerServer.FenceClusterNetwork wraps the failure of " +
			"networkfence.NetworkFence.AddNetworkFence (ceph osd blocklist range add refuses the block) as INTERNAL",
		Measured: cephMeasured,
	},
	{
		ID: "ceph-csi/promote-disabled-invalid", Driver: cephCSIName, Versions: cephCSIVersions,
		RPC: RPCPromoteVolume, Code: codes.InvalidArgument,
		Message: regexp.MustCompile(`mirroring is not enabled|image is in .*Mode`), Means: codes.FailedPrecondition,
		Source:   "internal/csi-addons/rbd/replication.go: ReplicationServer.PromoteVolume",
		Measured: cephMeasured,
	},
}

// DriverMatches reports whether a reported driver name is name, or name
// with a prefix of its deployment's ("ns.rbd.csi.ceph.com").
func DriverMatches(reported, name string) bool {
	return reported == name || strings.HasSuffix(reported, "."+name)
}

// FindDeviation returns the recorded deviation of driver answering rpc
// with code and message, if any. An empty RPC in a row matches every RPC.
func FindDeviation(driver, rpc string, code codes.Code, message string) (Deviation, bool) {
	for _, d := range Deviations {
		if d.Code != code || (d.RPC != "" && d.RPC != rpc) || !DriverMatches(driver, d.Driver) {
			continue
		}
		if d.Message.MatchString(message) {
			return d, true
		}
	}
	return Deviation{}, false
}

// mayDeviate reports whether some row could read rpc's code otherwise,
// before the driver's name is known: only then is it asked.
func mayDeviate(rpc string, code codes.Code, message string) bool {
	for _, d := range Deviations {
		if d.Classify && d.Code == code && (d.RPC == "" || d.RPC == rpc) && d.Message.MatchString(message) {
			return true
		}
	}
	return false
}

// identityTTL is how long a driver's name is remembered per address: a
// driver replaced at the same address is asked again after it.
const identityTTL = 10 * time.Minute

type knownIdentity struct {
	name string
	at   time.Time
}

// identities remembers the driver name each address reported.
type identities struct {
	mu sync.Mutex
	by map[string]knownIdentity
}

// name asks the driver at conn for its name, or remembers it.
func (ids *identities) name(ctx context.Context, addr string, conn *grpc.ClientConn) (string, bool) {
	ids.mu.Lock()
	k, ok := ids.by[addr]
	ids.mu.Unlock()
	if ok && time.Since(k.at) < identityTTL {
		return k.name, true
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// A CSI-Addons endpoint serves the CSI-Addons identity, a CSI one the
	// CSI identity; a driver's name is the same in both.
	var name string
	if r, err := identity.NewIdentityClient(conn).GetIdentity(cctx, &identity.GetIdentityRequest{}); err == nil {
		name = r.GetName()
	} else if r, err := csi.NewIdentityClient(conn).GetPluginInfo(cctx, &csi.GetPluginInfoRequest{}); err == nil {
		name = r.GetName()
	} else {
		return "", false
	}
	ids.mu.Lock()
	if ids.by == nil {
		ids.by = map[string]knownIdentity{}
	}
	ids.by[addr] = knownIdentity{name: name, at: time.Now()}
	ids.mu.Unlock()
	return name, true
}

// deviate rewrites a driver's answer that a recorded deviation explains
// into the spec's code for it, the message saying which deviation; any
// other error is returned as it is.
func (s *Storage) deviate(ctx context.Context, rpc string, e Endpoint, conn *grpc.ClientConn, err error) error {
	st, ok := status.FromError(err)
	if !ok || !mayDeviate(rpc, st.Code(), st.Message()) {
		return err
	}
	name, ok := s.ids.name(ctx, e.Address, conn)
	if !ok {
		return err
	}
	d, ok := FindDeviation(name, rpc, st.Code(), st.Message())
	if !ok || !d.Classify {
		return err
	}
	return status.Errorf(d.Means, "%s (%s answered %s: %s, %s, read as %s)", st.Message(), name, st.Code(), deviationMark, d.ID, d.Means)
}

// deviationMark is the words by which a rewritten answer names its row.
const deviationMark = "a recorded deviation"

// Recovering tells whether a call's failure is an answer that a row reads
// as passing (UNAVAILABLE): a driver's own words for storage that is
// coming back, e.g. ceph-csi's replication info while a restarted site's
// mirror daemon has not reported yet.
func Recovering(failure string) bool {
	return strings.Contains(failure, deviationMark+", ") && strings.Contains(failure, "read as "+codes.Unavailable.String())
}
