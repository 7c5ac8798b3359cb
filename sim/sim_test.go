package sim_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/csiaddons/identity"
	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/internal/testpki"
	"github.com/drover-dr/drover/sim"
)

// The full method names real CSI-Addons drivers serve (wire-notes.md). The
// test calls each by its literal name on the wire, so a renamed package,
// service or method fails here.
var wireMethods = []struct {
	name     string
	req, out any
}{
	{"/identity.Identity/GetIdentity", &identity.GetIdentityRequest{}, &identity.GetIdentityResponse{}},
	{"/identity.Identity/GetCapabilities", &identity.GetCapabilitiesRequest{}, &identity.GetCapabilitiesResponse{}},
	{"/identity.Identity/Probe", &identity.ProbeRequest{}, &identity.ProbeResponse{}},
	{"/fence.FenceController/FenceClusterNetwork", &fence.FenceClusterNetworkRequest{Cidrs: []*fence.CIDR{{Cidr: "10.9.9.0/24"}}}, &fence.FenceClusterNetworkResponse{}},
	{"/fence.FenceController/UnfenceClusterNetwork", &fence.UnfenceClusterNetworkRequest{Cidrs: []*fence.CIDR{{Cidr: "10.9.9.0/24"}}}, &fence.UnfenceClusterNetworkResponse{}},
	{"/fence.FenceController/ListClusterFence", &fence.ListClusterFenceRequest{}, &fence.ListClusterFenceResponse{}},
	{"/fence.FenceController/GetFenceClients", &fence.GetFenceClientsRequest{}, &fence.GetFenceClientsResponse{}},
	{"/replication.Controller/EnableVolumeReplication", &replication.EnableVolumeReplicationRequest{ReplicationSource: group("vg-1")}, &replication.EnableVolumeReplicationResponse{}},
	{"/replication.Controller/DisableVolumeReplication", &replication.DisableVolumeReplicationRequest{ReplicationSource: group("vg-2")}, &replication.DisableVolumeReplicationResponse{}},
	{"/replication.Controller/PromoteVolume", &replication.PromoteVolumeRequest{ReplicationSource: group("vg-1")}, &replication.PromoteVolumeResponse{}},
	{"/replication.Controller/DemoteVolume", &replication.DemoteVolumeRequest{ReplicationSource: group("vg-1"), Force: true}, &replication.DemoteVolumeResponse{}},
	{"/replication.Controller/ResyncVolume", &replication.ResyncVolumeRequest{ReplicationSource: group("vg-1")}, &replication.ResyncVolumeResponse{}},
	{"/replication.Controller/GetVolumeReplicationInfo", &replication.GetVolumeReplicationInfoRequest{ReplicationSource: group("vg-1")}, &replication.GetVolumeReplicationInfoResponse{}},
}

func TestWireMethodNames(t *testing.T) {
	// The generated stubs name the same methods.
	generated := []string{
		identity.Identity_GetIdentity_FullMethodName, identity.Identity_GetCapabilities_FullMethodName, identity.Identity_Probe_FullMethodName,
		fence.FenceController_FenceClusterNetwork_FullMethodName, fence.FenceController_UnfenceClusterNetwork_FullMethodName,
		fence.FenceController_ListClusterFence_FullMethodName, fence.FenceController_GetFenceClients_FullMethodName,
		replication.Controller_EnableVolumeReplication_FullMethodName, replication.Controller_DisableVolumeReplication_FullMethodName,
		replication.Controller_PromoteVolume_FullMethodName, replication.Controller_DemoteVolume_FullMethodName,
		replication.Controller_ResyncVolume_FullMethodName, replication.Controller_GetVolumeReplicationInfo_FullMethodName,
	}
	for i, m := range wireMethods {
		if generated[i] != m.name {
			t.Errorf("generated stub names %q, the wire needs %q", generated[i], m.name)
		}
	}
	a, _ := startPair(t, pairOpts{})
	for _, m := range wireMethods {
		t.Run(m.name, func(t *testing.T) {
			err := a.conn.Invoke(ctxT(t), m.name, m.req, m.out)
			// Some calls answer a precondition error in this state; what
			// matters is that the method exists on the wire.
			if code := codesOf(err); code == codes.Unimplemented {
				t.Fatalf("%s is not served: %v", m.name, err)
			}
		})
	}
}

func TestIdentity(t *testing.T) {
	a, _ := startPair(t, pairOpts{})
	ctx := ctxT(t)
	id, err := a.id.GetIdentity(ctx, &identity.GetIdentityRequest{})
	mustOK(t, err)
	if id.Name == "" || id.VendorVersion == "" || id.Manifest["site"] != "a" {
		t.Fatalf("identity = %+v", id)
	}
	caps, err := a.id.GetCapabilities(ctx, &identity.GetCapabilitiesRequest{})
	mustOK(t, err)
	var fenceCap, clientsCap, replCap bool
	for _, c := range caps.Capabilities {
		switch c.GetNetworkFence().GetType() {
		case identity.Capability_NetworkFence_NETWORK_FENCE:
			fenceCap = true
		case identity.Capability_NetworkFence_GET_CLIENTS_TO_FENCE:
			clientsCap = true
		}
		if c.GetVolumeReplication().GetType() == identity.Capability_VolumeReplication_VOLUME_REPLICATION {
			replCap = true
		}
	}
	if !fenceCap || !clientsCap || !replCap {
		t.Fatalf("capabilities missing: fence=%v clients=%v replication=%v", fenceCap, clientsCap, replCap)
	}
	p, err := a.id.Probe(ctx, &identity.ProbeRequest{})
	mustOK(t, err)
	if !p.GetReady().GetValue() {
		t.Fatal("probe: not ready")
	}
}

