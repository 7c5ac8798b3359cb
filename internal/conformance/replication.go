package conformance

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/csiaddons/replication"
)

// Spec sections of the replication checks.
const (
	specRepl          = "csi-addons-replication.txt: "
	specEnable        = specRepl + "EnableVolumeReplication"
	specEnableErrors  = specRepl + "EnableVolumeReplication error table"
	specDisable       = specRepl + "DisableVolumeReplication; wire-notes.md: NOT_FOUND means nothing is left to disable"
	specPromote       = specRepl + "PromoteVolume"
	specPromoteErrors = specRepl + "PromoteVolume error table: Volume is not replicated, 9 FAILED_PRECONDITION"
	specDemote        = specRepl + "DemoteVolume"
	specResync        = specRepl + "ResyncVolume; wire-notes.md: ready=false until ready (or, while it answers ready=false, the primary reports a sync newer than the resync)"
	specResyncErrors  = specRepl + "ResyncVolume error table: image is not demoted, 9 FAILED_PRECONDITION"
	specInfo          = specRepl + "GetVolumeReplicationInfo (last_sync_time REQUIRED; NOT_FOUND: details not available at the moment)"
	specInfoErrors    = specRepl + "GetVolumeReplicationInfo error table: image is not promoted, 9 FAILED_PRECONDITION"
	specInfoTime      = specRepl + "GetVolumeReplicationInfo (last_sync_time REQUIRED: the time of a sync that happened, so not in the future nor before replication was enabled)"
	specUnknown       = specRepl + " error table of %s: Volume does not exist, 5 NOT_FOUND"
	specSyncHonest    = specRepl + "GetVolumeReplicationInfo (last_sync_time: the time of the last completed sync, so it stays while no sync can complete, and advances as syncs complete)"
	specUnreachable   = specRepl + "PromoteVolume error table: volume cannot be promoted without force option, 9 FAILED_PRECONDITION; wire-notes.md: without force when the peer cannot be demoted first"
	specDiverged      = specRepl + "ResyncVolume force; design invariant 11: a split-brain resync needs force, and only force discards the copy's own writes"
	specIdempotent    = specRepl + "service Controller: all the methods it exposes should be idempotent"
	specSplitPromote  = specRepl + "PromoteVolume error table: volume cannot be promoted without force option, 9 FAILED_PRECONDITION; design invariant 11: a copy that diverged (split-brain) is promoted only with force"
	specFinalSync     = specRepl + "PromoteVolume error table: volume cannot be promoted without force option, 9 FAILED_PRECONDITION; wire-notes.md: a planned promotion waits for the demoted peer's final sync"
	specReadyAfter    = specRepl + "ResyncVolume: ready is true once the copy follows its primary; a forced resync discards the copy, so it is not ready before a sync has landed"
	specDestination   = "csi-addons/spec replication: GetReplicationDestinationInfo (a group's volume_ids maps every volume of the group; the scratch group holds two or more)"
	specSource        = specRepl + "ReplicationSource; wire-notes.md: volume_id only beside a volume source"
)

func volumeSource(id string) *replication.ReplicationSource {
	return &replication.ReplicationSource{Type: &replication.ReplicationSource_Volume{Volume: &replication.ReplicationSource_VolumeSource{VolumeId: id}}}
}

func groupSource(id string) *replication.ReplicationSource {
	return &replication.ReplicationSource{Type: &replication.ReplicationSource_Volumegroup{Volumegroup: &replication.ReplicationSource_VolumeGroupSource{VolumeGroupId: id}}}
}

// repl makes the replication calls for one source; volumeID is sent beside
// a volume source only, so both generations of drivers understand it.
type repl struct {
	r        *runner
	src      *replication.ReplicationSource
	volumeID string
}

func (p repl) call(ctx context.Context, s *Site, rpc string, req, resp proto.Message) error {
	return p.r.invoke(ctx, s.Replication, s.Name, "/replication.Controller/"+rpc, req, resp)
}

func (p repl) enable(ctx context.Context, s *Site) error {
	return p.call(ctx, s, "EnableVolumeReplication", &replication.EnableVolumeReplicationRequest{
		VolumeId: p.volumeID, ReplicationSource: p.src, Parameters: s.Replication.Parameters, Secrets: s.Secrets,
	}, &replication.EnableVolumeReplicationResponse{})
}

func (p repl) disable(ctx context.Context, s *Site) error {
	err := p.call(ctx, s, "DisableVolumeReplication", &replication.DisableVolumeReplicationRequest{
		VolumeId: p.volumeID, ReplicationSource: p.src, Parameters: s.Replication.Parameters, Secrets: s.Secrets,
	}, &replication.DisableVolumeReplicationResponse{})
	if p.r.means(activities.RPCDisableVolumeReplication, err) == codes.NotFound {
		return nil
	}
	return err
}

func (p repl) promote(ctx context.Context, s *Site, force bool) error {
	return p.call(ctx, s, "PromoteVolume", &replication.PromoteVolumeRequest{
		VolumeId: p.volumeID, ReplicationSource: p.src, Force: force, Parameters: s.Replication.Parameters, Secrets: s.Secrets,
	}, &replication.PromoteVolumeResponse{})
}

func (p repl) demote(ctx context.Context, s *Site, force bool) error {
	return p.call(ctx, s, "DemoteVolume", &replication.DemoteVolumeRequest{
		VolumeId: p.volumeID, ReplicationSource: p.src, Force: force, Parameters: s.Replication.Parameters, Secrets: s.Secrets,
	}, &replication.DemoteVolumeResponse{})
}

func (p repl) resync(ctx context.Context, s *Site, force bool) (bool, error) {
	resp := &replication.ResyncVolumeResponse{}
	err := p.call(ctx, s, "ResyncVolume", &replication.ResyncVolumeRequest{
		VolumeId: p.volumeID, ReplicationSource: p.src, Force: force, Parameters: s.Replication.Parameters, Secrets: s.Secrets,
	}, resp)
	return resp.GetReady(), err
}

// holds reads the role of s's copy back after call answered OK: a copy
// promoted must answer replication info (or NOT_FOUND: no sync since), a
// copy demoted must refuse it as a secondary (FAILED_PRECONDITION, or a
// recorded deviation meaning it). A driver that answers OK and leaves
// the role as it was fails the check that made the call, with the
// storage's own answer.
func (p repl) holds(ctx context.Context, s *Site, primary bool, call string) error {
	if p.r.cfg.DryRun {
		return nil
	}
	_, err := p.info(ctx, s)
	code := p.r.means(activities.RPCGetVolumeReplicationInfo, err)
	answer := "OK"
	if err != nil {
		st := status.Convert(err)
		answer = fmt.Sprintf("%s %q", st.Code(), st.Message())
	}
	switch {
	case primary && (code == codes.OK || code == codes.NotFound):
		return nil
	case !primary && code == codes.FailedPrecondition:
		return nil
	case primary && code == codes.FailedPrecondition:
		return fmt.Errorf("%s answered OK, but %s's copy still refuses replication info as a secondary's (GetVolumeReplicationInfo: %s)", call, s.Name, answer)
	case !primary && (code == codes.OK || code == codes.NotFound):
		return fmt.Errorf("%s answered OK, but %s's copy still answers replication info as a primary's (GetVolumeReplicationInfo: %s)", call, s.Name, answer)
	}
	return fmt.Errorf("%s answered OK, and %s's copy could not be read back: GetVolumeReplicationInfo: %s", call, s.Name, answer)
}

