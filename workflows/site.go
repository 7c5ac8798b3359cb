package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/plans"
)

// A site action acts on every plan that uses a site: SiteFailover fails
// them all over when the site is lost. It checks each plan's signature,
// fences the lost site's clients once per storage system (the union of
// the CIDRs of the plans whose surviving copies live there), verifies
// the fences, then runs each plan's own Failover as a child, tier by tier
// (metadata.tier, lowest first), the plans of a tier at most
// Parallelism at a time. Each child keeps its plan's workflow id, so the
// one-action rule holds: a plan already running an action is reported,
// not restarted; it pauses and is resolved per plan as always.

// ActionSiteFailover is a site failover's action, in its progress; the
// other site actions are "site reprotect", "site failback" and "site
// drill" (SiteAction).
const ActionSiteFailover = "site failover"

// The plan actions a site action runs (SiteFailoverInput.Action).
const (
	SiteFailoverAction  = "failover"
	SiteReprotectAction = "reprotect"
	SiteFailbackAction  = "failback"
	SiteDrillAction     = "drill"
)

// SiteAction is the progress's action of a site action running action.
func SiteAction(action string) string {
	if action == "" {
		action = SiteFailoverAction
	}
	return "site " + action
}

// IsSiteAction tells a site action's progress from a plan's.
func IsSiteAction(progressAction string) bool { return strings.HasPrefix(progressAction, "site ") }

// SiteActionID is the workflow id of a site action on site: one at a
// time per site.
func SiteActionID(site string) string { return names.SiteActionIDPrefix + site }

// SitePlan is one plan of a site action, with what its own action would
// be started with.
type SitePlan struct {
	Plan      *plans.Plan      `json:"plan"`
	Signature *plans.Signature `json:"signature,omitempty"`
	// File is the plan file drctl read the plan from: the command that
	// recovers a plan the action left behind names it.
	File string `json:"file,omitempty"`
	// LastSync and Clients are what the plan's protection last recorded
	// (see FailoverInput).
	LastSync        time.Time `json:"lastSync,omitzero"`
	Clients         []string  `json:"clients,omitempty"`
	ConfirmUnfenced bool      `json:"confirmUnfenced,omitempty"`
	OverrideState   bool      `json:"overrideState,omitempty"`
	// The plan's own action's input, as drctl prepares it for the plan
	// alone, for a site reprotect, failback or drill; its plan and origin
	// are the site plan's.
	Reprotect *ReprotectInput `json:"reprotect,omitempty"`
	Failback  *FailbackInput  `json:"failback,omitempty"`
	Drill     *DrillInput     `json:"drill,omitempty"`
	// view is what the site action's check read of the plan's record,
	// handed to the plan's own action (Origin.View).
	view *RecordView
}

// SiteFailoverInput fails over, from From to To, every plan listed; or,
// with Action, reprotects them (From the returned site), fails them back
// (from From to To) or drills them.
type SiteFailoverInput struct {
	Origin
	Action string     `json:"action,omitempty"` // failover (the default), reprotect, failback or drill
	From   string     `json:"from"`
	To     string     `json:"to"`
	Plans  []SitePlan `json:"plans"`
	// Parallelism bounds the plans of a tier that fail over at once
	// (default DefaultSiteParallelism).
	Parallelism int `json:"parallelism,omitempty"`
}

// DefaultSiteParallelism is how many plans of a tier fail over at once
// unless the site action says otherwise.
const DefaultSiteParallelism = 4

// SiteFence is what a site action fenced through the surviving site's
// storage system for a plan: the plan's failover finds its CIDRs fenced
// and only verifies them.
type SiteFence struct {
	Action string   `json:"action"` // the site action's workflow id
	CIDRs  []string `json:"cidrs"`
}

