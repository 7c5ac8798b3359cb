package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/drover-dr/drover/csiaddons/replication"
)

// The replication link: a primary ships its changes to the peer site over
// HTTP on the peer's data address. Each round it asks the peer where its
// copies stand, then sends each copy what it lacks: an incremental delta
// (the blocks written after the copy's sequence number) when the copy's
// lineage is consistent with the primary's, the whole data when the copy is
// resyncing, and nothing when the copy has diverged or is itself primary
// (split-brain), which the primary reports as status ERROR.

type peerUnitStatus struct {
	Exists    bool   `json:"exists"`
	Enabled   bool   `json:"enabled"`
	Role      Role   `json:"role"`
	Demoted   bool   `json:"demoted"`
	Epoch     uint64 `json:"epoch"`
	Seq       uint64 `json:"seq"`
	Lineage   []Fork `json:"lineage"`
	Resyncing bool   `json:"resyncing"`
	InSync    bool   `json:"inSync"`
	// Recreating: a resync is deleting and re-creating the copy
	// (ceph-csi profile).
	Recreating bool `json:"recreating,omitempty"`
}

type peerStatusRequest struct {
	From  string   `json:"from"`
	Units []string `json:"units"`
}

type peerStatusResponse struct {
	Site  string                    `json:"site"`
	Units map[string]peerUnitStatus `json:"units"`
	// Restarted is when the site last came back from a power loss.
	Restarted time.Time `json:"restarted,omitzero"`
}

type applyUnit struct {
	Key      string                     `json:"key"`
	Full     bool                       `json:"full"`
	BaseSeq  uint64                     `json:"baseSeq"`
	ToSeq    uint64                     `json:"toSeq"`
	Epoch    uint64                     `json:"epoch"`
	Lineage  []Fork                     `json:"lineage"`
	Blocks   map[string]map[int64]Block `json:"blocks"`
	SnapTime time.Time                  `json:"snapTime"`
	// Made: the peer creates its copy of this volume (Volumes) when it
	// has none (made.go).
	Made    bool     `json:"made,omitempty"`
	Volumes []string `json:"volumes,omitempty"`
}

type applyRequest struct {
	From  string      `json:"from"`
	Units []applyUnit `json:"units"`
}

type applyResponse struct {
	// Results maps a unit key to "" when applied, or the reason it was not.
	Results map[string]string `json:"results"`
}

type fencesMessage struct {
	From    string       `json:"from"`
	Entries []FenceEntry `json:"entries"`
}

var errLinkDown = errors.New("replication link is down")

type peerClient struct {
	base  string
	token string
	http  *http.Client
}