// offHolds reads a disable of s's copy back: a primary's copy still
// replicated answers replication info (OK), a secondary's still replicated
// takes a resync without force (OK; it discards nothing). Any refusal is
// a copy no longer replicated (or gone, as RBD mirroring removes the
// secondary's image).
func (p repl) offHolds(ctx context.Context, s *Site, primary bool, call string) error {
	if p.r.cfg.DryRun {
		return nil
	}
	if primary {
		if _, err := p.info(ctx, s); err == nil {
			return fmt.Errorf("%s answered OK, but %s's copy still answers replication info (OK): its replication is still on", call, s.Name)
		}
		return nil
	}
	if _, err := p.resync(ctx, s, false); err == nil {
		return fmt.Errorf("%s answered OK, but %s's copy still takes ResyncVolume without force (OK): its replication is still on", call, s.Name)
	}
	return nil
}

// roles reads back the roles of both copies, for the clean-up's report:
// what the storage says, whatever the calls answered.
func (p repl) roles(ctx context.Context) string {
	var parts []string
	for _, s := range []*Site{&p.r.cfg.A, p.r.cfg.B} {
		_, err := p.info(ctx, s)
		code := p.r.means(activities.RPCGetVolumeReplicationInfo, err)
		switch {
		case code == codes.OK || code == codes.NotFound:
			parts = append(parts, s.Name+"'s copy answers replication info as a primary's")
		case code == codes.FailedPrecondition:
			parts = append(parts, s.Name+"'s copy refuses replication info (a secondary, or not replicated)")
		default:
			parts = append(parts, fmt.Sprintf("%s's copy could not be read (%s)", s.Name, ok("GetVolumeReplicationInfo", err)))
		}
	}
	return strings.Join(parts, "; ")
}

func (p repl) info(ctx context.Context, s *Site) (*replication.GetVolumeReplicationInfoResponse, error) {
	resp := &replication.GetVolumeReplicationInfoResponse{}
	err := p.call(ctx, s, "GetVolumeReplicationInfo", &replication.GetVolumeReplicationInfoRequest{
		VolumeId: p.volumeID, ReplicationSource: p.src, Secrets: s.Secrets,
	}, resp)
	return resp, err
}

// raw makes rpc's call for the source on s, unforced; Disable's NOT_FOUND
// is kept.
func (p repl) raw(ctx context.Context, s *Site, rpc string) error {
	var err error
	switch rpc {
	case activities.RPCEnableVolumeReplication:
		err = p.enable(ctx, s)
	case activities.RPCDisableVolumeReplication:
		err = p.call(ctx, s, rpc, &replication.DisableVolumeReplicationRequest{
			VolumeId: p.volumeID, ReplicationSource: p.src, Parameters: s.Replication.Parameters, Secrets: s.Secrets,
		}, &replication.DisableVolumeReplicationResponse{})
	case activities.RPCPromoteVolume:
		err = p.promote(ctx, s, false)
	case activities.RPCDemoteVolume:
		err = p.demote(ctx, s, false)
	case activities.RPCResyncVolume:
		_, err = p.resync(ctx, s, false)
	case activities.RPCGetVolumeReplicationInfo:
		_, err = p.info(ctx, s)
	default:
		err = fmt.Errorf("no call for %s", rpc)
	}
	return err
}

// lastSync is the last sync time prim reports, zero when it reports none.
func (r *runner) lastSync(ctx context.Context, p repl, prim *Site) time.Time {
	resp, err := p.info(ctx, prim)
	if err != nil || resp.GetLastSyncTime() == nil {
		return time.Time{}
	}
	return resp.GetLastSyncTime().AsTime()
}

// syncProblem says what is wrong with an answer of GetVolumeReplicationInfo
// that arrived at answered: "" when nothing is. notBefore, when set, is when
// replication was enabled: no sync of it can be older.
func (r *runner) syncProblem(resp *replication.GetVolumeReplicationInfoResponse, notBefore, answered time.Time) string {
	if r.cfg.DryRun {
		return ""
	}
	ts := resp.GetLastSyncTime()
	if ts == nil {
		return "answered OK without last_sync_time (REQUIRED); before the first sync the answer is NOT_FOUND"
	}
	if err := ts.CheckValid(); err != nil {
		return fmt.Sprintf("last_sync_time is not a valid time: %v", err)
	}
	t := ts.AsTime()
	if t.After(answered.Add(r.cfg.ClockSkew)) {
		return fmt.Sprintf("last_sync_time %s is %s in the future of the answer (%s; clock skew allowed %s): no sync has happened then",
			t.Format(time.RFC3339Nano), t.Sub(answered).Round(time.Millisecond), answered.Format(time.RFC3339Nano), r.cfg.ClockSkew)
	}
	if !notBefore.IsZero() && t.Before(notBefore.Add(-r.cfg.ClockSkew)) {
		return fmt.Sprintf("last_sync_time %s is before replication was enabled (%s; clock skew allowed %s)",
			t.Format(time.RFC3339Nano), notBefore.Format(time.RFC3339Nano), r.cfg.ClockSkew)
	}
	if d := resp.GetLastSyncDuration(); d != nil && d.AsDuration() < 0 {
		return fmt.Sprintf("last_sync_duration %s is negative", d.AsDuration())
	}
	if resp.GetLastSyncBytes() < 0 {
		return fmt.Sprintf("last_sync_bytes %d is negative (MUST NOT be)", resp.GetLastSyncBytes())
	}
	return ""
}

// info asks prim for its replication info and checks the answer.
func (r *runner) checkedInfo(ctx context.Context, p repl, prim *Site, notBefore time.Time) (*replication.GetVolumeReplicationInfoResponse, error) {
	resp, err := p.info(ctx, prim)
	if err != nil {
		return resp, err
	}
	if prob := r.syncProblem(resp, notBefore, time.Now()); prob != "" {
		return resp, badInfo{fmt.Errorf("GetVolumeReplicationInfo on %s: %s", prim.Name, prob)}
	}
	return resp, nil
}

// badInfo is an info answer that fails the check reading it.
type badInfo struct{ error }

func (b badInfo) Unwrap() error { return b.error }

