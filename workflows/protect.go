package workflows

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/plans"
)

// Names of Protect's query and update.
const (
	QueryProtect      = names.QueryProtect
	UpdateStopProtect = names.UpdateStopProtect
)

// DefaultProtectInterval is how often Protect polls replication.
const DefaultProtectInterval = 30 * time.Second

// protectRunLength bounds one run of Protect: after this many polls, or a
// history this long, it continues as new with its state.
const (
	protectRunLength  = 100
	protectHistoryCap = 4000
	ProtectIDPrefix   = names.ProtectIDPrefix
	// SignalRetarget moves a running Protect to a new primary.
	SignalRetarget = names.SignalRetarget
	// surveyBatch is how many sources one SurveyReplication polls.
	surveyBatch = 100
)

// ProtectID is the workflow id of a plan's Protect.
func ProtectID(plan string) string { return names.ProtectID(plan) }

// ProtectInput starts or continues protection of a plan with Primary as
// the replication source.
type ProtectInput struct {
	Origin
	Plan     *plans.Plan   `json:"plan"`
	Primary  string        `json:"primary"`
	Interval time.Duration `json:"interval,omitempty"`
	// State is what the previous run recorded (continue-as-new).
	State *ProtectState `json:"state,omitempty"`
	// Promote: after enabling, promote the primary's copies without
	// force, once (promoteForSyncs). Only the operator's start of
	// protection asks it: a DR action that makes a site primary promotes
	// its copies itself, and a protection that follows it (retarget)
	// must not promote while another action may be moving the plan.
	Promote bool `json:"promote,omitempty"`
	// Seen are the retargets' seals the previous runs took lately: a
	// seal is taken once (proof.go).
	Seen []seenSeal `json:"seen,omitempty"`
}

// GroupHealth is the last look at one group's replication.
type GroupHealth struct {
	LastSync time.Time     `json:"lastSync,omitzero"`
	Lag      time.Duration `json:"lag"`
	Status   string        `json:"status,omitempty"`
	Message  string        `json:"message,omitempty"`
	Error    string        `json:"error,omitempty"`
	OutOfRPO bool          `json:"outOfRPO"`
	// Why says, while the group is out of RPO, which side stopped: the
	// primary's storage that did not answer, or the replica that takes
	// no syncs while the primary answers.
	Why string `json:"why,omitempty"`
	// Recovering: the primary's storage answered, in words a recorded
	// deviation reads as passing, that the replica's side of the
	// replication is missing (ceph-csi's missing remote status while the
	// replica site's mirror daemon is down or restarting): the primary
	// answers.
	Recovering bool `json:"recovering,omitempty"`
	// NoSync: the primary's storage answered NOT_FOUND, which a driver
	// gives a primary copy no sync of which has completed (the spec's
	// simulator, ceph-csi's "no snapshot details"): it answered.
	NoSync bool `json:"noSync,omitempty"`
	// NotPrimary: the primary's storage answered FAILED_PRECONDITION, that
	// its copy is not primary (a demotion under way, a record that is
	// wrong): it answered.
	NotPrimary bool      `json:"notPrimary,omitempty"`
	Checked    time.Time `json:"checked"`
}

// ProtectState is what Protect knows; failover and failback read it.
type ProtectState struct {
	Primary string                 `json:"primary"`
	Enabled bool                   `json:"enabled"`
	Groups  map[string]GroupHealth `json:"groups"`
	// OutOfRPO: some group's lag is past the plan's RPO target.
	OutOfRPO bool `json:"outOfRPO"`
	// Clients are the client CIDRs each site's storage last reported.
	Clients map[string][]string `json:"clients,omitempty"`
	Polls   int                 `json:"polls"`
	Runs    int                 `json:"runs"`
	// By is who started the protection; Trust why the worker acts on its
	// plan (the signer, or the unsigned-plans warning).
	By    string `json:"by,omitempty"`
	Trust string `json:"trust,omitempty"`
	// noted is what this run last sent to the plan's record.
	noted *ProtectionEntry
	// Unreachable says why the primary's storage could not be asked
	// (every call of the last round failed, or the round has gone on
	// past the poll interval without an answer); empty while it answers.
	Unreachable string `json:"unreachable,omitempty"`
	// UnreachableSince is when the primary's storage stopped answering.
	UnreachableSince time.Time `json:"unreachableSince,omitzero"`
	// RPOTarget is the plan's target the groups are judged against.
	RPOTarget time.Duration `json:"rpoTarget,omitempty"`
	// Looked is when protection last judged the groups (health): a
	// finished poll round, or a tick of its watch while a round hangs.
	// Every view shows the lag as of this instant (Summary).
	Looked time.Time `json:"looked,omitzero"`
	// Unpromoted names the groups whose copies on the primary the storage
	// would not promote, with its words: a driver that schedules its syncs
	// at promotion (ceph-csi) ships them no more, so their lag grows.
	// Protection asks again at the start of each run.
	Unpromoted map[string]string `json:"unpromoted,omitempty"`
	// Unprotected is set after a failover: the plan runs on Primary with
	// no replica until a reprotect. Protection then polls no replication
	// (the lost site is no primary, and the new one has no peer to ship
	// to): nothing is out of RPO, the plan is unprotected.
	Unprotected *Unprotection `json:"unprotected,omitempty"`
	// Refused are the latest retargets protection refused (without a
	// worker's seal, with another's, an old or a repeated one), and how
	// many it has refused in all: they stay across its runs.
	Refused      []RefusedEntry `json:"refused,omitempty"`
	RefusedCount int            `json:"refusedCount,omitempty"`
	// Points are the points in time protection keeps
	// (policy.pointsInTime, points.go), oldest first; Pruned the latest
	// it deleted, PrunedCount how many in all; PointsSince when it first
	// looked for a point. They stay across its runs, retargets and
	// unprotection.
	Points      []PointInTime `json:"points,omitempty"`
	Pruned      []PrunedPoint `json:"pruned,omitempty"`
	PrunedCount int           `json:"prunedCount,omitempty"`
	PointsSince time.Time     `json:"pointsSince,omitzero"`
	// LastCut is when the last point was cut, or its cut failed.
	LastCut time.Time `json:"lastCut,omitzero"`
	// PointsPaused is the pause of the points by an action under way
	// (pausepoints.go): no storage call for a point starts until the
	// action ends. It stays for the run's primary only.
	PointsPaused *PointsPause `json:"pointsPaused,omitempty"`
	// SignatureEnds is when the plan's signature ends (zero for an
	// unsigned plan, or a signature with no end): protection ends then.
	SignatureEnds time.Time `json:"signatureEnds,omitzero"`
	// Ended says why protection ended on its own: its plan's signature
	// ended. Empty while it runs, and after a stop.
	Ended string `json:"ended,omitempty"`
}

