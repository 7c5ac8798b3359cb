package workflows

import (
	"fmt"
	"slices"
	"strings"
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

// TestSubPlanIndexesOncePerPlan: the cuts of one plan share one index of
// its groups, built at the first cut; a cut of another plan (the same
// number of groups, in another order) gets that plan's groups, from an
// index of its own.
func TestSubPlanIndexesOncePerPlan(t *testing.T) {
	mk := func(names ...string) *plans.Plan {
		p := &plans.Plan{}
		for _, n := range names {
			p.VolumeGroups = append(p.VolumeGroups, plans.VolumeGroup{Name: n, Priority: len(n)})
		}
		return p
	}
	names := func(p *plans.Plan) []string {
		var out []string
		for _, g := range p.VolumeGroups {
			out = append(out, fmt.Sprint(g.Name, "/", g.Priority))
		}
		return out
	}
	one, other := mk("a", "bb", "ccc"), mk("ccc", "a", "bb")
	r := &run{}
	if got := names(r.subPlan(one, []string{"ccc", "a"})); !slices.Equal(got, []string{"a/1", "ccc/3"}) {
		t.Fatalf("cut of a and ccc: %v, want them in the plan's order", got)
	}
	index := r.groupAt
	if got := names(r.subPlan(one, []string{"bb"})); !slices.Equal(got, []string{"bb/2"}) {
		t.Fatalf("second cut: %v", got)
	}
	if fmt.Sprintf("%p", r.groupAt) != fmt.Sprintf("%p", index) {
		t.Error("the second cut of the same plan built its index again")
	}
	if got := names(r.subPlan(other, []string{"a", "ccc"})); !slices.Equal(got, []string{"ccc/3", "a/1"}) {
		t.Fatalf("cut of another plan: %v, want its own groups in its order", got)
	}
}

// TestBatchFailureNamesFiveAndCountsTheRest: a batch that failed on many
// groups names the first five with their errors and counts the others,
// so that the step's error stays readable at any plan size.
func TestBatchFailureNamesFiveAndCountsTheRest(t *testing.T) {
	op := GroupOp{Kind: OpPromote, Site: "west", Force: true}
	var failed []GroupFailure
	for i := range 7 {
		failed = append(failed, GroupFailure{Group: fmt.Sprint("g", i), Error: "refused"})
	}
	for _, c := range []struct {
		n    int
		want string
	}{
		{5, "g0: refused; g1: refused; g2: refused; g3: refused; g4: refused"},
		{6, "g0: refused; g1: refused; g2: refused; g3: refused; g4: refused; and 1 more"},
		{7, "g0: refused; g1: refused; g2: refused; g3: refused; g4: refused; and 2 more"},
	} {
		err := batchFailure(op, failed[:c.n], 10)
		if want := fmt.Sprintf("failed on %d of 10 groups on west: %s", c.n, c.want); !strings.Contains(err.Error(), want+" (") {
			t.Errorf("%d failed: %q, want it to say %q", c.n, err, want)
		}
	}
}

// TestRoleSampleSpreadsOverThePlan: the role check asks about at most n
// groups, spread evenly over the plan, and about every group of a plan
// that has no more than n.
func TestRoleSampleSpreadsOverThePlan(t *testing.T) {
	p := &plans.Plan{}
	for i := range 9 {
		p.VolumeGroups = append(p.VolumeGroups, plans.VolumeGroup{Name: fmt.Sprint("g", i)})
	}
	names := func(gs []plans.VolumeGroup) string {
		var out []string
		for _, g := range gs {
			out = append(out, g.Name)
		}
		return strings.Join(out, " ")
	}
	for _, c := range []struct {
		n    int
		want string
	}{
		{3, "g0 g3 g6"},
		{4, "g0 g2 g4 g6"},
		{1, "g0"},
		{0, "g0"},
		{9, "g0 g1 g2 g3 g4 g5 g6 g7 g8"},
		{20, "g0 g1 g2 g3 g4 g5 g6 g7 g8"},
	} {
		if got := names(roleSample(p, c.n)); got != c.want {
			t.Errorf("sample of %d: %q, want %q", c.n, got, c.want)
		}
	}
}
