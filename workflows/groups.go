package workflows

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/plans"
)

// GroupsPerChild is the size of the batches in which a plan with more
// volume groups than this fans out to child workflows (GroupBatch). The
// action then records one step per batch, and no history grows with the
// number of groups: a 5,000-group failover is 50 children of a few
// hundred events each under a parent of a few hundred.
const GroupsPerChild = 100

// OpKind identifies a kind of per-group operation. It is what a
// GroupBatch child's input carries and what code switches on; the words
// a step shows are its Text, kept apart so that they can change.
type OpKind string

// The kinds of per-group operation.
const (
	OpPromote      OpKind = "promote"
	OpDemote       OpKind = "demote"
	OpResync       OpKind = "resync"
	OpWaitSync     OpKind = "wait-sync"
	OpCheck        OpKind = "check"
	OpEnable       OpKind = "enable"
	OpDisable      OpKind = "disable"
	OpFinalPromote OpKind = "final-promote"
)

const ErrGroupsFail = "GroupsFailed"

// opText is the display text of each kind: the first words of its steps'
// names ("wait for a sync of db on west").
var opText = []struct {
	kind OpKind
	text string
}{
	{OpPromote, "promote"},
	{OpDemote, "demote"},
	{OpResync, "resync"},
	{OpWaitSync, "wait for a sync of"},
	{OpCheck, "check replication of"},
	{OpEnable, "enable replication of"},
	{OpDisable, "disable replication of"},
	{OpFinalPromote, "promote after the final sync"},
}

// Text is the words a step of this kind shows.
func (k OpKind) Text() string {
	for _, t := range opText {
		if t.kind == k {
			return t.text
		}
	}
	return string(k)
}

// GroupOp is one operation on volume groups on one site, in a form a
// child workflow can take as input.
type GroupOp struct {
	Kind OpKind `json:"kind"`
	// Verb names the steps ("rollback: promote"); the kind's Text by
	// default.
	Verb  string `json:"verb,omitempty"`
	Site  string `json:"site"`
	Force bool   `json:"force,omitempty"`
	// After: OpWaitSync waits for a sync newer than this.
	After time.Time `json:"after,omitzero"`
	// Guard marks the steps as guards (see Step.Guard).
	Guard bool `json:"guard,omitempty"`
	// Rollback marks the operation that undoes a failed failback: its
	// steps' kind is "rollback-" and the op's kind.
	Rollback bool `json:"rollback,omitempty"`
	// Discard: OpResync forces the resync of a copy the storage finds
	// diverged, discarding its writes (reprotect only).
	Discard bool `json:"discard,omitempty"`
	// Primary: OpResync is also done once this site's primary copy has
	// shipped a sync begun after After (or after the step began). Every
	// action that sets it demoted Site's copies before: one the storage
	// finds primary again is demoted again (demoteAgain).
	Primary string `json:"primary,omitempty"`
	// Of tells the steps of an operation apart from the same kind's on
	// the same groups and site in one run (their ids end with it).
	Of string `json:"of,omitempty"`
}

func (op GroupOp) verb() string {
	if op.Verb != "" {
		return op.Verb
	}
	return op.Kind.Text()
}

// do runs the operation on one group.
func (op GroupOp) do(ctx workflow.Context, p *plans.Plan, group string) (string, error) {
	switch op.Kind {
	case OpPromote:
		return replicate(ctx, p, op.Site, group, activities.RPCPromoteVolume, op.Force, st.PromoteVolume)
	case OpDemote:
		return replicate(ctx, p, op.Site, group, activities.RPCDemoteVolume, op.Force, st.DemoteVolume)
	case OpEnable:
		return replicate(ctx, p, op.Site, group, activities.RPCEnableVolumeReplication, false, st.EnableVolumeReplication)
	case OpDisable:
		return replicate(ctx, p, op.Site, group, activities.RPCDisableVolumeReplication, false, st.DisableVolumeReplication)
	case OpResync:
		return resync(ctx, p, op, group)
	case OpWaitSync:
		return waitSync(ctx, p, op.Site, group, op.After)
	case OpCheck:
		return freshWithin(ctx, p, op.Site, group)
	case OpFinalPromote:
		return promoteAfterFinalSync(ctx, p, op.Site, group, nil)
	}
	return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("unknown group operation %q", op.Kind), ErrPreflight, nil)
}

// GroupBatchInput is one child's share of an operation: the plan cut down
// to the batch's groups (the sites and policy kept, the workloads left
// out), and the operation.
type GroupBatchInput struct {
	Plan *plans.Plan `json:"plan"`
	Op   GroupOp     `json:"op"`
}

// GroupFailure is a group the operation failed on, after its retries.
type GroupFailure struct {
	Group string `json:"group"`
	Error string `json:"error"`
	Type  string `json:"type,omitempty"`
}

// GroupBatchResult tells which groups the operation is done on and which
// it failed on.
type GroupBatchResult struct {
	Done   []string       `json:"done"`
	Failed []GroupFailure `json:"failed,omitempty"`
}