// carryPoints gives next the points of s.
func (s *ProtectState) carryPoints(next *ProtectState) {
	next.Points, next.Pruned, next.PrunedCount, next.PointsSince, next.LastCut = s.Points, s.Pruned, s.PrunedCount, s.PointsSince, s.LastCut
}

// hasPoints tells a state that carries points in time.
func (s *ProtectState) hasPoints() bool {
	return len(s.Points) > 0 || s.PrunedCount > 0 || !s.PointsSince.IsZero()
}

// Unprotection is a plan left without a replica by a failover.
type Unprotection struct {
	// Lost is the site the failover left; Since is when the failover
	// made the plan's copies on the primary primary (its signal to
	// protection), By the failover's workflow id.
	Lost  string    `json:"lost"`
	Since time.Time `json:"since"`
	By    string    `json:"by,omitempty"`
	// LastSync is the last sync known to have reached Lost before the
	// loss (zero when none was known): no copy holds anything newer.
	LastSync time.Time `json:"lastSync,omitzero"`
}

// LastSync is the oldest last sync over the groups: what a failover now
// could lose back to. Zero when some group has none.
func (s *ProtectState) LastSync() time.Time {
	var oldest time.Time
	// A minimum over every group: the order of the map does not matter.
	//workflowcheck:ignore
	for _, g := range s.Groups {
		if g.LastSync.IsZero() {
			return time.Time{}
		}
		if oldest.IsZero() || g.LastSync.Before(oldest) {
			oldest = g.LastSync
		}
	}
	return oldest
}

// Summary is the plan-wide reading of protection's last look, and the
// one every view shows: status's record and protection lines and its
// JSON, the dashboard, the plan's record; the metrics carry the same
// figures per group. The lag is the largest of the groups' and the last
// sync the oldest, as health judged them from the storage's answers at
// Looked (a reader never ages them by its own clock: the watch does,
// every tick while the primary does not answer), out of RPO as the
// groups are, and the primary unreachable as the round found it. An
// unprotected plan has no lag and is never out of RPO; its last sync is
// the last that reached the lost site. Checked is Looked, or at when
// protection has not looked yet.
func (s *ProtectState) Summary(running bool, at time.Time) *ProtectionEntry {
	e := &ProtectionEntry{Primary: s.Primary, Running: running, Enabled: s.Enabled, OutOfRPO: s.OutOfRPO, LastSync: s.LastSync(),
		Checked: s.Looked, Unreachable: s.Unreachable, RPOTarget: s.RPOTarget, SignatureEnds: s.SignatureEnds, Ended: s.Ended}
	if e.Checked.IsZero() {
		e.Checked = at
	}
	// A maximum over every group: the order of the map does not matter.
	//workflowcheck:ignore
	for _, g := range s.Groups {
		e.Lag = max(e.Lag, g.Lag)
	}
	if u := s.Unprotected; u != nil {
		e.Unprotected, e.LastSync, e.Lag, e.OutOfRPO, e.Unreachable = u, u.LastSync, 0, false, ""
	}
	return e
}

// StopProtect asks Protect to end; Disable also turns replication off.
type StopProtect struct {
	Disable bool `json:"disable,omitempty"`
}

