package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/internal/names"
)

// A plan's record is its DR state as Drover's actions left it, kept by
// Temporal in one long-lived workflow per plan (PlanRecord, RecordID):
// which site is primary, what is fenced (which CIDRs of which site,
// through which site's storage, by which run), the last action and its
// outcome, and protection with its lag. The actions send it what they
// change as they change it; it continues as new to keep its history
// small, so it outlives the retention of the actions' own histories.
// Reprotect and failback are aimed by it, and drctl status shows it and,
// with --verify, compares it with what storage reports.

// Names of the record's query and signal.
const (
	QueryRecord       = names.QueryRecord
	SignalRecord      = names.SignalRecord
	UpdatePlanVersion = names.UpdatePlanVersion
	// togetherFor is how long a change sent aside may wait for the ones
	// after it before it goes: the record lags the action by at most this
	// and a turn through the server.
	togetherFor = time.Second
	// recordRunLength bounds one run of PlanRecord: after this many
	// changes it continues as new with its state.
	recordRunLength = 500
)

// RecordID is the workflow id of a plan's record.
func RecordID(plan string) string { return names.RecordID(plan) }

// VerifyID is the workflow id of a plan's verification.
func VerifyID(plan string) string { return names.VerifyID(plan) }

// FenceEntry is one set of CIDRs fenced: Site's clients, fenced through
// the storage of Via (the fence domain the two sites share), by a run.
type FenceEntry struct {
	Site  string    `json:"site"`
	CIDRs []string  `json:"cidrs"`
	Via   string    `json:"via"`
	By    string    `json:"by,omitempty"` // workflow id and run id
	At    time.Time `json:"at,omitzero"`
}

// ActionEntry is an action as the record knows it.
type ActionEntry struct {
	Action     string    `json:"action"`
	WorkflowID string    `json:"workflowId"`
	RunID      string    `json:"runId"`
	From       string    `json:"from,omitempty"`
	To         string    `json:"to,omitempty"`
	Outcome    string    `json:"outcome"` // running, completed, aborted
	Error      string    `json:"error,omitempty"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end,omitzero"`
	// WithoutRecord says the action ran without the record's answer, by
	// the operator's override: why, the operator's reason and the plan
	// version it ran (its signature checked, not the record's answer).
	WithoutRecord string `json:"withoutRecord,omitempty"`
}

// ProtectionEntry is protection as last reported to the record.
type ProtectionEntry struct {
	Primary  string        `json:"primary"`
	Running  bool          `json:"running"`
	Enabled  bool          `json:"enabled"`
	OutOfRPO bool          `json:"outOfRPO"`
	LastSync time.Time     `json:"lastSync,omitzero"`
	Lag      time.Duration `json:"lag"`
	Checked  time.Time     `json:"checked,omitzero"`
	// Unreachable says why the primary's storage did not answer
	// protection's last look (ProtectState.Unreachable); empty while it
	// answers.
	Unreachable string `json:"unreachable,omitempty"`
	// RPOTarget is the target the lag was judged against.
	RPOTarget time.Duration `json:"rpoTarget,omitempty"`
	// Unprotected: a failover left the plan on Primary with no replica
	// (ProtectState.Unprotected); LastSync is then the last sync that
	// reached the lost site, and nothing is out of RPO.
	Unprotected *Unprotection `json:"unprotected,omitempty"`
	// SignatureEnds is when the plan's signature ends, and Ended why
	// protection ended on its own (ProtectState).
	SignatureEnds time.Time `json:"signatureEnds,omitzero"`
	Ended         string    `json:"ended,omitempty"`
}

