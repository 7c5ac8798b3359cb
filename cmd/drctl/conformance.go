package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/conformance"
	"github.com/drover-dr/drover/plans"
)

type conformanceFlags struct {
	plan, site, peer       string
	endpoint, peerEndpoint string
	tlsCA, tlsCert, tlsKey string
	tlsServerName          string
	secretEnv, secretFile  string
	params                 []string
	volume, group, cidr    string
	extraCIDRs             []string
	requireHooks           bool
	timeout, syncTimeout   time.Duration
	observe, clockSkew     time.Duration
	linkDown, linkUp       string
	writeCmd               string
	junit                  string
	dryRun                 bool
}

func (a *app) conformanceCommand() *cobra.Command {
	var f conformanceFlags
	cmd := &cobra.Command{
		Use:   "conformance",
		Short: "check a CSI-Addons endpoint against the identity, fence and replication specs",
		Long: `conformance checks a storage driver's CSI-Addons endpoint against the
identity, fence and replication specs, and prints a pass/fail/skip table
(-o json for JSON, --junit FILE for JUnit XML as well).

The endpoint comes from a plan's site (--plan PLAN --site SITE, with the
site's TLS, secret reference and parameters) or from flags (--endpoint
unix:///path or host:port, --tls-*, --secret-env/--secret-file, --param).
The replication checks need the site's peer (--peer SITE or
--peer-endpoint) and a scratch volume and/or volume group that holds
nothing of value (--volume, --group): it exists on the first endpoint
with replication disabled; the peer's copy may not exist yet (with RBD
mirroring it appears once replication is enabled, and goes when it is
disabled). They enable, demote, promote (with and without force), resync
and disable it, and leave it disabled with the first endpoint's copy
primary. Checks that need what no CSI-Addons call can do run only with a
command for it, and skip saying so otherwise (the report lists them as not
checked; --require-hooks fails them instead): --link-down-cmd and
--link-up-cmd cut and restore the replication link (an unforced promotion
while the peer is unreachable must be refused), --write-cmd writes to the
peer's copy while it is primary (a resync without force must not discard
it). The commands run with sh -c and get DROVER_CONF_SITE_A,
DROVER_CONF_SITE_B, DROVER_CONF_KIND (volume or group),
DROVER_CONF_SOURCE (its ID) and, for --write-cmd, DROVER_CONF_SITE.
The fence checks fence and unfence one documentation address
(--cidr, default 192.0.2.1/32), then two blocks of other lengths in one
call beside it (--extra-cidr, default 198.51.100.0/28 and
198.51.100.64/26); every fence found before the run must still be listed
after each call, and the run ends with the fences as it found them (a
fence the driver lifted is fenced again, and said so). A run cut short
(Ctrl-C, a failed step) puts the scratch resources back before it exits.

Exit codes: 0 every check passed (or skipped), 1 a check failed, 2 bad
input, 130 interrupted (after the clean-up). --dry-run lists the calls
without making any.`,
		Example: `  drctl conformance --plan plans/examples/demo.yaml --site east --peer west \
    --volume scratch-vol --group scratch-vg --junit conformance.xml
  drctl conformance --endpoint unix:///run/csi-addons.sock --cidr 192.0.2.10/32`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.conformance(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.plan, "plan", "", "plan file whose sites give the endpoints")
	fl.StringVar(&f.site, "site", "", "the plan's site to test")
	fl.StringVar(&f.peer, "peer", "", "the plan's site that replicates with --site (for the replication checks)")
	fl.StringVar(&f.endpoint, "endpoint", "", "CSI-Addons endpoint to test: unix:///path or host:port")
	fl.StringVar(&f.peerEndpoint, "peer-endpoint", "", "its replication peer's endpoint (same TLS, secrets and parameters)")
	fl.StringVar(&f.tlsCA, "tls-ca", "", "with --endpoint: CA file of the server certificate (TLS)")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "with --endpoint: client certificate (mutual TLS)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "with --endpoint: client key (mutual TLS)")
	fl.StringVar(&f.tlsServerName, "tls-server-name", "", "with --endpoint: name to verify the server certificate against")
	fl.StringVar(&f.secretEnv, "secret-env", "", "with --endpoint: secrets from the variables PREFIX_KEY")
	fl.StringVar(&f.secretFile, "secret-file", "", "with --endpoint: secrets from a file of key=value lines or a YAML map")
	fl.StringArrayVar(&f.params, "param", nil, "with --endpoint: plugin parameter KEY=VALUE sent with every call (repeatable)")
	fl.StringVar(&f.volume, "volume", "", "scratch volume for the replication checks")
	fl.StringVar(&f.group, "group", "", "scratch volume group for the replication checks")
	fl.StringVar(&f.cidr, "cidr", conformance.DefaultCIDR, "CIDR to fence and unfence (a documentation range no client holds); empty skips the fence checks")
	fl.StringArrayVar(&f.extraCIDRs, "extra-cidr", conformance.DefaultExtraCIDRs, "CIDR fenced and unfenced together with the other --extra-cidr ones, beside --cidr (repeatable; documentation ranges no client holds; \"\" for none)")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "deadline of each check of single calls")
	fl.DurationVar(&f.syncTimeout, "sync-timeout", 3*time.Minute, "deadline of each check that waits for the storage (first sync, resync)")
	fl.DurationVar(&f.observe, "observe", 20*time.Second, "how long a check that must see nothing happen watches (no sync reaching a diverged copy resynced without force)")
	fl.DurationVar(&f.clockSkew, "clock-skew", 5*time.Second, "how far the driver's clock may run ahead: a last sync time later than the answer by more fails")
	fl.StringVar(&f.linkDown, "link-down-cmd", "", "command (sh -c) that cuts the replication link between the two endpoints")
	fl.StringVar(&f.linkUp, "link-up-cmd", "", "command (sh -c) that restores it")
	fl.StringVar(&f.writeCmd, "write-cmd", "", "command (sh -c) that writes to the scratch source's copy on $DROVER_CONF_SITE")
	fl.BoolVar(&f.requireHooks, "require-hooks", false, "fail each check that needs a hook not given (--link-down-cmd, --link-up-cmd, --write-cmd), where it is otherwise skipped and listed as not checked")
	fl.StringVar(&f.junit, "junit", "", "also write the results as JUnit XML to this file")
	fl.BoolVar(&f.dryRun, "dry-run", false, "list the calls the checks would make, make none")
	return cmd
}

