package activities

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/drover-dr/drover/csiaddons/identity"
)

// renamable is a driver whose name can change under the same address (a
// driver replaced there), counting how often it is asked.
type renamable struct {
	identity.UnimplementedIdentityServer
	mu    sync.Mutex
	name  string
	asked int
}

func (r *renamable) GetIdentity(context.Context, *identity.GetIdentityRequest) (*identity.GetIdentityResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked++
	return &identity.GetIdentityResponse{Name: r.name, VendorVersion: "test"}, nil
}

func (r *renamable) set(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.name = name
}

func (r *renamable) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.asked
}

// TestDriverNameIsAskedAgainAfterItsPeriod: the driver's name is
// remembered per address for identityTTL, and asked again after it: a
// driver replaced at the same address (here another vendor's by
// ceph-csi) has its recorded deviations read once the period has passed,
// not never. Within the period the remembered name is used, unasked.
func TestDriverNameIsAskedAgainAfterItsPeriod(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	drv := &renamable{name: "example.csi.vendor.io"}
	srv := grpc.NewServer()
	identity.RegisterIdentityServer(srv, drv)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s := &Storage{}
	e := Endpoint{Site: "x", Address: l.Addr().String()}
	panicked := status.Error(codes.Internal, "panic runtime error: invalid memory address or nil pointer dereference")
	answer := func() codes.Code {
		return status.Code(s.deviate(ctx, RPCListClusterFence, e, conn, panicked))
	}
	if got := answer(); got != codes.Internal {
		t.Fatalf("another vendor's driver: %s, want the answer as it came (Internal)", got)
	}
	drv.set(cephCSIName)
	if got := answer(); got != codes.Internal || drv.count() != 1 {
		t.Fatalf("within the period: %s after %d GetIdentity calls; want the remembered name (Internal), asked once", got, drv.count())
	}
	// The remembered name comes to the end of its period.
	s.ids.mu.Lock()
	k := s.ids.by[e.Address]
	k.at = k.at.Add(-identityTTL)
	s.ids.by[e.Address] = k
	s.ids.mu.Unlock()
	if got := answer(); got != codes.Unimplemented || drv.count() != 2 {
		t.Fatalf("after the period: %s after %d GetIdentity calls; want the driver asked again and ceph-csi's panic read as Unimplemented", got, drv.count())
	}
	if got := answer(); got != codes.Unimplemented || drv.count() != 2 {
		t.Fatalf("right after: %s after %d GetIdentity calls; want the new name remembered", got, drv.count())
	}
}
