package sim

import (
	"context"
	"net/netip"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The two sites of a pair form one fence domain, as the sites of a
// stretched cluster share one blocklist: a fence set through either site's
// FenceController is pushed to the peer at once when the link is up, the
// sites exchange their lists on every replication round, and a site that
// comes back adopts its peer's list before it serves I/O again. Each change
// carries the time it was made at its origin; the newest change of a CIDR
// wins.

// setFences fences or unfences CIDRs at this site and pushes the change to
// the peer.
func (s *Site) setFences(ctx context.Context, cidrs []string, fenced bool) error {
	now := time.Now()
	s.mu.Lock()
	changed := false
	for _, c := range cidrs {
		cur, ok := s.sf.Fences[c]
		if ok && cur.Fenced == fenced {
			continue // idempotent: keep the original time
		}
		if !ok && !fenced {
			continue
		}
		e := FenceEntry{CIDR: c, Fenced: fenced, Time: now, Origin: s.cfg.Name}
		s.sf.Fences[c] = e
		s.sf.FenceLog = append(s.sf.FenceLog, FenceEvent{FenceEntry: e, Learned: now})
		changed = true
	}
	var err error
	if changed {
		err = s.saveSiteLocked()
	}
	entries := s.fenceEntriesLocked()
	s.mu.Unlock()
	if err != nil {
		return status.Errorf(codes.Unknown, "persist fence state: %v", err)
	}
	if changed {
		s.log.Info("fence changed", "cidrs", cidrs, "fenced", fenced)
		s.pushFences(ctx, entries)
	}
	return nil
}

func (s *Site) fenceEntriesLocked() []FenceEntry {
	out := make([]FenceEntry, 0, len(s.sf.Fences))
	for _, e := range s.sf.Fences {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CIDR < out[j].CIDR })
	return out
}

// mergeFences applies a peer's fence entries, newest change winning.
func (s *Site) mergeFences(entries []FenceEntry) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for _, e := range entries {
		if _, err := netip.ParsePrefix(e.CIDR); err != nil {
			continue
		}
		cur, ok := s.sf.Fences[e.CIDR]
		if ok && !e.Time.After(cur.Time) {
			continue
		}
		if !ok && !e.Fenced {
			continue
		}
		s.sf.Fences[e.CIDR] = e
		s.sf.FenceLog = append(s.sf.FenceLog, FenceEvent{FenceEntry: e, Learned: now})
		changed = true
	}
	if changed {
		if err := s.saveSiteLocked(); err != nil {
			s.log.Error("persist fence state", "err", err)
		}
	}
}

// FencedCIDRs lists the CIDRs fenced at this site now.
func (s *Site) FencedCIDRs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for c, e := range s.sf.Fences {
		if e.Fenced {
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}

// fencedBy returns the fenced CIDR that covers addr, if any.
func (s *Site) fencedBy(addr netip.Addr) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, e := range s.sf.Fences {
		if !e.Fenced {
			continue
		}
		if p, err := netip.ParsePrefix(c); err == nil && p.Contains(addr) {
			return c, true
		}
	}
	return "", false
}

func (s *Site) pushFences(ctx context.Context, entries []FenceEntry) {
	if s.peer == nil || s.isLinkDown() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	got, err := s.peer.exchangeFences(ctx, s.cfg.Name, entries)
	if err != nil {
		s.log.Warn("fence push to peer failed; the peer adopts it when the link returns", "err", err)
		return
	}
	s.mergeFences(got)
}

// syncFencesFromPeer exchanges fence lists with the peer, bounded in time.
func (s *Site) syncFencesFromPeer(timeout time.Duration) {
	if s.peer == nil || s.isLinkDown() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s.mu.Lock()
	entries := s.fenceEntriesLocked()
	s.mu.Unlock()
	got, err := s.peer.exchangeFences(ctx, s.cfg.Name, entries)
	if err != nil {
		s.log.Warn("could not reach the peer for its fence list; serving with the local one", "err", err)
		return
	}
	s.mergeFences(got)
}
