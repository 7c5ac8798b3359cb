package workflows

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/codec"
	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/orchestrators"
	"github.com/drover-dr/drover/plans"
)

// A test recovery brings a plan's workloads up at the recovery site on
// point-in-time copies of the replicas, in isolation, while replication
// carries on, then cleans everything away. It never fences, promotes or
// demotes, and writes nothing to the plan's record: production is not
// touched. It runs under its own workflow id (TestRecoveryID), apart from
// the plan's DR actions, so that a real failover is never held up by a
// test.
//
// Steps: the preflight of the recovery site; for every volume group a
// snapshot of its replicas there (one group snapshot of a storage group's
// members, or the loose volumes' snapshots taken together) and a writable
// copy of each; the workloads that have test hooks (exec testStart,
// testStop, testHealth) started as "NAME-test" by priority on the
// copies, DROVER_COPY_<VOLUME> naming each copy, and waited healthy; then
// the operator's word (drctl approve, gate endTest) or the plan's
// policy.testTimeLimit (default 1h); then the cleanup: the test
// workloads stopped, the copies and snapshots deleted. The cleanup also
// runs when the test fails or is cancelled, in a context of its own.

// TestRecoveryID is the workflow id of a plan's test recovery.
func TestRecoveryID(plan string) string { return names.TestRecoveryIDPrefix + plan }

// GateEndTest is the gate a test recovery waits at while its workloads
// run on the copies: drctl approve opens it and the cleanup starts.
const GateEndTest = "endTest"

// DefaultTestTimeLimit is how long test workloads run when the plan does
// not say.
const DefaultTestTimeLimit = time.Hour

// TestRecoveryInput tests the recovery of a plan at site At.
type TestRecoveryInput struct {
	Origin
	Plan *plans.Plan `json:"plan"`
	At   string      `json:"at"`
	// PointAt, when set, makes the copies from a point in time instead
	// of new snapshots: the newest point the plan's record has at At cut
	// at or before PointAt (drctl test-recovery --point).
	PointAt time.Time `json:"pointAt,omitzero"`
	// Unattended is a test nobody waits on (a schedule's): a step that
	// fails for good fails the test, which then cleans up, rather than
	// pause for the operator; and the workloads run on the copies for
	// TimeLimit at most, when shorter than the plan's testTimeLimit.
	Unattended bool          `json:"unattended,omitempty"`
	TimeLimit  time.Duration `json:"timeLimit,omitempty"`
}

// unattendedTestVersion marks a test recovery that runs unattended
// (TestRecoveryInput.Unattended).
const unattendedTestVersion = "unattended-test"

// TestCopy is one volume's snapshot and copy: their ids once the storage
// answered, and the names they were asked for under, recorded before the
// call. A call whose answer never came (the test cancelled, or its
// workflow terminated, while the storage worked) may still have made
// them: the cleanup asks for them again by name, which the CSI spec
// makes idempotent, and deletes what it gets.
type TestCopy struct {
	Group         string `json:"group"`
	Volume        string `json:"volume"`
	Snapshot      string `json:"snapshot,omitempty"`
	GroupSnapshot string `json:"groupSnapshot,omitempty"`
	Copy          string `json:"copy,omitempty"`
	// SnapshotName is the snapshot's name, or the group snapshot's, of
	// Members, when the volume was cut with a storage group.
	SnapshotName string   `json:"snapshotName,omitempty"`
	Members      []string `json:"members,omitempty"`
	CopyName     string   `json:"copyName,omitempty"`
	// Size is the snapshot's size when the storage said it: the copy asks
	// for that much.
	Size int64 `json:"size,omitempty"`
	// Point is the point in time whose snapshot the copy was made from:
	// the snapshot is protection's, and the cleanup leaves it.
	Point string `json:"point,omitempty"`
	// Nomad is the volume's Nomad CSI volume, when the test site's Nomad
	// has one for it: the copy is then made through Nomad's API as Nomad
	// volume NomadCopy of NomadNamespace (for the test jobs to claim),
	// and so is a loose volume's snapshot (SnapshotByNomad).
	Nomad           *orchestrators.CSIVolume `json:"nomad,omitempty"`
	SnapshotByNomad bool                     `json:"snapshotByNomad,omitempty"`
	NomadCopy       string                   `json:"nomadCopy,omitempty"`
	NomadNamespace  string                   `json:"nomadNamespace,omitempty"`
}

// QueryTestCopies is the query a test recovery answers with its
// TestRecoveryResult so far: what it made, and whether it was cleaned
// away. drctl test-recovery --cleanup asks runs that ended without their
// cleanup (terminated, say) and deletes what they left.
const QueryTestCopies = "test-copies"

// copyIndex returns the index of volume v's record in res.Copies, added
// if new.
func (res *TestRecoveryResult) copyIndex(group, v string) int {
	for i, c := range res.Copies {
		if c.Volume == v {
			return i
		}
	}
	res.Copies = append(res.Copies, TestCopy{Group: group, Volume: v})
	return len(res.Copies) - 1
}

