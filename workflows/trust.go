package workflows

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/codec"
	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/plans"
)

// Origin is where an action's request came from: the signature of its
// plan, and who asked. Every action's and Protect's input carries it.
type Origin struct {
	// Signature is the plan's signature (plans.Sign); the worker refuses
	// a plan without a valid one from a key it trusts.
	Signature *plans.Signature `json:"signature,omitempty"`
	// By is who started the action: drctl's identity (user@host), or its
	// --by.
	By string `json:"by,omitempty"`
	// View is what a site action read of the plan's record when it
	// checked the plan, for the plan's action it starts as its child
	// (checkedBySiteAction); any other workflow reads the record itself
	// and ignores it.
	View *RecordView `json:"view,omitempty"`
	// RecordOverride is the operator's reason to run a failover without
	// its plan's record's answer (drctl failover --override), when a
	// workflow that is not Drover's record holds its ID or the record
	// does not answer: the failover goes on with the plan's signature
	// checked, says so, and its changes go to the record once one
	// answers (RecordLater). Every other action ignores it.
	RecordOverride string `json:"recordOverride,omitempty"`
}

// MemoBy is the memo field where Start and StartProtect record who
// started a workflow, for listings (drctl list).
const MemoBy = "by"

// who is the memo of a workflow started for o.
func (o Origin) memo() map[string]any {
	if o.By == "" {
		return nil
	}
	return map[string]any{MemoBy: o.By}
}

// origin returns the Origin an action's input carries.
func (o Origin) origin() Origin { return o }

// trust is the first thing every action and Protect do (invariant 9): the
// worker checks the plan's signature against the keys it trusts, in the
// VerifyPlan local activity, before any storage call or hook. A refusal
// ends the workflow with a non-retryable UntrustedPlan error naming the
// reason. It returns the note the result shows: the signer, or the
// warning of a worker that does not check.
//
// It also returns what the action needs of the plan's record (the
// volumes that stand in for the plan's, replaced.go): from the record's
// answer to the version of a signed plan, else read.
func trust(ctx workflow.Context, p *plans.Plan, o Origin) (string, RecordView, error) {
	versioned := sealing(ctx)
	if versioned && p != nil {
		ownAttributes(ctx, p.Metadata.Name, actionNames[workflow.GetInfo(ctx).WorkflowType.Name], "", o)
	}
	site, bySite := checkedBySiteAction(ctx, p)
	if bySite && workflow.GetVersion(ctx, childChecksVersion, workflow.DefaultVersion, 1) < 1 {
		var view RecordView
		if o.View != nil {
			view = *o.View
		}
		return site, view, nil
	}
	var view RecordView
	note, err := verifyPlan(ctx, p, o)
	if bySite && err == nil {
		note = site + ", and again at its start: " + note
	}
	switch {
	case err != nil || !versioned || p == nil:
	case o.Signature != nil:
		// Signed and trusted: the newest version of the plan, or refused.
		// (A worker that runs unsigned plans has nothing to compare.)
		view, err = acceptVersion(ctx, p, o)
		if err != nil && ctx.Err() == nil && o.RecordOverride != "" && !bySite && recordUnanswered(err) &&
			workflow.GetInfo(ctx).WorkflowType.Name == names.Failover &&
			workflow.GetVersion(ctx, recordOverrideVersion, workflow.DefaultVersion, 1) >= 1 {
			// The operator's word: an emergency failover goes on without
			// the record (begin says so in a step of its own).
			workflow.GetLogger(ctx).Warn("the failover goes on without the plan's record, by the operator's override", "plan", p.Metadata.Name, "reason", o.RecordOverride, "error", err)
			why := ErrorText(err)
			var checked string
			if checked, err = checkWithoutRecord(ctx, p, o); err == nil {
				view = RecordView{Without: why + "; " + checked}
			}
		}
	default:
		view, err = readView(ctx, p)
	}
	if err == nil && p != nil {
		// The plan's defaults, applied here once for the whole run (a
		// plan from drctl has them already; one started through the API
		// may not). Signatures cover the plan with its defaults. Its one map
		// loop fills missing keys: the order does not matter.
		//workflowcheck:ignore
		p.ApplyDefaults()
	}
	return note, view, err
}

// recordOverrideVersion marks a failover that may go on without its
// plan's record's answer by the operator's override (Origin.RecordOverride).
const recordOverrideVersion = "failover-record-override"

