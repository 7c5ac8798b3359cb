package workflows

import (
	"context"
	"fmt"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/plans"
)

// VerifyInput compares a plan's record with its storage.
type VerifyInput struct {
	Origin
	Plan   *plans.Plan `json:"plan"`
	Record *PlanRecord `json:"record"`
}

// VerifyResult is what storage reports against the record: every check
// made, and each drift found.
type VerifyResult struct {
	Checked []string `json:"checked"`
	Drift   []string `json:"drift"`
	// Unverified names what could not be checked: a storage that did not
	// answer is no drift, and no agreement either.
	Unverified []string `json:"unverified,omitempty"`
}

// Verify asks each site's storage what it has fenced (ListClusterFence)
// and the recorded primary for the replication of every group
// (GetVolumeReplicationInfo), and names every difference from the record:
// CIDRs recorded as fenced that the storage does not list, CIDRs the
// storage lists that the record does not hold, groups whose copy on the
// recorded primary is not replicating from there. It changes nothing.
// Each call is made once, with no long retries: a site that does not
// answer is reported, not waited for.
func Verify(ctx workflow.Context, in VerifyInput) (*VerifyResult, error) {
	p, rec := in.Plan, in.Record
	// The plan names endpoints and secrets the worker calls with: it is
	// checked first, as an action's is.
	_, view, err := trust(ctx, p, in.Origin)
	if err != nil {
		return nil, err
	}
	p = replacedPlan(p, view.Replaced)
	if p == nil || rec == nil {
		return nil, fmt.Errorf("verify: give the plan and its record")
	}
	ctx = workflow.WithValue(ctx, regularOnly{}, true)
	res := &VerifyResult{Checked: []string{}, Drift: []string{}}
	drift := func(format string, a ...any) { res.Drift = append(res.Drift, fmt.Sprintf(format, a...)) }
	unverified := func(format string, a ...any) { res.Unverified = append(res.Unverified, fmt.Sprintf(format, a...)) }
	for _, site := range p.Sites {
		e, err := activities.EndpointFor(p, site.Name, activities.RPCListClusterFence)
		if err != nil {
			drift("fences through %s: %v", site.Name, err)
			continue
		}
		o := activities.CallOptions(p, site.Name, activities.RPCListClusterFence)
		o.ScheduleToCloseTimeout = o.StartToCloseTimeout
		l, err := call[activities.FenceList](ctx, o, st.ListClusterFence, activities.FenceListInput{Endpoint: e})
		if cannotList(err) {
			res.Checked = append(res.Checked, fmt.Sprintf("%s's fences not checked: its storage does not implement ListClusterFence", site.Name))
			continue
		}
		if err != nil {
			unverified("the storage of %s did not list its fences: %s", site.Name, ErrorText(err))
			continue
		}
		res.Checked = append(res.Checked, fmt.Sprintf("%s lists %d fenced CIDR(s)", site.Name, len(l.CIDRs)))
		// The two sites share a fence domain: a fence made through one
		// may be listed by both. Each recorded fence must be listed by the
		// site it was made through; each listed CIDR must be recorded.
		var recorded []string
		for _, f := range rec.Fences {
			recorded = append(recorded, f.CIDRs...)
			if f.Via != site.Name {
				continue
			}
			for _, c := range f.CIDRs {
				if !slices.Contains(l.CIDRs, c) {
					drift("recorded as fenced through %s (%s's clients, by %s), but %s does not list %s", site.Name, f.Site, f.By, site.Name, c)
				}
			}
		}
		for _, c := range l.CIDRs {
			if !slices.Contains(recorded, c) {
				drift("%s lists %s as fenced, but the record holds no such fence", site.Name, c)
			}
		}
	}
	if rec.Primary == "" {
		drift("the record names no primary site: no action or protection has said which it is")
		return res, nil
	}
	if p.Site(rec.Primary) == nil {
		drift("the record names %s as primary, a site the plan does not have", rec.Primary)
		return res, nil
	}
	// One SurveyReplication per surveyBatch sources, as Protect polls.
	var (
		calls      []activities.ReplicationInput
		owner      []string
		notPrimary []string
	)
	byName := p.Groups()
	for _, g := range groupNames(p) {
		ins, err := activities.GroupInputs(p, rec.Primary, byName[g], activities.RPCGetVolumeReplicationInfo, false)
		if err != nil {
			notPrimary = append(notPrimary, fmt.Sprintf("%s (%v)", g, err))
			continue
		}
		for _, in := range ins {
			calls, owner = append(calls, in), append(owner, g)
		}
	}
	o := activities.CallOptions(p, rec.Primary, activities.RPCGetVolumeReplicationInfo)
	o.ScheduleToCloseTimeout = o.StartToCloseTimeout
	seen := map[string]bool{}
	var unsynced []string
	for start := 0; start < len(calls); start += surveyBatch {
		end := min(start+surveyBatch, len(calls))
		out, err := call[activities.SurveyResult](ctx, o, st.SurveyReplication,
			activities.SurveyInput{Calls: calls[start:end], Parallelism: p.Policy.Parallelism})
		for i := start; i < end; i++ {
			g := owner[i]
			if seen[g] {
				continue
			}
			switch {
			case err != nil || len(out.Entries) != end-start:
				seen[g] = true
				unverified("could not ask %s about group %s: %v", rec.Primary, g, err)
			case out.Entries[i-start].Type == activities.ErrNotFound:
				// Primary, but no sync has completed since it became so.
				seen[g] = true
				unsynced = append(unsynced, g)
			case out.Entries[i-start].Type == activities.ErrFailedPrecondition:
				seen[g] = true
				notPrimary = append(notPrimary, fmt.Sprintf("%s (%s)", g, out.Entries[i-start].Error))
			case out.Entries[i-start].Error != "":
				seen[g] = true
				unverified("could not ask %s about group %s: %s", rec.Primary, g, out.Entries[i-start].Error)
			case out.Entries[i-start].Info.Status != "" && out.Entries[i-start].Info.Status != "HEALTHY":
				seen[g] = true
				drift("group %s on %s replicates %s: %s", g, rec.Primary, out.Entries[i-start].Info.Status, out.Entries[i-start].Info.StatusMessage)
			}
		}
	}
	res.Checked = append(res.Checked, fmt.Sprintf("replication info of %d group(s) on the recorded primary %s", len(p.VolumeGroups), rec.Primary))
	if len(unsynced) > 0 {
		res.Checked = append(res.Checked, fmt.Sprintf("no sync completed yet from %s for %s", rec.Primary, strings.Join(unsynced[:min(len(unsynced), 5)], ", ")))
	}
	if len(notPrimary) > 0 {
		drift("the record names %s as primary, but its storage says it does not replicate from there for %d group(s): %s%s",
			rec.Primary, len(notPrimary), strings.Join(notPrimary[:min(len(notPrimary), 5)], "; "), primaryElsewhere(ctx, p, rec))
	}
	return res, nil
}