func newPeerClient(addr, token string) *peerClient {
	return &peerClient{base: "http://" + addr, token: token, http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
}

func (p *peerClient) close() { p.http.CloseIdleConnections() }

func (p *peerClient) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("peer %s: %s: %s", path, resp.Status, bytes.TrimSpace(msg))
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func (p *peerClient) status(ctx context.Context, from string, keys []string) (*peerStatusResponse, error) {
	var out peerStatusResponse
	err := p.post(ctx, "/v1/peer/status", peerStatusRequest{From: from, Units: keys}, &out)
	return &out, err
}

func (p *peerClient) apply(ctx context.Context, req applyRequest) (*applyResponse, error) {
	var out applyResponse
	err := p.post(ctx, "/v1/peer/apply", req, &out)
	return &out, err
}

func (p *peerClient) exchangeFences(ctx context.Context, from string, entries []FenceEntry) ([]FenceEntry, error) {
	var out fencesMessage
	err := p.post(ctx, "/v1/peer/fences", fencesMessage{From: from, Entries: entries}, &out)
	return out.Entries, err
}

// peerUnitStatus asks the peer where its copy of one unit stands.
func (s *Site) peerUnitStatus(ctx context.Context, key string) (peerUnitStatus, error) {
	if s.peer == nil {
		return peerUnitStatus{}, errors.New("no peer site configured")
	}
	if s.isLinkDown() {
		return peerUnitStatus{}, errLinkDown
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := s.peer.status(ctx, s.cfg.Name, []string{key})
	if err != nil {
		return peerUnitStatus{}, err
	}
	ps := resp.Units[key]
	if !ps.Exists {
		return ps, fmt.Errorf("%s does not exist on the peer site", key)
	}
	return ps, nil
}

// ---- peer side ----

func (s *Site) linkGuard(w http.ResponseWriter) bool {
	if s.isLinkDown() {
		httpError(w, http.StatusServiceUnavailable, "replication link is down")
		return false
	}
	return true
}

func (s *Site) handlePeerStatus(w http.ResponseWriter, r *http.Request) {
	if !s.linkGuard(w) {
		return
	}
	var req peerStatusRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		httpError(w, http.StatusBadRequest, "decode: %v", err)
		return
	}
	s.mu.Lock()
	resp := peerStatusResponse{Site: s.cfg.Name, Units: map[string]peerUnitStatus{}, Restarted: s.restarted}
	s.mu.Unlock()
	for _, k := range req.Units {
		u, ok := s.unitByKey(k)
		if !ok {
			resp.Units[k] = peerUnitStatus{}
			continue
		}
		u.mu.Lock()
		resp.Units[k] = peerUnitStatus{
			Exists: true, Enabled: u.st.Enabled, Role: u.st.Role, Demoted: u.st.Demoted,
			Epoch: u.st.Epoch, Seq: u.st.Seq, Lineage: append([]Fork(nil), u.st.Lineage...),
			Resyncing: u.st.Resyncing, InSync: u.st.InSync,
			Recreating: time.Now().Before(u.recreateUntil),
		}
		u.mu.Unlock()
	}
	writeJSON(w, resp)
}

func (s *Site) handlePeerApply(w http.ResponseWriter, r *http.Request) {
	if !s.linkGuard(w) {
		return
	}
	var req applyRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		httpError(w, http.StatusBadRequest, "decode: %v", err)
		return
	}
	resp := applyResponse{Results: map[string]string{}}
	for _, a := range req.Units {
		resp.Results[a.Key] = s.applyFromPeer(a)
	}
	writeJSON(w, resp)
}

// applyFromPeer applies one shipped change to the local copy; it returns ""
// or why it refused.
func (s *Site) applyFromPeer(a applyUnit) string {
	u, ok := s.unitByKey(a.Key)
	if !ok && a.Made {
		var why string
		if u, why = s.createFromPeer(a); u == nil {
			return why
		}
	} else if !ok {
		return "missing on this site"
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.st.Role == RolePrimary {
		return "the copy on this site is primary"
	}
	fresh := u.st.Epoch == 0 && u.st.Seq == 0
	// The ceph-csi profile also refuses a copy demoted after its peer's
	// forced promotion (unit.splitBrain).
	split := s.profile.mirror && !fresh && u.splitBrain(a.Lineage, a.ToSeq)
	if a.Full {
		if !u.st.Resyncing && !fresh && (split || !Consistent(a.Lineage, a.ToSeq, u.st.Epoch, u.st.Seq)) {
			return "diverged: resync required"
		}
		u.st.Blocks = a.Blocks
		if u.st.Blocks == nil {
			u.st.Blocks = map[string]map[int64]Block{}
		}
		u.st.Demoted = false
	} else {
		if u.st.Resyncing {
			return "resyncing: a full copy is required"
		}
		if split || !Consistent(a.Lineage, a.ToSeq, u.st.Epoch, u.st.Seq) {
			return "diverged: resync required"
		}
		if u.st.Seq != a.BaseSeq {
			return fmt.Sprintf("base mismatch: at %d, delta from %d", u.st.Seq, a.BaseSeq)
		}
		if len(a.Blocks) == 0 && u.st.Epoch == a.Epoch && u.st.Seq == a.ToSeq && u.st.Enabled && u.st.InSync &&
			slices.Equal(u.st.Lineage, a.Lineage) {
			// An empty delta to a copy that holds it all: nothing changes,
			// so nothing is written (a site of many groups would otherwise
			// rewrite every unit's file at every interval).
			return ""
		}
		for vol, bs := range a.Blocks {
			if u.st.Blocks[vol] == nil {
				u.st.Blocks[vol] = map[int64]Block{}
			}
			for i, b := range bs {
				u.st.Blocks[vol][i] = b
			}
		}
	}
	u.st.Epoch, u.st.Seq = a.Epoch, a.ToSeq
	u.st.Lineage = append([]Fork(nil), a.Lineage...)
	u.st.Enabled = true
	u.st.InSync = true
	u.st.Resyncing = false
	if err := s.store.saveUnit(&u.st); err != nil {
		s.log.Error("persist applied sync", "unit", a.Key, "err", err)
		return "persist failed: " + err.Error()
	}
	return ""
}

func (s *Site) handlePeerFences(w http.ResponseWriter, r *http.Request) {
	if !s.linkGuard(w) {
		return
	}
	var req fencesMessage
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		httpError(w, http.StatusBadRequest, "decode: %v", err)
		return
	}
	s.mergeFences(req.Entries)
	s.mu.Lock()
	out := fencesMessage{From: s.cfg.Name, Entries: s.fenceEntriesLocked()}
	s.mu.Unlock()
	writeJSON(w, out)
}