// Protect keeps watch over a plan's replication, for as long as it runs:
// it enables replication of every group on the primary (idempotent, with
// the plan's parameters), then polls GetVolumeReplicationInfo on the
// primary, records each group's last sync, lag and status, marks the plan
// out of RPO past the target, and refreshes each site's GetFenceClients.
// It continues as new to keep its history small, and ends on a "stop"
// update, disabling replication only when asked.
//
// Protection follows the record's primary: when a failover records its
// new primary, with the site it lost, the plan's record signals Protect
// (a retarget naming the lost site), which continues as new unprotected
// on the new primary. It then
// polls no replication (the lost site is fenced and no primary; the new
// primary has no replica to ship to) and reports the plan unprotected
// each interval, until a reprotect retargets it to the same primary,
// which enables replication and polls it again.
func Protect(ctx workflow.Context, in ProtectInput) (*ProtectState, error) {
	p := in.Plan
	s := in.State
	if s == nil || s.Primary != in.Primary {
		s = &ProtectState{Primary: in.Primary, Groups: map[string]GroupHealth{}, Clients: map[string][]string{}}
		if in.State != nil {
			s.Refused, s.RefusedCount = in.State.Refused, in.State.RefusedCount
			in.State.carryPoints(s)
		}
	}
	// A state carried over (continue as new) comes through JSON, where
	// an empty map comes back nil.
	if s.Groups == nil {
		s.Groups = map[string]GroupHealth{}
	}
	if s.Clients == nil {
		s.Clients = map[string][]string{}
	}
	// A pause of the points comes only sealed, by an update
	// (pausepoints.go), never with a state given at a start; cleared
	// before the handler that takes one is set.
	if info := workflow.GetInfo(ctx); info.ContinuedExecutionRunID == "" || info.Attempt > 1 || info.CronSchedule != "" {
		s.PointsPaused = nil
	}
	// The handlers come first: a stop or a query can arrive with a run's
	// first workflow task (a run that continued as new when a failback
	// retargeted it, say), and an update that finds no handler when the
	// task yields to the plan's check is refused as unknown.
	var stop *StopProtect
	var cancelRound workflow.CancelFunc
	if err := workflow.SetQueryHandler(ctx, QueryProtect, func() (*ProtectState, error) { return s, nil }); err != nil {
		return nil, err
	}
	var disabled *disableOutcome
	if err := workflow.SetUpdateHandler(ctx, UpdateStopProtect, func(ctx workflow.Context, req StopProtect) (string, error) {
		stop = &req
		if cancelRound != nil {
			cancelRound() // a poll of a dead site can hang until its deadline
		}
		// Answer once protection has ended: replication off on every
		// group when asked (or the groups it is not off on named), the
		// record told. A protect start after the answer starts anew.
		if err := workflow.Await(ctx, func() bool { return disabled != nil }); err != nil {
			return "", err
		}
		return disabled.message, disabled.err
	}); err != nil {
		return nil, err
	}
	// A point in time is held (or released) here: a held point is never
	// pruned, and a point being pruned cannot be held.
	pruning := map[string]bool{}
	notes := &pointNotes{}
	// The seals protection took (an action's holds, retargets), carried
	// across its runs: a seal read from the history is not taken again.
	ps := &proofs{seen: in.Seen}
	if p != nil {
		ps.plan = p.Metadata.Name
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateHoldPoint, func(ctx workflow.Context, h PointHold) (*PointInTime, error) {
		if h.byAction() {
			// An action's hold comes sealed by the worker that runs
			// the action; its seal is checked before anything else.
			proof := h.Proof
			if err := ps.check(ctx, RecordProofCheck{Plan: ps.plan, Hold: &h}, proof); err != nil {
				return nil, fmt.Errorf("the hold is refused: %w", err)
			}
			if err := s.validHold(h, pruning); err != nil {
				return nil, err
			}
		}
		h.Proof = nil
		pt, err := s.hold(h)
		if err != nil {
			return nil, err
		}
		notes.point(*pt)
		out := *pt
		out.Held = slices.Clone(pt.Held)
		return &out, nil
	}, workflow.UpdateHandlerOptions{Validator: func(h PointHold) error {
		if err := s.validHold(h, pruning); err != nil {
			return err
		}
		return s.validRelease(h)
	}}); err != nil {
		return nil, err
	}
	gate := &pointGate{paused: func() bool { return s.PointsPaused != nil }}
	pausing := 0
	if err := s.setPauseHandler(ctx, ps, gate, &pausing); err != nil {
		return nil, err
	}
	note, view, err := trust(ctx, p, in.Origin)
	if ends, ok := signatureEndedAtCheck(ctx, in, err); ok {
		s.SignatureEnds = ends
		return nil, s.endBySignature(ctx, p.Metadata.Name, ends)
	}
	if err != nil {
		return nil, err
	}
	// Protection runs until the signature's end (zero: none), which the
	// check above found valid; the signature is the same in every run.
	s.SignatureEnds, s.Ended = time.Time{}, ""
	if sig := in.Signature; sig != nil {
		s.SignatureEnds = sig.ExpiresAt
	}
	// Polls and points act on the volumes that stand in for the plan's;
	// the next run gets the plan as signed (in.Plan), and reads the
	// record again.
	p = replacedPlan(p, view.Replaced)
	if p == nil || p.Site(in.Primary) == nil {
		return nil, fmt.Errorf("protect: the plan has no site %q", in.Primary)
	}
	s.Runs++
	if note != "" {
		s.Trust, s.By = note, in.By
	}
	// Points in time come only from protection's own previous run
	// (continue as new, which only the server starts) or from the
	// plan's record, which takes only sealed changes: a state given at a
	// start could name any snapshot, which pruning would delete.
	info := workflow.GetInfo(ctx)
	if info.ContinuedExecutionRunID == "" || info.Attempt > 1 || info.CronSchedule != "" {
		s.Points, s.Pruned, s.PrunedCount, s.PointsSince, s.LastCut = nil, nil, 0, time.Time{}, time.Time{}
		if p.Policy.PointsInTime != nil {
			// A protection started anew takes over the record's points.
			s.adoptPoints(ctx, p.Metadata.Name)
		}
	}
	// The changes of points go to the record in order; a run ends, or
	// continues as new, once they have gone.
	workflow.Go(ctx, func(ctx workflow.Context) { notes.send(ctx, p.Metadata.Name) })
	// Protect runs for days and must answer a stop or a query at once;
	// a local activity on a dead site would hold its workflow task for
	// the call's deadline.
	ctx = workflow.WithValue(ctx, regularOnly{}, true)
	interval := in.Interval
	if interval <= 0 {
		interval = DefaultProtectInterval
	}
	log := workflow.GetLogger(ctx)
	// A retarget signal (sent by Reprotect and Failback when the primary
	// moved, and by the record after a failover) makes Protect continue
	// from the new primary. Protection takes one only with a worker's
	// seal (proof.go): anyone who may signal the workflow could otherwise
	// make it stop polling replication, or poll another site.
	var retarget string
	var lost *Unprotection
	checking := 0
	workflow.Go(ctx, func(ctx workflow.Context) {
		ch := workflow.GetSignalChannel(ctx, SignalRetarget)
		for {
			var rt Retarget
			ch.Receive(ctx, &rt)
			if sealsRetargets(ctx) {
				checking++
				err := ps.check(ctx, RecordProofCheck{Plan: p.Metadata.Name, Retarget: &rt}, rt.Proof)
				checking--
				if err != nil {
					what := "retarget to " + rt.Primary
					if rt.Lost != "" {
						what += ", unprotected (" + rt.Lost + " lost)"
					}
					s.Refused, s.RefusedCount = keepRefused(s.Refused, s.RefusedCount,
						RefusedEntry{What: what, Reason: err.Error(), From: rt.By, At: workflow.Now(ctx)})
					log.Warn("protection refused a retarget", "plan", p.Metadata.Name, "primary", rt.Primary, "lost", rt.Lost, "reason", err.Error())
					continue
				}
			}
			// The same primary is a move only between protected and
			// unprotected: a reprotect ends an unprotection, a
			// failover starts one.
			if p.Site(rt.Primary) == nil || (rt.Primary == in.Primary && (rt.Lost == "") == (s.Unprotected == nil)) {
				log.Warn("retarget ignored", "primary", rt.Primary)
				continue
			}
			retarget, lost = rt.Primary, nil
			if rt.Lost != "" {
				lost = &Unprotection{Lost: rt.Lost, Since: rt.At, By: rt.By, LastSync: s.LastSync()}
				if s.Unprotected != nil {
					lost.LastSync = s.Unprotected.LastSync
				}
				if lost.Since.IsZero() {
					lost.Since = workflow.Now(ctx)
				}
			}
			if cancelRound != nil {
				cancelRound()
			}
		}
	})
	moved := func() bool { return retarget != "" && stop == nil }
	again := func() error {
		// A pause being answered is answered in this run.
		if err := workflow.Await(ctx, func() bool { return notes.idle() && pausing == 0 }); err != nil {
			return err
		}
		next := ProtectInput{Origin: in.Origin, Plan: in.Plan, Primary: retarget, Interval: interval, Seen: ps.seen}
		switch {
		case lost != nil:
			next.State = &ProtectState{Primary: retarget, Groups: map[string]GroupHealth{}, Clients: s.Clients,
				Runs: s.Runs, By: s.By, Trust: s.Trust, RPOTarget: s.RPOTarget, Unprotected: lost,
				Refused: s.Refused, RefusedCount: s.RefusedCount}
		case s.RefusedCount > 0 || s.hasPoints():
			// A new protection, which keeps only what was refused and
			// the points in time.
			next.State = &ProtectState{Refused: s.Refused, RefusedCount: s.RefusedCount}
		}
		if next.State != nil {
			s.carryPoints(next.State)
		}
		return workflow.NewContinueAsNewError(ctx, Protect, next)
	}

	switch {
	case s.Unprotected != nil:
		// Nothing to enable: the plan's peer is lost until a reprotect.
	case !s.Enabled:
		r, err := newRun(ctx, "protect", p)
		if err != nil {
			return nil, err
		}
		if err := forGroups(ctx, r, p, GroupOp{Kind: OpEnable, Site: in.Primary}); err != nil {
			return s, err
		}
		s.Enabled = true
		if in.Promote {
			s.Unpromoted = promoteForSyncs(ctx, r, p, in.Primary, nil)
		}
	case in.Promote && len(s.Unpromoted) > 0:
		// A run continued with groups the storage would not promote:
		// ask again, once a run.
		r, err := newRun(ctx, "protect", p)
		if err != nil {
			return nil, err
		}
		s.Unpromoted = promoteForSyncs(ctx, r, p, in.Primary, s.Unpromoted)
	}

	// The sites whose clients are being asked (clientPolls).
	clientsBusy := map[string]bool{}
	for polls := 0; ; polls++ {
		if stop != nil {
			break
		}
		if moved() {
			return nil, again()
		}
		if signatureEnded(ctx, s) {
			// The changes of points go to the record first, as at a stop.
			if err := workflow.Await(ctx, func() bool { return checking == 0 && notes.idle() && pausing == 0 }); err != nil {
				return s, err
			}
			return s, s.endBySignature(ctx, p.Metadata.Name, s.SignatureEnds)
		}
		if polls >= protectRunLength || workflow.GetInfo(ctx).GetCurrentHistoryLength() > protectHistoryCap {
			// A retarget being checked is taken, or refused, in this run.
			if err := workflow.Await(ctx, func() bool { return checking == 0 && notes.idle() && pausing == 0 }); err != nil {
				return s, err
			}
			if moved() {
				return nil, again()
			}
			return nil, workflow.NewContinueAsNewError(ctx, Protect, ProtectInput{Origin: in.Origin, Plan: in.Plan, Primary: in.Primary, Interval: interval, State: s,
				Promote: in.Promote && len(s.Unpromoted) > 0, Seen: ps.seen})
		}
		wasOut := s.OutOfRPO
		round, cancel := workflow.WithCancel(ctx)
		cancelRound = cancel
		ended := false
		// A round that does not end is watched: the lag keeps growing and
		// the primary is reported unreachable while its storage does not
		// answer.
		s.RPOTarget = p.Policy.RPOTarget.D()
		beside := workflow.GetVersion(ctx, clientsBesideVersion, workflow.DefaultVersion, 1) >= 1
		if beside {
			clientPolls(ctx, p, s, clientsBusy)
		}
		if s.Unprotected == nil {
			workflow.Go(round, func(ctx workflow.Context) { s.watch(ctx, p, interval, &ended) })
			pollReplication(round, p, s)
		}
		if !beside {
			pollClients(round, p, s)
		}
		ended = true
		cancel()
		cancelRound = nil
		if stop != nil {
			break // this round was cut short: keep the last full one
		}
		if moved() {
			return nil, again()
		}
		if p.Policy.PointsInTime != nil {
			// Only a plan that asks for points cuts them: the others
			// issue the commands they always did.
			if s.Unprotected == nil {
				cut, cancel := workflow.WithCancel(ctx)
				cut = workflow.WithValue(cut, pointGateKey{}, gate)
				cancelRound = cancel
				s.keepPoints(ctx, cut, p, pruning, notes)
				cancel()
				cancelRound = nil
			}
			s.reportPoints(ctx, p, interval)
			if stop != nil {
				break
			}
			if moved() {
				return nil, again()
			}
		}
		s.Polls++
		s.report(ctx, p)
		noteProtection(ctx, p.Metadata.Name, s, true)
		if s.OutOfRPO && !wasOut {
			log.Warn("plan out of RPO", "plan", p.Metadata.Name, "target", p.Policy.RPOTarget.D(), "why", s.firstWhy())
		}
		if _, err := workflow.AwaitWithTimeout(ctx, interval, func() bool { return stop != nil || moved() }); err != nil {
			return s, err
		}
	}
	// A stop with disable answers once replication is off (or names the
	// groups it is not off on).
	out := &disableOutcome{message: "protection stopped; replication left enabled"}
	if stop.Disable {
		r, err := newRun(ctx, "unprotect", p)
		if err != nil {
			return s, err
		}
		out = disableAll(ctx, r, p, in.Primary)
		s.Enabled = out.err != nil // some groups may still replicate
	}
	noteProtection(ctx, p.Metadata.Name, s, false)
	disabled = out
	// The stop's answer goes out with the end of the workflow, and so do
	// the changes of points not yet sent.
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) && notes.idle() }); err != nil {
		return s, err
	}
	return s, nil
}