// checkWithoutRecord is an overridden failover's own check of its plan
// version, with no answer from the record: against the version the
// newest run under the record's ID that a Drover worker made had
// accepted (read from its history). An older version is refused as the
// record would; with no such run to read, the note says so.
func checkWithoutRecord(ctx workflow.Context, p *plans.Plan, o Origin) (string, error) {
	var rs *RecordSender
	var known TakenOver
	if err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, takeOverOptions), rs.KnownVersion, p.Metadata.Name).Get(ctx, &known); err != nil {
		return "its version compared with none: the record's runs could not be read (" + ErrorText(err) + ")", nil
	}
	if known.Record == nil || known.Record.Version == nil {
		note := "no run of the record a Drover worker made holds a version"
		if known.Note != "" {
			note += " (" + known.Note + ")"
		}
		return "its version compared with none: " + note, nil
	}
	kv := known.Record.Version
	// The same canonical JSON as acceptVersion's digest.
	//workflowcheck:ignore
	digest, err := planDigest(p)
	if err != nil {
		return "", err
	}
	at := o.Signature.SignedAt
	if at.Before(kv.SignedAt) || (at.Equal(kv.SignedAt) && digest != kv.Digest) {
		return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"Failover refused plan %q without its record's answer: the plan was signed at %s; the last run of its record a Drover worker made (run %s) had accepted a version signed at %s by key %s: sign the current plan, or fail over with it",
			p.Metadata.Name, at.UTC().Format(time.RFC3339Nano), known.From, kv.SignedAt.UTC().Format(time.RFC3339Nano), kv.KeyID), activities.ErrUntrustedPlan, nil)
	}
	return fmt.Sprintf("its version is not older than the one the last run of the record a Drover worker made (run %s) had accepted, signed at %s",
		known.From, kv.SignedAt.UTC().Format(time.RFC3339)), nil
}

// recordUnanswered tells an error of the record's acceptance that is no
// answer (a workflow at its ID that is not Drover's record, a record that
// did not answer in time) from the record's refusals, which no override
// passes: an older version, an unsealed one, a record with nothing to
// trust.
func recordUnanswered(err error) bool {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		switch ae.Type() {
		case activities.ErrUntrustedPlan, ErrRecordUnproven, ErrOlderPlan, ErrRecordRefused:
			return false
		}
	}
	return true
}

// childChecksVersion marks a site action's child that checks its plan
// itself when it starts: the site action checked every plan in its first
// step, but a tier paused for days may start its children long after, a
// newer version of the plan accepted meanwhile, or the signature ended.
// A child recorded before took the site action's check.
const childChecksVersion = "child-checks-plan"

// checkedBySiteAction says whether this is a plan's own action run as a
// site action's child (only a workflow starts a child, and only a site
// action starts the actions as children: a client cannot start one
// under a parent), and the note naming the site action's check of the
// plan, made in its first step. A child recorded before
// childChecksVersion took that check for its own. The plan's defaults
// are applied as trust does.
func checkedBySiteAction(ctx workflow.Context, p *plans.Plan) (string, bool) {
	info := workflow.GetInfo(ctx)
	parent := info.ParentWorkflowExecution
	if parent == nil || p == nil || !strings.HasPrefix(parent.ID, names.SiteActionIDPrefix) {
		return "", false
	}
	switch info.WorkflowType.Name {
	case names.Failover, names.Reprotect, names.Failback, names.Drill:
	default:
		return "", false
	}
	//workflowcheck:ignore
	p.ApplyDefaults()
	return "checked by the site action " + parent.ID, true
}

func verifyPlan(ctx workflow.Context, p *plans.Plan, o Origin) (string, error) {
	var t *activities.PlanTrust
	var res activities.PlanTrustResult
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, activities.VerifyPlanOptions()), t.VerifyPlan,
		activities.VerifyPlanInput{Plan: p, Signature: o.Signature, Workflow: workflow.GetInfo(ctx).WorkflowType.Name}).Get(ctx, &res)
	if err != nil {
		var ae *temporal.ApplicationError
		if errors.As(err, &ae) && ae.Type() == activities.ErrUntrustedPlan {
			return "", temporal.NewNonRetryableApplicationError(ae.Message(), activities.ErrUntrustedPlan, nil)
		}
		return "", err
	}
	return res.Note, nil
}

