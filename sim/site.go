package sim

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/csiaddons/identity"
	"github.com/drover-dr/drover/csiaddons/replication"
)

// unit is the live copy of a replication unit on a site.
type unit struct {
	// op is held by an RPC for its whole duration; a second RPC on the same
	// unit finds it taken and answers ABORTED.
	op sync.Mutex
	// mu guards st and the runtime fields below.
	mu sync.Mutex
	st UnitState

	status    replication.GetVolumeReplicationInfoResponse_Status
	statusMsg string
	nextSync  time.Time

	// The ceph-csi profile: when the schedule takes its next snapshot,
	// and the span a resync deletes and re-creates the image in.
	nextSnap      time.Time
	recreateStart time.Time
	recreateUntil time.Time
}

// Site is one simulated storage site: the CSI-Addons services over gRPC, a
// block data path over HTTP, asynchronous replication to a peer site, a
// fence domain shared with the peer, persisted state and fault injection.
type Site struct {
	cfg    Config
	log    *slog.Logger
	store  *store
	faults *faults
	peer   *peerClient

	// unitsMu guards units and volumes: a unit is added at run time when
	// replication is enabled on a volume created through CSI (made.go),
	// on this site or, by the link, on its peer.
	unitsMu sync.RWMutex
	units   map[string]*unit  // by unit key
	volumes map[string]string // volume id -> unit key
	unimpl  map[string]bool
	profile *profile
	csiMu   sync.Mutex // one CSI create or delete at a time
	breaks  *breaks

	mu       sync.Mutex // guards the fields below and sf
	sf       *siteFile
	down     bool
	linkDown bool
	ready    bool
	// crashed: the site went down by a power loss (PowerLoss), not by
	// losing its network; restarted is when it came back from one.
	crashed   bool
	restarted time.Time
	// peerRestarted is the peer's restarted, as its last status reply
	// gave it (unix nanoseconds; read under a unit's lock, so atomic).
	peerRestarted atomic.Int64
	grpcSrv       *grpc.Server
	grpcLis       net.Listener
	dataSrv       *http.Server
	ctlSrv        *http.Server

	stop     chan struct{}
	loopDone chan struct{}
	closed   bool
}

