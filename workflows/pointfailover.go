package workflows

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/orchestrators"
	"github.com/drover-dr/drover/plans"
)

// A failover to a point in time (FailoverInput.PointAt, drctl failover
// --point): the failover fences and promotes as always, and then brings
// the workloads up on volumes made from a point instead of the promoted
// replicas. The point is picked and held before any side effect (a time
// with no point at To ends the failover before it stops, fences or
// promotes anything), under the failover's run (ActionHolder), and stays
// held once the failover is done: the restored volumes come from its
// snapshots. The promoted replicas, which hold the writes the point does
// not, are kept; nothing here deletes anything.
//
// At a site whose workloads Nomad runs, a volume Nomad knows (a Nomad
// CSI volume whose external id is the plan's volume) is restored through
// Nomad's CSI API, as a Nomad volume beside the replica's, so that Nomad
// can schedule claims on it; the jobs then start with every CSI volume
// source that named a replica naming its restored volume instead
// (plans.NomadRestore). Before the point is held, each job is read
// (orchestrators' CheckRestored): one that mounts a CSI volume the point
// would not restore ends the failover there, with nothing held, stopped,
// fenced or promoted, and its start refuses the same.

// KindRestore is the step of a failover to a point in time that creates
// the volumes from the point's snapshots.
const KindRestore StepKind = "restore"

// RestoredVolume is one volume a failover to a point in time made from
// the point's snapshot: its name, recorded before the call (a retried
// call finds the same volume), and its id once the storage answered.
type RestoredVolume struct {
	Group    string `json:"group"`
	Volume   string `json:"volume"`
	Snapshot string `json:"snapshot"`
	// Bytes is the snapshot's size, asked for as the volume's.
	Bytes int64  `json:"bytes,omitempty"`
	Name  string `json:"name"`
	ID    string `json:"id,omitempty"`
	// Nomad is the replica's Nomad CSI volume, when To's Nomad has one:
	// the volume is then restored through Nomad as Nomad volume NomadID
	// of NomadNamespace (the replica's), named before the call too, and
	// the jobs that mounted the replica's mount it instead.
	Nomad          *orchestrators.CSIVolume `json:"nomad,omitempty"`
	NomadID        string                   `json:"nomadID,omitempty"`
	NomadNamespace string                   `json:"nomadNamespace,omitempty"`
	// Copy is the point's replicated copy of the volume at the site, for
	// a point cut at the primary (PointInTime.ByCopies): it is promoted,
	// with force, in place of a volume made of a snapshot, and registered
	// with Nomad as NomadID when the replica has a Nomad volume.
	Copy string `json:"copy,omitempty"`
}

// Discarded is what a failover to a point in time leaves out: the writes
// between the last sync the point holds (From) and the last sync known
// before the failover, else its start (To). They are on the promoted
// replicas, which are kept.
type Discarded struct {
	From time.Time     `json:"from"`
	To   time.Time     `json:"to"`
	Span time.Duration `json:"span"`
}

// RestoredEntry is the record's note that the plan runs on volumes
// restored from a point in time at Site (volume → restored id), by the
// failover By, at At; its replicas there are kept.
type RestoredEntry struct {
	Point string `json:"point"`
	// Holder is the failover's hold on the point (ActionHolder).
	Holder  string            `json:"holder,omitempty"`
	Site    string            `json:"site"`
	Volumes map[string]string `json:"volumes"`
	// Nomad are the restored volumes Site's Nomad knows, by volume:
	// what a reprotect or failback needs to find them there, and the
	// replica's Nomad volume each stands for in the jobs.
	Nomad map[string]RestoredNomad `json:"nomad,omitempty"`
	By    string                   `json:"by,omitempty"`
	At    time.Time                `json:"at"`
	// Copies: the restored volumes are the point's replicated copies,
	// promoted (a point cut at the primary): their replication is on,
	// and a reprotect demotes and resyncs the other site's copies of them.
	Copies bool `json:"copies,omitempty"`
}

// RestoredNomad is a restored volume's Nomad CSI volume (ID of
// Namespace) and the replica's (Replica) whose place it took in the
// jobs.
type RestoredNomad struct {
	ID        string `json:"id"`
	Namespace string `json:"namespace"`
	Replica   string `json:"replica"`
}

// restoredName is the name a failover's run asks for the volume made from
// a point's snapshot of volume v.
func restoredName(plan, runID, v string) string {
	return "drover-pit-" + plan + "-" + RunTag(runID) + "-" + v
}