// signatureEndVersion marks a protection that ends at its plan's
// signature's end, at the first round past it, and says so (the record,
// its state, MetricProtectionEnded), where it went on to its next check
// (the next run's, within 100 polls) and ended there without a word.
const signatureEndVersion = "signature-end"

// signatureEnded tells a protection whose plan's signature has ended, by
// the workflow's clock.
func signatureEnded(ctx workflow.Context, s *ProtectState) bool {
	ends := s.SignatureEnds
	return !ends.IsZero() && !workflow.Now(ctx).Before(ends) &&
		workflow.GetVersion(ctx, signatureEndVersion, workflow.DefaultVersion, 1) >= 1
}

// signatureEndedAtCheck tells a refusal, by the check at the start of a
// run that continued as new, of a signature that has ended since the
// previous run checked it (a worker whose clock runs ahead of the
// workflow's, or one that was down across the end), and when it ended.
// Only a run continued as new, which only the server starts, with the
// input a checked run gave it, says more than the refusal: a start by a
// client with an old signature that ended is refused as any other.
func signatureEndedAtCheck(ctx workflow.Context, in ProtectInput, err error) (time.Time, bool) {
	var ae *temporal.ApplicationError
	info := workflow.GetInfo(ctx)
	if err == nil || in.Plan == nil || in.Signature == nil || in.Signature.ExpiresAt.IsZero() ||
		info.ContinuedExecutionRunID == "" || info.Attempt > 1 || info.CronSchedule != "" ||
		!errors.As(err, &ae) || ae.Type() != activities.ErrUntrustedPlan || !strings.Contains(ae.Message(), plans.ErrExpired.Error()) {
		return time.Time{}, false
	}
	return in.Signature.ExpiresAt, workflow.GetVersion(ctx, signatureEndVersion, workflow.DefaultVersion, 1) >= 1
}

