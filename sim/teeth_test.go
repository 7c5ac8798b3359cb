package sim_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/sim"
)

// TestReportVerdict: the checker's verdict is false whenever it reports a
// violation, of any kind, alone or with others; e2e, chaos and the demo
// gate on it.
func TestReportVerdict(t *testing.T) {
	clean := &sim.Report{Units: 3, Writes: 10, Promotions: 1}
	if !clean.OK() || !strings.HasPrefix(clean.String(), "invariants ok:") {
		t.Fatalf("a report without violations: OK %v, %q", clean.OK(), clean)
	}
	// Lost writes after the last completed sync are expected, not a
	// violation.
	lost := &sim.Report{Lost: []sim.LostWrite{{Unit: "vg/g", Site: "x"}}}
	if !lost.OK() {
		t.Fatal("writes lost after the last sync made the verdict false")
	}
	kinds := []string{sim.SplitBrain, sim.FencedWrite, sim.LostSyncedWrite, sim.DataMismatch}
	for i, kind := range kinds {
		r := &sim.Report{Units: 1, Violations: []sim.Violation{{Kind: kind, Unit: "vg/g", Site: "x", Detail: "made up"}}}
		if r.OK() {
			t.Errorf("one %s violation: OK() = true", kind)
		}
		if s := r.String(); !strings.HasPrefix(s, "invariants VIOLATED:") || !strings.Contains(s, kind) {
			t.Errorf("one %s violation: %q", kind, s)
		}
		many := &sim.Report{}
		for _, k := range kinds[:i+1] {
			many.Violations = append(many.Violations, sim.Violation{Kind: k})
		}
		if many.OK() {
			t.Errorf("%d violations: OK() = true", len(many.Violations))
		}
	}
	// And as Check returns it: a write accepted from a client that the
	// site knew was fenced.
	st := &sim.State{Site: "x", Units: []sim.UnitState{{
		Kind: sim.KindGroup, ID: "g", Role: sim.RolePrimary, Epoch: 1, Seq: 1, Lineage: []sim.Fork{{Epoch: 1}},
		Blocks: map[string]map[int64]sim.Block{"v": {0: {Data: []byte("z"), Seq: 1, Epoch: 1}}},
		Writes: []sim.WriteRecord{{Volume: "v", Block: 0, Seq: 1, Epoch: 1, Time: time.Unix(20, 0), Client: "10.0.0.5"}},
	}}, FenceLog: []sim.FenceEvent{{FenceEntry: sim.FenceEntry{CIDR: "10.0.0.0/24", Fenced: true, Time: time.Unix(10, 0), Origin: "x"}, Learned: time.Unix(10, 0)}}}
	r := sim.Check(st)
	if len(r.Violations) == 0 {
		t.Fatalf("no violation found in a fenced client's write: %s", r)
	}
	if r.OK() {
		t.Fatalf("Check found %d violations and says OK", len(r.Violations))
	}
}

