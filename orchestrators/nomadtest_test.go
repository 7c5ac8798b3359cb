package orchestrators_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/freeport"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/orchestrators"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
)

// TestNomadTestCopy: a test recovery's copy of a running production job
// is registered as web-test in the test namespace, becomes healthy
// there, and once stopped is purged; the production job runs on,
// unchanged. A job that mounts a CSI volume the test did not copy, or a
// per_alloc one, is refused before anything is registered: its copy
// would write on production.
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

		// The copy names no namespace of its own (its plan's copies are
		// no Nomad volumes): Nomad registers it in the namespace the
		// calls name, the test namespace, and the note says so, and that
		// it mounts no CSI volume.
		test := nomadFor(t, a, "")
		test.UseTestNamespace("drtest")
		tw := orchestrators.Workload{Plan: "shop", Site: "west", Name: "web-test", Action: orchestrators.ActionTestRecovery,
			Nomad: &plans.NomadJob{Job: "web-test", Test: &plans.NomadTest{Source: "web"}}}
		out := retryTemporary(t, "start the test copy", func() (string, error) { return test.StartWorkload(ctx, tw) })
		if want := `registered test copy "web-test" of job "web" as Nomad runs it in namespace "drtest", it mounts no CSI volume`; out != want {
			t.Fatalf("start said %q, want %q", out, want)
		}
		if _, _, err := c.Jobs().Info("web-test", &api.QueryOptions{Namespace: "drtest"}); err != nil {
			t.Fatalf("the test copy is not in the namespace its note names: %v", err)
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

		// So is one whose volume is per_alloc, copied or not: each
		// allocation of the copy would mount production's own
		// per-allocation volume.
		j.TaskGroups[0].Volumes["data"].PerAlloc = true
		dw.Nomad.JobFile = jobFile(t, j)
		dw.Nomad.Test.Volumes = map[string]string{"db-data": "db-data-test"}
		_, err = test.StartWorkload(ctx, dw)
		if err == nil || orchestrators.IsTemporary(err) || !strings.Contains(err.Error(), `mounts per_alloc CSI volume "db-data"`) {
			t.Fatalf("a copy of a job with a per_alloc volume: %v", err)
		}
		if j, _, err := c.Jobs().Info("db-test", &api.QueryOptions{Namespace: "drtest"}); err == nil {
			t.Fatalf("the refused copy was registered: %v", *j.ID)
		}
	})
}