// New creates a site from its configuration, restoring persisted state from
// cfg.StateDir when it holds any. Call Start to serve.
func New(cfg Config, log *slog.Logger) (*Site, error) {
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = time.Second
	}
	if cfg.ScheduleMinute <= 0 {
		cfg.ScheduleMinute = time.Minute
	}
	if cfg.MirrorRestart <= 0 {
		cfg.MirrorRestart = 10 * cfg.SyncInterval
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	prof, _ := profileFor(cfg.Driver)
	if cfg.DriverName == "" {
		cfg.DriverName = first(prof.driverName, "sim.drover.dev")
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	brk, _ := newBreaks(cfg.Breaks)
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	s := &Site{
		cfg:     cfg,
		log:     log.With("site", cfg.Name),
		store:   &store{dir: cfg.StateDir, sync: cfg.Fsync},
		faults:  newFaults(cfg.Seed, cfg.Faults),
		units:   map[string]*unit{},
		volumes: map[string]string{},
		unimpl:  map[string]bool{},
		profile: prof,
		breaks:  brk,
	}
	for _, m := range prof.unimplemented {
		s.unimpl[m] = true
	}
	for _, m := range cfg.Unimplemented {
		s.unimpl[m] = true
	}
	if cfg.PeerAddr != "" {
		s.peer = newPeerClient(cfg.PeerAddr, cfg.PeerToken)
	}
	if err := s.store.init(); err != nil {
		return nil, fmt.Errorf("site %q: state dir: %w", cfg.Name, err)
	}
	sf, units, ok, err := s.store.load()
	if err != nil {
		return nil, fmt.Errorf("site %q: %w", cfg.Name, err)
	}
	if ok {
		if sf.Name != cfg.Name {
			return nil, fmt.Errorf("site %q: state dir %s belongs to site %q", cfg.Name, cfg.StateDir, sf.Name)
		}
		s.sf = sf
		for _, st := range units {
			s.addUnit(*st)
			// A crash between an adoption's two files (made.go): the
			// replicated volume is the one that counts.
			if st.Made {
				delete(s.sf.Clones, st.ID)
			}
		}
		s.log.Info("restored state", "units", len(units), "dir", cfg.StateDir)
	} else {
		s.sf = &siteFile{Name: cfg.Name}
		if err := s.createInventory(); err != nil {
			return nil, err
		}
	}
	if s.sf.Fences == nil {
		s.sf.Fences = map[string]FenceEntry{}
	}
	if s.sf.Clients == nil {
		s.sf.Clients = map[string]ClientSeen{}
	}
	return s, nil
}

func (s *Site) createInventory() error {
	role := RoleSecondary
	if s.cfg.Primary {
		role = RolePrimary
	}
	mk := func(kind, id string, vols []string) UnitState {
		st := UnitState{Kind: kind, ID: id, Volumes: append([]string(nil), vols...), Role: role, Blocks: map[string]map[int64]Block{}}
		if role == RolePrimary {
			st.Epoch = 1
			st.Lineage = []Fork{{Epoch: 1}}
		}
		return st
	}
	for _, g := range s.cfg.Groups {
		s.addUnit(mk(KindGroup, g.ID, g.Volumes))
	}
	for _, v := range s.cfg.Volumes {
		s.addUnit(mk(KindVolume, v, []string{v}))
	}
	_, units := s.unitList()
	for _, u := range units {
		if err := s.store.saveUnit(&u.st); err != nil {
			return fmt.Errorf("site %q: save %s: %w", s.cfg.Name, u.st.Key(), err)
		}
	}
	return s.store.saveSite(s.sf)
}

func (s *Site) addUnit(st UnitState) *unit {
	if st.Blocks == nil {
		st.Blocks = map[string]map[int64]Block{}
	}
	u := &unit{st: st}
	s.unitsMu.Lock()
	defer s.unitsMu.Unlock()
	s.units[st.Key()] = u
	for _, v := range st.Volumes {
		s.volumes[v] = st.Key()
	}
	return u
}

// unitByKey returns the unit named key ("vg/ID" or "vol/ID").
func (s *Site) unitByKey(key string) (*unit, bool) {
	s.unitsMu.RLock()
	defer s.unitsMu.RUnlock()
	u, ok := s.units[key]
	return u, ok
}

// unitList returns the site's units by key, sorted.
func (s *Site) unitList() (keys []string, units []*unit) {
	s.unitsMu.RLock()
	defer s.unitsMu.RUnlock()
	keys = make([]string, 0, len(s.units))
	for k := range s.units {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		units = append(units, s.units[k])
	}
	return keys, units
}

// Name is the site's name.
func (s *Site) Name() string { return s.cfg.Name }

// GRPCAddr is the address of the CSI-Addons endpoint, as configured.
func (s *Site) GRPCAddr() string { return s.cfg.GRPCAddr }

// DataAddr is the address of the data path and replication link.
func (s *Site) DataAddr() string { return s.cfg.DataAddr }

// Start serves the site: gRPC, data path, control API and the replication
// loop. It returns once the listeners are bound.
func (s *Site) Start() error {
	if s.cfg.PeerToken == "" {
		s.log.Warn("the peer API is open: no peer token is set, so anyone who reaches the data port can rewrite this site's fences; give the pair a shared --peer-token", "site", s.cfg.Name)
	}
	if s.cfg.ControlAddr != "" {
		lis, err := net.Listen("tcp", s.cfg.ControlAddr)
		if err != nil {
			return fmt.Errorf("site %q: control listener: %w", s.cfg.Name, err)
		}
		s.ctlSrv = &http.Server{Handler: s.controlHandler(), ReadHeaderTimeout: 5 * time.Second}
		go s.ctlSrv.Serve(lis)
	}
	if err := s.listen(); err != nil {
		if s.ctlSrv != nil {
			s.ctlSrv.Close()
		}
		return err
	}
	s.stop = make(chan struct{})
	s.loopDone = make(chan struct{})
	go s.replicationLoop()
	keys, _ := s.unitList()
	s.log.Info("site serving", "grpc", s.cfg.GRPCAddr, "data", s.cfg.DataAddr, "control", s.cfg.ControlAddr, "peer", s.cfg.PeerAddr, "units", len(keys))
	return nil
}

// listen binds the gRPC and data listeners; it first adopts the peer's fence
// list, so that a site coming back never serves I/O that its fence domain
// refuses.
func (s *Site) listen() error {
	s.syncFencesFromPeer(2 * time.Second)

	network, addr := "tcp", s.cfg.GRPCAddr
	if p, ok := strings.CutPrefix(addr, "unix://"); ok {
		network, addr = "unix", p
		if err := os.Remove(addr); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("site %q: remove stale socket: %w", s.cfg.Name, err)
		}
	}
	glis, err := net.Listen(network, addr)
	if err != nil {
		return fmt.Errorf("site %q: grpc listener: %w", s.cfg.Name, err)
	}
	dlis, err := net.Listen("tcp", s.cfg.DataAddr)
	if err != nil {
		glis.Close()
		return fmt.Errorf("site %q: data listener: %w", s.cfg.Name, err)
	}
	var opts []grpc.ServerOption
	if s.cfg.TLS != nil {
		creds, err := serverTLS(s.cfg.TLS)
		if err != nil {
			glis.Close()
			dlis.Close()
			return fmt.Errorf("site %q: %w", s.cfg.Name, err)
		}
		opts = append(opts, grpc.Creds(creds))
	}
	// Stop waits for running handlers, so that nothing changes the state
	// after Down or Close returns.
	chain := []grpc.UnaryServerInterceptor{s.breaks.intercept}
	if s.cfg.Intercept != nil {
		chain = append([]grpc.UnaryServerInterceptor{s.cfg.Intercept}, chain...)
	}
	opts = append(opts, grpc.WaitForHandlers(true), grpc.ChainUnaryInterceptor(chain...))
	gs := grpc.NewServer(opts...)
	identity.RegisterIdentityServer(gs, &identityServer{s: s})
	fence.RegisterFenceControllerServer(gs, &fenceServer{s: s})
	replication.RegisterControllerServer(gs, &replicationServer{s: s})
	csi.RegisterIdentityServer(gs, &csiIdentity{s: s})
	csi.RegisterControllerServer(gs, &csiController{s: s})
	csi.RegisterGroupControllerServer(gs, &csiGroupController{s: s})
	ds := &http.Server{Handler: s.dataHandler(), ReadHeaderTimeout: 5 * time.Second}

	s.mu.Lock()
	s.grpcSrv, s.grpcLis, s.dataSrv = gs, glis, ds
	s.down = false
	s.ready = true
	s.mu.Unlock()
	go gs.Serve(glis)
	go ds.Serve(dlis)
	return nil
}