// PlanOutcome is what became of one plan of a site action.
type PlanOutcome struct {
	Plan     string        `json:"plan"`
	Tier     int           `json:"tier"`
	Workflow string        `json:"workflow"`
	RunID    string        `json:"runId,omitempty"`
	State    string        `json:"state"` // completed, aborted, busy or refused
	RTO      time.Duration `json:"rto,omitempty"`
	// RPO is the site action's start minus the last sync protection knew
	// of before the loss (SitePlan.LastSync): the writes the plan may
	// have lost, however long the action then took to reach the plan.
	RPO      time.Duration `json:"rpo,omitempty"`
	RPOKnown bool          `json:"rpoKnown,omitempty"`
	Error    string        `json:"error,omitempty"`
	// Busy is the action the plan ran when the site action found it busy
	// ("drill", "failover"), when it could tell; FirstBusy and
	// FirstBusyTry are the first try of the plan's step that found it so,
	// kept when a later try moves the plan.
	Busy         string    `json:"busy,omitempty"`
	FirstBusy    time.Time `json:"firstBusy,omitzero"`
	FirstBusyTry int       `json:"firstBusyTry,omitempty"`
	// Recover is, for a plan left behind, the command that moves it.
	Recover string `json:"recover,omitempty"`
}

// Plan outcomes beyond the step states.
const (
	OutcomeBusy    = "busy"    // the plan was running another action
	OutcomeRefused = "refused" // the plan was not trusted or does not fit
)

// SiteFailoverResult is the site action's timeline, each plan's outcome
// and the site-wide RTO: from the start to the last plan's workloads
// healthy. A site action that left plans behind (LeftBehind: busy,
// refused, aborted, or failed other than by a drill's checks) ends
// partial, not completed, and its RTO covers only the plans that moved.
type SiteFailoverResult struct {
	Progress
	From       string        `json:"from"`
	To         string        `json:"to"`
	RTO        time.Duration `json:"rto"`
	Plans      []PlanOutcome `json:"plans"`
	LeftBehind []string      `json:"leftBehind,omitempty"`
}

// Step kinds of a site action.
const (
	KindTrustPlan    StepKind = "trust-plan"
	KindSiteFence    StepKind = "site-fence"
	KindSiteVerify   StepKind = "site-verify-fence"
	KindTier         StepKind = "tier"
	KindPlanFailover StepKind = "plan-failover"
)

// SiteBusyError refuses a site action because one runs on the site.
type SiteBusyError struct{ Site, ID, RunID string }

func (e *SiteBusyError) Error() string {
	return fmt.Sprintf("a site action on %s is running already (workflow %s, run %s); follow it with drctl watch %s", e.Site, e.ID, e.RunID, e.ID)
}

// StartSite starts a site action, or refuses with a *SiteBusyError when
// one runs on the site already.
func StartSite(ctx context.Context, c client.Client, in SiteFailoverInput) (client.WorkflowRun, error) {
	id := SiteActionID(in.From)
	action := in.Action
	if action == "" {
		action = SiteFailoverAction
	}
	run, started, err := startOnce(ctx, c, id, in.Origin, Attributes("site-"+in.From, "site-"+action, in.To), SiteFailover, in)
	if started != nil {
		return nil, &SiteBusyError{Site: in.From, ID: id, RunID: started.RunId}
	}
	return run, err
}