// endBySignature ends protection because its plan's signature ended at
// ends: its state and the plan's record say so, with what to do,
// MetricProtectionEnded is 1, and the workflow fails with the same
// words as a non-retryable UntrustedPlan.
func (s *ProtectState) endBySignature(ctx workflow.Context, plan string, ends time.Time) error {
	s.Ended = fmt.Sprintf("protection ended: the plan's signature ended at %s; sign it again and drctl protect start %s",
		ends.UTC().Format(time.RFC3339), plan)
	workflow.GetLogger(ctx).Error("protection ended: the plan's signature ended", "plan", plan, "ended", ends)
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"plan": plan, "reason": EndedBySignature}).Gauge(MetricProtectionEnded).Update(1)
	noteProtection(ctx, plan, s, false)
	return temporal.NewNonRetryableApplicationError(s.Ended, activities.ErrUntrustedPlan, nil)
}

// disableOutcome is what a stop with disable answers.
type disableOutcome struct {
	message string
	err     error
}

// promoteForSyncs promotes, without force, the copies on the primary of
// every group (of only, when given), as the VolumeReplication controller
// of kubernetes-csi-addons does after enabling the copy that is to be
// primary; drivers act on it: ceph-csi adds the copy's mirror-snapshot
// schedule in PromoteVolume, not in EnableVolumeReplication
// (AddSnapshotScheduling in internal/csi-addons/rbd/replication.go), so a
// copy only enabled ships once and never again (measured: one mirror
// snapshot in 2 minutes). Without force the storage refuses to promote a
// copy whose peer is primary (FAILED_PRECONDITION): protection never
// makes a second primary. Nothing pauses: a refusal (a planned move under
// way, a primary that is not) is kept in the state, shown by drctl
// status, and asked again by the next run (continue-as-new).
func promoteForSyncs(ctx workflow.Context, r *run, p *plans.Plan, site string, only map[string]string) map[string]string {
	q := p
	if only != nil {
		q = planOf(p, func(g string) bool { _, ok := only[g]; return ok })
	}
	_, failed := eachGroup(ctx, r, q, GroupOp{Kind: OpPromote, Site: site})
	if len(failed) == 0 {
		return nil
	}
	out := make(map[string]string, len(failed))
	for _, f := range failed {
		out[f.Group] = f.Error
	}
	return out
}

// planOf is p cut down to the groups keep picks.
func planOf(p *plans.Plan, keep func(group string) bool) *plans.Plan {
	q := *p
	q.VolumeGroups = nil
	for _, g := range p.VolumeGroups {
		if keep(g.Name) {
			q.VolumeGroups = append(q.VolumeGroups, g)
		}
	}
	return &q
}

