package sim

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/csiaddons/identity"
	"github.com/drover-dr/drover/csiaddons/replication"
)

// begin runs the checks every fence and replication RPC starts with: is the
// RPC implemented, and do the secrets authenticate.
func (s *Site) begin(method string, secrets map[string]string) error {
	if err := s.implemented(method); err != nil {
		return err
	}
	for k, want := range s.cfg.Secrets {
		if got, ok := secrets[k]; !ok || got != want {
			// Never echo a secret value, wanted or given.
			return status.Errorf(s.profile.authCode(method), "%s: secrets missing or not valid (key %q)", method, k)
		}
	}
	return nil
}

// implemented answers UNIMPLEMENTED for a method the site is configured
// without. It is the only check of the identity service: Probe,
// GetIdentity and GetCapabilities carry no secrets field in the spec, so a
// site that requires secrets still answers them (as a real driver does).
func (s *Site) implemented(method string) error {
	if v, ok := s.profile.panics[method]; ok {
		return status.Errorf(codes.Internal, "panic %s", v)
	}
	if svc, ok := s.profile.unknownMethods[method]; ok {
		return status.Errorf(codes.Unimplemented, "unknown method %s for service %s", method, svc)
	}
	if s.unimpl[method] {
		return status.Errorf(codes.Unimplemented, "%s is not implemented by this driver", method)
	}
	return nil
}

// ---- identity ----

type identityServer struct {
	identity.UnimplementedIdentityServer
	s *Site
}

func (i *identityServer) GetIdentity(ctx context.Context, _ *identity.GetIdentityRequest) (*identity.GetIdentityResponse, error) {
	if err := i.s.implemented("GetIdentity"); err != nil {
		return nil, err
	}
	if err := i.s.faults.inject(ctx, "GetIdentity"); err != nil {
		return nil, err
	}
	resp := &identity.GetIdentityResponse{Name: i.s.cfg.DriverName, VendorVersion: i.s.cfg.Version}
	if i.s.profile.manifest {
		resp.Manifest = map[string]string{"site": i.s.cfg.Name, "simulator": "true"}
	}
	return resp, nil
}

func (i *identityServer) GetCapabilities(ctx context.Context, _ *identity.GetCapabilitiesRequest) (*identity.GetCapabilitiesResponse, error) {
	if err := i.s.implemented("GetCapabilities"); err != nil {
		return nil, err
	}
	if err := i.s.faults.inject(ctx, "GetCapabilities"); err != nil {
		return nil, err
	}
	var caps []*identity.Capability
	add := func(c *identity.Capability) { caps = append(caps, c) }
	add(&identity.Capability{Type: &identity.Capability_Service_{Service: &identity.Capability_Service{Type: identity.Capability_Service_CONTROLLER_SERVICE}}})
	if !i.s.unimpl["FenceClusterNetwork"] {
		add(&identity.Capability{Type: &identity.Capability_NetworkFence_{NetworkFence: &identity.Capability_NetworkFence{Type: identity.Capability_NetworkFence_NETWORK_FENCE}}})
	}
	if !i.s.unimpl["GetFenceClients"] {
		add(&identity.Capability{Type: &identity.Capability_NetworkFence_{NetworkFence: &identity.Capability_NetworkFence{Type: identity.Capability_NetworkFence_GET_CLIENTS_TO_FENCE}}})
	}
	if !i.s.unimpl["PromoteVolume"] {
		add(&identity.Capability{Type: &identity.Capability_VolumeReplication_{VolumeReplication: &identity.Capability_VolumeReplication{Type: identity.Capability_VolumeReplication_VOLUME_REPLICATION}}})
	}
	if !i.s.unimpl["GetReplicationDestinationInfo"] {
		add(&identity.Capability{Type: &identity.Capability_VolumeReplication_{VolumeReplication: &identity.Capability_VolumeReplication{Type: identity.Capability_VolumeReplication_GET_REPLICATION_DESTINATION_INFO}}})
	}
	i.s.profile.capabilities(add)
	return &identity.GetCapabilitiesResponse{Capabilities: caps}, nil
}

