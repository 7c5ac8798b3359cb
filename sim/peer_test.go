package sim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/sim"
)

// forgeUnfence is the attack of a fenced client: it posts, from its own
// address, an unfence of its CIDR to the site's peer API on the data
// port, as if the peer had lifted the fence. It returns the HTTP status.
func forgeUnfence(t *testing.T, s *siteUnderTest, from, cidr, token string) int {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"from": "b", "entries": []map[string]any{
		{"cidr": cidr, "fenced": false, "time": time.Now().UTC(), "origin": "b"}}})
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 5 * time.Second}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://"+s.cfg.DataAddr+"/v1/peer/fences", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// fenceThroughB fences a's client through b, as a failover does, and
// waits until a refuses its writes.
func fenceThroughB(t *testing.T, a, b *siteUnderTest, fromA *sim.Client) {
	t.Helper()
	ctx := ctxT(t)
	_, err := b.fc.FenceClusterNetwork(ctx, &fence.FenceClusterNetworkRequest{Cidrs: []*fence.CIDR{{Cidr: nodeA + "/32"}}})
	mustOK(t, err)
	eventually(t, 5*time.Second, "a to learn the fence", func() bool { return len(a.FencedCIDRs()) == 1 })
	if _, err := fromA.Write(ctx, "v1", 0, []byte("fenced")); !errors.Is(err, sim.ErrFenced) {
		t.Fatalf("write of a fenced client: %v, want ErrFenced", err)
	}
}

// TestFencedClientCannotUnfenceItself: the peer API needs the pair's
// token, so a fenced client cannot lift its own fence through it.
func TestFencedClientCannotUnfenceItself(t *testing.T) {
	a, b := startPair(t, pairOpts{})
	if a.cfg.PeerToken == "" || a.cfg.PeerToken != b.cfg.PeerToken {
		t.Fatalf("the test pair shares no peer token")
	}
	fromA := dataClient(t, a, nodeA)
	fenceThroughB(t, a, b, fromA)
	for _, token := range []string{"", "guessed-token"} {
		if code := forgeUnfence(t, a, nodeA, nodeA+"/32", token); code != http.StatusUnauthorized {
			t.Fatalf("a forged unfence with token %q: HTTP %d, want 401", token, code)
		}
	}
	_, err := fromA.Write(ctxT(t), "v1", 0, []byte("again"))
	if !errors.Is(err, sim.ErrFenced) {
		t.Fatalf("after the forged unfence the fenced client writes: %v", err)
	}
	// The pair itself still talks: replication goes on.
	if r := sim.Check(a.Snapshot(), b.Snapshot()); !r.OK() {
		t.Fatalf("checker: %v", r)
	}
}

// TestCheckerFlagsWritesOfAFencedClient: on a pair that runs its peer
// API without a token, the forged unfence lands and the fenced client
// writes again; the invariant checker must flag that write, since no
// site ever lifted the fence.
func TestCheckerFlagsWritesOfAFencedClient(t *testing.T) {
	open := func(c *sim.Config) { c.PeerToken = "" }
	a, b := startPair(t, pairOpts{TweakA: open, TweakB: open})
	fromA := dataClient(t, a, nodeA)
	fenceThroughB(t, a, b, fromA)
	if code := forgeUnfence(t, a, nodeA, nodeA+"/32", ""); code != http.StatusOK {
		t.Fatalf("forged unfence on an open peer API: HTTP %d", code)
	}
	if _, err := fromA.Write(ctxT(t), "v1", 0, []byte("again")); err != nil {
		t.Fatalf("the write after the forged unfence: %v (the attack did not land; the test proves nothing)", err)
	}
	r := sim.Check(a.Snapshot(), b.Snapshot())
	flagged := false
	for _, v := range r.Violations {
		flagged = flagged || v.Kind == sim.FencedWrite
	}
	if !flagged {
		t.Fatalf("a write accepted from a client under a fence no site lifted, and the checker says: %v", r)
	}
}