// TestIdentityIgnoresSecrets: Probe, GetIdentity and GetCapabilities have
// no secrets field in the spec, so a site that requires secrets must still
// answer them; the fence and replication calls keep refusing a call
// without its secrets.
func TestIdentityIgnoresSecrets(t *testing.T) {
	a, _ := startPair(t, pairOpts{Secrets: map[string]string{"token": "s3cret"}})
	ctx := ctxT(t)
	if _, err := a.id.Probe(ctx, &identity.ProbeRequest{}); err != nil {
		t.Fatalf("Probe on a site with secrets: %v", err)
	}
	if _, err := a.id.GetIdentity(ctx, &identity.GetIdentityRequest{}); err != nil {
		t.Fatalf("GetIdentity on a site with secrets: %v", err)
	}
	if _, err := a.id.GetCapabilities(ctx, &identity.GetCapabilitiesRequest{}); err != nil {
		t.Fatalf("GetCapabilities on a site with secrets: %v", err)
	}
	_, err := a.fc.ListClusterFence(ctx, &fence.ListClusterFenceRequest{})
	wantCode(t, err, codes.Unauthenticated)
	_, err = a.fc.ListClusterFence(ctx, &fence.ListClusterFenceRequest{Secrets: map[string]string{"token": "s3cret"}})
	mustOK(t, err)
}

func TestCapabilitiesFollowUnimplemented(t *testing.T) {
	a, _ := startPair(t, pairOpts{TweakA: func(c *sim.Config) { c.Unimplemented = []string{"GetFenceClients"} }})
	caps, err := a.id.GetCapabilities(ctxT(t), &identity.GetCapabilitiesRequest{})
	mustOK(t, err)
	for _, c := range caps.Capabilities {
		if c.GetNetworkFence().GetType() == identity.Capability_NetworkFence_GET_CLIENTS_TO_FENCE {
			t.Fatal("GET_CLIENTS_TO_FENCE advertised while GetFenceClients is unimplemented")
		}
	}
	_, err = a.fc.GetFenceClients(ctxT(t), &fence.GetFenceClientsRequest{})
	wantCode(t, err, codes.Unimplemented)
}

func TestFencingRejectsClientBySourceAddress(t *testing.T) {
	a, b := startPair(t, pairOpts{})
	ctx := ctxT(t)
	fromA, fromB := dataClient(t, a, nodeA), dataClient(t, a, nodeB)
	if _, err := fromA.Write(ctx, "v1", 0, []byte("before")); err != nil {
		t.Fatalf("write before fence: %v", err)
	}
	if _, err := fromB.Write(ctx, "v1", 1, []byte("other node")); err != nil {
		t.Fatalf("write from the other node: %v", err)
	}

	// GetFenceClients reports the clients the site has served.
	cl, err := a.fc.GetFenceClients(ctx, &fence.GetFenceClientsRequest{})
	mustOK(t, err)
	var seen []string
	for _, c := range cl.Clients {
		seen = append(seen, c.Id+"="+c.Addresses[0].Cidr)
	}
	if got := strings.Join(seen, ","); got != "node-127.0.0.2=127.0.0.2/32,node-127.0.0.3=127.0.0.3/32" {
		t.Fatalf("GetFenceClients = %s", got)
	}

	// Fence node A's address through site B: the fence domain carries it to
	// site A, whose data path then refuses node A and only node A.
	_, err = b.fc.FenceClusterNetwork(ctx, &fence.FenceClusterNetworkRequest{Cidrs: []*fence.CIDR{{Cidr: nodeA + "/32"}}})
	mustOK(t, err)
	list, err := a.fc.ListClusterFence(ctx, &fence.ListClusterFenceRequest{})
	mustOK(t, err)
	if len(list.Cidrs) != 1 || list.Cidrs[0].Cidr != "127.0.0.2/32" {
		t.Fatalf("ListClusterFence on a = %v", list.Cidrs)
	}
	if _, err := fromA.Write(ctx, "v1", 0, []byte("after")); !errors.Is(err, sim.ErrFenced) {
		t.Fatalf("write from fenced client: err = %v, want ErrFenced", err)
	}
	if _, err := fromA.Read(ctx, "v1", 0); !errors.Is(err, sim.ErrFenced) {
		t.Fatalf("read from fenced client: err = %v, want ErrFenced", err)
	}
	if _, err := fromB.Write(ctx, "v1", 1, []byte("still fine")); err != nil {
		t.Fatalf("unfenced client refused: %v", err)
	}

	// Unfencing admits it again.
	_, err = a.fc.UnfenceClusterNetwork(ctx, &fence.UnfenceClusterNetworkRequest{Cidrs: []*fence.CIDR{{Cidr: nodeA + "/32"}}})
	mustOK(t, err)
	if _, err := fromA.Write(ctx, "v1", 0, []byte("after unfence")); err != nil {
		t.Fatalf("write after unfence: %v", err)
	}
	got, err := fromA.Read(ctx, "v1", 0)
	mustOK(t, err)
	if string(got) != "after unfence" {
		t.Fatalf("read %q", got)
	}
	eventually(t, 3*time.Second, "unfence to reach b", func() bool { return len(b.FencedCIDRs()) == 0 })
	check(t, a, b)
}

