package workflows

import (
	"fmt"
	"slices"
	"testing"

	"github.com/drover-dr/drover/plans"
)

// BenchmarkSubPlanCuts cuts a plan into the plans of its GroupBatch
// children, as a fanned-out operation does: the time per plan should grow
// with its size, not with its square (20,000 groups against 5,000: about
// four times, not sixteen).
func BenchmarkSubPlanCuts(b *testing.B) {
	for _, n := range []int{5000, 20000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			p := &plans.Plan{VolumeGroups: make([]plans.VolumeGroup, n)}
			names := make([]string, n)
			for i := range p.VolumeGroups {
				names[i] = fmt.Sprintf("group-%05d", i)
				p.VolumeGroups[i].Name = names[i]
			}
			for b.Loop() {
				r := &run{}
				for batch := range slices.Chunk(names, GroupsPerChild) {
					if sub := r.subPlan(p, batch); len(sub.VolumeGroups) != len(batch) {
						b.Fatalf("a cut of %d groups holds %d", len(batch), len(sub.VolumeGroups))
					}
				}
			}
		})
	}
}
