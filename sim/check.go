package sim

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"
)

// Violation is one broken invariant.
type Violation struct {
	Kind   string `json:"kind"`
	Unit   string `json:"unit"`
	Site   string `json:"site"`
	Detail string `json:"detail"`
}

// Kinds of violation the checker reports.
const (
	// SplitBrain: a copy accepted a write after another copy had been
	// promoted past it, i.e. two writable primaries at once.
	SplitBrain = "two-writable-primaries"
	// FencedWrite: a write was accepted from a client inside a CIDR that
	// the fence domain had fenced.
	FencedWrite = "write-from-fenced-client"
	// LostSyncedWrite: a write acknowledged at or before the last completed
	// sync did not survive a failover.
	LostSyncedWrite = "lost-synced-write"
	// DataMismatch: a copy's data is not what its acknowledged writes say.
	DataMismatch = "data-mismatch"
)

// LostWrite is an acknowledged write that is not in the current primary's
// history: expected for writes acknowledged after the last completed sync
// before a forced promotion, a violation otherwise.
type LostWrite struct {
	Unit  string      `json:"unit"`
	Site  string      `json:"site"`
	Write WriteRecord `json:"write"`
}

// Report is the invariant checker's verdict over the sites' states.
type Report struct {
	Units      int         `json:"units"`
	Writes     int         `json:"writes"`
	Promotions int         `json:"promotions"`
	Lost       []LostWrite `json:"lost"`
	Violations []Violation `json:"violations"`
}

// OK reports whether every invariant holds.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// String summarises the report on one line, then one line per violation.
func (r *Report) String() string {
	var b strings.Builder
	verdict := "ok"
	if !r.OK() {
		verdict = "VIOLATED"
	}
	fmt.Fprintf(&b, "invariants %s: %d units, %d acknowledged writes, %d promotions, %d writes lost after the last completed sync, %d violations",
		verdict, r.Units, r.Writes, r.Promotions, len(r.Lost), len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "\n  %s %s on %s: %s", v.Kind, v.Unit, v.Site, v.Detail)
	}
	return b.String()
}

type copyOf struct {
	site string
	u    *UnitState
}

type promotion struct {
	site  string
	time  time.Time
	epoch uint64
}

// Check verifies the invariants over the states of the sites of a pair:
//
//   - at most one writable primary per group: no copy accepted a write
//     after another copy had been promoted past it;
//   - no site accepted a write from a fenced client after it had learned
//     of the fence (each site enforces the fence domain's changes from
//     when they reach it; a site that writes on after another was
//     promoted is caught as two writable primaries);
//   - the writes lost on a failover are exactly those acknowledged after
//     the last completed sync: no write at or before it is lost;
//   - the current primary's data, and every in-sync secondary's, is what
//     the surviving acknowledged writes say it is.
func Check(states ...*State) *Report {
	r := &Report{}
	copies := map[string][]copyOf{}
	var keys []string
	for _, st := range states {
		for i := range st.Units {
			u := &st.Units[i]
			k := u.Key()
			if _, ok := copies[k]; !ok {
				keys = append(keys, k)
			}
			copies[k] = append(copies[k], copyOf{site: st.Site, u: u})
		}
	}
	sort.Strings(keys)
	fences := fenceEvents(states)
	r.Units = len(keys)
	for _, k := range keys {
		checkUnit(r, k, copies[k], fences)
	}
	return r
}

// fenceEvents lists each site's fence changes by CIDR, in the order the
// site learned them, timed when it learned them: from then on the site
// must refuse the CIDR's writes.
//
// An unfence counts only when a site of the pair really made it (an
// unfence RPC at its origin): one a site learned from "its peer" that no
// site made (an unfence a fenced client posted to the peer API itself)
// lifts nothing, so a write it let through is a fenced write. Checked
// alone, a site's learned unfences are taken as they are.
func fenceEvents(states []*State) map[string]map[string][]FenceEntry {
	type change struct {
		origin, cidr string
		fenced       bool
		time         time.Time
	}
	made := map[change]bool{}
	for _, st := range states {
		for _, e := range st.FenceLog {
			if e.Origin == st.Site && (e.Learned.IsZero() || e.Learned.Equal(e.Time)) {
				made[change{e.Origin, e.CIDR, e.Fenced, e.Time.UTC()}] = true
			}
		}
	}
	out := map[string]map[string][]FenceEntry{}
	for _, st := range states {
		m := map[string][]FenceEntry{}
		for _, e := range st.FenceLog {
			if !e.Fenced && len(states) > 1 && !made[change{e.Origin, e.CIDR, e.Fenced, e.Time.UTC()}] {
				continue // an unfence no site of the pair made
			}
			fe := e.FenceEntry
			fe.Time = e.Learned.UTC()
			if e.Learned.IsZero() {
				fe.Time = e.Time.UTC()
			}
			m[fe.CIDR] = append(m[fe.CIDR], fe)
		}
		for c := range m {
			sort.SliceStable(m[c], func(i, j int) bool { return m[c][i].Time.Before(m[c][j].Time) })
		}
		out[st.Site] = m
	}
	return out
}

