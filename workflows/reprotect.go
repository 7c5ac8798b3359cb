package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/plans"
)

// ReprotectInput starts a reprotect: site From, lost in a failover to
// site To, is back; its copies become To's secondaries again.
type ReprotectInput struct {
	Origin
	Plan *plans.Plan `json:"plan"`
	From string      `json:"from"`
	To   string      `json:"to"`
	// Fenced are the CIDRs the failover fenced (FailoverResult.Fenced),
	// lifted with the plan's own CIDRs of From.
	Fenced []string `json:"fenced,omitempty"`
}

// ReprotectResult is the timeline.
type ReprotectResult struct {
	Progress
	// ResyncStart is when the resync began; To's first sync after it is
	// the proof that From holds To's data.
	ResyncStart time.Time `json:"resyncStart"`
	// Registered are, in a reprotect of volumes restored from a point
	// in time, the copies at From that it registers with From's Nomad,
	// named before the calls.
	Registered []NomadRegistration `json:"registered,omitempty"`
}

// Reprotect makes the returned site From a replica of To again:
//
//  1. stop From's workloads (they may have come back with the site);
//  2. demote From's groups with force (their old primaries are stale);
//  3. resync From with force, which discards whatever From wrote after
//     the failover, as reprotect means to (a copy that was primary when
//     its peer was promoted with force has diverged: split-brain), until
//     each group reports ready or To has shipped a sync to it;
//  4. wait on To for a completed sync newer than the resync start;
//  5. unfence From's clients.
//
// After it, Failback can move the plan back to From without data loss.
func Reprotect(ctx workflow.Context, in ReprotectInput) (*ReprotectResult, error) {
	r, err := begin(ctx, "reprotect", in.Plan, in.From, in.To, in.Origin)
	if err != nil {
		return nil, err
	}
	in.Plan = r.plan
	res := &ReprotectResult{}
	err = reprotect(ctx, r, in, res)
	r.finish(ctx, err)
	res.Progress = *r.progress
	return res, err
}

func reprotect(ctx workflow.Context, r *run, in ReprotectInput, res *ReprotectResult) error {
	if rs := r.view.Restored; rs != nil && rs.Site == in.To {
		// A failover to a point in time: the restored volumes become the
		// protected ones.
		return reprotectRestored(ctx, r, in, res, rs)
	}
	p, from, to := in.Plan, in.From, in.To
	if err := beforeDemote(ctx, r, p, from, to); err != nil {
		return err
	}
	if err := forGroups(ctx, r, p, GroupOp{Kind: OpDemote, Site: from, Force: true}); err != nil {
		return err
	}
	res.ResyncStart = workflow.Now(ctx)
	if err := forGroups(ctx, r, p, GroupOp{Kind: OpResync, Site: from, Discard: true, Primary: to, After: res.ResyncStart}); err != nil {
		return err
	}
	if err := forGroups(ctx, r, p, GroupOp{Kind: OpWaitSync, Site: to, After: res.ResyncStart}); err != nil {
		return err
	}
	if err := unfence(ctx, r, p, from, to, in.Fenced); err != nil {
		return err
	}
	return protectFrom(ctx, r, p, to)
}

// beforeDemote is what every reprotect does before it demotes From's
// copies: storage is the truth, so To must hold the primary copies,
// whatever the record that aimed the reprotect says; then From's
// workloads stop, and the beforeDemote gate opens if the plan asks.
func beforeDemote(ctx workflow.Context, r *run, p *plans.Plan, from, to string) error {
	if err := holdsPrimary(ctx, r, p, to, from, "reprotect"); err != nil {
		return err
	}
	if err := stopAll(ctx, r, p, from, "reprotect"); err != nil {
		return err
	}
	return r.gate(ctx, "beforeDemote")
}
