package conformance

import (
	"context"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/csiaddons/fence"
)

// fenceDriver keeps a list of fenced CIDRs and breaks one rule of the
// fence spec, or none.
type fenceDriver struct {
	fence.UnimplementedFenceControllerServer
	bug string
	mu  sync.Mutex
	set map[string]bool
}

func (d *fenceDriver) cidrs(in []*fence.CIDR) ([]string, error) {
	if len(in) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no CIDRs")
	}
	var out []string
	for _, c := range in {
		p, err := netip.ParsePrefix(c.GetCidr())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "bad CIDR %q", c.GetCidr())
		}
		out = append(out, p.Masked().String())
	}
	return out, nil
}

func (d *fenceDriver) FenceClusterNetwork(_ context.Context, req *fence.FenceClusterNetworkRequest) (*fence.FenceClusterNetworkResponse, error) {
	cs, err := d.cidrs(req.GetCidrs())
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch d.bug {
	case "first-only":
		cs = cs[:1]
	case "as-host":
		for i, c := range cs {
			cs[i] = netip.PrefixFrom(netip.MustParsePrefix(c).Addr(), 32).String()
		}
	case "replaces":
		d.set = map[string]bool{}
	}
	for _, c := range cs {
		d.set[c] = true
	}
	return &fence.FenceClusterNetworkResponse{}, nil
}

func (d *fenceDriver) UnfenceClusterNetwork(_ context.Context, req *fence.UnfenceClusterNetworkRequest) (*fence.UnfenceClusterNetworkResponse, error) {
	cs, err := d.cidrs(req.GetCidrs())
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.bug == "lifts-all" {
		d.set = map[string]bool{}
	}
	for _, c := range cs {
		delete(d.set, c)
	}
	return &fence.UnfenceClusterNetworkResponse{}, nil
}

func (d *fenceDriver) ListClusterFence(context.Context, *fence.ListClusterFenceRequest) (*fence.ListClusterFenceResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	resp := &fence.ListClusterFenceResponse{}
	for _, c := range d.fenced() {
		resp.Cidrs = append(resp.Cidrs, &fence.CIDR{Cidr: c})
	}
	return resp, nil
}

// fenced lists the set, sorted; d.mu is held.
func (d *fenceDriver) fenced() []string {
	var out []string
	for c := range d.set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// someoneElses is a fence the suite finds: a real cluster's fence of a
// lost site.
const someoneElses = "203.0.113.0/24"

// TestFenceChecksKeepWhatTheyFound: against a driver that already holds
// another fence, the fence checks pass an honest driver and leave the
// fences as found; each driver that breaks one rule (a request of several
// CIDRs fences only the first; a block fenced as one address; a fence
// that replaces the list; an unfence that lifts every fence) fails the
// check that shows it, and the clean-up puts back the fence the driver
// lifted and reports it.
func TestFenceChecksKeepWhatTheyFound(t *testing.T) {
	for _, c := range []struct{ bug, check, says string }{
		{"", "", ""},
		{"first-only", "fence/fence-several", "198.51.100.64/26 is not listed after FenceClusterNetwork of 198.51.100.0/28, 198.51.100.64/26"},
		{"as-host", "fence/fence-several", "198.51.100.0/28 is not listed"},
		{"replaces", "fence/fence", ""}, // the list check after the first fence
		{"lifts-all", "fence/unfence-several", "lifted fences it was not asked to: 203.0.113.0/24"},
	} {
		name := c.bug
		if name == "" {
			name = "honest"
		}
		t.Run(name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "f.sock")
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			drv := &fenceDriver{bug: c.bug, set: map[string]bool{someoneElses: true}}
			srv := grpc.NewServer()
			fence.RegisterFenceControllerServer(srv, drv)
			go srv.Serve(l)
			t.Cleanup(srv.Stop)
			d := activities.NewDialer()
			t.Cleanup(func() { d.Close() })
			site := Site{Name: "endpoint", Fence: activities.Endpoint{Site: "endpoint", Address: "unix://" + sock}}
			r := &runner{cfg: Config{A: site, CIDR: DefaultCIDR, CallTimeout: 5 * time.Second}, dialer: d, report: &Report{}, runCtx: context.Background(),
				caps: map[string]map[string]bool{"endpoint": {activities.CapNetworkFence: true}}}
			r.fence(context.Background())

			var failed []string
			for _, res := range r.report.Results {
				if res.Status == Fail {
					failed = append(failed, res.ID+": "+res.Detail)
				}
			}
			drv.mu.Lock()
			left := drv.fenced()
			drv.mu.Unlock()
			if !slices.Equal(left, []string{someoneElses}) {
				t.Errorf("the run left the fences %v, want only %s as found (clean-up: %q)", left, someoneElses, r.report.Cleanup)
			}
			if c.bug == "" {
				if len(failed) > 0 {
					t.Fatalf("an honest driver failed: %q", failed)
				}
				return
			}
			if len(failed) == 0 {
				t.Fatalf("a driver whose bug is %s passed every fence check", c.bug)
			}
			if c.bug == "replaces" {
				// The first check to read the list back says so.
				if !strings.Contains(failed[0], "fence/list: ") || !strings.Contains(failed[0], "lifted fences it was not asked to: "+someoneElses) {
					t.Fatalf("failed: %q", failed)
				}
			} else if !strings.HasPrefix(failed[0], c.check+": ") || !strings.Contains(failed[0], c.says) {
				t.Fatalf("failed %q, want %s first, saying %q", failed, c.check, c.says)
			}
			if c.bug == "replaces" || c.bug == "lifts-all" {
				if !slices.ContainsFunc(r.report.Cleanup, func(s string) bool {
					return strings.Contains(s, "fence again on endpoint "+someoneElses) && strings.HasSuffix(s, ": done")
				}) {
					t.Fatalf("the clean-up does not say it fenced %s again: %q", someoneElses, r.report.Cleanup)
				}
			}
		})
	}
}