// RunTag is the part of a run's id that names what the run makes: its
// last 8 characters. Run ids begin with their time (UUIDv7), so that two
// runs a minute apart share their first characters, never their last:
// a run named by its first would find the volume an earlier run made.
func RunTag(runID string) string {
	if len(runID) > 8 {
		return runID[len(runID)-8:]
	}
	return runID
}

// restoredNomadID is the Nomad volume id a failover's run asks for the
// volume restored in place of Nomad volume v.
func restoredNomadID(v, runID string) string {
	return v + "-pit-" + RunTag(runID)
}

// nomadRestoreCheck, at a site whose workloads Nomad runs, finds the
// Nomad CSI volumes of the plan's volumes there and reads each Nomad job
// as the failover would start it on the volumes restored in their place
// (names only: nothing is made yet); a job that would mount a volume the
// point does not restore refuses. It returns the volumes found, by
// storage id, and what it read; it changes nothing.
func nomadRestoreCheck(ctx workflow.Context, p *plans.Plan, to, runID string, at time.Time) (map[string]orchestrators.CSIVolume, string, error) {
	if p.Site(to).Orchestrator.Nomad == nil {
		return nil, "", nil
	}
	in := activities.NomadCSIInputFor(p, to)
	in.Workload.Action = orchestrators.ActionFailover
	var planned []RestoredVolume
	for _, g := range p.VolumeGroups {
		ref := g.Sites[to]
		for _, v := range append(slices.Clone(ref.Volumes), ref.Members...) {
			in.Volumes = append(in.Volumes, v)
			planned = append(planned, RestoredVolume{Group: g.Name, Volume: v})
		}
	}
	vols, err := call[map[string]orchestrators.CSIVolume](ctx, activities.WorkloadOptions(p, to, in.Workload), wl.FindNomadVolumes, in)
	if err != nil {
		return nil, "", err
	}
	for i := range planned {
		if nv, ok := vols[planned[i].Volume]; ok {
			planned[i].Nomad, planned[i].NomadID = &nv, restoredNomadID(nv.ID, runID)
		}
	}
	rp := restoredPlan(p, to, "at or before "+at.UTC().Format(time.RFC3339), planned)
	read := []string{fmt.Sprintf("%d of %d volume(s) are Nomad CSI volumes, restored through Nomad", len(vols), len(in.Volumes))}
	for _, w := range workloadsOn(rp, to) {
		if w.Sites[to].Nomad == nil {
			continue
		}
		win, err := activities.WorkloadInputFor(rp, to, w.Name, orchestrators.ActionFailover)
		if err != nil {
			return nil, "", err
		}
		out, err := call[activities.WorkloadOutput](ctx, activities.WorkloadOptions(rp, to, win.Workload), wl.CheckRestored, win)
		if err != nil {
			return nil, "", err
		}
		read = append(read, out.Output)
	}
	return vols, strings.Join(read, "; "), nil
}

// holdFailoverPoint picks and holds the point a failover to a point in
// time brings the workloads up on, before any side effect: it fails the
// action at once (no pause: skipping it would start the workloads on the
// replicas the operator asked to go back from).
func holdFailoverPoint(ctx workflow.Context, r *run, in FailoverInput, res *FailoverResult) error {
	p, to := in.Plan, in.To
	s := r.find(pointStep(to).id)
	s.State, s.Start, s.Attempts = StateRunning, workflow.Now(ctx), 1
	out, err := func() (string, error) {
		info := workflow.GetInfo(ctx).WorkflowExecution
		// The jobs first: one that would mount a volume the point does
		// not restore ends the failover with nothing held.
		nomadVols, read, err := nomadRestoreCheck(ctx, p, to, info.RunID, in.PointAt)
		if err != nil {
			return "", err
		}
		res.PointAt = in.PointAt
		pt, err := usePoint(ctx, PointUse{Plan: p.Metadata.Name, Site: to, At: in.PointAt, By: ActionHolder(info.ID, info.RunID)})
		if err != nil {
			return "", err
		}
		res.Point = &pt
		if err := eachPointSnapshot(p, pt, to, func(group string, sn PointSnapshot) {
			v := RestoredVolume{Group: group, Volume: sn.Volume, Snapshot: sn.ID, Bytes: sn.Size,
				Name: restoredName(p.Metadata.Name, info.RunID, sn.Volume)}
			if pt.ByCopies(to) {
				v.Snapshot, v.Name, v.Copy = "", sn.Copy, sn.Copy
			}
			if nv, ok := nomadVols[sn.Volume]; ok {
				v.Nomad, v.NomadID, v.NomadNamespace = &nv, restoredNomadID(nv.ID, info.RunID), nv.Namespace
			}
			res.Restored = append(res.Restored, v)
		}); err != nil {
			return "", err
		}
		out := pointText(pt) + "; held by this failover, and kept held once it is done"
		if read != "" {
			out += "; " + read
		}
		return out, nil
	}()
	s.Output, s.End = out, workflow.Now(ctx)
	if err != nil {
		s.State, s.LastError = StateFailed, ErrorText(err)
		return err
	}
	s.State = StateDone
	return nil
}