func TestReplicationLagAndCatchUp(t *testing.T) {
	a, b := startPair(t, pairOpts{})
	ctx := ctxT(t)
	src := group("vg-1")
	// Before replication is enabled, and before the first sync, there is
	// nothing to report.
	_, err := info(t, a, src)
	wantCode(t, err, codes.FailedPrecondition)
	enable(t, a, src)
	w := dataClient(t, a, nodeA)
	for i := 0; i < 5; i++ {
		_, err := w.Write(ctx, "v1", int64(i), bytes.Repeat([]byte{byte('a' + i)}, 512))
		mustOK(t, err)
	}
	waitSynced(t, a, "vg/vg-1")
	r, err := info(t, a, src)
	mustOK(t, err)
	if r.Status != replication.GetVolumeReplicationInfoResponse_HEALTHY {
		t.Fatalf("status %v %q", r.Status, r.StatusMessage)
	}
	if age := time.Since(r.LastSyncTime.AsTime()); age < 0 || age > 2*time.Second {
		t.Fatalf("last sync %v ago", age)
	}
	// The secondary holds the data and refuses writes.
	rb := dataClient(t, b, nodeB)
	got, err := rb.Read(ctx, "v1", 3)
	mustOK(t, err)
	if !bytes.Equal(got, bytes.Repeat([]byte{'d'}, 512)) {
		t.Fatalf("secondary block 3 = %q", got[:8])
	}
	if _, err := rb.Write(ctx, "v1", 3, []byte("x")); !errors.Is(err, sim.ErrReadOnly) {
		t.Fatalf("write on secondary: %v", err)
	}
	// Cut the link: lag grows, status degrades, writes keep landing on A.
	// A shipping round already past its link check when the link goes
	// down still ships; rounds run one at a time, so once one has marked
	// the copy DEGRADED none is in flight.
	a.SetLink(false)
	eventually(t, 3*time.Second, "status DEGRADED", func() bool {
		r, err := info(t, a, src)
		return err == nil && r.Status == replication.GetVolumeReplicationInfoResponse_DEGRADED
	})
	cut, err := info(t, a, src)
	mustOK(t, err)
	_, err = w.Write(ctx, "v1", 9, []byte("during the cut"))
	mustOK(t, err)
	time.Sleep(200 * time.Millisecond)
	r, err = info(t, a, src)
	mustOK(t, err)
	if !r.LastSyncTime.AsTime().Equal(cut.LastSyncTime.AsTime()) {
		t.Fatal("last sync time moved while the link was down")
	}
	if lag := time.Since(r.LastSyncTime.AsTime()); lag < 200*time.Millisecond {
		t.Fatalf("lag %v did not grow while the link was down", lag)
	}
	if _, err := rb.Read(ctx, "v1", 9); !errors.Is(err, sim.ErrNotFound) {
		t.Fatalf("write made during the cut reached the secondary: %v", err)
	}
	// Restore: the peer catches up and the sync time moves on.
	a.SetLink(true)
	waitSynced(t, a, "vg/vg-1")
	got, err = rb.Read(ctx, "v1", 9)
	mustOK(t, err)
	if string(got) != "during the cut" {
		t.Fatalf("caught-up block = %q", got)
	}
	r, err = info(t, a, src)
	mustOK(t, err)
	if !r.LastSyncTime.AsTime().After(cut.LastSyncTime.AsTime()) || r.LastSyncBytes < 0 {
		t.Fatalf("after catch-up: %v", r)
	}
	check(t, a, b)
}

func TestSchedulingIntervalParameter(t *testing.T) {
	a, _ := startPair(t, pairOpts{Interval: 20 * time.Millisecond})
	ctx := ctxT(t)
	_, err := a.rc.EnableVolumeReplication(ctx, &replication.EnableVolumeReplicationRequest{ReplicationSource: group("vg-1"), Parameters: map[string]string{"mirroringMode": "snapshot", "schedulingInterval": "1h"}})
	mustOK(t, err)
	// The first sync happens at once; the next only after an hour.
	waitSynced(t, a, "vg/vg-1")
	first, err := info(t, a, group("vg-1"))
	mustOK(t, err)
	time.Sleep(200 * time.Millisecond)
	again, err := info(t, a, group("vg-1"))
	mustOK(t, err)
	if !again.LastSyncTime.AsTime().Equal(first.LastSyncTime.AsTime()) {
		t.Fatal("a unit scheduled hourly synced again within 200ms")
	}
	_, err = a.rc.EnableVolumeReplication(ctx, &replication.EnableVolumeReplicationRequest{ReplicationSource: group("vg-2"), Parameters: map[string]string{"schedulingInterval": "often"}})
	wantCode(t, err, codes.InvalidArgument)
	_, err = a.rc.EnableVolumeReplication(ctx, &replication.EnableVolumeReplicationRequest{ReplicationSource: group("vg-2"), Parameters: map[string]string{"mirroringMode": "journal"}})
	wantCode(t, err, codes.InvalidArgument)
}