// eachGroup runs op on every group, every group tried however many fail
// (no pause), in GroupBatch children for a plan that fans out.
func eachGroup(ctx workflow.Context, r *run, p *plans.Plan, op GroupOp) (done int, failed []GroupFailure) {
	if fansOut(p) {
		for _, b := range batches(p) {
			res, err := r.inChild(ctx, p, op, b)
			if err != nil {
				for _, g := range b {
					failed = append(failed, GroupFailure{Group: g, Error: ErrorText(err)})
				}
				continue
			}
			done += len(res.Done)
			failed = append(failed, res.Failed...)
		}
		return done, failed
	}
	names := groupNames(p)
	errs := make(map[string]error, len(names))
	_ = parallel(ctx, names, p.Policy.Parallelism, func(ctx workflow.Context, g string) error {
		if _, err := op.do(ctx, p, g); err != nil {
			errs[g] = err
		}
		return nil
	})
	for _, g := range names {
		if err, ok := errs[g]; ok {
			failed = append(failed, GroupFailure{Group: g, Error: ErrorText(err)})
		} else {
			done++
		}
	}
	return done, failed
}

// disableAll disables replication of every group on site, every group
// tried however many fail (no pause: the operator waits for the answer),
// in GroupBatch children for a plan that fans out.
func disableAll(ctx workflow.Context, r *run, p *plans.Plan, site string) *disableOutcome {
	done, failed := eachGroup(ctx, r, p, GroupOp{Kind: OpDisable, Site: site})
	if len(failed) == 0 {
		return &disableOutcome{message: fmt.Sprintf("protection stopped; replication disabled on every group (%d) on %s", done, site)}
	}
	lines := make([]string, 0, len(failed))
	groups := make([]string, 0, len(failed))
	for _, f := range failed {
		if len(groups) < 20 {
			groups = append(groups, f.Group)
		} else if len(groups) == 20 {
			groups = append(groups, fmt.Sprintf("and %d more", len(failed)-20))
		}
		if len(lines) < 5 {
			lines = append(lines, f.Group+": "+f.Error)
		}
	}
	return &disableOutcome{err: temporal.NewNonRetryableApplicationError(fmt.Sprintf(
		"protection stopped, but replication could not be disabled on %d of %d groups on %s: %s (%s); they still replicate",
		len(failed), len(failed)+done, site, strings.Join(groups, ", "), strings.Join(lines, "; ")), ErrGroupsFail, nil)}
}

// Retarget is the retarget signal's payload.
type Retarget struct {
	Primary string `json:"primary"`
	// Lost is set by a failover: the plan now runs on Primary, at At,
	// with no replica (Lost is fenced and no primary); By is the
	// failover's workflow id.
	Lost string    `json:"lost,omitempty"`
	At   time.Time `json:"at,omitzero"`
	By   string    `json:"by,omitempty"`
	// Proof is the seal of the worker that sent the retarget (proof.go);
	// protection refuses a retarget without a valid one.
	Proof *Proof `json:"proof,omitempty"`
}

// protectFrom is the last step of Reprotect and Failback: protection of
// the plan from its new primary. It starts Protect (as a child that
// outlives the action) or, when one runs, signals it to retarget.
func protectFrom(ctx workflow.Context, r *run, p *plans.Plan, primary string) error {
	return r.step(ctx, protectStep(primary), false, func(ctx workflow.Context) (string, error) {
		id := ProtectID(p.Metadata.Name)
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: id,
			ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_ABANDON, TypedSearchAttributes: childAttributes(ctx, "protect", primary)})
		var exec workflow.Execution
		// Protection checks the plan's signature: the plan as signed.
		signed := p
		if r.signed != nil {
			signed = r.signed
		}
		err := workflow.ExecuteChildWorkflow(cctx, Protect, ProtectInput{Origin: r.origin, Plan: signed, Primary: primary}).GetChildWorkflowExecution().Get(ctx, &exec)
		if err == nil {
			return fmt.Sprintf("protection started from %s (workflow %s)", primary, id), nil
		}
		if !temporal.IsWorkflowExecutionAlreadyStartedError(err) {
			return "", err
		}
		rt := Retarget{Primary: primary, By: workflow.GetInfo(ctx).WorkflowExecution.ID}
		if sealsRetargets(ctx) {
			var err error
			if rt, err = sealRetarget(ctx, p.Metadata.Name, rt); err != nil {
				return "", err
			}
		}
		if err := workflow.SignalExternalWorkflow(ctx, id, "", SignalRetarget, rt).Get(ctx, nil); err != nil {
			return "", err
		}
		return fmt.Sprintf("the running protection (workflow %s) now polls %s", id, primary), nil
	})
}

// pollReplication records every group's replication on the primary. A
// poll's errors are recorded, not fatal: the next poll tries again.
//
// The calls go in batches of surveyBatch sources, one SurveyReplication
// activity each, one batch after another: a round of a 5,000-group plan
// adds some 150 events to the history, and a regular activity never
// holds up the workflow task, so a stop or a query is answered at once
// even while a dead primary lets every call run to its deadline.
func pollReplication(ctx workflow.Context, p *plans.Plan, s *ProtectState) {
	names := groupNames(p)
	var (
		calls []activities.ReplicationInput
		owner []string
	)
	failed := map[string]string{}
	byName := p.Groups()
	for _, g := range names {
		ins, err := activities.GroupInputs(p, s.Primary, byName[g], activities.RPCGetVolumeReplicationInfo, false)
		if err != nil {
			failed[g] = err.Error()
			continue
		}
		for _, in := range ins {
			calls, owner = append(calls, in), append(owner, g)
		}
	}
	o := activities.CallOptions(p, s.Primary, activities.RPCGetVolumeReplicationInfo)
	o.ScheduleToCloseTimeout = o.StartToCloseTimeout // one poll, no long retries: the next poll comes
	entries := make([]activities.SurveyEntry, len(calls))
	for start := 0; start < len(calls); start += surveyBatch {
		end := min(start+surveyBatch, len(calls))
		res, err := call[activities.SurveyResult](ctx, o, st.SurveyReplication,
			activities.SurveyInput{Calls: calls[start:end], Parallelism: p.Policy.Parallelism})
		if ctx.Err() != nil {
			return // cut short by a stop: keep the last complete round
		}
		for i := start; i < end; i++ {
			if err != nil || len(res.Entries) != end-start {
				entries[i] = activities.SurveyEntry{Error: fmt.Sprintf("not polled: %v", err)}
			} else {
				entries[i] = res.Entries[i-start]
			}
		}
	}
	now := workflow.Now(ctx)
	next := make(map[string]GroupHealth, len(names))
	for _, g := range names {
		h := GroupHealth{Checked: now, Error: failed[g]}
		for i, e := range entries {
			switch {
			case owner[i] != g || h.Error != "":
			case e.Error != "":
				h.Error, h.Recovering = e.Error, activities.Recovering(e.Error)
				h.NoSync, h.NotPrimary = e.Type == activities.ErrNotFound, e.Type == activities.ErrFailedPrecondition
			case h.LastSync.IsZero() || e.Info.LastSyncTime.Before(h.LastSync):
				h.LastSync, h.Lag, h.Status, h.Message = e.Info.LastSyncTime, e.Info.Lag, e.Info.Status, e.Info.StatusMessage
			}
		}
		next[g] = health(h, s.Groups[g], now, p, s.Primary)
	}
	s.record(next, now)
	s.reachable(now)
}

