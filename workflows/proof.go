package workflows

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/internal/names"
	"go.temporal.io/sdk/workflow"
)

// A plan's record takes a change only with the proof that a worker of
// Drover's made it: an HMAC-SHA256, by the worker's record key, of the
// plan's name, the time the worker sealed the change and the change
// itself. The worker seals a change in an activity (SealRecordChange, or
// SendRecordChange as it sends), and the record checks the seal in a
// local activity (CheckRecordProof) on a worker: the key is in no
// workflow's input, result or history, only the seals are. A seal is good
// for proofWindow after it was made, and once: the record keeps the seals
// it took within that window and refuses one it has seen, so that a seal
// read from a history cannot be sent again. The record refuses anything
// else (a change without a seal, with a seal of another key or another
// plan, an old or a repeated one) and keeps the refusal for the operator
// (PlanRecord.Refused, drctl status).
//
// Protection takes a retarget (a move to another primary, or to
// unprotected after a failover) only with a seal of the same kind:
// whoever sends one (protectFrom, the record's tellProtection) has the
// worker seal it first (SealRetarget), for the plan and as a retarget,
// so that a record change's seal is no retarget's and the other way
// round; Protect checks it with CheckRecordProof, keeps the seals it
// took within proofWindow across its runs, and keeps what it refused in
// its state (ProtectState.Refused, drctl status).
//
// Every workflow worker of a namespace must hold the same key
// (worker --record-key FILE); a worker without one makes a key of its
// own at start, good for as long as it runs and for it alone.

// proofWindow is how long a seal is good: the time a change may take from
// the worker that sealed it to the record (a retried signal, a record
// whose worker was away), and the clocks' difference between workers.
const proofWindow = 10 * time.Minute

// ErrRecordRefused is the error type of a change, a start or a plan
// version the record refused.
const ErrRecordRefused = "RecordRefused"

// Proof is a worker's seal of a change for a plan's record.
type Proof struct {
	Sent time.Time `json:"sent"`
	MAC  []byte    `json:"mac"`
}

// processKey is the record key of a worker given none: made at start,
// known to this process only.
var processKey = func() []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic(err)
	}
	return k
}()

// ReadRecordKey reads a worker's record key: a file of at least 32
// bytes (e.g. head -c 32 /dev/urandom | base64), the same on every
// workflow worker, readable only by the worker's user.
func ReadRecordKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("record key: %w", err)
	}
	k := []byte(strings.TrimSpace(string(b)))
	if len(k) < 32 {
		return nil, fmt.Errorf("record key %s: %d bytes, want at least 32 (head -c 32 /dev/urandom | base64 > %s)", path, len(k), path)
	}
	return k, nil
}

// key is the sender's record key: its own, or the process's.
func (s *RecordSender) key() []byte {
	if s != nil && len(s.Key) > 0 {
		return s.Key
	}
	return processKey
}

