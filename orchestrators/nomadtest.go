package orchestrators

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/drover-dr/drover/plans"
)

// ActionTestRecovery is the action of a test recovery's calls: only
// they treat a job as a test copy (plans.NomadJob.Test).
const ActionTestRecovery = "test-recovery"

func isTestCopy(w Workload) bool {
	return w.Nomad != nil && w.Nomad.Test != nil && w.Action == ActionTestRecovery
}

// UseTestNamespace points the adapter's job calls at a test recovery's
// namespace ("" keeps the site's); the production jobs it copies are
// still read from the site's namespace.
func (n *Nomad) UseTestNamespace(ns string) {
	if ns != "" {
		n.client.SetNamespace(ns)
		n.testNamespace = ns
	}
}

// jobNamespace is the namespace Nomad registers a job in through this
// adapter: the job's own, else the one its calls name (the test
// namespace, for a test recovery's copies), as Nomad chooses.
func (n *Nomad) jobNamespace(spec *api.Job) string {
	switch {
	case spec.Namespace != nil && *spec.Namespace != "":
		return *spec.Namespace
	case n.testNamespace != "":
		return n.testNamespace
	}
	return n.namespace
}

// startTestCopy registers a test recovery's copy of a production job:
// the job as Nomad runs it (else as the job file gives it) under the
// copy's id, in the test namespace, every CSI volume it mounts replaced
// by its copy. A job that mounts a CSI volume the test did not copy is
// refused: its copy would write on production. A copy already
// registered and not stopped is left as it is.
func (n *Nomad) startTestCopy(ctx context.Context, w Workload, nj *plans.NomadJob) (string, error) {
	t := nj.Test
	j, err := n.info(ctx, w, "start", nj.Job)
	if err != nil {
		return "", err
	}
	if j != nil && (j.Stop == nil || !*j.Stop) {
		return fmt.Sprintf("test copy %q of job %q is registered", nj.Job, t.Source), nil
	}
	src, _, err := n.client.Jobs().Info(t.Source, (&api.QueryOptions{Namespace: n.namespace}).WithContext(ctx))
	from := fmt.Sprintf("job %q as Nomad runs it", t.Source)
	switch {
	case isStatus(err, http.StatusNotFound) && nj.JobFile != "":
		file := *nj
		file.Job = t.Source
		if src, err = n.readJobFile(ctx, w, &file, "start"); err != nil {
			return "", err
		}
		from = fmt.Sprintf("job %q from %s", t.Source, nj.JobFile)
	case isStatus(err, http.StatusNotFound):
		return "", fail("start", w, false, err, "job %q to copy for the test is not registered on this site and the plan names no jobFile", t.Source)
	case err != nil:
		return "", n.classify("start", w, err)
	}
	spec, err := testCopyOf(src, nj)
	if err != nil {
		return "", fail("start", w, false, nil, "%v", err)
	}
	if _, _, err := n.client.Jobs().Register(spec, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return "", n.classify("start", w, err)
	}
	var pairs []string
	for _, k := range sortedKeys(boolKeys(t.Volumes)) {
		pairs = append(pairs, k+" → "+t.Volumes[k])
	}
	vols := "it mounts no CSI volume"
	if len(pairs) > 0 {
		vols = "on volumes " + strings.Join(pairs, ", ")
	}
	return fmt.Sprintf("registered test copy %q of %s in namespace %q, %s", nj.Job, from, n.jobNamespace(spec), vols), nil
}

// testCopyOf is src as a test copy: renamed, in the test namespace,
// running (the plan's group counts applied), its CSI volumes replaced by
// their copies; the indexes and status of the source dropped.
func testCopyOf(src *api.Job, nj *plans.NomadJob) (*api.Job, error) {
	t := nj.Test
	spec := *src
	spec.ID, spec.Name = new(nj.Job), new(nj.Job)
	if t.Namespace != "" {
		spec.Namespace = new(t.Namespace)
	} else {
		spec.Namespace = nil
	}
	spec.Stop = new(false)
	spec.Status, spec.StatusDescription, spec.Stable, spec.Version = nil, nil, nil, nil
	spec.CreateIndex, spec.ModifyIndex, spec.JobModifyIndex, spec.SubmitTime = nil, nil, nil, nil
	var err error
	spec.TaskGroups, err = withCSISources(src.TaskGroups, func(group string, vr api.VolumeRequest) (string, error) {
		if vr.PerAlloc {
			return "", fmt.Errorf("job %q group %q mounts per_alloc CSI volume %q: a test recovery cannot copy per-allocation volumes", t.Source, group, vr.Source)
		}
		cp, ok := t.Volumes[vr.Source]
		if !ok {
			return "", fmt.Errorf("job %q group %q mounts CSI volume %q, which is in none of the plan's volume groups: its test copy would write on production", t.Source, group, vr.Source)
		}
		return cp, nil
	})
	if err != nil {
		return nil, err
	}
	setCounts(&spec, nj.Groups)
	return &spec, nil
}

