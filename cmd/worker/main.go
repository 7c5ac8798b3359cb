// Command worker is Drover's Temporal worker: it runs the DR workflows and
// the storage and orchestrator activities, or, with --site, only the
// activities of one site on that site's task queue.
//
// It connects the way every Temporal tool does: TEMPORAL_ADDRESS,
// TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, the TEMPORAL_TLS_* variables and
// the profiles of the environment configuration file (TEMPORAL_PROFILE,
// TEMPORAL_CONFIG_FILE). It serves Prometheus metrics (the SDK's and
// Drover's own), logs with log/slog, and stops gracefully on SIGINT or
// SIGTERM, letting running activities finish.
//
// At start it waits, up to --connect-timeout, until Temporal answers and
// its namespace is ready: a server that has just started accepts
// connections a moment before its namespaces can be used, and a worker
// started then would stop at once.
//
// Exit codes: 0 after a clean stop, 2 for bad flags, 3 when Temporal or
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
	"syscall"
	"time"

	"github.com/uber-go/tally/v4"
	"github.com/uber-go/tally/v4/prometheus"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	sdktally "go.temporal.io/sdk/contrib/tally"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/codec"
	"github.com/drover-dr/drover/workflows"
)

// config is the worker's command line.
type config struct {
	site      string
	taskQueue string
	metrics   string
	logLevel  string
	level     slog.Level
	logFormat string
	identity  string
	connect   time.Duration
}

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.site, "site", "", "run only the activities of this site, on its task queue (a worker inside the site)")
	fs.StringVar(&c.taskQueue, "task-queue", "", "task queue to poll (default \""+workflows.TaskQueue+"\", with --site \"drover-site-NAME\")")
	fs.StringVar(&c.metrics, "metrics", "127.0.0.1:9464", "address of the Prometheus /metrics endpoint; empty turns it off")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&c.identity, "identity", "", "worker identity shown in Temporal (default pid@host)")
	fs.DurationVar(&c.connect, "connect-timeout", 30*time.Second, "how long to wait at start for Temporal and its namespace")
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
			c.taskQueue = SiteTaskQueue(c.site)
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
	return c, nil
}

// SiteTaskQueue is the default task queue of a site's own worker; a plan
// routes a site's calls there with sites[].taskQueue.
func SiteTaskQueue(site string) string { return "drover-site-" + site }

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

	var metricsSrv *http.Server
	if c.metrics != "" {
		reporter := prometheus.NewReporter(prometheus.Options{})
		scope, closer := tally.NewRootScope(tally.ScopeOptions{
			CachedReporter:  reporter,
			Separator:       prometheus.DefaultSeparator,
			SanitizeOptions: &sdktally.PrometheusSanitizeOptions,
		}, time.Second)
		defer closer.Close()
		opts.MetricsHandler = sdktally.NewMetricsHandler(sdktally.NewPrometheusNamingScope(scope))
		lis, err := net.Listen("tcp", c.metrics)
		if err != nil {
			logger.Error("metrics endpoint", "address", c.metrics, "error", err)
			return 2
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", reporter.HTTPHandler())
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = metricsSrv.Serve(lis) }()
		logger.Info("metrics", "url", "http://"+lis.Addr().String()+"/metrics")
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	cl, err := connect(opts, c.connect, stop, logger)
	if errors.Is(err, errInterrupted) {
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

	w := worker.New(cl, c.taskQueue, worker.Options{})
	if c.site == "" {
		workflows.Register(w)
	}
	storage := activities.NewStorage()
	defer storage.Close()
	w.RegisterActivity(storage)
	w.RegisterActivity(activities.NewWorkloads())

	interrupt := make(chan any)
	go func() {
		s := <-stop
		logger.Info("stopping: letting running activities finish", "signal", s.String())
		close(interrupt)
	}()
	what := "workflows and activities"
	if c.site != "" {
		what = "activities of site " + c.site
	}
	logger.Info("worker started", "taskQueue", c.taskQueue, "runs", what, "namespace", namespace(opts))
	err = w.Run(interrupt)
	if metricsSrv != nil {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = metricsSrv.Shutdown(sctx)
		scancel()
	}
	if err != nil {
		logger.Error("worker stopped", "error", err)
		return 1
	}
	logger.Info("worker stopped")
	return 0
}

var errInterrupted = errors.New("interrupted")

func namespace(opts client.Options) string {
	if opts.Namespace == "" {
		return client.DefaultNamespace
	}
	return opts.Namespace
}

// connect dials Temporal and waits until the worker's namespace answers,
// retrying with back-off until timeout; a signal on stop ends the wait.
func connect(opts client.Options, timeout time.Duration, stop <-chan os.Signal, logger *slog.Logger) (client.Client, error) {
	deadline := time.Now().Add(timeout)
	wait := 100 * time.Millisecond
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
		cancel()
		if time.Now().Add(wait).After(deadline) {
			return nil, err
		}
		logger.Warn("Temporal is not ready; retrying", "attempt", attempt, "in", wait, "error", err)
		select {
		case <-stop:
			return nil, errInterrupted
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
