package conformance

import (
	"strings"
	"testing"
)

// TestUnknownID: an unknown ID takes ceph-csi's format, with the scratch
// source's clusterID and pool ID, when the scratch ID is in that format
// (or, without a scratch source of its kind, the other kind's is); a plain
// name otherwise.
func TestUnknownID(t *testing.T) {
	const vol = "0001-0009-rook-ceph-0000000000000002-5f7a0b8e-1c2d-4e3f-9a8b-7c6d5e4f3a2b"
	for _, c := range []struct {
		name, kind, scratch, other, prefix string
	}{
		{"ceph-csi volume", "volume", vol, "", "0001-0009-rook-ceph-0000000000000002-"},
		{"ceph-csi group from the volume", "group", "", vol, "0001-0009-rook-ceph-0000000000000002-"},
		{"short clusterID", "volume", "0001-0004-ceph-0000000000000001-c7c508a8-c85d-4021-936e-4479849c5e72", "", "0001-0004-ceph-0000000000000001-"},
		{"plain volume", "volume", "vol-1", "", "drover-conformance-no-such-volume"},
		{"plain group beside a ceph-csi volume", "group", "vg-0001", vol, "drover-conformance-no-such-group"},
		{"ceph-csi prefix, wrong length", "volume", "0001-0009-rook-ceph-0000000000000002-scratch", "", "drover-conformance-no-such-volume"},
		{"bad pool hex", "volume", "0001-0004-ceph-00000000000000zz-c7c508a8-c85d-4021-936e-4479849c5e72", "", "drover-conformance-no-such-volume"},
	} {
		t.Run(c.name, func(t *testing.T) {
			id, how := unknownID(c.kind, c.scratch, c.other)
			if !strings.HasPrefix(id, c.prefix) || !strings.Contains(how, id) {
				t.Fatalf("unknownID = %q (%s), want a prefix %q", id, how, c.prefix)
			}
			if id == c.scratch {
				t.Fatal("the unknown ID is the scratch source's")
			}
			if strings.HasPrefix(c.prefix, "0001-") {
				cluster, pool, ok := decodeCephCSIID(id)
				if !ok || !strings.Contains(c.prefix, "-"+cluster+"-"+pool+"-") {
					t.Fatalf("%q does not decode back (%q %q %v)", id, cluster, pool, ok)
				}
				if again, _ := unknownID(c.kind, c.scratch, c.other); again == id {
					t.Fatal("two runs share an unknown ID")
				}
			}
		})
	}
}