// PlanRecord is a plan's recorded DR state.
type PlanRecord struct {
	Plan string `json:"plan"`
	// Rebuilt is set when this run of the record started anew and took
	// over the last run under its ID (takeover.go), or found none to
	// take, or found runs and none it could trust (Rebuilt.Unproven: it
	// refuses plan versions until the plan is signed again).
	Rebuilt *Rebuilt `json:"rebuilt,omitempty"`
	// Primary is the site whose copies are primary ("" until an action
	// or protection says).
	Primary    string           `json:"primary,omitempty"`
	Fences     []FenceEntry     `json:"fences"`
	LastAction *ActionEntry     `json:"lastAction,omitempty"`
	Protection *ProtectionEntry `json:"protection,omitempty"`
	Updated    time.Time        `json:"updated,omitzero"`
	Changes    int              `json:"changes"`
	// Version is the newest version of the plan a worker has accepted
	// (its signature's time and digest): an action or Protect with an
	// older one is refused (PlanVersion).
	Version *PlanVersion `json:"version,omitempty"`
	// Refused are the latest changes, starts and plan versions the
	// record refused (without a worker's seal, or older), and how many
	// it has refused in all.
	Refused      []RefusedEntry `json:"refused,omitempty"`
	RefusedCount int            `json:"refusedCount,omitempty"`
	// Points are the plan's points in time (policy.pointsInTime), oldest
	// first, as protection cut, held and pruned them; Pruned the latest
	// pruned, PrunedCount how many were in all.
	Points      []PointInTime `json:"points,omitempty"`
	Pruned      []PrunedPoint `json:"pruned,omitempty"`
	PrunedCount int           `json:"prunedCount,omitempty"`
	// Restored says the plan runs on volumes a failover restored from a
	// point in time (its replicas at that site are kept); an action
	// that records a primary since ends it.
	Restored *RestoredEntry `json:"restored,omitempty"`
	// Replaced says which volumes stand in for those the plan names: a
	// reprotect made the volumes a failover restored from a point in time
	// the protected ones (replaced.go). Every action acts on them.
	Replaced *ReplacedEntry `json:"replaced,omitempty"`
}

// FencedOf is what the record holds as fenced of site's clients, and
// through which site's storage.
func (r *PlanRecord) FencedOf(site string) (cidrs []string, via string) {
	if r == nil {
		return nil, ""
	}
	for _, f := range r.Fences {
		if f.Site == site {
			for _, c := range f.CIDRs {
				if !slices.Contains(cidrs, c) {
					cidrs = append(cidrs, c)
				}
			}
			via = f.Via
		}
	}
	return cidrs, via
}

// RecordChange is one change an action sends to the record.
type RecordChange struct {
	At         time.Time        `json:"at"`
	Primary    string           `json:"primary,omitempty"`
	Fenced     *FenceEntry      `json:"fenced,omitempty"`
	Unfenced   *FenceEntry      `json:"unfenced,omitempty"`
	Action     *ActionEntry     `json:"action,omitempty"`
	Protection *ProtectionEntry `json:"protection,omitempty"`
	// Lost, with Primary, is the site a failover lost: the record tells
	// the plan's protection that the plan runs on Primary with no
	// replica (PlanRecorder).
	Lost string `json:"lost,omitempty"`
	// Point is a point in time protection cut, or one whose hold or
	// deletion changed (the whole point, by its ID); Pruned a point it
	// deleted.
	Point  *PointInTime `json:"point,omitempty"`
	Pruned *PrunedPoint `json:"pruned,omitempty"`
	// Restored is a failover's note that the plan runs on volumes it
	// restored from a point in time.
	Restored *RestoredEntry `json:"restored,omitempty"`
	// Replaced is a reprotect's note that the restored volumes stand in
	// for the plan's from now on; it ends the Restored note.
	Replaced *ReplacedEntry `json:"replaced,omitempty"`
	// More are changes sent together with this one, applied after it in
	// their order.
	More []RecordChange `json:"more,omitempty"`
	// Proof is the seal of the worker that made the change (proof.go);
	// the record refuses a change without a valid one.
	Proof *Proof `json:"proof,omitempty"`
}