// TestRecoveryResult is the timeline, the copies made (all deleted when
// Cleaned), and each test workload's RTO: from the start to healthy.
type TestRecoveryResult struct {
	Progress
	At string `json:"at"`
	// Point is the point in time the copies were made from, held while
	// the test ran; nil for a test on new snapshots.
	Point   *PointInTime             `json:"point,omitempty"`
	PointAt time.Time                `json:"pointAt,omitzero"`
	Copies  []TestCopy               `json:"copies"`
	RTO     map[string]time.Duration `json:"workloadRTO,omitempty"`
	Cleaned bool                     `json:"cleaned"`
}

// The step kinds of a test recovery.
const (
	KindPoint    StepKind = "point"
	KindSnapshot StepKind = "snapshot"
	KindCopy     StepKind = "copy"
	KindCleanup  StepKind = "cleanup"
)

// StartTestRecovery starts a plan's test recovery, or refuses with a
// *TestBusyError when one runs already.
func StartTestRecovery(ctx context.Context, c client.Client, in TestRecoveryInput) (client.WorkflowRun, error) {
	id := TestRecoveryID(in.Plan.Metadata.Name)
	run, started, err := startOnce(ctx, c, id, in.Origin, Attributes(in.Plan.Metadata.Name, "test-recovery", in.At), TestRecovery, in)
	if started != nil {
		return nil, &TestBusyError{Plan: in.Plan.Metadata.Name, ID: id, RunID: started.RunId}
	}
	return run, err
}

// TestBusyError refuses a test recovery while another of the plan runs.
type TestBusyError struct{ Plan, ID, RunID string }

func (e *TestBusyError) Error() string {
	return fmt.Sprintf("plan %q has a test recovery running already (workflow %s, run %s); end it with drctl approve %s, or follow it with drctl watch %s",
		e.Plan, e.ID, e.RunID, e.ID, e.ID)
}

// TestRecovery tests the recovery of a plan (see above).
func TestRecovery(ctx workflow.Context, in TestRecoveryInput) (*TestRecoveryResult, error) {
	p := in.Plan
	note, view, err := trust(ctx, p, in.Origin)
	if err != nil {
		return nil, err
	}
	p = replacedPlan(p, view.Replaced)
	in.Plan = p
	if p.Site(in.At) == nil {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("plan %q has no site %q", p.Metadata.Name, in.At), ErrPreflight, nil)
	}
	r, err := newRun(ctx, "test recovery", p)
	if err != nil {
		return nil, err
	}
	r.origin, r.progress.By, r.progress.Trust = in.Origin, in.By, note
	if in.Unattended && workflow.GetVersion(ctx, unattendedTestVersion, workflow.DefaultVersion, 1) >= 1 {
		r.unattended = true
	}
	res := &TestRecoveryResult{At: in.At, RTO: map[string]time.Duration{}}
	if err := workflow.SetQueryHandler(ctx, QueryTestCopies, func() (*TestRecoveryResult, error) {
		out := *res
		out.Progress = *r.progress
		return &out, nil
	}); err != nil {
		return nil, err
	}
	start := workflow.Now(ctx)

	err = testRecovery(ctx, r, in, res)
	// The cleanup runs however the test ended: done, failed, cancelled,
	// or aborted by the operator at a paused step (the abort ends the
	// test, not its cleanup: a step of the cleanup that fails pauses
	// again).
	r.aborted = false
	cctx, cancel := workflow.NewDisconnectedContext(ctx)
	defer cancel()
	cerr := cleanupTest(cctx, r, in, res, workflow.GetInfo(ctx).WorkflowExecution)
	res.Cleaned = cerr == nil
	for _, s := range r.progress.Steps {
		if s.Kind() == KindStart && s.State == StateDone {
			res.RTO[strings.TrimSuffix(s.ID[strings.LastIndex(s.ID, "/")+1:], "-test")] = s.End.Sub(start)
		}
	}
	r.progress.End = workflow.Now(cctx)
	r.progress.State = StateCompleted
	if err == nil {
		err = cerr
	}
	if err != nil {
		r.progress.State = StateAborted
	}
	res.Progress = *r.progress
	return res, err
}