// follow calls ResyncVolume on sec (with force as given) until sec
// follows prim again: ready=true, or an OK answer while prim reports a
// sync newer than the one it reported before the resync (a real driver
// may answer ready=false for as long as its copy replays a live primary).
// A check fails on an info answer that breaks its rules (badInfo); the
// clean-up (lenient) still compares its sync times with the one before,
// since its task is to put the pair back, and the checks have already
// reported the bad answers.
func (r *runner) follow(ctx context.Context, p repl, sec, prim *Site, force, lenient bool) (string, error) {
	base := r.lastSync(ctx, p, prim)
	start := time.Now()
	var last error
	for calls := 1; ; calls++ {
		ready, err := p.resync(ctx, sec, force)
		switch {
		case r.cfg.DryRun:
			return "", nil
		case err == nil && ready:
			return fmt.Sprintf("ready after %d call(s), %s", calls, time.Since(start).Round(time.Millisecond)), nil
		case err != nil && !r.retryable(activities.RPCResyncVolume, err):
			return "", ok("ResyncVolume on "+sec.Name, err)
		case err == nil:
			resp, ierr := r.checkedInfo(ctx, p, prim, time.Time{})
			var bad badInfo
			if errors.As(ierr, &bad) {
				if !lenient || resp.GetLastSyncTime() == nil {
					return "", ierr
				}
				ierr = nil
			}
			if ierr == nil && resp.GetLastSyncTime().AsTime().After(base) {
				return fmt.Sprintf("ready=false after %d call(s), %s, and %s reports a sync newer than before the resync (%s): the copy follows it",
					calls, time.Since(start).Round(time.Millisecond), prim.Name, resp.GetLastSyncTime().AsTime().Format(time.RFC3339)), nil
			}
		}
		last = err
		if werr := r.pause(ctx); werr != nil {
			if last != nil {
				return "", fmt.Errorf("%w (still so at the deadline)", ok("ResyncVolume on "+sec.Name, last))
			}
			return "", fmt.Errorf("ResyncVolume on %s answered ready=false for %s and %s reported no newer sync", sec.Name, time.Since(start).Round(time.Second), prim.Name)
		}
	}
}

// replicationErrors: refusals that need no scratch source, and every
// replication RPC's answer for a source that does not exist.
func (r *runner) replicationErrors(ctx context.Context) {
	f := r.flow(ctx, "replication/", "")
	a := &r.cfg.A
	switch {
	case r.cfg.B == nil:
		f.block("no peer endpoint (--peer or --peer-endpoint): replication checks skipped")
	case !r.caps[a.Name][activities.CapVolumeReplication]:
		f.block(a.Name + " does not advertise VOLUME_REPLICATION")
	}
	f.step("empty-source-refused", specEnableErrors+": Missing required field, 3 INVALID_ARGUMENT", r.cfg.CallTimeout, func(ctx context.Context) (string, error) {
		err := repl{r: r, src: &replication.ReplicationSource{}}.enable(ctx, a)
		return r.want(activities.RPCEnableVolumeReplication, err, codes.InvalidArgument)
	})
	for _, kind := range []string{"volume", "group"} {
		scratch := r.cfg.Volume
		if kind == "group" {
			scratch = r.cfg.Group
		}
		other := r.cfg.Group
		if kind == "group" {
			other = r.cfg.Volume
		}
		id, how := unknownID(kind, scratch, other)
		p := repl{r: r, src: volumeSource(id), volumeID: id}
		if kind == "group" {
			p = repl{r: r, src: groupSource(id)}
		}
		for _, rpc := range activities.ReplicationRPCs {
			spec := fmt.Sprintf(specUnknown, rpc)
			if rpc == activities.RPCDisableVolumeReplication {
				spec += "; " + specDisable
			}
			f.step(kind+"/unknown-id/"+rpc, spec, r.cfg.CallTimeout, func(ctx context.Context) (string, error) {
				err := p.raw(ctx, a, rpc)
				if rpc == activities.RPCDisableVolumeReplication && err == nil {
					return how + ": OK, nothing to disable", nil
				}
				d, err := r.want(rpc, err, codes.NotFound)
				if err != nil {
					return "", fmt.Errorf("%s: %w", how, err)
				}
				if d == "" {
					return how + ": NOT_FOUND", nil
				}
				return how + ": " + d, nil
			})
		}
	}
}

// unknownID is an ID of kind that names nothing on the driver: in ceph-csi's
// format when the scratch source's own ID is in it
// (0001-<len hex4>-<clusterID>-<poolID hex16>-<uuid>; ceph-csi answers an
// ID outside its format INTERNAL, a well-formed unknown one NOT_FOUND), with
// its clusterID and pool ID and a fresh UUID; a plain name otherwise (other
// is the scratch source of the other kind). how says which, for the table.
func unknownID(kind, scratch, other string) (id, how string) {
	// ceph-csi composes volume group IDs as it does volume IDs: without a
	// scratch source of this kind, the other kind's ID gives the format.
	from := kind
	cluster, pool, ok := decodeCephCSIID(scratch)
	if !ok && scratch == "" {
		cluster, pool, ok = decodeCephCSIID(other)
		from = map[string]string{"volume": "group", "group": "volume"}[kind]
	}
	if ok {
		id = fmt.Sprintf("0001-%04x-%s-%s-%s", len(cluster), cluster, pool, newUUID())
		return id, fmt.Sprintf("well-formed unknown ceph-csi ID %s (the scratch %s's clusterID and pool)", id, from)
	}
	id = "drover-conformance-no-such-" + kind
	return id, "unknown ID " + id
}

