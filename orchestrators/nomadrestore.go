package orchestrators

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/drover-dr/drover/plans"
)

// ActionFailover is the action of a failover's calls.
const ActionFailover = "failover"

// isRestored: the job starts on the volumes restored from a point in
// time (plans.NomadJob.Restore), whichever action starts it: a failover
// to the point, or, once a reprotect made them the protected ones, any
// action that starts the plan's jobs on them or on their copies (a
// failback, a failover back). Only a worker's own copy of the plan sets
// it (a plan file cannot, and a signed plan given with it fails its
// signature).
func isRestored(w Workload) bool {
	return w.Nomad != nil && w.Nomad.Restore != nil
}

// restoredSpec is the job as a failover to a point in time starts it:
// the job as Nomad has it (else as the job file gives it), running (the
// plan's group counts applied), every CSI volume it mounts replaced by
// the volume restored from the point, and the restore's meta added. A
// job that mounts a CSI volume the point did not restore, or a per_alloc
// one, is refused: started, it would run on a volume the point does not
// hold (the damaged replica, say), beside those it does. A source that
// is already a restored volume (a start repeated after its register) is
// kept. from says where the job came from.
func (n *Nomad) restoredSpec(ctx context.Context, w Workload, op string) (spec *api.Job, from string, err error) {
	nj := w.Nomad
	r := nj.Restore
	j, err := n.info(ctx, w, op, nj.Job)
	if err != nil {
		return nil, "", err
	}
	from = fmt.Sprintf("job %q as Nomad has it", nj.Job)
	if j == nil {
		if nj.JobFile == "" {
			return nil, "", fail(op, w, false, nil, "job %q is not registered on this site and the plan names no jobFile to register", nj.Job)
		}
		if j, err = n.readJobFile(ctx, w, nj, op); err != nil {
			return nil, "", err
		}
		from = fmt.Sprintf("job %q from %s", nj.Job, nj.JobFile)
	}
	s := *j
	s.Stop = new(false)
	s.Meta = maps.Clone(j.Meta)
	if s.Meta == nil {
		s.Meta = map[string]string{}
	}
	maps.Copy(s.Meta, r.Meta)
	restored := slices.Collect(maps.Values(r.Volumes))
	s.TaskGroups, err = withCSISources(j.TaskGroups, func(group string, vr api.VolumeRequest) (string, error) {
		if vr.PerAlloc {
			return "", fail(op, w, false, nil, "job %q group %q mounts per_alloc CSI volume %q: a failover to a point in time cannot restore per-allocation volumes", nj.Job, group, vr.Source)
		}
		switch to, ok := r.Volumes[vr.Source]; {
		case ok:
			return to, nil
		case slices.Contains(restored, vr.Source):
			return vr.Source, nil
		}
		return "", fail(op, w, false, nil, "job %q group %q mounts CSI volume %q, which the point in time (%s) does not restore: started, it would run on a volume the point does not hold; put the volume's storage volume in the plan's volume groups (or take it out of the job) and run the action again",
			nj.Job, group, vr.Source, r.Point)
	})
	if err != nil {
		return nil, "", err
	}
	setCounts(&s, nj.Groups)
	return &s, from, nil
}

// startRestored registers the job on the volumes restored from the
// point (restoredSpec), whether Nomad had it stopped, running (on the
// replicas: it moves to the restored volumes) or not at all.
func (n *Nomad) startRestored(ctx context.Context, w Workload) (string, error) {
	spec, from, err := n.restoredSpec(ctx, w, "start")
	if err != nil {
		return "", err
	}
	if _, _, err := n.client.Jobs().Register(spec, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return "", n.classify("start", w, err)
	}
	return fmt.Sprintf("registered %s to run from point %s; it mounts %s", from, w.Nomad.Restore.Point, mountsOf(spec)), nil
}

// CheckRestored reads the job a failover to a point in time will start
// on the restored volumes and says which it would mount, registering
// nothing; it refuses as the start would (restoredSpec). A failover runs
// it before any side effect.
func (n *Nomad) CheckRestored(ctx context.Context, w Workload) (string, error) {
	if _, err := job(w, "check"); err != nil {
		return "", err
	}
	if !isRestored(w) {
		return "", fail("check", w, false, nil, "the job is not started from a point in time here")
	}
	spec, from, err := n.restoredSpec(ctx, w, "check")
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s would mount %s", from, mountsOf(spec)), nil
}

// restoredSource is the restored volume a job started on restored
// volumes mounts in place of CSI volume src, if any.
func restoredSource(nj *plans.NomadJob, src string) (string, bool) {
	if nj == nil || nj.Restore == nil {
		return "", false
	}
	to, ok := nj.Restore.Volumes[src]
	return to, ok
}

// mountsOf names the CSI volumes a job mounts, "no CSI volume" when
// none.
func mountsOf(spec *api.Job) string {
	var vols []string
	for _, tg := range spec.TaskGroups {
		for _, v := range tg.Volumes {
			if v.Type == "csi" && !slices.Contains(vols, v.Source) {
				vols = append(vols, v.Source)
			}
		}
	}
	if len(vols) == 0 {
		return "no CSI volume"
	}
	slices.Sort(vols)
	return strings.Join(vols, ", ")
}
