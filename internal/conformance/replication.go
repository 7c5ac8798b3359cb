package conformance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
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
	specResync        = specRepl + "ResyncVolume; wire-notes.md: ready=false until ready"
	specResyncErrors  = specRepl + "ResyncVolume error table: image is not demoted, 9 FAILED_PRECONDITION"
	specInfo          = specRepl + "GetVolumeReplicationInfo (last_sync_time REQUIRED; NOT_FOUND: details not available at the moment)"
	specInfoErrors    = specRepl + "GetVolumeReplicationInfo error table: image is not promoted, 9 FAILED_PRECONDITION"
	specIdempotent    = specRepl + "service Controller: all the methods it exposes should be idempotent"
	specDestination   = "csi-addons/spec replication: GetReplicationDestinationInfo"
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
	if codeOf(err) == codes.NotFound {
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

func (p repl) info(ctx context.Context, s *Site) (*replication.GetVolumeReplicationInfoResponse, error) {
	resp := &replication.GetVolumeReplicationInfoResponse{}
	err := p.call(ctx, s, "GetVolumeReplicationInfo", &replication.GetVolumeReplicationInfoRequest{
		VolumeId: p.volumeID, ReplicationSource: p.src, Secrets: s.Secrets,
	}, resp)
	return resp, err
}

// resyncUntilReady calls ResyncVolume until it answers ready=true.
func (p repl) resyncUntilReady(ctx context.Context, s *Site, force bool) (int, error) {
	calls := 0
	err := p.r.poll(ctx, func() (bool, error) {
		calls++
		ready, err := p.resync(ctx, s, force)
		return err == nil && ready, err
	})
	return calls, err
}

// replicationErrors: refusals that need no scratch source.
func (r *runner) replicationErrors(ctx context.Context) {
	if r.cfg.B == nil {
		r.skip("replication/errors", "", "no peer endpoint: replication checks skipped")
		return
	}
	a := &r.cfg.A
	if !r.caps[a.Name][activities.CapVolumeReplication] {
		r.skip("replication/errors", specCapabilities, a.Name+" does not advertise VOLUME_REPLICATION")
		return
	}
	r.check(ctx, "replication/empty-source-refused", specEnableErrors+": Missing required field, 3 INVALID_ARGUMENT", r.cfg.CallTimeout, func(ctx context.Context) (string, error) {
		err := repl{r: r, src: &replication.ReplicationSource{}}.enable(ctx, a)
		return r.want("replication/empty-source-refused", err, codes.InvalidArgument)
	})
	for _, kind := range []string{"volume", "group"} {
		id := "drover-conformance-no-such-" + kind
		p := repl{r: r, src: volumeSource(id), volumeID: id}
		if kind == "group" {
			p = repl{r: r, src: groupSource(id)}
		}
		cid := "replication/" + kind + "/unknown-id-refused"
		r.check(ctx, cid, specEnableErrors+": Volume does not exist, 5 NOT_FOUND", r.cfg.CallTimeout, func(ctx context.Context) (string, error) {
			return r.want(cid, p.enable(ctx, a), codes.NotFound)
		})
	}
}

// replication runs the replication checks of one scratch source on the
// pair: A primary, B secondary at the start and at the end.
func (r *runner) replication(ctx context.Context, kind string, src *replication.ReplicationSource, volumeID string) {
	a, b := &r.cfg.A, r.cfg.B
	pre := "replication/" + kind + "/"
	for _, s := range []*Site{a, b} {
		if !r.caps[s.Name][activities.CapVolumeReplication] {
			r.skip(pre, specCapabilities, s.Name+" does not advertise VOLUME_REPLICATION")
			return
		}
	}
	p := repl{r: r, src: src, volumeID: volumeID}
	call, wait := r.cfg.CallTimeout, r.cfg.SyncTimeout

	// From the first enable on, a run cut short puts the pair back.
	finished := false
	defer func() {
		if !finished {
			r.cleanupReplication(p, kind)
		}
	}()
	step := func(id, spec string, timeout time.Duration, fn func(ctx context.Context) (string, error)) bool {
		return r.check(ctx, pre+id, spec, timeout, fn)
	}

	if !step("enable", specEnable, call, func(ctx context.Context) (string, error) {
		if err := ok("EnableVolumeReplication on "+a.Name, p.enable(ctx, a)); err != nil {
			return "", err
		}
		return "", ok("EnableVolumeReplication on "+b.Name, p.enable(ctx, b))
	}) {
		return
	}
	step("enable-idempotent", specIdempotent, call, func(ctx context.Context) (string, error) {
		if err := ok("second EnableVolumeReplication on "+a.Name, p.enable(ctx, a)); err != nil {
			return "", err
		}
		return "", ok("second EnableVolumeReplication on "+b.Name, p.enable(ctx, b))
	})
	step("info-before-sync", specInfo, call, func(ctx context.Context) (string, error) {
		resp, err := p.info(ctx, a)
		switch {
		case codeOf(err) == codes.NotFound:
			return "NOT_FOUND: no sync yet", nil
		case err != nil:
			return "", ok("GetVolumeReplicationInfo", err)
		case resp.GetLastSyncTime() == nil && !r.cfg.DryRun:
			return "", errors.New("answered OK without last_sync_time (REQUIRED); before the first sync the answer is NOT_FOUND")
		}
		return "already synced once", nil
	})
	step("info-after-sync", specInfo, wait, func(ctx context.Context) (string, error) {
		var resp *replication.GetVolumeReplicationInfoResponse
		err := r.poll(ctx, func() (bool, error) {
			var err error
			resp, err = p.info(ctx, a)
			if codeOf(err) == codes.NotFound {
				return false, nil
			}
			return err == nil, err
		})
		if err != nil {
			return "", ok("GetVolumeReplicationInfo until the first sync", err)
		}
		if resp.GetLastSyncTime() == nil && !r.cfg.DryRun {
			return "", errors.New("answered OK without last_sync_time (REQUIRED)")
		}
		if resp.GetLastSyncBytes() < 0 {
			return "", fmt.Errorf("last_sync_bytes %d is negative (MUST NOT be)", resp.GetLastSyncBytes())
		}
		return fmt.Sprintf("last sync %s, %d bytes, status %s", resp.GetLastSyncTime().AsTime().Format(time.RFC3339), resp.GetLastSyncBytes(), resp.GetStatus()), nil
	})
	step("info-secondary-refused", specInfoErrors, call, func(ctx context.Context) (string, error) {
		_, err := p.info(ctx, b)
		return r.want(pre+"info-secondary-refused", err, codes.FailedPrecondition)
	})
	step("resync-primary-refused", specResyncErrors, call, func(ctx context.Context) (string, error) {
		_, err := p.resync(ctx, a, false)
		return r.want(pre+"resync-primary-refused", err, codes.FailedPrecondition)
	})
	step("promote-unforced-refused", specPromoteErrors+" (cannot be promoted without force option)", call, func(ctx context.Context) (string, error) {
		return r.want(pre+"promote-unforced-refused", p.promote(ctx, b, false), codes.FailedPrecondition)
	})
	step("destination-info", specDestination, wait, func(ctx context.Context) (string, error) {
		if !r.caps[a.Name][CapGetReplicationDestinationInfo] {
			return "", skipError(a.Name + " does not advertise GET_REPLICATION_DESTINATION_INFO")
		}
		resp := &replication.GetReplicationDestinationInfoResponse{}
		err := r.poll(ctx, func() (bool, error) {
			err := p.call(ctx, a, "GetReplicationDestinationInfo", &replication.GetReplicationDestinationInfoRequest{ReplicationSource: src, Secrets: a.Secrets}, resp)
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
			for src, dst := range d.GetVolumegroup().GetVolumeIds() {
				if src == "" || dst == "" {
					return "", fmt.Errorf("volume_ids maps %q to %q: an entry without an ID", src, dst)
				}
			}
			return fmt.Sprintf("group %q, %d volume(s) mapped", d.GetVolumegroup().GetVolumeGroupId(), len(d.GetVolumegroup().GetVolumeIds())), nil
		}
		return fmt.Sprintf("volume %q", d.GetVolume().GetVolumeId()), nil
	})

	// Planned move A -> B.
	if !step("demote", specDemote, call, func(ctx context.Context) (string, error) {
		return "", ok("DemoteVolume on "+a.Name, p.demote(ctx, a, false))
	}) {
		return
	}
	step("demote-idempotent", specIdempotent, call, func(ctx context.Context) (string, error) {
		return "", ok("second DemoteVolume on "+a.Name, p.demote(ctx, a, false))
	})
	if !step("promote", specPromote+" (after the peer's demotion and final sync)", wait, func(ctx context.Context) (string, error) {
		tries := 0
		err := r.poll(ctx, func() (bool, error) {
			tries++
			err := p.promote(ctx, b, false)
			if codeOf(err) == codes.FailedPrecondition {
				return false, nil // the final sync is still on its way
			}
			return err == nil, err
		})
		if err != nil {
			return "", ok("PromoteVolume on "+b.Name, err)
		}
		return fmt.Sprintf("after %d call(s)", tries), nil
	}) {
		return
	}
	step("promote-idempotent", specIdempotent, call, func(ctx context.Context) (string, error) {
		return "", ok("second PromoteVolume on "+b.Name, p.promote(ctx, b, false))
	})
	step("resync", specResync, wait, func(ctx context.Context) (string, error) {
		n, err := p.resyncUntilReady(ctx, a, false)
		if err != nil {
			return "", ok("ResyncVolume on "+a.Name, err)
		}
		return fmt.Sprintf("ready after %d call(s)", n), nil
	})

	// Failover back to A with force while B is still primary, then B is
	// demoted with force and resynced: the starting roles again.
	if !step("promote-force", specPromote+" (force: the peer is still primary)", call, func(ctx context.Context) (string, error) {
		return "", ok("PromoteVolume force on "+a.Name, p.promote(ctx, a, true))
	}) {
		return
	}
	step("demote-force", specDemote+" (force)", call, func(ctx context.Context) (string, error) {
		return "", ok("DemoteVolume force on "+b.Name, p.demote(ctx, b, true))
	})
	step("resync-force", specResync+" (force)", wait, func(ctx context.Context) (string, error) {
		n, err := p.resyncUntilReady(ctx, b, true)
		if err != nil {
			return "", ok("ResyncVolume force on "+b.Name, err)
		}
		return fmt.Sprintf("ready after %d call(s)", n), nil
	})

	step("disable", specDisable, call, func(ctx context.Context) (string, error) {
		if err := ok("DisableVolumeReplication on "+b.Name, p.disable(ctx, b)); err != nil {
			return "", err
		}
		return "", ok("DisableVolumeReplication on "+a.Name, p.disable(ctx, a))
	})
	step("disable-idempotent", specIdempotent+"; "+specDisable, call, func(ctx context.Context) (string, error) {
		if err := ok("second DisableVolumeReplication on "+b.Name, p.disable(ctx, b)); err != nil {
			return "", err
		}
		return "", ok("second DisableVolumeReplication on "+a.Name, p.disable(ctx, a))
	})
	step("promote-disabled-refused", specPromoteErrors, call, func(ctx context.Context) (string, error) {
		err := p.promote(ctx, b, false)
		if err == nil && !r.cfg.DryRun {
			// It took the promotion: put the roles back before failing.
			cctx, cancel := context.WithTimeout(context.Background(), r.cfg.CallTimeout)
			defer cancel()
			_ = p.enable(cctx, b)
			_ = p.demote(cctx, b, true)
			_ = p.disable(cctx, b)
		}
		return r.want(pre+"promote-disabled-refused", err, codes.FailedPrecondition)
	})
	finished = ctx.Err() == nil
}

// cleanupReplication puts a scratch source back after a run cut short: A
// primary, B demoted, replication disabled on both (A first). It runs on a context
// of its own, so that Ctrl-C does not stop it.
func (r *runner) cleanupReplication(p repl, kind string) {
	if r.cfg.DryRun {
		return
	}
	a, b := &r.cfg.A, r.cfg.B
	ctx, cancel := context.WithTimeout(context.Background(), 2*r.cfg.CallTimeout)
	defer cancel()
	r.cur = nil
	steps := []struct {
		what string
		err  error
	}{
		{"demote " + b.Name, p.demote(ctx, b, true)},
		{"promote " + a.Name, p.promote(ctx, a, true)},
		// The primary first: once it is off it ships nothing more, so no
		// sync in flight can turn B's replication back on behind us.
		{"disable " + a.Name, p.disable(ctx, a)},
		{"disable " + b.Name, p.disable(ctx, b)},
	}
	for _, s := range steps {
		res := "done"
		if s.err != nil {
			res = ok("", s.err).Error()
		}
		r.report.Cleanup = append(r.report.Cleanup, fmt.Sprintf("%s %s: %s", kind, s.what, res))
	}
}