// apply folds a change into the record.
func (r *PlanRecord) apply(c RecordChange) {
	r.Changes++
	if c.At.After(r.Updated) {
		// The time of the latest change: one carried without its own
		// time (More) does not move it back.
		r.Updated = c.At
	}
	if c.Primary != "" {
		r.Primary = c.Primary
		// The action that moved the plan started its workloads on the
		// replicas (a failover to a point notes its volumes after this).
		r.Restored = nil
	}
	if c.Restored != nil {
		r.Restored = c.Restored
	}
	if c.Replaced != nil {
		r.Replaced, r.Restored = c.Replaced, nil
	}
	if f := c.Fenced; f != nil {
		i := slices.IndexFunc(r.Fences, func(e FenceEntry) bool { return e.Site == f.Site && e.Via == f.Via })
		if i < 0 {
			r.Fences = append(r.Fences, FenceEntry{Site: f.Site, Via: f.Via})
			i = len(r.Fences) - 1
		}
		e := &r.Fences[i]
		for _, cidr := range f.CIDRs {
			if !slices.Contains(e.CIDRs, cidr) {
				e.CIDRs = append(e.CIDRs, cidr)
			}
		}
		sort.Strings(e.CIDRs)
		e.By, e.At = f.By, f.At
	}
	if u := c.Unfenced; u != nil {
		keep := r.Fences[:0]
		for _, e := range r.Fences {
			if e.Site == u.Site && e.Via == u.Via {
				e.CIDRs = slices.DeleteFunc(e.CIDRs, func(cidr string) bool { return slices.Contains(u.CIDRs, cidr) })
			}
			if len(e.CIDRs) > 0 {
				keep = append(keep, e)
			}
		}
		r.Fences = keep
	}
	if a := c.Action; a != nil && !endedAlready(r.LastAction, a) {
		r.LastAction = a
	}
	if p := c.Protection; p != nil {
		r.Protection = p
		// Protection names the primary only until an action does: the
		// actions record the primary they make, and protection follows
		// them (a failover tells it), a moment later.
		if r.Primary == "" && p.Primary != "" && p.Enabled {
			r.Primary = p.Primary
		}
	}
	if pt := c.Point; pt != nil {
		if i := slices.IndexFunc(r.Points, func(x PointInTime) bool { return x.ID == pt.ID }); i >= 0 {
			r.Points[i] = *pt
		} else {
			r.Points = append(r.Points, *pt)
			slices.SortStableFunc(r.Points, func(a, b PointInTime) int { return a.Taken.Compare(b.Taken) })
		}
	}
	if x := c.Pruned; x != nil {
		r.Points = slices.DeleteFunc(r.Points, func(pt PointInTime) bool { return pt.ID == x.ID })
		r.Pruned, r.PrunedCount = keepPruned(r.Pruned, r.PrunedCount, *x)
	}
	for _, m := range c.More {
		r.apply(m)
	}
}

// PlanRecordInput starts or continues a plan's record. A worker starts
// a record with its plan's name and the first change, sealed (First); a
// record continued as new carries its state (Record) and the seals it
// took lately (Seen). A record started with anything else is refused.
type PlanRecordInput struct {
	Record PlanRecord    `json:"record"`
	Plan   string        `json:"plan,omitempty"`
	First  *RecordChange `json:"first,omitempty"`
	Seen   []seenSeal    `json:"seen,omitempty"`
}

// proofVersion is the change of the record and of the actions that
// brought seals (proof.go) and plan versions: runs of the record from
// before it go on as they did until they continue as new. It is one of
// the patches allowed in the two auto-upgrading workflows (Protect and
// the record; see Register): a run of either moves to a new build on its
// next task, so a change of the commands it makes needs GetVersion. To
// retire it: once docs/guides/upgrades.md's query lists no run of Protect
// or of a record started before the build that brought it, drop the
// GetVersion calls (here, in PlanRecorder and in sealing) and keep the
// sealed path.
const proofVersion = "record-proof"