func (i *identityServer) Probe(ctx context.Context, _ *identity.ProbeRequest) (*identity.ProbeResponse, error) {
	ready, err := i.s.probe(ctx)
	if err != nil {
		return nil, err
	}
	return &identity.ProbeResponse{Ready: wrapperspb.Bool(ready)}, nil
}

// probe is what Probe answers, on either identity service: CSI-Addons'
// or the CSI spec's.
func (s *Site) probe(ctx context.Context) (bool, error) {
	if err := s.implemented("Probe"); err != nil {
		return false, err
	}
	if err := s.faults.inject(ctx, "Probe"); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready && !s.down, nil
}

// ---- fence ----

type fenceServer struct {
	fence.UnimplementedFenceControllerServer
	s *Site
}

func (s *Site) parseCIDRs(method string, params map[string]string, cidrs []*fence.CIDR) ([]string, error) {
	if len(cidrs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "cidrs is required: give at least one CIDR block")
	}
	if err := s.profile.fenceRequest(method, params); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(cidrs))
	for i, c := range cidrs {
		if c == nil || c.Cidr == "" {
			return nil, status.Errorf(codes.InvalidArgument, "cidrs[%d]: cidr is required", i)
		}
		p, err := s.profile.parseCIDR(method, i, c.Cidr)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func (f *fenceServer) FenceClusterNetwork(ctx context.Context, req *fence.FenceClusterNetworkRequest) (*fence.FenceClusterNetworkResponse, error) {
	if err := f.s.begin("FenceClusterNetwork", req.GetSecrets()); err != nil {
		return nil, err
	}
	cidrs, err := f.s.parseCIDRs("FenceClusterNetwork", req.GetParameters(), req.GetCidrs())
	if err != nil {
		return nil, err
	}
	if err := f.s.faults.inject(ctx, "FenceClusterNetwork"); err != nil {
		return nil, err
	}
	if f.s.faults.discard("FenceClusterNetwork") {
		f.s.log.Warn("injected fault: FenceClusterNetwork acknowledged, not applied", "cidrs", cidrs)
		return &fence.FenceClusterNetworkResponse{}, nil
	}
	if err := f.s.setFences(ctx, cidrs, true); err != nil {
		return nil, err
	}
	return &fence.FenceClusterNetworkResponse{}, nil
}

func (f *fenceServer) UnfenceClusterNetwork(ctx context.Context, req *fence.UnfenceClusterNetworkRequest) (*fence.UnfenceClusterNetworkResponse, error) {
	if err := f.s.begin("UnfenceClusterNetwork", req.GetSecrets()); err != nil {
		return nil, err
	}
	cidrs, err := f.s.parseCIDRs("UnfenceClusterNetwork", req.GetParameters(), req.GetCidrs())
	if err != nil {
		return nil, err
	}
	if err := f.s.faults.inject(ctx, "UnfenceClusterNetwork"); err != nil {
		return nil, err
	}
	if f.s.faults.discard("UnfenceClusterNetwork") {
		f.s.log.Warn("injected fault: UnfenceClusterNetwork acknowledged, not applied", "cidrs", cidrs)
		return &fence.UnfenceClusterNetworkResponse{}, nil
	}
	if err := f.s.setFences(ctx, cidrs, false); err != nil {
		return nil, err
	}
	return &fence.UnfenceClusterNetworkResponse{}, nil
}

func (f *fenceServer) ListClusterFence(ctx context.Context, req *fence.ListClusterFenceRequest) (*fence.ListClusterFenceResponse, error) {
	if err := f.s.begin("ListClusterFence", req.GetSecrets()); err != nil {
		return nil, err
	}
	if err := f.s.faults.inject(ctx, "ListClusterFence"); err != nil {
		return nil, err
	}
	resp := &fence.ListClusterFenceResponse{}
	for _, c := range f.s.FencedCIDRs() {
		resp.Cidrs = append(resp.Cidrs, &fence.CIDR{Cidr: c})
	}
	return resp, nil
}

func (f *fenceServer) GetFenceClients(ctx context.Context, req *fence.GetFenceClientsRequest) (*fence.GetFenceClientsResponse, error) {
	if err := f.s.begin("GetFenceClients", req.GetSecrets()); err != nil {
		return nil, err
	}
	if err := f.s.faults.inject(ctx, "GetFenceClients"); err != nil {
		return nil, err
	}
	f.s.mu.Lock()
	clients := make([]ClientSeen, 0, len(f.s.sf.Clients))
	for _, c := range f.s.sf.Clients {
		clients = append(clients, c)
	}
	f.s.mu.Unlock()
	sort.Slice(clients, func(i, j int) bool { return clients[i].Addr < clients[j].Addr })
	resp := &fence.GetFenceClientsResponse{}
	for _, c := range clients {
		p, err := netip.ParseAddr(c.Addr)
		if err != nil {
			continue
		}
		resp.Clients = append(resp.Clients, &fence.ClientDetails{
			Id:        c.ID,
			Addresses: []*fence.CIDR{{Cidr: netip.PrefixFrom(p, p.BitLen()).String()}},
		})
	}
	return resp, nil
}

// ---- replication ----

type replicationServer struct {
	replication.UnimplementedControllerServer
	s *Site
}

// resolve finds the unit a request names. New drivers read only
// replication_source, old ones only volume_id; the simulator accepts either
// and refuses a request whose two fields disagree.
func (s *Site) resolve(volumeID string, src *replication.ReplicationSource) (*unit, error) {
	if src != nil {
		switch t := src.GetType().(type) {
		case *replication.ReplicationSource_Volume:
			id := t.Volume.GetVolumeId()
			if id == "" {
				return nil, status.Error(codes.InvalidArgument, "replication_source.volume.volume_id is required")
			}
			if volumeID != "" && volumeID != id {
				return nil, status.Errorf(codes.InvalidArgument, "volume_id %q and replication_source volume %q disagree", volumeID, id)
			}
			return s.volumeUnit(id)
		case *replication.ReplicationSource_Volumegroup:
			id := t.Volumegroup.GetVolumeGroupId()
			if id == "" {
				return nil, status.Error(codes.InvalidArgument, "replication_source.volumegroup.volume_group_id is required")
			}
			u, ok := s.unitByKey(unitKey(KindGroup, id))
			if !ok {
				return nil, status.Errorf(codes.NotFound, "volume group %q not found", id)
			}
			return u, nil
		default:
			if volumeID == "" {
				return nil, status.Error(codes.InvalidArgument, "replication_source names neither a volume nor a volume group")
			}
		}
	}
	if volumeID == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id or replication_source is required")
	}
	return s.volumeUnit(volumeID)
}