// restartMessage tells the peer when this site came back from a power loss.
type restartMessage struct {
	From string    `json:"from"`
	At   time.Time `json:"at"`
}

// announceRestart tells the peer, within a second or two, that this site
// restarted at at.
func (s *Site) announceRestart(at time.Time) {
	if s.peer == nil || s.isLinkDown() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var out struct{}
	if err := s.peer.post(ctx, "/v1/peer/restarted", restartMessage{From: s.cfg.Name, At: at}, &out); err != nil {
		s.log.Warn("could not tell the peer of the restart; it learns it at its next shipping round", "err", err)
	}
}

func (s *Site) handlePeerRestarted(w http.ResponseWriter, r *http.Request) {
	if !s.linkGuard(w) {
		return
	}
	var m restartMessage
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
		httpError(w, http.StatusBadRequest, "decode: %v", err)
		return
	}
	if !m.At.IsZero() {
		s.peerRestarted.Store(m.At.UnixNano())
	}
	writeJSON(w, struct{}{})
}

// ---- shipping side ----

func (s *Site) replicationLoop() {
	defer close(s.loopDone)
	tick := s.cfg.SyncInterval / 5
	if tick < 10*time.Millisecond {
		tick = 10 * time.Millisecond
	}
	if tick > 200*time.Millisecond {
		tick = 200 * time.Millisecond
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	ctx, cancel := s.stopCtx()
	defer cancel()
	var nextFence time.Time
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if s.IsDown() || s.peer == nil {
			continue
		}
		now := time.Now()
		if now.After(nextFence) && !s.isLinkDown() {
			s.syncFencesFromPeer(time.Second)
			s.dropPending(ctx)
			nextFence = now.Add(s.cfg.SyncInterval)
		}
		s.replicateOnce(ctx)
	}
}

type shipment struct {
	u        *unit
	key      string
	primary  bool
	interval time.Duration
}

