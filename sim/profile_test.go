package sim_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/csiaddons/identity"
	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/sim"
)

func cephPair(t *testing.T) (a, b *siteUnderTest) {
	t.Helper()
	ceph := func(c *sim.Config) { c.Driver = sim.DriverCephCSI }
	return startPair(t, pairOpts{TweakA: ceph, TweakB: ceph})
}

// The ceph-csi profile validates EnableVolumeReplication's parameters as
// ceph-csi's validateSchedulingDetails and getMirroringMode do, where the
// spec profile reads any Go duration and snapshot mirroring only.
func TestCephCSIProfileEnableParameters(t *testing.T) {
	a, _ := cephPair(t)
	spec, _ := startPair(t, pairOpts{})
	cases := []struct {
		params     map[string]string
		ceph, spec codes.Code
	}{
		{map[string]string{"schedulingInterval": "5m"}, codes.OK, codes.OK},
		{map[string]string{"schedulingInterval": "1d"}, codes.OK, codes.OK},
		{map[string]string{"schedulingInterval": "1s"}, codes.InvalidArgument, codes.OK},
		{map[string]string{"schedulingInterval": "90s"}, codes.InvalidArgument, codes.OK},
		{map[string]string{"schedulingInterval": "1h30m"}, codes.InvalidArgument, codes.OK},
		{map[string]string{"schedulingInterval": ""}, codes.InvalidArgument, codes.InvalidArgument},
		{map[string]string{"mirroringMode": "journal"}, codes.OK, codes.InvalidArgument},
		{map[string]string{"mirroringMode": "journal", "schedulingInterval": "1s"}, codes.OK, codes.InvalidArgument},
		{map[string]string{"mirroringMode": "mirror"}, codes.InvalidArgument, codes.InvalidArgument},
		{map[string]string{"schedulingStartTime": "14:00:00-05:00"}, codes.InvalidArgument, codes.OK},
		{map[string]string{"schedulingInterval": "1h", "schedulingStartTime": "14:00:00-05:00"}, codes.OK, codes.OK},
	}
	for _, tc := range cases {
		for _, s := range []struct {
			site *siteUnderTest
			want codes.Code
			name string
		}{{a, tc.ceph, "ceph-csi"}, {spec, tc.spec, "spec"}} {
			_, err := s.site.rc.EnableVolumeReplication(ctxT(t), &replication.EnableVolumeReplicationRequest{ReplicationSource: group("vg-1"), Parameters: tc.params})
			if got := codesOf(err); got != s.want {
				t.Errorf("%s: enable with %v: %v, want %v", s.name, tc.params, err, s.want)
			}
		}
	}
}

