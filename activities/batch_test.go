package activities_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
)

// batchPair is a pair holding n one-volume groups, g0001… on vg-0001…,
// replicated from a to b and synced.
func batchPair(t *testing.T, n int) (a, b *simtest.Site, p *plans.Plan, names []string) {
	t.Helper()
	a, b = simtest.StartPair(t, simtest.Options{Interval: 20 * time.Millisecond, Groups: sim.GenerateGroups(n, 1)})
	p = pairPlan(a, b)
	p.VolumeGroups = nil
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("vg-%04d", i)
		names = append(names, fmt.Sprintf("g%04d", i))
		p.VolumeGroups = append(p.VolumeGroups, plans.VolumeGroup{Name: names[i-1],
			Sites: map[string]plans.GroupRef{"a": {GroupID: id}, "b": {GroupID: id}}})
	}
	p.Policy.Parallelism = 4
	return a, b, p, names
}

func runBatch(t *testing.T, st *activities.Storage, in activities.BatchInput) activities.BatchResult {
	t.Helper()
	v, err := activityEnv(t, st).ExecuteActivity(st.ReplicateBatch, in)
	mustOK(t, err)
	var res activities.BatchResult
	mustOK(t, v.Get(&res))
	return res
}

func batchFor(t *testing.T, p *plans.Plan, site, rpc string, force bool, groups []string) activities.BatchInput {
	t.Helper()
	in, err := activities.BatchInputFor(p, site, rpc, force, groups)
	mustOK(t, err)
	return in
}

// groupRoles is the role of every unit vg/… of a site.
func groupRoles(s *simtest.Site, n int) map[sim.Role]int {
	out := map[sim.Role]int{}
	state := s.Snapshot()
	for i := 1; i <= n; i++ {
		if u := state.Unit(fmt.Sprintf("vg/vg-%04d", i)); u != nil {
			out[u.Role]++
		}
	}
	return out
}

// TestReplicateBatch: a batch makes its call on every group of the
// batch, as the storage's roles show; a group whose call fails is an
// entry of the result with the table's decision (UNAVAILABLE retryable,
// INVALID_ARGUMENT final), the others are done, and a second batch of
// the failed ones finishes the work.
func TestReplicateBatch(t *testing.T) {
	const n = 24
	a, b, p, names := batchPair(t, n)
	p.VolumeGroups[1].Parameters = map[string]string{"schedulingInterval": "1m"} // the group's own
	st := newStorage(t)
	for _, site := range []string{"a", "b"} {
		res := runBatch(t, st, batchFor(t, p, site, activities.RPCEnableVolumeReplication, false, names))
		if len(res.Done) != n || len(res.Failed) != 0 {
			t.Fatalf("enable on %s: %+v", site, res)
		}
	}
	if u1, u2 := a.Snapshot().Unit("vg/vg-0001"), a.Snapshot().Unit("vg/vg-0002"); u2.Schedule != time.Minute || u1.Schedule == time.Minute {
		t.Fatalf("schedules %v and %v; want the group's own parameters on vg-0002 only", u1.Schedule, u2.Schedule)
	}
	eventually(t, 10*time.Second, "b synced with a", func() bool {
		sa, sb := a.Snapshot(), b.Snapshot()
		for i := 1; i <= n; i++ {
			k := fmt.Sprintf("vg/vg-%04d", i)
			if ua, ub := sa.Unit(k), sb.Unit(k); ua.Epoch != ub.Epoch || ua.Seq != ub.Seq {
				return false
			}
		}
		return true
	})
	res := runBatch(t, st, batchFor(t, p, "a", activities.RPCDemoteVolume, false, names))
	if len(res.Done) != n {
		t.Fatalf("demote: %+v", res)
	}
	if r := groupRoles(a, n); r[sim.RoleSecondary] != n {
		t.Fatalf("a after the demote batch: %v", r)
	}

	setFaults(t, b, sim.FaultRule{Method: activities.RPCPromoteVolume, Code: "UNAVAILABLE", Count: 3},
		sim.FaultRule{Method: activities.RPCPromoteVolume, Code: "INVALID_ARGUMENT", Count: 1})
	res = runBatch(t, st, batchFor(t, p, "b", activities.RPCPromoteVolume, false, names))
	var retry, final []string
	for _, f := range res.Failed {
		if f.Retryable {
			retry = append(retry, f.Group)
		} else {
			final = append(final, f.Group)
		}
		if f.Type == "" || !strings.Contains(f.Error, "PromoteVolume") {
			t.Errorf("failure %+v lacks its type or call", f)
		}
	}
	if len(res.Done) != n-4 || len(retry) != 3 || len(final) != 1 || len(res.NotRun) != 0 {
		t.Fatalf("promote with faults: done %d, retryable %v, final %v, not run %v: %+v", len(res.Done), retry, final, res.NotRun, res.Failed)
	}
	if r := groupRoles(b, n); r[sim.RolePrimary] != n-4 {
		t.Fatalf("b after the faulty promote batch: %v, want %d primary", r, n-4)
	}
	res = runBatch(t, st, batchFor(t, p, "b", activities.RPCPromoteVolume, false, append(retry, final...)))
	if len(res.Done) != 4 || len(res.Failed) != 0 {
		t.Fatalf("second promote batch: %+v", res)
	}
	if r := groupRoles(b, n); r[sim.RolePrimary] != n {
		t.Fatalf("b after both batches: %v", r)
	}
}

