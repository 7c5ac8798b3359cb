package workflows

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/plans"
)

// Volumes that stand in for the plan's. A failover to a point in time
// runs the workloads on volumes restored from the point's snapshots; a
// reprotect then makes them the protected ones: it enables their
// replication toward the returned site, whose storage creates their
// copies there (under the same volume ids, as the simulator's and RBD's
// mirroring name a mirrored image), and records in the plan's record
// which volume stands in for each volume the plan names, per group and
// site (ReplacedEntry). From then on every action and protection acts
// on those volumes instead (replacedPlan, applied by trust once the
// plan's signature has checked): the plan file keeps naming the volumes
// it always named, and a workload's exec hooks find the volume they
// run on as DROVER_VOLUME_<VOLUME> (VOLUME the name the plan gives it at
// that site). The replicas they replaced, which hold the damage the
// failover went back from, are kept (ReplacedEntry.Kept): nothing
// deletes, resyncs or promotes them.

// StandIn is one volume standing in for the volume the plan names
// (Name) at a site: the id actions use instead.
type StandIn struct {
	Name string `json:"name"`
	ID   string `json:"id"`
}

// ReplacedEntry is the record's note that the plan's groups run on the
// volumes a failover restored from Point and a reprotect (By, at At)
// made the protected ones: Groups maps a group, then a site, to its
// volumes there; Kept the replicas they replaced (group, site, the ref
// as the plan gave it then), kept untouched.
type ReplacedEntry struct {
	Point string `json:"point"`
	// Site is where the failover restored the volumes: its promoted
	// replicas there are the primaries of the kept ones. Holder is the
	// failover's hold on the point, until drctl release.
	Site   string                               `json:"site"`
	Holder string                               `json:"holder,omitempty"`
	By     string                               `json:"by,omitempty"`
	At     time.Time                            `json:"at"`
	Groups map[string]map[string][]StandIn      `json:"groups"`
	Kept   map[string]map[string]plans.GroupRef `json:"kept,omitempty"`
}

// RecordView is what an action reads of its plan's record when it
// starts, once the plan's signature has checked: the volumes that stand
// in for the plan's, and a failover's note that the plan runs on
// restored ones.
type RecordView struct {
	Replaced *ReplacedEntry `json:"replaced,omitempty"`
	Restored *RestoredEntry `json:"restored,omitempty"`
}

// recordViewVersion is the change that brought the record's view to
// Protect, which auto-upgrades mid-run: a run from before it has no
// local activity where trust now reads the view.
const recordViewVersion = "record-view"

// readView reads the plan's record for trust: only the workflows that
// act on volumes, and Protect from the patch on. A worker that cannot
// read the record (no client) acts on the plan as written.
func readView(ctx workflow.Context, p *plans.Plan) (RecordView, error) {
	switch workflow.GetInfo(ctx).WorkflowType.Name {
	case names.Protect:
		if workflow.GetVersion(ctx, recordViewVersion, workflow.DefaultVersion, 1) < 1 {
			return RecordView{}, nil
		}
	case names.PlanRecorder:
		return RecordView{}, nil
	}
	var rs *RecordSender
	var v RecordView
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, viewOptions), rs.ViewRecord, p.Metadata.Name).Get(ctx, &v)
	return v, err
}

// viewOptions bound the read of the record: a few attempts over half a
// minute (the record's worker may be starting).
var viewOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout:    10 * time.Second,
	ScheduleToCloseTimeout: 30 * time.Second,
	RetryPolicy:            &temporal.RetryPolicy{InitialInterval: 500 * time.Millisecond, MaximumAttempts: 4},
}

// ViewRecord is the worker's activity that reads what an action needs
// of the plan's record (RecordView); a plan with no record has nothing
// to read. A worker without a client reads nothing.
func (s *RecordSender) ViewRecord(ctx context.Context, plan string) (RecordView, error) {
	if s == nil || s.Client == nil {
		return RecordView{}, nil
	}
	rec, err := ReadRecord(ctx, s.Client, plan)
	if err != nil || rec == nil {
		return RecordView{}, err
	}
	return RecordView{Replaced: rec.Replaced, Restored: rec.Restored}, nil
}