// GroupBatch runs an operation on every group of its plan, at most
// policy.parallelism at a time. A group's failure is reported in the
// result, not as the child's error: the parent decides (pause, roll back).
func GroupBatch(ctx workflow.Context, in GroupBatchInput) (*GroupBatchResult, error) {
	if err := trustParent(ctx); err != nil {
		return nil, err
	}
	p := in.Plan
	names := make([]string, len(p.VolumeGroups))
	for i, g := range p.VolumeGroups {
		names[i] = g.Name
	}
	errs := map[string]error{}
	_ = parallel(ctx, names, p.Policy.Parallelism, func(ctx workflow.Context, group string) error {
		if _, err := in.Op.do(ctx, p, group); err != nil {
			errs[group] = err
		}
		return nil
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := &GroupBatchResult{Done: []string{}}
	for _, g := range names {
		if err, ok := errs[g]; ok {
			typ, _, _ := activities.FailureOf(err)
			res.Failed = append(res.Failed, GroupFailure{Group: g, Error: ErrorText(err), Type: typ})
		} else {
			res.Done = append(res.Done, g)
		}
	}
	return res, nil
}

// fansOut tells whether a plan's groups go to child workflows.
func fansOut(p *plans.Plan) bool {
	return len(p.VolumeGroups) > GroupsPerChild
}

// batches cuts each priority's groups into batches of GroupsPerChild,
// lowest priority first.
func batches(p *plans.Plan) [][]string {
	var out [][]string
	for _, prio := range byPriority(p.VolumeGroups, func(g plans.VolumeGroup) int { return g.Priority }, func(g plans.VolumeGroup) string { return g.Name }) {
		for c := range slices.Chunk(prio, GroupsPerChild) {
			out = append(out, c)
		}
	}
	return out
}

// subPlan is p with only the named groups, in p's order, and no
// workloads. An operation that runs in GroupBatch children cuts one for
// each child: the groups are found through an index of p's built once,
// not by a scan of p per child, which at 20,000 groups spent over a second
// of workflow task time on the cuts alone (200 children, each scanning
// 20,000 groups against its 100).
func (r *run) subPlan(p *plans.Plan, groups []string) *plans.Plan {
	if r.indexed != p || len(r.groupAt) != len(p.VolumeGroups) {
		r.indexed, r.groupAt = p, make(map[string]int, len(p.VolumeGroups))
		for i, g := range p.VolumeGroups {
			r.groupAt[g.Name] = i
		}
	}
	at := make([]int, 0, len(groups))
	for _, name := range groups {
		if i, ok := r.groupAt[name]; ok {
			at = append(at, i)
		}
	}
	slices.Sort(at)
	at = slices.Compact(at)
	sub := *p
	sub.Workloads = nil
	sub.VolumeGroups = make([]plans.VolumeGroup, len(at))
	for j, i := range at {
		sub.VolumeGroups[j] = p.VolumeGroups[i]
	}
	return &sub
}

// inChild runs op on groups in a GroupBatch child workflow. Its id names
// the parent, the operation and a sequence number, so that drctl and the
// Temporal UI show where it belongs.
func (r *run) inChild(ctx workflow.Context, p *plans.Plan, op GroupOp, groups []string) (*GroupBatchResult, error) {
	r.children++
	kind := strings.NewReplacer(" ", "-", ":", "").Replace(op.verb())
	id := fmt.Sprintf("%s/%s-%s-%d", workflow.GetInfo(ctx).WorkflowExecution.ID, kind, op.Site, r.children)
	ctx = workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: id, TypedSearchAttributes: childAttributes(ctx, "", "")})
	sub := r.subPlan(p, groups)
	if op.Kind == OpResync && op.Primary != "" {
		// A copy found primary again is demoted again only once the
		// site's workloads are confirmed stopped (demoteAgain).
		sub.Workloads = workloadsOn(p, op.Site)
	}
	var res GroupBatchResult
	if err := workflow.ExecuteChildWorkflow(ctx, GroupBatch, GroupBatchInput{Plan: sub, Op: op}).Get(ctx, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// batchFailure is the error of a batch some groups of which failed: it
// names up to five of them with their errors.
func batchFailure(op GroupOp, failed []GroupFailure, total int) error {
	lines := make([]string, 0, 5)
	for _, f := range failed[:min(len(failed), 5)] {
		lines = append(lines, f.Group+": "+f.Error)
	}
	more := ""
	if n := len(failed) - len(lines); n > 0 {
		more = fmt.Sprintf("; and %d more", n)
	}
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s failed on %d of %d groups on %s: %s%s",
		op.verb(), len(failed), total, op.Site, strings.Join(lines, "; "), more), ErrGroupsFail, nil)
}

// forGroups runs op on every volume group of the plan, by priority, each
// priority's groups at most policy.parallelism at a time. A small plan
// has one step per group ("promote db on west"); a plan of more than
// GroupsPerChild groups has one step per batch, each batch a child
// workflow. A batch that failed on some groups pauses like any step, and
// its retry runs again only those groups.
func forGroups(ctx workflow.Context, r *run, p *plans.Plan, op GroupOp) error {
	if fansOut(p) {
		if rpc, ok := batchRPC(op); ok {
			return inBatches(ctx, r, p, op, rpc)
		}
		bs := batches(p)
		for _, b := range bs {
			r.add(batchStep(op, b), op.Guard)
		}
		for _, b := range bs {
			left, done := b, 0
			err := r.step(ctx, batchStep(op, b), false, func(ctx workflow.Context) (string, error) {
				res, err := r.inChild(ctx, p, op, left)
				if err != nil {
					return "", err
				}
				done += len(res.Done)
				out := fmt.Sprintf("%d of %d groups done", done, len(b))
				if len(res.Failed) > 0 {
					left = left[:0:0]
					for _, f := range res.Failed {
						left = append(left, f.Group)
					}
					return out, batchFailure(op, res.Failed, len(res.Failed)+len(res.Done))
				}
				return out, nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	}
	prios := byPriority(p.VolumeGroups, func(g plans.VolumeGroup) int { return g.Priority }, func(g plans.VolumeGroup) string { return g.Name })
	name := func(g string) stepRef { return groupStep(op, g) }
	return r.stepBatches(ctx, prios, name, op.Guard, func(ctx workflow.Context, group string) (string, error) {
		return op.do(ctx, p, group)
	})
}
