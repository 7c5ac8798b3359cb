package workflows

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
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
	Name     string `json:"name"`
	ID       string `json:"id,omitempty"`
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
	By      string            `json:"by,omitempty"`
	At      time.Time         `json:"at"`
}

// restoredName is the name a failover's run asks for the volume made from
// a point's snapshot of volume v.
func restoredName(plan, runID, v string) string {
	if len(runID) > 8 {
		runID = runID[:8]
	}
	return "drover-pit-" + plan + "-" + runID + "-" + v
}

// pointCheck refuses a failover to a point in time that this build cannot
// do: the workloads at a Nomad site would need the restored volumes
// registered with Nomad.
func pointCheck(p *plans.Plan, to string) error {
	nomad := p.Site(to).Orchestrator.Nomad != nil
	for _, w := range workloadsOn(p, to) {
		nomad = nomad || w.Sites[to].Nomad != nil
	}
	if nomad {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"a failover to a point in time to %s, whose workloads Nomad runs, is not there yet: fail over without --point, or restore by hand from the point's snapshots", to), ErrPreflight, nil)
	}
	return nil
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
		if err := pointCheck(p, to); err != nil {
			return "", err
		}
		info := workflow.GetInfo(ctx).WorkflowExecution
		res.PointAt = in.PointAt
		pt, err := usePoint(ctx, PointUse{Plan: p.Metadata.Name, Site: to, At: in.PointAt, By: ActionHolder(info.ID, info.RunID)})
		if err != nil {
			return "", err
		}
		res.Point = &pt
		if err := eachPointSnapshot(p, pt, func(group string, sn PointSnapshot) {
			res.Restored = append(res.Restored, RestoredVolume{Group: group, Volume: sn.Volume, Snapshot: sn.ID,
				Name: restoredName(p.Metadata.Name, info.RunID, sn.Volume)})
		}); err != nil {
			return "", err
		}
		return pointText(pt) + "; held by this failover, and kept held once it is done", nil
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
// snapshots (through the CSI controller, each under the name recorded in
// res before the call), and records in the plan's record that the plan
// runs on them.
func restoreFromPoint(ctx workflow.Context, r *run, in FailoverInput, res *FailoverResult) error {
	p, to := in.Plan, in.To
	return r.step(ctx, restoreStep(to), true, func(ctx workflow.Context) (string, error) {
		e, err := activities.EndpointFor(p, to, activities.RPCCreateVolume)
		if err != nil {
			return "", err
		}
		made := make([]string, 0, len(res.Restored))
		vols := map[string]string{}
		for i := range res.Restored {
			v := &res.Restored[i]
			if v.ID == "" {
				out, err := rpcCall[activities.Copy](ctx, activities.CallOptions(p, to, activities.RPCCreateVolume), st.CreateVolume,
					activities.CopyInput{Endpoint: e, Name: v.Name, Snapshot: v.Snapshot})
				if err != nil {
					return "", err
				}
				v.ID = out.ID
			}
			made = append(made, v.Volume+" as "+v.ID)
			vols[v.Volume] = v.ID
		}
		d := discarded(*res.Point, in.LastSync, r.progress.Start)
		res.Discarded = &d
		if err := r.record(ctx, RecordChange{Restored: &RestoredEntry{Point: res.Point.ID, Site: to, Volumes: vols, By: by(ctx), At: workflow.Now(ctx),
			Holder: ActionHolder(workflow.GetInfo(ctx).WorkflowExecution.ID, workflow.GetInfo(ctx).WorkflowExecution.RunID)}}); err != nil {
			return "", err
		}
		return fmt.Sprintf("%d volume(s) restored from point %s: %s; the workloads start on them. %s; the promoted replicas, which hold those writes, are kept",
			len(made), res.Point.ID, strings.Join(made, ", "), d.Text()), nil
	})
}

// Text says what was discarded.
func (d Discarded) Text() string {
	return fmt.Sprintf("discarded: the writes from %s to %s (%v)", d.From.UTC().Format(time.RFC3339), d.To.UTC().Format(time.RFC3339), d.Span.Round(time.Second))
}

// restoredPlan is p with the exec hooks of its workloads at site given
// the restored volumes of their groups as DROVER_VOLUME_<VOLUME>, and
// the point as DROVER_POINT.
func restoredPlan(p *plans.Plan, site, point string, restored []RestoredVolume) *plans.Plan {
	rp := *p
	rp.Workloads = slices.Clone(p.Workloads)
	for i, w := range rp.Workloads {
		ref, ok := w.Sites[site]
		if !ok || ref.Exec == nil {
			continue
		}
		h := *ref.Exec
		h.Env = maps.Clone(h.Env)
		if h.Env == nil {
			h.Env = map[string]string{}
		}
		h.Env["DROVER_POINT"] = point
		for _, v := range restored {
			if len(w.VolumeGroups) == 0 || slices.Contains(w.VolumeGroups, v.Group) {
				h.Env["DROVER_VOLUME_"+envVolume(p, site, v.Group, v.Volume)] = v.ID
			}
		}
		sites := maps.Clone(w.Sites)
		ref.Exec = &h
		sites[site] = ref
		rp.Workloads[i].Sites = sites
	}
	return &rp
}

func pointStep(site string) stepRef {
	return newRef(KindPoint, "hold the point in time at "+site, site)
}

func restoreStep(site string) stepRef {
	return newRef(KindRestore, "restore the volumes from the point at "+site, site)
}
