package conformance

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/csiaddons/identity"
	"github.com/drover-dr/drover/csiaddons/replication"
)

// CapGetReplicationDestinationInfo advertises GetReplicationDestinationInfo.
const CapGetReplicationDestinationInfo = "VolumeReplication.GET_REPLICATION_DESTINATION_INFO"

const (
	specIdentity     = "wire-notes.md: Identity service"
	specCapabilities = "wire-notes.md: Identity service (Capability); csi-addons-fence.md and csi-addons-replication.txt error tables: Call not implemented, 12 UNIMPLEMENTED"
)

// serviceCall is one harmless call of an RPC: a request without a source
// or CIDRs, which a driver that serves the RPC refuses as INVALID_ARGUMENT
// (or answers, for the read-only ones) and one that does not answers
// UNIMPLEMENTED.
type serviceCall struct {
	rpc, method string
	endpoint    func(*Site) activities.Endpoint
	req         func(*Site) proto.Message
	resp        func() proto.Message
}

func fenceEP(s *Site) activities.Endpoint { return s.Fence }
func replEP(s *Site) activities.Endpoint  { return s.Replication }

// capabilityRPCs maps each capability to the calls that prove it served.
var capabilityRPCs = map[string][]serviceCall{
	activities.CapNetworkFence: {
		{"FenceClusterNetwork", "/fence.FenceController/FenceClusterNetwork", fenceEP,
			func(s *Site) proto.Message {
				return &fence.FenceClusterNetworkRequest{Parameters: s.Fence.Parameters, Secrets: s.Secrets}
			},
			func() proto.Message { return &fence.FenceClusterNetworkResponse{} }},
		{"UnfenceClusterNetwork", "/fence.FenceController/UnfenceClusterNetwork", fenceEP,
			func(s *Site) proto.Message {
				return &fence.UnfenceClusterNetworkRequest{Parameters: s.Fence.Parameters, Secrets: s.Secrets}
			},
			func() proto.Message { return &fence.UnfenceClusterNetworkResponse{} }},
	},
	activities.CapGetFenceClients: {
		{"GetFenceClients", "/fence.FenceController/GetFenceClients", fenceEP,
			func(s *Site) proto.Message {
				return &fence.GetFenceClientsRequest{Parameters: s.Fence.Parameters, Secrets: s.Secrets}
			},
			func() proto.Message { return &fence.GetFenceClientsResponse{} }},
	},
	activities.CapVolumeReplication: {
		{"EnableVolumeReplication", "/replication.Controller/EnableVolumeReplication", replEP,
			func(s *Site) proto.Message { return &replication.EnableVolumeReplicationRequest{Secrets: s.Secrets} },
			func() proto.Message { return &replication.EnableVolumeReplicationResponse{} }},
		{"DisableVolumeReplication", "/replication.Controller/DisableVolumeReplication", replEP,
			func(s *Site) proto.Message { return &replication.DisableVolumeReplicationRequest{Secrets: s.Secrets} },
			func() proto.Message { return &replication.DisableVolumeReplicationResponse{} }},
		{"PromoteVolume", "/replication.Controller/PromoteVolume", replEP,
			func(s *Site) proto.Message { return &replication.PromoteVolumeRequest{Secrets: s.Secrets} },
			func() proto.Message { return &replication.PromoteVolumeResponse{} }},
		{"DemoteVolume", "/replication.Controller/DemoteVolume", replEP,
			func(s *Site) proto.Message { return &replication.DemoteVolumeRequest{Secrets: s.Secrets} },
			func() proto.Message { return &replication.DemoteVolumeResponse{} }},
		{"ResyncVolume", "/replication.Controller/ResyncVolume", replEP,
			func(s *Site) proto.Message { return &replication.ResyncVolumeRequest{Secrets: s.Secrets} },
			func() proto.Message { return &replication.ResyncVolumeResponse{} }},
		{"GetVolumeReplicationInfo", "/replication.Controller/GetVolumeReplicationInfo", replEP,
			func(s *Site) proto.Message { return &replication.GetVolumeReplicationInfoRequest{Secrets: s.Secrets} },
			func() proto.Message { return &replication.GetVolumeReplicationInfoResponse{} }},
	},
	CapGetReplicationDestinationInfo: {
		{"GetReplicationDestinationInfo", "/replication.Controller/GetReplicationDestinationInfo", replEP,
			func(s *Site) proto.Message {
				return &replication.GetReplicationDestinationInfoRequest{Secrets: s.Secrets}
			},
			func() proto.Message { return &replication.GetReplicationDestinationInfoResponse{} }},
	},
}

// listFence is ListClusterFence, which no capability of its own covers: it
// must be UNIMPLEMENTED when NETWORK_FENCE is not advertised, and may be
// (the spec's "disabled in the driver's current mode") when it is.
var listFence = serviceCall{"ListClusterFence", "/fence.FenceController/ListClusterFence", fenceEP,
	func(s *Site) proto.Message {
		return &fence.ListClusterFenceRequest{Parameters: s.Fence.Parameters, Secrets: s.Secrets}
	},
	func() proto.Message { return &fence.ListClusterFenceResponse{} }}

// capName is a capability's name as the worker reports it
// ("NetworkFence.NETWORK_FENCE"), or "unknown".
func capName(c *identity.Capability) string {
	if n := activities.CapabilityName(c); n != "" {
		return n
	}
	return "unknown"
}