// TestFenceLandsDuringWrite: a fence that lands while a write is in
// flight (admitted, its body still arriving) stops it at the commit: the
// write is refused as fenced, never stored nor logged, and the checker
// finds nothing wrong.
func TestFenceLandsDuringWrite(t *testing.T) {
	a, b := startPair(t, pairOpts{})
	ctx := ctxT(t)

	// A writer on node A whose body arrives in two parts.
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(nodeA)}, Timeout: 2 * time.Second}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 10 * time.Second}
	body, feed := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+a.cfg.DataAddr+"/v1/volumes/v1/blocks/3", body)
	mustOK(t, err)
	req.Header.Set(sim.ClientHeader, "in-flight-writer")
	type answer struct {
		code int
		text string
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := hc.Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		text, _ := io.ReadAll(bufio.NewReader(resp.Body))
		done <- answer{code: resp.StatusCode, text: string(text)}
	}()
	_, err = feed.Write([]byte("first half, "))
	mustOK(t, err)
	// The site admitted the writer (it records every client it admits):
	// the request now waits for the rest of its body.
	eventually(t, 5*time.Second, "the writer to be admitted", func() bool {
		for _, c := range a.Snapshot().Clients {
			if c.ID == "in-flight-writer" {
				return true
			}
		}
		return false
	})
	time.Sleep(100 * time.Millisecond) // past the admission check, into the body read

	_, err = b.fc.FenceClusterNetwork(ctx, &fence.FenceClusterNetworkRequest{Cidrs: []*fence.CIDR{{Cidr: nodeA + "/32"}}})
	mustOK(t, err)
	eventually(t, 5*time.Second, "the fence to reach a", func() bool { return len(a.FencedCIDRs()) == 1 })
	_, err = feed.Write([]byte("second half"))
	mustOK(t, err)
	mustOK(t, feed.Close())

	var ans answer
	select {
	case ans = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the write did not answer")
	}
	if ans.err != nil {
		t.Fatal(ans.err)
	}
	if ans.code != http.StatusForbidden || !strings.Contains(ans.text, "fenced") {
		t.Fatalf("in-flight write from a client fenced meanwhile: %d %s, want 403 fenced", ans.code, ans.text)
	}
	// Not stored, not logged.
	if _, err := dataClient(t, a, nodeB).Read(ctx, "v1", 3); !errors.Is(err, sim.ErrNotFound) {
		t.Fatalf("block 3 after the refused write: %v, want never written", err)
	}
	for _, w := range a.Snapshot().Unit("vg/vg-1").Writes {
		if w.Client == nodeA && w.Block == 3 {
			t.Fatalf("the refused write is in the log: %+v", w)
		}
	}
	check(t, a, b)
}

// TestCheckFindsThePrimaryInAnyOrder: the checker judges the data against
// the primary whichever order the states come in: writes the primary
// holds but has not shipped yet are neither lost nor a violation.
func TestCheckFindsThePrimaryInAnyOrder(t *testing.T) {
	a, b := startPair(t, pairOpts{})
	ctx := ctxT(t)
	enable(t, a, group("vg-1"))
	enable(t, b, group("vg-1"))
	wa := dataClient(t, a, nodeA)
	_, err := wa.Write(ctx, "v1", 0, []byte("shipped"))
	mustOK(t, err)
	waitSynced(t, a, "vg/vg-1")
	a.SetLink(false)
	_, err = wa.Write(ctx, "v1", 1, []byte("not shipped yet"))
	mustOK(t, err)
	for _, order := range [][]*siteUnderTest{{a, b}, {b, a}} {
		r := sim.Check(order[0].Snapshot(), order[1].Snapshot())
		if !r.OK() || len(r.Lost) != 0 {
			t.Fatalf("states of %s then %s: %s, lost %v; want nothing lost: the primary holds every write", order[0].Name(), order[1].Name(), r, r.Lost)
		}
		if r.Writes != 2 {
			t.Fatalf("states of %s then %s: %d acknowledged writes counted, want 2", order[0].Name(), order[1].Name(), r.Writes)
		}
	}
}

// TestCheckFindsUnexplainedData: a block that no acknowledged write
// explains, up to the copy's last sequence number included, is a data
// mismatch.
func TestCheckFindsUnexplainedData(t *testing.T) {
	sum := func(b string) string { h := sha256.Sum256([]byte(b)); return hex.EncodeToString(h[:8]) }
	st := func(blocks map[int64]sim.Block) *sim.State {
		return &sim.State{Site: "x", Units: []sim.UnitState{{
			Kind: sim.KindGroup, ID: "g", Role: sim.RolePrimary, Epoch: 1, Seq: 2, Lineage: []sim.Fork{{Epoch: 1}},
			Blocks: map[string]map[int64]sim.Block{"v": blocks},
			Writes: []sim.WriteRecord{
				{Volume: "v", Block: 0, Seq: 1, Epoch: 1, Time: time.Unix(10, 0), Client: "10.0.0.5", Sum: sum("a")},
				{Volume: "v", Block: 1, Seq: 2, Epoch: 1, Time: time.Unix(11, 0), Client: "10.0.0.5", Sum: sum("b")},
			},
		}}}
	}
	good := map[int64]sim.Block{0: {Data: []byte("a"), Seq: 1, Epoch: 1}, 1: {Data: []byte("b"), Seq: 2, Epoch: 1}}
	if r := sim.Check(st(good)); !r.OK() {
		t.Fatalf("data that the writes explain: %s", r)
	}
	// Block 2 holds seq 2, the copy's last, which wrote block 1.
	odd := map[int64]sim.Block{0: good[0], 1: good[1], 2: {Data: []byte("?"), Seq: 2, Epoch: 1}}
	r := sim.Check(st(odd))
	if r.OK() || !hasViolation(r, sim.DataMismatch) || !strings.Contains(r.String(), "no surviving acknowledged write explains") {
		t.Fatalf("a block no write explains: %s", r)
	}
}