// SiteFailover fails a lost site's plans over (see above). It ends with
// an error only when the operator aborts it; plans that did not complete
// are in the result.
func SiteFailover(ctx workflow.Context, in SiteFailoverInput) (*SiteFailoverResult, error) {
	parallelism := in.Parallelism
	if parallelism <= 0 {
		parallelism = DefaultSiteParallelism
	}
	// The site action's own steps pause for the operator, as a plan's do.
	action := in.Action
	if action == "" {
		action = SiteFailoverAction
	}
	if !slices.Contains([]string{SiteFailoverAction, SiteReprotectAction, SiteFailbackAction, SiteDrillAction}, action) {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("site action %q: want failover, reprotect, failback or drill", action), ErrPreflight, nil)
	}
	own := &plans.Plan{Metadata: plans.Metadata{Name: "site-" + in.From}, Policy: plans.Policy{Parallelism: parallelism, OnFailure: "pause"}}
	r, err := newRun(ctx, SiteAction(action), own)
	if err != nil {
		return nil, err
	}
	r.origin, r.progress.By = in.Origin, in.By
	res := &SiteFailoverResult{From: in.From, To: in.To}
	outcome := map[string]*PlanOutcome{}
	var order []string // plans by tier, then name
	sorted := slices.Clone(in.Plans)
	slices.SortStableFunc(sorted, func(a, b SitePlan) int {
		if a.Plan == nil || b.Plan == nil {
			return 0
		}
		if a.Plan.Metadata.Tier != b.Plan.Metadata.Tier {
			return a.Plan.Metadata.Tier - b.Plan.Metadata.Tier
		}
		return strings.Compare(a.Plan.Metadata.Name, b.Plan.Metadata.Name)
	})
	byName := map[string]SitePlan{}
	for i, sp := range sorted {
		if sp.Plan == nil || sp.Plan.Metadata.Name == "" {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("site %s: plan %d of the input has no plan", action, i), ErrPreflight, nil)
		}
		name := sp.Plan.Metadata.Name
		if _, dup := byName[name]; dup {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("site %s: plan %q is listed twice", action, name), ErrPreflight, nil)
		}
		if action != SiteFailoverAction && sp.input(action) == nil {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("site %s: plan %q comes without its %s's input", action, name, action), ErrPreflight, nil)
		}
		byName[name] = sp
		order = append(order, name)
		outcome[name] = &PlanOutcome{Plan: name, Tier: sp.Plan.Metadata.Tier, Workflow: ActionID(name)}
	}

	// Every plan's signature first, before any of its endpoints is used;
	// a plan that is not trusted, or does not have both sites, is left
	// out, and its CIDRs with it. The checks run parallelism at a time
	// (each asks the plan's own record to accept its version, a turn
	// through the server: one after another they cost a site of 100
	// plans over a second); the first alone, as it may set the site
	// action's own search attributes and memo.
	steps := make([]*Step, len(order))
	for i, name := range order {
		steps[i] = r.add(newRef(KindTrustPlan, "trust plan "+name, name), false)
	}
	checked := make([]string, len(order))
	refused := make([]error, len(order))
	views := make([]RecordView, len(order))
	check := func(ctx workflow.Context, i int) {
		sp, s := byName[order[i]], steps[i]
		s.State, s.Start, s.Attempts = StateRunning, workflow.Now(ctx), 1
		note, view, err := trust(ctx, sp.Plan, Origin{Signature: sp.Signature, By: in.By})
		views[i] = view
		if err == nil {
			from, to := sp.sites(action, in)
			err = checkSites(sp.Plan, from, to)
		}
		s.End = workflow.Now(ctx)
		if err != nil {
			s.State, s.LastError = StateFailed, ErrorText(err)
			refused[i] = err
			return
		}
		s.State, s.Output = StateDone, note
		checked[i] = note
	}
	if len(order) > 0 {
		check(ctx, 0)
		at := map[string]int{}
		for i, name := range order {
			at[name] = i
		}
		_ = parallel(ctx, order[1:], parallelism, func(ctx workflow.Context, name string) error {
			check(ctx, at[name])
			return nil
		})
	}
	var trusted []string
	var notes [][2]string // plan, its trust note
	for i, name := range order {
		if err := refused[i]; err != nil {
			outcome[name].State, outcome[name].Error = OutcomeRefused, ErrorText(err)
			continue
		}
		trusted = append(trusted, name)
		notes = append(notes, [2]string{name, checked[i]})
		sp := byName[name]
		sp.view = &views[i]
		byName[name] = sp
	}
	r.progress.Trust = trustSummary(notes)

	// One fence per storage system of the surviving site (a failover's),
	// for the plans not running an action of their own: a busy plan is
	// left alone, its clients with it (its own action, or the site
	// action's retry once it has ended, fences them and records it).
	fences := map[string]*SiteFence{}
	if action == SiteFailoverAction {
		var fenced, busy []string
		lctx := workflow.WithLocalActivityOptions(ctx, runReadOptions)
		var rr *RunReader
		if err := workflow.ExecuteLocalActivity(lctx, rr.RunningActions, trusted).Get(ctx, &busy); err != nil {
			// Not knowing which plans are busy, fence none on their
			// behalf: each plan's own failover fences, verifies and
			// records its clients.
			workflow.GetLogger(ctx).Warn("could not ask which plans run an action; each plan fences its own clients", "error", err)
		} else {
			fenced = slices.DeleteFunc(slices.Clone(trusted), func(n string) bool { return slices.Contains(busy, n) })
		}
		if fences, err = siteFences(ctx, r, in, byName, fenced); err != nil {
			return r.siteEnd(ctx, in, byName, res, outcome, order, err)
		}
	}

	// The plans' own failovers, tier by tier.
	var tiers [][]string
	for _, name := range trusted {
		t := byName[name].Plan.Metadata.Tier
		if len(tiers) == 0 || byName[tiers[len(tiers)-1][0]].Plan.Metadata.Tier != t {
			tiers = append(tiers, nil)
		}
		tiers[len(tiers)-1] = append(tiers[len(tiers)-1], name)
	}
	for _, tier := range tiers {
		t := byName[tier[0]].Plan.Metadata.Tier
		for _, name := range tier {
			r.add(newRef(planKind(action), fmt.Sprintf("%s plan %s", siteVerbs[action], name), name), false)
		}
		err := r.step(ctx, newRef(KindTier, fmt.Sprintf("tier %d: %d plan(s)", t, len(tier)), fmt.Sprint(t)), false, func(ctx workflow.Context) (string, error) {
			var left []string
			for _, name := range tier {
				if outcome[name].State != StateCompleted {
					left = append(left, name)
				}
			}
			_ = parallel(ctx, left, parallelism, func(ctx workflow.Context, name string) error {
				r.sitePlan(ctx, in, action, byName[name], fences[name], outcome[name])
				return nil
			})
			var failed []string
			for _, name := range tier {
				if o := outcome[name]; o.State != StateCompleted {
					failed = append(failed, fmt.Sprintf("%s %s (%s)", name, o.State, o.Error))
				}
			}
			if len(failed) > 0 && action == SiteDrillAction {
				// A drill that finds problems has done its work: the
				// outcomes say which; nothing waits for the operator.
				return fmt.Sprintf("%d plan(s) drilled, %d with failed checks: %s", len(tier), len(failed), strings.Join(failed, "; ")), nil
			}
			if len(failed) > 0 {
				return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("%d of %d plan(s) of tier %d did not complete: %s",
					len(failed), len(tier), t, strings.Join(failed, "; ")), ErrGroupsFail, nil)
			}
			return fmt.Sprintf("%d plan(s): %s done", len(tier), action), nil
		})
		if err != nil {
			return r.siteEnd(ctx, in, byName, res, outcome, order, err)
		}
	}
	return r.siteEnd(ctx, in, byName, res, outcome, order, nil)
}

