package activities

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/grpc"

	"github.com/drover-dr/drover/csiaddons/identity"
)

// IdentityInput addresses the identity service of a site.
type IdentityInput struct {
	Endpoint Endpoint `json:"endpoint"`
}

// IdentityResult is what GetIdentity reports.
type IdentityResult struct {
	Name          string            `json:"name"`
	VendorVersion string            `json:"vendorVersion"`
	Manifest      map[string]string `json:"manifest,omitempty"`
}

// GetIdentity asks the driver for its name and version.
func (s *Storage) GetIdentity(ctx context.Context, in IdentityInput) (IdentityResult, error) {
	var out IdentityResult
	err := s.call(ctx, RPCGetIdentity, in.Endpoint, "", false, func(ctx context.Context, conn *grpc.ClientConn, _ map[string]string) error {
		r, err := identity.NewIdentityClient(conn).GetIdentity(ctx, &identity.GetIdentityRequest{})
		if err == nil {
			out = IdentityResult{Name: r.GetName(), VendorVersion: r.GetVendorVersion(), Manifest: r.GetManifest()}
		}
		return err
	})
	return out, err
}

// Capability names, as "Kind.TYPE" from the identity service's enums.
const (
	CapControllerService = "Service.CONTROLLER_SERVICE"
	CapNetworkFence      = "NetworkFence.NETWORK_FENCE"
	CapGetFenceClients   = "NetworkFence.GET_CLIENTS_TO_FENCE"
	CapVolumeReplication = "VolumeReplication.VOLUME_REPLICATION"
	CapVolumeGroup       = "VolumeGroup.VOLUME_GROUP"
)

// CapabilitiesResult lists the driver's capabilities as "Kind.TYPE".
type CapabilitiesResult struct {
	Capabilities []string `json:"capabilities"`
}

// Has reports whether the driver announced capability c.
func (r CapabilitiesResult) Has(c string) bool { return slices.Contains(r.Capabilities, c) }

// Missing returns those of want the driver did not announce.
func (r CapabilitiesResult) Missing(want ...string) []string {
	var out []string
	for _, c := range want {
		if !r.Has(c) {
			out = append(out, c)
		}
	}
	return out
}

// GetCapabilities asks the driver what it can do.
func (s *Storage) GetCapabilities(ctx context.Context, in IdentityInput) (CapabilitiesResult, error) {
	var out CapabilitiesResult
	err := s.call(ctx, RPCGetCapabilities, in.Endpoint, "", false, func(ctx context.Context, conn *grpc.ClientConn, _ map[string]string) error {
		r, err := identity.NewIdentityClient(conn).GetCapabilities(ctx, &identity.GetCapabilitiesRequest{})
		if err != nil {
			return err
		}
		for _, c := range r.GetCapabilities() {
			if name := CapabilityName(c); name != "" {
				out.Capabilities = append(out.Capabilities, name)
			}
		}
		return nil
	})
	return out, err
}

// CapabilityName names a capability as Kind.TYPE
// ("NetworkFence.NETWORK_FENCE"), or "" for a kind this version does not
// know.
func CapabilityName(c *identity.Capability) string {
	type named interface{ String() string }
	var kind string
	var typ named
	switch t := c.GetType().(type) {
	case *identity.Capability_Service_:
		kind, typ = "Service", t.Service.GetType()
	case *identity.Capability_ReclaimSpace_:
		kind, typ = "ReclaimSpace", t.ReclaimSpace.GetType()
	case *identity.Capability_NetworkFence_:
		kind, typ = "NetworkFence", t.NetworkFence.GetType()
	case *identity.Capability_VolumeReplication_:
		kind, typ = "VolumeReplication", t.VolumeReplication.GetType()
	case *identity.Capability_VolumeGroup_:
		kind, typ = "VolumeGroup", t.VolumeGroup.GetType()
	case *identity.Capability_EncryptionKeyRotation_:
		kind, typ = "EncryptionKeyRotation", t.EncryptionKeyRotation.GetType()
	default:
		return ""
	}
	return kind + "." + strings.ToUpper(typ.String())
}

// ProbeResult tells whether the driver is ready. Reported is false when
// the driver left ready unset, which the CSI spec reads as ready.
type ProbeResult struct {
	Ready    bool `json:"ready"`
	Reported bool `json:"reported"`
}

// Probe checks that the driver is up and ready to serve.
func (s *Storage) Probe(ctx context.Context, in IdentityInput) (ProbeResult, error) {
	var out ProbeResult
	err := s.call(ctx, RPCProbe, in.Endpoint, "", false, func(ctx context.Context, conn *grpc.ClientConn, _ map[string]string) error {
		r, err := identity.NewIdentityClient(conn).Probe(ctx, &identity.ProbeRequest{})
		if err == nil {
			out = ProbeResult{Ready: true}
			if r.GetReady() != nil {
				out = ProbeResult{Ready: r.GetReady().GetValue(), Reported: true}
			}
		}
		return err
	})
	return out, err
}