// fencedAt returns the CIDR fencing client at time t, if any.
func fencedAt(fences map[string][]FenceEntry, client string, t time.Time) (string, bool) {
	addr, err := netip.ParseAddr(client)
	if err != nil {
		return "", false
	}
	for c, evs := range fences {
		p, err := netip.ParsePrefix(c)
		if err != nil || !p.Contains(addr) {
			continue
		}
		i := sort.Search(len(evs), func(i int) bool { return evs[i].Time.After(t) })
		if i > 0 && evs[i-1].Fenced {
			return c, true
		}
	}
	return "", false
}

// lineageEnd returns the last sequence number of epoch in a lineage whose
// newest epoch is at curSeq, and whether the epoch is in it at all.
func lineageEnd(lineage []Fork, curSeq, epoch uint64) (uint64, int, bool) {
	for i, f := range lineage {
		if f.Epoch == epoch {
			if i+1 < len(lineage) {
				return lineage[i+1].BaseSeq, i, true
			}
			return curSeq, i, true
		}
	}
	return 0, -1, false
}

func checkUnit(r *Report, key string, cs []copyOf, fences map[string]map[string][]FenceEntry) {
	// The authoritative copy: the primary of the newest epoch, or the
	// newest copy when none is primary.
	var auth *copyOf
	for i := range cs {
		c := &cs[i]
		better := auth == nil ||
			(c.u.Role == RolePrimary && auth.u.Role != RolePrimary) ||
			(c.u.Role == auth.u.Role && c.u.Epoch > auth.u.Epoch)
		if better {
			auth = c
		}
	}
	var proms []promotion
	for _, c := range cs {
		for _, rc := range c.u.RoleChanges {
			if rc.Role == RolePrimary && !rc.Scheduled {
				proms = append(proms, promotion{site: c.site, time: rc.Time, epoch: rc.Epoch})
			}
		}
	}
	r.Promotions += len(proms)
	promTime := map[uint64]time.Time{}
	for _, p := range proms {
		promTime[p.epoch] = p.time
	}

	// Surviving writes per block, to replay the expected data.
	type blockRef struct {
		vol string
		n   int64
	}
	var surviving []WriteRecord
	for _, c := range cs {
		for _, w := range c.u.Writes {
			r.Writes++
			for _, p := range proms {
				if p.site != c.site && p.epoch > w.Epoch && p.time.Before(w.Time) {
					r.Violations = append(r.Violations, Violation{Kind: SplitBrain, Unit: key, Site: c.site,
						Detail: fmt.Sprintf("write seq %d to %s block %d accepted at %s, after %s was promoted at %s",
							w.Seq, w.Volume, w.Block, w.Time.Format(time.RFC3339Nano), p.site, p.time.Format(time.RFC3339Nano))})
					break
				}
			}
			if cidr, ok := fencedAt(fences[c.site], w.Client, w.Time); ok {
				r.Violations = append(r.Violations, Violation{Kind: FencedWrite, Unit: key, Site: c.site,
					Detail: fmt.Sprintf("write seq %d from %s accepted at %s while %s was fenced", w.Seq, w.Client, w.Time.Format(time.RFC3339Nano), cidr)})
			}
			end, idx, on := lineageEnd(auth.u.Lineage, auth.u.Seq, w.Epoch)
			if on && w.Seq <= end {
				surviving = append(surviving, w)
				continue
			}
			r.Lost = append(r.Lost, LostWrite{Unit: key, Site: c.site, Write: w})
			// Which completed sync did the site know of when its epoch was
			// superseded?
			cutoff := time.Time{}
			if on && idx+1 < len(auth.u.Lineage) {
				cutoff = promTime[auth.u.Lineage[idx+1].Epoch]
			}
			var synced uint64
			for _, s := range c.u.Syncs {
				if s.Epoch == w.Epoch && (cutoff.IsZero() || !s.Time.After(cutoff)) && s.Seq > synced {
					synced = s.Seq
				}
			}
			if w.Seq <= synced {
				r.Violations = append(r.Violations, Violation{Kind: LostSyncedWrite, Unit: key, Site: c.site,
					Detail: fmt.Sprintf("write seq %d was acknowledged before the last completed sync (seq %d) and is lost", w.Seq, synced)})
			}
		}
	}

	// Replay the surviving writes and compare with the copies' data.
	sort.Slice(surviving, func(i, j int) bool { return surviving[i].Seq < surviving[j].Seq })
	checkCopy := func(c copyOf, upTo uint64) {
		want := map[blockRef]WriteRecord{}
		for _, w := range surviving {
			if w.Seq <= upTo {
				want[blockRef{w.Volume, w.Block}] = w
			}
		}
		for ref, w := range want {
			b, ok := c.u.Blocks[ref.vol][ref.n]
			if !ok || b.Seq != w.Seq || blockSum(b.Data) != w.Sum {
				r.Violations = append(r.Violations, Violation{Kind: DataMismatch, Unit: key, Site: c.site,
					Detail: fmt.Sprintf("%s block %d should hold write seq %d, holds seq %d", ref.vol, ref.n, w.Seq, b.Seq)})
			}
		}
		for vol, bs := range c.u.Blocks {
			for n, b := range bs {
				if _, ok := want[blockRef{vol, n}]; !ok && b.Seq <= upTo {
					r.Violations = append(r.Violations, Violation{Kind: DataMismatch, Unit: key, Site: c.site,
						Detail: fmt.Sprintf("%s block %d holds seq %d that no surviving acknowledged write explains", vol, n, b.Seq)})
				}
			}
		}
	}
	checkCopy(*auth, auth.u.Seq)
	for _, c := range cs {
		if c.site == auth.site || c.u.Role != RoleSecondary || !c.u.InSync || c.u.Resyncing {
			continue
		}
		if !Consistent(auth.u.Lineage, auth.u.Seq, c.u.Epoch, c.u.Seq) {
			continue
		}
		checkCopy(c, c.u.Seq)
	}
}