// PlanRecorder keeps a plan's record: it applies the changes the actions
// signal, answers the "record" query, and continues as new after
// recordRunLength changes (or a long history). It never ends by itself,
// but for a start without a worker's seal, which it refuses at once.
func PlanRecorder(ctx workflow.Context, in PlanRecordInput) error {
	// Patch proofVersion (see there for why, and how to retire it).
	sealed := workflow.GetVersion(ctx, proofVersion, workflow.DefaultVersion, 1) >= 1
	info := workflow.GetInfo(ctx)
	// A start, not a continuation of the record's own run (which only
	// the server makes): only a worker's sealed first change may start
	// it.
	fresh := sealed && (info.ContinuedExecutionRunID == "" || info.Attempt > 1 || info.CronSchedule != "")
	r := in.Record
	if fresh {
		r = PlanRecord{Plan: in.Plan}
	}
	ps := &proofs{plan: r.Plan, seen: in.Seen}
	if r.Fences == nil {
		r.Fences = []FenceEntry{}
	}
	if err := workflow.SetQueryHandler(ctx, QueryRecord, func() (*PlanRecord, error) { return &r, nil }); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, QueryRecordSeals, func() ([]seenSeal, error) { return ps.seen, nil }); err != nil {
		return err
	}
	// Registered in every run, those from before seals too (it is only
	// ever called by workers that seal), before the record checks its
	// start, which the update waits for: an update-with-start comes with
	// the first task.
	ready := false
	if err := workflow.SetUpdateHandler(ctx, UpdatePlanVersion, func(ctx workflow.Context, v PlanVersion) (*PlanVersion, error) {
		if err := workflow.Await(ctx, func() bool { return ready }); err != nil {
			return nil, err
		}
		return r.accept(ctx, ps, v)
	}); err != nil {
		return err
	}
	if fresh {
		ownRecordAttributes(ctx, r.Plan)
		reason := ""
		switch {
		case in.Plan == "":
			reason = "it names no plan"
		case in.Record.Plan != "" || len(in.Seen) > 0:
			reason = "it was given a state of its own"
		case in.First == nil:
			reason = "it carries no worker's sealed first change"
		default:
			if err := ps.check(ctx, RecordProofCheck{Plan: in.Plan, Change: in.First}, in.First.Proof); err != nil {
				reason = err.Error()
			}
		}
		if reason != "" {
			r.refuse(RefusedEntry{What: "start of the record", Reason: reason, From: UnknownSender, At: workflow.Now(ctx)})
			workflow.GetLogger(ctx).Warn("the plan's record refused its start", "plan", in.Plan, "reason", reason)
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"the record of plan %q refused its start: %s; only a Drover worker starts a record", in.Plan, reason), ErrRecordRefused, nil)
		}
		// A new run: it takes over what the last run under the
		// record's ID knew (takeover.go).
		if workflow.GetVersion(ctx, takeOverVersion, workflow.DefaultVersion, 1) >= 1 {
			r = takeOver(ctx, r, ps)
		}
		if first := *in.First; !first.empty() {
			first.Proof = nil
			r.apply(first)
		}
	}
	ready = true
	telling := 0
	take := func(c RecordChange) {
		// A run from before proofVersion goes on unsealed until it
		// continues as new: GetVersion answers a change ID as it first
		// did in the run (see proofVersion).
		if sealed = sealed || workflow.GetVersion(ctx, proofVersion, workflow.DefaultVersion, 1) >= 1; !sealed {
			r.apply(c)
			tellProtection(ctx, r.Plan, c, &telling)
			return
		}
		if err := ps.check(ctx, RecordProofCheck{Plan: r.Plan, Change: &c}, c.Proof); err != nil {
			// Not the workflow id the change names: without a valid
			// seal, that is the sender's word.
			r.refuse(RefusedEntry{What: "change " + c.summary(), Reason: err.Error(), From: UnknownSender, At: workflow.Now(ctx)})
			workflow.GetLogger(ctx).Warn("the plan's record refused a change", "plan", r.Plan, "reason", err.Error())
			return
		}
		c.Proof = nil
		r.apply(c)
		tellProtection(ctx, r.Plan, c, &telling)
	}
	ch := workflow.GetSignalChannel(ctx, SignalRecord)
	for n := 0; ; n++ {
		if n >= recordRunLength || workflow.GetInfo(ctx).GetCurrentHistoryLength() > protectHistoryCap {
			if sealed {
				if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
					return err
				}
			}
			// Take every change already delivered before moving on.
			for {
				var c RecordChange
				if !ch.ReceiveAsync(&c) {
					break
				}
				take(c)
			}
			// Temporal sends no signal of a run that has ended.
			if err := workflow.Await(ctx, func() bool { return telling == 0 }); err != nil {
				return err
			}
			return workflow.NewContinueAsNewError(ctx, PlanRecorder, PlanRecordInput{Record: r, Seen: ps.seen})
		}
		var c RecordChange
		ch.Receive(ctx, &c)
		take(c)
	}
}

// tellProtection signals the plan's protection, for each primary a
// failover made in c (Lost set), that the plan runs there with no
// replica: protection follows the record's primary (see Protect). The
// retarget goes sealed by the worker (sealRetarget), as protection takes
// no other; the record does not wait for the answer; a plan without protection has
// nothing to tell. Only a change that carries Lost makes a command, so
// a record's history from before stays as it was.
func tellProtection(ctx workflow.Context, plan string, c RecordChange, telling *int) {
	for _, m := range append([]RecordChange{c}, c.More...) {
		if m.Lost == "" || m.Primary == "" {
			continue
		}
		at := m.At
		if at.IsZero() {
			at = workflow.Now(ctx)
		}
		rt := Retarget{Primary: m.Primary, Lost: m.Lost, At: at}
		if sealsRetargets(ctx) {
			// Protection takes only a retarget a worker sealed.
			*telling++
			workflow.Go(ctx, func(ctx workflow.Context) {
				defer func() { *telling-- }()
				rt, err := sealRetarget(ctx, plan, rt)
				if err == nil {
					err = workflow.SignalExternalWorkflow(ctx, ProtectID(plan), "", SignalRetarget, rt).Get(ctx, nil)
				}
				if err != nil {
					workflow.GetLogger(ctx).Info("no protection told of the failover", "plan", plan, "error", err)
				}
			})
			continue
		}
		f := workflow.SignalExternalWorkflow(ctx, ProtectID(plan), "", SignalRetarget, rt)
		*telling++
		workflow.Go(ctx, func(ctx workflow.Context) {
			defer func() { *telling-- }()
			if err := f.Get(ctx, nil); err != nil {
				workflow.GetLogger(ctx).Info("no protection told of the failover", "plan", plan, "error", err)
			}
		})
	}
}

