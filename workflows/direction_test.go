package workflows_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestFailoverAsksTheTakingSiteForItsRoles: before any side effect a
// failover asks the taking site's storage which copies are primary
// there already. Toward the site that holds every primary copy it ends
// with ErrWrongDirection, naming the count, and fences and promotes
// nothing; toward the secondary it goes on, its check saying how many of
// the copies asked are not primary (after one was promoted there by
// hand: two of three).
func TestFailoverAsksTheTakingSiteForItsRoles(t *testing.T) {
	f := newFixture(t)
	var res workflows.FailoverResult
	calls, err := f.run(t, workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "west", To: "east"}, &res)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != workflows.ErrWrongDirection ||
		!strings.Contains(err.Error(), "the storage of east reports its copies as primary already (3 of 3 asked answer replication info as a primary)") {
		t.Fatalf("failover toward the primary: %v, want %s naming 3 of 3", err, workflows.ErrWrongDirection)
	}
	for _, c := range calls {
		if c.name == "FenceClusterNetwork" || c.name == "PromoteVolume" || c.name == "DemoteVolume" {
			t.Fatalf("the refused failover called %s: %v", c, calls)
		}
	}
	if fenced := f.east.FencedCIDRs(); len(fenced) != 0 {
		t.Fatalf("the refused failover fenced %v", fenced)
	}

	// Group logs moves to west, as a planned switchover of it alone
	// would: demoted on east, promoted on west, synced from there.
	logs := &replication.ReplicationSource{Type: &replication.ReplicationSource_Volumegroup{
		Volumegroup: &replication.ReplicationSource_VolumeGroupSource{VolumeGroupId: "vg-2"}}}
	controller := func(s *simtest.Site) replication.ControllerClient { return replication.NewControllerClient(dial(t, s)) }
	_, err = controller(f.east).DemoteVolume(t.Context(), &replication.DemoteVolumeRequest{ReplicationSource: logs})
	mustOK(t, err)
	west := controller(f.west)
	_, err = west.PromoteVolume(t.Context(), &replication.PromoteVolumeRequest{ReplicationSource: logs})
	mustOK(t, err)
	simtest.Eventually(t, 10*time.Second, "logs synced from west", func() bool {
		_, err := west.GetVolumeReplicationInfo(t.Context(), &replication.GetVolumeReplicationInfoRequest{ReplicationSource: logs})
		return err == nil
	})
	f.east.Down()
	_, err = f.run(t, workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "east", To: "west"}, &res)
	mustOK(t, err)
	if s := stepOf(t, res.Progress, "check-roles/west"); s.State != workflows.StateDone || s.Output != "2 of 3 copies asked on west are not primary" {
		t.Errorf("the role check: %s, output %q; want done, 2 of 3 not primary", s.State, s.Output)
	}
	roles(t, f.west, sim.RolePrimary)
}