// decodeCephCSIID reads ceph-csi's volume ID format (internal/util/volid.go,
// CSIIdentifier.DecomposeCSIID): version 0001, the clusterID's length in 4
// hex digits, the clusterID, the pool ID in 16 hex digits, a 36-character
// object UUID.
func decodeCephCSIID(id string) (cluster, pool string, ok bool) {
	if len(id) < 10 || !strings.HasPrefix(id, "0001-") || id[9] != '-' {
		return "", "", false
	}
	n, err := strconv.ParseUint(id[5:9], 16, 16)
	if err != nil || n == 0 {
		return "", "", false
	}
	rest := id[10:]
	if len(rest) != int(n)+1+16+1+36 || rest[n] != '-' || rest[n+17] != '-' {
		return "", "", false
	}
	pool = rest[n+1 : n+17]
	if _, err := strconv.ParseUint(pool, 16, 64); err != nil {
		return "", "", false
	}
	return rest[:n], pool, true
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// pairState is what the replication checks did to the scratch source, for
// the clean-up.
type pairState struct {
	// enabled: replication may be on somewhere.
	enabled bool
	// disabled: the disable step turned it off on both sites.
	disabled bool
	// diverged: B's copy was primary while A's was too, and has not been
	// resynced with force since: it may hold what A never received.
	diverged bool
	// disabledA: A's replication is off (the disable step got that far):
	// only B's is left to turn off.
	disabledA bool
}

// linkDown cuts the pair's replication link with the link-down hook, for
// a check that needs what; up restores it (a failure blocks the checks
// after). Without the hooks the check is a hook skip.
func (r *runner) linkDown(ctx context.Context, f *flow, kind, id, what string) (up func(), err error) {
	h := r.cfg.Hooks
	if h.LinkDown == "" {
		return nil, hookSkip("needs " + what + ", which no CSI-Addons call can make: give --link-down-cmd and --link-up-cmd (e.g. stop and resume the mirroring daemons)")
	}
	env := r.hookEnv(kind, id)
	if err := r.hook(ctx, "link-down", h.LinkDown, env...); err != nil {
		return nil, err
	}
	return func() {
		cctx, cancel := context.WithTimeout(r.cleanupBase(), r.cfg.CallTimeout)
		defer cancel()
		if err := r.hook(cctx, "link-up", h.LinkUp, env...); err != nil {
			f.block("not run: the link-up command failed: " + err.Error())
		}
	}, nil
}

func (r *runner) hookEnv(kind, id string) []string {
	return []string{"DROVER_CONF_SITE_A=" + r.cfg.A.Name, "DROVER_CONF_SITE_B=" + r.cfg.B.Name,
		"DROVER_CONF_KIND=" + kind, "DROVER_CONF_SOURCE=" + id}
}

// replication runs the replication checks of one scratch source on the
// pair: A primary at the start and at the end, B following it. The source
// exists on A with replication disabled; B's copy may appear only once A's
// replication is on (as with RBD mirroring).
func (r *runner) replication(ctx context.Context, kind, id string) {
	a, b := &r.cfg.A, r.cfg.B
	pre := "replication/" + kind + "/"
	f := r.flow(ctx, pre, "")
	switch {
	case id == "":
		f.block(fmt.Sprintf("no scratch %s given (--%s)", kind, map[string]string{"volume": "volume", "group": "group"}[kind]))
	case b == nil:
		f.block("no peer endpoint (--peer or --peer-endpoint): replication checks skipped")
	default:
		for _, s := range []*Site{a, b} {
			if !r.caps[s.Name][activities.CapVolumeReplication] {
				f.block(s.Name + " does not advertise VOLUME_REPLICATION")
			}
		}
	}
	p := repl{r: r, src: volumeSource(id), volumeID: id}
	if kind == "group" {
		p = repl{r: r, src: groupSource(id)}
	}
	call, wait := r.cfg.CallTimeout, r.cfg.SyncTimeout
	st := &pairState{}
	defer func() {
		if st.enabled && !st.disabled {
			r.cleanupReplication(p, kind, id, st)
		}
	}()

	var enabledAt time.Time
	f.need("enable", specEnable+" (B's copy may appear only after A's enable: NOT_FOUND is retried)", wait, func(ctx context.Context) (string, error) {
		st.enabled = true
		enabledAt = time.Now()
		if err := ok("EnableVolumeReplication on "+a.Name, p.enable(ctx, a)); err != nil {
			return "", err
		}
		calls := 0
		err := r.poll(ctx, activities.RPCEnableVolumeReplication, func() (bool, error) {
			calls++
			err := p.enable(ctx, b)
			return err == nil, err
		})
		if err != nil {
			return "", ok("EnableVolumeReplication on "+b.Name, err)
		}
		return fmt.Sprintf("%s's copy enabled after %d call(s), %s", b.Name, calls, time.Since(enabledAt).Round(time.Millisecond)), nil
	})
	f.step("enable-idempotent", specIdempotent, call, func(ctx context.Context) (string, error) {
		if err := ok("second EnableVolumeReplication on "+a.Name, p.enable(ctx, a)); err != nil {
			return "", err
		}
		return "", ok("second EnableVolumeReplication on "+b.Name, p.enable(ctx, b))
	})
	f.step("info-before-sync", specInfo, call, func(ctx context.Context) (string, error) {
		resp, err := p.info(ctx, a)
		switch {
		case codeOf(err) == codes.NotFound:
			return "NOT_FOUND: no sync yet", nil
		case err != nil:
			return "", ok("GetVolumeReplicationInfo", err)
		}
		if prob := r.syncProblem(resp, enabledAt, time.Now()); prob != "" {
			return "", errors.New(prob)
		}
		return "already synced once", nil
	})
	f.step("info-after-sync", specInfoTime, wait, func(ctx context.Context) (string, error) {
		var resp *replication.GetVolumeReplicationInfoResponse
		err := r.poll(ctx, activities.RPCGetVolumeReplicationInfo, func() (bool, error) {
			var err error
			resp, err = r.checkedInfo(ctx, p, a, enabledAt)
			return err == nil, err
		})
		if err != nil {
			var bad badInfo
			if errors.As(err, &bad) {
				return "", err
			}
			return "", ok("GetVolumeReplicationInfo until the first sync", err)
		}
		return fmt.Sprintf("last sync %s, %d bytes, status %s", resp.GetLastSyncTime().AsTime().Format(time.RFC3339), resp.GetLastSyncBytes(), resp.GetStatus()), nil
	})
	// The sync time is the last completed sync's: it stays while the
	// link is down (not the time of the question), and advances as syncs
	// complete (info-advances, below: not frozen at the first).
	f.step("info-link-down", specSyncHonest+" (the link down)", call+r.cfg.Observe, func(ctx context.Context) (string, error) {
		up, err := r.linkDown(ctx, f, kind, id, "the replication link cut")
		if err != nil {
			return "", err
		}
		defer up()
		first, err := r.checkedInfo(ctx, p, a, enabledAt)
		if err != nil {
			return "", ok("GetVolumeReplicationInfo on "+a.Name+" with the link down", err)
		}
		t1 := first.GetLastSyncTime().AsTime()
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(r.cfg.Observe):
		}
		again, err := r.checkedInfo(ctx, p, a, enabledAt)
		if err != nil {
			return "", ok("GetVolumeReplicationInfo on "+a.Name+" with the link down, "+r.cfg.Observe.String()+" on", err)
		}
		t2 := again.GetLastSyncTime().AsTime()
		if t2.After(t1) {
			return "", fmt.Errorf("last_sync_time advanced from %s to %s while the link was down, when no sync could complete: it is not the time of a completed sync",
				t1.Format(time.RFC3339Nano), t2.Format(time.RFC3339Nano))
		}
		return fmt.Sprintf("last_sync_time stayed at %s for %s with the link down", t2.Format(time.RFC3339), r.cfg.Observe), nil
	})
	f.step("info-secondary-refused", specInfoErrors, call, func(ctx context.Context) (string, error) {
		_, err := p.info(ctx, b)
		return r.want(activities.RPCGetVolumeReplicationInfo, err, codes.FailedPrecondition)
	})
	// primaryRefusal is how the driver refuses a primary's resync: the
	// refusal that keeps a diverged copy must be another.
	var primaryRefusal string
	f.step("resync-primary-refused", specResyncErrors, call, func(ctx context.Context) (string, error) {
		_, err := p.resync(ctx, a, false)
		if err != nil {
			primaryRefusal = status.Convert(err).Message()
		}
		return r.want(activities.RPCResyncVolume, err, codes.FailedPrecondition)
	})
	f.step("promote-unforced-refused", specPromoteErrors+" (cannot be promoted without force option: the peer is primary)", call, func(ctx context.Context) (string, error) {
		err := p.promote(ctx, b, false)
		if err == nil && !r.cfg.DryRun {
			st.diverged = true
			f.block("not run: " + pre + "promote-unforced-refused left both copies primary")
		}
		return r.want(activities.RPCPromoteVolume, err, codes.FailedPrecondition)
	})
	f.step("promote-unforced-peer-unreachable-refused", specUnreachable, call, func(ctx context.Context) (string, error) {
		up, err := r.linkDown(ctx, f, kind, id, "the peer unreachable")
		if err != nil {
			return "", err
		}
		defer up()
		err = p.promote(ctx, b, false)
		if err == nil && !r.cfg.DryRun {
			st.diverged = true
			f.block("not run: " + pre + "promote-unforced-peer-unreachable-refused left both copies primary")
			return "", fmt.Errorf("PromoteVolume without force on %s answered OK while its peer was unreachable and primary: both copies are primary (split-brain)", b.Name)
		}
		d, werr := r.want(activities.RPCPromoteVolume, err, codes.FailedPrecondition)
		if werr != nil {
			return "", werr
		}
		if d == "" {
			d = "FAILED_PRECONDITION"
		}
		return d + ", while the peer was unreachable", nil
	})
	f.step("destination-info", specDestination, wait, func(ctx context.Context) (string, error) {
		if !r.caps[a.Name][CapGetReplicationDestinationInfo] {
			return "", skipError(a.Name + " does not advertise GET_REPLICATION_DESTINATION_INFO")
		}
		resp := &replication.GetReplicationDestinationInfoResponse{}
		err := r.poll(ctx, "GetReplicationDestinationInfo", func() (bool, error) {
			err := p.call(ctx, a, "GetReplicationDestinationInfo", &replication.GetReplicationDestinationInfoRequest{ReplicationSource: p.src, Secrets: a.Secrets}, resp)
			return err == nil, err
		})
		if err != nil {
			return "", ok("GetReplicationDestinationInfo", err)
		}
		if r.cfg.DryRun {
			return "", nil
		}
		d := resp.GetReplicationDestination()
		switch {
		case kind == "volume" && d.GetVolume().GetVolumeId() == "":
			return "", errors.New("no destination volume_id for a volume source (REQUIRED)")
		case kind == "group" && d.GetVolumegroup().GetVolumeGroupId() == "":
			return "", errors.New("no destination volume_group_id for a volume group source (REQUIRED)")
		case kind == "group":
			ids := d.GetVolumegroup().GetVolumeIds()
			for src, dst := range ids {
				if src == "" || dst == "" {
					return "", fmt.Errorf("volume_ids maps %q to %q: an entry without an ID", src, dst)
				}
			}
			if len(ids) < 2 {
				return "", fmt.Errorf("group %q: volume_ids maps %d volume(s); it must map every volume of the group, and the scratch group holds two or more", d.GetVolumegroup().GetVolumeGroupId(), len(ids))
			}
			return fmt.Sprintf("group %q, %d volume(s) mapped", d.GetVolumegroup().GetVolumeGroupId(), len(d.GetVolumegroup().GetVolumeIds())), nil
		}
		return fmt.Sprintf("volume %q", d.GetVolume().GetVolumeId()), nil
	})

	// Planned move A -> B. First with the link cut: A demoted, its final
	// sync cannot land on B, so B's unforced promotion must be refused
	// (a driver that checks only that the peer is no longer primary
	// promotes it, without A's last writes). The demote step then finds
	// A demoted, and the promotion waits for the final sync.
	f.step("promote-before-final-sync-refused", specFinalSync, 3*call+r.cfg.Observe, func(ctx context.Context) (string, error) {
		up, err := r.linkDown(ctx, f, kind, id, "the demoted copy's final sync held back")
		if err != nil {
			return "", err
		}
		defer up()
		how := ""
		err = p.demote(ctx, a, false)
		if r.means(activities.RPCDemoteVolume, err) == codes.FailedPrecondition {
			// A driver that demotes without force only while the final
			// sync can ship: with force, A's changes still ship once the
			// link is back.
			how = " (with force: " + ok("unforced", err).Error() + ")"
			err = p.demote(ctx, a, true)
		}
		if err := ok("DemoteVolume on "+a.Name+" with the link down", err); err != nil {
			return "", err
		}
		if err := p.holds(ctx, a, false, "DemoteVolume on "+a.Name); err != nil {
			return "", err
		}
		d, err := r.refusesPromote(ctx, p, "before the final sync of "+a.Name+"'s demotion could land (the link cut): promoted without "+a.Name+"'s last writes")
		if err != nil {
			// B's copy may be primary now, without A's last writes.
			f.block("not run: " + pre + "promote-before-final-sync-refused did not pass: " + b.Name + "'s copy may be primary")
			st.diverged = true
			return "", err
		}
		return a.Name + " demoted" + how + "; " + d, nil
	})
	f.need("demote", specDemote+" (read back: the copy refuses replication info as a secondary)", call, func(ctx context.Context) (string, error) {
		if err := ok("DemoteVolume on "+a.Name, p.demote(ctx, a, false)); err != nil {
			return "", err
		}
		return "", p.holds(ctx, a, false, "DemoteVolume on "+a.Name)
	})
	f.step("demote-idempotent", specIdempotent, call, func(ctx context.Context) (string, error) {
		return "", ok("second DemoteVolume on "+a.Name, p.demote(ctx, a, false))
	})
	f.need("promote", specPromote+" (after the peer's demotion and final sync: FAILED_PRECONDITION until then)", wait, func(ctx context.Context) (string, error) {
		tries, start := 0, time.Now()
		err := r.poll(ctx, activities.RPCPromoteVolume, func() (bool, error) {
			tries++
			err := p.promote(ctx, b, false)
			if r.means(activities.RPCPromoteVolume, err) == codes.FailedPrecondition {
				return false, nil // the final sync is still on its way
			}
			return err == nil, err
		})
		if err != nil {
			return "", ok("PromoteVolume on "+b.Name, err)
		}
		if err := p.holds(ctx, b, true, "PromoteVolume on "+b.Name); err != nil {
			return "", err
		}
		return fmt.Sprintf("after %d call(s), %s", tries, time.Since(start).Round(time.Millisecond)), nil
	})
	f.step("promote-idempotent", specIdempotent, call, func(ctx context.Context) (string, error) {
		return "", ok("second PromoteVolume on "+b.Name, p.promote(ctx, b, false))
	})
	f.step("resync", specResync, wait, func(ctx context.Context) (string, error) {
		return r.follow(ctx, p, a, b, false, false)
	})

	// B is primary now, promoted (a driver that schedules its syncs at
	// promotion, as ceph-csi, ships from here on), and A follows it.
	f.step("info-advances", specSyncHonest+" (across syncs)", wait, func(ctx context.Context) (string, error) {
		base := r.lastSync(ctx, p, b)
		if w := r.cfg.Hooks.Write; w != "" {
			// Something new for the next sync to carry.
			if err := r.hook(ctx, "write", w, append(r.hookEnv(kind, id), "DROVER_CONF_SITE="+b.Name)...); err != nil {
				return "", err
			}
		}
		start := time.Now()
		var last time.Time
		err := r.poll(ctx, activities.RPCGetVolumeReplicationInfo, func() (bool, error) {
			resp, err := r.checkedInfo(ctx, p, b, enabledAt)
			if err != nil {
				return false, err
			}
			last = resp.GetLastSyncTime().AsTime()
			return last.After(base), nil
		})
		if err != nil {
			var bad badInfo
			if errors.As(err, &bad) {
				return "", err
			}
			if !last.IsZero() && !last.After(base) {
				return "", fmt.Errorf("last_sync_time stayed at %s for %s (the link up): it does not advance as syncs complete", last.Format(time.RFC3339Nano), time.Since(start).Round(time.Second))
			}
			return "", ok("GetVolumeReplicationInfo until a newer sync", err)
		}
		return fmt.Sprintf("advanced from %s to %s in %s", base.Format(time.RFC3339), last.Format(time.RFC3339), time.Since(start).Round(time.Millisecond)), nil
	})

	// Failover back to A with force while B is still primary: a split
	// brain. B is demoted with force; a resync without force must not
	// discard its copy, one with force makes it follow A: the starting
	// roles again.
	f.need("promote-force", specPromote+" (force: the peer is still primary)", wait, func(ctx context.Context) (string, error) {
		// A forced promotion that failed, timed out or was cut short may
		// still have happened: from here on B's copy may have diverged.
		st.diverged = true
		if err := ok("PromoteVolume force on "+a.Name, p.promote(ctx, a, true)); err != nil {
			return "", err
		}
		return "", p.holds(ctx, a, true, "PromoteVolume force on "+a.Name)
	})
	wrote := false
	f.step("diverge-write", specDiverged+" (B's copy written while both are primary)", call, func(ctx context.Context) (string, error) {
		if r.cfg.Hooks.Write == "" {
			return "", hookSkip("no write hook (--write-cmd): " + b.Name + "'s copy holds no write of its own, which no CSI-Addons call can make")
		}
		if err := r.hook(ctx, "write", r.cfg.Hooks.Write, append(r.hookEnv(kind, id), "DROVER_CONF_SITE="+b.Name)...); err != nil {
			return "", err
		}
		wrote = true
		return "wrote to " + b.Name + "'s copy while it was primary", nil
	})
	f.need("demote-force", specDemote+" (force; read back)", call, func(ctx context.Context) (string, error) {
		if err := ok("DemoteVolume force on "+b.Name, p.demote(ctx, b, true)); err != nil {
			return "", err
		}
		return "", p.holds(ctx, b, false, "DemoteVolume force on "+b.Name)
	})
	kept := false
	f.step("resync-unforced-keeps-diverged", specDiverged, call+r.cfg.Observe, func(ctx context.Context) (string, error) {
		d, err := r.keepsDiverged(ctx, p, wrote, primaryRefusal)
		kept = err == nil
		return d, err
	})
	// Both copies secondary, B's diverged: an unforced promotion of B
	// would keep its own writes and drop A's since the split. A is then
	// promoted back with force (B made no final sync for it to wait on).
	// Without the write, B's copy may hold nothing of its own, and a
	// driver that compares data may rightly promote it: a hook skip.
	f.step("promote-unforced-diverged-refused", specSplitPromote, 3*call+r.cfg.Observe, func(ctx context.Context) (string, error) {
		if !wrote && !r.cfg.DryRun {
			return "", hookSkip("no write hook (--write-cmd): " + b.Name + "'s copy holds no write of its own, so it may not have diverged")
		}
		if !kept && !r.cfg.DryRun {
			return "", skipError("not run: " + pre + "resync-unforced-keeps-diverged did not pass, so " + b.Name + "'s copy may no longer be diverged")
		}
		blocked := "not run: " + pre + "promote-unforced-diverged-refused left " + a.Name + "'s copy demoted"
		if err := ok("DemoteVolume on "+a.Name, p.demote(ctx, a, false)); err != nil {
			f.block(blocked)
			return "", err
		}
		if err := p.holds(ctx, a, false, "DemoteVolume on "+a.Name); err != nil {
			f.block(blocked)
			return "", err
		}
		d, err := r.refusesPromote(ctx, p, "a copy that diverged while both were primary was promoted without force, over "+a.Name+"'s writes since the split")
		if err != nil {
			f.block(blocked)
			return "", err
		}
		if err := ok("PromoteVolume force on "+a.Name, p.promote(ctx, a, true)); err != nil {
			f.block(blocked)
			return "", fmt.Errorf("%s; %s's copy is demoted: %w", d, a.Name, err)
		}
		if err := p.holds(ctx, a, true, "PromoteVolume force on "+a.Name); err != nil {
			f.block(blocked)
			return "", err
		}
		return d + "; " + a.Name + " promoted back with force", nil
	})
	f.step("resync-force-link-down", specReadyAfter+" (the link down)", call+r.cfg.Observe, func(ctx context.Context) (string, error) {
		// A copy that follows its primary already may rightly be ready.
		switch {
		case r.cfg.DryRun || r.cfg.Hooks.LinkDown == "":
		case !wrote:
			return "", hookSkip("no write hook (--write-cmd): " + b.Name + "'s copy holds no write of its own, so it may follow " + a.Name + "'s already")
		case !kept:
			return "", skipError("not run: " + pre + "resync-unforced-keeps-diverged did not pass, so " + b.Name + "'s copy may follow " + a.Name + "'s already")
		}
		up, err := r.linkDown(ctx, f, kind, id, "the replication link cut")
		if err != nil {
			return "", err
		}
		defer up()
		return r.notReadyLinkDown(ctx, p)
	})
	f.need("resync-force", specResync+" (force)", wait, func(ctx context.Context) (string, error) {
		d, err := r.follow(ctx, p, b, a, true, false)
		if err == nil {
			st.diverged = false
		}
		return d, err
	})

	f.step("disable", specDisable+" (the primary first)", wait, func(ctx context.Context) (string, error) {
		if err := ok("DisableVolumeReplication on "+a.Name, p.disable(ctx, a)); err != nil {
			return "", err
		}
		if err := p.offHolds(ctx, a, true, "DisableVolumeReplication on "+a.Name); err != nil {
			return "", err
		}
		st.disabledA = true
		err := r.poll(ctx, activities.RPCDisableVolumeReplication, func() (bool, error) {
			err := p.disable(ctx, b)
			return err == nil, err
		})
		if err != nil {
			return "", ok("DisableVolumeReplication on "+b.Name, err)
		}
		if err := p.offHolds(ctx, b, false, "DisableVolumeReplication on "+b.Name); err != nil {
			return "", err
		}
		st.disabled = true
		return "", nil
	})
	f.step("disable-idempotent", specIdempotent+"; "+specDisable, call, func(ctx context.Context) (string, error) {
		if err := ok("second DisableVolumeReplication on "+a.Name, p.disable(ctx, a)); err != nil {
			return "", err
		}
		return "", ok("second DisableVolumeReplication on "+b.Name, p.disable(ctx, b))
	})
	f.step("promote-disabled-refused", specPromoteErrors, call, func(ctx context.Context) (string, error) {
		// A's copy, primary all along: taking the promotion does no harm.
		err := p.promote(ctx, a, false)
		return r.want(activities.RPCPromoteVolume, err, codes.FailedPrecondition)
	})
}