// trustParent is GroupBatch's check: it acts only as the child of an
// action or Protect, which checked the whole plan before starting it. A
// client cannot start a workflow as another's child, so a GroupBatch
// started from outside (with a forged sub-plan) is refused.
func trustParent(ctx workflow.Context) error {
	if workflow.GetInfo(ctx).ParentWorkflowExecution == nil {
		return temporal.NewNonRetryableApplicationError(
			"GroupBatch refused: it runs only as the child of a DR action or of Protect, which check the plan's signature; it was started on its own",
			activities.ErrUntrustedPlan, nil)
	}
	return nil
}

// A signature approves one version of a plan, and only the newest
// counts: the plan's record keeps the newest version a worker accepted
// (PlanRecord.Version: the signature's time and the plan's digest), and
// every action and Protect, once its signature checks, asks the record
// to accept its own (acceptVersion), before any storage call or hook.
// The record refuses a version of other content signed no later than
// the one it holds (a replay of an older signature, still unexpired), and
// keeps the refusal for the operator. The record decides in its update
// handler, one update at a time, so two actions started together cannot
// both pass with different versions; the update carries the seal of the
// worker that checked the signature (proof.go), so that no client of the
// namespace can move the newest version itself.

// ErrOlderPlan is the refusal of a plan older than the newest version
// accepted; the action ends with UntrustedPlan, naming both.
const ErrOlderPlan = "OlderPlan"

// PlanVersion is a version of a plan as an action or Protect presents it
// to the plan's record.
type PlanVersion struct {
	Digest     string    `json:"digest"`
	SignedAt   time.Time `json:"signedAt"`
	KeyID      string    `json:"keyId"`
	Workflow   string    `json:"workflow"`
	WorkflowID string    `json:"workflowId"`
	RunID      string    `json:"runId"`
	By         string    `json:"by,omitempty"`
	Accepted   time.Time `json:"accepted,omitzero"`
	Proof      *Proof    `json:"proof,omitempty"`
	// View, in the record's answer only, is what the action needs of
	// the record (replaced.go): one turn through the server for both.
	View *RecordView `json:"view,omitempty"`
}

// accept is the record's answer to a plan version: the newest it holds
// after taking v, or a refusal.
func (r *PlanRecord) accept(ctx workflow.Context, ps *proofs, v PlanVersion) (*PlanVersion, error) {
	what := fmt.Sprintf("plan version signed at %s by key %s (%s, by %s)", v.SignedAt.UTC().Format(time.RFC3339Nano), v.KeyID, v.Workflow, v.By)
	if err := ps.check(ctx, RecordProofCheck{Plan: r.Plan, Version: &v}, v.Proof); err != nil {
		// Unsealed: its workflow id is the sender's word, not the
		// worker's.
		r.refuse(RefusedEntry{What: what, Reason: err.Error(), From: UnknownSender, At: workflow.Now(ctx)})
		return nil, temporal.NewNonRetryableApplicationError("the record refused the plan version: "+err.Error(), ErrRecordRefused, nil)
	}
	// Sealed by the worker that ran the workflow: its id is the worker's.
	from := v.WorkflowID
	v.Proof, v.View = nil, nil
	v.Accepted = workflow.Now(ctx)
	if b := r.Rebuilt; b != nil && b.Unproven {
		// Nothing the record knew could be proven (takeover.go): only a
		// version signed since it found so, a key holder's approval of
		// the plan as it is now, restores it.
		if !v.SignedAt.After(b.At) {
			reason := fmt.Sprintf("the record started anew at %s and found nothing it can trust to take over (%s); it takes no plan version signed before then",
				b.At.UTC().Format(time.RFC3339), b.Note)
			r.refuse(RefusedEntry{What: what, Reason: reason, From: from, At: workflow.Now(ctx)})
			workflow.GetLogger(ctx).Warn("the plan's record, with nothing proven, refused a plan version", "plan", r.Plan, "workflowId", from)
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"%s. What it knew (the newest plan version, fences, holds, points, restored volumes) is lost or cannot be proven, and an older signature could otherwise run again. "+
					"To restore it: check the storage (drctl status %s --verify), sign the plan again (drctl plan sign FILE --key KEY) and start the action with the new signature: "+
					"the record starts from that version, naming who restored it", reason, r.Plan), ErrRecordUnproven, nil)
		}
		b.Unproven = false
		restored := v
		b.Restored = &restored
		workflow.GetLogger(ctx).Warn("the plan's record was restored by a plan version signed since it found nothing to trust", "plan", r.Plan, "workflowId", from, "by", v.By)
	}
	cur := r.Version
	switch {
	case cur == nil || v.SignedAt.After(cur.SignedAt):
		r.Version = &v
	case v.Digest == cur.Digest:
		// The newest version's content, under an older signature: the
		// same plan.
	default:
		// Older, or signed at the very time of the newest with other
		// content: two versions the signing times do not order. Neither
		// is taken over the other: the one the record holds stays, and
		// the operator signs the plan they mean again.
		reason := fmt.Sprintf("a newer version of the plan, signed at %s by key %s, was accepted at %s (%s %s)",
			cur.SignedAt.UTC().Format(time.RFC3339Nano), cur.KeyID, cur.Accepted.UTC().Format(time.RFC3339), cur.Workflow, cur.WorkflowID)
		if v.SignedAt.Equal(cur.SignedAt) {
			reason = fmt.Sprintf("another version of the plan, with other content, was signed at the same time (%s, by key %s) and accepted at %s (%s %s): versions signed at one time cannot be ordered",
				cur.SignedAt.UTC().Format(time.RFC3339Nano), cur.KeyID, cur.Accepted.UTC().Format(time.RFC3339), cur.Workflow, cur.WorkflowID)
		}
		r.refuse(RefusedEntry{What: what, Reason: reason, From: from, At: workflow.Now(ctx)})
		workflow.GetLogger(ctx).Warn("the plan's record refused an older plan version", "plan", r.Plan, "workflowId", from, "reason", reason)
		return nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("the plan was signed at %s; %s: sign the current plan, or start the action with it", v.SignedAt.UTC().Format(time.RFC3339Nano), reason),
			ErrOlderPlan, nil)
	}
	out := *r.Version
	out.View = &RecordView{Replaced: r.Replaced, Restored: r.Restored}
	return &out, nil
}