// siteEnd closes the site action's timeline and result: partial when it
// left plans behind, each with the command that recovers it.
func (r *run) siteEnd(ctx workflow.Context, in SiteFailoverInput, byName map[string]SitePlan, res *SiteFailoverResult, outcome map[string]*PlanOutcome, order []string, err error) (*SiteFailoverResult, error) {
	action := in.Action
	if action == "" {
		action = SiteFailoverAction
	}
	for _, name := range order {
		o := outcome[name]
		if leftBehind(action, o) {
			res.LeftBehind = append(res.LeftBehind, name)
			o.Recover = recoverCommand(action, in, byName[name], o)
		}
		res.Plans = append(res.Plans, *o)
	}
	r.progress.End = workflow.Now(ctx)
	r.progress.State = StateCompleted
	if len(res.LeftBehind) > 0 {
		r.progress.State = StatePartial
	}
	if err != nil {
		r.progress.State = StateAborted
	}
	res.RTO = r.progress.End.Sub(r.progress.Start)
	res.Progress = *r.progress
	return res, err
}

// leftBehind tells a plan the site action did not move: every plan not
// completed, but a drill's plan whose checks failed (the drill did its
// work: nothing was to move).
func leftBehind(action string, o *PlanOutcome) bool {
	if o.State == StateCompleted || o.State == "" {
		return false
	}
	return !(action == SiteDrillAction && o.State == StateFailed)
}