func (a *app) conformance(ctx context.Context, f conformanceFlags) error {
	cfg, err := conformanceConfig(f)
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return badInput("%v", err)
	}
	// Ctrl-C stops the checks; the clean-up still runs (unless the driver
	// left the last call hanging: then it would hang too), then we exit.
	// A second Ctrl-C leaves the clean-up at once.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	abandon, leave := context.WithCancel(context.Background())
	defer leave()
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-finished:
			return
		case <-ctx.Done():
		}
		again := make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(again)
		fmt.Fprintln(a.stderr, "drctl: interrupted: the checks stop, and what they changed is put back (Ctrl-C again to leave it as it is)")
		select {
		case <-again:
			fmt.Fprintln(a.stderr, "drctl: leaving the clean-up; the clean-up lines say what was not put back")
			leave()
		case <-finished:
		}
	}()
	if !cfg.DryRun {
		cfg.Progress = a.stderr
	}
	cfg.Abandon = abandon
	d := activities.NewDialer()
	defer d.Close()
	rep, err := conformance.Run(ctx, cfg, d)
	if err != nil {
		return badInput("%v", err)
	}
	if f.junit != "" {
		out, err := os.Create(f.junit)
		if err != nil {
			return badInput("--junit: %v", err)
		}
		werr := rep.WriteJUnit(out)
		if cerr := out.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return failed("write %s: %w", f.junit, werr)
		}
	}
	if a.json() {
		err = rep.WriteJSON(a.stdout)
	} else {
		err = rep.WriteTable(a.stdout, cfg.DryRun)
	}
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		fmt.Fprintln(a.stderr, "drctl: conformance interrupted; the clean-up lines say what was put back")
		return silent(exitInterrupted)
	}
	if !rep.OK() {
		return silent(exitFailed)
	}
	return nil
}

