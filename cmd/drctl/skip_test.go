package main_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestSkippedPromotionEndsIncomplete: west's storage refuses to promote
// the plan's group for good and the failover pauses there. drctl resolve
// --skip asks first, saying what the skip leaves undone; once skipped,
// the failover runs to its end incomplete, not completed: watch exits 1
// naming what was undone, and status, list and the report say
// incomplete.
func TestSkippedPromotionEndsIncomplete(t *testing.T) {
	st := newSiteStack(t)
	c := st.c
	shop := st.plan(t, "", "shop", "west", 0, "{groupID: vg-1}", simtest.NodeA+"/32", "")
	st.protect(shop)
	st.east.Down()
	if err := st.west.SetFaults([]sim.FaultRule{{Method: "PromoteVolume", Code: "INVALID_ARGUMENT", Count: 1000, Message: "image is locked by another client"}}); err != nil {
		t.Fatal(err)
	}
	c.ok(nil, "failover", shop, "--to", "west", "--yes")
	c.eventually("the promotion to pause", "shop", func(s statusOut) bool { return stepIn(s, workflows.StatePaused) })

	code, _, errs := c.runIn("no\n", "resolve", "shop", "--skip")
	if code != 2 || !strings.Contains(errs, "the copies of data on west were not promoted: they may still be secondary") || !strings.Contains(errs, "ends incomplete, not completed") {
		t.Fatalf("resolve --skip answered no: exit %d, the prompt does not say what the skip leaves undone:\n%s", code, errs)
	}
	c.ok(nil, "resolve", "shop", "--skip", "--yes")

	code, out, errs := c.run("watch", "shop")
	if code != 1 || !strings.Contains(errs, "incomplete: it ran to its end with steps skipped") || !strings.Contains(errs, "promote data on west skipped: the copies of data on west were not promoted") {
		t.Fatalf("watch: exit %d, want 1 naming what the skip left undone\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	var s statusOut
	c.ok(&s, "status", "shop")
	if s.Action == nil || s.Action.Progress == nil || s.Action.Progress.State != workflows.StateIncomplete {
		t.Errorf("status -o json: %+v, want the action's progress incomplete", s.Action)
	}
	if _, text, _ := c.run("status", "shop"); !strings.Contains(text, "Failover, incomplete") || !strings.Contains(text, "not done: the copies of data on west were not promoted") {
		t.Errorf("status does not say incomplete:\n%s", text)
	}
	var list []struct{ Type, Status string }
	c.ok(&list, "list")
	found := false
	for _, x := range list {
		if x.Type == "Failover" {
			found = true
			if x.Status != workflows.StateIncomplete {
				t.Errorf("list says the failover is %s, want %s", x.Status, workflows.StateIncomplete)
			}
		}
	}
	if !found {
		t.Errorf("list has no failover: %+v", list)
	}
	_, rep, _ := c.run("report", "shop", "-o", "json")
	var r struct {
		Status string
		Undone []string
	}
	if err := json.Unmarshal([]byte(rep), &r); err != nil || r.Status != workflows.StateIncomplete || len(r.Undone) != 1 {
		t.Errorf("report: %v %+v, want incomplete with one thing undone\n%s", err, r, rep)
	}
}