// TestBlockSizeLimit: a block of exactly MaxBlockSize is stored whole; one
// byte more is refused, never stored cut short.
func TestBlockSizeLimit(t *testing.T) {
	a, _ := startPair(t, pairOpts{})
	ctx := ctxT(t)
	c := dataClient(t, a, nodeA)
	full := []byte(strings.Repeat("x", sim.MaxBlockSize-1) + "y")
	_, err := c.Write(ctx, "v1", 0, full)
	mustOK(t, err)
	got, err := c.Read(ctx, "v1", 0)
	mustOK(t, err)
	if len(got) != sim.MaxBlockSize || got[len(got)-1] != 'y' {
		t.Fatalf("read back %d bytes, want the %d written", len(got), sim.MaxBlockSize)
	}
	if _, err := c.Write(ctx, "v1", 1, append(full, 'z')); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("a block one byte too large: %v, want it refused", err)
	}
	if _, err := c.Read(ctx, "v1", 1); !errors.Is(err, sim.ErrNotFound) {
		t.Fatalf("the refused block was stored: %v", err)
	}
}

// TestClientRenamed: a client that comes back under another name from the
// same address is reported under its new name.
func TestClientRenamed(t *testing.T) {
	a, _ := startPair(t, pairOpts{})
	ctx := ctxT(t)
	for _, id := range []string{"node-1", "node-1-renamed"} {
		c, err := sim.NewClient(a.cfg.DataAddr, nodeA, id)
		mustOK(t, err)
		_, err = c.Write(ctx, "v1", 0, []byte(id))
		c.Close()
		mustOK(t, err)
	}
	var got []string
	for _, c := range a.Snapshot().Clients {
		if c.Addr == nodeA {
			got = append(got, c.ID)
		}
	}
	if len(got) != 1 || got[0] != "node-1-renamed" {
		t.Fatalf("clients at %s: %v, want the new name only", nodeA, got)
	}
}

// TestCheckComparesInSyncSecondaries: an in-sync secondary's data is
// checked against the surviving writes like the primary's; a secondary
// that is out of sync or resyncing is not held to them.
func TestCheckComparesInSyncSecondaries(t *testing.T) {
	sum := func(b string) string { h := sha256.Sum256([]byte(b)); return hex.EncodeToString(h[:8]) }
	good := map[int64]sim.Block{0: {Data: []byte("a"), Seq: 1, Epoch: 1}, 1: {Data: []byte("b"), Seq: 2, Epoch: 1}}
	primary := &sim.State{Site: "x", Units: []sim.UnitState{{
		Kind: sim.KindGroup, ID: "g", Role: sim.RolePrimary, Epoch: 1, Seq: 2, Lineage: []sim.Fork{{Epoch: 1}},
		Blocks: map[string]map[int64]sim.Block{"v": good},
		Writes: []sim.WriteRecord{
			{Volume: "v", Block: 0, Seq: 1, Epoch: 1, Time: time.Unix(10, 0), Client: "10.0.0.5", Sum: sum("a")},
			{Volume: "v", Block: 1, Seq: 2, Epoch: 1, Time: time.Unix(11, 0), Client: "10.0.0.5", Sum: sum("b")},
		},
	}}}
	secondary := func(blocks map[int64]sim.Block, inSync, resyncing bool) *sim.State {
		return &sim.State{Site: "y", Units: []sim.UnitState{{
			Kind: sim.KindGroup, ID: "g", Role: sim.RoleSecondary, Epoch: 1, Seq: 2, Lineage: []sim.Fork{{Epoch: 1}},
			InSync: inSync, Resyncing: resyncing, Blocks: map[string]map[int64]sim.Block{"v": blocks},
		}}}
	}
	if r := sim.Check(primary, secondary(good, true, false)); !r.OK() {
		t.Fatalf("a secondary with the primary's data: %s", r)
	}
	wrong := map[int64]sim.Block{0: good[0], 1: {Data: []byte("c"), Seq: 2, Epoch: 1}}
	r := sim.Check(primary, secondary(wrong, true, false))
	if r.OK() || !hasViolation(r, sim.DataMismatch) || !strings.Contains(r.String(), "y") {
		t.Fatalf("an in-sync secondary with wrong data: %s", r)
	}
	for _, s := range []*sim.State{secondary(wrong, false, false), secondary(wrong, true, true)} {
		if r := sim.Check(primary, s); !r.OK() {
			t.Fatalf("a secondary out of sync or resyncing is not held to the writes: %s", r)
		}
	}
}

