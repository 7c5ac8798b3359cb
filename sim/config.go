package sim

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
)

// Config describes one simulated storage site.
type Config struct {
	// Name of the site, e.g. "east".
	Name string `yaml:"name"`
	// GRPCAddr is where the CSI-Addons services are served:
	// "unix:///path/to.sock" or "host:port".
	GRPCAddr string `yaml:"grpc"`
	// DataAddr (host:port) serves the block data path and the replication
	// link the peer site connects to.
	DataAddr string `yaml:"data"`
	// ControlAddr (host:port, optional) serves the control API: state,
	// faults, site and link down/up. It stays up while the site is down.
	ControlAddr string `yaml:"control"`
	// PeerAddr is the peer site's DataAddr.
	PeerAddr string `yaml:"peer"`
	// PeerToken is the secret the pair shares: every call of the peer
	// API (/v1/peer/* on the data port) must carry it as a bearer token,
	// and the site sends it with its own. Empty leaves the peer API open
	// (the site warns at start): anyone who reaches the data port, a
	// fenced client too, could then rewrite its fences.
	PeerToken string `yaml:"peerToken"`
	// StateDir holds the persisted state; empty keeps it in memory only.
	StateDir string `yaml:"stateDir"`
	// Fsync makes every state write durable against power loss, not only
	// against a killed process.
	Fsync bool `yaml:"fsync"`
	// TLS for the gRPC endpoint (optional).
	TLS *TLSConfig `yaml:"tls"`
	// Secrets, when set, must accompany every fence and replication call;
	// calls without them get UNAUTHENTICATED.
	Secrets map[string]string `yaml:"secrets"`
	// SyncInterval is how often a primary ships changes to the peer
	// (default 1s); a unit's schedulingInterval parameter overrides it.
	// Under the ceph-csi profile it is how often the primary looks at
	// its peer (rbd-mirror's polling); it ships only the mirror
	// snapshots that are taken (see Driver).
	SyncInterval time.Duration `yaml:"syncInterval"`
	// ScheduleMinute is how long one minute of a schedulingInterval
	// lasts in this simulator (default 1m): with 1s, a "1m" schedule
	// takes a snapshot every second and "1h" one every minute. It is a
	// knob for the speed of tests, not a behaviour of any driver: real
	// ceph-csi takes only intervals of whole minutes, hours or days.
	ScheduleMinute time.Duration `yaml:"scheduleMinute"`
	// MirrorRestart (ceph-csi profile) is how long the peer's mirror
	// daemon, restarted after a power loss (PowerLoss, then Up), takes to
	// report the status of this site's primary copies again; until then
	// their replication info answers INTERNAL "failed to get remote
	// status: RBD image not found", as real ceph-csi did for about a
	// minute after a site's restart (make e2e-ceph's power loss: until
	// 66 s after it). Default 10 × SyncInterval.
	MirrorRestart time.Duration `yaml:"mirrorRestart"`
	// ScheduleRace (ceph-csi profile): a demotion under way when the
	// copy's mirror-snapshot schedule comes round makes the copy primary
	// again just after the demotion returns, as Ceph 16.2.15 does to an
	// image without exclusive-lock: its scheduler saw the image primary
	// at the tick, and the primary snapshot it then takes waits on the
	// image's watchers and lands after the demoted one (measured: the
	// image primary again 0.65 s to 5.1 s after the demotion returned,
	// its newest mirror snapshot a primary one taken then; 4 of 4
	// demotions with a dead client's watch, 2 of 5 without, 0 of 20 with
	// exclusive-lock).
	ScheduleRace bool `yaml:"scheduleRace"`
	// Primary: on first start, this site holds the primary copies.
	Primary bool `yaml:"primary"`
	// Groups and Volumes are the inventory created on first start.
	Groups  []GroupSpec `yaml:"groups"`
	Volumes []string    `yaml:"volumes"`
	// Unimplemented lists RPC names (e.g. "GetFenceClients") the site
	// answers with UNIMPLEMENTED, like a driver without that feature.
	Unimplemented []string `yaml:"unimplemented"`
	// Faults injected from the start.
	Faults []FaultRule `yaml:"faults"`
	// Seed for probabilistic faults (0 picks one from the clock).
	Seed uint64 `yaml:"seed"`
	// Driver is the driver profile: "spec" (the default, the CSI-Addons
	// specs strictly) or "ceph-csi" (ceph-csi's RBD driver's answers).
	Driver string `yaml:"driver"`
	// Breaks lists the rules the site breaks on purpose, to prove that a
	// conformance check catches them (see ParseBreak).
	Breaks []string `yaml:"breaks"`
	// DriverName and Version are reported by GetIdentity.
	DriverName string `yaml:"driverName"`
	Version    string `yaml:"version"`
	// Intercept, when set, sees every gRPC call before the site handles
	// it and its answer after (a test looks at the storage's state at
	// the moment a call arrives); it must call the handler it is given.
	// It is a test hook: no file or flag sets it.
	Intercept grpc.UnaryServerInterceptor `yaml:"-" json:"-"`
}