// keepsDiverged: B's copy was primary while A was promoted with force, and
// is demoted now. A resync without force must not discard what B holds of
// its own: it refuses (FAILED_PRECONDITION), or does not take the resync,
// and in no case does the copy turn ready or take a sync from A while the
// suite watches. Through the API alone the suite knows the copy holds
// writes of its own only when the write hook made one; without it, a copy
// that took A's sync may simply have had nothing to discard, and the check
// says so and skips.
func (r *runner) keepsDiverged(ctx context.Context, p repl, wrote bool, primaryRefusal string) (string, error) {
	a, b := &r.cfg.A, r.cfg.B
	base := r.lastSync(ctx, p, a)
	start := time.Now()
	deadline := start.Add(r.cfg.Observe)
	unknown := b.Name + "'s copy holds no write of its own (no --write-cmd), so whether the resync discarded anything cannot be told through the API alone"
	var last string
	for calls := 1; ; calls++ {
		ready, err := p.resync(ctx, b, false)
		if r.cfg.DryRun {
			return "", nil
		}
		switch {
		case err == nil && ready:
			if !wrote {
				return "", skipError("ResyncVolume without force answered ready=true: " + unknown)
			}
			return "", fmt.Errorf("ResyncVolume without force on %s answered ready=true after %s: the write it took as primary was discarded without force", b.Name, time.Since(start).Round(time.Millisecond))
		case err == nil:
			last = "OK, ready=false"
		case r.means(activities.RPCResyncVolume, err) == codes.FailedPrecondition:
			// A refusal keeps the copy only when it is the divergence's:
			// the copy read back as a secondary's, and not refused as a
			// primary's resync is ("source is primary").
			if m := status.Convert(err).Message(); primaryRefusal != "" && m == primaryRefusal {
				return "", fmt.Errorf("ResyncVolume without force on %s was refused as a primary's resync is (%q, the answer of resync-primary-refused), not for its divergence: the copy's demotion did not hold, or the driver does not tell a diverged copy from a primary", b.Name, m)
			}
			if herr := p.holds(ctx, b, false, "DemoteVolume force on "+b.Name); herr != nil {
				return "", fmt.Errorf("ResyncVolume without force on %s refused (%s), but: %w", b.Name, status.Convert(err).Message(), herr)
			}
			msg := "refused without force: " + ok("ResyncVolume", err).Error()
			if d, ok := r.deviation(activities.RPCResyncVolume, err); ok {
				msg += "; " + describeDeviation(d)
			}
			return msg, nil
		case r.retryable(activities.RPCResyncVolume, err):
			last = ok("ResyncVolume", err).Error()
			if d, ok := r.deviation(activities.RPCResyncVolume, err); ok {
				last += " (" + describeDeviation(d) + ")"
			}
		default:
			d, werr := r.want(activities.RPCResyncVolume, err, codes.FailedPrecondition)
			if werr != nil {
				return "", werr
			}
			return "refused without force: " + d, nil
		}
		resp, ierr := r.checkedInfo(ctx, p, a, time.Time{})
		var bad badInfo
		if errors.As(ierr, &bad) {
			return "", ierr
		}
		if ierr == nil && resp.GetLastSyncTime().AsTime().After(base) {
			if !wrote {
				return "", skipError(fmt.Sprintf("a sync from %s reached it after a resync without force: %s", a.Name, unknown))
			}
			return "", fmt.Errorf("after ResyncVolume without force on %s (%s), %s reports a sync newer than before (%s): the copy took %s's data over the write it made as primary, without force",
				b.Name, last, a.Name, resp.GetLastSyncTime().AsTime().Format(time.RFC3339Nano), a.Name)
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("%d call(s) over %s answered %s; the copy neither turned ready nor took a sync from %s", calls, r.cfg.Observe, last, a.Name), nil
		}
		if err := r.pause(ctx); err != nil {
			return "", fmt.Errorf("watching ResyncVolume without force: %w", err)
		}
	}
}

