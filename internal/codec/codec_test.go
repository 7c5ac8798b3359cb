package codec

import (
	"strings"
	"testing"

	"go.temporal.io/sdk/converter"

	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
)

type input struct {
	Plan *plans.Plan `json:"plan"`
	To   string      `json:"to"`
}

// bigPlan is a plan of n groups on two sites.
func bigPlan(n int) *plans.Plan {
	p := &plans.Plan{APIVersion: plans.APIVersion, Kind: plans.Kind, Metadata: plans.Metadata{Name: "big"},
		Sites: []plans.Site{{Name: "east"}, {Name: "west"}}}
	for _, g := range sim.GenerateGroups(n, 1) {
		p.VolumeGroups = append(p.VolumeGroups, plans.VolumeGroup{Name: g.ID,
			Sites: map[string]plans.GroupRef{"east": {GroupID: g.ID}, "west": {GroupID: g.ID}}})
	}
	return p
}

// TestLargePayloadsTravelCompressed: a 5,000-group plan goes out as zlib,
// far smaller, and comes back equal; a small input stays plain JSON; and
// plain JSON written without the codec (an older history) still reads.
func TestLargePayloadsTravelCompressed(t *testing.T) {
	dc := Converter()
	plain := converter.GetDefaultDataConverter()

	big := input{Plan: bigPlan(5000), To: "west"}
	raw, err := plain.ToPayload(big)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := dc.ToPayload(big)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(enc.Metadata[converter.MetadataEncoding]); got != "binary/zlib" {
		t.Fatalf("a %d KiB input is encoded as %q, want binary/zlib", len(raw.Data)>>10, got)
	}
	if len(enc.Data)*5 > len(raw.Data) {
		t.Fatalf("compressed %d bytes to %d: less than fivefold", len(raw.Data), len(enc.Data))
	}
	t.Logf("5,000 groups: %d KiB of JSON travel as %d KiB", len(raw.Data)>>10, len(enc.Data)>>10)
	var back input
	if err := dc.FromPayload(enc, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Plan.VolumeGroups) != 5000 || back.Plan.VolumeGroups[4999].Name != big.Plan.VolumeGroups[4999].Name || back.To != "west" {
		t.Fatalf("decoded input differs: %d groups, to %q", len(back.Plan.VolumeGroups), back.To)
	}

	small := input{Plan: bigPlan(3), To: "west"}
	enc, err = dc.ToPayload(small)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(enc.Metadata[converter.MetadataEncoding]); got != "json/plain" || !strings.Contains(string(enc.Data), `"to":"west"`) {
		t.Fatalf("a small input is encoded as %q: %.80s", got, enc.Data)
	}

	old, err := plain.ToPayload(big)
	if err != nil {
		t.Fatal(err)
	}
	back = input{}
	if err := dc.FromPayload(old, &back); err != nil || len(back.Plan.VolumeGroups) != 5000 {
		t.Fatalf("plain JSON from before the codec: %v, %d groups", err, len(back.Plan.VolumeGroups))
	}
}