// discarded is what a failover from start, with the last sync known
// before it lastSync, leaves out by going back to pt.
func discarded(pt PointInTime, lastSync, start time.Time) Discarded {
	d := Discarded{From: pt.LastSync, To: lastSync}
	if d.From.IsZero() {
		// No sync known at the cut: the point holds at most what was
		// there when it was cut.
		d.From = pt.Taken
	}
	if d.To.IsZero() {
		d.To = start
	}
	d.Span = max(d.To.Sub(d.From), 0)
	return d
}

// restoreFromPoint creates, at To, one volume from each of the point's
// snapshots (through Nomad's CSI API for a volume Nomad knows, else
// through the CSI controller, each under the names recorded in res
// before the call), and records in the plan's record that the plan runs
// on them.
func restoreFromPoint(ctx workflow.Context, r *run, in FailoverInput, res *FailoverResult) error {
	p, to := in.Plan, in.To
	return r.step(ctx, restoreStep(to), true, func(ctx workflow.Context) (string, error) {
		e, err := activities.EndpointFor(p, to, activities.RPCCreateVolume)
		if err != nil {
			return "", err
		}
		made := make([]string, 0, len(res.Restored))
		vols := map[string]string{}
		var nomadVols map[string]RestoredNomad
		for i := range res.Restored {
			v := &res.Restored[i]
			if v.ID == "" {
				id, err := restoreVolume(ctx, p, to, e, v)
				if err != nil {
					return "", err
				}
				v.ID = id
			}
			vols[v.Volume] = v.ID
			if v.NomadID == "" {
				made = append(made, v.Volume+" as "+v.ID)
				continue
			}
			made = append(made, fmt.Sprintf("%s as %s (Nomad volume %s, in place of %s)", v.Volume, v.ID, v.NomadID, v.Nomad.ID))
			if nomadVols == nil {
				nomadVols = map[string]RestoredNomad{}
			}
			nomadVols[v.Volume] = RestoredNomad{ID: v.NomadID, Namespace: v.NomadNamespace, Replica: v.Nomad.ID}
		}
		d := discarded(*res.Point, in.LastSync, r.progress.Start)
		res.Discarded = &d
		copies := res.Point.ByCopies(to)
		if err := r.record(ctx, RecordChange{Restored: &RestoredEntry{Point: res.Point.ID, Site: to, Volumes: vols, Nomad: nomadVols, By: by(ctx), At: workflow.Now(ctx),
			Holder: ActionHolder(workflow.GetInfo(ctx).WorkflowExecution.ID, workflow.GetInfo(ctx).WorkflowExecution.RunID), Copies: copies}}); err != nil {
			return "", err
		}
		how := "restored from point " + res.Point.ID
		if copies {
			how = "of point " + res.Point.ID + " promoted (its copies, cut at " + res.Point.CutAt + ")"
		}
		return fmt.Sprintf("%d volume(s) %s: %s; the workloads start on them. %s; the promoted replicas, which hold those writes, are kept",
			len(made), how, strings.Join(made, ", "), d.Text()), nil
	})
}

// restoreVolume asks for v's volume from its snapshot (the same volume
// again, if it was made): as Nomad volume v.NomadID through Nomad when
// the replica is Nomad's, else from site's storage at e. It returns the
// volume's storage id.
func restoreVolume(ctx workflow.Context, p *plans.Plan, site string, e activities.Endpoint, v *RestoredVolume) (string, error) {
	if v.Copy != "" {
		return v.Copy, promoteCopy(ctx, p, site, v)
	}
	if v.NomadID != "" {
		in := activities.NomadCSIInputFor(p, site)
		in.Workload.Action = orchestrators.ActionFailover
		in.Volume, in.ID, in.Name, in.Namespace, in.Snapshot = *v.Nomad, v.NomadID, v.Name, v.NomadNamespace, v.Snapshot
		return call[string](ctx, activities.WorkloadOptions(p, site, in.Workload), wl.NomadCopy, in)
	}
	out, err := rpcCall[activities.Copy](ctx, activities.CallOptions(p, site, activities.RPCCreateVolume), st.CreateVolume,
		activities.CopyInput{Endpoint: e, Name: v.Name, Snapshot: v.Snapshot, Bytes: v.Bytes})
	return out.ID, err
}