// Its codes, identity and fence answers are ceph-csi's.
func TestCephCSIProfileAnswers(t *testing.T) {
	a, _ := cephPair(t)
	ctx := ctxT(t)

	id, err := a.id.GetIdentity(ctx, &identity.GetIdentityRequest{})
	mustOK(t, err)
	if id.GetName() != sim.CephCSIDriverName || len(id.GetManifest()) != 0 {
		t.Errorf("identity %v, want %s without manifest", id, sim.CephCSIDriverName)
	}
	caps, err := a.id.GetCapabilities(ctx, &identity.GetCapabilitiesRequest{})
	mustOK(t, err)
	for _, c := range caps.GetCapabilities() {
		if c.GetNetworkFence().GetType() == identity.Capability_NetworkFence_GET_CLIENTS_TO_FENCE ||
			c.GetVolumeReplication().GetType() == identity.Capability_VolumeReplication_GET_REPLICATION_DESTINATION_INFO {
			t.Errorf("advertises %v, which ceph-csi does not serve", c)
		}
	}

	// Not enabled: INVALID_ARGUMENT where the spec says FAILED_PRECONDITION.
	_, err = a.rc.PromoteVolume(ctx, &replication.PromoteVolumeRequest{ReplicationSource: group("vg-1")})
	wantCode(t, err, codes.InvalidArgument)
	enable(t, a, group("vg-1"))
	_, err = a.rc.ResyncVolume(ctx, &replication.ResyncVolumeRequest{ReplicationSource: group("vg-1")})
	wantCode(t, err, codes.InvalidArgument)
	// force in DisableVolumeReplication's parameters must be a boolean.
	_, err = a.rc.DisableVolumeReplication(ctx, &replication.DisableVolumeReplicationRequest{ReplicationSource: group("vg-1"), Parameters: map[string]string{"force": "maybe"}})
	wantCode(t, err, codes.Internal)

	// Secrets missing: INTERNAL (INVALID_ARGUMENT on unfence), never
	// UNAUTHENTICATED.
	sa, _ := startPair(t, pairOpts{Secrets: map[string]string{"userID": "csi-rbd", "userKey": "k"}, TweakA: func(c *sim.Config) { c.Driver = sim.DriverCephCSI }})
	_, err = sa.rc.EnableVolumeReplication(ctx, &replication.EnableVolumeReplicationRequest{ReplicationSource: group("vg-1")})
	wantCode(t, err, codes.Internal)
	_, err = sa.fc.UnfenceClusterNetwork(ctx, &fence.UnfenceClusterNetworkRequest{Cidrs: []*fence.CIDR{{Cidr: "192.0.2.7/32"}}, Parameters: map[string]string{"clusterID": "c"}})
	wantCode(t, err, codes.InvalidArgument)
	_, err = sa.id.Probe(ctx, &identity.ProbeRequest{})
	mustOK(t, err)

	// Fence: clusterID required, a bad CIDR is INTERNAL, no listing.
	cidrs := []*fence.CIDR{{Cidr: "192.0.2.7/32"}}
	_, err = a.fc.FenceClusterNetwork(ctx, &fence.FenceClusterNetworkRequest{Cidrs: cidrs})
	wantCode(t, err, codes.InvalidArgument)
	params := map[string]string{"clusterID": "rook-ceph"}
	_, err = a.fc.FenceClusterNetwork(ctx, &fence.FenceClusterNetworkRequest{Cidrs: []*fence.CIDR{{Cidr: "192.0.2.300/33"}}, Parameters: params})
	wantCode(t, err, codes.Internal)
	_, err = a.fc.FenceClusterNetwork(ctx, &fence.FenceClusterNetworkRequest{Cidrs: cidrs, Parameters: params})
	mustOK(t, err)
	if got := a.FencedCIDRs(); len(got) != 1 || got[0] != "192.0.2.7/32" {
		t.Errorf("fenced %v", got)
	}
	// ListClusterFence panics in ceph-csi: INTERNAL, whatever the
	// secrets; GetFenceClients and GetReplicationDestinationInfo are not in
	// its spec: grpc-go's "unknown method".
	for _, site := range []*siteUnderTest{a, sa} {
		_, err = site.fc.ListClusterFence(ctx, &fence.ListClusterFenceRequest{Parameters: params})
		wantMessage(t, err, codes.Internal, "panic runtime error: invalid memory address or nil pointer dereference")
		_, err = site.fc.GetFenceClients(ctx, &fence.GetFenceClientsRequest{Parameters: params})
		wantMessage(t, err, codes.Unimplemented, "unknown method GetFenceClients for service fence.FenceController")
		_, err = site.rc.GetReplicationDestinationInfo(ctx, &replication.GetReplicationDestinationInfoRequest{ReplicationSource: group("vg-1")})
		wantMessage(t, err, codes.Unimplemented, "unknown method GetReplicationDestinationInfo for service replication.Controller")
	}
}

// GetReplicationDestinationInfo (spec profile): the spec's error table,
// then the peer's copy once the first sync is done.
func TestReplicationDestinationInfo(t *testing.T) {
	a, _ := startPair(t, pairOpts{})
	ctx := ctxT(t)
	call := func(src *replication.ReplicationSource) (*replication.GetReplicationDestinationInfoResponse, error) {
		return a.rc.GetReplicationDestinationInfo(ctx, &replication.GetReplicationDestinationInfoRequest{ReplicationSource: src})
	}
	_, err := call(nil)
	wantCode(t, err, codes.InvalidArgument)
	_, err = call(group("no-such"))
	wantCode(t, err, codes.NotFound)
	_, err = call(group("vg-1"))
	wantCode(t, err, codes.FailedPrecondition)
	enable(t, a, group("vg-1"))
	var resp *replication.GetReplicationDestinationInfoResponse
	eventually(t, 10e9, "destination info", func() bool {
		resp, err = call(group("vg-1"))
		return err == nil
	})
	g := resp.GetReplicationDestination().GetVolumegroup()
	if g.GetVolumeGroupId() != "vg-1" || len(g.GetVolumeIds()) != 2 || g.GetVolumeIds()["v1"] != "v1" {
		t.Errorf("destination %v", resp)
	}
}