// canonical is the JSON a seal covers: the change as the record decodes
// it (a round trip through JSON), without its own proof.
func canonical(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// mac is the seal of what for plan, sent at sent.
func mac(key []byte, kind, plan string, sent time.Time, what any) ([]byte, error) {
	b, err := canonical(what)
	if err != nil {
		return nil, err
	}
	h := hmac.New(sha256.New, key)
	fmt.Fprintf(h, "drover record %s v1\nplan %s\nsent %s\n", kind, plan, sent.UTC().Format(time.RFC3339Nano))
	h.Write(b)
	return h.Sum(nil), nil
}

// proof is the worker's seal of v (without its own proof) for plan, as
// a kind of message made at now.
func (s *RecordSender) proof(kind, plan string, now time.Time, v any) (*Proof, error) {
	sent := now.UTC()
	m, err := mac(s.key(), kind, plan, sent, v)
	if err != nil {
		return nil, err
	}
	return &Proof{Sent: sent, MAC: m}, nil
}

// SealAt seals a change for plan's record as made at now (for tests, and
// the activities below, which seal with the time they run).
func (s *RecordSender) SealAt(plan string, c RecordChange, now time.Time) (RecordChange, error) {
	c.Proof = nil
	p, err := s.proof("change", plan, now, c)
	c.Proof = p
	return c, err
}

// SealRecordChange is the activity that seals a change the workflow
// sends itself (note).
func (s *RecordSender) SealRecordChange(_ context.Context, in RecordSend) (RecordChange, error) {
	return s.SealAt(in.Plan, in.Change, time.Now())
}

// SealRetargetAt seals a retarget for plan's protection as made at now.
func (s *RecordSender) SealRetargetAt(plan string, rt Retarget, now time.Time) (Retarget, error) {
	rt.Proof = nil
	p, err := s.proof("retarget", plan, now, rt)
	rt.Proof = p
	return rt, err
}

// RetargetSend is a retarget for a plan's protection, to be sealed.
type RetargetSend struct {
	Plan     string   `json:"plan"`
	Retarget Retarget `json:"retarget"`
}

// SealRetarget is the activity that seals a retarget a workflow sends
// to the plan's protection.
func (s *RecordSender) SealRetarget(_ context.Context, in RetargetSend) (Retarget, error) {
	return s.SealRetargetAt(in.Plan, in.Retarget, time.Now())
}

// SealHoldAt seals a hold (or release) of a point in time for plan's
// protection as made at now: the hold of an action (ActionHolder), which
// protection takes only sealed.
func (s *RecordSender) SealHoldAt(plan string, h PointHold, now time.Time) (PointHold, error) {
	h.Proof = nil
	p, err := s.proof("point hold", plan, now, h)
	h.Proof = p
	return h, err
}

// RecordProofCheck is a change or a plan version the record checks, or a
// retarget, a point's hold or a pause of the points protection checks.
type RecordProofCheck struct {
	Plan     string        `json:"plan"`
	Change   *RecordChange `json:"change,omitempty"`
	Version  *PlanVersion  `json:"version,omitempty"`
	Retarget *Retarget     `json:"retarget,omitempty"`
	Hold     *PointHold    `json:"hold,omitempty"`
	Pause    *PointsPause  `json:"pause,omitempty"`
}

// CheckRecordProof is the record's check of a seal, a local activity: nil
// when the worker's key made it, else a non-retryable ErrRecordRefused.
func (s *RecordSender) CheckRecordProof(_ context.Context, in RecordProofCheck) error {
	var p *Proof
	var kind string
	var what any
	switch {
	case in.Change != nil:
		c := *in.Change
		p, c.Proof = c.Proof, nil
		kind, what = "change", c
	case in.Version != nil:
		v := *in.Version
		p, v.Proof = v.Proof, nil
		kind, what = "plan version", v
	case in.Retarget != nil:
		rt := *in.Retarget
		p, rt.Proof = rt.Proof, nil
		kind, what = "retarget", rt
	case in.Hold != nil:
		h := *in.Hold
		p, h.Proof = h.Proof, nil
		kind, what = "point hold", h
	case in.Pause != nil:
		pp := *in.Pause
		p, pp.Proof = pp.Proof, nil
		kind, what = "points pause", pp
	}
	if p == nil || len(p.MAC) == 0 {
		return temporal.NewNonRetryableApplicationError("it carries no worker's seal", ErrRecordRefused, nil)
	}
	want, err := mac(s.key(), kind, in.Plan, p.Sent, what)
	if err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrRecordRefused, nil)
	}
	if !hmac.Equal(want, p.MAC) {
		return temporal.NewNonRetryableApplicationError("its seal is not one of this worker's record key (forged, changed, or for another plan)", ErrRecordRefused, nil)
	}
	return nil
}

// checkProofOptions bound the record's check of a seal: it needs only the
// key, so one short attempt, and a second in case a worker is lost.
var checkProofOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 5 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 2, NonRetryableErrorTypes: []string{ErrRecordRefused}},
}

// sealOptions bound a workflow's seal of its change.
var sealOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 5 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumAttempts: 3},
}

// seal has the worker seal a change the workflow sends to plan's record.
func seal(ctx workflow.Context, plan string, c RecordChange) (RecordChange, error) {
	var rs *RecordSender
	var out RecordChange
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, sealOptions), rs.SealRecordChange, RecordSend{Plan: plan, Change: c}).Get(ctx, &out)
	if err != nil {
		return c, fmt.Errorf("seal the change for the record of plan %q: %w", plan, err)
	}
	return out, nil
}

// sealRetarget has the worker seal a retarget the workflow sends to
// plan's protection.
func sealRetarget(ctx workflow.Context, plan string, rt Retarget) (Retarget, error) {
	var rs *RecordSender
	var out Retarget
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, sealOptions), rs.SealRetarget, RetargetSend{Plan: plan, Retarget: rt}).Get(ctx, &out)
	if err != nil {
		return rt, fmt.Errorf("seal the retarget for the protection of plan %q: %w", plan, err)
	}
	return out, nil
}