func (s *Site) volumeUnit(id string) (*unit, error) {
	u, err := s.lookupVolume(id)
	if err != nil {
		return nil, s.profile.unknownVolume(id)
	}
	if u.st.Kind == KindGroup {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q belongs to volume group %q: replicate the group", id, u.st.ID)
	}
	return u, nil
}

// withUnit runs one replication RPC on its unit: the common checks, the
// per-unit exclusion (ABORTED for a concurrent call), injected faults, then
// fn.
func (s *Site) withUnit(ctx context.Context, method string, secrets map[string]string, volumeID string, src *replication.ReplicationSource, fn func(u *unit) error) error {
	if err := s.begin(method, secrets); err != nil {
		return err
	}
	u, err := s.resolve(volumeID, src)
	if err != nil && method == "EnableVolumeReplication" {
		// A volume created through CSI becomes a replicated one.
		var made bool
		if made, err = s.adopt(volumeID, src); made && err == nil {
			u, err = s.resolve(volumeID, src)
		} else if !made {
			_, err = s.resolve(volumeID, src)
		}
	}
	if err != nil {
		return err
	}
	if !u.op.TryLock() {
		return status.Errorf(codes.Aborted, "an operation is already pending for %s %q", u.st.Kind, u.st.ID)
	}
	defer u.op.Unlock()
	if err := s.recreating(u); err != nil {
		return err
	}
	if err := s.faults.injectOn(ctx, method, u.st.ID, s.profile.detached); err != nil {
		return err
	}
	return fn(u)
}