// conformanceConfig builds the suite's configuration from a plan's sites
// or from the endpoint flags; secrets are resolved here, as the worker
// resolves them at call time.
func conformanceConfig(f conformanceFlags) (conformance.Config, error) {
	cfg := conformance.Config{Volume: f.volume, Group: f.group, CIDR: f.cidr, ExtraCIDRs: f.extraCIDRs, RequireHooks: f.requireHooks, CallTimeout: f.timeout, SyncTimeout: f.syncTimeout,
		Observe: f.observe, ClockSkew: f.clockSkew, DryRun: f.dryRun,
		Hooks: conformance.Hooks{LinkDown: f.linkDown, LinkUp: f.linkUp, Write: f.writeCmd}}
	cfg.ExtraCIDRs = []string{} // --extra-cidr "" alone: none
	for _, c := range f.extraCIDRs {
		if c != "" {
			cfg.ExtraCIDRs = append(cfg.ExtraCIDRs, c)
		}
	}
	if f.timeout <= 0 || f.syncTimeout <= 0 || f.observe <= 0 || f.clockSkew <= 0 {
		return cfg, badInput("--timeout, --sync-timeout, --observe and --clock-skew must be positive")
	}
	resolver := activities.EnvFileSecrets{}
	switch {
	case f.plan != "" && f.endpoint != "":
		return cfg, badInput("give either --plan with --site, or --endpoint, not both")
	case f.plan != "":
		if f.site == "" {
			return cfg, badInput("--plan needs --site")
		}
		if f.peerEndpoint != "" || f.tlsCA != "" || f.tlsCert != "" || f.tlsKey != "" || f.secretEnv != "" || f.secretFile != "" || len(f.params) > 0 {
			return cfg, badInput("with --plan the site's storage settings apply: drop the --peer-endpoint, --tls-*, --secret-* and --param flags")
		}
		p, err := plans.Load(f.plan)
		if err != nil {
			return cfg, badInput("%v", err)
		}
		a, err := planSite(p, f.site, resolver)
		if err != nil {
			return cfg, err
		}
		cfg.A = a
		if f.peer != "" {
			if f.peer == f.site {
				return cfg, badInput("--peer must name another site than --site")
			}
			b, err := planSite(p, f.peer, resolver)
			if err != nil {
				return cfg, err
			}
			cfg.B = &b
		}
	case f.endpoint != "":
		if f.site != "" || f.peer != "" {
			return cfg, badInput("--site and --peer name a plan's sites: give --plan too, or use --peer-endpoint")
		}
		params := map[string]string{}
		for _, kv := range f.params {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return cfg, badInput("--param %q is not KEY=VALUE", kv)
			}
			params[k] = v
		}
		var tls *plans.TLS
		if f.tlsCA != "" || f.tlsCert != "" || f.tlsKey != "" || f.tlsServerName != "" {
			tls = &plans.TLS{CA: f.tlsCA, Cert: f.tlsCert, Key: f.tlsKey, ServerName: f.tlsServerName}
		}
		var ref *plans.SecretRef
		if f.secretEnv != "" || f.secretFile != "" {
			ref = &plans.SecretRef{Env: f.secretEnv, File: f.secretFile}
		}
		secrets, err := resolver.Resolve(ref)
		if err != nil {
			return cfg, badInput("secrets: %v", err)
		}
		mk := func(name, addr string) conformance.Site {
			e := activities.Endpoint{Site: name, Address: addr, TLS: tls, Secret: ref, Parameters: params}
			return conformance.Site{Name: name, Identity: e, Fence: e, Replication: e, Secrets: secrets}
		}
		cfg.A = mk("endpoint", f.endpoint)
		if f.peerEndpoint != "" {
			b := mk("peer", f.peerEndpoint)
			cfg.B = &b
		}
	default:
		return cfg, badInput("name the endpoint to test: --plan PLAN --site SITE, or --endpoint ADDRESS")
	}
	for _, s := range []*conformance.Site{&cfg.A, cfg.B} {
		if s == nil {
			continue
		}
		for _, addr := range []string{s.Identity.Address, s.Fence.Address, s.Replication.Address} {
			if err := checkAddress(addr); err != nil {
				return cfg, badInput("site %s: %v", s.Name, err)
			}
		}
	}
	return cfg, nil
}

func checkAddress(addr string) error {
	switch {
	case addr == "":
		return fmt.Errorf("no endpoint address")
	case strings.HasPrefix(addr, "unix://") && !strings.HasPrefix(addr, "unix:///"):
		return fmt.Errorf("endpoint %q: a unix socket address is unix:///absolute/path", addr)
	case !strings.HasPrefix(addr, "unix://") && strings.Contains(addr, "://"):
		return fmt.Errorf("endpoint %q: want unix:///path or host:port", addr)
	}
	return nil
}

// planSite reads a plan's site as the worker would reach it: each
// service's endpoint, TLS, parameters (the site's, with each RPC's own
// over them for the fence and replication calls) and resolved secrets.
func planSite(p *plans.Plan, site string, resolver activities.SecretResolver) (conformance.Site, error) {
	s := conformance.Site{Name: site}
	var err error
	if s.Identity, err = activities.EndpointFor(p, site, activities.RPCGetIdentity); err != nil {
		return s, badInput("%v", err)
	}
	if s.Fence, err = activities.EndpointFor(p, site, activities.RPCFenceClusterNetwork); err != nil {
		return s, badInput("%v", err)
	}
	if s.Replication, err = activities.EndpointFor(p, site, activities.RPCEnableVolumeReplication); err != nil {
		return s, badInput("%v", err)
	}
	if s.Secrets, err = resolver.Resolve(s.Replication.Secret); err != nil {
		return s, badInput("site %s: secrets: %v", site, err)
	}
	return s, nil
}
