// Command worker is Drover's Temporal worker: it runs the DR workflows and
// the storage and orchestrator activities, or, with --site, only the
// activities of one site on that site's task queue.
//
// It connects the way every Temporal tool does: TEMPORAL_ADDRESS,
// TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, the TEMPORAL_TLS_* variables and
// the profiles of the environment configuration file (TEMPORAL_PROFILE,
// TEMPORAL_CONFIG_FILE). It logs with log/slog and serves, on --metrics:
// /metrics (Prometheus: the process's, the SDK's and Drover's own; a
// protected plan's gauges only while its Protect workflow keeps setting
// them: until it ends on this worker, or up to --metrics-ttl after the
// last time), /healthz (the
// process answers), /readyz (Temporal lists it polling its task queues;
// for Nomad service checks) and /codec/encode|decode, the SDK's payload
// codec handler, so that the Temporal UI (its codec endpoint set to
// http://ADDR/codec, its origin allowed with --codec-cors-origin) shows
// compressed payloads decoded.
//
// On SIGINT or SIGTERM it stops polling and lets running activities
// finish for up to --stop-timeout (by default the longest default call
// deadline and its grace) before they are cancelled, then exits 0.
//
// At start it waits, up to --connect-timeout, until Temporal answers and
// its namespace is ready: a server that has just started accepts
// connections a moment before its namespaces can be used, and a worker
// started then would stop at once.
//
// The workflow worker acts only on plans signed by a key it trusts
// (--trusted-plan-key, PEM public keys): every action and Protect check
// their plan before any storage call or hook, and refuse an unsigned,
// changed or foreign one. --allow-unsigned-plans is for development, and
// says so in the log at start and in every action's result.
//
// The workflow worker runs as a Worker Deployment Version: deployment
// --deployment-name (drover), build --build-id (the module version and
// VCS revision). Actions are pinned to the build they started on; Protect
// and the plan's records auto-upgrade (workflows.Register says why).
// Before it says "worker started" it waits until Temporal knows the
// version, and at the first start (a deployment without a current
// version) makes its build current; by default (--make-current
// if-unattended) it also takes over when no worker of the current build
// has polled for --unattended-after, as after a deployment that replaced
// the workers instead of running the new build beside the old. A site
// worker stays unversioned.
//
// With a global namespace (a Temporal cluster at each site) the worker
// polls only while its own cluster names the namespace active there
// (active.go): it asks every --active-check-interval, stops polling when
// the namespace is active elsewhere and polls anew when it comes back.
//
// The HTTP endpoint answers only requests for localhost, the loopback
// addresses, its own address and the names given with --allowed-host
// (421 otherwise, as drctl ui answers), so that a web page cannot read
// it through a rebound DNS name. Beyond the loopback without a password
// or client certificate it warns at start; a web configuration with
// basic auth and no TLS is refused; and when its listener fails the
// worker stops: a worker whose health checks are gone must not go on
// unseen.
//
// Exit codes: 0 after a clean stop, 1 when the HTTP endpoint failed or
// the worker could not start polling, 2 for bad flags, 3 when Temporal or
// its namespace cannot be reached within --connect-timeout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/uber-go/tally/v4"
	"github.com/uber-go/tally/v4/prometheus"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	sdktally "go.temporal.io/sdk/contrib/tally"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/codec"
	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/internal/version"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// config is the worker's command line.
type config struct {
	site      string
	taskQueue string
	metrics   string
	// metricsTTL is how long a Protect gauge stays on /metrics after it
	// was last set (freshGauges).
	metricsTTL time.Duration
	logLevel   string
	level      slog.Level
	logFormat  string
	identity   string
	connect    time.Duration
	stopAfter  time.Duration
	// activeEvery is how often the worker asks its cluster where the
	// namespace is active (gate); 0 never asks.
	activeEvery time.Duration
	cors        string
	version     bool
	// planKeys are the files of the public keys whose plan signatures
	// the worker trusts; allowUnsigned runs unsigned plans (development).
	planKeys      multi
	allowUnsigned bool
	// recordKey is the file of the key that seals changes for the plans'
	// records; recordSecret its content (none: a key of this process).
	recordKey    string
	recordSecret []byte
	trust        *activities.PlanTrust
	// webConfig is the Prometheus exporter web configuration file: TLS
	// and basic auth for the HTTP endpoint; web is what it sets.
	webConfig string
	// versioning runs the workflow worker as the Worker Deployment
	// Version (deployment, buildID); makeCurrent says when it makes its
	// build the current version (makeCurrentNever, makeCurrentIfUnset,
	// makeCurrentIfUnattended: the current build has had no worker
	// polling for unattendedAfter).
	versioning      bool
	deployment      string
	buildID         string
	makeCurrent     string
	unattendedAfter time.Duration
	web             webSettings
	// allowedHosts are the host names the HTTP endpoint answers to
	// besides the loopback's and its own address's.
	allowedHosts multi
}