// recoverCommand is what moves a plan the site action left behind: its
// own action, after the action it was busy with has ended.
func recoverCommand(action string, in SiteFailoverInput, sp SitePlan, o *PlanOutcome) string {
	file := sp.File
	if file == "" {
		file = "PLAN-FILE-OF-" + o.Plan
	}
	var cmd string
	switch action {
	case SiteReprotectAction:
		cmd = fmt.Sprintf("drctl reprotect %s --from %s", file, in.From)
		if sp.Reprotect != nil {
			cmd = fmt.Sprintf("drctl reprotect %s --from %s", file, sp.Reprotect.From)
		}
	case SiteFailbackAction:
		cmd = fmt.Sprintf("drctl failback %s --to %s", file, in.To)
	case SiteDrillAction:
		cmd = fmt.Sprintf("drctl drill %s --to %s", file, in.To)
		if sp.Drill != nil && sp.Drill.Action != "" {
			cmd += " --action " + sp.Drill.Action
		}
	default:
		cmd = fmt.Sprintf("drctl failover %s --to %s", file, in.To)
	}
	if o.State != OutcomeBusy {
		return cmd
	}
	running := "its running action"
	if o.Busy != "" {
		running = "its running " + o.Busy
	}
	if o.Busy == action {
		// Its own action of the same kind may move it: follow that first.
		return fmt.Sprintf("drctl watch %s (%s may move it); if it does not: %s", o.Workflow, running, cmd)
	}
	return fmt.Sprintf("drctl cancel %s (%s), then %s", o.Workflow, running, cmd)
}

// storageKey names the storage system a plan reaches a site's fence
// service on: its address and plugin parameters (one driver may serve
// several clusters, told apart by a parameter such as clusterID).
func storageKey(e activities.Endpoint) string {
	keys := make([]string, 0, len(e.Parameters))
	// The keys are sorted below: the map's order does not matter.
	//workflowcheck:ignore
	for k := range e.Parameters {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	key := e.Address
	for _, k := range keys {
		key += " " + k + "=" + e.Parameters[k]
	}
	return key
}

// trustSummary is a site action's trust: each note its plans' checks
// gave, once, with the plans it holds for (a worker that runs unsigned
// plans warns once for all of them).
func trustSummary(notes [][2]string) string {
	var order []string
	plansOf := map[string][]string{}
	for _, n := range notes {
		if n[1] == "" {
			continue
		}
		if _, ok := plansOf[n[1]]; !ok {
			order = append(order, n[1])
		}
		plansOf[n[1]] = append(plansOf[n[1]], n[0])
	}
	parts := make([]string, len(order))
	for i, note := range order {
		parts[i] = fmt.Sprintf("%s (plans %s)", note, strings.Join(plansOf[note], ", "))
	}
	return strings.Join(parts, "; ")
}

// siteFences fences the lost site's clients once per storage system of
// the surviving site, for the trusted plans that can be fenced, and
// verifies each fence. It returns the fence each plan found made.
func siteFences(ctx workflow.Context, r *run, in SiteFailoverInput, byName map[string]SitePlan, trusted []string) (map[string]*SiteFence, error) {
	type system struct {
		key   string
		plan  *plans.Plan // the first plan that reaches it: its endpoint and secrets make the calls
		plans []string
		cidrs []string
	}
	var systems []*system
	for _, name := range trusted {
		sp := byName[name]
		site := sp.Plan.Site(in.From)
		cidrs := site.Fence.CIDRs
		if len(cidrs) == 0 {
			cidrs = sp.Clients
		}
		if site.Fence.Unavailable || len(cidrs) == 0 {
			continue // its own failover decides (confirmation, or NotFenced)
		}
		e, err := activities.EndpointFor(sp.Plan, in.To, activities.RPCFenceClusterNetwork)
		if err != nil {
			continue // its own failover reports it
		}
		key := storageKey(e)
		i := slices.IndexFunc(systems, func(s *system) bool { return s.key == key })
		if i < 0 {
			systems = append(systems, &system{key: key, plan: sp.Plan})
			i = len(systems) - 1
		}
		s := systems[i]
		s.plans = append(s.plans, name)
		for _, c := range cidrs {
			if !slices.Contains(s.cidrs, c) {
				s.cidrs = append(s.cidrs, c)
			}
		}
	}
	fences := map[string]*SiteFence{}
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	for n, s := range systems {
		sys := fmt.Sprint(n + 1)
		label := fmt.Sprintf("fence %s through the storage of %s at %s", in.From, in.To, s.key)
		fenceRef := newRef(KindSiteFence, label, in.To, sys)
		verifyRef := newRef(KindSiteVerify, fmt.Sprintf("verify the fence of %s through the storage of %s at %s", in.From, in.To, s.key), in.To, sys)
		if err := r.step(ctx, fenceRef, true, func(ctx workflow.Context) (string, error) {
			if err := fenceCIDRs(ctx, s.plan, in.To, activities.RPCFenceClusterNetwork, s.cidrs); err != nil {
				return "", err
			}
			return fmt.Sprintf("fenced %s for %d plan(s): %s", strings.Join(s.cidrs, ", "), len(s.plans), strings.Join(s.plans, ", ")), nil
		}); err != nil {
			return nil, err
		}
		if r.find(fenceRef.id).State == StateSkipped {
			// Skipped with --override: nothing here to verify; each of
			// this storage's plans fences and verifies its own clients.
			continue
		}
		if err := r.step(ctx, verifyRef, true, func(ctx workflow.Context) (string, error) {
			listed, err := listFence(ctx, s.plan, in.To)
			if cannotList(err) {
				return fmt.Sprintf("%d CIDRs fenced as FenceClusterNetwork acknowledged; not read back: the storage does not implement ListClusterFence", len(s.cidrs)), nil
			}
			if err != nil {
				return "", err
			}
			var missing []string
			for _, c := range s.cidrs {
				if !slices.Contains(listed, c) {
					missing = append(missing, c)
				}
			}
			if len(missing) > 0 {
				return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf(
					"the storage of %q at %s does not list %s as fenced (it lists %v)", in.To, s.key, strings.Join(missing, ", "), listed), ErrNotFenced, nil)
			}
			return fmt.Sprintf("%d CIDRs fenced", len(s.cidrs)), nil
		}); err != nil {
			return nil, err
		}
		if r.find(fenceRef.id).State != StateDone || r.find(verifyRef.id).State != StateDone {
			// Skipped with --override: this storage's plans were not seen
			// fenced, so none is told it was; each fences and verifies its
			// own clients (and pauses if it cannot).
			continue
		}
		for _, name := range s.plans {
			fences[name] = &SiteFence{Action: id, CIDRs: s.cidrs}
		}
	}
	return fences, nil
}

