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

// fence runs the fence checks on A. It leaves the fences as it found
// them: each CIDR it fences is one nobody fenced before, every fence it
// found must still be listed after each of its calls (a fence that
// replaces the list, an unfence that lifts every fence, fail the check
// that made it), and its clean-up fences again any found fence that is
// gone and unfences what it fenced, reporting both.
func (r *runner) fence(ctx context.Context) {
	a := &r.cfg.A
	fl := r.flow(ctx, "fence/", "")
	cidr := ""
	var extra []string
	switch {
	case r.cfg.CIDR == "":
		fl.block("no CIDR given (--cidr)")
	case !r.caps[a.Name][activities.CapNetworkFence]:
		fl.block(a.Name + " does not advertise NETWORK_FENCE")
	default:
		cidr = netip.MustParsePrefix(r.cfg.CIDR).Masked().String()
		xs := r.cfg.ExtraCIDRs
		if xs == nil {
			xs = DefaultExtraCIDRs
		}
		for _, x := range xs {
			if x = netip.MustParsePrefix(x).Masked().String(); x != cidr && !slices.Contains(extra, x) {
				extra = append(extra, x)
			}
		}
	}
	ours := append([]string{cidr}, extra...)
	f := fencer{r: r, s: a}
	call := r.cfg.CallTimeout

	canList := true
	var found []string
	fl.need("precheck", specList+" (the CIDRs must not be fenced already, and the fences found are kept: the suite leaves them as found)", call, func(ctx context.Context) (string, error) {
		got, err := f.list(ctx)
		var sk skipError
		if errors.As(err, &sk) {
			canList = false
			return string(sk) + "; going on without it", nil
		}
		if err != nil {
			return "", err
		}
		for _, c := range ours {
			if slices.Contains(got, c) {
				return "", fmt.Errorf("%s is fenced already: choose CIDRs nobody fenced (--cidr, --extra-cidr)", c)
			}
		}
		found = got
		return fmt.Sprintf("%d CIDR(s) fenced (%s), none of %s among them", len(got), listed(got), strings.Join(ours, ", ")), nil
	})
	// kept reads the fences back: want listed, gone not, and every fence
	// found at the start still there.
	kept := func(ctx context.Context, after string, want, gone []string) (string, error) {
		if !canList {
			return "not read back: ListClusterFence does not list (see fence/precheck)", nil
		}
		got, err := f.list(ctx)
		if err != nil || r.cfg.DryRun {
			return "", err
		}
		var lost []string
		for _, c := range found {
			if !slices.Contains(got, c) {
				lost = append(lost, c)
			}
		}
		if len(lost) > 0 {
			return "", fmt.Errorf("%s lifted fences it was not asked to: %s, fenced before the run, is no longer listed (listed: %s)", after, strings.Join(lost, ", "), listed(got))
		}
		for _, c := range want {
			if !slices.Contains(got, c) {
				return "", fmt.Errorf("%s is not listed after %s answered OK (listed: %s)", c, after, listed(got))
			}
		}
		for _, c := range gone {
			if slices.Contains(got, c) {
				return "", fmt.Errorf("%s is still fenced after %s answered OK", c, after)
			}
		}
		return "", nil
	}
	fl.step("empty-cidrs-refused", specFenceErrors+": Missing required field, 3 INVALID_ARGUMENT", call, func(ctx context.Context) (string, error) {
		return r.want(activities.RPCFenceClusterNetwork, f.fence(ctx), codes.InvalidArgument)
	})
	fl.step("invalid-cidr-refused", specFenceErrors+": Invalid or unsupported field, 3 INVALID_ARGUMENT", call, func(ctx context.Context) (string, error) {
		err := f.fence(ctx, "192.0.2.300/33")
		return r.want(activities.RPCFenceClusterNetwork, err, codes.InvalidArgument)
	})

	fenced, tried := map[string]bool{}, false
	defer func() {
		if tried && !r.cfg.DryRun {
			r.fenceCleanup(f, found, canList, ours, fenced)
		}
	}()
	fl.need("fence", specFence, call, func(ctx context.Context) (string, error) {
		tried = true
		err := f.fence(ctx, cidr)
		if err == nil {
			fenced[cidr] = true
		}
		return "", ok("FenceClusterNetwork "+cidr, err)
	})
	fl.step("fence-idempotent", specFenceIdempot, call, func(ctx context.Context) (string, error) {
		return "", ok("second FenceClusterNetwork "+cidr, f.fence(ctx, cidr))
	})
	fl.step("list", specList+" (lists the fenced CIDR, and the fences found)", call, func(ctx context.Context) (string, error) {
		if !canList {
			return "", skipError("ListClusterFence does not list (see fence/precheck)")
		}
		return kept(ctx, "FenceClusterNetwork of "+cidr, []string{cidr}, nil)
	})
	if len(extra) > 0 {
		fl.step("fence-several", specFence+" (every CIDR of the request, whole; the fences already there kept)", call, func(ctx context.Context) (string, error) {
			err := f.fence(ctx, extra...)
			if err == nil {
				for _, c := range extra {
					fenced[c] = true
				}
			}
			if err := ok("FenceClusterNetwork "+strings.Join(extra, ", "), err); err != nil {
				return "", err
			}
			return kept(ctx, "FenceClusterNetwork of "+strings.Join(extra, ", "), ours, nil)
		})
		fl.step("unfence-several", specUnfence+" (every CIDR of the request, and no other fence)", call, func(ctx context.Context) (string, error) {
			if err := ok("UnfenceClusterNetwork "+strings.Join(extra, ", "), f.unfence(ctx, extra...)); err != nil {
				return "", err
			}
			out, err := kept(ctx, "UnfenceClusterNetwork of "+strings.Join(extra, ", "), []string{cidr}, extra)
			if err == nil {
				for _, c := range extra {
					delete(fenced, c)
				}
			}
			return out, err
		})
	}
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
	fl.step("unfence", specUnfence+" (the CIDR is no longer listed, the fences found still are)", call, func(ctx context.Context) (string, error) {
		if err := ok("UnfenceClusterNetwork "+cidr, f.unfence(ctx, cidr)); err != nil {
			return "", err
		}
		out, err := kept(ctx, "UnfenceClusterNetwork of "+cidr, nil, []string{cidr})
		if err == nil {
			delete(fenced, cidr)
		}
		return out, err
	})
	fl.step("unfence-idempotent", specFenceIdempot, call, func(ctx context.Context) (string, error) {
		return "", ok("second UnfenceClusterNetwork "+cidr, f.unfence(ctx, cidr))
	})
}