// ReplicasUnchanged compares two states of one site, taken before and
// after something that must leave its replicas alone (a test recovery,
// which only snapshots them and writes to copies): the same units, each
// with the same role, replication flags, epoch and lineage, and no client
// write it did not have. With data set it compares every block too, for
// a site whose replication was stopped in between; without, blocks may
// have moved by replication, which Check verifies against the primary.
// It returns one line per difference; snapshots and copies are ignored.
func ReplicasUnchanged(before, after *State, data bool) []string {
	var diff []string
	for _, b := range before.Units {
		a := after.Unit(b.Key())
		if a == nil {
			diff = append(diff, fmt.Sprintf("%s: gone from site %s", b.Key(), after.Site))
			continue
		}
		switch {
		case a.Role != b.Role || a.Enabled != b.Enabled || a.Demoted != b.Demoted:
			diff = append(diff, fmt.Sprintf("%s: role %s (replication %v, demoted %v), was %s (%v, %v)", b.Key(), a.Role, a.Enabled, a.Demoted, b.Role, b.Enabled, b.Demoted))
		case a.Epoch != b.Epoch || !slices.Equal(a.Lineage, b.Lineage):
			diff = append(diff, fmt.Sprintf("%s: epoch %d, was %d", b.Key(), a.Epoch, b.Epoch))
		case b.Role != RolePrimary && len(a.Writes) != len(b.Writes):
			diff = append(diff, fmt.Sprintf("%s: %d client write(s) on a replica, had %d", b.Key(), len(a.Writes), len(b.Writes)))
		}
		if !data {
			continue
		}
		for vol, blocks := range b.Blocks {
			for n, blk := range blocks {
				if got, ok := a.Blocks[vol][n]; !ok || !bytes.Equal(got.Data, blk.Data) {
					diff = append(diff, fmt.Sprintf("%s: block %d of %s changed", b.Key(), n, vol))
				}
			}
		}
		for vol, blocks := range a.Blocks {
			for n := range blocks {
				if _, ok := b.Blocks[vol][n]; !ok {
					diff = append(diff, fmt.Sprintf("%s: block %d of %s appeared", b.Key(), n, vol))
				}
			}
		}
	}
	for _, a := range after.Units {
		if before.Unit(a.Key()) == nil {
			diff = append(diff, fmt.Sprintf("%s: appeared on site %s", a.Key(), after.Site))
		}
	}
	slices.Sort(diff)
	return diff
}