// csiPlugin runs drover-sim as the CSI controller plugin "drover-sim" of
// the agent: on the fake, a drover-sim process the fake calls on its
// unix socket; on a real agent, a raw_exec job with a csi_plugin block,
// serving on the socket Nomad names in CSI_ENDPOINT, waited healthy. It
// returns the site's control address, to read its state.
func csiPlugin(t *testing.T, a agent) string {
	t.Helper()
	bin := filepath.Join(bintest.Build(t, "drover-sim"), "drover-sim")
	var ports [2]int
	for i := range ports {
		p, err := freeport.Port("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	control := fmt.Sprintf("127.0.0.1:%d", ports[1])
	args := []string{"--name", "west", "--data", fmt.Sprintf("127.0.0.1:%d", ports[0]), "--control", control, "--primary", "--groups", "1", "--state-dir", t.TempDir()}
	if a.fake != nil {
		sock := "unix://" + filepath.Join(t.TempDir(), "csi.sock")
		bintest.Start(t, nil, bin, append(args, "--grpc", sock)...)
		a.fake.AddPlugin("drover-sim", sock)
	} else {
		c, err := api.NewClient(&api.Config{Address: a.addr})
		if err != nil {
			t.Fatal(err)
		}
		job := &api.Job{ID: ptr("drover-sim-plugin"), Name: ptr("drover-sim-plugin"), Type: ptr("service"), Datacenters: []string{"*"},
			TaskGroups: []*api.TaskGroup{{Name: ptr("plugin"), Count: ptr(1), Tasks: []*api.Task{{Name: "sim", Driver: "raw_exec",
				Config:          map[string]any{"command": bin, "args": append(args, "--grpc", "${CSI_ENDPOINT}")},
				CSIPluginConfig: &api.TaskCSIPluginConfig{ID: "drover-sim", Type: api.CSIPluginTypeController, MountDir: "/csi"}}}}}}
		if _, _, err := c.Jobs().Register(job, nil); err != nil {
			t.Fatal(err)
		}
		// Stopped before the agent stops (cleanups run last first), so
		// that no task outlives it.
		t.Cleanup(func() {
			if _, _, err := c.Jobs().Deregister("drover-sim-plugin", false, nil); err != nil {
				t.Error(err)
				return
			}
			simtest.Eventually(t, time.Minute, "the plugin's task to stop", func() bool {
				allocs, _, err := c.Jobs().Allocations("drover-sim-plugin", true, nil)
				if err != nil {
					return false
				}
				for _, al := range allocs {
					if al.ClientStatus != api.AllocClientStatusComplete && al.ClientStatus != api.AllocClientStatusFailed {
						return false
					}
				}
				return true
			})
		})
		simtest.Eventually(t, 90*time.Second, "the plugin to be healthy", func() bool {
			p, _, err := c.CSIPlugins().Info("drover-sim", nil)
			return err == nil && p.ControllersHealthy >= 1
		})
	}
	simtest.Eventually(t, 30*time.Second, "the site's control API", func() bool {
		_, err := sim.NewControl(control).State(t.Context())
		return err == nil
	})
	return control
}

// TestNomadCSIThroughNomad: a test recovery's storage calls at a Nomad
// site, through Nomad's CSI API to the volume's controller plugin (the
// simulator): the Nomad volume of a storage volume is found by its
// external id; a snapshot made through Nomad lands on the storage, and
// asking again under its name returns it; a volume created through Nomad
// from it is a writable copy on the storage, registered in Nomad, and
// asking again returns it; deleting it through Nomad removes it from both,
// and deleting the snapshot removes it. Against the fake and, where a
// nomad binary is installed, a real agent running the simulator as its
// plugin.
func TestNomadCSIThroughNomad(t *testing.T) {
	eachAgent(t, func(t *testing.T, a agent) {
		ctx := ctxT(t)
		control := csiPlugin(t, a)
		state := func() *sim.State {
			st, err := sim.NewControl(control).State(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
		c, err := api.NewClient(&api.Config{Address: a.addr})
		if err != nil {
			t.Fatal(err)
		}
		caps := []*api.CSIVolumeCapability{{AccessMode: api.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: api.CSIVolumeAttachmentModeFilesystem}}
		if _, err := c.CSIVolumes().Register(&api.CSIVolume{ID: "pg-data", Name: "pg-data", ExternalID: "vg-0001-vol-1", PluginID: "drover-sim", RequestedCapabilities: caps}, nil); err != nil {
			t.Fatal(err)
		}
		n := nomadFor(t, a, "")
		w := orchestrators.Workload{Plan: "shop", Site: "west", Name: "volumes", Action: orchestrators.ActionTestRecovery}

		vols, err := n.CSIVolumes(ctx, w, []string{"vg-0001-vol-1", "vg-0001-vol-2"})
		v, ok := vols["vg-0001-vol-1"]
		if err != nil || len(vols) != 1 || !ok || v.ID != "pg-data" || v.PluginID != "drover-sim" || v.Namespace != "default" ||
			len(v.Capabilities) != 1 || v.Capabilities[0] != "single-node-writer/file-system" {
			t.Fatalf("volumes found: %+v, %v", vols, err)
		}
		snap, err := n.CreateSnapshot(ctx, w, v, "drover-test-shop-run-pg")
		if err != nil {
			t.Fatal(err)
		}
		if again, err := n.CreateSnapshot(ctx, w, v, "drover-test-shop-run-pg"); err != nil || again != snap {
			t.Fatalf("the snapshot asked for again: %q, %v; want %q", again, err, snap)
		}
		if st := state(); len(st.Snapshots) != 1 || st.Snapshots[0].ID != snap || st.Snapshots[0].Volume != "vg-0001-vol-1" {
			t.Fatalf("the storage holds snapshots %+v, want %s of vg-0001-vol-1", st.Snapshots, snap)
		}
		ext, err := n.CreateVolume(ctx, w, v, "pg-data-test-run", "drover-test-shop-run-pg-copy", "default", snap)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := n.CreateVolume(ctx, w, v, "pg-data-test-run", "drover-test-shop-run-pg-copy", "default", snap); err != nil || again != ext {
			t.Fatalf("the copy asked for again: %q, %v; want %q", again, err, ext)
		}
		if st := state(); len(st.Clones) != 1 || st.Clones[0].ID != ext || st.Clones[0].Snapshot != snap {
			t.Fatalf("the storage holds copies %+v, want %s of %s", st.Clones, ext, snap)
		}
		if got, _, err := c.CSIVolumes().Info("pg-data-test-run", nil); err != nil || got.ExternalID != ext || got.SnapshotID != snap {
			t.Fatalf("Nomad's copy: %+v, %v", got, err)
		}
		for range 2 {
			if err := n.DeleteVolume(ctx, w, "pg-data-test-run", "default"); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := c.CSIVolumes().Info("pg-data-test-run", nil); err == nil {
			t.Fatal("Nomad still has the deleted copy")
		}
		if err := n.DeleteSnapshot(ctx, w, "drover-sim", snap); err != nil {
			t.Fatal(err)
		}
		if st := state(); len(st.Clones) != 0 || len(st.Snapshots) != 0 {
			t.Fatalf("left on the storage: %+v %+v", st.Clones, st.Snapshots)
		}
	})
}