// promoteCopy promotes, with force, the point's copy of v at site (a
// replica whose primary is at the site the point was cut at, lost or
// not), and registers it with site's Nomad when the replica has a Nomad
// volume.
func promoteCopy(ctx workflow.Context, p *plans.Plan, site string, v *RestoredVolume) error {
	g, ok := p.Groups()[v.Group]
	if !ok {
		return fmt.Errorf("plan %q has no volume group %q", p.Metadata.Name, v.Group)
	}
	if err := eachCopyInput(p, site, g, v.Copy, activities.RPCPromoteVolume, true, func(in activities.ReplicationInput) error {
		_, err := rpcCall[struct{}](ctx, activities.CallOptions(p, site, activities.RPCPromoteVolume), st.PromoteVolume, in)
		return err
	}); err != nil {
		return err
	}
	if v.NomadID == "" {
		return nil
	}
	in := activities.NomadCSIInputFor(p, site)
	in.Workload.Action = orchestrators.ActionFailover
	in.Volume, in.ID, in.Name, in.Namespace, in.External = *v.Nomad, v.NomadID, v.NomadID, v.NomadNamespace, v.Copy
	_, err := call[string](ctx, activities.WorkloadOptions(p, site, in.Workload), wl.NomadRegister, in)
	return err
}

// Text says what was discarded.
func (d Discarded) Text() string {
	return fmt.Sprintf("discarded: the writes from %s to %s (%v)", d.From.UTC().Format(time.RFC3339), d.To.UTC().Format(time.RFC3339), d.Span.Round(time.Second))
}

// restoredPlan is p with the exec hooks of its workloads at site given
// the restored volumes of their groups as DROVER_VOLUME_<VOLUME>, and
// the point as DROVER_POINT; and its Nomad jobs there started on the
// restored volumes (nomadRestored).
func restoredPlan(p *plans.Plan, site, point string, restored []RestoredVolume) *plans.Plan {
	rp := *p
	rp.Workloads = slices.Clone(p.Workloads)
	for i, w := range rp.Workloads {
		ref, ok := w.Sites[site]
		if ok && ref.Nomad != nil {
			sites := maps.Clone(w.Sites)
			sites[site] = plans.WorkloadRef{Nomad: nomadRestored(w, ref.Nomad, point, restored)}
			rp.Workloads[i].Sites = sites
			continue
		}
	}
	vols := make([]groupVolume, len(restored))
	for i, v := range restored {
		vols[i] = groupVolume{Group: v.Group, Name: volumeName(p, site, v.Group, v.Volume), ID: v.ID}
	}
	return withVolumeEnv(&rp, site, map[string]string{"DROVER_POINT": point}, vols)
}

func pointStep(site string) stepRef {
	return newRef(KindPoint, "hold the point in time at "+site, site)
}

func restoreStep(site string) stepRef {
	return newRef(KindRestore, "restore the volumes from the point at "+site, site)
}

// nomadRestored is Nomad job nj of workload w started on the restored
// volumes: every Nomad volume restored through Nomad replaced by its
// restored one (whichever group it is in: a job mounting a replica the
// point restored never starts on the replica), and the point and the
// restored volumes of w's groups in the job's meta as DROVER_POINT and
// DROVER_VOLUME_<VOLUME>.
func nomadRestored(w plans.Workload, nj *plans.NomadJob, point string, restored []RestoredVolume) *plans.NomadJob {
	r := &plans.NomadRestore{Point: point, Volumes: map[string]string{}, Meta: map[string]string{"DROVER_POINT": point}}
	for _, v := range restored {
		if v.Nomad != nil && v.NomadID != "" {
			r.Volumes[v.Nomad.ID] = v.NomadID
		}
		if v.ID != "" && (len(w.VolumeGroups) == 0 || slices.Contains(w.VolumeGroups, v.Group)) {
			r.Meta[VolumeEnv(v.Volume)] = v.ID
		}
	}
	if nj.Restore != nil {
		// The job ran on volumes that stood in for the plan's (a
		// reprotect of an earlier point's): one that still names, as
		// Nomad has it, a volume such a stand-in replaced starts on
		// the restored copy of the stand-in too.
		// Fills keys: the order does not matter.
		//workflowcheck:ignore
		for replica, standIn := range nj.Restore.Volumes {
			if to, ok := r.Volumes[standIn]; ok {
				r.Volumes[replica] = to
			}
		}
	}
	rj := *nj
	rj.Restore = r
	return &rj
}