// refusesPromote watches PromoteVolume without force on B for Observe
// while A's copy is demoted, when B's copy must not be promoted so (it
// diverged, or A's final sync has not reached it): every answer must
// refuse it (FAILED_PRECONDITION, or a code Drover's calls retry). An OK
// fails the check, saying what it did (harm); the clean-up puts A back.
func (r *runner) refusesPromote(ctx context.Context, p repl, harm string) (string, error) {
	b := r.cfg.B
	start := time.Now()
	var last string
	for calls := 1; ; calls++ {
		err := p.promote(ctx, b, false)
		if r.cfg.DryRun {
			return "", nil
		}
		switch {
		case err == nil:
			return "", fmt.Errorf("PromoteVolume without force on %s answered OK (call %d, %s after %s's demotion): %s",
				b.Name, calls, time.Since(start).Round(time.Millisecond), r.cfg.A.Name, harm)
		case r.means(activities.RPCPromoteVolume, err) == codes.FailedPrecondition, r.retryable(activities.RPCPromoteVolume, err):
			last = ok("PromoteVolume", err).Error()
		default:
			_, werr := r.want(activities.RPCPromoteVolume, err, codes.FailedPrecondition)
			return "", werr
		}
		if time.Since(start) >= r.cfg.Observe {
			return fmt.Sprintf("%d call(s) over %s refused (%s)", calls, r.cfg.Observe, last), nil
		}
		if err := r.pause(ctx); err != nil {
			return "", fmt.Errorf("watching PromoteVolume without force: %w", err)
		}
	}
}

