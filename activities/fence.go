package activities

import (
	"context"
	"strings"

	"google.golang.org/grpc"

	"github.com/drover-dr/drover/csiaddons/fence"
)

// FenceInput fences or unfences a set of client CIDRs through a site's
// fence service.
type FenceInput struct {
	Endpoint Endpoint `json:"endpoint"`
	CIDRs    []string `json:"cidrs"`
}

// FenceListInput reads a site's fence state.
type FenceListInput struct {
	Endpoint Endpoint `json:"endpoint"`
}

// FenceList is the CIDRs a site's storage currently blocks.
type FenceList struct {
	CIDRs []string `json:"cidrs"`
}

// FenceClient is one client the storage knows of, with its addresses.
type FenceClient struct {
	ID    string   `json:"id"`
	CIDRs []string `json:"cidrs"`
}

// FenceClients is what GetFenceClients reports.
type FenceClients struct {
	Clients []FenceClient `json:"clients"`
}

func cidrs(in []string) []*fence.CIDR {
	out := make([]*fence.CIDR, len(in))
	for i, c := range in {
		out[i] = &fence.CIDR{Cidr: c}
	}
	return out
}

func cidrStrings(in []*fence.CIDR) []string {
	out := make([]string, 0, len(in))
	for _, c := range in {
		out = append(out, c.GetCidr())
	}
	return out
}

func cidrSubject(c []string) string { return "CIDRs " + strings.Join(c, ",") }

// FenceClusterNetwork blocks the CIDRs from the site's storage.
func (s *Storage) FenceClusterNetwork(ctx context.Context, in FenceInput) error {
	return s.call(ctx, RPCFenceClusterNetwork, in.Endpoint, cidrSubject(in.CIDRs), true, func(ctx context.Context, conn *grpc.ClientConn, secrets map[string]string) error {
		_, err := fence.NewFenceControllerClient(conn).FenceClusterNetwork(ctx, &fence.FenceClusterNetworkRequest{
			Parameters: in.Endpoint.Parameters, Secrets: secrets, Cidrs: cidrs(in.CIDRs)})
		return err
	})
}

// UnfenceClusterNetwork lets the CIDRs reach the site's storage again.
func (s *Storage) UnfenceClusterNetwork(ctx context.Context, in FenceInput) error {
	return s.call(ctx, RPCUnfenceClusterNetwork, in.Endpoint, cidrSubject(in.CIDRs), true, func(ctx context.Context, conn *grpc.ClientConn, secrets map[string]string) error {
		_, err := fence.NewFenceControllerClient(conn).UnfenceClusterNetwork(ctx, &fence.UnfenceClusterNetworkRequest{
			Parameters: in.Endpoint.Parameters, Secrets: secrets, Cidrs: cidrs(in.CIDRs)})
		return err
	})
}

// ListClusterFence reports the CIDRs the site's storage blocks.
func (s *Storage) ListClusterFence(ctx context.Context, in FenceListInput) (FenceList, error) {
	var out FenceList
	err := s.call(ctx, RPCListClusterFence, in.Endpoint, "", true, func(ctx context.Context, conn *grpc.ClientConn, secrets map[string]string) error {
		r, err := fence.NewFenceControllerClient(conn).ListClusterFence(ctx, &fence.ListClusterFenceRequest{
			Parameters: in.Endpoint.Parameters, Secrets: secrets})
		if err == nil {
			out.CIDRs = cidrStrings(r.GetCidrs())
		}
		return err
	})
	return out, err
}

// GetFenceClients reports the clients attached to the site's storage: what
// a failover fences when the plan lists no CIDRs.
func (s *Storage) GetFenceClients(ctx context.Context, in FenceListInput) (FenceClients, error) {
	var out FenceClients
	err := s.call(ctx, RPCGetFenceClients, in.Endpoint, "", true, func(ctx context.Context, conn *grpc.ClientConn, secrets map[string]string) error {
		r, err := fence.NewFenceControllerClient(conn).GetFenceClients(ctx, &fence.GetFenceClientsRequest{
			Parameters: in.Endpoint.Parameters, Secrets: secrets})
		if err == nil {
			for _, c := range r.GetClients() {
				out.Clients = append(out.Clients, FenceClient{ID: c.GetId(), CIDRs: cidrStrings(c.GetAddresses())})
			}
		}
		return err
	})
	return out, err
}