// AcceptPlanVersion is the worker's activity that presents a plan
// version to the plan's record, sealed, starting the record when the
// plan has none. A refusal is a non-retryable UntrustedPlan.
func (s *RecordSender) AcceptPlanVersion(ctx context.Context, in VersionRequest) (PlanVersion, error) {
	if s == nil || s.Client == nil {
		return PlanVersion{}, temporal.NewNonRetryableApplicationError("this worker has no client to reach the plan's record, which keeps the newest plan version", "NoRecordClient", nil)
	}
	now := time.Now().UTC()
	v := in.Version
	v.Proof = nil
	m, err := mac(s.key(), "plan version", in.Plan, now, v)
	if err != nil {
		return PlanVersion{}, err
	}
	v.Proof = &Proof{Sent: now, MAC: m}
	first, err := s.SealAt(in.Plan, RecordChange{At: now}, now)
	if err != nil {
		return PlanVersion{}, err
	}
	id := RecordID(in.Plan)
	start := s.Client.NewWithStartWorkflowOperation(client.StartWorkflowOptions{ID: id, TaskQueue: TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING}, PlanRecorder, PlanRecordInput{Plan: in.Plan, First: &first})
	// A record that has not answered within recordAnswerWait is looked
	// at, while the call goes on: a workflow at its ID that is not
	// Drover's record ends the call at once; Drover's own (busy, or
	// waiting for a worker) is waited for as long as the call may wait.
	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answered := make(chan struct{})
	var mu sync.Mutex
	why := ""
	go func() {
		select {
		case <-answered:
		case <-time.After(recordAnswerWait):
			if w := s.notDrovers(ctx, in.Plan, id); w != "" {
				mu.Lock()
				why = w
				mu.Unlock()
				cancel()
			}
		}
	}()
	h, err := s.Client.UpdateWithStartWorkflow(uctx, client.UpdateWithStartWorkflowOptions{StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: UpdatePlanVersion, Args: []any{v}, WaitForStage: client.WorkflowUpdateStageCompleted}})
	var out PlanVersion
	if err == nil {
		err = h.Get(uctx, &out)
	}
	close(answered)
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && (ae.Type() == ErrOlderPlan || ae.Type() == ErrRecordRefused) {
		return PlanVersion{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s refused plan %q: %s", in.Version.Workflow, in.Plan, ae.Message()), activities.ErrUntrustedPlan, nil)
	}
	if errors.As(err, &ae) && ae.Type() == ErrRecordUnproven {
		return PlanVersion{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("the record of plan %q refused %s's plan version: %s", in.Plan, in.Version.Workflow, ae.Message()), ErrRecordUnproven, nil)
	}
	mu.Lock()
	notOurs := why
	mu.Unlock()
	if err != nil && notOurs != "" {
		return PlanVersion{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"the record of plan %q did not take the plan's version: the workflow at its ID, %s, is not Drover's record: %s. "+
				"Drover keeps the plan's newest version, its fences, holds and points there, and no action runs without it. "+
				"Look at it (temporal workflow describe -w %s), end it if it is not yours (temporal workflow terminate -w %s), and start the action again",
			in.Plan, id, notOurs, id, id), ErrRecordNotDrovers, nil)
	}
	if err != nil {
		return PlanVersion{}, fmt.Errorf("ask the record of plan %q (%s) to accept the plan's version: %w", in.Plan, id, err)
	}
	return out, nil
}

