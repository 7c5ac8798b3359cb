package orchestrators_test

import (
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/drover-dr/drover/orchestrators"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
)

// TestNomadRestoredJob: a failover to a point in time at a Nomad site
// (the simulator its CSI controller plugin). The replica's Nomad volume
// pg-data is snapshotted and a volume restored from the snapshot through
// Nomad as pg-data-pit-run12345. Job db, whose file mounts pg-data, is
// read first (CheckRestored: it would mount the restored volume, and
// nothing is registered), then started: Nomad has it mounting the
// restored volume, never pg-data, with the point in its meta; started
// again (a retried start) it stays on it. On the fake, which fails an
// allocation whose CSI volume is missing, the job becomes healthy on the
// restored volume. A job that mounts a CSI volume the point did not
// restore is refused by both the check and the start, and not
// registered. Against the fake and, where a nomad binary is installed, a
// real agent (which, with no CSI node plugin, cannot place the job: the
// registered job is what is checked there).
func TestNomadRestoredJob(t *testing.T) {
	eachAgent(t, func(t *testing.T, a agent) {
		control := csiPlugin(t, a)
		ctx := ctxT(t)
		c, err := api.NewClient(&api.Config{Address: a.addr})
		if err != nil {
			t.Fatal(err)
		}
		caps := []*api.CSIVolumeCapability{{AccessMode: api.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: api.CSIVolumeAttachmentModeFilesystem}}
		if _, err := c.CSIVolumes().Register(&api.CSIVolume{ID: "pg-data", Name: "pg-data", ExternalID: "vg-0001-vol-1", PluginID: "drover-sim", RequestedCapabilities: caps}, nil); err != nil {
			t.Fatal(err)
		}
		n := nomadFor(t, a, "")
		vw := orchestrators.Workload{Plan: "shop", Site: "west", Name: "volumes", Action: orchestrators.ActionFailover}
		vols, err := n.CSIVolumes(ctx, vw, []string{"vg-0001-vol-1"})
		if err != nil || len(vols) != 1 {
			t.Fatalf("volumes found: %+v, %v", vols, err)
		}
		snap, err := n.CreateSnapshot(ctx, vw, vols["vg-0001-vol-1"], "drover-point-shop-1")
		if err != nil {
			t.Fatal(err)
		}
		ext, err := n.CreateVolume(ctx, vw, vols["vg-0001-vol-1"], "pg-data-pit-run12345", "drover-pit-shop-run12345-vg-0001-vol-1", "default", snap)
		if err != nil {
			t.Fatal(err)
		}
		st, err := sim.NewControl(control).State(ctx)
		if err != nil || len(st.Clones) != 1 || st.Clones[0].ID != ext || st.Clones[0].Snapshot != snap {
			t.Fatalf("the storage holds %+v (%v); want the restored volume %s from %s", st, err, ext, snap)
		}

		j := serviceJob("db", 1, "/bin/sleep")
		j.TaskGroups[0].Volumes = map[string]*api.VolumeRequest{"data": {Name: "data", Type: "csi", Source: "pg-data", AccessMode: "single-node-writer", AttachmentMode: "file-system"}}
		restore := &plans.NomadRestore{Point: "20261127T120000Z", Volumes: map[string]string{"pg-data": "pg-data-pit-run12345"},
			Meta: map[string]string{"DROVER_POINT": "20261127T120000Z", "DROVER_VOLUME_VG_0001_VOL_1": ext}}
		w := orchestrators.Workload{Plan: "shop", Site: "west", Name: "db", Action: orchestrators.ActionFailover,
			Nomad: &plans.NomadJob{Job: "db", JobFile: jobFile(t, j), Restore: restore}}
		registered := func(id string) *api.Job {
			got, _, err := c.Jobs().Info(id, nil)
			if err != nil {
				return nil
			}
			return got
		}

		out, err := n.CheckRestored(ctx, w)
		if err != nil || !strings.HasSuffix(out, "would mount pg-data-pit-run12345") {
			t.Fatalf("the check said %q, %v", out, err)
		}
		if registered("db") != nil {
			t.Fatal("the check registered the job")
		}
		for i := range 2 {
			out = retryTemporary(t, "start the job from the point", func() (string, error) { return n.StartWorkload(ctx, w) })
			if !strings.Contains(out, "to run from point 20261127T120000Z; it mounts pg-data-pit-run12345") {
				t.Fatalf("start %d said %q", i, out)
			}
			got := registered("db")
			if got == nil || got.TaskGroups[0].Volumes["data"].Source != "pg-data-pit-run12345" || got.Meta["DROVER_POINT"] != "20261127T120000Z" ||
				got.Meta["DROVER_VOLUME_VG_0001_VOL_1"] != ext {
				t.Fatalf("after start %d Nomad has job db %+v", i, got)
			}
		}
		if a.fake != nil {
			waitHealth(t, n, w, "the job to be healthy on the restored volume", healthy)
		}

		// A job that mounts a volume the point did not restore.
		o := serviceJob("other", 1, "/bin/sleep")
		o.TaskGroups[0].Volumes = map[string]*api.VolumeRequest{
			"data":    {Name: "data", Type: "csi", Source: "pg-data", AccessMode: "single-node-writer", AttachmentMode: "file-system"},
			"scratch": {Name: "scratch", Type: "csi", Source: "scratch", AccessMode: "single-node-writer", AttachmentMode: "file-system"}}
		ow := orchestrators.Workload{Plan: "shop", Site: "west", Name: "other", Action: orchestrators.ActionFailover,
			Nomad: &plans.NomadJob{Job: "other", JobFile: jobFile(t, o), Restore: restore}}
		for what, op := range map[string]func() (string, error){
			"check": func() (string, error) { return n.CheckRestored(ctx, ow) },
			"start": func() (string, error) { return n.StartWorkload(ctx, ow) },
		} {
			_, err := op()
			if err == nil || orchestrators.IsTemporary(err) || !strings.Contains(err.Error(), `mounts CSI volume "scratch", which the point in time (20261127T120000Z) does not restore`) {
				t.Fatalf("the %s of a job on an unrestored volume: %v", what, err)
			}
		}
		if registered("other") != nil {
			t.Fatal("the job on an unrestored volume was registered")
		}
	})
}
