package workflows

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/plans"
)

// ReleaseInput releases what a failover to a point in time kept, once a
// reprotect made the restored volumes the protected ones (drctl
// release): the failover's hold on its point, and the replicas the
// restored volumes replaced. To is the site where those replicas are
// primary (the failover's), From the plan's other site.
type ReleaseInput struct {
	Origin
	Plan *plans.Plan `json:"plan"`
	From string      `json:"from"`
	To   string      `json:"to"`
}

// ReleaseResult is the timeline, the point released and the replicas
// released (group, site, the ref as the plan gave it), which are left on
// storage.
type ReleaseResult struct {
	Progress
	Point    string                               `json:"point,omitempty"`
	Released map[string]map[string]plans.GroupRef `json:"released,omitempty"`
}

// Release ends what a failover to a point in time kept, on the
// operator's word, as the plan's action (one at a time with the
// others). It acts on what the plan's record says (ReplacedEntry), never
// on its input:
//
//  1. it releases the failover's hold on the point, with the worker's
//     seal: protection may prune the point again, as its policy says;
//  2. it disables replication of the kept replicas at To, where they are
//     primary, so that their damage no longer ships to From;
//  3. it records that nothing is kept any more.
//
// It deletes nothing: the kept replicas stay on both sites' storage, as
// the storage keeps volumes whose replication is off, for the operator
// to delete with the storage's own tools once done with them. A plan
// whose restored volumes no reprotect has protected is refused: the
// promoted replicas are still the only copies of what the failover went
// back from beside the restored volumes, and nothing replicates those.
func Release(ctx workflow.Context, in ReleaseInput) (*ReleaseResult, error) {
	r, err := begin(ctx, "release", in.Plan, in.From, in.To, in.Origin)
	if err != nil {
		return nil, err
	}
	res := &ReleaseResult{}
	err = release(ctx, r, in, res)
	r.finish(ctx, err)
	res.Progress = *r.progress
	return res, err
}

func release(ctx workflow.Context, r *run, in ReleaseInput, res *ReleaseResult) error {
	plan := in.Plan.Metadata.Name
	rep := r.view.Replaced
	switch {
	case r.view.Restored != nil:
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"plan %q runs on volumes restored from point %s at %s that no reprotect has protected yet: reprotect first (drctl reprotect), then release what the failover kept",
			plan, r.view.Restored.Point, r.view.Restored.Site), ErrPreflight, nil)
	case rep == nil || (len(rep.Kept) == 0 && rep.Holder == ""):
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"plan %q keeps nothing to release: its record names no replicas a failover to a point in time kept, nor a hold of its", plan), ErrPreflight, nil)
	case rep.Site != in.To:
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"plan %q: the replicas the failover to point %s kept are primary at %s, not %s", plan, rep.Point, rep.Site, in.To), ErrPreflight, nil)
	}
	res.Point = rep.Point
	if rep.Holder != "" {
		err := r.step(ctx, newRef(KindRelease, "release the point "+rep.Point, "point"), false, func(ctx workflow.Context) (string, error) {
			pt, err := usePoint(ctx, PointUse{Plan: plan, Site: rep.Site, Point: rep.Point, By: rep.Holder, Release: true})
			if err != nil {
				return "", err
			}
			if pt.ID == "" {
				return "point " + rep.Point + " is gone: nothing held", nil
			}
			return fmt.Sprintf("released the failover's hold on point %s (%s); protection prunes it as its policy says", pt.ID, rep.Holder), nil
		})
		if err != nil {
			return err
		}
	}
	if len(rep.Kept) > 0 {
		if err := forGroups(ctx, r, keptPlan(r.signed, rep.Kept), GroupOp{Kind: OpDisable, Site: in.To, Verb: "disable replication of the kept replicas of"}); err != nil {
			return err
		}
		res.Released = rep.Kept
	}
	next := *rep
	next.Kept, next.Holder = nil, ""
	return r.step(ctx, newRef(KindRelease, "record the release", "record"), false, func(ctx workflow.Context) (string, error) {
		if err := note(ctx, plan, RecordChange{Replaced: &next}); err != nil {
			return "", err
		}
		if len(rep.Kept) == 0 {
			return "nothing kept any more", nil
		}
		return "nothing kept any more; the released replicas stay on storage, replication off, for you to delete with the storage's own tools: " + KeptText(rep.Kept), nil
	})
}

// keptPlan is p acting on the kept replicas: each group's refs as the
// plan gave them when the reprotect replaced them, its workloads left
// out.
func keptPlan(p *plans.Plan, kept map[string]map[string]plans.GroupRef) *plans.Plan {
	q := *p
	q.Workloads = nil
	q.VolumeGroups = nil
	for _, g := range p.VolumeGroups {
		refs, ok := kept[g.Name]
		if !ok {
			continue
		}
		g.Sites = maps.Clone(refs)
		q.VolumeGroups = append(q.VolumeGroups, g)
	}
	return &q
}

// KeptText names the kept replicas, group by group: "db: vg-1 at east,
// vg-1 at west".
func KeptText(kept map[string]map[string]plans.GroupRef) string {
	var parts []string
	// Sorted: the maps' order never shows.
	//workflowcheck:ignore
	for _, g := range slices.Sorted(maps.Keys(kept)) {
		var at []string
		//workflowcheck:ignore
		for _, site := range slices.Sorted(maps.Keys(kept[g])) {
			ref := kept[g][site]
			what := ref.GroupID
			if what == "" {
				what = strings.Join(ref.Volumes, " ")
			}
			at = append(at, what+" at "+site)
		}
		sort.Strings(at)
		parts = append(parts, g+": "+strings.Join(at, ", "))
	}
	return strings.Join(parts, "; ")
}