// empty tells a change that changes nothing: the first change of a
// record started only to take a plan version.
func (c RecordChange) empty() bool {
	return c.Primary == "" && c.Fenced == nil && c.Unfenced == nil && c.Action == nil && c.Protection == nil && c.Point == nil && c.Pruned == nil &&
		c.Restored == nil && c.Replaced == nil && len(c.More) == 0
}

// summary names what a change would have changed, for a refusal.
func (c RecordChange) summary() string {
	var parts []string
	if c.Primary != "" {
		parts = append(parts, "primary "+c.Primary)
	}
	if c.Fenced != nil {
		parts = append(parts, fmt.Sprintf("fence %s %v", c.Fenced.Site, c.Fenced.CIDRs))
	}
	if c.Unfenced != nil {
		parts = append(parts, fmt.Sprintf("unfence %s %v", c.Unfenced.Site, c.Unfenced.CIDRs))
	}
	if c.Action != nil {
		parts = append(parts, fmt.Sprintf("action %s %s", c.Action.Action, c.Action.Outcome))
	}
	if c.Protection != nil {
		parts = append(parts, "protection")
	}
	if c.Point != nil {
		parts = append(parts, "point "+c.Point.ID)
	}
	if c.Pruned != nil {
		parts = append(parts, "pruned point "+c.Pruned.ID)
	}
	if c.Restored != nil {
		parts = append(parts, "restored from point "+c.Restored.Point)
	}
	if c.Replaced != nil {
		parts = append(parts, "replaced by the volumes restored from point "+c.Replaced.Point)
	}
	if len(c.More) > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", len(c.More)))
	}
	if len(parts) == 0 {
		return "(empty)"
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// ownRecordAttributes sets the record's own search attributes, whoever
// started it (best effort: a namespace without them has none).
func ownRecordAttributes(ctx workflow.Context, plan string) {
	if plan == "" {
		return
	}
	ownAttributes(ctx, plan, "record", "", Origin{})
}

// endedAlready tells whether last is the end of the run whose start a
// is: a start that reaches the record after its own end (both sent
// aside) does not undo it.
func endedAlready(last, a *ActionEntry) bool {
	return last != nil && a.Outcome == StateRunning && last.Outcome != StateRunning &&
		last.WorkflowID == a.WorkflowID && last.RunID == a.RunID
}

// note sends a change to the plan's record, starting the record when the
// plan has none yet. It waits until Temporal has taken the change.
func note(ctx workflow.Context, plan string, c RecordChange) error {
	return noteWith(ctx, plan, c, nil)
}

// noteWith is note for a change sent aside: while another change of the
// same run starts the record, it waits for that and sends to it.
func noteWith(ctx workflow.Context, plan string, c RecordChange, a *aside) error {
	if c.At.IsZero() {
		c.At = workflow.Now(ctx)
	}
	id := RecordID(plan)
	ctx = workflow.WithRetryPolicy(ctx, temporal.RetryPolicy{})
	sealed := sealing(ctx)
	if sealed {
		// The record takes only changes a worker sealed.
		var err error
		if c, err = seal(ctx, plan, c); err != nil {
			return err
		}
	}
	if err := workflow.SignalExternalWorkflow(ctx, id, "", SignalRecord, c).Get(ctx, nil); err == nil {
		return nil
	}
	if a != nil && a.starting {
		if err := workflow.Await(ctx, func() bool { return !a.starting }); err != nil {
			return err
		}
		return sendAgain(ctx, plan, id, c)
	}
	if a != nil {
		a.starting = true
		defer func() { a.starting = false }()
	}
	// No record yet: start it, holding this change.
	start := PlanRecordInput{Plan: plan, First: &c}
	if !sealed {
		first := PlanRecord{Plan: plan, Fences: []FenceEntry{}}
		first.apply(c)
		start = PlanRecordInput{Record: first}
	}
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: id,
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_ABANDON, TypedSearchAttributes: recordAttributes(ctx)})
	err := workflow.ExecuteChildWorkflow(cctx, PlanRecorder, start).GetChildWorkflowExecution().Get(ctx, nil)
	if err == nil {
		return nil
	}
	if !temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		return fmt.Errorf("record the state of plan %q (workflow %s): %w", plan, id, err)
	}
	// Started meanwhile by another action: send the change to it.
	return sendAgain(ctx, plan, id, c)
}

