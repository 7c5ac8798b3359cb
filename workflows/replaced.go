package workflows

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/orchestrators"
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
// (Name) at a site: the id actions use instead. Nomad is its Nomad CSI
// volume at that site, when the site's Nomad knows the volume it stands
// in for (Nomad.Replica): the site's jobs mount it in that one's place.
type StandIn struct {
	Name  string         `json:"name"`
	ID    string         `json:"id"`
	Nomad *RestoredNomad `json:"nomad,omitempty"`
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
	// Without is set by trust, never by the record: the record did not
	// answer (why), and the failover goes on without it by the
	// operator's override (Origin.RecordOverride).
	Without string `json:"without,omitempty"`
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
// names, its exec hooks given each as DROVER_VOLUME_<NAME>, and its Nomad
// jobs at each site with stand-ins started on them (standInJobs); p
// itself when rep is nil. p is not changed.
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
		// Each site's ref is set apart from the others': the map's order
		// never shows (env's lists are ordered by site below).
		//workflowcheck:ignore
		for site, vols := range sites {
			if _, ok := refs[site]; !ok {
				continue
			}
			ref := plans.GroupRef{}
			for _, v := range vols {
				ref.Volumes, ref.Names = append(ref.Volumes, v.ID), append(ref.Names, v.Name)
				env[site] = append(env[site], groupVolume{Group: g.Name, Name: v.Name, ID: v.ID, Nomad: v.Nomad})
			}
			refs[site] = ref
		}
		q.VolumeGroups[i].Sites = refs
	}
	// Sorted keys: the same order on every replay.
	//workflowcheck:ignore
	for _, site := range slices.Sorted(maps.Keys(env)) {
		q = *withVolumeEnv(&q, site, nil, env[site])
		q = *standInJobs(&q, site, rep.Point, env[site])
	}
	return &q
}

// groupVolume is a volume of a group an exec hook is told of; Nomad its
// Nomad volume at the site, if any.
type groupVolume struct {
	Group, Name, ID string
	Nomad           *RestoredNomad
}