// longestCall is the longest default deadline of one storage call, with
// the grace an activity gets beyond it: how long a stop waits by default
// for the calls in flight.
func longestCall() time.Duration {
	var d time.Duration
	for _, v := range plans.DefaultDeadlines {
		d = max(d, v)
	}
	return d + activities.CallGrace
}

// multi is a repeatable flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.site, "site", "", "run only the activities of this site, on its task queue (a worker inside the site)")
	fs.StringVar(&c.taskQueue, "task-queue", "", "task queue to poll (default \""+workflows.TaskQueue+"\", with --site \"drover-site-NAME\")")
	fs.StringVar(&c.metrics, "metrics", "127.0.0.1:9464", "address of the Prometheus /metrics endpoint; empty turns it off")
	fs.DurationVar(&c.metricsTTL, "metrics-ttl", 15*time.Minute, "how long a protected plan's gauges (drover_out_of_rpo, drover_replication_lag_seconds, drover_primary_unreachable) stay on /metrics after their Protect workflow last set them: more than twice the longest protection interval (a dead primary's round sets them once more at most an interval in)")
	fs.StringVar(&c.webConfig, "web-config", "", "Prometheus web configuration file for the HTTP endpoint: TLS (tls_server_config) and basic auth (basic_auth_users), as Prometheus exporters take it")
	fs.Var(&c.allowedHosts, "allowed-host", "a host name the HTTP endpoint answers to besides localhost, the loopback addresses and its own address, e.g. the name Prometheus scrapes it by (repeatable); a request for any other name gets 421, so that a web page cannot read it through a rebound DNS name")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&c.identity, "identity", "", "worker identity shown in Temporal (default pid@host)")
	fs.DurationVar(&c.connect, "connect-timeout", 30*time.Second, "how long to wait at start for Temporal and its namespace")
	fs.DurationVar(&c.stopAfter, "stop-timeout", longestCall(), "on SIGINT or SIGTERM, how long running activities may go on before they are cancelled; by default the longest default call deadline and its grace")
	fs.DurationVar(&c.activeEvery, "active-check-interval", 5*time.Second, "how often to ask the worker's Temporal cluster whether a global namespace is active there: the worker polls only while it is (Temporal at both sites); 0 never asks")
	fs.StringVar(&c.cors, "codec-cors-origin", "", "origin allowed to call the /codec endpoint from a browser (the Temporal UI's, e.g. http://localhost:8233); empty sends no CORS headers")
	fs.BoolVar(&c.version, "version", false, "print the version and exit")
	fs.Var(&c.planKeys, "trusted-plan-key", "PEM file of ed25519 public keys whose plan signatures this worker trusts (repeatable; also DROVER_TRUSTED_PLAN_KEYS, comma-separated)")
	fs.StringVar(&c.recordKey, "record-key", os.Getenv("DROVER_RECORD_KEY_FILE"), "file of the secret (32 bytes or more) with which workflow workers seal the changes they send to plans' records; the same on every workflow worker of the namespace (also DROVER_RECORD_KEY_FILE, or the key itself in DROVER_RECORD_KEY). Without it the worker makes one of its own, good for a single worker process")
	fs.BoolVar(&c.allowUnsigned, "allow-unsigned-plans", false, "development only: run plans without a signature (a signature that is there is still checked)")
	fs.BoolVar(&c.versioning, "versioning", true, "run the workflow worker as a Worker Deployment Version (--deployment-name, --build-id): actions stay on the build they started on; false polls unversioned")
	fs.StringVar(&c.deployment, "deployment-name", names.Deployment, "Worker Deployment the workflow worker belongs to")
	fs.StringVar(&c.buildID, "build-id", version.BuildID(), "build ID of this worker's Worker Deployment Version; by default the module version and VCS revision (give one to a build from a modified tree)")
	fs.StringVar(&c.makeCurrent, "make-current", makeCurrentIfUnattended, "when this build makes itself the deployment's current version: "+
		"if-unset (the deployment has none: the first start), if-unattended (that, or no worker of the current build has polled for --unattended-after: its workers were replaced, not run beside), or never (the operator does)")
	fs.DurationVar(&c.unattendedAfter, "unattended-after", 2*time.Minute, "with --make-current if-unattended, how long the current build may have no worker polling before this one takes over; keep it above a poll's 70 s")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: worker [flags]\n\nConnects with TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY,\nTEMPORAL_TLS_* and TEMPORAL_PROFILE, like the temporal CLI.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.taskQueue == "" {
		c.taskQueue = workflows.TaskQueue
		if c.site != "" {
			c.taskQueue = names.SiteTaskQueue(c.site)
		}
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		return c, fmt.Errorf("--log-format %q: want text or json", c.logFormat)
	}
	if err := c.level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return c, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.logLevel)
	}
	if c.connect <= 0 {
		return c, fmt.Errorf("--connect-timeout %v: want a positive duration", c.connect)
	}
	if c.metricsTTL <= 0 {
		return c, fmt.Errorf("--metrics-ttl %v: want a positive duration", c.metricsTTL)
	}
	if c.activeEvery < 0 {
		return c, fmt.Errorf("--active-check-interval %v: want zero or a positive duration", c.activeEvery)
	}
	if c.stopAfter < 0 {
		return c, fmt.Errorf("--stop-timeout %v: want zero or a positive duration", c.stopAfter)
	}
	if c.versioning && c.site == "" {
		if err := checkVersionNames(c.deployment, c.buildID); err != nil {
			return c, err
		}
	}
	switch c.makeCurrent {
	case makeCurrentNever, makeCurrentIfUnset, makeCurrentIfUnattended:
	default:
		return c, fmt.Errorf("--make-current %q: want if-unset, if-unattended or never", c.makeCurrent)
	}
	if c.unattendedAfter <= 0 {
		return c, fmt.Errorf("--unattended-after %v: want a positive duration", c.unattendedAfter)
	}
	if err := web.Validate(c.webConfig); err != nil {
		return c, fmt.Errorf("--web-config %s: %w", c.webConfig, err)
	}
	web, err := readWebConfig(c.webConfig)
	if err != nil {
		return c, fmt.Errorf("--web-config %s: %w", c.webConfig, err)
	}
	if web.basicAuth && !web.tls {
		return c, fmt.Errorf("--web-config %s: basic_auth_users without tls_server_config would send the passwords in clear: add tls_server_config (cert_file, key_file) or remove basic_auth_users", c.webConfig)
	}
	c.web = web
	for _, h := range c.allowedHosts {
		if h == "" || strings.ContainsAny(h, "/ ") {
			return c, fmt.Errorf("--allowed-host %q: want a host name or address, without scheme, path or port", h)
		}
	}
	if len(c.planKeys) == 0 {
		for _, f := range strings.Split(os.Getenv("DROVER_TRUSTED_PLAN_KEYS"), ",") {
			if f = strings.TrimSpace(f); f != "" {
				c.planKeys = append(c.planKeys, f)
			}
		}
	}
	c.trust = &activities.PlanTrust{AllowUnsigned: c.allowUnsigned}
	for _, f := range c.planKeys {
		keys, err := plans.ReadPublicKeys(f)
		if err != nil {
			return c, fmt.Errorf("--trusted-plan-key: %w", err)
		}
		c.trust.Keys = append(c.trust.Keys, keys...)
	}
	if c.recordKey != "" {
		if c.recordSecret, err = workflows.ReadRecordKey(c.recordKey); err != nil {
			return c, fmt.Errorf("--record-key: %w", err)
		}
	} else if v := strings.TrimSpace(os.Getenv("DROVER_RECORD_KEY")); v != "" {
		// The key itself, as a Nomad Variable's item becomes.
		if len(v) < 32 {
			return c, fmt.Errorf("DROVER_RECORD_KEY: %d bytes, want at least 32", len(v))
		}
		c.recordSecret = []byte(v)
	}
	if c.site == "" && len(c.trust.Keys) == 0 && !c.allowUnsigned && !c.version {
		return c, errors.New("the worker runs only signed plans: give the public keys it trusts with --trusted-plan-key FILE (drctl plan keygen makes a pair), or --allow-unsigned-plans for development")
	}
	return c, nil
}

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	c, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v (see worker -h)\n", err)
		return 2
	}
	// A hook can read this process's environment: what it prints is
	// redacted of the secrets there (an API key, a storage key) from the
	// first call on.
	activities.RememberEnvSecrets(os.Environ())
	if c.version {
		fmt.Fprintf(os.Stdout, "worker %s\n", version.String())
		return 0
	}
	var h slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: c.level})
	if c.logFormat == "json" {
		h = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: c.level})
	}
	logger := slog.New(h)

	opts, err := envconfig.LoadDefaultClientOptions()
	if err != nil {
		logger.Error("read the Temporal client configuration", "error", err)
		return 2
	}
	opts.Logger = log.NewStructuredLogger(logger)
	opts.DataConverter = codec.Converter()
	if c.identity != "" {
		opts.Identity = c.identity
	}

	if opts.Identity == "" {
		host, _ := os.Hostname()
		opts.Identity = fmt.Sprintf("%d@%s", os.Getpid(), host)
	}

	// The worker ends on SIGINT or SIGTERM, or when its HTTP endpoint
	// fails (a worker whose health checks and metrics are gone must not
	// go on unseen): quit closes then, and why says which.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ends := make(chan ending, 2)
	go func() { ends <- ending{sig: <-sigs} }()
	quit := make(chan struct{})
	var why ending
	go func() { why = <-ends; close(quit) }()

	// The HTTP endpoint: /metrics, /healthz, /readyz and /codec/.
	var httpSrv *http.Server
	var ready atomic.Bool
	var interceptors []interceptor.WorkerInterceptor
	if c.metrics != "" {
		// A registry of the worker's own: the process and Go runtime, the
		// SDK's and Drover's metrics through tally, and the Protect
		// gauges while they are fresh.
		reg := prom.NewRegistry()
		fresh := newFreshGauges(c.metricsTTL)
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), fresh)
		reporter := prometheus.NewReporter(prometheus.Options{Registerer: reg, Gatherer: reg})
		scope, closer := tally.NewRootScope(tally.ScopeOptions{
			CachedReporter:  reporter,
			Separator:       prometheus.DefaultSeparator,
			SanitizeOptions: &sanitizeOptions,
		}, time.Second)
		defer closer.Close()
		opts.MetricsHandler = fresh.wrap(sdktally.NewMetricsHandler(sdktally.NewPrometheusNamingScope(scope)))
		interceptors = append(interceptors, &protectEnds{f: fresh})
		lis, err := net.Listen("tcp", c.metrics)
		if err != nil {
			logger.Error("HTTP endpoint", "address", c.metrics, "error", err)
			return 2
		}
		if warning := exposed(lis.Addr(), c.web); warning != "" {
			logger.Warn(warning, "address", lis.Addr().String())
			fmt.Fprintf(stderr, "worker: warning: %s\n", warning)
		}
		hosts := allowedHosts(lis.Addr(), c.allowedHosts)
		httpSrv = &http.Server{Handler: checkHost(endpoints(reporter.HTTPHandler(), &ready, c.cors), hosts), ReadHeaderTimeout: 5 * time.Second}
		// The exporter toolkit serves TLS and checks basic auth as the
		// web configuration file says; without one, plain HTTP.
		webLog := logger.With("component", "http")
		go func() {
			err := web.Serve(lis, httpSrv, &web.FlagConfig{WebConfigFile: &c.webConfig}, webLog)
			if !errors.Is(err, http.ErrServerClosed) {
				ends <- ending{err: err}
			}
		}()
		scheme := "http"
		if c.web.tls {
			scheme = "https"
		}
		base := scheme + "://" + lis.Addr().String()
		logger.Info("HTTP endpoint", "metrics", base+"/metrics", "health", base+"/healthz", "codec", base+"/codec", "webConfig", c.webConfig, "hosts", hosts)
	}
	// httpFailed says the endpoint failed and how the worker ends.
	httpFailed := func() int {
		logger.Error("the HTTP endpoint failed: the worker stops (its metrics, health checks and codec are gone)", "address", c.metrics, "error", why.err)
		return 1
	}

	cl, err := connect(opts, c.connect, quit, logger)
	if errors.Is(err, errInterrupted) {
		if why.err != nil {
			return httpFailed()
		}
		logger.Info("worker stopped before it started")
		return 0
	}
	if err != nil {
		addr := opts.HostPort
		if addr == "" {
			addr = client.DefaultHostPort
		}
		var nf *serviceerror.NamespaceNotFound
		if errors.As(err, &nf) {
			logger.Error("the namespace does not exist: create it (temporal operator namespace create) or set TEMPORAL_NAMESPACE", "address", addr, "namespace", namespace(opts), "error", err)
		} else {
			logger.Error("cannot reach Temporal: start it (make up) or set TEMPORAL_ADDRESS", "address", addr, "error", err)
		}
		return 3
	}
	defer cl.Close()

	storage := activities.NewStorage()
	defer storage.Close()
	workloads := activities.NewWorkloads()
	// build makes the SDK worker: again each time the gate resumes it.
	// A site worker runs activities only: it does not poll for workflow
	// tasks at all, which it could only fail.
	build := func() worker.Worker {
		w := worker.New(cl, c.taskQueue, worker.Options{WorkerStopTimeout: c.stopAfter, DisableWorkflowWorker: c.site != "",
			DeploymentOptions: deploymentOptions(c), Interceptors: interceptors})
		if c.site == "" {
			workflows.Register(w)
			w.RegisterActivity(c.trust)
			w.RegisterActivity(&workflows.RecordSender{Client: cl, Key: c.recordSecret})
			w.RegisterActivity(&workflows.RunReader{Client: cl})
		}
		w.RegisterActivity(storage)
		w.RegisterActivity(workloads)
		return w
	}
	if c.site == "" {
		if c.recordSecret == nil {
			logger.Warn("no --record-key: this worker seals the changes it sends to plans' records with a key of its own, which no other worker holds; with more than one workflow worker, give them all the same --record-key FILE, or the records refuse each other's changes")
		}
		ids := make([]string, len(c.trust.Keys))
		for i, k := range c.trust.Keys {
			ids[i] = plans.KeyID(k)
		}
		if c.allowUnsigned {
			logger.Warn("--allow-unsigned-plans: this worker runs plans without a signature; anyone who can start a workflow in the namespace can run commands here and change storage. Development only", "trustedKeys", ids)
		} else {
			logger.Info("plans must be signed", "trustedKeys", ids)
		}
	}

	what := "workflows and activities"
	if c.site != "" {
		what = "activities of site " + c.site
	}
	// The worker polls only while its cluster names the namespace
	// active there (Temporal at both sites, a global namespace).
	g := &gate{every: c.activeEvery, build: build, logger: logger, ns: namespace(opts), versioned: deploymentOptions(c).UseVersioning,
		check: func(ctx context.Context) (clusterView, error) { return readClusterView(ctx, cl, namespace(opts)) }}
	gctx, gcancel := context.WithCancel(context.Background())
	defer gcancel()
	go func() { <-quit; gcancel() }()
	if c.activeEvery > 0 && !g.waitActive(gctx) {
		if why.err != nil {
			return httpFailed()
		}
		logger.Info("worker stopped before it started")
		return 0
	}
	if err := g.start(); err != nil {
		logger.Error("worker did not start", "taskQueue", c.taskQueue, "error", err)
		return 1
	}
	versioned := []any{"versioning", false}
	if dep := deploymentOptions(c); dep.UseVersioning {
		versioned = []any{"deployment", c.deployment, "buildID", c.buildID}
		// Before "worker started": whoever acts once it reads that line
		// finds the version ready to be made current, and, at the first
		// start, current.
		mctx, mcancel := context.WithTimeout(context.Background(), c.connect)
		if err := registerVersion(mctx, cl, c.deployment, c.buildID, c.taskQueue, c.makeCurrent != makeCurrentNever, logger); err != nil {
			logger.Error("this build is not ready as the deployment's current version; while the deployment has none, new workflows wait: set it (temporal worker deployment set-current-version), or run with --versioning=false",
				"deployment", c.deployment, "buildID", c.buildID, "error", err)
		}
		mcancel()
		if c.makeCurrent == makeCurrentIfUnattended {
			wctx, wcancel := context.WithCancel(context.Background())
			defer wcancel()
			go takeOverUnattended(wctx, cl, c.deployment, c.buildID, c.taskQueue, c.unattendedAfter, logger)
		}
	}
	logger.Info("worker started", append([]any{"taskQueue", c.taskQueue, "runs", what, "namespace", namespace(opts), "identity", opts.Identity}, versioned...)...)
	polled := make(chan struct{})
	waitReady := func() {
		if waitPolling(cl, c.taskQueue, c.site == "", opts.Identity, polled) {
			// Said before /readyz turns 200, so that whoever sees ready
			// finds the line in the log.
			logger.Info("worker ready: Temporal lists it among the pollers of its task queues", "taskQueue", c.taskQueue)
			ready.Store(true)
		}
	}
	go waitReady()
	watched := make(chan struct{})
	if c.activeEvery > 0 {
		g.onPause = func() { ready.Store(false) }
		g.onResume = func() { go waitReady() }
		go func() { g.watch(gctx); close(watched) }()
	} else {
		close(watched)
	}
	<-quit
	<-watched
	ready.Store(false)
	close(polled)
	if why.err != nil {
		code := httpFailed()
		g.stop()
		return code
	}
	logger.Info("stopping: letting running activities finish", "signal", why.sig.String(), "upTo", c.stopAfter)
	g.stop()
	if httpSrv != nil {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = httpSrv.Shutdown(sctx)
		scancel()
	}
	logger.Info("worker stopped")
	return 0
}