// replacedPlan is p acting on the volumes rep names instead of those p
// names, its exec hooks given each as DROVER_VOLUME_<NAME>; p itself
// when rep is nil. p is not changed.
func replacedPlan(p *plans.Plan, rep *ReplacedEntry) *plans.Plan {
	if p == nil || rep == nil || len(rep.Groups) == 0 {
		return p
	}
	q := *p
	q.VolumeGroups = slices.Clone(p.VolumeGroups)
	env := map[string][]groupVolume{}
	for i, g := range q.VolumeGroups {
		sites, ok := rep.Groups[g.Name]
		if !ok {
			continue
		}
		refs := maps.Clone(g.Sites)
		// Each site's ref and volumes come from one entry: the map's
		// order never shows.
		//workflowcheck:ignore
		for site, vols := range sites {
			if _, ok := refs[site]; !ok {
				continue
			}
			ref := plans.GroupRef{}
			for _, v := range vols {
				ref.Volumes, ref.Names = append(ref.Volumes, v.ID), append(ref.Names, v.Name)
				env[site] = append(env[site], groupVolume{Group: g.Name, Name: v.Name, ID: v.ID})
			}
			refs[site] = ref
		}
		q.VolumeGroups[i].Sites = refs
	}
	//workflowcheck:ignore
	sites := slices.Sorted(maps.Keys(env))
	for _, site := range sites {
		q = *withVolumeEnv(&q, site, nil, env[site])
	}
	return &q
}

// groupVolume is a volume of a group an exec hook is told of.
type groupVolume struct {
	Group, Name, ID string
}

// withVolumeEnv is p with the exec hooks of its workloads at site given
// each volume of the groups they use as DROVER_VOLUME_<NAME>=ID, and
// extra. p is not changed.
func withVolumeEnv(p *plans.Plan, site string, extra map[string]string, vols []groupVolume) *plans.Plan {
	q := *p
	q.Workloads = slices.Clone(p.Workloads)
	for i, w := range q.Workloads {
		ref, ok := w.Sites[site]
		if !ok || ref.Exec == nil {
			continue
		}
		h := *ref.Exec
		h.Env = maps.Clone(h.Env)
		if h.Env == nil {
			h.Env = map[string]string{}
		}
		// Fills keys: the order does not matter.
		//workflowcheck:ignore
		maps.Copy(h.Env, extra)
		for _, v := range vols {
			if len(w.VolumeGroups) == 0 || slices.Contains(w.VolumeGroups, v.Group) {
				h.Env["DROVER_VOLUME_"+envName(v.Name)] = v.ID
			}
		}
		refs := maps.Clone(w.Sites)
		ref.Exec = &h
		refs[site] = ref
		q.Workloads[i].Sites = refs
	}
	return &q
}

// volumeName is the name the plan gives volume id of group at site: the
// volume it stands in for (GroupRef.Names), else id itself.
func volumeName(p *plans.Plan, site, group, id string) string {
	for _, g := range p.VolumeGroups {
		ref := g.Sites[site]
		if i := slices.Index(ref.Volumes, id); g.Name == group && i >= 0 && i < len(ref.Names) {
			return ref.Names[i]
		}
	}
	return id
}

// groupVolumes are the volumes a group's ref names: its members for a
// volume group, else its loose volumes.
func groupVolumes(ref plans.GroupRef) []string {
	if ref.GroupID != "" {
		return ref.Members
	}
	return ref.Volumes
}

// standIns is what a reprotect of the plan's restored volumes records:
// for each group, at to the volumes restored there and at from their
// copies, which the storage creates under the same ids, each under the
// name the signed plan (base) gives the volume it stands in for at that
// site (the same position in the group's volumes). The plan p acts on
// (base, or base with the volumes replaced before) must have every
// volume of every group restored.
func standIns(base, p *plans.Plan, from, to string, rs *RestoredEntry) (map[string]map[string][]StandIn, error) {
	out := map[string]map[string][]StandIn{}
	for i, g := range p.VolumeGroups {
		vols := groupVolumes(g.Sites[to])
		if len(vols) == 0 {
			return nil, fmt.Errorf("group %s names no volumes at %s: nothing says which restored volume is its", g.Name, to)
		}
		bg := base.VolumeGroups[i]
		toNames, fromNames := groupVolumes(bg.Sites[to]), groupVolumes(bg.Sites[from])
		if len(toNames) != len(vols) || len(fromNames) != len(vols) {
			return nil, fmt.Errorf("group %s names %d volume(s) at %s and %d at %s: the restored volumes' copies cannot be matched to them", g.Name, len(toNames), to, len(fromNames), from)
		}
		sites := map[string][]StandIn{}
		for j, v := range vols {
			id, ok := rs.Volumes[v]
			if !ok {
				return nil, fmt.Errorf("volume %s of group %s was not restored from point %s", v, g.Name, rs.Point)
			}
			sites[to] = append(sites[to], StandIn{Name: toNames[j], ID: id})
			sites[from] = append(sites[from], StandIn{Name: fromNames[j], ID: id})
		}
		out[g.Name] = sites
	}
	return out, nil
}