// replicateOnce runs one round for the units that are due.
func (s *Site) replicateOnce(ctx context.Context) {
	now := time.Now()
	var due []shipment
	unitKeys, units := s.unitList()
	for i, u := range units {
		k := unitKeys[i]
		u.mu.Lock()
		candidate := u.st.Enabled && (u.st.Role == RolePrimary || (u.st.Demoted && u.st.Seq > 0))
		if candidate && !now.Before(u.nextSync) {
			iv := s.cfg.SyncInterval
			if u.st.Schedule > 0 && !s.profile.mirror {
				// The ceph-csi profile looks at its peer every interval
				// and ships only the snapshots that are due.
				iv = u.st.Schedule
			}
			u.nextSync = now.Add(iv)
			due = append(due, shipment{u: u, key: k, primary: u.st.Role == RolePrimary, interval: iv})
		}
		u.mu.Unlock()
	}
	if len(due) == 0 {
		return
	}
	setStatus := func(sh shipment, st replication.GetVolumeReplicationInfoResponse_Status, msg string) {
		if !sh.primary {
			return
		}
		sh.u.mu.Lock()
		sh.u.status, sh.u.statusMsg = st, msg
		sh.u.mu.Unlock()
	}
	if s.isLinkDown() {
		for _, sh := range due {
			setStatus(sh, replication.GetVolumeReplicationInfoResponse_DEGRADED, "replication link to the peer site is down")
		}
		return
	}
	keys := make([]string, len(due))
	for i, sh := range due {
		keys[i] = sh.key
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ps, err := s.peer.status(rctx, s.cfg.Name, keys)
	if err != nil {
		for _, sh := range due {
			setStatus(sh, replication.GetVolumeReplicationInfoResponse_DEGRADED, "peer site unreachable: "+err.Error())
		}
		return
	}
	if !ps.Restarted.IsZero() {
		s.peerRestarted.Store(ps.Restarted.UnixNano())
	}

	var batch []applyUnit
	var shipped []shipment
	var bytesOf []int64
	for _, sh := range due {
		p := ps.Units[sh.key]
		u := sh.u
		u.mu.Lock()
		if s.profile.mirror && sh.primary && p.Exists && !u.snapshotDue(now, p) {
			u.mu.Unlock()
			continue
		}
		lineage := u.st.Lineage
		a := applyUnit{Key: sh.key, ToSeq: u.st.Seq, Epoch: u.st.Epoch, Lineage: append([]Fork(nil), lineage...), SnapTime: time.Now()}
		var reason string
		switch {
		case !p.Exists && u.st.Made && sh.primary:
			a.Full, a.Made, a.Volumes = true, true, slices.Clone(u.st.Volumes)
		case !p.Exists:
			reason = "missing on the peer site"
		case p.Role == RolePrimary && sh.primary:
			reason = "split-brain: the peer copy is also primary"
		case p.Role == RolePrimary:
			// A demoted copy whose peer took over: nothing to ship.
			u.mu.Unlock()
			continue
		case !sh.primary && (p.Resyncing || !Consistent(lineage, u.st.Seq, p.Epoch, p.Seq) || (p.Epoch == u.st.Epoch && p.Seq >= u.st.Seq)):
			// A demoted copy ships only a final delta the peer lacks.
			u.mu.Unlock()
			continue
		case p.Resyncing:
			a.Full = true
		case Consistent(lineage, u.st.Seq, p.Epoch, p.Seq):
			a.BaseSeq = p.Seq
		default:
			reason = "the peer copy has diverged (split-brain): demote it and resync"
		}
		if reason != "" {
			u.mu.Unlock()
			setStatus(sh, replication.GetVolumeReplicationInfoResponse_ERROR, reason)
			continue
		}
		var n int64
		a.Blocks = map[string]map[int64]Block{}
		for vol, bs := range u.st.Blocks {
			for i, b := range bs {
				if a.Full || b.Seq > a.BaseSeq {
					if a.Blocks[vol] == nil {
						a.Blocks[vol] = map[int64]Block{}
					}
					a.Blocks[vol][i] = b
					n += int64(len(b.Data))
				}
			}
		}
		u.mu.Unlock()
		batch = append(batch, a)
		shipped = append(shipped, sh)
		bytesOf = append(bytesOf, n)
	}
	if len(batch) == 0 {
		return
	}
	res, err := s.peer.apply(rctx, applyRequest{From: s.cfg.Name, Units: batch})
	if err != nil {
		for _, sh := range shipped {
			setStatus(sh, replication.GetVolumeReplicationInfoResponse_DEGRADED, "shipping to the peer site failed: "+err.Error())
		}
		return
	}
	done := time.Now()
	for i, sh := range shipped {
		a := batch[i]
		if why := res.Results[a.Key]; why != "" {
			setStatus(sh, replication.GetVolumeReplicationInfoResponse_ERROR, "peer refused the sync: "+why)
			continue
		}
		u := sh.u
		u.mu.Lock()
		if u.st.Epoch != a.Epoch {
			// The copy changed role while the sync was in flight.
			u.mu.Unlock()
			continue
		}
		advanced := a.ToSeq != u.st.PeerSeq || a.Full || len(u.st.Syncs) == 0 || u.st.Syncs[len(u.st.Syncs)-1].Epoch != a.Epoch
		u.st.PeerSeq = a.ToSeq
		if sh.primary {
			u.st.LastSync = &SyncInfo{SnapTime: a.SnapTime, Duration: done.Sub(a.SnapTime), Bytes: bytesOf[i]}
			u.status, u.statusMsg = replication.GetVolumeReplicationInfoResponse_HEALTHY, ""
			if s.profile.mirror {
				u.st.SnapPending = false
				if u.st.Schedule > 0 && !a.SnapTime.Before(u.nextSnap) {
					u.nextSnap = a.SnapTime.Add(u.st.Schedule)
				}
			}
		}
		if advanced {
			u.st.Syncs = append(u.st.Syncs, SyncRecord{Time: done, SnapTime: a.SnapTime, Epoch: a.Epoch, Seq: a.ToSeq, Bytes: bytesOf[i]})
			if err := s.store.saveUnit(&u.st); err != nil {
				s.log.Error("persist sync", "unit", a.Key, "err", err)
			}
		}
		u.mu.Unlock()
	}
}