// watch keeps the state true while a poll round goes on without an
// answer (a primary that drops packets lets every call run to its
// deadline): every poll interval (at most half the RPO target, at least
// 100 ms) it ages
// each group's lag from its last sync known, marks the plan out of RPO
// past the target, reports the primary unreachable, and sets the
// metrics. It ends with the round.
func (s *ProtectState) watch(ctx workflow.Context, p *plans.Plan, interval time.Duration, ended *bool) {
	start := workflow.Now(ctx)
	tick := max(min(interval, p.Policy.RPOTarget.D()/2), 100*time.Millisecond)
	for {
		if err := workflow.Sleep(ctx, tick); err != nil || *ended {
			return
		}
		now := workflow.Now(ctx)
		next := make(map[string]GroupHealth, len(s.Groups))
		// A map filled from a map: the order never shows.
		//workflowcheck:ignore
		for g, h := range s.Groups {
			if h.Error == "" {
				h.Error = "not answered yet"
			}
			next[g] = health(h, s.Groups[g], now, p, s.Primary)
		}
		s.record(next, now)
		if s.Unreachable == "" || s.UnreachableSince.IsZero() {
			s.UnreachableSince = start
		}
		// Counted from the first poll left unanswered, not from this
		// round's start: a primary down for minutes has been silent for
		// minutes.
		s.Unreachable = fmt.Sprintf("the storage of %s has not answered a poll for %v", s.Primary, now.Sub(s.UnreachableSince).Round(time.Second))
		s.report(ctx, p)
	}
}

// reachable records whether the primary's storage answered the round:
// it did not when every group's poll failed.
func (s *ProtectState) reachable(now time.Time) {
	why := ""
	// Sorted keys: the same order on every replay.
	//workflowcheck:ignore
	for _, g := range slices.Sorted(maps.Keys(s.Groups)) {
		h := s.Groups[g]
		if h.Error == "" || h.Recovering || h.NoSync || h.NotPrimary {
			// Answered: a recovering answer, or no sync yet, is the
			// storage's own.
			why = ""
			break
		}
		if why == "" {
			why = h.Error
		}
	}
	switch {
	case why == "":
		s.Unreachable, s.UnreachableSince = "", time.Time{}
	case s.Unreachable == "":
		s.Unreachable, s.UnreachableSince = why, now
	default:
		s.Unreachable = why
	}
}

// health finishes a group's record: after an error it keeps the last
// known sync and counts the lag from it; out of RPO when the lag passes
// the target or no sync is known.
func health(h, prev GroupHealth, now time.Time, p *plans.Plan, primary string) GroupHealth {
	target := p.Policy.RPOTarget.D()
	if h.Error != "" {
		h.LastSync, h.Lag, h.Status, h.Message = prev.LastSync, prev.Lag, "", ""
		if !prev.LastSync.IsZero() {
			h.Lag = now.Sub(prev.LastSync)
		}
	}
	h.OutOfRPO = h.LastSync.IsZero() || h.Lag > target
	h.Why = ""
	if h.OutOfRPO {
		h.Why = rpoWhy(h, primary, replicaOf(p, primary))
	}
	return h
}

// replicaOf is the site that holds the replicas while primary holds the
// primary copies.
func replicaOf(p *plans.Plan, primary string) string {
	for _, s := range p.Sites {
		if s.Name != primary {
			return s.Name
		}
	}
	return ""
}

// rpoWhy names the side that stopped when a group is out of RPO: the
// primary's storage that did not answer, no sync that ever reached the
// replica, or a primary that answers while its replica takes no syncs
// (the replica site's mirror daemon, the link, its storage).
func rpoWhy(h GroupHealth, primary, replica string) string {
	switch {
	case h.Recovering:
		return fmt.Sprintf("%s (the primary) answers, but says the status %s (the replica) reports of it is missing: %s's mirror daemon is down or restarting; the lag counts from the last sync known",
			primary, replica, replica)
	case h.NotPrimary:
		return fmt.Sprintf("the storage of %s answers that its copy is not primary: a demotion under way, or a record that is wrong (drctl status PLAN --verify); the lag counts from the last sync known", primary)
	case h.NoSync:
		return fmt.Sprintf("%s (the primary) answers that no sync of it has completed to %s (the replica) since it became primary; the lag counts from the last sync known", primary, replica)
	case h.Error != "":
		return fmt.Sprintf("the storage of %s (the primary) did not answer; the lag counts from the last sync known", primary)
	case h.LastSync.IsZero():
		return fmt.Sprintf("%s answers, but no sync has reached %s yet", primary, replica)
	}
	return fmt.Sprintf("%s (the primary) answers, but %s (the replica) has taken no sync since %s: replication to %s stopped (its mirror daemon, the link or its storage)",
		primary, replica, h.LastSync.UTC().Format(time.RFC3339), replica)
}

