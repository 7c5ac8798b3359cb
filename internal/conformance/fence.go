package conformance

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/csiaddons/fence"
)

const (
	specFence        = "csi-addons-fence.md: FenceClusterNetwork"
	specUnfence      = "csi-addons-fence.md: UnfenceClusterNetwork"
	specList         = "csi-addons-fence.md: ListClusterFence"
	specClients      = "csi-addons-fence.md: GetFenceClients, ClientDetails (id and addresses required)"
	specFenceErrors  = "csi-addons-fence.md: Error Scheme"
	specFenceIdempot = "csi-addons-fence.md: FenceClusterNetwork and UnfenceClusterNetwork repeated (idempotent, as every CSI call)"
)

type fencer struct {
	r *runner
	s *Site
}

func (f fencer) fence(ctx context.Context, cidrs ...string) error {
	return f.r.invoke(ctx, f.s.Fence, f.s.Name, "/fence.FenceController/FenceClusterNetwork",
		&fence.FenceClusterNetworkRequest{Parameters: f.s.Fence.Parameters, Secrets: f.s.Secrets, Cidrs: toCIDRs(cidrs)},
		&fence.FenceClusterNetworkResponse{})
}

func (f fencer) unfence(ctx context.Context, cidrs ...string) error {
	return f.r.invoke(ctx, f.s.Fence, f.s.Name, "/fence.FenceController/UnfenceClusterNetwork",
		&fence.UnfenceClusterNetworkRequest{Parameters: f.s.Fence.Parameters, Secrets: f.s.Secrets, Cidrs: toCIDRs(cidrs)},
		&fence.UnfenceClusterNetworkResponse{})
}

// list answers the fenced CIDRs, or a skip when the driver does not list.
func (f fencer) list(ctx context.Context) ([]string, error) {
	resp := &fence.ListClusterFenceResponse{}
	err := f.r.invoke(ctx, f.s.Fence, f.s.Name, "/fence.FenceController/ListClusterFence",
		&fence.ListClusterFenceRequest{Parameters: f.s.Fence.Parameters, Secrets: f.s.Secrets}, resp)
	if f.r.means(activities.RPCListClusterFence, err) == codes.Unimplemented {
		if d, ok := f.r.deviation(activities.RPCListClusterFence, err); ok {
			return nil, skipError(fmt.Sprintf("ListClusterFence answers %s, read as UNIMPLEMENTED (%s): the fence state cannot be read back", codeOf(err), describeDeviation(d)))
		}
		return nil, skipError("ListClusterFence answers UNIMPLEMENTED: the fence state cannot be read back")
	}
	if err != nil {
		return nil, ok("ListClusterFence", err)
	}
	var out []string
	for _, c := range resp.GetCidrs() {
		if p, err := netip.ParsePrefix(c.GetCidr()); err == nil {
			out = append(out, p.Masked().String())
		} else {
			out = append(out, c.GetCidr())
		}
	}
	return out, nil
}

func toCIDRs(in []string) []*fence.CIDR {
	out := make([]*fence.CIDR, 0, len(in))
	for _, c := range in {
		out = append(out, &fence.CIDR{Cidr: c})
	}
	return out
}