// ErrRecordNotDrovers ends an action whose plan's record ID is held by a
// workflow that is not Drover's record (another type, a task queue no
// Drover worker polls, a start no worker sealed): the action would
// otherwise wait on it until its deadline, without a word.
const ErrRecordNotDrovers = "RecordNotDrovers"

// recordAnswerWait is how long the record may take to answer before the
// workflow at its ID is looked at.
const recordAnswerWait = 12 * time.Second

// notDrovers says why the running workflow at id is not plan's record
// as a Drover worker starts it, or "" when it is (or cannot be told): a
// PlanRecorder on Drover's task queue, whose run either continued from
// an earlier run (only the server starts those) or began with a change
// sealed by this worker's record key.
func (s *RecordSender) notDrovers(ctx context.Context, plan, id string) string {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	d, err := s.Client.DescribeWorkflowExecution(dctx, id, "")
	if err != nil {
		return ""
	}
	info := d.GetWorkflowExecutionInfo()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return ""
	}
	var why []string
	if t := info.GetType().GetName(); t != names.PlanRecorder {
		why = append(why, fmt.Sprintf("it is a %q workflow, not a %s", t, names.PlanRecorder))
	}
	if q := info.GetTaskQueue(); q != TaskQueue {
		why = append(why, fmt.Sprintf("it runs on task queue %q, which no Drover worker polls (Drover's is %q)", q, TaskQueue))
	}
	it := s.Client.GetWorkflowHistory(dctx, id, info.GetExecution().GetRunId(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if it.HasNext() {
		ev, err := it.Next()
		if a := ev.GetWorkflowExecutionStartedEventAttributes(); err == nil && a != nil && a.GetContinuedExecutionRunId() == "" {
			var in PlanRecordInput
			sealed := false
			if ps := a.GetInput().GetPayloads(); len(ps) == 1 && codec.Converter().FromPayload(ps[0], &in) == nil && in.First != nil {
				sealed = s.CheckRecordProof(dctx, RecordProofCheck{Plan: plan, Change: in.First}) == nil
			}
			if !sealed {
				why = append(why, "its start carries no change sealed by this worker's record key: no Drover worker started it")
			}
		}
	}
	return strings.Join(why, "; ")
}

// VersionRequest is a plan version for the plan's record.
type VersionRequest struct {
	Plan    string      `json:"plan"`
	Version PlanVersion `json:"version"`
}

// acceptOptions bound the record's answer: a few attempts over a
// minute (the record may be starting, or its worker away).
var acceptOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout:    20 * time.Second,
	ScheduleToCloseTimeout: time.Minute,
	RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3, NonRetryableErrorTypes: []string{activities.ErrUntrustedPlan, ErrRecordNotDrovers, ErrRecordUnproven}},
}