// TestFailoverReprotectFailback walks the whole DR cycle on the storage:
// site A lost while writing, B force-promoted after fencing A's nodes, A
// back and resynced, then a planned move back to A with no data loss. The
// invariant checker runs at every stage.
func TestFailoverReprotectFailback(t *testing.T) {
	a, b := startPair(t, pairOpts{})
	ctx := ctxT(t)
	src := group("vg-1")
	enable(t, a, src)
	wa := dataClient(t, a, nodeA)
	for i := 0; i < 10; i++ {
		_, err := wa.Write(ctx, "v1", int64(i%4), []byte(fmt.Sprintf("a-%d", i)))
		mustOK(t, err)
	}
	waitSynced(t, a, "vg/vg-1")
	// The link goes first, then the site: writes in between are acked on A
	// and never reach B (once a round has marked the copy DEGRADED, none
	// that passed its link check before the cut is still shipping).
	a.SetLink(false)
	eventually(t, 3*time.Second, "status DEGRADED", func() bool {
		r, err := info(t, a, src)
		return err == nil && r.Status == replication.GetVolumeReplicationInfoResponse_DEGRADED
	})
	for i := 10; i < 13; i++ {
		_, err := wa.Write(ctx, "v2", int64(i), []byte(fmt.Sprintf("a-%d", i)))
		mustOK(t, err)
	}
	a.Down()
	if _, err := wa.Write(ctx, "v1", 0, []byte("lost site")); !errors.Is(err, sim.ErrUnavailable) {
		t.Fatalf("write to a downed site: %v", err)
	}

	// Failover: fence A's nodes (through B), promote B without force fails,
	// with force succeeds.
	_, err := b.fc.FenceClusterNetwork(ctx, &fence.FenceClusterNetworkRequest{Cidrs: []*fence.CIDR{{Cidr: nodeA + "/32"}}})
	mustOK(t, err)
	_, err = b.rc.PromoteVolume(ctx, &replication.PromoteVolumeRequest{ReplicationSource: src})
	wantCode(t, err, codes.FailedPrecondition)
	_, err = b.rc.PromoteVolume(ctx, &replication.PromoteVolumeRequest{ReplicationSource: src, Force: true})
	mustOK(t, err)
	wb := dataClient(t, b, nodeB)
	_, err = wb.Write(ctx, "v1", 0, []byte("b-0"))
	mustOK(t, err)
	rep := check(t, a, b)
	if len(rep.Lost) != 3 {
		t.Fatalf("lost %d writes, want the 3 acked after the last sync: %+v", len(rep.Lost), rep.Lost)
	}

	// Site A returns, still primary in its own eyes: its nodes are fenced
	// by the fence domain, so it cannot take writes; both sides report the
	// split-brain.
	a.SetLink(true)
	mustOK(t, a.Up())
	if _, err := wa.Write(ctx, "v1", 0, []byte("split")); !errors.Is(err, sim.ErrFenced) {
		t.Fatalf("write from A's fenced node after A returned: %v", err)
	}
	eventually(t, 3*time.Second, "split-brain reported", func() bool {
		r, err := info(t, a, src)
		return err == nil && r.Status == replication.GetVolumeReplicationInfoResponse_ERROR
	})

	// Reprotect: resync refuses a primary, demote with force, resync until
	// ready, then B reports a fresh sync, then unfence A.
	_, err = a.rc.ResyncVolume(ctx, &replication.ResyncVolumeRequest{ReplicationSource: src})
	wantCode(t, err, codes.FailedPrecondition)
	_, err = a.rc.DemoteVolume(ctx, &replication.DemoteVolumeRequest{ReplicationSource: src, Force: true})
	mustOK(t, err)
	// Both copies were written as primary: as ceph-csi does, a resync
	// without force refuses to discard A's divergent writes, and says so;
	// nothing changes until a forced one.
	_, err = a.rc.ResyncVolume(ctx, &replication.ResyncVolumeRequest{ReplicationSource: src})
	wantCode(t, err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), "Force resync") || !strings.Contains(err.Error(), "3 write(s)") {
		t.Fatalf("non-forced resync of a diverged copy: %v", err)
	}
	if u := a.Snapshot().Unit("vg/vg-1"); u.Resyncing {
		t.Fatal("a refused resync started resyncing")
	}
	resyncStart := time.Now()
	_, err = a.rc.ResyncVolume(ctx, &replication.ResyncVolumeRequest{ReplicationSource: src, Force: true})
	mustOK(t, err)
	eventually(t, 5*time.Second, "resync ready", func() bool {
		r, err := a.rc.ResyncVolume(ctx, &replication.ResyncVolumeRequest{ReplicationSource: src})
		mustOK(t, err)
		return r.Ready
	})
	eventually(t, 3*time.Second, "a sync newer than the resync start", func() bool {
		r, err := info(t, b, src)
		return err == nil && r.LastSyncTime.AsTime().After(resyncStart) && r.Status == replication.GetVolumeReplicationInfoResponse_HEALTHY
	})
	_, err = b.fc.UnfenceClusterNetwork(ctx, &fence.UnfenceClusterNetworkRequest{Cidrs: []*fence.CIDR{{Cidr: nodeA + "/32"}}})
	mustOK(t, err)
	got, err := dataClient(t, a, nodeA).Read(ctx, "v1", 0)
	mustOK(t, err)
	if string(got) != "b-0" {
		t.Fatalf("resynced copy holds %q, want B's write", got)
	}
	if _, err := dataClient(t, a, nodeA).Read(ctx, "v2", 11); !errors.Is(err, sim.ErrNotFound) {
		t.Fatalf("divergent write survived the resync: %v", err)
	}
	check(t, a, b)

	// Failback (planned): more writes on B, demote B without force, promote
	// A without force once the final sync has landed. No write is lost.
	for i := 0; i < 5; i++ {
		_, err := wb.Write(ctx, "v2", int64(i), []byte(fmt.Sprintf("b-%d", i)))
		mustOK(t, err)
	}
	_, err = b.rc.DemoteVolume(ctx, &replication.DemoteVolumeRequest{ReplicationSource: src})
	mustOK(t, err)
	if _, err := wb.Write(ctx, "v2", 0, []byte("late")); !errors.Is(err, sim.ErrReadOnly) {
		t.Fatalf("write on demoted copy: %v", err)
	}
	eventually(t, 5*time.Second, "planned promotion", func() bool {
		_, err := a.rc.PromoteVolume(ctx, &replication.PromoteVolumeRequest{ReplicationSource: src})
		if err != nil && codesOf(err) != codes.FailedPrecondition {
			t.Fatalf("promote: %v", err)
		}
		return err == nil
	})
	eventually(t, 5*time.Second, "resync of the old primary", func() bool {
		r, err := b.rc.ResyncVolume(ctx, &replication.ResyncVolumeRequest{ReplicationSource: src})
		mustOK(t, err)
		return r.Ready
	})
	got, err = dataClient(t, a, nodeA).Read(ctx, "v2", 4)
	mustOK(t, err)
	if string(got) != "b-4" {
		t.Fatalf("after failback v2/4 = %q", got)
	}
	rep = check(t, a, b)
	if len(rep.Lost) != 3 {
		t.Fatalf("the planned failback lost writes: %d lost in all, want only the 3 from the failover", len(rep.Lost))
	}
}

