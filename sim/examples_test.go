package sim_test

import (
	"path/filepath"
	"testing"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/plans"
)

// The example and demo plans use parameters a real ceph-csi accepts: every
// group's EnableVolumeReplication parameters pass the ceph-csi profile's
// validation (read from ceph-csi's validateSchedulingDetails).
func TestExamplePlansSpeakCephCSI(t *testing.T) {
	a, _ := cephPair(t)
	files, err := filepath.Glob("../plans/examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example plans: %v", err)
	}
	files = append(files, "../deploy/compose/demo-plan.yaml")
	for _, f := range files {
		p, err := plans.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range p.VolumeGroups {
			for site := range g.Sites {
				ins, err := activities.ReplicationInputs(p, site, g.Name, activities.RPCEnableVolumeReplication, false)
				if err != nil {
					t.Fatal(err)
				}
				params := ins[0].Endpoint.Parameters
				_, err = a.rc.EnableVolumeReplication(ctxT(t), &replication.EnableVolumeReplicationRequest{ReplicationSource: group("vg-1"), Parameters: params})
				if err != nil {
					t.Errorf("%s: group %s on %s: ceph-csi would refuse %v: %v", f, g.Name, site, params, err)
				}
			}
		}
	}
}
