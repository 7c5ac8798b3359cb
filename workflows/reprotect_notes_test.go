package workflows_test

import (
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/workflows"
)

// TestReprotectStepsSayWhatTheyDid: after a failover, a reprotect's steps
// say what they did, from what the storage and the orchestrator answered:
// the stop of each workload with what confirmed it, the sync each group
// waited for, and the unfence of exactly the lost site's CIDRs through the
// storage that listed them, which the plan's record then drops.
func TestReprotectStepsSayWhatTheyDid(t *testing.T) {
	east := simtest.NodeA + "/32"
	failedOver := func(t *testing.T) (*fixture, workflows.FailoverResult) {
		f := newFixture(t)
		f.east.Down()
		var fo workflows.FailoverResult
		_, err := f.run(t, workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"}, &fo)
		mustOK(t, err)
		mustOK(t, f.east.Up())
		f.record = nil
		return f, fo
	}
	output := func(t *testing.T, rp workflows.ReprotectResult, prefix string) []string {
		t.Helper()
		var out []string
		for _, s := range rp.Steps {
			if strings.HasPrefix(s.ID, prefix) {
				out = append(out, s.Output)
			}
		}
		if len(out) == 0 {
			t.Fatalf("no step %s…", prefix)
		}
		return out
	}

	t.Run("recorded", func(t *testing.T) {
		f, fo := failedOver(t)
		var rp workflows.ReprotectResult
		_, err := f.run(t, workflows.Reprotect, workflows.ReprotectInput{Plan: f.plan, From: "east", To: "west", Fenced: fo.Fenced}, &rp)
		mustOK(t, err)
		allDone(t, rp.Progress)
		for _, o := range output(t, rp, "stop/east/") {
			if o != "no stopped hook: the stop hook's return confirms the stop" {
				t.Errorf("stop step says %q, want what confirmed the stop", o)
			}
		}
		for _, o := range output(t, rp, "wait-sync/west/") {
			at, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(o, "synced at "))
			if !strings.HasPrefix(o, "synced at ") || err != nil || at.IsZero() {
				t.Errorf("wait-sync step says %q, want the time of the sync it saw", o)
			}
		}
		if o := output(t, rp, "unfence/east"); o[0] != "unfenced "+east+" through west" {
			t.Errorf("unfence step says %q, want %q", o[0], "unfenced "+east+" through west")
		}
		unfenced := false
		for _, c := range f.record {
			if u := c.Unfenced; u != nil && u.Site == "east" && u.Via == "west" && strings.Join(u.CIDRs, ",") == east {
				unfenced = true
			}
		}
		if !unfenced {
			t.Errorf("the record got no unfence of %s through west: %+v", east, f.record)
		}
	})
}