// recreating answers a call on a copy that a resync is deleting and
// re-creating (ceph-csi profile). rbd-mirror deletes the local image and
// bootstraps a new one: ceph-csi's ResyncVolume answers ABORTED when
// GetMirroringInfo loses the image under it ("in case of Resync the image
// will get deleted and gets recreated"), then every call answers
// NOT_FOUND (rbdManager.GetVolumeByID: ErrImageNotFound, getGRPCError)
// until the new image exists. Measured: shared/ceph/README.md item 3 (a
// NOT_FOUND while the image is re-created).
func (s *Site) recreating(u *unit) error {
	u.mu.Lock()
	start, until := u.recreateStart, u.recreateUntil
	u.mu.Unlock()
	now := time.Now()
	if !now.Before(until) {
		return nil
	}
	if now.Sub(start) < until.Sub(start)/3 {
		return status.Errorf(codes.Aborted, "failed to get mirroring info of %s: image not found", u.st.ID)
	}
	return status.Errorf(codes.NotFound, "volume %s not found: image not found", u.st.ID)
}

// recreateSpan is how long a resync takes to delete and re-create a copy
// (ceph-csi profile): twice the site's sync interval.
func (s *Site) recreateSpan() time.Duration { return 2 * s.cfg.SyncInterval }

// scaleSchedule turns a schedulingInterval into this simulator's time
// (Config.ScheduleMinute).
func (s *Site) scaleSchedule(d time.Duration) time.Duration {
	return time.Duration(float64(d) * float64(s.cfg.ScheduleMinute) / float64(time.Minute))
}

// commit persists a unit after a change; u.mu must be held. A failure to
// persist is the driver's own failure: UNKNOWN.
func (s *Site) commit(u *unit) error {
	if err := s.store.saveUnit(&u.st); err != nil {
		s.log.Error("persist unit", "unit", u.st.Key(), "err", err)
		return status.Errorf(codes.Unknown, "%s %q: persist state: %v", u.st.Kind, u.st.ID, err)
	}
	return nil
}

// ParseSchedule reads a mirroring schedule: a Go duration ("90s") or a
// count of minutes, hours or days ("5m", "1h", "1d").
func ParseSchedule(v string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days <= 0 {
			return 0, fmt.Errorf("schedulingInterval %q is not a positive duration", v)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("schedulingInterval %q is not a positive duration", v)
	}
	return d, nil
}

func (r *replicationServer) EnableVolumeReplication(ctx context.Context, req *replication.EnableVolumeReplicationRequest) (*replication.EnableVolumeReplicationResponse, error) {
	params := req.GetParameters()
	schedule, err := r.s.profile.enableParams(params)
	if err != nil {
		return nil, err
	}
	if err := r.s.flatten(req.GetVolumeId(), req.GetReplicationSource(), params); err != nil {
		return nil, err
	}
	err = r.s.withUnit(ctx, "EnableVolumeReplication", req.GetSecrets(), req.GetVolumeId(), req.GetReplicationSource(), func(u *unit) error {
		u.mu.Lock()
		defer u.mu.Unlock()
		if r.s.profile.mirror {
			// ReplicationServer.EnableVolumeReplication enables mirroring
			// when it is not enabled and does nothing otherwise; it adds no
			// snapshot schedule (the only AddSnapshotScheduling call is in
			// PromoteVolume). librbd's MirrorEnable in snapshot mode takes
			// the first mirror snapshot: the peer gets the image once, then
			// nothing until a schedule exists. Measured: shared/ceph/README.md
			// item 1 (one mirror snapshot in 2 minutes after enable alone).
			if u.st.Enabled {
				return nil
			}
			u.st.Enabled = true
			u.st.SnapPending = u.st.Role == RolePrimary
			u.st.Params = copyParams(params)
			u.nextSync = time.Time{}
			return r.s.commit(u)
		}
		schedule = r.s.scaleSchedule(schedule)
		if u.st.Enabled && u.st.Schedule == schedule {
			return nil
		}
		u.st.Enabled = true
		u.st.Schedule = schedule
		if len(params) > 0 {
			u.st.Params = copyParams(params)
		}
		u.nextSync = time.Time{}
		return r.s.commit(u)
	})
	if err != nil {
		return nil, err
	}
	return &replication.EnableVolumeReplicationResponse{}, nil
}

