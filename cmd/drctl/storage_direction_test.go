package main_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestDirectionChecksAskTheStorage: drctl's direction check of a
// reprotect goes by the storage when the record contradicts it. With
// east recorded as primary (by protection) and holding the primary
// copy, a reprotect from east is refused (exit 2): the storage agrees
// with the record. Once db has moved to west by hand (east demoted, west
// promoted), the record still names east, but the storage does not: the
// reprotect from east goes on, saying why, and completes, leaving west
// primary and east its replica.
func TestDirectionChecksAskTheStorage(t *testing.T) {
	_, c, shop, east, west := shopWithWorker(t)

	c.ok(nil, "protect", "start", shop, "--primary", "east", "--interval", "200ms")
	c.eventually("protection from east", "shop", func(s statusOut) bool {
		return s.Protection != nil && s.Protection.Primary == "east" && !s.Protection.Groups["db"].LastSync.IsZero()
	})
	c.ok(nil, "protect", "stop", shop)
	c.want(2, "east is the primary", "reprotect", shop, "--from", "east", "--yes")
	if u := east.Snapshot().Unit("vg/vg-1"); u.Role != sim.RolePrimary {
		t.Fatalf("after the refused reprotect east's vg-1 is %s", u.Role)
	}

	// db moves to west by hand; the record does not hear of it.
	db := &replication.ReplicationSource{Type: &replication.ReplicationSource_Volumegroup{
		Volumegroup: &replication.ReplicationSource_VolumeGroupSource{VolumeGroupId: "vg-1"}}}
	for _, s := range []struct {
		site    *simtest.Site
		promote bool
	}{{east, false}, {west, true}} {
		conn, err := grpc.NewClient(s.site.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		rc := replication.NewControllerClient(conn)
		if s.promote {
			_, err = rc.PromoteVolume(t.Context(), &replication.PromoteVolumeRequest{ReplicationSource: db, Force: true})
		} else {
			_, err = rc.DemoteVolume(t.Context(), &replication.DemoteVolumeRequest{ReplicationSource: db, Force: true})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs := c.run("reprotect", shop, "--from", "east", "--yes", "--wait")
	if code != 0 || !strings.Contains(errs, "but the storage says otherwise: the record names east as primary, but its storage says it does not replicate from there") {
		t.Fatalf("reprotect from east after db moved to west: exit %d\n%s%s", code, out, errs)
	}
	if u := west.Snapshot().Unit("vg/vg-1"); u.Role != sim.RolePrimary {
		t.Fatalf("after the reprotect west's vg-1 is %s, want primary", u.Role)
	}
	if u := east.Snapshot().Unit("vg/vg-1"); u.Role != sim.RoleSecondary {
		t.Fatalf("after the reprotect east's vg-1 is %s, want secondary", u.Role)
	}
}

// TestForgedRecordDoesNotAimAReprotect is issue 42's fourth attack: after
// a failover to west, someone without the workers' record key signals
// the plan's record that east is primary again (a forged completed
// failover to east), then the operator runs the `drctl reprotect --from
// west` that such a record seems to ask for. The record refuses the
// forged change and keeps west as primary, with the refusal naming the
// forged run; the reprotect is refused (exit 2: the failover left east)
// and west keeps the primary copy. (Were drctl to let it through, the
// reprotect itself asks east's storage first: TestDemotionNeedsThePrimaryOnStorage.)
func TestForgedRecordDoesNotAimAReprotect(t *testing.T) {
	srv, c, shop, east, west := shopWithWorker(t)

	c.ok(nil, "protect", "start", shop, "--primary", "east", "--interval", "100ms")
	c.eventually("protection to record a sync", "shop", func(s statusOut) bool {
		return s.Protection != nil && !s.Protection.Groups["db"].LastSync.IsZero()
	})
	east.Down()
	var o struct{ Status string }
	c.ok(&o, "failover", shop, "--to", "west", "--yes", "--wait")
	if o.Status != "completed" {
		t.Fatalf("failover: %+v", o)
	}
	now := time.Now()
	forged := workflows.RecordChange{At: now, Primary: "east", Action: &workflows.ActionEntry{Action: "failover", WorkflowID: "forged", RunID: "r1",
		From: "west", To: "east", Outcome: workflows.StateCompleted, Start: now, End: now}}
	if err := srv.Client.SignalWorkflow(t.Context(), workflows.RecordID("shop"), "", workflows.SignalRecord, forged); err != nil {
		t.Fatal(err)
	}
	c.eventually("the record to take or refuse the forged change", "shop", func(s statusOut) bool {
		rec, err := workflows.ReadRecord(t.Context(), srv.Client, "shop")
		return err == nil && rec != nil && (rec.RefusedCount > 0 || rec.Primary == "east")
	})
	// The record still holds the real failover: reprotect --from west
	// contradicts it (exit 2, nothing started).
	c.want(2, "the last failover of plan \"shop\" left east, not west", "reprotect", shop, "--from", "west", "--yes", "--wait")
	if u := west.Snapshot().Unit("vg/vg-1"); u.Role != sim.RolePrimary {
		t.Fatalf("after the forged record and the reprotect, west's vg-1 is %s", u.Role)
	}
	rec, err := workflows.ReadRecord(t.Context(), srv.Client, "shop")
	if err != nil || rec.RefusedCount != 1 || rec.Primary != "west" || rec.Refused[0].From != workflows.UnknownSender {
		t.Fatalf("the record after the forged change: %+v, %v; want west primary and the change refused", rec, err)
	}
}

// shopWithWorker starts a dev server, two simulated sites, a worker
// that runs unsigned plans and a plan "shop" over the sites, and gives
// drctl against them.
func shopWithWorker(t *testing.T) (srv *devserver.Server, c cli, shop string, east, west *simtest.Site) {
	t.Helper()
	bins := bintest.Build(t, "drctl", "worker")
	srv = devserver.Start(t, nil)
	east, west = eastWest(t)
	shop = onePlan(t, filepath.Join(t.TempDir(), "shop.yaml"), "shop", east, west, fmt.Sprintf("{cidrs: [%s/32]}", simtest.NodeA), "")
	c = cli{t: t, bin: filepath.Join(bins, "drctl"), addr: srv.Address()}
	worker := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + srv.Address()}, filepath.Join(bins, "worker"), "--metrics", "", "--allow-unsigned-plans")
	simtest.Eventually(t, 30*time.Second, "the worker to start", func() bool { return strings.Contains(worker.Log.String(), "worker started") })
	return srv, c, shop, east, west
}