// dial connects to a simulated site's CSI-Addons socket, as an operator
// acting by hand would; the connection closes with the test.
func dial(t *testing.T, s *simtest.Site) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(s.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	mustOK(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestRoleCheckTakesNoFailedCallForAnAnswer: a call of the failover's
// role check that fails (here UNAVAILABLE for group db, as a TLS error
// would) is no answer: toward a site whose every other copy answers as
// primary the failover still ends with ErrWrongDirection, where it
// counted the failed call as a copy not primary and went on to fence the
// healthy peer's clients.
func TestRoleCheckTakesNoFailedCallForAnAnswer(t *testing.T) {
	f := newFixture(t)
	mustOK(t, f.east.SetFaults([]sim.FaultRule{{Method: "GetVolumeReplicationInfo", Code: "UNAVAILABLE", Probability: 1, Subject: "vg-1", Message: "tls: handshake failure"}}))
	var res workflows.FailoverResult
	calls, err := f.run(t, workflows.Failover, workflows.FailoverInput{Plan: f.plan, From: "west", To: "east"}, &res)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != workflows.ErrWrongDirection || !strings.Contains(err.Error(), "2 of 3 asked answer replication info as a primary; 1 could not be asked") {
		t.Fatalf("failover toward the primary with one call failing: %v, want %s naming 2 of 3 and the failed one", err, workflows.ErrWrongDirection)
	}
	for _, c := range calls {
		if c.name == "FenceClusterNetwork" || c.name == "PromoteVolume" || c.name == "DemoteVolume" {
			t.Fatalf("the refused failover called %s", c)
		}
	}
}

// TestDemotionNeedsThePrimaryOnStorage is issue 42's last attack: a
// record that says the wrong site is primary aims an honest reprotect
// (or failback) at the live primary. Storage is the truth before any
// demotion: with east holding every primary copy, a reprotect "from
// east to west" and a failback "from west to east" each end with
// ErrWrongDirection before any call but the check, and east still holds
// the primary copies. When the site that should hold them cannot be
// asked, the reprotect ends with ErrRolesUnknown, again having done
// nothing.
func TestDemotionNeedsThePrimaryOnStorage(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name string
		wf   any
		in   any
		want string
		says string
	}{
		{"reprotect demoting the primary", workflows.Reprotect, workflows.ReprotectInput{Plan: f.plan, From: "east", To: "west"},
			workflows.ErrWrongDirection, "the storage of west reports 3 of 3 copies asked as not primary"},
		{"failback from the secondary", workflows.Failback, workflows.FailbackInput{Plan: f.plan, From: "west", To: "east"},
			workflows.ErrWrongDirection, "the storage of west reports 3 of 3 copies asked as not primary"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls, err := f.run(t, c.wf, c.in, nil)
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || ae.Type() != c.want || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("%v, want %s saying %q", err, c.want, c.says)
			}
			for _, cl := range calls {
				if cl.name != "SurveyReplication" && cl.name != "GetVolumeReplicationInfo" {
					t.Fatalf("the refused action called %s: %v", cl, calls)
				}
			}
			roles(t, f.east, sim.RolePrimary)
		})
	}
	t.Run("roles unknown", func(t *testing.T) {
		mustOK(t, f.east.SetFaults([]sim.FaultRule{{Method: "GetVolumeReplicationInfo", Code: "UNAVAILABLE", Probability: 1, Message: "tls: handshake failure"}}))
		defer func() { mustOK(t, f.east.SetFaults(nil)) }()
		calls, err := f.run(t, workflows.Reprotect, workflows.ReprotectInput{Plan: f.plan, From: "west", To: "east"}, nil)
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != workflows.ErrRolesUnknown {
			t.Fatalf("%v, want %s", err, workflows.ErrRolesUnknown)
		}
		for _, cl := range calls {
			if cl.name != "SurveyReplication" && cl.name != "GetVolumeReplicationInfo" {
				t.Fatalf("the refused reprotect called %s", cl)
			}
		}
		roles(t, f.east, sim.RolePrimary)
	})
	// A storage that answers late is asked again under the plan's
	// back-off: two UNAVAILABLE answers do not end the action.
	t.Run("asked again", func(t *testing.T) {
		mustOK(t, f.east.SetFaults([]sim.FaultRule{{Method: "GetVolumeReplicationInfo", Code: "UNAVAILABLE", Count: 2, Message: "leader election"}}))
		defer func() { mustOK(t, f.east.SetFaults(nil)) }()
		calls, err := f.run(t, workflows.Reprotect, workflows.ReprotectInput{Plan: f.plan, From: "west", To: "east"}, nil)
		var ae *temporal.ApplicationError
		if errors.As(err, &ae) && ae.Type() == workflows.ErrRolesUnknown {
			t.Fatalf("%v: a passing error ended the check", err)
		}
		past := false
		for _, cl := range calls {
			past = past || (cl.name != "SurveyReplication" && cl.name != "GetVolumeReplicationInfo")
		}
		if !past {
			t.Fatalf("the reprotect stopped at its check of the roles (%v): %v", err, calls)
		}
		roles(t, f.east, sim.RolePrimary)
	})
}