func (r *replicationServer) DisableVolumeReplication(ctx context.Context, req *replication.DisableVolumeReplicationRequest) (*replication.DisableVolumeReplicationResponse, error) {
	err := r.s.withUnit(ctx, "DisableVolumeReplication", req.GetSecrets(), req.GetVolumeId(), req.GetReplicationSource(), func(u *unit) error {
		if err := r.s.profile.disableParams(req.GetParameters()); err != nil {
			return err
		}
		u.mu.Lock()
		defer u.mu.Unlock()
		if !u.st.Enabled {
			return nil
		}
		u.st.Enabled = false
		u.st.LastSync = nil
		u.st.PeerSeq = 0
		u.st.InSync = false
		u.st.Resyncing = false
		u.status, u.statusMsg = replication.GetVolumeReplicationInfoResponse_UNKNOWN, ""
		return r.s.commit(u)
	})
	if err != nil {
		return nil, err
	}
	return &replication.DisableVolumeReplicationResponse{}, nil
}

func (r *replicationServer) PromoteVolume(ctx context.Context, req *replication.PromoteVolumeRequest) (*replication.PromoteVolumeResponse, error) {
	err := r.s.withUnit(ctx, "PromoteVolume", req.GetSecrets(), req.GetVolumeId(), req.GetReplicationSource(), func(u *unit) error {
		u.mu.Lock()
		enabled, role := u.st.Enabled, u.st.Role
		epoch, seq := u.st.Epoch, u.st.Seq
		u.mu.Unlock()
		if !enabled {
			return r.s.profile.refuse("PromoteVolume", refuseNotEnabled, u)
		}
		if role == RolePrimary {
			// Already primary: idempotent. ceph-csi adds the schedule all
			// the same.
			return r.s.addSchedule(u, req.GetParameters())
		}
		if !req.GetForce() {
			// A planned promotion needs the peer demoted and every change it
			// made shipped here first.
			ps, err := r.s.peerUnitStatus(ctx, u.st.Key())
			if err != nil {
				return r.s.promoteBusy(u, fmt.Sprintf("peer site unreachable (%v): cannot promote without force", err))
			}
			if ps.Role == RolePrimary {
				return r.s.promoteBusy(u, "the peer copy is still primary: demote it first or promote with force")
			}
			if ps.Epoch != epoch || ps.Seq != seq {
				return r.s.promoteBusy(u, fmt.Sprintf("not yet synced with the demoted peer (have %d, peer has %d): retry after the final sync", seq, ps.Seq))
			}
		}
		forked := false
		if req.GetForce() && r.s.profile.mirror {
			// A forced promotion that does not start from the peer's
			// demotion snapshot leaves the peer's image split-brained
			// once it is demoted (rbd-mirror finds no snapshot of its
			// demotion in the new primary's history).
			ps, err := r.s.peerUnitStatus(ctx, u.st.Key())
			forked = err != nil || ps.Role == RolePrimary || ps.Epoch != epoch || ps.Seq != seq
		}
		if err := r.s.promote(u, req.GetForce(), forked); err != nil {
			return err
		}
		return r.s.addSchedule(u, req.GetParameters())
	})
	if err != nil {
		return nil, err
	}
	return &replication.PromoteVolumeResponse{}, nil
}

