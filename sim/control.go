package sim

import (
	"encoding/json"
	"net/http"
)

// The control API serves operators, demos and tests; it stays up while the
// site is down, so a lost site can be brought back.
//
//	GET    /v1/state        the site's state (State, JSON)
//	GET    /v1/faults       the injected faults and how often each fired
//	PUT    /v1/faults       replace the injected faults ([]FaultRule, JSON)
//	POST   /v1/down         take the site down
//	POST   /v1/power-loss   take it down as a power cut does (Up restarts it)
//	POST   /v1/up           bring it back
//	POST   /v1/link/down    cut the replication link
//	POST   /v1/link/up      restore it
//	GET    /healthz         200 while the process runs
func (s *Site) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"site": s.cfg.Name, "down": s.IsDown()})
	})
	mux.HandleFunc("GET /v1/state", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.Snapshot()) })
	mux.HandleFunc("GET /v1/faults", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"rules": s.faults.list(), "fired": s.FaultCounts()})
	})
	mux.HandleFunc("PUT /v1/faults", func(w http.ResponseWriter, r *http.Request) {
		var rules []FaultRule
		if err := json.NewDecoder(r.Body).Decode(&rules); err != nil {
			httpError(w, http.StatusBadRequest, "decode faults: %v", err)
			return
		}
		if err := s.SetFaults(rules); err != nil {
			httpError(w, http.StatusBadRequest, "%v", err)
			return
		}
		writeJSON(w, map[string]any{"rules": s.faults.list()})
	})
	mux.HandleFunc("POST /v1/down", func(w http.ResponseWriter, r *http.Request) {
		s.Down()
		writeJSON(w, map[string]any{"down": true})
	})
	mux.HandleFunc("POST /v1/power-loss", func(w http.ResponseWriter, r *http.Request) {
		s.PowerLoss()
		writeJSON(w, map[string]any{"down": true, "powerLoss": true})
	})
	mux.HandleFunc("POST /v1/up", func(w http.ResponseWriter, r *http.Request) {
		if err := s.Up(); err != nil {
			httpError(w, http.StatusInternalServerError, "%v", err)
			return
		}
		writeJSON(w, map[string]any{"down": false})
	})
	mux.HandleFunc("POST /v1/link/down", func(w http.ResponseWriter, r *http.Request) {
		s.SetLink(false)
		writeJSON(w, map[string]any{"link": "down"})
	})
	mux.HandleFunc("POST /v1/link/up", func(w http.ResponseWriter, r *http.Request) {
		s.SetLink(true)
		writeJSON(w, map[string]any{"link": "up"})
	})
	return mux
}
