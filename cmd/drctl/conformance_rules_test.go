package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/csiaddons/identity"
	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/conformance"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
)

// The conformance suite's hooks, against drover-sim, are this test binary
// run again with DROVER_CONF_TEST_HOOK set: it cuts or restores the pair's
// replication link through the sites' control API, or writes to a copy
// through a site's data path.
func TestMain(m *testing.M) {
	if hook := os.Getenv("DROVER_CONF_TEST_HOOK"); hook != "" {
		if err := runTestHook(hook); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runTestHook(hook string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch hook {
	case "link-down", "link-up":
		for _, ctl := range strings.Split(os.Getenv("DROVER_TEST_SIM_CONTROLS"), ",") {
			if err := sim.NewControl(ctl).SetLink(ctx, hook == "link-up"); err != nil {
				return fmt.Errorf("%s %s: %w", hook, ctl, err)
			}
		}
		return nil
	case "write":
		// DROVER_TEST_SIM_DATA maps the suite's site names to data addresses.
		var addr string
		for _, kv := range strings.Split(os.Getenv("DROVER_TEST_SIM_DATA"), ",") {
			if name, a, ok := strings.Cut(kv, "="); ok && name == os.Getenv("DROVER_CONF_SITE") {
				addr = a
			}
		}
		if addr == "" {
			return fmt.Errorf("write: no data address for site %q", os.Getenv("DROVER_CONF_SITE"))
		}
		volume := os.Getenv("DROVER_CONF_SOURCE")
		if os.Getenv("DROVER_CONF_KIND") == "group" {
			volume += "-vol-1"
		}
		c, err := sim.NewClient(addr, "", "conformance-writer")
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write(ctx, volume, 7, []byte("written by the conformance suite's write hook"))
		return err
	}
	return fmt.Errorf("unknown hook %q", hook)
}

// simHooks are the flags that give the suite its hooks on a pair, as the
// endpoint flags name its sites (endpoint = east, peer = west).
func simHooks(t *testing.T, p simPair) []string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := fmt.Sprintf("DROVER_TEST_SIM_CONTROLS=%s,%s DROVER_TEST_SIM_DATA=endpoint=%s,peer=%s", p.eastCtl, p.westCtl, p.eastData, p.westData)
	hook := func(name string) string { return fmt.Sprintf("DROVER_CONF_TEST_HOOK=%s %s '%s'", name, env, self) }
	return []string{"--link-down-cmd", hook("link-down"), "--link-up-cmd", hook("link-up"), "--write-cmd", hook("write"), "--observe", "2s"}
}

// ruleBreaker stands between the suite and a drover-sim site and breaks
// one rule of the specs, passing everything else through.
type ruleBreaker struct {
	identity.UnimplementedIdentityServer
	fence.UnimplementedFenceControllerServer
	replication.UnimplementedControllerServer
	id   identity.IdentityClient
	fc   fence.FenceControllerClient
	rc   replication.ControllerClient
	rule string
	// known: the pair's scratch sources.
	known []string
	// first: the first last sync reported of each source (breakSyncFrozen).
	mu    sync.Mutex
	first map[string]*timestamppb.Timestamp
	// pair is shared by the breakers of a pair's two sites; site names
	// this one in it.
	pair *pairMemo
	site string
}

// pairMemo is what the breakers of a pair remember together.
type pairMemo struct {
	mu sync.Mutex
	// refusal is each source's first refusal of a ResyncVolume
	// (breakResyncRefusedAsPrimary): the primary's, in the suite's order.
	refusal map[string]error
	// forced: the sources whose copy a site demoted with force after the
	// other site's was promoted with force, and has not resynced with
	// force since, by site endpoint and source.
	forced map[string]bool
	// forcedPromote: the site that last promoted each source with force.
	forcedPromote map[string]string
	// demoted: the sources whose copy a site demoted and has not promoted
	// since, by source and site endpoint.
	demoted map[string]map[string]bool
	seen    map[string]bool
}

// peerDemoted tells whether a site other than site demoted its copy of
// source and has not promoted it since.
func (m *pairMemo) peerDemoted(source, site string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for s, d := range m.demoted[source] {
		if s != site && d {
			return true
		}
	}
	return false
}

// once tells whether what is new: true the first time only.
func (m *pairMemo) once(what string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen[what] {
		return false
	}
	m.seen[what] = true
	return true
}

func (m *pairMemo) setDemoted(source, site string, d bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.demoted[source] == nil {
		m.demoted[source] = map[string]bool{}
	}
	m.demoted[source][site] = d
}

// The rules the breakers break.
const (
	// The resync always forces: force=false is ignored, so a copy that
	// diverged is discarded.
	breakResyncForces = "resync-always-forces"
	// An unforced promotion that the peer's being unreachable refuses is
	// made anyway (with force).
	breakPromoteUnreachable = "promote-while-unreachable"
	// The last sync time is an hour in the future.
	breakFutureSync = "future-last-sync"
	// An unknown ID answers INTERNAL instead of NOT_FOUND on every RPC but
	// Enable.
	breakUnknownIDCode = "unknown-id-code"
	// The last sync time is the time of the question, whatever synced.
	breakSyncIsNow = "last-sync-is-now"
	// The last sync time stays at the first one reported.
	breakSyncFrozen = "last-sync-frozen"
	// A forced resync answers ready=true at once, whether a sync landed or
	// not: OK ready=false, or ceph-csi's "no snapshot details" (its way of
	// saying the copy is not there yet), become OK ready=true.
	breakResyncReadyAtOnce = "resync-ready-at-once"
	// An unforced promotion refused because the copy has not synced with
	// its demoted peer is made anyway (with force): a diverged copy, or one
	// the peer's final sync has not reached, is promoted.
	breakPromoteIgnoresSync = "promote-ignores-sync"
	// An unforced resync of a copy demoted with force (diverged, in the
	// suite's order) that is refused or told to call again carries instead
	// the refusal a primary's resync gets ("source is primary").
	breakResyncRefusedAsPrimary = "resync-refused-as-primary"
	// GetReplicationDestinationInfo of a group maps none of its volumes.
	breakDestinationEmpty = "destination-empty-map"
	// DisableVolumeReplication on the peer answers OK and leaves its copy
	// replicated (the first site's breaker passes every call through).
	breakDisablePeerNoop = "disable-peer-noop"
	// An unforced promotion refused because the peer is still primary is
	// made anyway (with force): a split brain on request.
	breakPromoteOverPrimary = "promote-over-primary"
	// PromoteVolume of a copy not replicated answers OK.
	breakPromoteDisabled = "promote-disabled"
	// EnableVolumeReplication without a source answers OK.
	breakEmptySource = "empty-source-accepted"
	// GetVolumeReplicationInfo answers OK without last_sync_time.
	breakNoSyncTime = "no-last-sync-time"
	// An unforced promotion refused while the peer's copy is demoted is
	// made anyway (with force): the driver checks only that the peer is
	// no longer primary, not that its final sync landed.
	breakPromoteBeforeFinalSync = "promote-before-final-sync"
	// GetCapabilities leaves out NETWORK_FENCE, whose RPCs still answer.
	breakUnadvertisedAnswers = "unadvertised-answers"
	// GetVolumeReplicationInfo on a secondary answers INTERNAL, not the
	// table's FAILED_PRECONDITION.
	breakSecondaryInfoCode = "secondary-info-code"
	// An unforced PromoteVolume while the peer's copy is demoted answers
	// OK and changes nothing.
	breakPlannedPromoteNoop = "planned-promote-noop"
)

// sourceID is a request's volume or group ID.
func sourceID(r sourced) string {
	src := r.GetReplicationSource()
	return src.GetVolume().GetVolumeId() + src.GetVolumegroup().GetVolumeGroupId()
}

// sourceKey names a request's source.
func sourceKey(r sourced) string {
	src := r.GetReplicationSource()
	return r.GetVolumeId() + src.GetVolume().GetVolumeId() + "/" + src.GetVolumegroup().GetVolumeGroupId()
}

// serveBreaker serves a breaker of rule in front of the site at target
// (unix://path), whose scratch sources are known, and returns its endpoint.
func serveBreaker(t *testing.T, target, rule string, pair *pairMemo, known ...string) string {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	b := &ruleBreaker{id: identity.NewIdentityClient(conn), fc: fence.NewFenceControllerClient(conn), rc: replication.NewControllerClient(conn), rule: rule, known: known, first: map[string]*timestamppb.Timestamp{}, pair: pair, site: target}
	sock := filepath.Join(simtest.SockDir(t), "breaker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	identity.RegisterIdentityServer(srv, b)
	fence.RegisterFenceControllerServer(srv, b)
	replication.RegisterControllerServer(srv, b)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return "unix://" + sock
}

// sourced is a replication request: it names its volume or group.
type sourced interface {
	GetVolumeId() string
	GetReplicationSource() *replication.ReplicationSource
}

// unknownID rewrites the site's NOT_FOUND for an ID it does not know: one
// that is not a scratch source. A NOT_FOUND about a scratch source (no
// sync yet; a copy being re-created by a resync) is no unknown ID and
// passes through.
func (b *ruleBreaker) unknownID(r sourced, err error) error {
	if b.rule != breakUnknownIDCode || status.Code(err) != codes.NotFound {
		return err
	}
	src := r.GetReplicationSource()
	for _, id := range []string{r.GetVolumeId(), src.GetVolume().GetVolumeId(), src.GetVolumegroup().GetVolumeGroupId()} {
		if id != "" && !slices.Contains(b.known, id) {
			return status.Error(codes.Internal, "lookup failed: "+status.Convert(err).Message())
		}
	}
	return err
}

func (b *ruleBreaker) GetIdentity(ctx context.Context, r *identity.GetIdentityRequest) (*identity.GetIdentityResponse, error) {
	return b.id.GetIdentity(ctx, r)
}

func (b *ruleBreaker) GetCapabilities(ctx context.Context, r *identity.GetCapabilitiesRequest) (*identity.GetCapabilitiesResponse, error) {
	resp, err := b.id.GetCapabilities(ctx, r)
	if err == nil && b.rule == breakUnadvertisedAnswers {
		resp.Capabilities = slices.DeleteFunc(resp.Capabilities, func(c *identity.Capability) bool { return c.GetNetworkFence() != nil })
	}
	return resp, err
}

func (b *ruleBreaker) Probe(ctx context.Context, r *identity.ProbeRequest) (*identity.ProbeResponse, error) {
	return b.id.Probe(ctx, r)
}

func (b *ruleBreaker) FenceClusterNetwork(ctx context.Context, r *fence.FenceClusterNetworkRequest) (*fence.FenceClusterNetworkResponse, error) {
	return b.fc.FenceClusterNetwork(ctx, r)
}

func (b *ruleBreaker) UnfenceClusterNetwork(ctx context.Context, r *fence.UnfenceClusterNetworkRequest) (*fence.UnfenceClusterNetworkResponse, error) {
	return b.fc.UnfenceClusterNetwork(ctx, r)
}

func (b *ruleBreaker) ListClusterFence(ctx context.Context, r *fence.ListClusterFenceRequest) (*fence.ListClusterFenceResponse, error) {
	return b.fc.ListClusterFence(ctx, r)
}

func (b *ruleBreaker) GetFenceClients(ctx context.Context, r *fence.GetFenceClientsRequest) (*fence.GetFenceClientsResponse, error) {
	return b.fc.GetFenceClients(ctx, r)
}

func (b *ruleBreaker) EnableVolumeReplication(ctx context.Context, r *replication.EnableVolumeReplicationRequest) (*replication.EnableVolumeReplicationResponse, error) {
	if b.rule == breakEmptySource && r.GetReplicationSource().GetType() == nil {
		return &replication.EnableVolumeReplicationResponse{}, nil
	}
	return b.rc.EnableVolumeReplication(ctx, r)
}

func (b *ruleBreaker) DisableVolumeReplication(ctx context.Context, r *replication.DisableVolumeReplicationRequest) (*replication.DisableVolumeReplicationResponse, error) {
	if b.rule == breakDisablePeerNoop && slices.Contains(b.known, sourceID(r)) {
		return &replication.DisableVolumeReplicationResponse{}, nil
	}
	resp, err := b.rc.DisableVolumeReplication(ctx, r)
	return resp, b.unknownID(r, err)
}

func (b *ruleBreaker) PromoteVolume(ctx context.Context, r *replication.PromoteVolumeRequest) (*replication.PromoteVolumeResponse, error) {
	if b.rule == breakPlannedPromoteNoop && !r.GetForce() && b.pair.peerDemoted(sourceKey(r), b.site) && b.pair.once("noop "+sourceKey(r)) {
		// The first planned promotion of each source: OK, and nothing done.
		return &replication.PromoteVolumeResponse{}, nil
	}
	resp, err := b.rc.PromoteVolume(ctx, r)
	if err == nil && r.GetForce() && b.rule == breakResyncRefusedAsPrimary {
		b.pair.mu.Lock()
		b.pair.forcedPromote[sourceKey(r)] = b.site
		b.pair.mu.Unlock()
	}
	if b.rule == breakPromoteUnreachable && !r.GetForce() && status.Code(err) == codes.FailedPrecondition && strings.Contains(status.Convert(err).Message(), "unreachable") {
		r.Force = true
		return b.rc.PromoteVolume(ctx, r)
	}
	if b.rule == breakPromoteOverPrimary && !r.GetForce() && status.Code(err) == codes.FailedPrecondition && strings.Contains(status.Convert(err).Message(), "still primary") {
		r.Force = true
		return b.rc.PromoteVolume(ctx, r)
	}
	if b.rule == breakPromoteDisabled && err != nil && strings.Contains(status.Convert(err).Message(), "not enabled") {
		return &replication.PromoteVolumeResponse{}, nil
	}
	if b.rule == breakPlannedPromoteNoop && err == nil {
		b.pair.setDemoted(sourceKey(r), b.site, false)
	}
	if b.rule == breakPromoteBeforeFinalSync {
		if err == nil {
			b.pair.setDemoted(sourceKey(r), b.site, false)
		} else if !r.GetForce() && status.Code(err) == codes.FailedPrecondition && b.pair.peerDemoted(sourceKey(r), b.site) {
			r.Force = true
			resp, err = b.rc.PromoteVolume(ctx, r)
			if err == nil {
				b.pair.setDemoted(sourceKey(r), b.site, false)
			}
			return resp, err
		}
	}
	if b.rule == breakPromoteIgnoresSync && !r.GetForce() && status.Code(err) == codes.FailedPrecondition && strings.Contains(status.Convert(err).Message(), "not yet synced") {
		r.Force = true
		return b.rc.PromoteVolume(ctx, r)
	}
	return resp, b.unknownID(r, err)
}

func (b *ruleBreaker) DemoteVolume(ctx context.Context, r *replication.DemoteVolumeRequest) (*replication.DemoteVolumeResponse, error) {
	resp, err := b.rc.DemoteVolume(ctx, r)
	if err == nil && (b.rule == breakPromoteBeforeFinalSync || b.rule == breakPlannedPromoteNoop) {
		b.pair.setDemoted(sourceKey(r), b.site, true)
	}
	if err == nil && r.GetForce() && b.rule == breakResyncRefusedAsPrimary {
		// Diverged: demoted with force after the other site's copy was
		// promoted with force (a split brain).
		b.pair.mu.Lock()
		if by := b.pair.forcedPromote[sourceKey(r)]; by != "" && by != b.site {
			b.pair.forced[b.site+sourceKey(r)] = true
		}
		b.pair.mu.Unlock()
	}
	return resp, b.unknownID(r, err)
}

func (b *ruleBreaker) ResyncVolume(ctx context.Context, r *replication.ResyncVolumeRequest) (*replication.ResyncVolumeResponse, error) {
	if b.rule == breakResyncForces {
		r.Force = true
	}
	resp, err := b.rc.ResyncVolume(ctx, r)
	if b.rule == breakResyncReadyAtOnce && r.GetForce() && (err == nil || strings.Contains(status.Convert(err).Message(), "no snapshot details")) {
		return &replication.ResyncVolumeResponse{Ready: true}, nil
	}
	if b.rule == breakResyncRefusedAsPrimary {
		code := status.Code(err)
		key := b.site + sourceKey(r)
		b.pair.mu.Lock()
		first, seen := b.pair.refusal[sourceKey(r)]
		if !seen && err != nil && code != codes.NotFound && code != codes.Aborted && code != codes.Unavailable {
			b.pair.refusal[sourceKey(r)] = err
		}
		diverged := b.pair.forced[key]
		if r.GetForce() && err == nil {
			delete(b.pair.forced, key)
		}
		b.pair.mu.Unlock()
		if seen && diverged && !r.GetForce() && (err != nil || !resp.GetReady()) {
			return nil, first
		}
	}
	return resp, b.unknownID(r, err)
}

func (b *ruleBreaker) GetVolumeReplicationInfo(ctx context.Context, r *replication.GetVolumeReplicationInfoRequest) (*replication.GetVolumeReplicationInfoResponse, error) {
	resp, err := b.rc.GetVolumeReplicationInfo(ctx, r)
	if msg := status.Convert(err).Message(); b.rule == breakSecondaryInfoCode && (strings.Contains(msg, "not primary") || strings.Contains(msg, "not in primary state")) {
		return nil, status.Error(codes.Internal, "failed to get mirroring info: "+status.Convert(err).Message())
	}
	if err == nil && b.rule == breakFutureSync && resp.GetLastSyncTime() != nil {
		resp.LastSyncTime = timestamppb.New(resp.GetLastSyncTime().AsTime().Add(time.Hour))
	}
	if err == nil && b.rule == breakNoSyncTime {
		resp.LastSyncTime = nil
	}
	if err == nil && b.rule == breakSyncIsNow && resp.GetLastSyncTime() != nil {
		resp.LastSyncTime = timestamppb.Now()
	}
	if err == nil && b.rule == breakSyncFrozen && resp.GetLastSyncTime() != nil {
		src := r.GetReplicationSource()
		key := r.GetVolumeId() + src.GetVolume().GetVolumeId() + src.GetVolumegroup().GetVolumeGroupId()
		b.mu.Lock()
		if b.first[key] == nil {
			b.first[key] = resp.GetLastSyncTime()
		}
		resp.LastSyncTime = b.first[key]
		b.mu.Unlock()
	}
	return resp, b.unknownID(r, err)
}

func (b *ruleBreaker) GetReplicationDestinationInfo(ctx context.Context, r *replication.GetReplicationDestinationInfoRequest) (*replication.GetReplicationDestinationInfoResponse, error) {
	resp, err := b.rc.GetReplicationDestinationInfo(ctx, r)
	if g := resp.GetReplicationDestination().GetVolumegroup(); err == nil && g != nil && b.rule == breakDestinationEmpty {
		g.VolumeIds = map[string]string{}
	}
	return resp, err
}

// cephVolume is a scratch volume ID in ceph-csi's format, so that the
// suite's unknown IDs take that format too.
const cephVolume = "0001-0009-rook-ceph-0000000000000002-5f7a0b8e-1c2d-4e3f-9a8b-7c6d5e4f3a2b"

// TestConformanceCatchesBrokenRules: a server that breaks one rule of the
// specs, and nothing else, fails the suite in the checks that enforce that
// rule, in both driver profiles; the same sites without the breaker pass.
func TestConformanceCatchesBrokenRules(t *testing.T) {
	if testing.Short() {
		t.Skip("runs drover-sim processes")
	}
	bins := bintest.Build(t, "drctl", "drover-sim")
	both := func(ids ...string) []string {
		var out []string
		for _, k := range []string{"group", "volume"} {
			for _, id := range ids {
				out = append(out, "replication/"+k+"/"+id)
			}
		}
		slices.Sort(out)
		return out
	}
	var unknown []string
	for _, rpc := range []string{"DisableVolumeReplication", "GetVolumeReplicationInfo", "DemoteVolume", "PromoteVolume", "ResyncVolume"} {
		unknown = append(unknown, "unknown-id/"+rpc)
	}
	for _, driver := range []string{sim.DriverSpec, sim.DriverCephCSI} {
		var params []string
		if driver == sim.DriverCephCSI {
			params = append(slices.Clone(cephParams), "--volume", cephVolume)
		}
		for _, c := range []struct {
			rule string
			// want: the checks that fail, exactly; or, with some, checks
			// that fail among others whose details all say why.
			want []string
			some string
			// also: checks that may fail too, besides want (a rule whose
			// breakage other checks may see, depending on timing).
			also []string
			// bare: run without hooks (a check that needs them would see
			// the breakage first, and skip the rest).
			bare bool
		}{
			{breakResyncForces, both("resync-unforced-keeps-diverged"), "", nil, false},
			{breakPromoteUnreachable, both("promote-unforced-peer-unreachable-refused"), "", nil, false},
			{breakFutureSync, both("info-after-sync"), "in the future", nil, false},
			{breakUnknownIDCode, both(unknown...), "", nil, false},
			{breakSyncIsNow, both("info-link-down"), "", nil, false},
			// A frozen sync time fails info-advances; where the resync
			// answers ready=false while its copy replays (ceph-csi), the
			// resync may fail too: it waits for a newer sync, and none is
			// reported.
			{breakSyncFrozen, both("info-advances"), "", both("resync"), false},
			{breakResyncReadyAtOnce, both("resync-force-link-down"), "", nil, false},
			{breakPromoteIgnoresSync, both("promote-unforced-diverged-refused"), "", nil, false},
			{breakResyncRefusedAsPrimary, both("resync-unforced-keeps-diverged"), "", nil, false},
			{breakDestinationEmpty, []string{"replication/group/destination-info"}, "", nil, false},
			{breakDisablePeerNoop, both("disable"), "", nil, false},
			{breakPromoteOverPrimary, both("promote-unforced-refused"), "", nil, false},
			{breakPromoteDisabled, both("promote-disabled-refused"), "", nil, false},
			{breakEmptySource, []string{"replication/empty-source-refused"}, "", nil, false},
			{breakNoSyncTime, both("info-after-sync"), "without last_sync_time", nil, false},
			// The same driver promotes a diverged copy while its peer is
			// demoted: that check may fail too, when the flow gets there.
			{breakPromoteBeforeFinalSync, both("promote-before-final-sync-refused"), "", both("promote-unforced-diverged-refused"), false},
			// With hooks, the check before the planned promotion sees its
			// OK as a promotion made too early and the flow stops there.
			{breakPlannedPromoteNoop, both("promote"), "", nil, true},
			{breakUnadvertisedAnswers, []string{"identity/endpoint/unadvertised-unimplemented", "identity/peer/unadvertised-unimplemented"}, "", nil, false},
			// The suite reads a demotion back from this refusal: the first
			// demotion of the flow fails with it, and the rest is skipped.
			{breakSecondaryInfoCode, both("info-secondary-refused"), "", both("promote-before-final-sync-refused", "demote"), false},
		} {
			if driver == sim.DriverCephCSI && (c.rule == breakSyncIsNow || c.rule == breakSyncFrozen) {
				// The sync time's rules do not depend on the profile: the
				// spec's sites, a minute quicker, carry them (the ceph-csi
				// profile's honest run passes both checks).
				continue
			}
			if driver == sim.DriverCephCSI && c.rule == breakDestinationEmpty {
				// ceph-csi does not advertise GET_REPLICATION_DESTINATION_INFO:
				// its profile's destination-info skips.
				continue
			}
			t.Run(driver+" "+c.rule, func(t *testing.T) {
				// Each on a pair of its own, mostly waiting on the sites:
				// two at a time.
				t.Parallel()
				var extra []string
				if driver == sim.DriverCephCSI {
					extra = []string{"--volume", cephVolume}
				}
				p := startSimPair(t, bins, driver, extra...)
				broken := p
				known := []string{"vol-1", "vg-0001"}
				if driver == sim.DriverCephCSI {
					known = append(known, cephVolume)
				}
				memo := &pairMemo{refusal: map[string]error{}, forced: map[string]bool{}, forcedPromote: map[string]string{}, demoted: map[string]map[string]bool{}, seen: map[string]bool{}}
				eastRule := c.rule
				if c.rule == breakDisablePeerNoop {
					eastRule = ""
				}
				broken.east = serveBreaker(t, p.east, eastRule, memo, known...)
				broken.west = serveBreaker(t, p.west, c.rule, memo, known...)
				args := slices.Clone(params)
				if !c.bare {
					args = append(args, simHooks(t, p)...)
				}
				r := runConformance(t, bins, broken, args...)
				if r.code != 1 {
					for _, id := range c.want {
						t.Logf("%s: %s %s", id, r.result(id).Status, r.result(id).Detail)
					}
					t.Fatalf("exit %d, want 1 (a check failed)\n%s", r.code, r.stderr)
				}
				got := r.with(conformance.Fail)
				if len(c.also) > 0 {
					got = slices.DeleteFunc(got, func(id string) bool { return slices.Contains(c.also, id) && !slices.Contains(c.want, id) })
				}
				if c.some == "" && !slices.Equal(got, c.want) || c.some != "" && len(got) == 0 {
					for _, id := range got {
						t.Logf("%s: %s", id, r.result(id).Detail)
					}
					t.Fatalf("failed %v, want exactly %v", got, c.want)
				}
				if c.some != "" {
					for _, id := range c.want {
						if !slices.Contains(got, id) {
							t.Errorf("%s did not fail; failed: %v", id, got)
						}
					}
					for _, id := range got {
						if d := r.result(id).Detail; !strings.Contains(d, c.some) {
							t.Errorf("%s failed for another reason: %s", id, d)
						}
					}
				}
				if c.rule == breakUnknownIDCode && driver == sim.DriverCephCSI {
					if d := r.result("replication/volume/unknown-id/PromoteVolume").Detail; !strings.Contains(d, "well-formed unknown ceph-csi ID 0001-0009-rook-ceph-0000000000000002-") {
						t.Errorf("the unknown volume ID is not in ceph-csi's format: %s", d)
					}
				}
				if c.rule == breakPromoteUnreachable {
					// Both copies were primary: the clean-up made the
					// peer's follow the first's with force, then disabled
					// the primary first.
					cl := strings.Join(r.report.Cleanup, "\n")
					order := []string{"volume demote peer", "volume promote endpoint: done without force", "volume resync peer with force",
						"volume disable endpoint: done", "volume disable peer: done"}
					at := -1
					for _, want := range order {
						i := strings.Index(cl, want)
						if i <= at {
							t.Fatalf("clean-up lacks %q after the steps before it:\n%s", want, cl)
						}
						at = i
					}
				}
				if c.rule == breakDisablePeerNoop {
					// The peer's copy stays replicated whatever is asked:
					// the clean-up says so, and does not report it done.
					for _, kind := range []string{"volume", "group"} {
						want := kind + " disable peer: DisableVolumeReplication on peer answered OK, but peer's copy still takes ResyncVolume without force (OK): its replication is still on"
						if !slices.Contains(r.report.Cleanup, want) {
							t.Errorf("the clean-up does not report the peer's replication still on (%q):\n%s", want, strings.Join(r.report.Cleanup, "\n"))
						}
					}
					return
				}
				if cl := strings.Join(r.report.Cleanup, "\n"); c.rule == breakNoSyncTime && strings.Contains(cl, "disable: NOT done") {
					// Without sync times the clean-up cannot see the peer's
					// copy follow the first's, so leaves replication on; it
					// says so, with the roles it read back.
					if !strings.Contains(cl, "replication left on, as read back: endpoint's copy answers replication info as a primary's; peer's copy refuses replication info") {
						t.Errorf("the clean-up left replication on without the roles read back:\n%s", cl)
					}
					return
				}
				// Whatever broke, the clean-up left the pair as found.
				assertLeftAsFound(t, p)
				if t.Failed() {
					t.Logf("clean-up:\n%s", strings.Join(r.report.Cleanup, "\n"))
				}
			})
		}
	}
}