// promoteBusy refuses a promotion without force: FAILED_PRECONDITION. In
// ceph-csi's words: librbd's promote fails with EBUSY while the peer image
// is primary or its demotion has not synced, and ReplicationServer.PromoteVolume
// answers an error containing "Device or resource busy" with
// FAILED_PRECONDITION "so that replication operator can send request to
// force promote". Measured: shared/ceph/README.md item 6 (refused while the
// other image is primary; succeeded about 4 s after its demotion).
func (s *Site) promoteBusy(u *unit, why string) error {
	if s.profile.mirror {
		return status.Errorf(codes.FailedPrecondition, "failed to promote image %s: rbd: ret=-16, Device or resource busy (%s)", u.st.ID, why)
	}
	return status.Errorf(codes.FailedPrecondition, "%s %q: %s", u.st.Kind, u.st.ID, why)
}

// addSchedule adds the mirror-snapshot schedule a successful PromoteVolume
// asks for (ceph-csi profile): ReplicationServer.PromoteVolume calls
// rbdImage.AddSnapshotScheduling (internal/rbd/rbd_util.go) after every
// promotion, forced or not and also of an image already primary, whenever
// the parameters hold a schedulingInterval (getSchedulingDetails, no
// validation there); without one no schedule is added. The rbd mgr module
// refuses an interval it cannot read (say "1s"; the simulator takes only
// ceph-csi's own form, ^\d+[mhd]$) and ceph-csi returns that error raw:
// UNKNOWN, the promotion done. Schedules added with different intervals
// are kept side by side, so the shortest one paces the snapshots
// (inferred: "rbd mirror snapshot schedule add" adds to the image's list
// of schedules; not measured). Measured: shared/ceph/README.md item 1 (enabled and promoted,
// one mirror snapshot per minute with "1m").
func (s *Site) addSchedule(u *unit, params map[string]string) error {
	if !s.profile.mirror {
		return nil
	}
	v := params["schedulingInterval"]
	if v == "" {
		return nil
	}
	if !cephSchedule.MatchString(v) {
		return status.Errorf(codes.Unknown, "rbd: ret=-22, Invalid argument: invalid schedule interval %q", v)
	}
	d, err := ParseSchedule(v)
	if err != nil {
		return status.Errorf(codes.Unknown, "rbd: ret=-22, Invalid argument: %v", err)
	}
	d = s.scaleSchedule(d)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.st.Schedule > 0 && u.st.Schedule <= d {
		return nil
	}
	u.st.Schedule = d
	u.nextSnap = time.Now().Add(d)
	return s.commit(u)
}

// promote makes the copy primary in a new epoch.
func (s *Site) promote(u *unit, force, forked bool) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := time.Now()
	newEpoch := uint64(now.UnixNano())
	if newEpoch <= u.st.Epoch {
		newEpoch = u.st.Epoch + 1
	}
	u.st.Role = RolePrimary
	u.st.Demoted = false
	u.st.Resyncing = false
	u.st.InSync = false
	u.st.Epoch = newEpoch
	u.st.Lineage = append(u.st.Lineage, Fork{Epoch: newEpoch, BaseSeq: u.st.Seq, Forced: forked})
	u.st.PeerSeq = 0
	u.st.LastSync = nil
	u.st.RoleChanges = append(u.st.RoleChanges, RoleChange{Time: now, Role: RolePrimary, Epoch: newEpoch, Seq: u.st.Seq, Force: force})
	u.status, u.statusMsg = replication.GetVolumeReplicationInfoResponse_UNKNOWN, ""
	u.nextSync = time.Time{}
	// librbd's promotion in snapshot mode takes a primary mirror
	// snapshot, which the peer replays once it follows this copy.
	u.st.SnapPending = s.profile.mirror
	return s.commit(u)
}