// primaryElsewhere asks the plan's other sites whether one holds every
// primary copy the recorded primary does not, and says the fix: the
// storage is the truth, and a reprotect toward that site (which checks
// it before it demotes anything) leaves it in the record's last action.
func primaryElsewhere(ctx workflow.Context, p *plans.Plan, rec *PlanRecord) string {
	for _, site := range p.Sites {
		if site.Name == rec.Primary {
			continue
		}
		calls, err := roleCalls(p, site.Name, roleSample(p, surveyBatch))
		if err != nil {
			return ""
		}
		if len(calls) == 0 {
			return ""
		}
		o := activities.CallOptions(p, site.Name, activities.RPCGetVolumeReplicationInfo)
		o.ScheduleToCloseTimeout = o.StartToCloseTimeout
		out, err := call[activities.SurveyResult](ctx, o, st.SurveyReplication, activities.SurveyInput{Calls: calls, Parallelism: p.Policy.Parallelism})
		if err != nil {
			continue
		}
		if primary, notPrimary, failed := countRoles(out); primary == len(calls) && notPrimary == 0 && failed == 0 {
			return fmt.Sprintf(". The storage of %s reports every copy asked (%d) as primary: the record is wrong, the storage is the truth. "+
				"Fix: drctl reprotect PLAN --from %s, PLAN the file of plan %s (drctl and the worker check the storage before %s is demoted, so that %s's copies become replicas of %s's, and the record's last action then names %s)",
				site.Name, len(calls), rec.Primary, p.Metadata.Name, rec.Primary, rec.Primary, site.Name, site.Name)
		}
	}
	return ". No other site reports holding every primary copy either: look at the storage before any action"
}

// StartVerify starts (or joins) the plan's verification.
func StartVerify(ctx context.Context, c client.Client, p *plans.Plan, rec *PlanRecord, o Origin) (client.WorkflowRun, error) {
	return withAttributes(ctx, c, client.StartWorkflowOptions{ID: VerifyID(p.Metadata.Name), TaskQueue: TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING},
		Attributes(p.Metadata.Name, "verify", ""), Verify, VerifyInput{Origin: o, Plan: p, Record: rec})
}