// sendAgain sends a change to a record known to be running.
func sendAgain(ctx workflow.Context, plan, id string, c RecordChange) error {
	if c.Proof != nil {
		// A seal is taken once: the change that started the record
		// may have been this one, the send again gets a seal of its own.
		var err error
		if c, err = seal(ctx, plan, c); err != nil {
			return err
		}
	}
	err := workflow.SignalExternalWorkflow(ctx, id, "", SignalRecord, c).Get(ctx, nil)
	// The record "already started" may be this run's own start of it,
	// not yet taken by the server (two changes of one run sent at once,
	// as protection's state and its first point in time): the signal
	// finds no record for a moment. Sent again, a second apart, a few
	// times (patched: a run that lost the change before goes on as it
	// did).
	for try := 0; err != nil && try < recordStartTries; try++ {
		if try == 0 && workflow.GetVersion(ctx, recordStartRace, workflow.DefaultVersion, 1) < 1 {
			break
		}
		if serr := workflow.Sleep(ctx, time.Second); serr != nil {
			return serr
		}
		err = workflow.SignalExternalWorkflow(ctx, id, "", SignalRecord, c).Get(ctx, nil)
	}
	if err != nil {
		return fmt.Errorf("record the state of plan %q (workflow %s): %w", plan, id, err)
	}
	return nil
}

// recordStartRace is the change that sends a change again while the
// record this run started is not yet running; recordStartTries bounds
// the tries, a second apart.
const (
	recordStartRace  = "record-start-race"
	recordStartTries = 10
)

// recordAttributes are the record's search attributes: the plan's, with
// action "record" and no site.
func recordAttributes(ctx workflow.Context) temporal.SearchAttributes {
	plan, ok := workflow.GetTypedSearchAttributes(ctx).GetKeyword(AttrPlan)
	if !ok {
		return temporal.SearchAttributes{}
	}
	return Attributes(plan, "record", "")
}

// noteAction records the action's start or end (best effort: the
// action's own history holds it too; a failure is logged).
func (r *run) noteAction(ctx workflow.Context, outcome, errText string) {
	if !r.recording {
		return
	}
	info := workflow.GetInfo(ctx)
	a := &ActionEntry{Action: r.progress.Action, WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
		From: r.from, To: r.to, Outcome: outcome, Error: errText, Start: r.progress.Start, End: r.progress.End, WithoutRecord: r.without}
	c := RecordChange{Action: a}
	if outcome == StateRunning {
		_ = r.record(ctx, c)
		return
	}
	if ctx.Err() != nil {
		// A cancelled action still tells its record how it ended, and
		// the changes it made before; no step is left to pause on.
		ctx, _ = workflow.NewDisconnectedContext(ctx)
		r.cancelled = true
	}
	// The end goes aside after every other change, and the action waits
	// once for them all: one turn through the server where settling,
	// then sending the end, took two. Signals sent apart may arrive in
	// any order; the record keeps a run's end over its start
	// (endedAlready), and the other changes touch other parts.
	_ = r.record(ctx, c)
	if err := r.settle(ctx); err != nil {
		workflow.GetLogger(ctx).Warn("the plan's record did not take every change", "error", err)
	}
}

// aside sends an action's changes to the plan's record while the action
// goes on: each send waits for Temporal to take it, a turn through the
// server (two when the record has yet to start) that the action's next
// step need not wait for. The changes an action sends aside touch
// different parts of the record (its start, a fence, the primary), so
// their order does not matter; no other action of the plan runs meanwhile
// (one action per plan), and the action's end goes after them all
// (settle).
//
// One goroutine sends the queued changes in order, those queued while it
// waited (togetherFor, or until the action settles) as one signal: an
// action whose steps run in one workflow task, as a small failover's do,
// sends its changes as one signal at its end. The worker sends that
// signal (RecordSender, a local activity), not the workflow: a signal
// the workflow sends is a command, whose result comes back in a workflow
// task of its own, a turn through the server at the end of every action,
// where the worker's signal is taken when the call returns, inside the
// task that runs the steps, so a small action runs in one task. When it
// cannot (no record yet, a worker without the activity) the workflow
// sends the change itself.
type aside struct {
	pending  int
	failed   []RecordChange
	starting bool // a change is starting the record
	queue    []RecordChange
	sending  bool
	flush    bool
}