// standInJobs is p with every Nomad job at site started on the volumes
// that stand in there (plans.NomadRestore, as a failover to the point
// starts them): each CSI volume source naming the Nomad volume a
// stand-in replaced names the stand-in's instead, and the stand-ins of
// the workload's groups are in the job's meta as DROVER_VOLUME_<NAME>.
// The adapter refuses a job that mounts any other CSI volume (a kept
// replica Nomad knows under a name the record does not, or a volume the
// plan does not protect): it never starts on what the point went back
// from. p is not changed.
func standInJobs(p *plans.Plan, site, point string, vols []groupVolume) *plans.Plan {
	q := *p
	q.Workloads = slices.Clone(p.Workloads)
	for i, w := range q.Workloads {
		ref, ok := w.Sites[site]
		if !ok || ref.Nomad == nil {
			continue
		}
		r := &plans.NomadRestore{Point: point, Volumes: map[string]string{}, Meta: map[string]string{}}
		for _, v := range vols {
			if v.Nomad != nil && v.Nomad.Replica != "" && v.Nomad.ID != "" {
				r.Volumes[v.Nomad.Replica] = v.Nomad.ID
			}
			if len(w.VolumeGroups) == 0 || slices.Contains(w.VolumeGroups, v.Group) {
				r.Meta[VolumeEnv(v.Name)] = v.ID
			}
		}
		nj := *ref.Nomad
		nj.Restore = r
		refs := maps.Clone(w.Sites)
		refs[site] = plans.WorkloadRef{Nomad: &nj}
		q.Workloads[i].Sites = refs
	}
	return &q
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
		// Keys set apart from one another: the order never shows.
		//workflowcheck:ignore
		maps.Copy(h.Env, extra)
		for _, v := range vols {
			if len(w.VolumeGroups) == 0 || slices.Contains(w.VolumeGroups, v.Group) {
				h.Env[VolumeEnv(v.Name)] = v.ID
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
// volume of every group restored. A stand-in at to has the Nomad volume
// the failover restored it as (rs.Nomad); one at from the Nomad volume
// its copy is registered as there (fromNomad, by the id p gives the
// volume it stands in for at from), if any.
func standIns(base, p *plans.Plan, from, to string, rs *RestoredEntry, fromNomad map[string]RestoredNomad) (map[string]map[string][]StandIn, error) {
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
		fromVols := groupVolumes(g.Sites[from])
		if len(fromVols) != len(vols) {
			return nil, fmt.Errorf("group %s acts on %d volume(s) at %s and %d at %s: the restored volumes' copies cannot be matched to them", g.Name, len(vols), to, len(fromVols), from)
		}
		sites := map[string][]StandIn{}
		for j, v := range vols {
			id, ok := rs.Volumes[v]
			if !ok {
				return nil, fmt.Errorf("volume %s of group %s was not restored from point %s", v, g.Name, rs.Point)
			}
			at, back := StandIn{Name: toNames[j], ID: id}, StandIn{Name: fromNames[j], ID: id}
			if nv, ok := rs.Nomad[v]; ok {
				at.Nomad = &nv
			}
			if nv, ok := fromNomad[fromVols[j]]; ok {
				back.Nomad = &nv
			}
			sites[to], sites[from] = append(sites[to], at), append(sites[from], back)
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
	// A count over every group and site: the order does not matter.
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
// volumes at To (or, when they are a point's copies promoted, whose
// replication is on: From's copies of them demoted with force and
// resynced) and a sync of each awaited, From's clients unfenced,
// and the record told which volumes stand in for the plan's from now on,
// before protection starts on them.
func reprotectRestored(ctx workflow.Context, r *run, in ReprotectInput, res *ReprotectResult, rs *RestoredEntry) error {
	p, from, to := r.plan, in.From, in.To
	groups, err := standIns(r.signed, p, from, to, rs, nil)
	if err != nil {
		return temporal.NewNonRetryableApplicationError("reprotect of the restored volumes: "+err.Error(), ErrPreflight, nil)
	}
	info := workflow.GetInfo(ctx).WorkflowExecution
	next := &ReplacedEntry{Point: rs.Point, Site: to, Holder: rs.Holder, By: "run " + info.ID + "/" + info.RunID, At: workflow.Now(ctx), Groups: groups, Kept: keptRefs(p, from, to)}
	if nomadSites(p, from, to) {
		// Before anything changes: the Nomad volumes the copies at From
		// will be registered as, and every job read as it will start
		// on the stand-ins. A failure ends the reprotect at once (no
		// pause: skipping it could start a job on a kept replica), with
		// nothing done.
		s := r.add(checkStandInsStep(), true)
		s.State, s.Start, s.Attempts = StateRunning, workflow.Now(ctx), 1
		out, err := checkNomadStandIns(ctx, r, in, res, rs, next)
		s.Output, s.End = out, workflow.Now(ctx)
		if err != nil {
			s.State, s.LastError = StateFailed, ErrorText(err)
			return err
		}
		s.State = StateDone
	}
	np := replacedPlan(r.signed, next)
	if err := beforeDemote(ctx, r, p, from, to); err != nil {
		return err
	}
	if err := forGroups(ctx, r, p, GroupOp{Kind: OpDemote, Site: from, Force: true, Verb: "demote (kept) the replicas of"}); err != nil {
		return err
	}
	res.ResyncStart = workflow.Now(ctx)
	if rs.Copies {
		// The point's copies, promoted at To: their replication is on,
		// and From's copies of them were their primaries (the cut's
		// site): demoted with force and resynced from To.
		if err := forGroups(ctx, r, np, GroupOp{Kind: OpDemote, Site: from, Force: true, Of: "restored", Verb: "demote the copies of the restored volumes of"}); err != nil {
			return err
		}
		if err := forGroups(ctx, r, np, GroupOp{Kind: OpResync, Site: from, Discard: true, Primary: to, After: res.ResyncStart, Of: "restored", Verb: "resync the copies of the restored volumes of"}); err != nil {
			return err
		}
	} else if err := forGroups(ctx, r, np, GroupOp{Kind: OpEnable, Site: to, Verb: "enable replication of the restored volumes of"}); err != nil {
		return err
	}
	if err := forGroups(ctx, r, np, GroupOp{Kind: OpWaitSync, Site: to, After: res.ResyncStart, Verb: "wait for a sync of the restored volumes of"}); err != nil {
		return err
	}
	if len(res.Registered) > 0 {
		// From's copies exist and hold a sync: Nomad can take them.
		if err := r.step(ctx, registerStep(from), true, func(ctx workflow.Context) (string, error) {
			return registerCopies(ctx, p, from, res)
		}); err != nil {
			return err
		}
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

// NomadRegistration is a copy at From of a restored volume (ID, its
// storage id, the restored volume's) that a reprotect registers with
// From's Nomad as NomadID, in the namespace and with the plugin and
// capabilities of Replica, the Nomad volume of the volume it stands in
// for there (Volume, as the plan acted on it). The name is chosen before
// the call, from the record (restoringRun), so that a retried call or
// run finds the same volume; Done once Nomad has it.
type NomadRegistration struct {
	Group   string                  `json:"group"`
	Volume  string                  `json:"volume"`
	ID      string                  `json:"id"`
	Replica orchestrators.CSIVolume `json:"replica"`
	NomadID string                  `json:"nomadID"`
	Done    bool                    `json:"done,omitempty"`
}

// nomadSites: Nomad runs workloads of p at from or to.
func nomadSites(p *plans.Plan, sites ...string) bool {
	for _, site := range sites {
		if s := p.Site(site); s != nil && s.Orchestrator.Nomad != nil {
			return true
		}
		for _, w := range p.Workloads {
			if ref, ok := w.Sites[site]; ok && ref.Nomad != nil {
				return true
			}
		}
	}
	return false
}

// checkNomadStandIns, before a reprotect of restored volumes changes
// anything, finds the Nomad volumes at From of the volumes the restored
// ones stand in for there, names the Nomad volume each copy will be
// registered as (res.Registered: kept from a first attempt), adds them
// to next, and reads every Nomad job of both sites as it will start on
// the stand-ins (CheckRestored): a job that would mount a CSI volume no
// stand-in replaces ends the reprotect here, with nothing done.
func checkNomadStandIns(ctx workflow.Context, r *run, in ReprotectInput, res *ReprotectResult, rs *RestoredEntry, next *ReplacedEntry) (string, error) {
	p, from, to := r.plan, in.From, in.To
	var read []string
	if p.Site(from).Orchestrator.Nomad != nil && res.Registered == nil {
		fin := activities.NomadCSIInputFor(p, from)
		fin.Workload.Action = "reprotect"
		for _, g := range p.VolumeGroups {
			fin.Volumes = append(fin.Volumes, groupVolumes(g.Sites[from])...)
		}
		vols, err := call[map[string]orchestrators.CSIVolume](ctx, activities.WorkloadOptions(p, from, fin.Workload), wl.FindNomadVolumes, fin)
		if err != nil {
			return "", err
		}
		runID := restoringRun(rs)
		if runID == "" {
			runID = workflow.GetInfo(ctx).WorkflowExecution.RunID
		}
		res.Registered = []NomadRegistration{}
		for _, g := range p.VolumeGroups {
			toVols, fromVols := groupVolumes(g.Sites[to]), groupVolumes(g.Sites[from])
			for j, v := range fromVols {
				nv, ok := vols[v]
				if !ok || j >= len(toVols) {
					continue
				}
				res.Registered = append(res.Registered, NomadRegistration{Group: g.Name, Volume: v, ID: rs.Volumes[toVols[j]], Replica: nv, NomadID: restoredNomadID(nv.ID, runID)})
			}
		}
		read = append(read, fmt.Sprintf("%d of %d volume(s) at %s are Nomad CSI volumes: their stand-ins' copies are registered there", len(vols), len(fin.Volumes), from))
	}
	fromNomad := map[string]RestoredNomad{}
	for _, x := range res.Registered {
		fromNomad[x.Volume] = RestoredNomad{ID: x.NomadID, Namespace: x.Replica.Namespace, Replica: x.Replica.ID}
		read = append(read, fmt.Sprintf("%s as %s in place of %s", x.ID, x.NomadID, x.Replica.ID))
	}
	groups, err := standIns(r.signed, p, from, to, rs, fromNomad)
	if err != nil {
		return "", temporal.NewNonRetryableApplicationError("reprotect of the restored volumes: "+err.Error(), ErrPreflight, nil)
	}
	next.Groups = groups
	np := replacedPlan(r.signed, next)
	for _, site := range []string{to, from} {
		for _, w := range workloadsOn(np, site) {
			if w.Sites[site].Nomad == nil {
				continue
			}
			win, err := activities.WorkloadInputFor(np, site, w.Name, "reprotect")
			if err != nil {
				return "", err
			}
			out, err := call[activities.WorkloadOutput](ctx, activities.WorkloadOptions(np, site, win.Workload), wl.CheckRestored, win)
			if err != nil {
				return "", err
			}
			read = append(read, "at "+site+": "+out.Output)
		}
	}
	return strings.Join(read, "; "), nil
}

// restoringRun is the run id of the failover that restored rs's
// volumes, which names their Nomad volumes at both sites: every run of
// the reprotect (a retried call, or a reprotect started again after one
// that failed past its register) asks for the same names. A record from
// before the failover's run was noted gives "" (the reprotect's own run
// names them then).
func restoringRun(rs *RestoredEntry) string {
	if h, ok := strings.CutPrefix(rs.Holder, actionHolderPrefix); ok {
		if i := strings.LastIndex(h, "/"); i >= 0 && i+1 < len(h) {
			return h[i+1:]
		}
	}
	if i := strings.LastIndex(rs.By, " run "); i >= 0 && i+5 < len(rs.By) {
		return rs.By[i+5:]
	}
	return ""
}

// registerCopies registers each copy at site of res.Registered with
// site's Nomad, under the name chosen before.
func registerCopies(ctx workflow.Context, p *plans.Plan, site string, res *ReprotectResult) (string, error) {
	var done []string
	for i := range res.Registered {
		x := &res.Registered[i]
		if x.Done {
			continue
		}
		in := activities.NomadCSIInputFor(p, site)
		in.Workload.Action = "reprotect"
		in.Volume, in.ID, in.Name, in.Namespace, in.External = x.Replica, x.NomadID, x.NomadID, x.Replica.Namespace, x.ID
		out, err := call[string](ctx, activities.WorkloadOptions(p, site, in.Workload), wl.NomadRegister, in)
		if err != nil {
			return strings.Join(done, "; "), err
		}
		x.Done = true
		done = append(done, out)
	}
	return strings.Join(done, "; "), nil
}

// checkStandInJobs reads each Nomad job at site that starts on the
// volumes standing in for the plan's (p acts on them) as it will start
// them (CheckRestored), before the action stops or demotes anything: a
// job that would mount a CSI volume no stand-in replaces (its job edited
// since the reprotect, say) ends the action at once, unpaused, with
// nothing done, instead of at its start once the storage has moved.
// Nothing to read where no job does.
func checkStandInJobs(ctx workflow.Context, r *run, p *plans.Plan, site, action string) error {
	var ws []plans.Workload
	for _, w := range workloadsOn(p, site) {
		if ref := w.Sites[site]; ref.Nomad != nil && ref.Nomad.Restore != nil {
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		return nil
	}
	s := r.add(newRef(KindCheckStandIns, "check the Nomad jobs on the volumes that stand in at "+site, site), true)
	s.State, s.Start, s.Attempts = StateRunning, workflow.Now(ctx), 1
	var read []string
	err := func() error {
		for _, w := range ws {
			win, err := activities.WorkloadInputFor(p, site, w.Name, action)
			if err != nil {
				return err
			}
			out, err := call[activities.WorkloadOutput](ctx, activities.WorkloadOptions(p, site, win.Workload), wl.CheckRestored, win)
			if err != nil {
				return err
			}
			read = append(read, out.Output)
		}
		return nil
	}()
	s.Output, s.End = strings.Join(read, "; "), workflow.Now(ctx)
	if err != nil {
		s.State, s.LastError = StateFailed, ErrorText(err)
		return err
	}
	s.State = StateDone
	return nil
}

func checkStandInsStep() stepRef {
	return newRef(KindCheckStandIns, "check the Nomad jobs on the restored volumes")
}

func registerStep(site string) stepRef {
	return newRef(KindRegister, "register the restored volumes' copies with Nomad at "+site, site)
}

func replacedStep() stepRef {
	return newRef(KindRecordReplaced, "record the restored volumes as the protected ones")
}