func testRecovery(ctx workflow.Context, r *run, in TestRecoveryInput, res *TestRecoveryResult) error {
	p, at := in.Plan, in.At
	var nomadVols map[string]orchestrators.CSIVolume
	if err := r.step(ctx, preflightStep(at), false, func(ctx workflow.Context) (string, error) {
		out, err := preflight(ctx, p, at)
		if err != nil || p.Site(at).Orchestrator.Nomad == nil {
			return out, err
		}
		// On a Nomad site, the volumes Nomad knows are copied through it.
		in := activities.NomadCSIInputFor(p, at)
		for _, g := range p.VolumeGroups {
			ref := g.Sites[at]
			in.Volumes = append(append(in.Volumes, ref.Volumes...), ref.Members...)
		}
		nomadVols, err = call[map[string]orchestrators.CSIVolume](ctx, activities.WorkloadOptions(p, at, in.Workload), wl.FindNomadVolumes, in)
		if err != nil {
			return out, err
		}
		return fmt.Sprintf("%s; %d of %d volume(s) are Nomad CSI volumes, copied through Nomad", out, len(nomadVols), len(in.Volumes)), nil
	}); err != nil {
		return err
	}
	for _, g := range p.VolumeGroups {
		ref := g.Sites[at]
		for _, v := range append(slices.Clone(ref.Volumes), ref.Members...) {
			if nv, ok := nomadVols[v]; ok {
				res.Copies[res.copyIndex(g.Name, v)].Nomad = &nv
			}
		}
	}
	// The names of what the test creates: its run's, so that a retried
	// call finds what the first made, and two tests never share one.
	prefix := "drover-test-" + p.Metadata.Name + "-" + workflow.GetInfo(ctx).WorkflowExecution.RunID
	groups := slices.Clone(p.VolumeGroups)
	slices.SortFunc(groups, func(a, b plans.VolumeGroup) int { return strings.Compare(a.Name, b.Name) })
	if !in.PointAt.IsZero() {
		// From a point in time: its snapshots, not new ones. A guard:
		// skipped, it leaves nothing to copy.
		if err := r.step(ctx, newRef(KindPoint, "hold the point in time at "+at, at), true, func(ctx workflow.Context) (string, error) {
			pt, err := holdPointFor(ctx, p, at, in.PointAt, res)
			if err != nil {
				return "", err
			}
			return pointText(*pt), nil
		}); err != nil {
			return err
		}
		groups = nil
	}
	for _, g := range groups {
		ref := g.Sites[at]
		if err := r.step(ctx, newRef(KindSnapshot, fmt.Sprintf("snapshot %s on %s", g.Name, at), at, g.Name), false, func(ctx workflow.Context) (string, error) {
			n, err := snapshotGroup(ctx, p, at, g.Name, ref, prefix+"-"+g.Name, res)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%d volume(s) cut at one point in time", n), nil
		}); err != nil {
			return err
		}
	}
	if err := r.step(ctx, newRef(KindCopy, "copy the snapshots on "+at, at), false, func(ctx workflow.Context) (string, error) {
		e, err := activities.EndpointFor(p, at, activities.RPCCreateVolume)
		if err != nil {
			return "", err
		}
		var made []string
		for i := range res.Copies {
			c := &res.Copies[i]
			if c.Copy == "" {
				c.CopyName = prefix + "-" + c.Volume
				if c.Nomad != nil {
					c.NomadCopy, c.NomadNamespace = nomadCopyID(c.Nomad.ID, workflow.GetInfo(ctx).WorkflowExecution.RunID), testNamespace(p, at, c.Nomad)
				}
				id, err := copyVolume(ctx, p, at, e, c)
				if err != nil {
					return "", err
				}
				c.Copy = id
			}
			made = append(made, c.Volume+" as "+c.Copy)
		}
		return fmt.Sprintf("%d writable copies: %s", len(made), strings.Join(made, ", ")), nil
	}); err != nil {
		return err
	}
	if missing := copiesMissing(p, at, res.Copies); len(missing) > 0 &&
		workflow.GetVersion(ctx, testNeedsCopiesVersion, workflow.DefaultVersion, 1) >= 1 {
		// A skipped step (the point, a snapshot, the copies) left the
		// workloads nothing, or not everything, to run on: the test
		// ends here rather than start them on it.
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"no writable copy of %s on %s (a step before was skipped): the test ends without starting its workloads",
			strings.Join(missing, ", "), at), ErrNoCopies, nil)
	}
	tp := testPlan(p, at, res.Copies)
	if err := startAll(ctx, r, tp, at, orchestrators.ActionTestRecovery); err != nil {
		return err
	}
	// The workloads run on the copies until the operator ends the test,
	// or the time limit does.
	limit := p.Policy.TestTimeLimit.D()
	if limit <= 0 {
		limit = DefaultTestTimeLimit
	}
	if r.unattended && in.TimeLimit > 0 && in.TimeLimit < limit {
		limit = in.TimeLimit
	}
	s := r.add(approveStep(GateEndTest), false)
	s.State, s.Start = StateWaiting, workflow.Now(ctx)
	s.Note = fmt.Sprintf("the test workloads run on the copies; drctl approve ends the test (or it ends at %s)", s.Start.Add(limit).UTC().Format(time.RFC3339))
	ok, err := workflow.AwaitWithTimeout(ctx, limit, func() bool { return r.approved[GateEndTest] })
	s.End, s.Attempts, s.By, s.Note = workflow.Now(ctx), 1, r.approver[GateEndTest], ""
	if err != nil {
		s.State = StateAborted
		return err
	}
	s.State = StateDone
	if !ok {
		s.Output = fmt.Sprintf("time limit of %v reached: cleaning up", limit)
	}
	return nil
}