// record sends a change to the plan's record aside (a run begun by an
// action has its aside), or, without one, waits for Temporal to take it.
func (r *run) record(ctx workflow.Context, c RecordChange) error {
	a, plan := r.aside, r.plan.Metadata.Name
	if r.without != "" {
		// No record answers: the change waits for one (recordLater).
		c.At = workflow.Now(ctx)
		r.held = append(r.held, c)
		return nil
	}
	if a == nil {
		return note(ctx, plan, c)
	}
	c.At = workflow.Now(ctx)
	a.pending++
	a.queue = append(a.queue, c)
	if !a.sending {
		a.sending = true
		// Disconnected: the record's bookkeeping outlives a cancel.
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		workflow.Go(dctx, r.sendTogether)
	}
	return nil
}

// sendTogether sends the queued changes, in order, until none is left:
// after a wait of togetherFor (or none, once the action settles), every
// change queued by then goes as one signal, the first carrying the
// others (More).
func (r *run) sendTogether(ctx workflow.Context) {
	a, plan := r.aside, r.plan.Metadata.Name
	for len(a.queue) > 0 {
		if !a.flush {
			tctx, cancel := workflow.WithCancel(ctx)
			t := workflow.NewTimer(tctx, togetherFor)
			_ = workflow.Await(ctx, func() bool { return a.flush || t.IsReady() })
			cancel()
		}
		batch := a.queue
		a.queue = nil
		c := batch[0]
		c.More = batch[1:]
		if err := sendAside(ctx, plan, c, a); err != nil {
			workflow.GetLogger(ctx).Warn("the plan's record did not take a change", "error", err)
			a.failed = append(a.failed, batch...)
		}
		a.pending -= len(batch)
	}
	a.sending = false
}

// sendAside sends changes that go together: by the worker when it can,
// else as the workflow's own signal (noteWith).
func sendAside(ctx workflow.Context, plan string, c RecordChange, a *aside) error {
	var rs *RecordSender
	lctx := workflow.WithLocalActivityOptions(ctx, recordSendOptions)
	err := workflow.ExecuteLocalActivity(lctx, rs.SendRecordChange, RecordSend{Plan: plan, Change: c}).Get(ctx, nil)
	if err == nil {
		return nil
	}
	if ctx.Err() == nil {
		workflow.GetLogger(ctx).Debug("the worker did not send the record its changes: the workflow does", "error", err)
	}
	return noteWith(ctx, plan, c, a)
}

// recordSendOptions bound the worker's signal to a record: a few short
// attempts, then the workflow sends the change itself.
var recordSendOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout:    5 * time.Second,
	ScheduleToCloseTimeout: 12 * time.Second,
	RetryPolicy:            &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumAttempts: 3},
}

// RecordSend is a change for a plan's record, as the worker sends it.
type RecordSend struct {
	Plan   string       `json:"plan"`
	Change RecordChange `json:"change"`
}

// RecordSender is the worker's activity that signals a plan's record
// (sendAside), seals the changes a workflow sends itself and checks the
// seals a record is sent (proof.go): the worker that runs the workflows
// registers it with its Temporal client and its record key. The key
// never leaves the activities; a client of the namespace without it
// cannot make a change the record takes.
type RecordSender struct {
	Client client.Client
	// Key is the record key every workflow worker of the namespace
	// holds (worker --record-key); none: a key of this process alone.
	Key []byte
}

// SendRecordChange signals the plan's record with the change. A record
// that does not exist yet is a non-retryable error: the workflow starts
// it. Sent again after a lost answer, a change applies again to the same
// state (PlanRecord.apply); only the record's count of changes moves.
func (s *RecordSender) SendRecordChange(ctx context.Context, in RecordSend) error {
	if s == nil || s.Client == nil {
		return temporal.NewNonRetryableApplicationError("this worker has no client to signal records", "NoRecordClient", nil)
	}
	c, err := s.SealAt(in.Plan, in.Change, time.Now())
	if err != nil {
		return err
	}
	err = s.Client.SignalWorkflow(ctx, RecordID(in.Plan), "", SignalRecord, c)
	if isNotFound(err) {
		return temporal.NewNonRetryableApplicationError(err.Error(), "NoRecord", err)
	}
	return err
}

