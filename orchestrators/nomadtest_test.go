package orchestrators_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/drover-dr/drover/orchestrators"
	"github.com/drover-dr/drover/plans"
)

// TestNomadTestCopy: a test recovery's copy of a running production job
// is registered as web-test in the test namespace, becomes healthy
// there, and once stopped is purged; the production job runs on,
// unchanged. A job that mounts a CSI volume the test did not copy is
// refused before anything is registered: its copy would write on
// production.
func TestNomadTestCopy(t *testing.T) {
	eachAgent(t, func(t *testing.T, a agent) {
		ctx := ctxT(t)
		prod := nomadFor(t, a, "")
		c, err := api.NewClient(&api.Config{Address: a.addr})
		if err != nil {
			t.Fatal(err)
		}
		if a.fake == nil {
			if _, err := c.Namespaces().Register(&api.Namespace{Name: "drtest"}, nil); err != nil {
				t.Fatal(err)
			}
		}
		w := workload(&plans.NomadJob{Job: "web", JobFile: jobFile(t, serviceJob("web", 1, "/bin/sleep"))})
		retryTemporary(t, "start the production job", func() (string, error) { return prod.StartWorkload(ctx, w) })
		waitHealth(t, prod, w, "the production job to be healthy", healthy)

		test := nomadFor(t, a, "")
		test.UseTestNamespace("drtest")
		tw := orchestrators.Workload{Plan: "shop", Site: "west", Name: "web-test", Action: orchestrators.ActionTestRecovery,
			Nomad: &plans.NomadJob{Job: "web-test", Test: &plans.NomadTest{Source: "web", Namespace: "drtest"}}}
		out := retryTemporary(t, "start the test copy", func() (string, error) { return test.StartWorkload(ctx, tw) })
		if !strings.Contains(out, `registered test copy "web-test" of job "web" as Nomad runs it in namespace "drtest"`) {
			t.Fatalf("start said %q", out)
		}
		waitHealth(t, test, tw, "the test copy to be healthy", healthy)
		if _, err := test.StopWorkload(ctx, tw); err != nil {
			t.Fatal(err)
		}
		st, err := test.WaitStopped(ctx, tw, 100*time.Millisecond, nil)
		if err != nil || !st.Stopped || !strings.Contains(st.Detail, `test copy "web-test" purged`) {
			t.Fatalf("wait stopped: %+v, %v", st, err)
		}
		if j, _, err := c.Jobs().Info("web-test", &api.QueryOptions{Namespace: "drtest"}); err == nil {
			t.Fatalf("the test copy was not purged: %v", *j.ID)
		}
		if h, err := prod.CheckHealth(ctx, w); err != nil || !h.Healthy {
			t.Fatalf("the production job after the test: %+v, %v", h, err)
		}

		// A copy that would mount production's volume is refused.
		j := serviceJob("db", 1, "/bin/sleep")
		j.TaskGroups[0].Volumes = map[string]*api.VolumeRequest{"data": {Name: "data", Type: "csi", Source: "db-data", AccessMode: "single-node-writer", AttachmentMode: "file-system"}}
		dw := orchestrators.Workload{Plan: "shop", Site: "west", Name: "db-test", Action: orchestrators.ActionTestRecovery,
			Nomad: &plans.NomadJob{Job: "db-test", JobFile: jobFile(t, j), Test: &plans.NomadTest{Source: "db", Namespace: "drtest", Volumes: map[string]string{"other": "other-test"}}}}
		_, err = test.StartWorkload(ctx, dw)
		if err == nil || orchestrators.IsTemporary(err) || !strings.Contains(err.Error(), `mounts CSI volume "db-data", which is in none of the plan's volume groups`) {
			t.Fatalf("a copy on production's volume: %v", err)
		}
		if j, _, err := c.Jobs().Info("db-test", &api.QueryOptions{Namespace: "drtest"}); err == nil {
			t.Fatalf("the refused copy was registered: %v", *j.ID)
		}
	})
}
