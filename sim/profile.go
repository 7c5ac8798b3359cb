package sim

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drover-dr/drover/csiaddons/identity"
)

// Driver profiles: how a site answers where drivers differ. The default
// profile, DriverSpec, follows the CSI-Addons specs strictly. DriverCephCSI
// answers as ceph-csi's RBD driver at commit 52fcb7b (v3.12) does on Ceph
// 16.2.15; each of its differences below and in ceph.go names the
// ceph-csi file and function it is read from and where it was measured:
// an item of shared/ceph/README.md (the first run of real ceph-csi on
// real Ceph) or make e2e-ceph (the project's own run).
const (
	DriverSpec    = "spec"
	DriverCephCSI = "ceph-csi"
)

// Drivers lists the profile names --driver accepts.
var Drivers = []string{DriverSpec, DriverCephCSI}

// CephCSIDriverName is the name ceph-csi's RBD driver reports by default
// (cmd/cephcsi.go, rbdDefaultName).
const CephCSIDriverName = "rbd.csi.ceph.com"

// profile is one driver's behaviour where drivers differ.
type profile struct {
	name string
	// unimplemented: RPCs the driver does not serve at all.
	unimplemented []string
	// unknownMethods: RPCs absent from the driver's generated service,
	// by service: gRPC answers UNIMPLEMENTED "unknown method".
	unknownMethods map[string]string
	// panics: RPCs whose handler panics; the driver's recovery
	// interceptor answers INTERNAL with the panic's text.
	panics map[string]string
	// mirror: the driver mirrors as ceph-csi's RBD snapshot mirroring
	// does (mirror.go): snapshots taken at enable, promote, demote and on a
	// schedule that PromoteVolume adds; a resync keyed on the demoted
	// image; volume IDs in ceph-csi's format.
	mirror bool
	// stateCode is the code of a refusal because of the copy's own state
	// (replication not enabled, resync of a primary, info on a secondary).
	stateCode codes.Code
	// stateWords, when set, words such a refusal as the driver does.
	stateWords func(rpc, why, id string) string
	// demoteChecksPeer: a demotion without force needs the peer reachable.
	demoteChecksPeer bool
	// enableParams validates EnableVolumeReplication's parameters and
	// returns the unit's sync schedule (0: the site's interval).
	enableParams func(params map[string]string) (time.Duration, error)
	// fenceRequest validates a fence or unfence request's parameters
	// before its CIDRs are read.
	fenceRequest func(method string, params map[string]string) error
	// badCIDRCode answers a CIDR that does not parse; badCIDRWords, when
	// set, words the refusal as the driver does.
	badCIDRCode  codes.Code
	badCIDRWords func(method, cidr string) string
	// disableParams validates DisableVolumeReplication's parameters.
	disableParams func(params map[string]string) error
	// capabilities adds the driver's advertised capabilities besides the
	// fence and replication ones the site derives from what it serves.
	capabilities func(add func(*identity.Capability))
	// authCode answers a call whose secrets are missing or wrong.
	authCode   func(method string) codes.Code
	driverName string
	manifest   bool
	// detached: a replication call runs to its end when its caller gives
	// up, holding its volume (FaultRule.Detached).
	detached bool
}

func profileFor(name string) (*profile, error) {
	switch name {
	case "", DriverSpec:
		return specProfile(), nil
	case DriverCephCSI:
		return cephCSIProfile(), nil
	}
	return nil, fmt.Errorf("driver profile %q: want %q or %q", name, DriverSpec, DriverCephCSI)
}

func specProfile() *profile {
	return &profile{
		name:             DriverSpec,
		stateCode:        codes.FailedPrecondition,
		demoteChecksPeer: true,
		enableParams:     specEnableParams,
		fenceRequest:     func(string, map[string]string) error { return nil },
		badCIDRCode:      codes.InvalidArgument,
		disableParams:    func(map[string]string) error { return nil },
		capabilities: func(add func(*identity.Capability)) {
			add(volumeGroupCap(identity.Capability_VolumeGroup_VOLUME_GROUP))
			add(volumeGroupCap(identity.Capability_VolumeGroup_LIMIT_VOLUME_TO_ONE_VOLUME_GROUP))
		},
		authCode: func(string) codes.Code { return codes.Unauthenticated },
		manifest: true,
	}
}

