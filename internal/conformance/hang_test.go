package conformance

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/csiaddons/replication"
)

// sitter sits on EnableVolumeReplication until just before the caller's
// deadline, then answers DEADLINE_EXCEEDED, as a driver whose server
// honours the deadline it was sent does. Its answer can reach the caller
// before the caller's own deadline fires (on a loaded machine, before the
// caller's timer has run): it is a hang all the same.
type sitter struct {
	replication.UnimplementedControllerServer
	early time.Duration
}

func (s sitter) EnableVolumeReplication(ctx context.Context, _ *replication.EnableVolumeReplicationRequest) (*replication.EnableVolumeReplicationResponse, error) {
	d, ok := ctx.Deadline()
	if !ok {
		return nil, status.Error(codes.Internal, "no deadline sent")
	}
	t := time.NewTimer(time.Until(d) - s.early)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return nil, status.Error(codes.DeadlineExceeded, "context deadline exceeded")
}

// TestHangAnsweredAtTheDeadline: a call the driver sits on for the whole
// check and then answers DEADLINE_EXCEEDED marks the driver hung, whether
// the driver's answer or the caller's deadline comes first.
func TestHangAnsweredAtTheDeadline(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	replication.RegisterControllerServer(srv, sitter{early: 300 * time.Millisecond})
	go srv.Serve(l)
	t.Cleanup(srv.Stop)

	d := activities.NewDialer()
	t.Cleanup(func() { d.Close() })
	site := &Site{Name: "endpoint", Replication: activities.Endpoint{Site: "endpoint", Address: "unix://" + sock}}
	r := &runner{cfg: Config{A: *site}, dialer: d, report: &Report{}, runCtx: context.Background()}
	p := repl{r: r, src: volumeSource("vol-1"), volumeID: "vol-1"}
	r.check(context.Background(), "replication/volume/enable", "spec", 6*time.Second, func(ctx context.Context) (string, error) {
		return "", ok("EnableVolumeReplication on endpoint", p.enable(ctx, site))
	})
	res := r.report.Results[0]
	if res.Status != Fail || !strings.Contains(res.Detail, "the driver hangs") || r.hangs == "" {
		t.Fatalf("a call sat on for the check's deadline is not a hang: %s %s (hangs %q)", res.Status, res.Detail, r.hangs)
	}
	if !strings.Contains(r.hangs, "endpoint EnableVolumeReplication") {
		t.Errorf("the hang does not name the call: %s", r.hangs)
	}
}