// ErrNoCopies ends a test recovery that has no writable copy of every
// volume to start its workloads on.
const ErrNoCopies = "NoCopies"

// testNeedsCopiesVersion marks a test recovery that ends, rather than
// start its workloads, when skipped steps left volumes without a copy.
const testNeedsCopiesVersion = "test-needs-copies"

// copiesMissing are the plan's volumes at site the test has no
// writable copy of, in the plan's order.
func copiesMissing(p *plans.Plan, site string, copies []TestCopy) []string {
	var out []string
	for _, g := range p.VolumeGroups {
		ref := g.Sites[site]
		for _, v := range append(slices.Clone(ref.Volumes), ref.Members...) {
			if !slices.ContainsFunc(copies, func(c TestCopy) bool { return c.Group == g.Name && c.Volume == v && c.Copy != "" }) {
				out = append(out, v)
			}
		}
	}
	return out
}

// snapshotGroup cuts a group's volumes on site: one group snapshot of a
// storage group's members, or the snapshots of loose volumes at once. It
// records each volume's snapshot in res, its name before the call, and
// returns how many volumes it cut.
func snapshotGroup(ctx workflow.Context, p *plans.Plan, site, group string, ref plans.GroupRef, name string, res *TestRecoveryResult) (int, error) {
	if ref.GroupID != "" {
		if len(ref.Members) == 0 {
			return 0, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"group %s is storage group %q on %s: list its volumes under members for a test recovery", group, ref.GroupID, site), ErrPreflight, nil)
		}
		for _, v := range ref.Members {
			c := &res.Copies[res.copyIndex(group, v)]
			c.SnapshotName, c.Members = name, ref.Members
		}
		gs, err := groupSnapshot(ctx, p, site, name, ref.Members)
		if err != nil {
			return 0, err
		}
		for _, sn := range gs.Snapshots {
			c := &res.Copies[res.copyIndex(group, sn.Volume)]
			c.Snapshot, c.GroupSnapshot, c.Size = sn.ID, gs.ID, sn.Size
		}
		return len(gs.Snapshots), nil
	}
	idx := make([]int, len(ref.Volumes))
	for i, v := range ref.Volumes {
		idx[i] = res.copyIndex(group, v)
		res.Copies[idx[i]].SnapshotName = name + "-" + v
	}
	return len(ref.Volumes), eachTogether(ctx, len(ref.Volumes), func(ctx workflow.Context, i int) error {
		c := &res.Copies[idx[i]]
		c.SnapshotByNomad = c.Nomad != nil
		sn, err := volumeSnapshot(ctx, p, site, c)
		c.Snapshot, c.Size = sn.ID, sn.Size
		return err
	})
}

// groupSnapshot asks site's storage for a group snapshot of members under
// name (the same snapshot again, if it was made).
func groupSnapshot(ctx workflow.Context, p *plans.Plan, site, name string, members []string) (activities.GroupSnapshot, error) {
	e, err := activities.EndpointFor(p, site, activities.RPCCreateVolumeGroupSnapshot)
	if err != nil {
		return activities.GroupSnapshot{}, err
	}
	return rpcCall[activities.GroupSnapshot](ctx, activities.CallOptions(p, site, activities.RPCCreateVolumeGroupSnapshot), st.CreateVolumeGroupSnapshot,
		activities.SnapshotInput{Endpoint: e, Name: name, Volumes: members})
}

// volumeSnapshot asks for a snapshot of c's volume under its snapshot
// name (the same snapshot again, if it was made), through Nomad when
// c.SnapshotByNomad, else from site's storage, and returns it (through
// Nomad, its id only).
func volumeSnapshot(ctx workflow.Context, p *plans.Plan, site string, c *TestCopy) (activities.Snapshot, error) {
	if c.SnapshotByNomad {
		in := activities.NomadCSIInputFor(p, site)
		in.Volume, in.Name = *c.Nomad, c.SnapshotName
		id, err := call[string](ctx, activities.WorkloadOptions(p, site, in.Workload), wl.NomadSnapshot, in)
		return activities.Snapshot{ID: id}, err
	}
	e, err := activities.EndpointFor(p, site, activities.RPCCreateSnapshot)
	if err != nil {
		return activities.Snapshot{}, err
	}
	return rpcCall[activities.Snapshot](ctx, activities.CallOptions(p, site, activities.RPCCreateSnapshot), st.CreateSnapshot,
		activities.SnapshotInput{Endpoint: e, Name: c.SnapshotName, Volumes: []string{c.Volume}})
}