// specEnableParams: the simulator's own reading of a mirroring schedule,
// snapshot mirroring only.
func specEnableParams(params map[string]string) (time.Duration, error) {
	if m, ok := params["mirroringMode"]; ok && m != "snapshot" {
		return 0, status.Errorf(codes.InvalidArgument, "parameters.mirroringMode %q is not supported (only \"snapshot\")", m)
	}
	v, ok := params["schedulingInterval"]
	if !ok {
		return 0, nil
	}
	d, err := ParseSchedule(v)
	if err != nil {
		return 0, status.Errorf(codes.InvalidArgument, "parameters.%v", err)
	}
	return d, nil
}

// cephSchedule is the only form of schedulingInterval ceph-csi accepts
// (internal/csi-addons/rbd/replication.go, validateSchedulingInterval).
var cephSchedule = regexp.MustCompile(`^\d+[mhd]$`)

func cephCSIProfile() *profile {
	return &profile{
		name: DriverCephCSI,
		// Its replication calls run librbd operations that no request
		// context cancels (internal/csi-addons/rbd/replication.go;
		// make bench-ceph: a PromoteVolume its caller gave up on at 1 s
		// held its volume, the next calls answered ABORTED, until it
		// ended): a call given up on holds its volume to its end.
		detached: true,
		// ceph-csi's FenceControllerServer (internal/csi-addons/rbd/network_fence.go)
		// serves FenceClusterNetwork and UnfenceClusterNetwork only, and
		// its ReplicationServer (internal/csi-addons/rbd/replication.go)
		// has no GetReplicationDestinationInfo: none is advertised
		// (IdentityServer.GetCapabilities), and each answers as below.
		unimplemented: []string{"ListClusterFence", "GetFenceClients", "GetReplicationDestinationInfo"},
		// The vendored CSI-Addons spec (v0.2.1-0.20240730084235) has no
		// GetFenceClients and no GetReplicationDestinationInfo: grpc-go
		// answers a method its service does not register with
		// UNIMPLEMENTED "unknown method M for service S".
		unknownMethods: map[string]string{
			"GetFenceClients":               "fence.FenceController",
			"GetReplicationDestinationInfo": "replication.Controller",
		},
		// FenceControllerServer embeds a nil
		// *fence.UnimplementedFenceControllerServer (network_fence.go,
		// NewFenceControllerServer returns &FenceControllerServer{}): the
		// promoted ListClusterFence dereferences it and panics, and
		// panicHandler (internal/csi-common/utils.go) answers INTERNAL
		// "panic <value>". Measured: shared/ceph/README.md item 2.
		panics: map[string]string{
			"ListClusterFence": "runtime error: invalid memory address or nil pointer dereference",
		},
		mirror: true,
		// ReplicationServer.PromoteVolume, DemoteVolume, ResyncVolume and
		// GetVolumeReplicationInfo answer INVALID_ARGUMENT for "mirroring
		// is not enabled", "image is in primary state" and "image is not in
		// primary state", where the spec's tables say FAILED_PRECONDITION.
		stateCode: codes.InvalidArgument,
		// Their words, which Drover's recorded deviations match.
		stateWords: func(rpc, why, id string) string {
			switch {
			case why == refusePrimary:
				return "image is in primary state"
			case why == refuseNotPrimary:
				return "image is not in primary state"
			case rpc == "PromoteVolume" || rpc == "DemoteVolume":
				return fmt.Sprintf("mirroring is not enabled on %s, image is in disabled Mode", id)
			}
			return "image mirroring is not enabled"
		},
		// ReplicationServer.DemoteVolume demotes the local image whatever
		// the peer's state (rbd mirror image demote is a local operation)
		// and never reads force.
		demoteChecksPeer: false,
		enableParams:     cephEnableParams,
		fenceRequest:     cephFenceRequest,
		// networkfence.NetworkFence.AddNetworkFence fails on a CIDR that
		// does not parse, and FenceControllerServer.FenceClusterNetwork
		// wraps that failure as INTERNAL.
		badCIDRCode: codes.Internal,
		badCIDRWords: func(method, cidr string) string {
			verb := "fence"
			if method == "UnfenceClusterNetwork" {
				verb = "unfence"
			}
			return fmt.Sprintf("failed to %s CIDR block %q: failed to add blocklist range %q: invalid CIDR", verb, []string{cidr}, cidr)
		},
		disableParams: cephDisableParams,
		// IdentityServer.GetCapabilities (internal/csi-addons/rbd/identity.go)
		// for a controller: reclaim space offline and these volume group
		// capabilities besides fence and replication.
		capabilities: func(add func(*identity.Capability)) {
			add(&identity.Capability{Type: &identity.Capability_ReclaimSpace_{ReclaimSpace: &identity.Capability_ReclaimSpace{Type: identity.Capability_ReclaimSpace_OFFLINE}}})
			for _, t := range []identity.Capability_VolumeGroup_Type{
				identity.Capability_VolumeGroup_VOLUME_GROUP,
				identity.Capability_VolumeGroup_DO_NOT_ALLOW_VG_TO_DELETE_VOLUMES,
				identity.Capability_VolumeGroup_LIMIT_VOLUME_TO_ONE_VOLUME_GROUP,
				identity.Capability_VolumeGroup_MODIFY_VOLUME_GROUP,
				identity.Capability_VolumeGroup_GET_VOLUME_GROUP,
			} {
				add(volumeGroupCap(t))
			}
		},
		// util.NewUserCredentials (internal/util/credentials.go) fails on
		// missing userID/userKey secrets, and every fence and replication
		// handler answers that failure as INTERNAL, except
		// FenceControllerServer.UnfenceClusterNetwork, which answers
		// INVALID_ARGUMENT; a wrong key fails the cluster connection, also
		// INTERNAL. ceph-csi never answers UNAUTHENTICATED.
		authCode: func(method string) codes.Code {
			if method == "UnfenceClusterNetwork" {
				return codes.InvalidArgument
			}
			return codes.Internal
		},
		driverName: CephCSIDriverName,
		// IdentityServer.GetIdentity reports name and version, no manifest.
		manifest: false,
	}
}