// acceptVersion presents the run's plan version to the plan's record,
// and returns what the record's answer tells of it (replaced.go).
func acceptVersion(ctx workflow.Context, p *plans.Plan, o Origin) (RecordView, error) {
	// The digest of the canonical JSON: encoding/json writes a struct's
	// fields in order and a map's keys sorted, the defaults fill missing
	// keys whatever the order: the same bytes on every replay.
	//workflowcheck:ignore
	digest, err := planDigest(p)
	if err != nil {
		return RecordView{}, err
	}
	info := workflow.GetInfo(ctx)
	v := PlanVersion{Digest: digest, SignedAt: o.Signature.SignedAt, KeyID: o.Signature.KeyID(), Workflow: info.WorkflowType.Name,
		WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID, By: o.By}
	var rs *RecordSender
	var out PlanVersion
	err = workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, acceptOptions), rs.AcceptPlanVersion,
		VersionRequest{Plan: p.Metadata.Name, Version: v}).Get(ctx, &out)
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && (ae.Type() == activities.ErrUntrustedPlan || ae.Type() == ErrRecordUnproven) {
		return RecordView{}, temporal.NewNonRetryableApplicationError(ae.Message(), ae.Type(), nil)
	}
	if err != nil || out.View == nil {
		return RecordView{}, err
	}
	return *out.View, nil
}

// planDigest is the SHA-256 of the plan's canonical JSON, which its
// signature covers.
func planDigest(p *plans.Plan) (string, error) {
	b, err := plans.CanonicalJSON(p)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// StartInfo is who started a workflow, as Temporal knows it, and whether
// the namespace has Drover's search attributes.
type StartInfo struct {
	Identity   string `json:"identity"`
	Registered bool   `json:"registered"`
}

// StartedBy reads the identity of the client that started the calling
// workflow (its first history event) and whether Drover's search
// attributes are registered on its namespace.
func (rr *RunReader) StartedBy(ctx context.Context) (StartInfo, error) {
	if rr == nil || rr.Client == nil {
		return StartInfo{}, temporal.NewNonRetryableApplicationError("this worker has no client to read histories", errNoRun, nil)
	}
	info := activity.GetInfo(ctx)
	var si StartInfo
	it := rr.Client.GetWorkflowHistory(ctx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return si, err
		}
		si.Identity = e.GetWorkflowExecutionStartedEventAttributes().GetIdentity()
	}
	missing, err := MissingAttributes(ctx, rr.Client, info.Namespace)
	si.Registered = err == nil && len(missing) == 0
	return si, nil
}

// ownAttributes sets the workflow's own search attributes (its plan, its
// action and site) and memo (who started it) when its starter did not,
// so that every Drover workflow, refused or not, shows in drctl list and
// the dashboard under its plan, whatever its workflow id. Best effort:
// a namespace without the attributes gets the memo only.
func ownAttributes(ctx workflow.Context, plan, action, site string, o Origin) {
	sa := workflow.GetTypedSearchAttributes(ctx)
	have, _ := sa.GetKeyword(AttrPlan)
	_, memo := workflow.GetInfo(ctx).Memo.GetFields()[MemoBy]
	if have != "" && memo {
		return
	}
	var si StartInfo
	var rr *RunReader
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 2}})
	if err := workflow.ExecuteLocalActivity(lctx, rr.StartedBy).Get(ctx, &si); err != nil {
		workflow.GetLogger(ctx).Debug("could not read who started the workflow", "error", err)
	}
	if have == "" && si.Registered {
		if cur, ok := sa.GetKeyword(AttrAction); ok && cur != "" {
			action = cur
		}
		updates := []temporal.SearchAttributeUpdate{AttrPlan.ValueSet(plan), AttrAction.ValueSet(action)}
		if site != "" {
			updates = append(updates, AttrSite.ValueSet(site))
		}
		if err := workflow.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
			workflow.GetLogger(ctx).Warn("could not set the workflow's search attributes", "error", err)
		}
	}
	if !memo {
		by := o.By
		switch {
		case by == "" && si.Identity == "":
			by = "unknown"
		case by == "":
			by = "client " + si.Identity
		case si.Identity != "" && si.Identity != by:
			by += " (client " + si.Identity + ")"
		}
		if err := workflow.UpsertMemo(ctx, map[string]any{MemoBy: by}); err != nil {
			workflow.GetLogger(ctx).Warn("could not set the workflow's memo", "error", err)
		}
	}
}

// actionNames are the actions of the workflow types, for the search
// attributes a workflow sets itself.
var actionNames = map[string]string{
	"Failover": "failover", "Reprotect": "reprotect", "Failback": "failback", "Drill": "drill", "Protect": "protect",
	"Verify": "verify", "SiteFailover": "site-failover", "TestRecovery": "test-recovery", "TestCleanup": "test-cleanup", "Release": "release",
}