// listed is a fence list for a message.
func listed(cidrs []string) string {
	if len(cidrs) == 0 {
		return "none"
	}
	return strings.Join(cidrs, ", ")
}

// fenceCleanup puts the fences back as the run found them: the CIDRs it
// may have left fenced are unfenced, and where the driver lists its
// fences, every fence found at the start that is gone is fenced again.
// Each is reported; a driver that hung is not asked.
func (r *runner) fenceCleanup(f fencer, found []string, canList bool, ours []string, fenced map[string]bool) {
	a := f.s
	var mine []string
	for _, c := range ours {
		if fenced[c] {
			mine = append(mine, c)
		}
	}
	if why := r.hung(r.runCtx.Err() != nil); why != "" {
		r.report.Cleanup = append(r.report.Cleanup, fmt.Sprintf("unfence %s on %s: %s; they may still be fenced: unfence them by hand once the driver answers", strings.Join(mine, ", "), a.Name, why))
		return
	}
	cctx, cancel := context.WithTimeout(r.cleanupBase(), r.cfg.CallTimeout)
	defer cancel()
	res := "done"
	if len(mine) > 0 {
		if err := f.unfence(cctx, mine...); err != nil {
			res = ok("", err).Error()
		}
		r.report.Cleanup = append(r.report.Cleanup, fmt.Sprintf("unfence %s on %s: %s", strings.Join(mine, ", "), a.Name, res))
	}
	if !canList {
		return
	}
	got, err := f.list(cctx)
	if err != nil {
		r.report.Cleanup = append(r.report.Cleanup, fmt.Sprintf("fences on %s not read back after the run: %v; check that %s are still fenced", a.Name, ok("", err), listed(found)))
		return
	}
	// What is listed now and was not before: the run's own CIDRs fenced
	// otherwise than asked (a block as one address) are unfenced as
	// listed; anything else is reported, not touched.
	var strays, others []string
	for _, c := range got {
		if slices.Contains(found, c) {
			continue
		}
		p, err := netip.ParsePrefix(c)
		if err == nil && slices.ContainsFunc(ours, func(o string) bool { return netip.MustParsePrefix(o).Overlaps(p) }) {
			strays = append(strays, c)
		} else {
			others = append(others, c)
		}
	}
	if len(strays) > 0 {
		res := "done"
		if err := f.unfence(cctx, strays...); err != nil {
			res = ok("", err).Error() + "; unfence them by hand"
		}
		r.report.Cleanup = append(r.report.Cleanup, fmt.Sprintf("unfence %s on %s, listed after the run though never fenced as such (the driver fenced the run's CIDRs otherwise than asked): %s", strings.Join(strays, ", "), a.Name, res))
	}
	if len(others) > 0 {
		r.report.Cleanup = append(r.report.Cleanup, fmt.Sprintf("%s fenced on %s now and not before the run, outside the run's CIDRs: left as they are; find out who fenced them", strings.Join(others, ", "), a.Name))
	}
	var lost []string
	for _, c := range found {
		if !slices.Contains(got, c) {
			lost = append(lost, c)
		}
	}
	if len(lost) == 0 {
		return
	}
	res = "done"
	if err := f.fence(cctx, lost...); err != nil {
		res = ok("", err).Error() + "; fence them again by hand"
	}
	r.report.Cleanup = append(r.report.Cleanup, fmt.Sprintf("fence again on %s %s, fenced before the run and lifted by the driver during it: %s", a.Name, strings.Join(lost, ", "), res))
}