// TestCheckAloneTakesLearnedUnfences: checked alone, a site's unfence
// learned from its peer lifts the fence, so a write after it is no fenced
// write; checked with a peer that never made that unfence, the write is.
func TestCheckAloneTakesLearnedUnfences(t *testing.T) {
	sum := func(b string) string { h := sha256.Sum256([]byte(b)); return hex.EncodeToString(h[:8]) }
	x := &sim.State{Site: "x", Units: []sim.UnitState{{
		Kind: sim.KindGroup, ID: "g", Role: sim.RolePrimary, Epoch: 1, Seq: 1, Lineage: []sim.Fork{{Epoch: 1}},
		Blocks: map[string]map[int64]sim.Block{"v": {0: {Data: []byte("a"), Seq: 1, Epoch: 1}}},
		Writes: []sim.WriteRecord{{Volume: "v", Block: 0, Seq: 1, Epoch: 1, Time: time.Unix(30, 0), Client: "10.0.0.5", Sum: sum("a")}},
	}}, FenceLog: []sim.FenceEvent{
		{FenceEntry: sim.FenceEntry{CIDR: "10.0.0.0/24", Fenced: true, Time: time.Unix(10, 0), Origin: "x"}, Learned: time.Unix(10, 0)},
		{FenceEntry: sim.FenceEntry{CIDR: "10.0.0.0/24", Fenced: false, Time: time.Unix(20, 0), Origin: "y"}, Learned: time.Unix(21, 0)},
	}}
	if r := sim.Check(x); !r.OK() {
		t.Fatalf("alone, an unfence learned from the peer lifts the fence: %s", r)
	}
	y := &sim.State{Site: "y"}
	if r := sim.Check(x, y); r.OK() || !hasViolation(r, sim.FencedWrite) {
		t.Fatalf("an unfence the peer never made lifts nothing: %s", r)
	}
}

// TestCheckCutsSyncsAtThePromotion: a write lost with the old primary's
// epoch is a lost synced write only if a sync that covered it completed
// before the promotion; one the old primary completed after it (it went
// on alone) does not count.
func TestCheckCutsSyncsAtThePromotion(t *testing.T) {
	sum := func(b string) string { h := sha256.Sum256([]byte(b)); return hex.EncodeToString(h[:8]) }
	y := &sim.State{Site: "y", Units: []sim.UnitState{{
		Kind: sim.KindGroup, ID: "g", Role: sim.RolePrimary, Epoch: 2, Seq: 1, Lineage: []sim.Fork{{Epoch: 1}, {Epoch: 2, BaseSeq: 1}},
		Blocks:      map[string]map[int64]sim.Block{"v": {0: {Data: []byte("a"), Seq: 1, Epoch: 1}}},
		RoleChanges: []sim.RoleChange{{Time: time.Unix(20, 0), Role: sim.RolePrimary, Epoch: 2, Seq: 1, Force: true}},
	}}}
	x := func(syncedAt int64) *sim.State {
		return &sim.State{Site: "x", Units: []sim.UnitState{{
			Kind: sim.KindGroup, ID: "g", Role: sim.RoleSecondary, Epoch: 1, Seq: 2, Lineage: []sim.Fork{{Epoch: 1}},
			Blocks: map[string]map[int64]sim.Block{"v": {0: {Data: []byte("a"), Seq: 1, Epoch: 1}, 1: {Data: []byte("b"), Seq: 2, Epoch: 1}}},
			Writes: []sim.WriteRecord{
				{Volume: "v", Block: 0, Seq: 1, Epoch: 1, Time: time.Unix(10, 0), Client: "10.0.0.5", Sum: sum("a")},
				{Volume: "v", Block: 1, Seq: 2, Epoch: 1, Time: time.Unix(15, 0), Client: "10.0.0.5", Sum: sum("b")},
			},
			Syncs: []sim.SyncRecord{{Time: time.Unix(syncedAt, 0), Epoch: 1, Seq: 2}},
		}}}
	}
	r := sim.Check(x(25), y)
	if !r.OK() || len(r.Lost) != 1 {
		t.Fatalf("seq 2 synced only after the promotion: %s (lost %d), want it lost, no violation", r, len(r.Lost))
	}
	if r := sim.Check(x(18), y); r.OK() || !hasViolation(r, sim.LostSyncedWrite) {
		t.Fatalf("seq 2 synced before the promotion and lost: %s", r)
	}
}

