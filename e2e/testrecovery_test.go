package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// TestTestRecoveryWhileWriting: a test recovery at west while the
// application writes on east and protection replicates: the test
// workload comes up on copies of west's replicas; the worker is killed
// with kill -9 while it runs and started again; the test still ends on
// the operator's word, stops its workload and deletes every copy and
// snapshot. Meanwhile the writes go on, protection stays within the RPO,
// the application's own hooks never run, west's replicas keep their roles
// and history, and the invariants hold.
func TestTestRecoveryWhileWriting(t *testing.T) {
	var marker string
	h := startWith(t, 2, 2, func(text string) string {
		text = regexp.MustCompile(`west: \{groupID: (vg-[0-9]+)\}`).ReplaceAllString(text, `west: {groupID: $1, members: [$1-vol-1]}`)
		west := regexp.MustCompile(`(?m)^(      west:\n        exec: \{start: "touch ([^"]+)app-running\.west")`)
		m := west.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no exec hooks for west in the plan:\n%s", text)
		}
		marker = m[2] + "test-running.west"
		return strings.Replace(text, m[1], m[1]+`, testStart: "touch `+marker+`", testStop: "rm -f `+marker+`", testHealth: "test -f `+marker+`"`, 1)
	}, nil)
	h.must("protect", "start", h.plan, "--primary", "east", "--interval", "1s")
	h.startWriters()
	h.waitWrites("east", "acknowledged", acked, 40)
	h.waitProtected("e2e", 2)
	westOf := func(states []*sim.State) *sim.State {
		for _, s := range states {
			if s.Site == "west" {
				return s
			}
		}
		t.Fatal("no state of west")
		return nil
	}
	before := westOf(h.states())
	onEast := h.runningOn("east")

	h.must("test-recovery", h.plan, "--at", "west")
	id := workflows.TestRecoveryID("e2e")
	simtest.Eventually(t, time.Minute, "the test workload on the copies", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	if n := len(westOf(h.states()).Clones); n != 2 {
		t.Fatalf("%d copies on west while the test runs, want 2", n)
	}
	if err := h.st.Kill("worker"); err != nil {
		t.Fatal(err)
	}
	h.restart("worker")
	h.waitWrites("east", "acknowledged", acked, 40)
	ps, err := workflows.ReadProtect(context.Background(), h.c, "e2e")
	if err != nil || ps.OutOfRPO || ps.Primary != "east" {
		t.Fatalf("protection during the test: %+v, %v", ps, err)
	}

	h.must("approve", id, "--yes")
	out := h.must("watch", id)
	if !strings.Contains(out, "every copy and snapshot deleted") || !strings.Contains(out, "app healthy on its copies") {
		t.Fatalf("the test recovery's end:\n%s", out)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the test workload still runs (%v)", err)
	}
	if h.runningOn("east") != onEast || h.runningOn("west") {
		t.Fatal("the application's own hooks ran: it moved")
	}
	after := westOf(h.states())
	if n := len(after.Snapshots) + len(after.GroupSnapshots) + len(after.Clones); n != 0 {
		t.Fatalf("%d copies or snapshots left on west", n)
	}
	if d := sim.ReplicasUnchanged(before, after, false); len(d) != 0 {
		t.Fatalf("west's replicas changed: %v", d)
	}
	h.check()
	t.Logf("test recovery ended with %s", filepath.Base(marker))
}
