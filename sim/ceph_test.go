package sim_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drover-dr/drover/sim"
)

// Every replication RPC reads an unknown volume ID as ceph-csi does: one
// outside its format is INTERNAL, a well-formed one NOT_FOUND. Configured
// volumes stay addressable by their names. The spec profile answers
// NOT_FOUND for both.
func TestCephCSIVolumeIDs(t *testing.T) {
	a, _ := cephPair(t)
	spec, _ := startPair(t, pairOpts{})
	wellFormed := sim.CephVolumeID("rook-ceph", 2, "5f7a0b8e-1c2d-4e3f-9a8b-7c6d5e4f3a2b")
	if wellFormed != "0001-0009-rook-ceph-0000000000000002-5f7a0b8e-1c2d-4e3f-9a8b-7c6d5e4f3a2b" {
		t.Fatalf("composed %q", wellFormed)
	}
	bad := []struct{ id, says string }{
		{"nope", "string underflow"},
		{"0001-0009-rook-ceph-000000000000000X-5f7a0b8e-1c2d-4e3f-9a8b-7c6d5e4f3a2b", "invalid byte"},
		{"0001-0009-rook-ceph-0000000000000002-5f7a0b8e-1c2d-4e3f-9a8b-7c6d5e4f3a2b-x", "string size mismatch"},
		{"0001-00ff-rook-ceph-0000000000000002-5f7a0b8e-1c2d-4e3f-9a8b-7c6d5e4f3a2b", "string underflow"},
	}
	for name, call := range replCalls {
		ctx := ctxT(t)
		for _, b := range bad {
			err := call(ctx, a, "", volume(b.id), nil, false)
			if st := status.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "invalid VolumeID: error decoding volume ID") || !strings.Contains(st.Message(), b.says) {
				t.Errorf("ceph-csi %s(%q): %v, want INTERNAL invalid VolumeID (%s)", name, b.id, err, b.says)
			}
			wantCode(t, call(ctx, spec, "", volume(b.id), nil, false), codes.NotFound)
		}
		wantCode(t, call(ctx, a, "", volume(wellFormed), nil, false), codes.NotFound)
		wantCode(t, call(ctx, a, wellFormed, nil, nil, false), codes.NotFound)
		if name == "EnableVolumeReplication" {
			mustOK(t, call(ctx, a, "", volume("solo"), nil, false))
		}
	}
}