// settle waits until the record has taken every change sent aside, and
// sends again, as a step that pauses like any other when it cannot, the
// changes of state (fences, the primary) that it did not take. An
// action's own start is best effort, as before.
func (r *run) settle(ctx workflow.Context) error {
	a := r.aside
	if a == nil {
		return nil
	}
	a.flush = true
	if err := workflow.Await(ctx, func() bool { return a.pending == 0 }); err != nil {
		return err
	}
	var again []RecordChange
	for _, c := range a.failed {
		if c.Action == nil {
			again = append(again, c)
		}
	}
	a.failed = nil
	if len(again) == 0 {
		return nil
	}
	plan := r.plan.Metadata.Name
	if r.aborted || r.cancelled {
		// An aborted run has no step left to pause: one more try each.
		var err error
		for _, c := range again {
			err = errors.Join(err, note(ctx, plan, c))
		}
		return err
	}
	return r.step(ctx, recordStateStep(), false, func(ctx workflow.Context) (string, error) {
		for len(again) > 0 {
			if err := note(ctx, plan, again[0]); err != nil {
				return "", err
			}
			again = again[1:]
		}
		return "recorded in " + RecordID(plan), nil
	})
}

// notePrimary records that site's copies are now primary, as a step (a
// record that cannot be written pauses the action like any step); lost,
// from a failover, is the site the plan lost: the record tells the
// plan's protection.
func (r *run) notePrimary(ctx workflow.Context, site, lost string) error {
	if !r.recording {
		return nil
	}
	return r.step(ctx, recordPrimaryStep(site), false, func(ctx workflow.Context) (string, error) {
		if err := r.record(ctx, RecordChange{Primary: site, Lost: lost}); err != nil {
			return "", err
		}
		if r.without != "" {
			return "kept for " + RecordID(r.plan.Metadata.Name) + ", which did not answer: it goes there once a record answers (" + recordLaterID(r.plan.Metadata.Name, workflow.GetInfo(ctx).WorkflowExecution.RunID) + ")", nil
		}
		if r.aside != nil {
			return "sent to " + RecordID(r.plan.Metadata.Name) + "; the action ends once it has taken it", nil
		}
		return "recorded in " + RecordID(r.plan.Metadata.Name), nil
	})
}

// noteReachVersion marks a protection that tells the record when its
// primary stops or starts answering.
const noteReachVersion = "note-reachability"

// protectNoteEvery is how many polls may pass without protection's
// summary going to the record when nothing but the lag changed.
const protectNoteEvery = 10

// noteProtection sends protection's summary to the plan's record when it
// changed (primary, replication on or off, out of RPO, reachable or not,
// running or not),
// and otherwise every protectNoteEvery polls for the lag: the record keeps
// what protection knew, without a signal per poll. Best effort: a failure
// is logged, and the next poll tries again.
func noteProtection(ctx workflow.Context, plan string, s *ProtectState, running bool) {
	e := s.Summary(running, workflow.Now(ctx))
	n := s.noted
	same := n != nil && n.Primary == e.Primary && n.Running == e.Running && n.Enabled == e.Enabled && n.OutOfRPO == e.OutOfRPO &&
		(n.Unprotected == nil) == (e.Unprotected == nil) && s.Polls%protectNoteEvery != 0
	// A primary that stops or starts answering is a change too; a
	// protection recorded before took only the others.
	if same && (n.Unreachable == "") != (e.Unreachable == "") && workflow.GetVersion(ctx, noteReachVersion, workflow.DefaultVersion, 1) >= 1 {
		same = false
	}
	if same {
		return
	}
	if err := note(ctx, plan, RecordChange{Protection: e}); err != nil {
		workflow.GetLogger(ctx).Warn("the plan's record did not take protection's state", "error", err)
		return
	}
	s.noted = e
}

// by names the run for a fence entry.
func by(ctx workflow.Context) string {
	info := workflow.GetInfo(ctx)
	return info.WorkflowExecution.ID + " run " + info.WorkflowExecution.RunID
}

func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

// ReadRecord returns a plan's record, or nil when the plan has none.
func ReadRecord(ctx context.Context, c client.Client, plan string) (*PlanRecord, error) {
	v, err := c.QueryWorkflow(ctx, RecordID(plan), "", QueryRecord)
	if err != nil {
		if isNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read the record of plan %q: %w", plan, err)
	}
	var r PlanRecord
	if err := v.Get(&r); err != nil {
		return nil, fmt.Errorf("decode the record of plan %q: %w", plan, err)
	}
	return &r, nil
}