func TestRestartFromStateFile(t *testing.T) {
	a, b := startPair(t, pairOpts{})
	ctx := ctxT(t)
	enable(t, a, group("vg-1"))
	w := dataClient(t, a, nodeA)
	var acked []sim.WriteResult
	for i := 0; i < 20; i++ {
		r, err := w.Write(ctx, "v1", int64(i), []byte(fmt.Sprintf("block-%d", i)))
		mustOK(t, err)
		acked = append(acked, r)
	}
	_, err := a.fc.FenceClusterNetwork(ctx, &fence.FenceClusterNetworkRequest{Cidrs: []*fence.CIDR{{Cidr: "10.1.0.0/16"}}})
	mustOK(t, err)
	before := a.Snapshot()
	a.Close()

	re := startSite(t, a.cfg)
	after := re.Snapshot()
	ua, ub := before.Unit("vg/vg-1"), after.Unit("vg/vg-1")
	if ub.Role != sim.RolePrimary || !ub.Enabled || ub.Seq != ua.Seq || len(ub.Writes) != len(acked) {
		t.Fatalf("restored unit: role %s enabled %v seq %d writes %d; before: seq %d writes %d", ub.Role, ub.Enabled, ub.Seq, len(ub.Writes), ua.Seq, len(acked))
	}
	w2 := dataClient(t, re, nodeA)
	for i := 0; i < 20; i++ {
		got, err := w2.Read(ctx, "v1", int64(i))
		mustOK(t, err)
		if string(got) != fmt.Sprintf("block-%d", i) {
			t.Fatalf("block %d after restart = %q", i, got)
		}
	}
	if f := re.FencedCIDRs(); len(f) != 1 || f[0] != "10.1.0.0/16" {
		t.Fatalf("fences after restart = %v", f)
	}
	waitSynced(t, re, "vg/vg-1")
	check(t, re, b)
}