func (r *runner) identity(ctx context.Context, s *Site) {
	id := "identity/" + s.Name
	if r.caps == nil {
		r.caps = map[string]map[string]bool{}
	}
	r.check(ctx, id+"/probe", specIdentity+" (Probe)", r.cfg.CallTimeout, func(ctx context.Context) (string, error) {
		resp := &identity.ProbeResponse{}
		if err := r.invoke(ctx, s.Identity, s.Name, "/identity.Identity/Probe", &identity.ProbeRequest{}, resp); err != nil {
			return "", ok("Probe", err)
		}
		if resp.GetReady() != nil && !resp.GetReady().GetValue() {
			return "", errors.New("the driver's Probe answered ready=false: the driver is not ready to test")
		}
		if resp.GetReady() == nil {
			return "ready unset (read as ready)", nil
		}
		return "ready", nil
	})
	r.check(ctx, id+"/get-identity", specIdentity+" (GetIdentity: name, vendor_version)", r.cfg.CallTimeout, func(ctx context.Context) (string, error) {
		resp := &identity.GetIdentityResponse{}
		if err := r.invoke(ctx, s.Identity, s.Name, "/identity.Identity/GetIdentity", &identity.GetIdentityRequest{}, resp); err != nil {
			return "", ok("GetIdentity", err)
		}
		if resp.GetName() == "" {
			return "", errors.New("GetIdentity answered no name")
		}
		if r.report.Driver == "" {
			r.report.Driver, r.report.Version = resp.GetName(), resp.GetVendorVersion()
		}
		return fmt.Sprintf("%s %s", resp.GetName(), resp.GetVendorVersion()), nil
	})
	have := map[string]bool{}
	capsOK := r.check(ctx, id+"/capabilities", specCapabilities, r.cfg.CallTimeout, func(ctx context.Context) (string, error) {
		resp := &identity.GetCapabilitiesResponse{}
		if err := r.invoke(ctx, s.Identity, s.Name, "/identity.Identity/GetCapabilities", &identity.GetCapabilitiesRequest{}, resp); err != nil {
			return "", ok("GetCapabilities", err)
		}
		var names []string
		for _, c := range resp.GetCapabilities() {
			n := capName(c)
			have[n] = true
			names = append(names, n)
		}
		if len(names) == 0 && !r.cfg.DryRun {
			return "", errors.New("GetCapabilities answered no capability")
		}
		sort.Strings(names)
		return strings.Join(names, ", "), nil
	})
	if r.cfg.DryRun {
		for c := range capabilityRPCs {
			have[c] = true
		}
	}
	r.caps[s.Name] = have
	if !capsOK {
		r.skip(id+"/advertised-answer", specCapabilities, "no capabilities to go by")
		r.skip(id+"/unadvertised-unimplemented", specCapabilities, "no capabilities to go by")
		return
	}
	caps := make([]string, 0, len(capabilityRPCs))
	for c := range capabilityRPCs {
		caps = append(caps, c)
	}
	sort.Strings(caps)
	r.check(ctx, id+"/advertised-answer", specCapabilities, r.cfg.CallTimeout, func(ctx context.Context) (string, error) {
		var served, bad []string
		for _, c := range caps {
			if !have[c] {
				continue
			}
			for _, sc := range capabilityRPCs[c] {
				err := r.invoke(ctx, sc.endpoint(s), s.Name, sc.method, sc.req(s), sc.resp())
				switch codeOf(err) {
				case codes.Unimplemented:
					bad = append(bad, fmt.Sprintf("%s answers UNIMPLEMENTED though %s is advertised", sc.rpc, c))
				case codes.Unavailable, codes.DeadlineExceeded, codes.Unauthenticated:
					bad = append(bad, fmt.Sprintf("%s: %v", sc.rpc, ok(sc.rpc, err)))
				default:
					served = append(served, sc.rpc)
				}
			}
		}
		if len(bad) > 0 {
			return "", errors.New(strings.Join(bad, "; "))
		}
		if len(served) == 0 {
			return "", skipError("neither fence nor replication is advertised")
		}
		return strings.Join(served, ", ") + " answer", nil
	})
	r.check(ctx, id+"/unadvertised-unimplemented", specCapabilities, r.cfg.CallTimeout, func(ctx context.Context) (string, error) {
		var checked, bad []string
		calls := map[string][]serviceCall{}
		for _, c := range caps {
			if !have[c] {
				calls[c] = capabilityRPCs[c]
			}
		}
		if !have[activities.CapNetworkFence] {
			calls[activities.CapNetworkFence] = append(calls[activities.CapNetworkFence], listFence)
		}
		for _, c := range caps {
			for _, sc := range calls[c] {
				err := r.invoke(ctx, sc.endpoint(s), s.Name, sc.method, sc.req(s), sc.resp())
				if got := codeOf(err); got != codes.Unimplemented && !r.cfg.DryRun {
					bad = append(bad, fmt.Sprintf("%s answers %s though %s is not advertised", sc.rpc, got, c))
					continue
				}
				checked = append(checked, sc.rpc)
			}
		}
		if len(bad) > 0 {
			return "", errors.New(strings.Join(bad, "; "))
		}
		if len(checked) == 0 {
			return "every capability the suite knows is advertised", nil
		}
		return strings.Join(checked, ", ") + " answer UNIMPLEMENTED", nil
	})
}