// keptRefs are p's refs of the groups at both sites: the replicas the
// restored volumes replace.
func keptRefs(p *plans.Plan, from, to string) map[string]map[string]plans.GroupRef {
	out := map[string]map[string]plans.GroupRef{}
	for _, g := range p.VolumeGroups {
		out[g.Name] = map[string]plans.GroupRef{from: g.Sites[from], to: g.Sites[to]}
	}
	return out
}

// Text says which volumes stand in for the plan's.
func (e *ReplacedEntry) Text() string {
	n := 0
	// A count: the maps' order never shows.
	//workflowcheck:ignore
	for _, sites := range e.Groups {
		//workflowcheck:ignore
		for _, vols := range sites {
			n += len(vols)
		}
	}
	kept := "the replicas they replaced were released (drctl release)"
	if len(e.Kept) > 0 {
		kept = "the replicas they replaced are kept until drctl release: " + KeptText(e.Kept)
	}
	return fmt.Sprintf("the plan runs on the volumes restored from point %s (%d volume copies in %d group(s)), protected since %s; %s",
		e.Point, n, len(e.Groups), e.At.UTC().Format(time.RFC3339), kept)
}

// reprotectRestored makes the volumes a failover restored from a point
// in time at To the protected ones, From's copies of them created by
// the storage: From's workloads stopped, From's copies of the replicas
// demoted with force and left as they are (neither resynced nor
// deleted: with To's promoted replicas, they are the replicas the
// failover went back from, kept), replication enabled on the restored
// volumes at To and a sync of each awaited, From's clients unfenced,
// and the record told which volumes stand in for the plan's from now on,
// before protection starts on them.
func reprotectRestored(ctx workflow.Context, r *run, in ReprotectInput, res *ReprotectResult, rs *RestoredEntry) error {
	p, from, to := r.plan, in.From, in.To
	for _, w := range p.Workloads {
		for _, site := range []string{from, to} {
			if ref, ok := w.Sites[site]; (ok && ref.Nomad != nil) || p.Site(site).Orchestrator.Nomad != nil {
				return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
					"reprotect of the volumes restored from point %s: workload %s runs under Nomad at %s, and protecting restored volumes where Nomad runs the workloads is not there yet (its copies at %s would need registering with Nomad); nothing was done",
					rs.Point, w.Name, site, from), ErrPreflight, nil)
			}
		}
	}
	groups, err := standIns(r.signed, p, from, to, rs)
	if err != nil {
		return temporal.NewNonRetryableApplicationError("reprotect of the restored volumes: "+err.Error(), ErrPreflight, nil)
	}
	info := workflow.GetInfo(ctx).WorkflowExecution
	next := &ReplacedEntry{Point: rs.Point, Site: to, Holder: rs.Holder, By: "run " + info.ID + "/" + info.RunID, At: workflow.Now(ctx), Groups: groups, Kept: keptRefs(p, from, to)}
	np := replacedPlan(r.signed, next)
	if err := holdsPrimary(ctx, r, p, to, from, "reprotect"); err != nil {
		return err
	}
	if err := stopAll(ctx, r, p, from, "reprotect"); err != nil {
		return err
	}
	if err := r.gate(ctx, "beforeDemote"); err != nil {
		return err
	}
	if err := forGroups(ctx, r, p, GroupOp{Kind: OpDemote, Site: from, Force: true, Verb: "demote (kept) the replicas of"}); err != nil {
		return err
	}
	res.ResyncStart = workflow.Now(ctx)
	if err := forGroups(ctx, r, np, GroupOp{Kind: OpEnable, Site: to, Verb: "enable replication of the restored volumes of"}); err != nil {
		return err
	}
	if err := forGroups(ctx, r, np, GroupOp{Kind: OpWaitSync, Site: to, After: res.ResyncStart, Verb: "wait for a sync of the restored volumes of"}); err != nil {
		return err
	}
	if err := unfence(ctx, r, p, from, to, in.Fenced); err != nil {
		return err
	}
	// Recorded before protection starts: its first run reads the record
	// and polls the volumes that stand in.
	if err := r.step(ctx, replacedStep(), false, func(ctx workflow.Context) (string, error) {
		if err := note(ctx, p.Metadata.Name, RecordChange{Replaced: next}); err != nil {
			return "", err
		}
		return next.Text(), nil
	}); err != nil {
		return err
	}
	r.plan = np
	return protectFrom(ctx, r, np, to)
}

func replacedStep() stepRef {
	return newRef(KindRecordReplaced, "record the restored volumes as the protected ones")
}