// fence runs the fence checks on A.
func (r *runner) fence(ctx context.Context) {
	a := &r.cfg.A
	fl := r.flow(ctx, "fence/", "")
	cidr := ""
	switch {
	case r.cfg.CIDR == "":
		fl.block("no CIDR given (--cidr)")
	case !r.caps[a.Name][activities.CapNetworkFence]:
		fl.block(a.Name + " does not advertise NETWORK_FENCE")
	default:
		cidr = netip.MustParsePrefix(r.cfg.CIDR).Masked().String()
	}
	f := fencer{r: r, s: a}
	call := r.cfg.CallTimeout

	canList := true
	fl.need("precheck", specList+" (the CIDR must not be fenced already: the suite leaves it as found)", call, func(ctx context.Context) (string, error) {
		got, err := f.list(ctx)
		var sk skipError
		if errors.As(err, &sk) {
			canList = false
			return string(sk) + "; going on without it", nil
		}
		if err != nil {
			return "", err
		}
		if slices.Contains(got, cidr) {
			return "", fmt.Errorf("%s is fenced already: choose a CIDR nobody fenced (--cidr)", cidr)
		}
		return fmt.Sprintf("%d CIDR(s) fenced, %s not among them", len(got), cidr), nil
	})
	fl.step("empty-cidrs-refused", specFenceErrors+": Missing required field, 3 INVALID_ARGUMENT", call, func(ctx context.Context) (string, error) {
		return r.want(activities.RPCFenceClusterNetwork, f.fence(ctx), codes.InvalidArgument)
	})
	fl.step("invalid-cidr-refused", specFenceErrors+": Invalid or unsupported field, 3 INVALID_ARGUMENT", call, func(ctx context.Context) (string, error) {
		err := f.fence(ctx, "192.0.2.300/33")
		return r.want(activities.RPCFenceClusterNetwork, err, codes.InvalidArgument)
	})

	fenced := false
	defer func() {
		if fenced && !r.cfg.DryRun {
			res := "done"
			if why := r.hung(r.runCtx.Err() != nil); why != "" {
				res = why + "; " + cidr + " may still be fenced: unfence it by hand once the driver answers"
			} else {
				cctx, cancel := context.WithTimeout(r.cleanupBase(), call)
				defer cancel()
				if err := f.unfence(cctx, cidr); err != nil {
					res = ok("", err).Error()
				}
			}
			r.report.Cleanup = append(r.report.Cleanup, fmt.Sprintf("unfence %s on %s: %s", cidr, a.Name, res))
		}
	}()
	fl.need("fence", specFence, call, func(ctx context.Context) (string, error) {
		err := f.fence(ctx, cidr)
		if err == nil {
			fenced = true
		}
		return "", ok("FenceClusterNetwork "+cidr, err)
	})
	fl.step("fence-idempotent", specFenceIdempot, call, func(ctx context.Context) (string, error) {
		return "", ok("second FenceClusterNetwork "+cidr, f.fence(ctx, cidr))
	})
	fl.step("list", specList+" (lists the fenced CIDR)", call, func(ctx context.Context) (string, error) {
		if !canList {
			return "", skipError("ListClusterFence does not list (see fence/precheck)")
		}
		got, err := f.list(ctx)
		if err != nil {
			return "", err
		}
		if !slices.Contains(got, cidr) && !r.cfg.DryRun {
			return "", fmt.Errorf("%s is not listed after FenceClusterNetwork answered OK (listed: %s)", cidr, strings.Join(got, ", "))
		}
		return "", nil
	})
	fl.step("get-clients", specClients, call, func(ctx context.Context) (string, error) {
		if !r.caps[a.Name][activities.CapGetFenceClients] {
			return "", skipError(a.Name + " does not advertise GET_CLIENTS_TO_FENCE")
		}
		resp := &fence.GetFenceClientsResponse{}
		if err := r.invoke(ctx, a.Fence, a.Name, "/fence.FenceController/GetFenceClients",
			&fence.GetFenceClientsRequest{Parameters: a.Fence.Parameters, Secrets: a.Secrets}, resp); err != nil {
			return "", ok("GetFenceClients", err)
		}
		for i, c := range resp.GetClients() {
			if c.GetId() == "" {
				return "", fmt.Errorf("clients[%d] has no id (required)", i)
			}
			if len(c.GetAddresses()) == 0 {
				return "", fmt.Errorf("client %q has no addresses (required)", c.GetId())
			}
			for _, ad := range c.GetAddresses() {
				if _, err := netip.ParsePrefix(ad.GetCidr()); err != nil {
					return "", fmt.Errorf("client %q: address %q is not a CIDR block", c.GetId(), ad.GetCidr())
				}
			}
		}
		return fmt.Sprintf("%d client(s)", len(resp.GetClients())), nil
	})
	fl.step("unfence", specUnfence+" (the CIDR is no longer listed)", call, func(ctx context.Context) (string, error) {
		if err := ok("UnfenceClusterNetwork "+cidr, f.unfence(ctx, cidr)); err != nil {
			return "", err
		}
		if !canList {
			fenced = false
			return "not read back: ListClusterFence does not list (see fence/precheck)", nil
		}
		got, err := f.list(ctx)
		if err != nil {
			return "", err
		}
		if slices.Contains(got, cidr) && !r.cfg.DryRun {
			return "", fmt.Errorf("%s is still fenced after UnfenceClusterNetwork answered OK", cidr)
		}
		fenced = false
		return "", nil
	})
	fl.step("unfence-idempotent", specFenceIdempot, call, func(ctx context.Context) (string, error) {
		return "", ok("second UnfenceClusterNetwork "+cidr, f.unfence(ctx, cidr))
	})
}