// An interval with nothing to ship still syncs (the primary's last sync
// time moves on), but the secondary does not rewrite its copy's file: a
// site of thousands of groups would otherwise spend the machine rewriting
// them every interval. What it holds stays what a restart reads.
func TestIdleSyncRewritesNothing(t *testing.T) {
	a, b := startPair(t, pairOpts{})
	ctx := ctxT(t)
	enable(t, a, group("vg-1"))
	w := dataClient(t, a, nodeA)
	_, err := w.Write(ctx, "v1", 0, []byte("before the idle rounds"))
	mustOK(t, err)
	waitSynced(t, a, "vg/vg-1")
	file := filepath.Join(b.cfg.StateDir, "units", "vg_vg-1.json")
	inode := func() uint64 {
		t.Helper()
		fi, err := os.Stat(file)
		mustOK(t, err)
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	// The sync in flight when waitSynced saw the first one may still land.
	time.Sleep(2 * a.cfg.SyncInterval)
	before, synced := inode(), a.Snapshot().Unit("vg/vg-1").LastSync.SnapTime
	time.Sleep(6 * a.cfg.SyncInterval)
	if last := a.Snapshot().Unit("vg/vg-1").LastSync.SnapTime; !last.After(synced) {
		t.Fatalf("no sync round in six intervals: last sync still %v", last)
	}
	if inode() != before {
		t.Fatal("the secondary rewrote its copy's file for empty deltas")
	}
	// A change is written.
	_, err = w.Write(ctx, "v1", 1, []byte("after"))
	mustOK(t, err)
	waitSynced(t, a, "vg/vg-1")
	eventually(t, 5*time.Second, "the change written on the secondary", func() bool { return inode() != before })
	b.Close()
	rb := dataClient(t, startSite(t, b.cfg), nodeB)
	for i, want := range []string{"before the idle rounds", "after"} {
		got, err := rb.Read(ctx, "v1", int64(i))
		mustOK(t, err)
		if string(got) != want {
			t.Fatalf("block %d after the secondary's restart = %q", i, got)
		}
	}
}

func TestSiteDownAndUp(t *testing.T) {
	a, b := startPair(t, pairOpts{})
	enable(t, a, group("vg-1"))
	a.Down()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := a.id.Probe(ctx, &identity.ProbeRequest{})
	if c := codesOf(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
		t.Fatalf("probe of a downed site: %v", err)
	}
	eventually(t, 3*time.Second, "b sees no primary", func() bool { return b.Snapshot().Unit("vg/vg-1").Role == sim.RoleSecondary })
	up(t, a)
	waitSynced(t, a, "vg/vg-1")
}

func TestFaultInjection(t *testing.T) {
	a, _ := startPair(t, pairOpts{})
	ctx := ctxT(t)
	mustOK(t, a.SetFaults([]sim.FaultRule{{Method: "ListClusterFence", Code: "UNAVAILABLE", Count: 2}}))
	for i := 0; i < 2; i++ {
		_, err := a.fc.ListClusterFence(ctx, &fence.ListClusterFenceRequest{})
		wantCode(t, err, codes.Unavailable)
	}
	_, err := a.fc.ListClusterFence(ctx, &fence.ListClusterFenceRequest{})
	mustOK(t, err)
	if n := a.FaultCounts()["ListClusterFence:Unavailable"]; n != 2 {
		t.Fatalf("fired %d times, want 2", n)
	}
	// A probability rule fires on some calls and not others (seeded).
	mustOK(t, a.SetFaults([]sim.FaultRule{{Method: "Probe", Code: "DEADLINE_EXCEEDED", Probability: 0.5}}))
	fails := 0
	for i := 0; i < 40; i++ {
		if _, err := a.id.Probe(ctx, &identity.ProbeRequest{}); err != nil {
			wantCode(t, err, codes.DeadlineExceeded)
			fails++
		}
	}
	if fails == 0 || fails == 40 {
		t.Fatalf("p=0.5 fired %d of 40 times", fails)
	}
	// Latency longer than the caller's deadline ends in DEADLINE_EXCEEDED.
	mustOK(t, a.SetFaults([]sim.FaultRule{{Method: "PromoteVolume", Latency: time.Second}}))
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = a.rc.PromoteVolume(short, &replication.PromoteVolumeRequest{ReplicationSource: group("vg-1")})
	wantCode(t, err, codes.DeadlineExceeded)
	if err := a.SetFaults([]sim.FaultRule{{Method: "NoSuchRPC", Code: "ABORTED", Count: 1}}); err == nil {
		t.Fatal("a fault on an unknown RPC was accepted")
	}
	r, err := sim.ParseFaultRule("PromoteVolume:ABORTED,count=3,latency=50ms")
	mustOK(t, err)
	if r.Method != "PromoteVolume" || r.Code != "ABORTED" || r.Count != 3 || r.Latency != 50*time.Millisecond {
		t.Fatalf("parsed %+v", r)
	}
	if r, err := sim.ParseFaultRule("PromoteVolume,latency=4s,detached"); err != nil || !r.Detached || r.Latency != 4*time.Second {
		t.Fatalf("parsed %+v, %v", r, err)
	}
}

// TestDetachedCallRunsToItsEnd: a Detached latency is a driver that
// goes on with a call its caller gave up on (ceph-csi's librbd calls):
// the caller's deadline ends its wait, not the call, which holds the
// volume (the next call is ABORTED) and then takes effect. Without
// Detached, the caller's deadline ends the call and frees the volume: the
// next call is served long before the latency would have ended.
func TestDetachedCallRunsToItsEnd(t *testing.T) {
	for _, c := range []struct {
		detached bool
		latency  time.Duration
	}{{true, 3 * time.Second}, {false, time.Minute}} {
		t.Run(fmt.Sprintf("detached=%v", c.detached), func(t *testing.T) {
			a, b := startPair(t, pairOpts{})
			ctx := ctxT(t)
			enable(t, a, group("vg-1"))
			mustOK(t, b.SetFaults([]sim.FaultRule{{Method: "PromoteVolume", Latency: c.latency, Detached: c.detached}}))
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			_, err := b.rc.PromoteVolume(short, &replication.PromoteVolumeRequest{ReplicationSource: group("vg-1"), Force: true})
			wantCode(t, err, codes.DeadlineExceeded)
			mustOK(t, b.SetFaults(nil))
			promote := func() error {
				_, err := b.rc.PromoteVolume(ctx, &replication.PromoteVolumeRequest{ReplicationSource: group("vg-1"), Force: true})
				return err
			}
			if !c.detached {
				// The call given up on ends with its caller (once the
				// server sees the cancellation): the next one is served
				// well within the minute of latency.
				eventually(t, 10*time.Second, "the volume freed by the call given up on", func() bool { return promote() == nil })
				return
			}
			wantCode(t, promote(), codes.Aborted)
			eventually(t, 10*time.Second, "the call given up on to take effect", func() bool {
				return b.Snapshot().Unit("vg/vg-1").Role == sim.RolePrimary
			})
		})
	}
}

// TestDiscardedFence: a Discard rule makes FenceClusterNetwork answer
// success without applying the fence, on either site of the domain: the
// list stays empty and the client keeps writing. Once spent, fencing works
// again. The rule is refused on RPCs it does not apply to.
func TestDiscardedFence(t *testing.T) {
	a, b := startPair(t, pairOpts{})
	ctx := ctxT(t)
	fromA := dataClient(t, a, nodeA)
	mustOK(t, b.SetFaults([]sim.FaultRule{{Method: "FenceClusterNetwork", Discard: true, Count: 1}}))
	req := &fence.FenceClusterNetworkRequest{Cidrs: []*fence.CIDR{{Cidr: nodeA + "/32"}}}
	_, err := b.fc.FenceClusterNetwork(ctx, req)
	mustOK(t, err)
	for _, s := range []*siteUnderTest{a, b} {
		list, err := s.fc.ListClusterFence(ctx, &fence.ListClusterFenceRequest{})
		mustOK(t, err)
		if len(list.Cidrs) != 0 {
			t.Fatalf("a discarded fence is listed: %v", list.Cidrs)
		}
	}
	if _, err := fromA.Write(ctx, "v1", 0, []byte("still writing")); err != nil {
		t.Fatalf("a discarded fence refused a write: %v", err)
	}
	if n := b.FaultCounts()["FenceClusterNetwork:DISCARDED"]; n != 1 {
		t.Fatalf("discard fired %d times, want 1", n)
	}
	// Spent: the next fence takes effect.
	_, err = b.fc.FenceClusterNetwork(ctx, req)
	mustOK(t, err)
	if got := b.FencedCIDRs(); len(got) != 1 || got[0] != nodeA+"/32" {
		t.Fatalf("fenced after the rule was spent: %v", got)
	}
	if _, err := fromA.Write(ctx, "v1", 0, []byte("after")); !errors.Is(err, sim.ErrFenced) {
		t.Fatalf("write after a real fence: %v, want ErrFenced", err)
	}
	// An unfence can be discarded too: the fence stays in place.
	mustOK(t, b.SetFaults([]sim.FaultRule{{Method: "UnfenceClusterNetwork", Discard: true, Probability: 1}}))
	_, err = b.fc.UnfenceClusterNetwork(ctx, &fence.UnfenceClusterNetworkRequest{Cidrs: req.Cidrs})
	mustOK(t, err)
	if got := b.FencedCIDRs(); len(got) != 1 {
		t.Fatalf("a discarded unfence took effect: %v", got)
	}

	for _, tc := range []struct {
		rule sim.FaultRule
		want string
	}{
		{sim.FaultRule{Method: "PromoteVolume", Discard: true, Count: 1}, "discard applies to"},
		{sim.FaultRule{Method: "FenceClusterNetwork", Discard: true, Code: "ABORTED", Count: 1}, "cannot also return"},
		{sim.FaultRule{Method: "FenceClusterNetwork", Discard: true}, "count>0 or probability>0"},
	} {
		if err := b.SetFaults([]sim.FaultRule{tc.rule}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetFaults(%+v) = %v, want an error with %q", tc.rule, err, tc.want)
		}
	}
	r, err := sim.ParseFaultRule("FenceClusterNetwork,discard,count=2")
	mustOK(t, err)
	if r.Method != "FenceClusterNetwork" || !r.Discard || r.Count != 2 || r.Code != "" {
		t.Fatalf("parsed %+v", r)
	}
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := testpki.NewCA("drover-test-ca")
	mustOK(t, err)
	files, err := ca.WriteFiles(dir, "site-a")
	mustOK(t, err)
	client, err := ca.WriteFiles(dir, "drover")
	mustOK(t, err)
	cfg := sim.Config{Name: "tls", GRPCAddr: freeAddr(t), DataAddr: freeAddr(t), Primary: true,
		Groups: []sim.GroupSpec{{ID: "vg-1", Volumes: []string{"v1"}}},
		TLS:    &sim.TLSConfig{CertFile: files.Cert, KeyFile: files.Key, ClientCAFile: files.CA}}
	s, err := sim.New(cfg, quietLog())
	mustOK(t, err)
	mustOK(t, s.Start())
	t.Cleanup(func() { s.Close() })

	pair, err := tlsClientConfig(client.Cert, client.Key, files.CA)
	mustOK(t, err)
	ok := attach(t, s, cfg, grpc.WithTransportCredentials(credentials.NewTLS(pair)))
	_, err = ok.id.Probe(ctxT(t), &identity.ProbeRequest{})
	mustOK(t, err)

	other, err := testpki.NewCA("someone-else")
	mustOK(t, err)
	otherFiles, err := other.WriteFiles(dir, "other")
	mustOK(t, err)
	wrong, err := tlsClientConfig(client.Cert, client.Key, otherFiles.CA)
	mustOK(t, err)
	bad := attach(t, s, cfg, grpc.WithTransportCredentials(credentials.NewTLS(wrong)))
	_, err = bad.id.Probe(ctxT(t), &identity.ProbeRequest{})
	wantCode(t, err, codes.Unavailable)
	if !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("wrong CA: error does not name the certificate problem: %v", err)
	}
	plain := attach(t, s, cfg, grpc.WithTransportCredentials(insecure.NewCredentials()))
	_, err = plain.id.Probe(ctxT(t), &identity.ProbeRequest{})
	wantCode(t, err, codes.Unavailable)
}