// siteVerbs name a site action's plan steps.
var siteVerbs = map[string]string{SiteFailoverAction: "fail over", SiteReprotectAction: "reprotect", SiteFailbackAction: "fail back", SiteDrillAction: "drill"}

// planKind is the kind of a site action's plan steps: KindPlanFailover,
// or "plan-ACTION".
func planKind(action string) StepKind {
	if action == SiteFailoverAction {
		return KindPlanFailover
	}
	return StepKind("plan-" + action)
}

// IsPlanStep tells a site action's plan steps, and names their plan.
func IsPlanStep(s *Step) (string, bool) {
	k := string(s.Kind())
	if !strings.HasPrefix(k, "plan-") {
		return "", false
	}
	return strings.TrimPrefix(s.ID, k+"/"), true
}

// input is the plan's own action's input for action (not failover),
// with the site plan's plan and signature, and by; nil when missing.
func (sp SitePlan) input(action string) any {
	switch action {
	case SiteReprotectAction:
		if sp.Reprotect != nil {
			return *sp.Reprotect
		}
	case SiteFailbackAction:
		if sp.Failback != nil {
			return *sp.Failback
		}
	case SiteDrillAction:
		if sp.Drill != nil {
			return *sp.Drill
		}
	}
	return nil
}

// sites are where the plan's own action moves from and to.
func (sp SitePlan) sites(action string, in SiteFailoverInput) (string, string) {
	switch action {
	case SiteReprotectAction:
		return sp.Reprotect.From, sp.Reprotect.To
	case SiteFailbackAction:
		return sp.Failback.From, sp.Failback.To
	case SiteDrillAction:
		return sp.Drill.From, sp.Drill.To
	}
	return in.From, in.To
}