func serverTLS(t *TLSConfig) (credentials.TransportCredentials, error) {
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.ClientCAFile != "" {
		pem, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls client CA %s: no certificate found", t.ClientCAFile)
		}
		conf.ClientCAs = pool
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(conf), nil
}

// Down takes the site down as a lost site looks from outside: its gRPC
// endpoint and data path refuse connections and it stops replicating. Its
// state stays as it was. The control API stays up.
func (s *Site) Down() {
	s.mu.Lock()
	if s.down {
		s.mu.Unlock()
		return
	}
	s.down, s.ready = true, false
	gs, ds := s.grpcSrv, s.dataSrv
	s.grpcSrv, s.dataSrv = nil, nil
	s.mu.Unlock()
	stopServers(gs, ds)
	s.log.Warn("site down")
}

// PowerLoss takes the site down as a power cut does: as Down, and when it
// comes back (Up) it is a restarted site, whose mirror daemon reports the
// status of its peer's primary copies only after a while (ceph-csi
// profile: Config.MirrorRestart).
func (s *Site) PowerLoss() {
	s.Down()
	s.mu.Lock()
	s.crashed = true
	s.mu.Unlock()
	s.log.Warn("power lost")
}

// Up brings a downed site back on the same addresses.
func (s *Site) Up() error {
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if !down {
		return nil
	}
	if err := s.listen(); err != nil {
		return err
	}
	s.mu.Lock()
	restarted := s.crashed
	if restarted {
		s.crashed, s.restarted = false, time.Now()
	}
	at := s.restarted
	s.mu.Unlock()
	if restarted {
		// A restarted mirror daemon clears its former instance's statuses
		// at its start: the peer learns it at once, not at its next
		// shipping round (and from that round's status reply when the
		// link is down now).
		s.announceRestart(at)
	}
	s.log.Info("site up", "restarted", restarted)
	return nil
}

// SetLink cuts (false) or restores (true) the replication link to the peer,
// in both directions, while the site itself stays up.
func (s *Site) SetLink(up bool) {
	s.mu.Lock()
	s.linkDown = !up
	s.mu.Unlock()
	s.log.Info("replication link", "up", up)
}

// SetReady sets what Probe answers while the site is up, as a driver
// that serves but is not ready (its storage cluster out of reach, say)
// answers ready=false. Up makes the site ready again.
func (s *Site) SetReady(ready bool) {
	s.mu.Lock()
	s.ready = ready && !s.down
	s.mu.Unlock()
	s.log.Info("probe readiness", "ready", ready)
}

// IsDown reports whether the site is down.
func (s *Site) IsDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}

func (s *Site) isLinkDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.linkDown
}

// SetFaults replaces the injected faults.
func (s *Site) SetFaults(rules []FaultRule) error {
	for i, r := range rules {
		if err := r.validate(); err != nil {
			return fmt.Errorf("faults[%d]: %w", i, err)
		}
	}
	s.faults.set(rules)
	return nil
}

// FaultCounts tells how many injected faults fired, by "RPC:CODE" (or
// "RPC:DISCARDED" for a call acknowledged without effect).
func (s *Site) FaultCounts() map[string]int { return s.faults.counts() }

