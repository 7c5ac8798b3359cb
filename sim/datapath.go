package sim

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// MaxBlockSize bounds one block write on the data path.
const MaxBlockSize = 1 << 20

// ClientHeader names a data-path client for GetFenceClients; without it the
// client is known by its address.
const ClientHeader = "X-Drover-Client"

func blockSum(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:8])
}

func (s *Site) dataHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/volumes/{vol}/blocks/{n}", s.handleWrite)
	mux.HandleFunc("GET /v1/volumes/{vol}/blocks/{n}", s.handleRead)
	mux.HandleFunc("POST /v1/peer/status", s.peerOnly(s.handlePeerStatus))
	mux.HandleFunc("POST /v1/peer/apply", s.peerOnly(s.handlePeerApply))
	mux.HandleFunc("POST /v1/peer/fences", s.peerOnly(s.handlePeerFences))
	mux.HandleFunc("POST /v1/peer/drop", s.peerOnly(s.handlePeerDrop))
	mux.HandleFunc("POST /v1/peer/restarted", s.peerOnly(s.handlePeerRestarted))
	return mux
}

// peerOnly admits a call of the peer API only with the pair's token: the
// peer API rewrites fences and data, and the data port is where every
// client, a fenced one too, connects.
func (s *Site) peerOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.PeerToken != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.PeerToken)) != 1 {
				s.log.Warn("peer API call refused: no valid peer token", "from", r.RemoteAddr, "path", r.URL.Path)
				httpError(w, http.StatusUnauthorized, "the peer API needs the pair's peer token")
				return
			}
		}
		h(w, r)
	}
}

func httpError(w http.ResponseWriter, code int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// admit identifies the client by its source address, records it for
// GetFenceClients, and refuses it when a fence covers it.
func (s *Site) admit(w http.ResponseWriter, r *http.Request) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		httpError(w, http.StatusBadRequest, "bad remote address %q", r.RemoteAddr)
		return netip.Addr{}, false
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		httpError(w, http.StatusBadRequest, "bad remote address %q", r.RemoteAddr)
		return netip.Addr{}, false
	}
	addr = addr.Unmap()
	id := r.Header.Get(ClientHeader)
	if id == "" {
		id = addr.String()
	}
	s.mu.Lock()
	if c, ok := s.sf.Clients[addr.String()]; !ok || c.ID != id {
		s.sf.Clients[addr.String()] = ClientSeen{ID: id, Addr: addr.String(), FirstSeen: time.Now()}
		if err := s.saveSiteLocked(); err != nil {
			s.log.Error("persist clients", "err", err)
		}
	}
	s.mu.Unlock()
	if cidr, fenced := s.fencedBy(addr); fenced {
		httpError(w, http.StatusForbidden, "fenced: client %s is in fenced CIDR %s", addr, cidr)
		return addr, false
	}
	return addr, true
}

func (s *Site) blockTarget(w http.ResponseWriter, r *http.Request) (*unit, string, int64, bool) {
	vol := r.PathValue("vol")
	n, err := strconv.ParseInt(r.PathValue("n"), 10, 64)
	if err != nil || n < 0 {
		httpError(w, http.StatusBadRequest, "block %q is not a non-negative integer", r.PathValue("n"))
		return nil, "", 0, false
	}
	u, err := s.lookupVolume(vol)
	if err != nil {
		httpError(w, http.StatusNotFound, "volume %q not found", vol)
		return nil, "", 0, false
	}
	return u, vol, n, true
}

func (s *Site) handleWrite(w http.ResponseWriter, r *http.Request) {
	addr, ok := s.admit(w, r)
	if !ok {
		return
	}
	if s.cloneBlock(w, r, addr, true) {
		return
	}
	u, vol, n, ok := s.blockTarget(w, r)
	if !ok {
		return
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, MaxBlockSize+1))
	if err != nil {
		httpError(w, http.StatusBadRequest, "read body: %v", err)
		return
	}
	if len(data) > MaxBlockSize {
		httpError(w, http.StatusRequestEntityTooLarge, "block larger than %d bytes", MaxBlockSize)
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.st.Role != RolePrimary {
		httpError(w, http.StatusConflict, "read-only: the copy of %s %q on site %s is %s", u.st.Kind, u.st.ID, s.cfg.Name, u.st.Role)
		return
	}
	// Again at the commit: a fence that landed while the request was read
	// must stop it, as it stops the next one.
	if cidr, fenced := s.fencedBy(addr); fenced {
		httpError(w, http.StatusForbidden, "fenced: client %s is in fenced CIDR %s", addr, cidr)
		return
	}
	// Apply, persist, and only then acknowledge; undo on a failed persist.
	prevSeq := u.st.Seq
	prevBlock, had := u.st.Blocks[vol][n]
	nWrites := len(u.st.Writes)
	now := time.Now()
	u.st.Seq++
	if u.st.Blocks[vol] == nil {
		u.st.Blocks[vol] = map[int64]Block{}
	}
	u.st.Blocks[vol][n] = Block{Data: data, Seq: u.st.Seq, Epoch: u.st.Epoch}
	rec := WriteRecord{Volume: vol, Block: n, Seq: u.st.Seq, Epoch: u.st.Epoch, Time: now, Client: addr.String(), Sum: blockSum(data)}
	u.st.Writes = append(u.st.Writes, rec)
	if err := s.store.saveUnit(&u.st); err != nil {
		u.st.Seq = prevSeq
		if had {
			u.st.Blocks[vol][n] = prevBlock
		} else {
			delete(u.st.Blocks[vol], n)
		}
		u.st.Writes = u.st.Writes[:nWrites]
		httpError(w, http.StatusInternalServerError, "persist: %v", err)
		return
	}
	writeJSON(w, map[string]any{"seq": rec.Seq, "epoch": rec.Epoch})
}

func (s *Site) handleRead(w http.ResponseWriter, r *http.Request) {
	addr, ok := s.admit(w, r)
	if !ok {
		return
	}
	if s.cloneBlock(w, r, addr, false) {
		return
	}
	u, vol, n, ok := s.blockTarget(w, r)
	if !ok {
		return
	}
	u.mu.Lock()
	b, found := u.st.Blocks[vol][n]
	u.mu.Unlock()
	if !found {
		httpError(w, http.StatusNotFound, "block %d of volume %q was never written", n, vol)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Drover-Seq", strconv.FormatUint(b.Seq, 10))
	w.Write(b.Data)
}