func TestCheckerCatchesViolations(t *testing.T) {
	// A split-brain made on purpose: B promoted with force while A is up,
	// linked and unfenced, and A keeps taking writes.
	a, b := startPair(t, pairOpts{})
	ctx := ctxT(t)
	enable(t, a, group("vg-1"))
	wa := dataClient(t, a, nodeA)
	_, err := wa.Write(ctx, "v1", 0, []byte("one"))
	mustOK(t, err)
	waitSynced(t, a, "vg/vg-1")
	_, err = b.rc.PromoteVolume(ctx, &replication.PromoteVolumeRequest{ReplicationSource: group("vg-1"), Force: true})
	mustOK(t, err)
	time.Sleep(5 * time.Millisecond)
	_, err = wa.Write(ctx, "v1", 1, []byte("split"))
	mustOK(t, err)
	r := sim.Check(a.Snapshot(), b.Snapshot())
	if !hasViolation(r, sim.SplitBrain) {
		t.Fatalf("split-brain not reported: %s", r)
	}

	// A write logged from a fenced client, and a synced write that is lost.
	st := &sim.State{Site: "x", Units: []sim.UnitState{{
		Kind: sim.KindGroup, ID: "g", Role: sim.RolePrimary, Epoch: 2, Seq: 1,
		Lineage: []sim.Fork{{Epoch: 1}, {Epoch: 2, BaseSeq: 1}},
		Blocks:  map[string]map[int64]sim.Block{"v": {0: {Data: []byte("z"), Seq: 1, Epoch: 1}}},
	}}}
	old := &sim.State{Site: "y", Units: []sim.UnitState{{
		Kind: sim.KindGroup, ID: "g", Role: sim.RoleSecondary, Epoch: 1, Seq: 3, Demoted: true,
		Writes: []sim.WriteRecord{
			{Volume: "v", Block: 0, Seq: 1, Epoch: 1, Time: time.Unix(10, 0), Client: "10.0.0.5", Sum: "x"},
			{Volume: "v", Block: 1, Seq: 2, Epoch: 1, Time: time.Unix(20, 0), Client: "10.0.0.5"},
		},
		Syncs: []sim.SyncRecord{{Time: time.Unix(21, 0), Epoch: 1, Seq: 2}},
	}}, FenceLog: []sim.FenceEvent{{FenceEntry: sim.FenceEntry{CIDR: "10.0.0.0/24", Fenced: true, Time: time.Unix(15, 0), Origin: "x"}}}}
	r = sim.Check(st, old)
	for _, kind := range []string{sim.FencedWrite, sim.LostSyncedWrite, sim.DataMismatch} {
		if !hasViolation(r, kind) {
			t.Errorf("%s not reported: %s", kind, r)
		}
	}

	// A site enforces a fence from when it learns it: the write y took
	// between the fence's origin at x (15) and its arrival (17) is not a
	// fenced write; the one after the arrival is.
	late := &sim.State{Site: "y", Units: []sim.UnitState{{
		Kind: sim.KindGroup, ID: "h", Role: sim.RolePrimary, Epoch: 1, Seq: 2, Lineage: []sim.Fork{{Epoch: 1}},
		Writes: []sim.WriteRecord{
			{Volume: "v", Block: 0, Seq: 1, Epoch: 1, Time: time.Unix(16, 0), Client: "10.0.0.5"},
			{Volume: "v", Block: 1, Seq: 2, Epoch: 1, Time: time.Unix(18, 0), Client: "10.0.0.5"},
		},
	}}, FenceLog: []sim.FenceEvent{{FenceEntry: sim.FenceEntry{CIDR: "10.0.0.0/24", Fenced: true, Time: time.Unix(15, 0), Origin: "x"}, Learned: time.Unix(17, 0)}}}
	var fenced []string
	for _, v := range sim.Check(late).Violations {
		if v.Kind == sim.FencedWrite {
			fenced = append(fenced, v.Detail)
		}
	}
	if len(fenced) != 1 || !strings.Contains(fenced[0], "write seq 2 ") {
		t.Errorf("fenced writes = %q; want only seq 2, accepted after y learned of the fence", fenced)
	}
}