// Close stops everything the site runs. The state stays on disk.
func (s *Site) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	gs, ds, cs := s.grpcSrv, s.dataSrv, s.ctlSrv
	s.grpcSrv, s.dataSrv = nil, nil
	s.down = true
	s.mu.Unlock()
	if s.stop != nil {
		close(s.stop)
		<-s.loopDone
	}
	stopServers(gs, ds)
	if cs != nil {
		cs.Close()
	}
	if s.peer != nil {
		s.peer.close()
	}
	return nil
}

// stopServers stops the gRPC and data servers and waits for the handlers
// they were running (a data request gets a second to finish).
func stopServers(gs *grpc.Server, ds *http.Server) {
	if gs != nil {
		gs.Stop()
	}
	if ds != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if ds.Shutdown(ctx) != nil {
			ds.Close()
		}
	}
}

// Snapshot returns a deep copy of the site's state.
func (s *Site) Snapshot() *State {
	st := &State{Site: s.cfg.Name}
	_, units := s.unitList()
	for _, u := range units {
		u.mu.Lock()
		st.Units = append(st.Units, cloneUnit(&u.st))
		if u.statusMsg != "" {
			if st.Refused == nil {
				st.Refused = map[string]string{}
			}
			st.Refused[u.st.Key()] = u.statusMsg
		}
		u.mu.Unlock()
	}
	s.mu.Lock()
	st.Down = s.down
	for _, e := range s.sf.Fences {
		st.Fences = append(st.Fences, e)
	}
	st.FenceLog = append(st.FenceLog, s.sf.FenceLog...)
	for _, c := range s.sf.Clients {
		st.Clients = append(st.Clients, c)
	}
	for _, sn := range s.sf.Snapshots {
		c := *sn
		c.Blocks = cloneBlocks(sn.Blocks)
		st.Snapshots = append(st.Snapshots, c)
	}
	for _, g := range s.sf.GroupSnapshots {
		c := *g
		c.Snapshots, c.Volumes = slices.Clone(g.Snapshots), slices.Clone(g.Volumes)
		st.GroupSnapshots = append(st.GroupSnapshots, c)
	}
	for _, cl := range s.sf.Clones {
		c := *cl
		c.Blocks, c.Writes = cloneBlocks(cl.Blocks), slices.Clone(cl.Writes)
		st.Clones = append(st.Clones, c)
	}
	s.mu.Unlock()
	sort.Slice(st.Snapshots, func(i, j int) bool { return st.Snapshots[i].ID < st.Snapshots[j].ID })
	sort.Slice(st.GroupSnapshots, func(i, j int) bool { return st.GroupSnapshots[i].ID < st.GroupSnapshots[j].ID })
	sort.Slice(st.Clones, func(i, j int) bool { return st.Clones[i].ID < st.Clones[j].ID })
	sort.Slice(st.Fences, func(i, j int) bool { return st.Fences[i].CIDR < st.Fences[j].CIDR })
	sort.Slice(st.Clients, func(i, j int) bool { return st.Clients[i].Addr < st.Clients[j].Addr })
	return st
}

func cloneUnit(u *UnitState) UnitState {
	c := *u
	c.Volumes = append([]string(nil), u.Volumes...)
	c.Lineage = append([]Fork(nil), u.Lineage...)
	c.Writes = append([]WriteRecord(nil), u.Writes...)
	c.Syncs = append([]SyncRecord(nil), u.Syncs...)
	c.RoleChanges = append([]RoleChange(nil), u.RoleChanges...)
	if u.Params != nil {
		c.Params = map[string]string{}
		for k, v := range u.Params {
			c.Params[k] = v
		}
	}
	if u.LastSync != nil {
		ls := *u.LastSync
		c.LastSync = &ls
	}
	c.Blocks = map[string]map[int64]Block{}
	for v, bs := range u.Blocks {
		m := make(map[int64]Block, len(bs))
		for i, b := range bs {
			m[i] = b
		}
		c.Blocks[v] = m
	}
	return c
}

var errUnitNotFound = errors.New("not found")

// lookupVolume returns the unit a volume belongs to.
func (s *Site) lookupVolume(vol string) (*unit, error) {
	s.unitsMu.RLock()
	defer s.unitsMu.RUnlock()
	key, ok := s.volumes[vol]
	if !ok {
		return nil, errUnitNotFound
	}
	return s.units[key], nil
}

// saveSiteLocked persists the site file; s.mu must be held.
func (s *Site) saveSiteLocked() error { return s.store.saveSite(s.sf) }

// stopCtx is a context cancelled when the site closes.
func (s *Site) stopCtx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