// TestCheckJudgesAWriteByTheFenceInForce: the checker judges each write
// by the fence in force on its site when the write landed, not by the
// fence's latest state. 10.0.0.0/24 is fenced from 10 s to 20 s: of the
// writes from 10.0.0.5 at 5 s, 15 s and 25 s, only the second is a
// fenced write. Reprotect lifts its fences before the end-of-run checks,
// so a checker that looked at the latest state would miss every fenced
// write of a run. Checked alone, and with the peer that made both
// changes (learned a moment later).
func TestCheckJudgesAWriteByTheFenceInForce(t *testing.T) {
	at := func(s float64) time.Time { return time.Unix(1000, 0).Add(time.Duration(s * float64(time.Second))) }
	writes := func() sim.UnitState {
		u := sim.UnitState{Kind: sim.KindGroup, ID: "g", Role: sim.RolePrimary, Epoch: 1, Seq: 3, Lineage: []sim.Fork{{Epoch: 1}},
			Blocks: map[string]map[int64]sim.Block{"v": {}}}
		for i, s := range []float64{5, 15, 25} {
			seq := uint64(i + 1)
			u.Blocks["v"][int64(i)] = sim.Block{Data: []byte("w"), Seq: seq, Epoch: 1}
			u.Writes = append(u.Writes, sim.WriteRecord{Volume: "v", Block: int64(i), Seq: seq, Epoch: 1, Time: at(s), Client: "10.0.0.5"})
		}
		return u
	}
	change := func(origin string, fenced bool, made, learned float64) sim.FenceEvent {
		return sim.FenceEvent{FenceEntry: sim.FenceEntry{CIDR: "10.0.0.0/24", Fenced: fenced, Time: at(made), Origin: origin}, Learned: at(learned)}
	}
	alone := &sim.State{Site: "x", Units: []sim.UnitState{writes()},
		FenceLog: []sim.FenceEvent{change("x", true, 10, 10), change("x", false, 20, 20)}}
	x := &sim.State{Site: "x", Units: []sim.UnitState{writes()},
		FenceLog: []sim.FenceEvent{change("y", true, 10, 10.1), change("y", false, 20, 20.1)}}
	y := &sim.State{Site: "y", Units: []sim.UnitState{{Kind: sim.KindGroup, ID: "g", Role: sim.RoleSecondary, Epoch: 1, Lineage: []sim.Fork{{Epoch: 1}}}},
		FenceLog: []sim.FenceEvent{change("y", true, 10, 10), change("y", false, 20, 20)}}
	for name, states := range map[string][]*sim.State{"alone": {alone}, "with the peer": {x, y}} {
		r := sim.Check(states...)
		var fenced []string
		for _, v := range r.Violations {
			if v.Kind == sim.FencedWrite {
				fenced = append(fenced, v.Detail)
			}
		}
		if len(fenced) != 1 || !strings.HasPrefix(fenced[0], "write seq 2 ") {
			t.Errorf("%s: fenced writes %q, want the write of 15 s (seq 2) alone\n%s", name, fenced, r)
		}
	}
}