// notReadyLinkDown watches ResyncVolume with force on B, whose copy
// diverged, for Observe with the replication link cut: a forced resync
// discards the copy and can be ready only once a sync from A has landed,
// which none can. Ready=true then is a driver that says ready without a
// sync.
func (r *runner) notReadyLinkDown(ctx context.Context, p repl) (string, error) {
	b := r.cfg.B
	start := time.Now()
	var last string
	for calls := 1; ; calls++ {
		ready, err := p.resync(ctx, b, true)
		if r.cfg.DryRun {
			return "", nil
		}
		switch {
		case err == nil && ready:
			return "", fmt.Errorf("ResyncVolume force on %s answered ready=true (call %d, %s after the link was cut), when no sync could land: ready does not mean the copy follows its primary",
				b.Name, calls, time.Since(start).Round(time.Millisecond))
		case err == nil:
			last = "OK, ready=false"
		case r.retryable(activities.RPCResyncVolume, err):
			last = ok("ResyncVolume", err).Error()
		default:
			return "", ok("ResyncVolume force on "+b.Name+" with the link down", err)
		}
		if time.Since(start) >= r.cfg.Observe {
			return fmt.Sprintf("%d call(s) over %s with the link down answered %s, never ready", calls, r.cfg.Observe, last), nil
		}
		if err := r.pause(ctx); err != nil {
			return "", fmt.Errorf("watching ResyncVolume force with the link down: %w", err)
		}
	}
}