// withCSISources copies a job's task groups with each CSI volume's source
// as source says (an error refuses the job); other volumes as they are.
func withCSISources(groups []*api.TaskGroup, source func(group string, vr api.VolumeRequest) (string, error)) ([]*api.TaskGroup, error) {
	out := make([]*api.TaskGroup, len(groups))
	for i, tg := range groups {
		c := *tg
		c.Volumes = map[string]*api.VolumeRequest{}
		for name, v := range tg.Volumes {
			vr := *v
			if vr.Type == "csi" {
				to, err := source(*tg.Name, vr)
				if err != nil {
					return nil, err
				}
				vr.Source = to
			}
			c.Volumes[name] = &vr
		}
		out[i] = &c
	}
	return out, nil
}

func boolKeys(m map[string]string) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

// purgeTestCopy removes a stopped test copy from Nomad altogether.
func (n *Nomad) purgeTestCopy(ctx context.Context, w Workload, nj *plans.NomadJob, last Stopped) (Stopped, error) {
	_, _, err := n.client.Jobs().Deregister(nj.Job, true, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil && !isStatus(err, http.StatusNotFound) {
		return last, n.classify("stop", w, err)
	}
	last.Detail += fmt.Sprintf("; test copy %q purged", nj.Job)
	return last, nil
}

// CSIVolume is a Nomad CSI volume as a test recovery needs it: where it
// is, which plugin serves it, and how jobs claim it.
type CSIVolume struct {
	ID             string   `json:"id"`
	Namespace      string   `json:"namespace"`
	ExternalID     string   `json:"externalID"`
	PluginID       string   `json:"pluginID"`
	AccessMode     string   `json:"accessMode,omitempty"`
	AttachmentMode string   `json:"attachmentMode,omitempty"`
	Capabilities   []string `json:"capabilities,omitempty"` // "accessMode/attachmentMode"
}

// CSIVolumes finds the Nomad CSI volumes (of the site's namespace) whose
// external ids, the storage's volume ids, are among ids.
func (n *Nomad) CSIVolumes(ctx context.Context, w Workload, ids []string) (map[string]CSIVolume, error) {
	stubs, _, err := n.client.CSIVolumes().List((&api.QueryOptions{Namespace: n.namespace}).WithContext(ctx))
	if err != nil {
		return nil, n.classify("find volumes", w, err)
	}
	out := map[string]CSIVolume{}
	for _, s := range stubs {
		if !slices.Contains(ids, s.ExternalID) {
			continue
		}
		if prev, dup := out[s.ExternalID]; dup {
			return nil, fail("find volumes", w, false, nil, "storage volume %q is registered in Nomad twice, as %q and %q", s.ExternalID, prev.ID, s.ID)
		}
		v, _, err := n.client.CSIVolumes().Info(s.ID, (&api.QueryOptions{Namespace: s.Namespace}).WithContext(ctx))
		if err != nil {
			return nil, n.classify("find volumes", w, err)
		}
		cv := CSIVolume{ID: v.ID, Namespace: v.Namespace, ExternalID: v.ExternalID, PluginID: v.PluginID,
			AccessMode: string(v.AccessMode), AttachmentMode: string(v.AttachmentMode)}
		for _, c := range v.RequestedCapabilities {
			cv.Capabilities = append(cv.Capabilities, string(c.AccessMode)+"/"+string(c.AttachmentMode))
		}
		sort.Strings(cv.Capabilities)
		out[s.ExternalID] = cv
	}
	return out, nil
}

// CreateSnapshot snapshots a Nomad CSI volume under name through Nomad
// (which asks the volume's controller plugin) and returns the snapshot's
// id. The CSI spec makes a repeated name return the same snapshot.
func (n *Nomad) CreateSnapshot(ctx context.Context, w Workload, v CSIVolume, name string) (string, error) {
	resp, _, err := n.client.CSIVolumes().CreateSnapshot(&api.CSISnapshot{SourceVolumeID: v.ID, PluginID: v.PluginID, Name: name},
		(&api.WriteOptions{Namespace: v.Namespace}).WithContext(ctx))
	if err != nil {
		return "", n.classify("snapshot", w, err)
	}
	if resp == nil || len(resp.Snapshots) != 1 || resp.Snapshots[0].ID == "" {
		return "", fail("snapshot", w, true, nil, "Nomad answered the snapshot of volume %q without one", v.ID)
	}
	return resp.Snapshots[0].ID, nil
}

// CreateVolume creates volume id in namespace ns from a snapshot, through
// Nomad, registered there with the source volume's plugin and
// capabilities, and returns its external id. A volume id already
// registered is returned as it is, so a repeat after a lost answer finds
// the first.
func (n *Nomad) CreateVolume(ctx context.Context, w Workload, src CSIVolume, id, name, ns, snapshot string) (string, error) {
	if v, _, err := n.client.CSIVolumes().Info(id, (&api.QueryOptions{Namespace: ns}).WithContext(ctx)); err == nil {
		if v.SnapshotID != "" && v.SnapshotID != snapshot {
			return "", fail("copy", w, false, nil, "Nomad volume %q exists already, made from snapshot %q, not %q", id, v.SnapshotID, snapshot)
		}
		return v.ExternalID, nil
	} else if !isStatus(err, http.StatusNotFound) {
		return "", n.classify("copy", w, err)
	}
	vol := &api.CSIVolume{ID: id, Name: name, Namespace: ns, PluginID: src.PluginID, SnapshotID: snapshot, RequestedCapabilities: capabilitiesOf(src)}
	got, _, err := n.client.CSIVolumes().Create(vol, (&api.WriteOptions{Namespace: ns}).WithContext(ctx))
	if err != nil {
		return "", n.classify("copy", w, err)
	}
	if len(got) != 1 || got[0].ExternalID == "" {
		return "", fail("copy", w, true, nil, "Nomad answered the creation of volume %q without it", id)
	}
	return got[0].ExternalID, nil
}

// capabilitiesOf are the capabilities a volume made or registered in
// place of src requests: src's, else one-node writer on a file system.
func capabilitiesOf(src CSIVolume) []*api.CSIVolumeCapability {
	var out []*api.CSIVolumeCapability
	for _, c := range src.Capabilities {
		am, at, _ := strings.Cut(c, "/")
		out = append(out, &api.CSIVolumeCapability{AccessMode: api.CSIVolumeAccessMode(am), AttachmentMode: api.CSIVolumeAttachmentMode(at)})
	}
	if len(out) == 0 {
		out = []*api.CSIVolumeCapability{{AccessMode: api.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: api.CSIVolumeAttachmentModeFilesystem}}
	}
	return out
}

// RegisterVolume registers the storage's existing volume external as
// Nomad volume id of namespace ns, named name, with the plugin and
// capabilities of src (the Nomad volume it stands in for), so that jobs
// can claim it; Nomad asks the plugin's controller to validate it first.
// A volume id already registered for external is left as it is (a
// repeat after a lost answer finds the first); one registered for
// another storage volume is refused, never changed.
func (n *Nomad) RegisterVolume(ctx context.Context, w Workload, src CSIVolume, id, name, ns, external string) (string, error) {
	if v, _, err := n.client.CSIVolumes().Info(id, (&api.QueryOptions{Namespace: ns}).WithContext(ctx)); err == nil {
		if v.ExternalID != external {
			return "", fail("register", w, false, nil, "Nomad volume %q of namespace %q exists already, for storage volume %q, not %q", id, ns, v.ExternalID, external)
		}
		return fmt.Sprintf("Nomad volume %q of namespace %q is registered for storage volume %q", id, ns, external), nil
	} else if !isStatus(err, http.StatusNotFound) {
		return "", n.classify("register", w, err)
	}
	vol := &api.CSIVolume{ID: id, Name: name, Namespace: ns, ExternalID: external, PluginID: src.PluginID, RequestedCapabilities: capabilitiesOf(src)}
	if _, err := n.client.CSIVolumes().Register(vol, (&api.WriteOptions{Namespace: ns}).WithContext(ctx)); err != nil {
		return "", n.classify("register", w, err)
	}
	return fmt.Sprintf("registered storage volume %q as Nomad volume %q of namespace %q (plugin %s, as %q)", external, id, ns, src.PluginID, src.ID), nil
}

// DeleteVolume deletes Nomad volume id of namespace ns through Nomad,
// which asks the plugin to delete it and deregisters it; a volume Nomad
// no longer knows is gone.
func (n *Nomad) DeleteVolume(ctx context.Context, w Workload, id, ns string) error {
	if _, _, err := n.client.CSIVolumes().Info(id, (&api.QueryOptions{Namespace: ns}).WithContext(ctx)); isStatus(err, http.StatusNotFound) {
		return nil
	}
	err := n.client.CSIVolumes().DeleteOpts(&api.CSIVolumeDeleteRequest{ExternalVolumeID: id}, (&api.WriteOptions{Namespace: ns}).WithContext(ctx))
	if err != nil && !isStatus(err, http.StatusNotFound) {
		return n.classify("delete copy", w, err)
	}
	return nil
}

// DeleteSnapshot deletes a snapshot through Nomad and the plugin that
// made it; the CSI spec makes a gone snapshot's deletion succeed.
func (n *Nomad) DeleteSnapshot(ctx context.Context, w Workload, plugin, id string) error {
	err := n.client.CSIVolumes().DeleteSnapshot(&api.CSISnapshot{ID: id, PluginID: plugin}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil && !isStatus(err, http.StatusNotFound) {
		return n.classify("delete snapshot", w, err)
	}
	return nil
}