// sitePlan runs one plan's own action as a child under the plan's own
// action id and records its outcome in o and in the plan's step.
func (r *run) sitePlan(ctx workflow.Context, in SiteFailoverInput, action string, sp SitePlan, fence *SiteFence, o *PlanOutcome) {
	name := sp.Plan.Metadata.Name
	s := r.find(newRef(planKind(action), "", name).id)
	s.State, s.Start, s.End, s.LastError, s.Output = StateRunning, workflow.Now(ctx), time.Time{}, "", ""
	s.Attempts++
	origin := Origin{Signature: sp.Signature, By: in.By, View: sp.view}
	var wf, child any
	to := in.To
	switch action {
	case SiteReprotectAction:
		x := *sp.Reprotect
		x.Origin, x.Plan = origin, sp.Plan
		wf, child, to = Reprotect, x, x.To
	case SiteFailbackAction:
		x := *sp.Failback
		x.Origin, x.Plan = origin, sp.Plan
		wf, child, to = Failback, x, x.To
	case SiteDrillAction:
		x := *sp.Drill
		x.Origin, x.Plan = origin, sp.Plan
		wf, child, to = Drill, x, x.To
	default:
		wf, child = Failover, FailoverInput{
			Origin: origin, Plan: sp.Plan, From: in.From, To: in.To,
			ConfirmUnfenced: sp.ConfirmUnfenced, OverrideState: sp.OverrideState, LastSync: sp.LastSync, Clients: sp.Clients,
			SiteFence: fence,
		}
	}
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            ActionID(name),
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		// A plan's action goes on if the site action is ended.
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		TypedSearchAttributes: Attributes(name, action, to),
		Memo:                  Origin{By: in.By}.memo(),
	})
	f := workflow.ExecuteChildWorkflow(cctx, wf, child)
	var exec workflow.Execution
	err := f.GetChildWorkflowExecution().Get(ctx, &exec)
	var busy *temporal.ChildWorkflowExecutionAlreadyStartedError
	switch {
	case errors.As(err, &busy):
		// Which action: the operator decides whether to end it.
		var running string
		lctx := workflow.WithLocalActivityOptions(ctx, runReadOptions)
		var rr *RunReader
		if err := workflow.ExecuteLocalActivity(lctx, rr.RunningAction, name).Get(ctx, &running); err != nil {
			running = ""
		}
		what := "an action"
		if running != "" {
			what = article(running) + " " + running
		}
		o.State, o.Busy = OutcomeBusy, running
		o.Error = fmt.Sprintf("plan %q is running %s of its own (workflow %s); it was left alone: let it end (drctl watch %s) or end it (drctl cancel %s), then retry",
			name, what, ActionID(name), ActionID(name), ActionID(name))
		if o.FirstBusy.IsZero() {
			o.FirstBusy, o.FirstBusyTry = workflow.Now(ctx), s.Attempts
		}
	case err != nil:
		o.State, o.Error = StateAborted, ErrorText(err)
	default:
		o.RunID = exec.RunID
		s.Output = "running as workflow " + exec.ID
		o.State, o.Error = StateCompleted, ""
		switch action {
		case SiteFailoverAction:
			var fr FailoverResult
			if err := f.Get(ctx, &fr); err != nil {
				o.State, o.Error = StateAborted, ErrorText(err)
			} else {
				o.RTO = fr.RTO
				// From the site action's start, not the plan's own: a
				// plan of a later tier, or one retried after it was
				// busy, lost no more writes for starting later.
				if !sp.LastSync.IsZero() {
					o.RPO, o.RPOKnown = r.progress.Start.Sub(sp.LastSync), true
				}
			}
		case SiteDrillAction:
			var dr DrillResult
			if err := f.Get(ctx, &dr); err != nil {
				o.State, o.Error = StateAborted, ErrorText(err)
			} else if !dr.OK {
				o.State, o.Error = StateFailed, fmt.Sprintf("%d check(s) failed: %s", dr.Failed, strings.Join(dr.Failures, "; "))
			}
			o.RTO = dr.End.Sub(dr.Start)
		default:
			var p Progress
			if err := f.Get(ctx, &p); err != nil {
				o.State, o.Error = StateAborted, ErrorText(err)
			}
			o.RTO = p.End.Sub(p.Start)
		}
	}
	s.End = workflow.Now(ctx)
	if o.State == StateCompleted {
		s.State, s.Output = StateDone, fmt.Sprintf("completed as workflow %s in %v", ActionID(name), o.RTO.Round(time.Millisecond))
		if action == SiteFailoverAction {
			s.Output = fmt.Sprintf("completed as workflow %s, RTO %v", ActionID(name), o.RTO.Round(time.Millisecond))
		}
		return
	}
	s.State, s.LastError = StateFailed, o.Error
}