// ending is why the worker ends: a signal, or its HTTP endpoint's error.
type ending struct {
	sig os.Signal
	err error
}

// waitPolling waits until Temporal lists identity among the pollers of
// the task queue (its workflow side too, when the worker runs the
// workflows), asking every half second until stop closes.
func waitPolling(cl client.Client, queue string, workflowsToo bool, identity string, stop <-chan struct{}) bool {
	types := []enums.TaskQueueType{enums.TASK_QUEUE_TYPE_ACTIVITY}
	if workflowsToo {
		types = append(types, enums.TASK_QUEUE_TYPE_WORKFLOW)
	}
	for {
		polling := 0
		for _, typ := range types {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := cl.DescribeTaskQueue(ctx, queue, typ)
			cancel()
			if err == nil && slices.ContainsFunc(resp.GetPollers(), func(p *taskqueuepb.PollerInfo) bool { return p.GetIdentity() == identity }) {
				polling++
			}
		}
		if polling == len(types) {
			return true
		}
		select {
		case <-stop:
			return false
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// endpoints serves the metrics, the health and readiness checks (for
// Nomad service checks and load balancers) and the payload codec, with
// which the Temporal UI shows compressed payloads decoded.
func endpoints(metrics http.Handler, ready *atomic.Bool, corsOrigin string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !ready.Load() {
			http.Error(w, "not ready: not yet polling its task queues, paused (its Temporal cluster is not the namespace's active one), or stopping", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	codecHandler := http.StripPrefix("/codec", converter.NewPayloadCodecHTTPHandler(codec.Codec()))
	mux.HandleFunc("/codec/", func(w http.ResponseWriter, r *http.Request) {
		if corsOrigin != "" {
			w.Header().Set("Access-Control-Allow-Origin", corsOrigin)
			w.Header().Set("Access-Control-Allow-Credentials", "true")
			w.Header().Set("Access-Control-Allow-Headers", "Content-Type,X-Namespace")
			w.Header().Set("Access-Control-Allow-Methods", "POST,OPTIONS")
			w.Header().Set("Vary", "Origin")
		}
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		codecHandler.ServeHTTP(w, r)
	})
	return mux
}

var errInterrupted = errors.New("interrupted")

func namespace(opts client.Options) string {
	if opts.Namespace == "" {
		return client.DefaultNamespace
	}
	return opts.Namespace
}

// connect dials Temporal and waits until the worker's namespace answers,
// retrying with back-off until timeout; quit closing ends the wait.
func connect(opts client.Options, timeout time.Duration, quit <-chan struct{}, logger *slog.Logger) (client.Client, error) {
	deadline := time.Now().Add(timeout)
	wait := 100 * time.Millisecond
	// answered is the last error of an attempt the deadline did not cut:
	// when it cuts the last attempt short, the one before says more (a
	// namespace that does not exist) than "deadline exceeded".
	var answered error
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		cl, err := client.DialContext(ctx, opts)
		if err == nil {
			_, err = cl.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace(opts)})
			if err == nil {
				cancel()
				return cl, nil
			}
			cl.Close()
		}
		cut := ctx.Err() != nil
		cancel()
		if !cut {
			answered = err
		}
		if time.Now().Add(wait).After(deadline) {
			if cut && answered != nil {
				return nil, answered
			}
			return nil, err
		}
		logger.Warn("Temporal is not ready; retrying", "attempt", attempt, "in", wait, "error", err)
		select {
		case <-quit:
			return nil, errInterrupted
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