// cephEnableParams follows validateSchedulingDetails and getMirroringMode
// (internal/csi-addons/rbd/replication.go): mirroringMode is snapshot (the
// default) or journal; journal mirroring ignores the scheduling parameters;
// an empty schedulingInterval, one not of the form ^\d+[mhd]$, or a
// schedulingStartTime without an interval is INVALID_ARGUMENT.
func cephEnableParams(params map[string]string) (time.Duration, error) {
	// getFlattenMode: never (the default) or force.
	if f, ok := params["flattenMode"]; ok && f != "never" && f != "force" {
		return 0, status.Errorf(codes.InvalidArgument, "%q=%q is not supported", "flattenMode", f)
	}
	mode, hasMode := params["mirroringMode"]
	switch mode {
	case "journal":
		// Journal mirroring ships every write as it lands: the site's own
		// interval stands for the journal replay, schedules are ignored.
		return 0, nil
	case "snapshot", "":
		if hasMode && mode == "" {
			return 0, status.Error(codes.InvalidArgument, "scheduling is only supported for snapshot mode")
		}
	default:
		return 0, status.Error(codes.InvalidArgument, "scheduling is only supported for snapshot mode")
	}
	interval, ok := params["schedulingInterval"]
	if ok && interval == "" {
		return 0, status.Error(codes.InvalidArgument, "scheduling interval cannot be empty")
	}
	if !ok {
		if params["schedulingStartTime"] != "" {
			return 0, status.Errorf(codes.InvalidArgument, "%q parameter is supported only with %q", "schedulingStartTime", "schedulingInterval")
		}
		return 0, nil
	}
	if !cephSchedule.MatchString(interval) {
		return 0, status.Error(codes.InvalidArgument, "interval specified without d, h, m suffix")
	}
	return ParseSchedule(interval)
}

// cephFenceRequest follows validateNetworkFenceReq
// (internal/csi-addons/rbd/network_fence.go): the CIDR list must not be
// empty and the parameters must name a clusterID.
func cephFenceRequest(method string, params map[string]string) error {
	if params["clusterID"] == "" {
		return status.Errorf(codes.InvalidArgument, "%s: missing or empty clusterID", method)
	}
	return nil
}

// cephDisableParams follows getForceOption
// (internal/csi-addons/rbd/replication.go): DisableVolumeReplication reads
// "force" from its parameters, and a value that is not a boolean is an
// INTERNAL error there.
func cephDisableParams(params map[string]string) error {
	v, ok := params["force"]
	if !ok {
		return nil
	}
	if _, err := strconv.ParseBool(v); err != nil {
		return status.Errorf(codes.Internal, "parameters.force %q: %v", v, err)
	}
	return nil
}