// copyVolume asks for c's copy from its snapshot (the same copy again,
// if it was made): as Nomad volume c.NomadCopy through Nomad when the
// volume is Nomad's, else from site's storage at e. It returns the
// copy's storage id.
func copyVolume(ctx workflow.Context, p *plans.Plan, site string, e activities.Endpoint, c *TestCopy) (string, error) {
	if c.NomadCopy != "" {
		in := activities.NomadCSIInputFor(p, site)
		in.Volume, in.ID, in.Name, in.Namespace, in.Snapshot = *c.Nomad, c.NomadCopy, c.CopyName, c.NomadNamespace, c.Snapshot
		return call[string](ctx, activities.WorkloadOptions(p, site, in.Workload), wl.NomadCopy, in)
	}
	out, err := rpcCall[activities.Copy](ctx, activities.CallOptions(p, site, activities.RPCCreateVolume), st.CreateVolume,
		activities.CopyInput{Endpoint: e, Name: c.CopyName, Snapshot: c.Snapshot, Bytes: c.Size})
	return out.ID, err
}

// nomadCopyID is the Nomad volume id of a test run's copy of Nomad
// volume v.
func nomadCopyID(v, runID string) string {
	return v + "-test-" + RunTag(runID)
}

// testNamespace is the Nomad namespace of a test's copies at site: the
// site's testNamespace, else the source volume's.
func testNamespace(p *plans.Plan, site string, v *orchestrators.CSIVolume) string {
	if n := p.Site(site).Orchestrator.Nomad; n != nil && n.TestNamespace != "" {
		return n.TestNamespace
	}
	return v.Namespace
}

// testPlan is p with only the workloads that have test hooks on site,
// renamed NAME-test, their hooks the test ones, and the copies of their
// groups' volumes in their environment as DROVER_COPY_<VOLUME>.
func testPlan(p *plans.Plan, site string, copies []TestCopy) *plans.Plan {
	tp := *p
	tp.Workloads = nil
	for _, w := range p.Workloads {
		ref, ok := w.Sites[site]
		if ok && ref.Nomad != nil {
			tp.Workloads = append(tp.Workloads, nomadTestWorkload(w, site, ref.Nomad, copies))
			continue
		}
		if !ok || ref.Exec == nil || ref.Exec.TestStart == "" {
			continue
		}
		h := *ref.Exec
		h.Start, h.Stop, h.Health, h.Stopped = h.TestStart, h.TestStop, h.TestHealth, ""
		if h.Stop == "" {
			h.Stop = "true"
		}
		h.Env = maps.Clone(h.Env)
		if h.Env == nil {
			h.Env = map[string]string{}
		}
		for _, c := range copies {
			if len(w.VolumeGroups) == 0 || slices.Contains(w.VolumeGroups, c.Group) {
				h.Env["DROVER_COPY_"+envName(volumeName(p, site, c.Group, c.Volume))] = c.Copy
			}
		}
		tw := w
		tw.Name = w.Name + "-test"
		tw.Sites = map[string]plans.WorkloadRef{site: {Exec: &h}}
		tp.Workloads = append(tp.Workloads, tw)
	}
	return &tp
}

// nomadTestWorkload is Nomad workload w as a test copy: its job copied as
// JOB-test, every Nomad volume of the copies replaced by its copy. A job
// that runs on volumes standing in for the plan's (nj.Restore, after a
// reprotect of restored volumes) may still name, as Nomad has it, the
// Nomad volume a stand-in replaced: that one is replaced by the copy of
// its stand-in too, never left to the replica.
func nomadTestWorkload(w plans.Workload, site string, nj *plans.NomadJob, copies []TestCopy) plans.Workload {
	t := &plans.NomadTest{Source: nj.Job, Volumes: map[string]string{}}
	for _, c := range copies {
		if c.Nomad != nil && c.NomadCopy != "" {
			t.Volumes[c.Nomad.ID], t.Namespace = c.NomadCopy, c.NomadNamespace
		}
	}
	if nj.Restore != nil {
		// Fills keys: the order does not matter.
		//workflowcheck:ignore
		for replica, standIn := range nj.Restore.Volumes {
			if cp, ok := t.Volumes[standIn]; ok {
				t.Volumes[replica] = cp
			}
		}
	}
	tj := *nj
	tj.Job, tj.Stop, tj.Test, tj.Restore = nj.Job+"-test", "", t, nil
	tw := w
	tw.Name = w.Name + "-test"
	tw.Sites = map[string]plans.WorkloadRef{site: {Nomad: &tj}}
	return tw
}

// VolumeEnv is the variable in which a hook (or a Nomad job's meta)
// finds the volume that stands in for the plan's volume name: a volume
// restored from a point in time, or one a reprotect made protected.
func VolumeEnv(name string) string { return "DROVER_VOLUME_" + envName(name) }

// envName makes a volume id fit an environment variable's name.
func envName(v string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, v)
}

