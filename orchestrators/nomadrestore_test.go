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

// TestNomadRegisterStandIn: a reprotect of restored volumes at a Nomad
// site (the simulator its CSI controller plugin). Replica pg-data is
// registered as a block device; a volume restored from its snapshot is
// left in the storage and unknown to Nomad, as the copy a reprotect
// finds at the returned site is. RegisterVolume registers it as
// pg-data-pit-rp123456 with pg-data's plugin, namespace and
// capabilities; repeated (a retried call), it finds the same volume and
// writes nothing; asked to put another storage volume under that id, it
// refuses, for good, and changes nothing. A job whose file mounts
// pg-data, started by a failback (not a failover) with the stand-in's
// mapping, is registered mounting the stand-in, never pg-data, and the
// stand-in in its meta; DescribeWorkload names the stand-in as the
// volume it claims, registered. A job that also mounts a CSI volume no
// stand-in replaces is refused at the failback's start too. Against the
// fake and, where a nomad binary is installed, a real agent (no CSI node
// plugin there: the registered volume and job are what is checked).
func TestNomadRegisterStandIn(t *testing.T) {
	eachAgent(t, func(t *testing.T, a agent) {
		csiPlugin(t, a)
		ctx := ctxT(t)
		c, err := api.NewClient(&api.Config{Address: a.addr})
		if err != nil {
			t.Fatal(err)
		}
		block := []*api.CSIVolumeCapability{{AccessMode: api.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: api.CSIVolumeAttachmentModeBlockDevice}}
		if _, err := c.CSIVolumes().Register(&api.CSIVolume{ID: "pg-data", Name: "pg-data", ExternalID: "vg-0001-vol-1", PluginID: "drover-sim", RequestedCapabilities: block}, nil); err != nil {
			t.Fatal(err)
		}
		n := nomadFor(t, a, "")
		vw := orchestrators.Workload{Plan: "shop", Site: "east", Name: "volumes", Action: "reprotect"}
		vols, err := n.CSIVolumes(ctx, vw, []string{"vg-0001-vol-1"})
		if err != nil || len(vols) != 1 {
			t.Fatalf("volumes found: %+v, %v", vols, err)
		}
		replica := vols["vg-0001-vol-1"]
		snap, err := n.CreateSnapshot(ctx, vw, replica, "drover-point-shop-1")
		if err != nil {
			t.Fatal(err)
		}
		copyID, err := n.CreateVolume(ctx, vw, replica, "made", "drover-pit-shop-run12345-vg-0001-vol-1", "default", snap)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.CSIVolumes().Deregister("made", false, nil); err != nil {
			t.Fatal(err)
		}

		const id = "pg-data-pit-rp123456"
		out, err := n.RegisterVolume(ctx, vw, replica, id, id, "default", copyID)
		if err != nil || !strings.Contains(out, "registered storage volume") {
			t.Fatalf("the register said %q, %v", out, err)
		}
		v, _, err := c.CSIVolumes().Info(id, nil)
		if err != nil || v.ExternalID != copyID || v.PluginID != "drover-sim" || v.Namespace != "default" ||
			len(v.RequestedCapabilities) != 1 || *v.RequestedCapabilities[0] != *block[0] {
			t.Fatalf("Nomad has %s as %+v (%v); want storage volume %s with pg-data's plugin and capabilities", id, v, err, copyID)
		}
		t.Logf("registered %s: external %s, plugin %s, capabilities %s/%s, schedulable %v", id, v.ExternalID, v.PluginID,
			v.RequestedCapabilities[0].AccessMode, v.RequestedCapabilities[0].AttachmentMode, v.Schedulable)
		out, err = n.RegisterVolume(ctx, vw, replica, id, id, "default", copyID)
		if err != nil || !strings.Contains(out, "is registered for storage volume") {
			t.Fatalf("a repeated register said %q, %v", out, err)
		}
		again, _, err := c.CSIVolumes().Info(id, nil)
		if err != nil || again.ModifyIndex != v.ModifyIndex {
			t.Fatalf("the repeated register wrote the volume again: %+v, %v", again, err)
		}
		_, err = n.RegisterVolume(ctx, vw, replica, id, id, "default", "vg-0001-vol-1")
		if err == nil || orchestrators.IsTemporary(err) || !strings.Contains(err.Error(), `exists already, for storage volume "`+copyID+`"`) {
			t.Fatalf("a register of another volume under %s: %v", id, err)
		}
		if after, _, err := c.CSIVolumes().Info(id, nil); err != nil || after.ExternalID != copyID || after.ModifyIndex != v.ModifyIndex {
			t.Fatalf("the refused register changed %s: %+v, %v", id, after, err)
		}

		j := serviceJob("db", 1, "/bin/sleep")
		j.TaskGroups[0].Volumes = map[string]*api.VolumeRequest{"data": {Name: "data", Type: "csi", Source: "pg-data", AccessMode: "single-node-writer", AttachmentMode: "block-device"}}
		standIn := &plans.NomadRestore{Point: "20261127T120000Z", Volumes: map[string]string{"pg-data": id},
			Meta: map[string]string{"DROVER_VOLUME_VG_0001_VOL_1": copyID}}
		w := orchestrators.Workload{Plan: "shop", Site: "east", Name: "db", Action: "failback",
			Nomad: &plans.NomadJob{Job: "db", JobFile: jobFile(t, j), Restore: standIn}}
		out = retryTemporary(t, "start the job on the stand-in", func() (string, error) { return n.StartWorkload(ctx, w) })
		if !strings.Contains(out, "it mounts "+id) {
			t.Fatalf("the failback's start said %q", out)
		}
		got, _, err := c.Jobs().Info("db", nil)
		if err != nil || got.TaskGroups[0].Volumes["data"].Source != id || got.Meta["DROVER_VOLUME_VG_0001_VOL_1"] != copyID {
			t.Fatalf("Nomad has job db %+v (%v)", got, err)
		}
		d, err := n.DescribeWorkload(ctx, w)
		if err != nil || len(d.Volumes) != 1 || d.Volumes[0].ID != id || !d.Volumes[0].Registered || d.Volumes[0].ExternalID != copyID {
			t.Fatalf("described %+v, %v", d, err)
		}

		o := serviceJob("other", 1, "/bin/sleep")
		o.TaskGroups[0].Volumes = map[string]*api.VolumeRequest{
			"data":    {Name: "data", Type: "csi", Source: "pg-data", AccessMode: "single-node-writer", AttachmentMode: "block-device"},
			"scratch": {Name: "scratch", Type: "csi", Source: "scratch", AccessMode: "single-node-writer", AttachmentMode: "file-system"}}
		ow := orchestrators.Workload{Plan: "shop", Site: "east", Name: "other", Action: "failback",
			Nomad: &plans.NomadJob{Job: "other", JobFile: jobFile(t, o), Restore: standIn}}
		if _, err := n.StartWorkload(ctx, ow); err == nil || orchestrators.IsTemporary(err) || !strings.Contains(err.Error(), `mounts CSI volume "scratch"`) {
			t.Fatalf("the failback's start of a job on a volume no stand-in replaces: %v", err)
		}
		if _, _, err := c.Jobs().Info("other", nil); err == nil {
			t.Fatal("the job on a volume no stand-in replaces was registered")
		}
	})
}