// GroupSpec is a volume group and its volumes.
type GroupSpec struct {
	ID      string   `yaml:"id"`
	Volumes []string `yaml:"volumes"`
}

// TLSConfig is the gRPC endpoint's certificate, and the CA that client
// certificates must chain to for mutual TLS.
type TLSConfig struct {
	CertFile     string `yaml:"cert"`
	KeyFile      string `yaml:"key"`
	ClientCAFile string `yaml:"clientCA"`
}

// GenerateGroups returns n groups "vg-0001"… with perGroup volumes each,
// named "<group>-vol-1"….
func GenerateGroups(n, perGroup int) []GroupSpec {
	out := make([]GroupSpec, 0, n)
	width := len(fmt.Sprint(n))
	if width < 4 {
		width = 4
	}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("vg-%0*d", width, i)
		g := GroupSpec{ID: id}
		for v := 1; v <= perGroup; v++ {
			g.Volumes = append(g.Volumes, fmt.Sprintf("%s-vol-%d", id, v))
		}
		out = append(out, g)
	}
	return out
}

func (c *Config) validate() error {
	var errs []string
	if c.Name == "" {
		errs = append(errs, "name is required")
	}
	if c.GRPCAddr == "" {
		errs = append(errs, "grpc address is required")
	}
	if c.DataAddr == "" {
		errs = append(errs, "data address is required")
	}
	seen := map[string]string{}
	for _, g := range c.Groups {
		if g.ID == "" {
			errs = append(errs, "a volume group has no id")
		}
		if len(g.Volumes) == 0 {
			errs = append(errs, fmt.Sprintf("volume group %q has no volumes", g.ID))
		}
		for _, v := range g.Volumes {
			if prev, ok := seen[v]; ok {
				errs = append(errs, fmt.Sprintf("volume %q is in both %s and %s", v, prev, g.ID))
			}
			seen[v] = g.ID
		}
	}
	for _, v := range c.Volumes {
		if prev, ok := seen[v]; ok {
			errs = append(errs, fmt.Sprintf("volume %q is listed twice (also in %s)", v, prev))
		}
		seen[v] = "volumes"
	}
	for _, m := range c.Unimplemented {
		if !knownMethod(m) {
			errs = append(errs, fmt.Sprintf("unimplemented: unknown RPC %q", m))
		}
	}
	if _, err := profileFor(c.Driver); err != nil {
		errs = append(errs, err.Error())
	}
	for _, b := range c.Breaks {
		if _, err := ParseBreak(b); err != nil {
			errs = append(errs, err.Error())
		}
	}
	for i, f := range c.Faults {
		if err := f.validate(); err != nil {
			errs = append(errs, fmt.Sprintf("faults[%d]: %v", i, err))
		}
	}
	if c.TLS != nil && (c.TLS.CertFile == "" || c.TLS.KeyFile == "") {
		errs = append(errs, "tls needs both cert and key")
	}
	if len(errs) > 0 {
		return fmt.Errorf("site %q: %s", c.Name, strings.Join(errs, "; "))
	}
	return nil
}

// Methods lists the RPC names the simulator serves, by service.
var Methods = map[string][]string{
	"identity.Identity":      {"GetIdentity", "GetCapabilities", "Probe"},
	"fence.FenceController":  {"FenceClusterNetwork", "UnfenceClusterNetwork", "ListClusterFence", "GetFenceClients"},
	"replication.Controller": {"EnableVolumeReplication", "DisableVolumeReplication", "PromoteVolume", "DemoteVolume", "ResyncVolume", "GetVolumeReplicationInfo", "GetReplicationDestinationInfo"},
	// The CSI services (csi.go). Probe is both CSI-Addons' and CSI's: a
	// rule or an unimplemented entry for it covers both.
	"csi.v1.Identity":        {"GetPluginInfo", "GetPluginCapabilities", "Probe"},
	"csi.v1.Controller":      {"ControllerGetCapabilities", "CreateVolume", "DeleteVolume", "ValidateVolumeCapabilities", "CreateSnapshot", "DeleteSnapshot", "ListSnapshots"},
	"csi.v1.GroupController": {"GroupControllerGetCapabilities", "CreateVolumeGroupSnapshot", "DeleteVolumeGroupSnapshot", "GetVolumeGroupSnapshot"},
}

func knownMethod(name string) bool {
	for _, ms := range Methods {
		for _, m := range ms {
			if m == name {
				return true
			}
		}
	}
	return false
}