func hasViolation(r *sim.Report, kind string) bool {
	for _, v := range r.Violations {
		if v.Kind == kind {
			return true
		}
	}
	return false
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		cfg  sim.Config
		want string
	}{
		{"no name", sim.Config{GRPCAddr: "x", DataAddr: "y"}, "name is required"},
		{"volume twice", sim.Config{Name: "s", GRPCAddr: "x", DataAddr: "y", Groups: []sim.GroupSpec{{ID: "g", Volumes: []string{"v"}}}, Volumes: []string{"v"}}, `volume "v" is listed twice`},
		{"empty group", sim.Config{Name: "s", GRPCAddr: "x", DataAddr: "y", Groups: []sim.GroupSpec{{ID: "g"}}}, `volume group "g" has no volumes`},
		{"bad fault", sim.Config{Name: "s", GRPCAddr: "x", DataAddr: "y", Faults: []sim.FaultRule{{Method: "PromoteVolume", Code: "NOPE", Count: 1}}}, `unknown gRPC code "NOPE"`},
		{"bad unimplemented", sim.Config{Name: "s", GRPCAddr: "x", DataAddr: "y", Unimplemented: []string{"Frobnicate"}}, `unknown RPC "Frobnicate"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sim.New(tc.cfg, quietLog())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	// A state dir belongs to one site.
	dir := filepath.Join(t.TempDir(), "st")
	s, err := sim.New(sim.Config{Name: "one", GRPCAddr: "x", DataAddr: "y", StateDir: dir}, quietLog())
	mustOK(t, err)
	s.Close()
	if _, err := sim.New(sim.Config{Name: "two", GRPCAddr: "x", DataAddr: "y", StateDir: dir}, quietLog()); err == nil || !strings.Contains(err.Error(), `belongs to site "one"`) {
		t.Fatalf("reusing another site's state dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "site.json")); err != nil {
		t.Fatal(err)
	}
}