// firstWhy is the reason of the first group, by name, out of RPO.
func (s *ProtectState) firstWhy() string {
	// Sorted keys: the same on every replay.
	//workflowcheck:ignore
	for _, g := range slices.Sorted(maps.Keys(s.Groups)) {
		if h := s.Groups[g]; h.OutOfRPO {
			return g + ": " + h.Why
		}
	}
	return ""
}

// record makes a complete round the state, judged at now.
func (s *ProtectState) record(next map[string]GroupHealth, now time.Time) {
	s.Groups, s.Looked = next, now
	s.OutOfRPO = false
	// An OR over every group: the order of the map does not matter.
	//workflowcheck:ignore
	for _, h := range s.Groups {
		s.OutOfRPO = s.OutOfRPO || h.OutOfRPO
	}
}

// report sets the replication metrics from a complete round. An
// unprotected plan has no replica: no lag, nothing out of RPO (which is
// only about a replica that exists), and MetricUnprotected counts the
// seconds since the failover; a protected one sets it to 0.
func (s *ProtectState) report(ctx workflow.Context, p *plans.Plan) {
	plan := p.Metadata.Name
	m := workflow.GetMetricsHandler(ctx)
	// The primary-unreachable series of every other site of the plan is
	// 0: after the primary moved, the old one's series would otherwise
	// keep its last value (a demotion's refusals, a slow poll) for the
	// metrics' ttl.
	down := 0.0
	if s.Unreachable != "" && s.Unprotected == nil {
		down = 1
	}
	for _, site := range p.Sites {
		v := 0.0
		if site.Name == s.Primary {
			v = down
		}
		m.WithTags(map[string]string{"plan": plan, "site": site.Name}).Gauge(MetricPrimaryUnreachable).Update(v)
	}
	if !s.SignatureEnds.IsZero() {
		m.WithTags(map[string]string{"plan": plan}).Gauge(MetricSignatureEnds).Update(max(s.SignatureEnds.Sub(workflow.Now(ctx)), 0).Seconds())
	}
	if u := s.Unprotected; u != nil {
		// No replica, no lag: NaN drops each group's lag series (the
		// worker's /metrics forgets a gauge set to NaN), which would
		// otherwise show the last lag before the failover for the
		// metrics' ttl.
		for _, g := range groupNames(p) {
			m.WithTags(map[string]string{"plan": plan, "group": g}).Gauge(MetricReplicationLag).Update(math.NaN())
		}
		m.WithTags(map[string]string{"plan": plan}).Gauge(MetricOutOfRPO).Update(0)
		m.WithTags(map[string]string{"plan": plan}).Gauge(MetricUnprotected).Update(max(workflow.Now(ctx).Sub(u.Since), 0).Seconds())
		return
	}
	// One series per plan, as drover_out_of_rpo: the 0 of a reprotected
	// plan replaces its count at once (a series of its own would stay
	// on /metrics, and the alert firing, for the metrics' ttl).
	m.WithTags(map[string]string{"plan": plan}).Gauge(MetricUnprotected).Update(0)
	// Sorted keys: the metrics are set in one order on every replay.
	//workflowcheck:ignore
	for _, g := range slices.Sorted(maps.Keys(s.Groups)) {
		m.WithTags(map[string]string{"plan": plan, "group": g}).Gauge(MetricReplicationLag).Update(s.Groups[g].Lag.Seconds())
	}
	out := 0.0
	if s.OutOfRPO {
		out = 1
	}
	m.WithTags(map[string]string{"plan": plan}).Gauge(MetricOutOfRPO).Update(out)
}

func groupNames(p *plans.Plan) []string {
	names := make([]string, 0, len(p.VolumeGroups))
	for _, g := range p.VolumeGroups {
		names = append(names, g.Name)
	}
	sort.Strings(names)
	return names
}

// pollClients refreshes the clients each site's storage reports, which a
// failover fences when the plan lists no CIDRs. The site a failover lost
// is not asked: it is fenced, and its clients were recorded before.
func pollClients(ctx workflow.Context, p *plans.Plan, s *ProtectState) {
	for _, site := range p.Sites {
		if s.Unprotected != nil && site.Name == s.Unprotected.Lost {
			continue
		}
		pollSiteClients(ctx, p, s, site.Name)
	}
}

// pollSiteClients refreshes the clients site's storage reports; a site
// that does not answer keeps its last answer.
func pollSiteClients(ctx workflow.Context, p *plans.Plan, s *ProtectState, site string) {
	e, err := activities.EndpointFor(p, site, activities.RPCGetFenceClients)
	if err != nil {
		return
	}
	o := activities.CallOptions(p, site, activities.RPCGetFenceClients)
	o.ScheduleToCloseTimeout = o.StartToCloseTimeout
	got, err := rpcCall[activities.FenceClients](ctx, o, st.GetFenceClients, activities.FenceListInput{Endpoint: e})
	if err != nil || ctx.Err() != nil {
		return // keep the last answer: a lost site does not answer
	}
	var cidrs []string
	for _, c := range got.Clients {
		cidrs = append(cidrs, c.CIDRs...)
	}
	sort.Strings(cidrs)
	s.Clients[site] = cidrs
}

// clientsBesideVersion marks a protection that asks each site for its
// clients beside the replication polls, not in their round: a site that
// hangs (a partitioned standby) held the round open, and the round's
// watch then took the primary, which had answered, for unreachable.
const clientsBesideVersion = "clients-beside-polls"

// clientPolls asks each site the plan still has for its clients, each on
// its own, without waiting: a site whose last ask has not ended yet is
// not asked again (busy), so a site that hangs holds one call at a time
// and nothing else.
func clientPolls(ctx workflow.Context, p *plans.Plan, s *ProtectState, busy map[string]bool) {
	for _, site := range p.Sites {
		name := site.Name
		if busy[name] || (s.Unprotected != nil && name == s.Unprotected.Lost) {
			continue
		}
		busy[name] = true
		workflow.Go(ctx, func(ctx workflow.Context) {
			pollSiteClients(ctx, p, s, name)
			busy[name] = false
		})
	}
}
