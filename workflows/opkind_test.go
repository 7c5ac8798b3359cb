package workflows_test

import (
	"encoding/json"
	"testing"

	"github.com/drover-dr/drover/workflows"
)

// TestOpKinds: each kind keeps the text its steps (and its children's
// workflow ids) show, and a GroupBatch input carries the kind's
// identifier, which the child reads back.
func TestOpKinds(t *testing.T) {
	for _, c := range []struct {
		kind workflows.OpKind
		text string
	}{
		{workflows.OpPromote, "promote"},
		{workflows.OpDemote, "demote"},
		{workflows.OpResync, "resync"},
		{workflows.OpWaitSync, "wait for a sync of"},
		{workflows.OpCheck, "check replication of"},
		{workflows.OpEnable, "enable replication of"},
		{workflows.OpDisable, "disable replication of"},
		{workflows.OpFinalPromote, "promote after the final sync"},
	} {
		if got := c.kind.Text(); got != c.text {
			t.Errorf("%s shows %q; its steps have shown %q", c.kind, got, c.text)
		}
		var op workflows.GroupOp
		if err := json.Unmarshal([]byte(`{"kind":"`+string(c.kind)+`","site":"west"}`), &op); err != nil || op.Kind != c.kind {
			t.Errorf("kind %q reads as %q (%v)", c.kind, op.Kind, err)
		}
		b, err := json.Marshal(workflows.GroupOp{Kind: c.kind})
		if err != nil || string(b) != `{"kind":"`+string(c.kind)+`","site":""}` {
			t.Errorf("%s is written as %s (%v)", c.kind, b, err)
		}
	}
}