// TestReplicateBatchReports: with ReportAfter, a batch stops starting
// calls once that time has passed and returns the groups it never
// started, untouched on the storage; and an attempt that finds the
// heartbeat of a crashed one skips the groups it lists as done.
func TestReplicateBatchReports(t *testing.T) {
	const n = 12
	a, b, p, names := batchPair(t, n)
	st := newStorage(t)
	for _, site := range []string{"a", "b"} {
		runBatch(t, st, batchFor(t, p, site, activities.RPCEnableVolumeReplication, false, names))
	}
	setFaults(t, a, sim.FaultRule{Method: activities.RPCDemoteVolume, Latency: 100 * time.Millisecond})
	in := batchFor(t, p, "a", activities.RPCDemoteVolume, false, names)
	in.Parallelism, in.ReportAfter = 2, 150*time.Millisecond
	res := runBatch(t, st, in)
	if len(res.NotRun) == 0 || len(res.Done)+len(res.NotRun) != n || len(res.Failed) != 0 {
		t.Fatalf("reporting batch: %+v", res)
	}
	if r := groupRoles(a, n); r[sim.RoleSecondary] != len(res.Done) {
		t.Fatalf("a: %v after %d demotions", r, len(res.Done))
	}
	for _, g := range res.NotRun {
		i := slices.Index(names, g)
		if u := a.Snapshot().Unit(fmt.Sprintf("vg/vg-%04d", i+1)); u.Role != sim.RolePrimary {
			t.Fatalf("%s was reported not run but is %s", g, u.Role)
		}
	}
	_ = b

	// A crashed attempt's heartbeat said the first half was done: the
	// next attempt does not call the storage for them.
	setFaults(t, a)
	env := activityEnv(t, st)
	env.SetHeartbeatDetails(struct {
		Done []string `json:"done"`
	}{Done: names[:n/2]})
	setFaults(t, b, sim.FaultRule{Method: activities.RPCEnableVolumeReplication, Code: "INTERNAL", Probability: 1})
	v, err := env.ExecuteActivity(st.ReplicateBatch, batchFor(t, p, "b", activities.RPCEnableVolumeReplication, false, names))
	mustOK(t, err)
	var r activities.BatchResult
	mustOK(t, v.Get(&r))
	if r.Resumed != n/2 || len(r.Done) != n/2 || len(r.Failed) != n/2 {
		t.Fatalf("resumed batch: %+v", r)
	}
	for _, f := range r.Failed {
		if slices.Index(names, f.Group) < n/2 {
			t.Fatalf("%s was done before the crash, yet called again: %+v", f.Group, f)
		}
	}
}

// BenchmarkBatchInputFor builds the batch of a whole plan, as a priority
// round of a large failover does inside its workflow task: the cost per
// group must not grow with the plan (a lookup by name per group once made
// 20,000 groups hold the task past the SDK's deadlock detector).
func BenchmarkBatchInputFor(b *testing.B) {
	for _, n := range []int{1000, 20000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			p := &plans.Plan{APIVersion: plans.APIVersion, Kind: plans.Kind, Metadata: plans.Metadata{Name: "big"},
				Sites: []plans.Site{{Name: "a", Storage: plans.Storage{Endpoint: "127.0.0.1:1"}}, {Name: "b", Storage: plans.Storage{Endpoint: "127.0.0.1:2"}}}}
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("g%05d", i)
				id := fmt.Sprintf("vg-%05d", i)
				p.VolumeGroups = append(p.VolumeGroups, plans.VolumeGroup{Name: names[i], Sites: map[string]plans.GroupRef{"a": {GroupID: id}, "b": {GroupID: id}}})
			}
			p.ApplyDefaults()
			b.ResetTimer()
			for b.Loop() {
				in, err := activities.BatchInputFor(p, "b", activities.RPCPromoteVolume, false, names)
				if err != nil || len(in.Items) != n {
					b.Fatalf("%d items, %v", len(in.Items), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/group")
		})
	}
}