func (r *replicationServer) DemoteVolume(ctx context.Context, req *replication.DemoteVolumeRequest) (*replication.DemoteVolumeResponse, error) {
	began := time.Now()
	err := r.s.withUnit(ctx, "DemoteVolume", req.GetSecrets(), req.GetVolumeId(), req.GetReplicationSource(), func(u *unit) error {
		u.mu.Lock()
		enabled, role := u.st.Enabled, u.st.Role
		u.mu.Unlock()
		if !enabled {
			return r.s.profile.refuse("DemoteVolume", refuseNotEnabled, u)
		}
		if role == RoleSecondary {
			// Already demoted or secondary: idempotent. ceph-csi's
			// ReplicationServer.DemoteVolume does nothing for an image
			// that is not primary, forced or not.
			return nil
		}
		if !req.GetForce() && r.s.profile.demoteChecksPeer {
			// Without force, demote only when the final sync can reach the peer.
			ps, err := r.s.peerUnitStatus(ctx, u.st.Key())
			if err != nil {
				return status.Errorf(codes.FailedPrecondition, "%s %q: peer site unreachable (%v): the final sync cannot be shipped; demote with force", u.st.Kind, u.st.ID, err)
			}
			if ps.Role == RolePrimary {
				return status.Errorf(codes.FailedPrecondition, "%s %q: the peer copy is also primary (split-brain): demote with force and resync", u.st.Kind, u.st.ID)
			}
		}
		u.mu.Lock()
		defer u.mu.Unlock()
		u.st.Role = RoleSecondary
		u.st.Demoted = true
		u.st.InSync = false
		u.st.LastSync = nil
		if r.s.profile.mirror {
			// ReplicationServer.DemoteVolume stores the image's creation
			// time in its metadata (.rbd.image.creation_time, when absent)
			// before librbd's demote, for ResyncVolume to know the image
			// is still the one that was demoted. It ignores force.
			u.st.DemoteStamp = true
			u.st.SnapPending = false
		}
		u.st.RoleChanges = append(u.st.RoleChanges, RoleChange{Time: time.Now(), Role: RoleSecondary, Epoch: u.st.Epoch, Seq: u.st.Seq, Force: req.GetForce()})
		u.status, u.statusMsg = replication.GetVolumeReplicationInfoResponse_UNKNOWN, ""
		u.nextSync = time.Time{}
		if r.s.profile.mirror && r.s.cfg.ScheduleRace && tickWithin(u.nextSnap, u.st.Schedule, began, time.Now()) {
			go r.s.scheduledSnapshotAfterDemotion(u, u.st.RoleChanges[len(u.st.RoleChanges)-1].Time)
		}
		return r.s.commit(u)
	})
	if err != nil {
		return nil, err
	}
	return &replication.DemoteVolumeResponse{}, nil
}