// cleanupTest stops the test workloads and deletes the copies and
// snapshots, each step safe to repeat; it runs in a context of its own.
//
// A copy made from a point in time leaves the point's snapshot (it is
// protection's), and the run's hold on the point (held names the run)
// is released once the copies are gone.
func cleanupTest(ctx workflow.Context, r *run, in TestRecoveryInput, res *TestRecoveryResult, held workflow.Execution) error {
	p, at := in.Plan, in.At
	var errs []string
	if err := stopAll(ctx, r, testPlan(p, at, res.Copies), at, orchestrators.ActionTestRecovery); err != nil {
		errs = append(errs, ErrorText(err))
	}
	err := r.step(ctx, newRef(KindCleanup, "delete the copies and snapshots on "+at, at), false, func(ctx workflow.Context) (string, error) {
		deleted := 0
		del := func(rpc string, fn any, id string, members []string) error {
			e, err := activities.EndpointFor(p, at, rpc)
			if err != nil {
				return err
			}
			_, err = rpcCall[struct{}](ctx, activities.CallOptions(p, at, rpc), fn, activities.DeleteInput{Endpoint: e, ID: id, Members: members})
			if err == nil {
				deleted++
			}
			return err
		}
		lost := findLost(ctx, p, at, res)
		groupSnaps := map[string][]string{}
		var order []string
		nomadDel := func(fn any, c TestCopy, id string) error {
			in := activities.NomadCSIInputFor(p, at)
			in.Volume, in.ID, in.Namespace = *c.Nomad, id, c.NomadNamespace
			_, err := call[struct{}](ctx, activities.WorkloadOptions(p, at, in.Workload), fn, in)
			if err == nil {
				deleted++
			}
			return err
		}
		for _, c := range res.Copies {
			switch {
			case c.Copy != "" && c.NomadCopy != "":
				if err := nomadDel(wl.NomadDeleteCopy, c, c.NomadCopy); err != nil {
					return "", err
				}
			case c.Copy != "":
				if err := del(activities.RPCDeleteVolume, st.DeleteVolume, c.Copy, nil); err != nil {
					return "", err
				}
			}
			if c.Point != "" {
				continue
			}
			if c.SnapshotByNomad && c.Snapshot != "" {
				if err := nomadDel(wl.NomadDeleteSnapshot, c, c.Snapshot); err != nil {
					return "", err
				}
				continue
			}
			if c.GroupSnapshot != "" {
				if _, ok := groupSnaps[c.GroupSnapshot]; !ok {
					order = append(order, c.GroupSnapshot)
				}
				groupSnaps[c.GroupSnapshot] = append(groupSnaps[c.GroupSnapshot], c.Snapshot)
			} else if c.Snapshot != "" {
				if err := del(activities.RPCDeleteSnapshot, st.DeleteSnapshot, c.Snapshot, nil); err != nil {
					return "", err
				}
			}
		}
		for _, g := range order {
			if err := del(activities.RPCDeleteVolumeGroupSnapshot, st.DeleteVolumeGroupSnapshot, g, groupSnaps[g]); err != nil {
				return "", err
			}
		}
		out := fmt.Sprintf("%d copies and snapshots deleted", deleted)
		if res.Point != nil {
			// The snapshots are the point's: only the copies went.
			out = fmt.Sprintf("%d copies deleted", deleted)
		}
		if lost > 0 {
			out += fmt.Sprintf(" (%d asked for again by name: their create had no answer)", lost)
		}
		released, err := releasePoint(ctx, p.Metadata.Name, at, held, res)
		return out + released, err
	})
	if err != nil {
		errs = append(errs, ErrorText(err))
	}
	if len(errs) > 0 {
		return temporal.NewNonRetryableApplicationError("the cleanup of the test recovery did not finish: "+strings.Join(errs, "; "), ErrAborted, nil)
	}
	return nil
}

// findLost asks again, by name, for the snapshots and copies whose create
// call was made but never answered, and records their ids in res for the
// deletion; it returns how many it found. A create refused now made
// nothing to delete: the storage holds no object of that name it could
// return. Copies are asked for only from a snapshot found.
func findLost(ctx workflow.Context, p *plans.Plan, at string, res *TestRecoveryResult) int {
	found := 0
	for i := range res.Copies {
		c := &res.Copies[i]
		if c.Snapshot != "" || c.SnapshotName == "" {
			continue
		}
		if len(c.Members) > 0 {
			gs, err := groupSnapshot(ctx, p, at, c.SnapshotName, c.Members)
			if err != nil {
				continue
			}
			for _, sn := range gs.Snapshots {
				for j := range res.Copies {
					if o := &res.Copies[j]; o.SnapshotName == c.SnapshotName && o.Volume == sn.Volume {
						o.Snapshot, o.GroupSnapshot, o.Size = sn.ID, gs.ID, sn.Size
						found++
					}
				}
			}
			continue
		}
		if sn, err := volumeSnapshot(ctx, p, at, c); err == nil {
			c.Snapshot, c.Size = sn.ID, sn.Size
			found++
		}
	}
	for i := range res.Copies {
		c := &res.Copies[i]
		if c.Copy != "" || c.CopyName == "" || c.Snapshot == "" {
			continue
		}
		e, err := activities.EndpointFor(p, at, activities.RPCCreateVolume)
		if err != nil {
			continue
		}
		if id, err := copyVolume(ctx, p, at, e, c); err == nil {
			c.Copy = id
			found++
		}
	}
	return found
}

