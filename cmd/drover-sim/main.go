// Command drover-sim runs simulated CSI-Addons storage sites: identity,
// fence and replication over gRPC, a block data path, asynchronous
// replication to a peer site, persisted state and fault injection. Demos,
// drills and tests run Drover against it.
//
// One site from flags:
//
//	drover-sim --name east --grpc unix:///tmp/east.sock --data 127.0.0.1:7001 \
//	  --control 127.0.0.1:7101 --peer 127.0.0.1:7002 --state-dir /tmp/east \
//	  --primary --groups 3
//
// --driver ceph-csi answers as ceph-csi's RBD driver does (its parameter
// validation, error codes, identity and snapshot mirroring: a schedule
// only from PromoteVolume's schedulingInterval); the default, spec,
// follows the CSI-Addons specs strictly. --schedule-minute makes the
// schedules run faster for tests: with 1s, a "1m" schedule takes a
// snapshot every second.
//
// Several sites from a YAML file (a list under "sites", each a sim.Config):
//
//	drover-sim --config sites.yaml
//
// The process stops on SIGINT or SIGTERM; the state stays in --state-dir.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/drover-dr/drover/sim"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

type fileConfig struct {
	Sites []sim.Config `yaml:"sites"`
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("drover-sim", flag.ContinueOnError)
	var (
		configFile = fs.String("config", "", "YAML file with a list of sites under \"sites\"")
		cfg        sim.Config
		groups     = fs.Int("groups", 0, "create this many volume groups vg-0001… on first start")
		perGroup   = fs.Int("volumes-per-group", 2, "volumes in each generated group")
		volumes    multiFlag
		secrets    multiFlag
		faults     multiFlag
		unimpl     multiFlag
		breaks     multiFlag
		tlsCert    = fs.String("tls-cert", "", "serve gRPC with TLS: certificate file")
		tlsKey     = fs.String("tls-key", "", "serve gRPC with TLS: key file")
		tlsCA      = fs.String("tls-client-ca", "", "require client certificates signed by this CA (mTLS)")
		logLevel   = fs.String("log-level", "info", "debug, info, warn or error")
	)
	fs.StringVar(&cfg.Name, "name", "", "site name")
	fs.StringVar(&cfg.GRPCAddr, "grpc", "", "CSI-Addons endpoint: unix:///path or host:port")
	fs.StringVar(&cfg.DataAddr, "data", "", "data path and replication link address, host:port")
	fs.StringVar(&cfg.ControlAddr, "control", "", "control API address, host:port (optional)")
	fs.StringVar(&cfg.PeerAddr, "peer", "", "the peer site's data address")
	fs.StringVar(&cfg.PeerToken, "peer-token", "", "the secret the pair shares for its peer API (default DROVER_SIM_PEER_TOKEN; empty leaves the peer API open)")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "directory for persisted state (empty: memory only)")
	fs.BoolVar(&cfg.Fsync, "fsync", false, "fsync every state write")
	fs.BoolVar(&cfg.Primary, "primary", false, "this site holds the primary copies on first start")
	fs.DurationVar(&cfg.SyncInterval, "interval", time.Second, "replication interval")
	fs.DurationVar(&cfg.ScheduleMinute, "schedule-minute", time.Minute, "how long one minute of a schedulingInterval lasts here (a test-speed knob: 1s runs a \"1m\" schedule every second)")
	fs.BoolVar(&cfg.ScheduleRace, "schedule-race", false, "ceph-csi profile: a demotion under way when the copy's mirror-snapshot schedule comes round makes the copy primary again just after it returns, as Ceph does")
	fs.DurationVar(&cfg.MirrorRestart, "mirror-restart", 0, "ceph-csi profile: how long after the peer restarts from a power loss its mirror daemon takes to report this site's primary copies (default 10 × --interval)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed for probabilistic faults (0: from the clock)")
	fs.Var(&volumes, "volume", "an ungrouped volume to create on first start (repeatable)")
	fs.Var(&secrets, "secret", "expected secret KEY=VALUE (repeatable)")
	fs.Var(&faults, "fault", "inject METHOD[:CODE][,count=N][,p=P][,latency=D][,subject=ID][,discard][,lost] (repeatable)")
	fs.Var(&unimpl, "unimplemented", "answer this RPC with UNIMPLEMENTED (repeatable)")
	fs.StringVar(&cfg.Driver, "driver", sim.DriverSpec, "driver profile: spec (the CSI-Addons specs strictly) or ceph-csi (ceph-csi's RBD driver's answers)")
	fs.Var(&breaks, "break", "break one rule on purpose, to prove a conformance check: nonidempotent:RPC, wrongcode:RPC:CODE, ignoreforce:RPC, keepfence or noop:RPC (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "drover-sim: --log-level: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	var cfgs []sim.Config
	if *configFile != "" {
		if cfg.Name != "" {
			fmt.Fprintln(os.Stderr, "drover-sim: give either --config or the site flags, not both")
			return 2
		}
		raw, err := os.ReadFile(*configFile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "drover-sim: %v\n", err)
			return 2
		}
		var fc fileConfig
		dec := yaml.NewDecoder(strings.NewReader(string(raw)))
		dec.KnownFields(true)
		if err := dec.Decode(&fc); err != nil {
			fmt.Fprintf(os.Stderr, "drover-sim: %s: %v\n", *configFile, err)
			return 2
		}
		if len(fc.Sites) == 0 {
			fmt.Fprintf(os.Stderr, "drover-sim: %s: no sites\n", *configFile)
			return 2
		}
		cfgs = fc.Sites
		for i := range cfgs {
			if cfgs[i].PeerToken == "" {
				cfgs[i].PeerToken = os.Getenv("DROVER_SIM_PEER_TOKEN")
			}
		}
	} else {
		if cfg.PeerToken == "" {
			cfg.PeerToken = os.Getenv("DROVER_SIM_PEER_TOKEN")
		}
		if *groups < 0 || *perGroup < 1 {
			fmt.Fprintln(os.Stderr, "drover-sim: --groups must be >= 0 and --volumes-per-group >= 1")
			return 2
		}
		cfg.Groups = sim.GenerateGroups(*groups, *perGroup)
		cfg.Volumes = volumes
		cfg.Unimplemented = unimpl
		cfg.Breaks = breaks
		if len(secrets) > 0 {
			cfg.Secrets = map[string]string{}
			for _, s := range secrets {
				k, v, ok := strings.Cut(s, "=")
				if !ok || k == "" {
					fmt.Fprintf(os.Stderr, "drover-sim: --secret for key %q is not KEY=VALUE\n", k)
					return 2
				}
				cfg.Secrets[k] = v
			}
		}
		for _, f := range faults {
			r, err := sim.ParseFaultRule(f)
			if err != nil {
				fmt.Fprintf(os.Stderr, "drover-sim: --fault: %v\n", err)
				return 2
			}
			cfg.Faults = append(cfg.Faults, r)
		}
		if *tlsCert != "" || *tlsKey != "" || *tlsCA != "" {
			cfg.TLS = &sim.TLSConfig{CertFile: *tlsCert, KeyFile: *tlsKey, ClientCAFile: *tlsCA}
		}
		cfgs = []sim.Config{cfg}
	}

	var sites []*sim.Site
	stopAll := func() {
		for _, s := range sites {
			s.Close()
		}
	}
	for _, c := range cfgs {
		s, err := sim.New(c, log)
		if err != nil {
			fmt.Fprintf(os.Stderr, "drover-sim: %v\n", err)
			stopAll()
			return 2
		}
		if err := s.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "drover-sim: %v\n", err)
			stopAll()
			return 1
		}
		sites = append(sites, s)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	log.Info("stopping", "reason", context.Cause(ctx))
	stopAll()
	return 0
}