// ResyncVolume starts or follows the resync of a demoted copy.
//
// A copy that took writes as primary that the peer's primary never saw
// (split-brain: both copies were written as primary) has diverged. As
// ceph-csi does, a resync without force refuses it with FAILED_PRECONDITION
// ("Force resync to recover volume"), and only a forced one discards the
// divergent writes: ceph-csi's rbdVolume.ResyncVol (internal/rbd/replication.go)
// answered exactly that before 2023, and its ReplicationServer.ResyncVolume
// (internal/csi-addons/rbd/replication.go) today issues the image resync
// only when req.Force is set. A resync in progress, or of a copy that never
// diverged, needs no force.
func (r *replicationServer) ResyncVolume(ctx context.Context, req *replication.ResyncVolumeRequest) (*replication.ResyncVolumeResponse, error) {
	if r.s.profile.mirror {
		return r.cephResync(ctx, req)
	}
	ready := false
	err := r.s.withUnit(ctx, "ResyncVolume", req.GetSecrets(), req.GetVolumeId(), req.GetReplicationSource(), func(u *unit) error {
		u.mu.Lock()
		enabled, role, resyncing := u.st.Enabled, u.st.Role, u.st.Resyncing
		epoch, seq := u.st.Epoch, u.st.Seq
		u.mu.Unlock()
		if !enabled {
			return r.s.profile.refuse("ResyncVolume", refuseNotEnabled, u)
		}
		if role == RolePrimary {
			return r.s.profile.refuse("ResyncVolume", refusePrimary, u)
		}
		if !resyncing && !req.GetForce() && (epoch != 0 || seq != 0) {
			if err := r.s.divergence(ctx, u, epoch, seq); err != nil {
				return err
			}
		}
		u.mu.Lock()
		defer u.mu.Unlock()
		switch {
		case u.st.Resyncing:
			// Still waiting for the full copy from the primary.
		case u.st.InSync:
			ready = true
		default:
			// Start: the copy's own data will be replaced by the primary's,
			// discarding whatever it wrote after the fork.
			u.st.Resyncing = true
			u.st.ResyncStart = time.Now()
			return r.s.commit(u)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &replication.ResyncVolumeResponse{Ready: ready}, nil
}

func (r *replicationServer) GetVolumeReplicationInfo(ctx context.Context, req *replication.GetVolumeReplicationInfoRequest) (*replication.GetVolumeReplicationInfoResponse, error) {
	var resp *replication.GetVolumeReplicationInfoResponse
	err := r.s.withUnit(ctx, "GetVolumeReplicationInfo", req.GetSecrets(), req.GetVolumeId(), req.GetReplicationSource(), func(u *unit) error {
		u.mu.Lock()
		defer u.mu.Unlock()
		if !u.st.Enabled {
			return r.s.profile.refuse("GetVolumeReplicationInfo", refuseNotEnabled, u)
		}
		if r.s.profile.mirror {
			var err error
			resp, err = cephInfo(u, r.s.peerMirrorRestarting(time.Now()))
			return err
		}
		if u.st.Role != RolePrimary {
			return r.s.profile.refuse("GetVolumeReplicationInfo", refuseNotPrimary, u)
		}
		if u.st.LastSync == nil {
			return status.Errorf(codes.NotFound, "%s %q: no sync to the peer has completed yet", u.st.Kind, u.st.ID)
		}
		resp = &replication.GetVolumeReplicationInfoResponse{
			LastSyncTime:     timestamppb.New(u.st.LastSync.SnapTime),
			LastSyncDuration: durationpb.New(u.st.LastSync.Duration),
			LastSyncBytes:    u.st.LastSync.Bytes,
			Status:           u.status,
			StatusMessage:    u.statusMsg,
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// divergence tells whether a demoted copy at (epoch, seq) has diverged from
// the peer's primary: FAILED_PRECONDITION, naming the writes a forced
// resync would discard, when it has; UNAVAILABLE when the peer cannot be
// asked (the copy's state is unknown, as a mirror daemon that lost its
// peer reports it).
func (s *Site) divergence(ctx context.Context, u *unit, epoch, seq uint64) error {
	ps, err := s.peerUnitStatus(ctx, u.st.Key())
	if err != nil {
		return status.Errorf(codes.Unavailable, "%s %q: peer site unreachable (%v): cannot tell whether this copy diverged; retry, or resync with force to discard its own writes", u.st.Kind, u.st.ID, err)
	}
	if ps.Role != RolePrimary || Consistent(ps.Lineage, ps.Seq, epoch, seq) {
		return nil
	}
	end, known := uint64(0), false
	for i, f := range ps.Lineage {
		if f.Epoch == epoch && i+1 < len(ps.Lineage) {
			end, known = ps.Lineage[i+1].BaseSeq, true
		}
	}
	if !known {
		return status.Errorf(codes.FailedPrecondition, "%s %q: split-brain: this copy (epoch %d, write %d) is not in the primary's lineage; Force resync to recover volume (discards this copy's data)", u.st.Kind, u.st.ID, epoch, seq)
	}
	return status.Errorf(codes.FailedPrecondition, "%s %q: split-brain: this copy holds %d write(s) (%d..%d of epoch %d) the primary never received; Force resync to recover volume (discards them)", u.st.Kind, u.st.ID, seq-end, end+1, seq, epoch)
}
