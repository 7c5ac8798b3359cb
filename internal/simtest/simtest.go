// Package simtest starts simulated storage sites for tests: a peered pair
// on loopback, gRPC on unix sockets, stopped when the test ends.
package simtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/freeport"
	"github.com/drover-dr/drover/sim"
)

// Client addresses standing for the nodes of each site; the data path
// sees them as the writer's source address.
const (
	NodeA = "127.0.0.2"
	NodeB = "127.0.0.3"
)

// FreeAddr returns a loopback TCP address that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeport.Addr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// SockDir returns a short directory for unix sockets (their paths are
// limited to about 100 bytes), removed when the test ends.
func SockDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "dsim")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// Eventually polls cond every 10ms until it holds, and fails the test
// when it does not within the given time.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s", within, what)
}

// QuietLog discards the simulator's logs.
func QuietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Options shape a pair. Zero values give two groups (vg-1 of v1 and v2,
// vg-2 of v3), one loose volume "solo" and a 50ms sync interval.
type Options struct {
	Groups   []sim.GroupSpec
	Volumes  []string
	Interval time.Duration
	Secrets  map[string]string
	TweakA   func(*sim.Config)
	TweakB   func(*sim.Config)
}

// Site is a running simulated site and the configuration it runs with.
type Site struct {
	*sim.Site
	Config sim.Config
}

// Endpoint is the site's gRPC address as a plan writes it.
func (s *Site) Endpoint() string { return s.Config.GRPCAddr }

// StartPair starts two peered sites, "a" primary and "b" secondary.
func StartPair(t testing.TB, o Options) (a, b *Site) {
	t.Helper()
	if o.Groups == nil && o.Volumes == nil {
		o.Groups = []sim.GroupSpec{{ID: "vg-1", Volumes: []string{"v1", "v2"}}, {ID: "vg-2", Volumes: []string{"v3"}}}
		o.Volumes = []string{"solo"}
	}
	if o.Interval == 0 {
		o.Interval = 50 * time.Millisecond
	}
	dir := SockDir(t)
	dataA, dataB := FreeAddr(t), FreeAddr(t)
	token := make([]byte, 16)
	_, _ = rand.Read(token)
	mk := func(name string, primary bool, data, peer string, tweak func(*sim.Config)) sim.Config {
		c := sim.Config{
			Name: name, GRPCAddr: "unix://" + filepath.Join(dir, name+".sock"),
			DataAddr: data, PeerAddr: peer, StateDir: filepath.Join(t.TempDir(), name),
			Primary: primary, Groups: o.Groups, Volumes: o.Volumes, SyncInterval: o.Interval,
			Secrets: o.Secrets, Seed: 1, PeerToken: hex.EncodeToString(token),
		}
		if tweak != nil {
			tweak(&c)
		}
		return c
	}
	a = StartSite(t, mk("a", true, dataA, dataB, o.TweakA))
	b = StartSite(t, mk("b", false, dataB, dataA, o.TweakB))
	return a, b
}

// StartSite starts one site from cfg and closes it when the test ends.
func StartSite(t testing.TB, cfg sim.Config) *Site {
	t.Helper()
	s, err := sim.New(cfg, QuietLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &Site{Site: s, Config: cfg}
}

// Buffer collects output written from several goroutines (a logger, a
// child process's stdout and stderr).
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
