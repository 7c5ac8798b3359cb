package workflows_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestUnlistedFence: a storage that does not implement ListClusterFence
// (as ceph-csi's RBD driver) is fenced on FenceClusterNetwork's
// acknowledgement, saying it was not read back, and unfenced on reprotect
// without a listing: the cycle completes and leaves no fence behind.
func TestUnlistedFence(t *testing.T) {
	f := newFixture(t)
	unlisted := []sim.FaultRule{{Method: "ListClusterFence", Code: "UNIMPLEMENTED", Probability: 1}}
	mustOK(t, f.west.SetFaults(unlisted))
	mustOK(t, f.east.SetFaults(unlisted))

	f.east.Down()
	var fo workflows.FailoverResult
	_, err := f.run(t, workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"}, &fo)
	mustOK(t, err)
	var verify *workflows.Step
	for i := range fo.Steps {
		if fo.Steps[i].Name == "verify fence of east" {
			verify = fo.Steps[i]
		}
	}
	if verify == nil || verify.State != workflows.StateDone || !strings.Contains(verify.Output, "not read back") {
		t.Fatalf("verify step %+v, want done and saying the fence was not read back", verify)
	}
	if got := f.west.FencedCIDRs(); !slices.Contains(got, simtest.NodeA+"/32") {
		t.Fatalf("east's clients are not fenced: %v", got)
	}

	mustOK(t, f.east.Up())
	_, err = f.run(t, workflows.Reprotect, workflows.ReprotectInput{Plan: f.plan, From: "east", To: "west", Fenced: fo.Fenced}, nil)
	mustOK(t, err)
	if got := f.west.FencedCIDRs(); len(got) != 0 {
		t.Fatalf("east's clients are still fenced after reprotect: %v", got)
	}
}