// cleanupReplication puts a scratch source back after a run cut short or a
// failed step, on a context of its own (Ctrl-C does not stop it), in the
// order that leaves neither a split brain nor an orphan copy: B demoted; A
// primary (without force once B's demotion reached it, with force only
// when it does not); B made to follow A (a resync, with force only when B's
// copy diverged or it is refused without); replication disabled on A, the
// primary, first, then on B (NOT_FOUND: nothing left). Each step is
// reported.
func (r *runner) cleanupReplication(p repl, kind, id string, st *pairState) {
	if r.cfg.DryRun {
		return
	}
	a, b := &r.cfg.A, r.cfg.B
	r.cur = nil
	note := func(what, res string) {
		r.report.Cleanup = append(r.report.Cleanup, fmt.Sprintf("%s %s: %s", kind, what, res))
	}
	if why := r.hung(r.runCtx.Err() != nil); why != "" {
		note("clean-up", fmt.Sprintf("%s; %s %s may still be replicated between %s and %s: see its state there, and disable its replication by hand once the driver answers", why, kind, id, a.Name, b.Name))
		return
	}
	ctx, cancel := context.WithTimeout(r.cleanupBase(), 2*r.cfg.SyncTimeout+4*r.cfg.CallTimeout)
	defer cancel()
	result := func(err error) string {
		if _, isStatus := status.FromError(err); err != nil && !isStatus {
			return err.Error() // a read-back: the storage's own answer is in it
		}
		if err != nil {
			return ok("", err).Error()[2:]
		}
		return "done"
	}
	bounded := func(d time.Duration, fn func(ctx context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return fn(cctx)
	}

	disableB := func() {
		err := bounded(r.cfg.SyncTimeout, func(ctx context.Context) error {
			err := r.poll(ctx, activities.RPCDisableVolumeReplication, func() (bool, error) {
				err := p.disable(ctx, b)
				return err == nil, err
			})
			if err != nil {
				return err
			}
			return p.offHolds(ctx, b, false, "DisableVolumeReplication on "+b.Name)
		})
		note("disable "+b.Name, result(err))
	}
	if st.disabledA {
		// A's copy is primary and off: B's copy followed it up to then.
		note("disable "+a.Name, "done before the clean-up")
		disableB()
		return
	}

	// Each change is read back: the clean-up reports what the storage
	// says, not what the call answered.
	note("demote "+b.Name+" (force)", result(bounded(r.cfg.CallTimeout, func(ctx context.Context) error {
		if err := p.demote(ctx, b, true); err != nil {
			return err
		}
		return p.holds(ctx, b, false, "DemoteVolume force on "+b.Name)
	})))

	tries := 0
	var refused error
	err := bounded(r.cfg.CallTimeout, func(ctx context.Context) error {
		return r.poll(ctx, activities.RPCPromoteVolume, func() (bool, error) {
			tries++
			err := p.promote(ctx, a, false)
			if r.means(activities.RPCPromoteVolume, err) == codes.FailedPrecondition {
				refused = err
				return false, nil // B's demotion is still on its way
			}
			return err == nil, err
		})
	})
	if err != nil && refused != nil {
		err = refused
	}
	if err == nil {
		err = bounded(r.cfg.CallTimeout, func(ctx context.Context) error { return p.holds(ctx, a, true, "PromoteVolume on "+a.Name) })
	}
	if err == nil {
		note("promote "+a.Name, fmt.Sprintf("done without force (%d call(s))", tries))
	} else {
		why := result(err)
		err = bounded(r.cfg.SyncTimeout, func(ctx context.Context) error {
			if err := p.promote(ctx, a, true); err != nil {
				return err
			}
			return p.holds(ctx, a, true, "PromoteVolume force on "+a.Name)
		})
		note("promote "+a.Name, fmt.Sprintf("refused without force (%s); with force: %s", why, result(err)))
		if err == nil {
			st.diverged = true
		}
	}

	force := st.diverged
	var d string
	err = bounded(r.cfg.SyncTimeout, func(ctx context.Context) error {
		var err error
		d, err = r.follow(ctx, p, b, a, force, true)
		return err
	})
	if err != nil && !force {
		note("resync "+b.Name+" without force", result(err))
		force = true
		err = bounded(r.cfg.SyncTimeout, func(ctx context.Context) error {
			var err error
			d, err = r.follow(ctx, p, b, a, true, true)
			return err
		})
	}
	what := "resync " + b.Name + " without force (it did not diverge)"
	if force {
		what = "resync " + b.Name + " with force (its copy diverged from " + a.Name + "'s)"
	}
	if err != nil {
		// Disabling A now would leave B's copy, which does not follow
		// it, behind on its own: an orphan. Better left replicated.
		note(what, result(err))
		var found string
		_ = bounded(r.cfg.CallTimeout, func(ctx context.Context) error { found = p.roles(ctx); return nil })
		note("disable", fmt.Sprintf("NOT done: %s's copy does not follow %s's yet, and disabling %s now would leave it behind as an orphan; "+
			"replication left on, as read back: %s. Once %s's copy is the only primary and %s's ResyncVolume answers OK, disable %s, then %s",
			b.Name, a.Name, a.Name, found, a.Name, b.Name, a.Name, b.Name))
		return
	}
	note(what, d)

	note("disable "+a.Name, result(bounded(r.cfg.CallTimeout, func(ctx context.Context) error {
		if err := p.disable(ctx, a); err != nil {
			return err
		}
		return p.offHolds(ctx, a, true, "DisableVolumeReplication on "+a.Name)
	})))
	disableB()
}