// TestCleanupInput names what a test recovery run left behind: its
// copies (as its QueryTestCopies answer gives them) at site At. The
// cleanup deletes what run Run itself reports (RunReader), not Copies:
// anyone who may start a workflow could name any volume there.
type TestCleanupInput struct {
	Origin
	Plan   *plans.Plan `json:"plan"`
	At     string      `json:"at"`
	Run    string      `json:"run"`
	Copies []TestCopy  `json:"copies"`
}

// TestCleanupResult is a TestCleanup's timeline, the run it cleaned up
// after and the copies it deleted.
type TestCleanupResult struct {
	Progress
	Run     string     `json:"run"`
	At      string     `json:"at"`
	Copies  []TestCopy `json:"copies"`
	Cleaned bool       `json:"cleaned"`
}

// StartTestCleanup starts the cleanup after a test recovery run that
// ended without its own (drctl test-recovery --cleanup), under the plan's
// test recovery id: never beside a running test. It refuses with a
// *TestBusyError when a test or a cleanup of the plan runs.
func StartTestCleanup(ctx context.Context, c client.Client, in TestCleanupInput) (client.WorkflowRun, error) {
	id := TestRecoveryID(in.Plan.Metadata.Name)
	run, started, err := startOnce(ctx, c, id, in.Origin, Attributes(in.Plan.Metadata.Name, "test-cleanup", in.At), TestCleanup, in)
	if started != nil {
		return nil, &TestBusyError{Plan: in.Plan.Metadata.Name, ID: id, RunID: started.RunId}
	}
	return run, err
}

// runReadOptions bound the worker's reading of a test recovery run.
var runReadOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout:    30 * time.Second,
	ScheduleToCloseTimeout: 2 * time.Minute,
	RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, NonRetryableErrorTypes: []string{errNoRun}},
}

// errNoRun is RunReader's answer for a run it cannot take copies from.
const errNoRun = "NoTestRun"

// TestRunRef names a run of a plan's test recovery id.
type TestRunRef struct {
	Plan string `json:"plan"`
	Run  string `json:"run"`
	// Endpoint is the storage endpoint the cleanup's plan names for the
	// run's site: the run must have made its copies through the same.
	Endpoint string `json:"endpoint,omitempty"`
}

// TestRunCopies is what a test recovery run reports it made, and where.
type TestRunCopies struct {
	At     string     `json:"at"`
	Copies []TestCopy `json:"copies"`
	// Point is the point in time the run held, and PointAt the time
	// that picked it.
	Point   *PointInTime `json:"point,omitempty"`
	PointAt time.Time    `json:"pointAt,omitzero"`
}

// RunReader is the worker's activity that reads a test recovery run, for
// TestCleanup: registered by the worker with its Temporal client, it
// reaches only the plan's test recovery id. Its other methods read which
// plans run an action and who started a run.
type RunReader struct {
	Client client.Client
}

// TestRunCopies asks run in.Run of the plan's test recovery id what it
// made. The run must be a TestRecovery: its copies are what its own
// calls to the storage answered, from a plan whose signature it checked
// first.
func (rr *RunReader) TestRunCopies(ctx context.Context, in TestRunRef) (TestRunCopies, error) {
	if rr == nil || rr.Client == nil {
		return TestRunCopies{}, temporal.NewNonRetryableApplicationError("this worker has no client to read test recovery runs", errNoRun, nil)
	}
	if in.Run == "" {
		return TestRunCopies{}, temporal.NewNonRetryableApplicationError("no run given", errNoRun, nil)
	}
	id := TestRecoveryID(in.Plan)
	d, err := rr.Client.DescribeWorkflowExecution(ctx, id, in.Run)
	var bad *serviceerror.InvalidArgument
	if errors.As(err, &bad) {
		return TestRunCopies{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("run %q of %s: %v", in.Run, id, err), errNoRun, err)
	}
	if isNotFound(err) {
		return TestRunCopies{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("workflow %s has no run %s (or it is past the namespace's retention: delete what it made by hand)", id, in.Run), errNoRun, err)
	}
	if err != nil {
		return TestRunCopies{}, err
	}
	if typ := d.GetWorkflowExecutionInfo().GetType().GetName(); typ != names.TestRecovery {
		return TestRunCopies{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("run %s of %s is a %s, not a test recovery", in.Run, id, typ), errNoRun, nil)
	}
	v, err := rr.Client.QueryWorkflow(ctx, id, in.Run, QueryTestCopies)
	var qf *serviceerror.QueryFailed
	if errors.As(err, &qf) {
		return TestRunCopies{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("run %s of %s does not say what it made: %v", in.Run, id, err), errNoRun, err)
	}
	if err != nil {
		return TestRunCopies{}, err
	}
	var res TestRecoveryResult
	if err := v.Get(&res); err != nil {
		return TestRunCopies{}, err
	}
	if in.Endpoint != "" {
		// Another version of the plan, also validly signed, may name
		// other storage for the site: deleting the run's ids there would
		// miss its copies (and report them cleaned) or hit what has
		// those ids there.
		made, err := rr.runEndpoint(ctx, id, in.Run, res.At)
		if err != nil {
			return TestRunCopies{}, err
		}
		if made != in.Endpoint {
			return TestRunCopies{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("run %s of %s made its copies through %s's storage at %s; this plan names %s: clean up with the plan the test ran with", in.Run, id, res.At, made, in.Endpoint), errNoRun, nil)
		}
	}
	return TestRunCopies{At: res.At, Copies: res.Copies, Point: res.Point, PointAt: res.PointAt}, nil
}