func volumeGroupCap(t identity.Capability_VolumeGroup_Type) *identity.Capability {
	return &identity.Capability{Type: &identity.Capability_VolumeGroup_{VolumeGroup: &identity.Capability_VolumeGroup{Type: t}}}
}

// Why a copy's state refuses a call.
const (
	refuseNotEnabled = "replication is not enabled"
	refusePrimary    = "the copy is primary, not demoted: demote it before a resync"
	refuseNotPrimary = "the copy is not primary"
)

// refuse is the profile's refusal of rpc because of u's state.
func (p *profile) refuse(rpc, why string, u *unit) error {
	if p.stateWords != nil {
		return status.Error(p.stateCode, p.stateWords(rpc, why, u.st.ID))
	}
	return status.Errorf(p.stateCode, "%s %q: %s", u.st.Kind, u.st.ID, why)
}

// parseCIDR reads one CIDR block as the profile's driver does.
func (p *profile) parseCIDR(method string, i int, c string) (string, error) {
	pre, err := netip.ParsePrefix(c)
	if err != nil {
		if p.badCIDRWords != nil {
			return "", status.Error(p.badCIDRCode, p.badCIDRWords(method, c))
		}
		return "", status.Errorf(p.badCIDRCode, "cidrs[%d]: %q is not a CIDR block", i, c)
	}
	return pre.Masked().String(), nil
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// unknownVolume answers a volume ID the site holds no volume for. The
// spec profile: NOT_FOUND. The ceph-csi profile reads the ID as
// GenVolFromVolID (internal/rbd/rbd_util.go) does: an ID that
// util.CSIIdentifier.DecomposeCSIID (internal/util/volid.go) cannot decode
// is ErrInvalidVolID, which rbdManager.GetVolumeByID (internal/rbd/manager.go)
// wraps and getGRPCError (internal/csi-addons/rbd/replication.go) answers
// as INTERNAL; a well-formed ID of an image that does not exist is
// ErrImageNotFound, NOT_FOUND. Measured: make e2e-ceph, and issue 36
// ("string underflow" for an ID outside the format, NOT_FOUND for a
// well-formed unknown one).
func (p *profile) unknownVolume(id string) error {
	if !p.mirror {
		return status.Errorf(codes.NotFound, "volume %q not found", id)
	}
	if err := decomposeCSIID(id); err != nil {
		return status.Errorf(codes.Internal, "failed to get volume from id %q: invalid VolumeID: error decoding volume ID (%v) (%s)", id, err, id)
	}
	return status.Errorf(codes.NotFound, "volume %s not found: image not found", id)
}

// decomposeCSIID checks a volume ID against ceph-csi's format,
// <version:4 hex>-<len(clusterID):4 hex>-<clusterID>-<poolID:16 hex>-<uuid:36>,
// step by step as util.CSIIdentifier.DecomposeCSIID does, with its errors.
func decomposeCSIID(id string) error {
	const knownFieldSize, uuidSize = 64, 36
	underflow := errors.New("failed to decode CSI identifier, string underflow")
	left := len(id)
	if left < knownFieldSize {
		return underflow
	}
	if _, err := hex.DecodeString(id[0:4]); err != nil {
		return err
	}
	left -= 5
	b, err := hex.DecodeString(id[5:9])
	if err != nil {
		return err
	}
	clusterLen := int(binary.BigEndian.Uint16(b))
	left -= 5
	if left < clusterLen+1 {
		return underflow
	}
	left -= clusterLen + 1
	next := 10 + clusterLen + 1
	if left < 17 {
		return underflow
	}
	if _, err := hex.DecodeString(id[next : next+16]); err != nil {
		return err
	}
	left -= 17
	if left != uuidSize {
		return errors.New("failed to decode CSI identifier, string size mismatch")
	}
	return nil
}

// CephVolumeID composes a volume ID in ceph-csi's format
// (util.CSIIdentifier.ComposeCSIID): encoding version 1, the clusterID,
// the pool ID and the image's UUID. Tests use it for well-formed IDs.
func CephVolumeID(clusterID string, poolID int64, uuid string) string {
	return fmt.Sprintf("0001-%04x-%s-%016x-%s", len(clusterID), clusterID, uint64(poolID), uuid)
}