// RefusedEntry is something the record refused: a change, a start or a
// plan version, with why and from which run, as far as the worker knows:
// the workflow id a worker sealed, else UnknownSender (a change without
// a valid seal names whatever its sender wrote, which proves nothing,
// and Temporal tells a workflow nothing of who sent a signal or update).
type RefusedEntry struct {
	What   string    `json:"what"`
	Reason string    `json:"reason"`
	From   string    `json:"from,omitempty"`
	At     time.Time `json:"at"`
}

// UnknownSender is the From of a refusal of something no worker sealed.
const UnknownSender = "unknown"

// refusedKept is how many refusals the record keeps (the latest).
const refusedKept = 20

// refuse keeps a refusal in the record.
func (r *PlanRecord) refuse(e RefusedEntry) {
	r.Refused, r.RefusedCount = keepRefused(r.Refused, r.RefusedCount, e)
}

// keepRefused adds a refusal to the latest ones kept, and to the count.
func keepRefused(kept []RefusedEntry, count int, e RefusedEntry) ([]RefusedEntry, int) {
	kept = append(kept, e)
	if len(kept) > refusedKept {
		kept = kept[len(kept)-refusedKept:]
	}
	return kept, count + 1
}

// seenSeal is a seal the record took, kept for proofWindow.
type seenSeal struct {
	MAC  string    `json:"mac"`
	Sent time.Time `json:"sent"`
}

// proofs is the record's check of the seals it is sent.
type proofs struct {
	plan string
	seen []seenSeal
}

// check tells whether p, the seal of a change or version for the plan,
// is one the record may take now: made by the worker's key (the local
// activity), fresh, and not seen before.
func (ps *proofs) check(ctx workflow.Context, in RecordProofCheck, p *Proof) error {
	if p == nil {
		return errors.New("it carries no worker's seal")
	}
	now := workflow.Now(ctx)
	if d := now.Sub(p.Sent); d > proofWindow || d < -proofWindow {
		return fmt.Errorf("its seal was made at %s, more than %v from now (%s): an old seal sent again", p.Sent.UTC().Format(time.RFC3339), proofWindow, now.UTC().Format(time.RFC3339))
	}
	m := hex.EncodeToString(p.MAC)
	for _, s := range ps.seen {
		if s.MAC == m {
			return errors.New("its seal was taken before: a seal sent again")
		}
	}
	keep := ps.seen[:0]
	for _, s := range ps.seen {
		if now.Sub(s.Sent) <= proofWindow {
			keep = append(keep, s)
		}
	}
	// Taken from here on: a copy of the seal that comes while this one
	// is checked (two updates at once) finds it; given back if refused.
	ps.seen = append(keep, seenSeal{MAC: m, Sent: p.Sent})
	var rs *RecordSender
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, checkProofOptions), rs.CheckRecordProof, in).Get(ctx, nil)
	if err != nil {
		ps.seen = slices.DeleteFunc(ps.seen, func(s seenSeal) bool { return s.MAC == m })
		var ae *temporal.ApplicationError
		if errors.As(err, &ae) {
			return errors.New(ae.Message())
		}
		return err
	}
	return nil
}

// sealing tells whether the running workflow seals its record's changes
// and presents its plan version: always for the pinned workflows, which
// carry no patches (a build runs its own runs to their end); for Protect
// and the record, which auto-upgrade to a new build mid-run, from the
// patch proofVersion on.
func sealing(ctx workflow.Context) bool {
	switch workflow.GetInfo(ctx).WorkflowType.Name {
	case names.Protect, names.PlanRecorder:
		return workflow.GetVersion(ctx, proofVersion, workflow.DefaultVersion, 1) >= 1
	}
	return true
}

// retargetProofVersion is the change that brought sealed retargets: the
// record seals the retarget it sends protection, and protection takes
// only sealed ones, from the first retarget a run of theirs handles on a
// build with it (a run that had taken seals of changes under
// proofVersion before has no local activity for a retarget in its
// history, so the seal of retargets needs a patch of its own).
const retargetProofVersion = "retarget-proof"

// sealsRetargets tells whether the running workflow seals the retargets
// it sends (the record) or takes only sealed ones (Protect): always for
// the pinned workflows (Reprotect, Failback), from the patch
// retargetProofVersion on for the auto-upgrading ones. Called where the
// first retarget is handled, so a run from before the patch follows it
// from then on.
func sealsRetargets(ctx workflow.Context) bool {
	switch workflow.GetInfo(ctx).WorkflowType.Name {
	case names.Protect, names.PlanRecorder:
		return workflow.GetVersion(ctx, retargetProofVersion, workflow.DefaultVersion, 1) >= 1
	}
	return true
}