// runEndpoint is the storage endpoint of site at in the plan a test
// recovery run started with, read from its first event.
func (rr *RunReader) runEndpoint(ctx context.Context, id, run, at string) (string, error) {
	it := rr.Client.GetWorkflowHistory(ctx, id, run, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("run %s of %s has no history", run, id), errNoRun, nil)
	}
	ev, err := it.Next()
	if err != nil {
		return "", err
	}
	var in TestRecoveryInput
	if err := codec.Converter().FromPayloads(ev.GetWorkflowExecutionStartedEventAttributes().GetInput(), &in); err != nil || in.Plan == nil || in.Plan.Site(at) == nil {
		return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("run %s of %s: its input names no site %q (%v)", run, id, at, err), errNoRun, nil)
	}
	return in.Plan.Site(at).Storage.Endpoint, nil
}

// RunningActions are those of the plans named whose action id has a
// run open: a site failover leaves them out of its fence.
func (rr *RunReader) RunningActions(ctx context.Context, planNames []string) ([]string, error) {
	if rr == nil || rr.Client == nil {
		return nil, temporal.NewNonRetryableApplicationError("this worker has no client to read runs", errNoRun, nil)
	}
	var busy []string
	for _, n := range planNames {
		d, err := rr.Client.DescribeWorkflowExecution(ctx, ActionID(n), "")
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if d.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			busy = append(busy, n)
		}
	}
	return busy, nil
}

// RunningAction is the action the plan's action id runs ("failover",
// "drill", "reprotect" or "failback": its workflow type), or ""
// when none runs: what a site action names when it finds the plan busy.
func (rr *RunReader) RunningAction(ctx context.Context, plan string) (string, error) {
	if rr == nil || rr.Client == nil {
		return "", temporal.NewNonRetryableApplicationError("this worker has no client to read runs", errNoRun, nil)
	}
	d, err := rr.Client.DescribeWorkflowExecution(ctx, ActionID(plan), "")
	if isNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	info := d.GetWorkflowExecutionInfo()
	if info.GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return "", nil
	}
	return strings.ToLower(info.GetType().GetName()), nil
}

// article is "a" or "an" for the word.
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an"
	}
	return "a"
}

// TestCleanup does a test recovery's cleanup for a run that ended without
// it: the test workloads stopped, the copies and snapshots deleted, those
// whose create had no answer asked for again by name first. What it
// deletes is what the run reports it made, read by the worker.
func TestCleanup(ctx workflow.Context, in TestCleanupInput) (*TestCleanupResult, error) {
	p := in.Plan
	note, view, err := trust(ctx, p, in.Origin)
	if err != nil {
		return nil, err
	}
	p = replacedPlan(p, view.Replaced)
	in.Plan = p
	if p.Site(in.At) == nil {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("plan %q has no site %q", p.Metadata.Name, in.At), ErrPreflight, nil)
	}
	r, err := newRun(ctx, "test cleanup", p)
	if err != nil {
		return nil, err
	}
	r.origin, r.progress.By, r.progress.Trust = in.Origin, in.By, note
	// What to delete comes from the run itself, never from this input.
	var made TestRunCopies
	lctx := workflow.WithLocalActivityOptions(ctx, runReadOptions)
	var rr *RunReader
	if err := workflow.ExecuteLocalActivity(lctx, rr.TestRunCopies, TestRunRef{Plan: p.Metadata.Name, Run: in.Run, Endpoint: p.Site(in.At).Storage.Endpoint}).Get(ctx, &made); err != nil {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("cannot read what test recovery run %q of plan %q made: %v", in.Run, p.Metadata.Name, ErrorText(err)), ErrPreflight, nil)
	}
	if made.At != in.At {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("test recovery run %q of plan %q ran at %q, not %q", in.Run, p.Metadata.Name, made.At, in.At), ErrPreflight, nil)
	}
	res := &TestRecoveryResult{At: in.At, Copies: made.Copies, Point: made.Point, PointAt: made.PointAt}
	err = cleanupTest(ctx, r, TestRecoveryInput{Origin: in.Origin, Plan: p, At: in.At}, res, workflow.Execution{ID: TestRecoveryID(p.Metadata.Name), RunID: in.Run})
	r.progress.End, r.progress.State = workflow.Now(ctx), StateCompleted
	if err != nil {
		r.progress.State = StateAborted
	}
	return &TestCleanupResult{Progress: *r.progress, Run: in.Run, At: in.At, Copies: res.Copies, Cleaned: err == nil}, err
}
