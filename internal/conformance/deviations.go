package conformance

import (
	"strings"

	"google.golang.org/grpc/codes"
)

// knownDeviation is a refusal a driver answers with another code than the
// spec's table, read from the driver's code. Drover treats both codes of
// each row alike: a final refusal that changed nothing.
type knownDeviation struct {
	driver string
	// check is the check ID, or its last element for every source kind.
	check  string
	code   codes.Code
	source string
}

var deviations = []knownDeviation{
	{"rbd.csi.ceph.com", "info-secondary-refused", codes.InvalidArgument,
		"ceph-csi internal/csi-addons/rbd/replication.go, ReplicationServer.GetVolumeReplicationInfo: \"image is not in primary state\""},
	{"rbd.csi.ceph.com", "resync-primary-refused", codes.InvalidArgument,
		"ceph-csi internal/csi-addons/rbd/replication.go, ReplicationServer.ResyncVolume: \"image is in primary state\""},
	{"rbd.csi.ceph.com", "promote-disabled-refused", codes.InvalidArgument,
		"ceph-csi internal/csi-addons/rbd/replication.go, ReplicationServer.PromoteVolume: \"mirroring is not enabled\""},
	{"rbd.csi.ceph.com", "fence/invalid-cidr-refused", codes.Internal,
		"ceph-csi internal/csi-addons/rbd/network_fence.go, FenceControllerServer.FenceClusterNetwork wraps the failure of networkfence.AddNetworkFence"},
}

// deviation finds the known deviation of driver for check answering code.
func deviation(driver, check string, code codes.Code) (string, bool) {
	for _, d := range deviations {
		if d.driver != driver || d.code != code {
			continue
		}
		if d.check == check || strings.HasSuffix(check, "/"+d.check) {
			return d.source, true
		}
	}
	return "", false
}
