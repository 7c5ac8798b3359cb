package workflows

import (
	"maps"
	"testing"

	"github.com/drover-dr/drover/plans"
)

// TestTestPlanNamesTheCopies: a test recovery runs each workload that has
// test hooks on the test site as NAME-test, its test hooks as its hooks,
// with each copy of its volume groups' volumes in DROVER_COPY_<VOLUME>:
// the volume's name upper-cased, every character other than a letter or
// a digit made "_" (volume IDs such as ceph-csi's hold dashes). Copies of
// groups the workload does not list are not in its environment, and a
// workload without test hooks is left out.
func TestTestPlanNamesTheCopies(t *testing.T) {
	p := &plans.Plan{Workloads: []plans.Workload{
		{Name: "app", VolumeGroups: []string{"data"}, Sites: map[string]plans.WorkloadRef{
			"west": {Exec: &plans.ExecHooks{Start: "real-start", Stop: "real-stop", TestStart: "test-start", TestStop: "test-stop",
				Env: map[string]string{"MODE": "x"}}}}},
		{Name: "cache", Sites: map[string]plans.WorkloadRef{"west": {Exec: &plans.ExecHooks{Start: "s", Stop: "s"}}}},
	}}
	copies := []TestCopy{
		{Group: "data", Volume: "csi-vol-0a1b.c2", Copy: "clone-1"},
		{Group: "data", Volume: "Logs_2", Copy: "clone-2"},
		{Group: "other", Volume: "v9", Copy: "clone-3"},
	}
	tp := testPlan(p, "west", copies)
	if len(tp.Workloads) != 1 || tp.Workloads[0].Name != "app-test" {
		t.Fatalf("test workloads %+v, want app-test alone", tp.Workloads)
	}
	h := tp.Workloads[0].Sites["west"].Exec
	if h.Start != "test-start" || h.Stop != "test-stop" {
		t.Fatalf("the test workload's hooks are %q and %q, want the test hooks", h.Start, h.Stop)
	}
	want := map[string]string{"MODE": "x", "DROVER_COPY_CSI_VOL_0A1B_C2": "clone-1", "DROVER_COPY_LOGS_2": "clone-2"}
	if !maps.Equal(h.Env, want) {
		t.Fatalf("environment %v, want %v", h.Env, want)
	}
	if len(p.Workloads[0].Sites["west"].Exec.Env) != 1 {
		t.Fatalf("the plan's own workload environment changed: %v", p.Workloads[0].Sites["west"].Exec.Env)
	}
}
