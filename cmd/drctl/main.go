// Command drctl is Drover's operator CLI: it checks plans, starts the DR
// actions, and watches and steers them.
//
//	drctl plan validate|show|schema     check and explain plans (no Temporal needed)
//	drctl failover PLAN --to SITE       unplanned failover to SITE
//	drctl test-recovery PLAN --at SITE  workloads on copies of SITE's replicas, then cleaned away
//	drctl test-recovery PLAN --cleanup  delete what terminated test recoveries left
//	drctl failover --site LOST --to SITE PLAN|DIR...
//	                                    every plan of a lost site, tier by tier
//	drctl reprotect PLAN                make the returned site a replica again
//	drctl failback PLAN --to SITE       planned move back, no data loss
//	drctl drill PLAN --to SITE          rehearse without changing anything
//	drctl protect start|stop PLAN       replication watch (enables replication)
//	drctl status [PLAN|RUN]             where a plan or an action stands
//	drctl watch RUN                     live step table until the action ends
//	drctl list                          recent actions and protections
//	drctl report RUN [--format md|html] the report of an action: plan, people, steps, RTO, RPO, timeline
//	drctl points PLAN                   the plan's points in time (policy.pointsInTime) and what was pruned
//	drctl ui                            a read-only dashboard on 127.0.0.1:8090
//	drctl resolve RUN --retry|--skip|--abort
//	drctl approve RUN                   open the approval gate that waits
//	drctl cancel RUN                    stop an action where it is
//
// PLAN is a plan file; where only the plan's name is needed (status,
// watch…) the name works too. RUN is a plan name, a plan file or a
// workflow id (drover-action-NAME, drover-protect-NAME).
//
// drctl connects like the temporal CLI, with its flag names: --address,
// --namespace, --api-key, --tls, --tls-cert-path, --tls-key-path,
// --tls-ca-path, --tls-server-name, --profile (of the environment
// configuration file) and --env (of the CLI's env file); unset flags fall
// back to TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY,
// TEMPORAL_TLS_* and TEMPORAL_PROFILE. drctl version prints the module
// version and VCS revision.
//
// Before it starts an action or protection it warns, on stderr, of each
// task queue the plan needs that no worker has polled in the last two
// minutes (the workflows' queue, a site's own queue): the action would
// wait there silently until a worker comes.
//
// With Temporal at both sites (a global namespace), drctl failover run
// against the surviving site's cluster checks where the namespace is
// active: on a cluster that does not answer it refuses, naming it, and
// with --take-over-namespace makes its own cluster active first
// (takeover.go).
//
// Exit codes: 0 done, 1 the action failed (or a drill found problems),
// 2 bad input (including a declined confirmation), 3 Temporal cannot be
// reached, refuses drctl's credentials or has no such namespace; 130 when interrupted while following
// an action (the action goes on).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drover-dr/drover/internal/codec"
	"github.com/drover-dr/drover/internal/version"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1
	exitBadInput    = 2
	exitUnreachable = 3
	// exitInterrupted: Ctrl-C while following an action, which goes on.
	exitInterrupted = 130
)

// exitError carries an exit code with its message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func badInput(format string, a ...any) error {
	return &exitError{exitBadInput, fmt.Errorf(format, a...)}
}

func failed(format string, a ...any) error {
	return &exitError{exitFailed, fmt.Errorf(format, a...)}
}

// silent ends with a code after the output already said why.
func silent(code int) error { return &exitError{code, errSilent} }

var errSilent = errors.New("")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runContext(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes drctl with args and returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdin, stdout, stderr)
}

func runContext(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// Every field a client can set is shown without its control
	// characters: they go out escaped (clean.go).
	stdout, stderr = newCleanWriter(stdout), newCleanWriter(stderr)
	app := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := app.root()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if app.client != nil {
		app.client.Close()
	}
	if err == nil {
		return exitOK
	}
	code := exitBadInput // cobra's own errors: unknown commands, flags, arguments
	var xe *exitError
	if errors.As(err, &xe) {
		code = xe.code
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// Interrupted while waiting on Temporal: whatever was started
		// goes on there.
		code = exitInterrupted
	}
	if !errors.Is(err, errSilent) {
		if app.output == "json" {
			// A refusal is output too: a script reading stdout gets it
			// as JSON; stderr keeps the line for whoever watches.
			writeJSON(stdout, refusal{Error: err.Error(), ExitCode: code})
		}
		fmt.Fprintf(stderr, "drctl: %v\n", err)
		if code == exitBadInput && xe == nil {
			fmt.Fprintln(stderr, "see drctl --help")
		}
	}
	return code
}

// refusal is what -o json prints when drctl refuses or fails without
// other output: the message and the exit code.
type refusal struct {
	Error    string `json:"error"`
	ExitCode int    `json:"exitCode"`
}

// app is one invocation: its streams, flags and Temporal client.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	output         string
	conn           connFlags
	planFilter     string // list --plan
	ns             string // the namespace dialled
	client         client.Client
	// signKey is the plan signing key (--sign-key); by is who acts
	// (--by).
	signKey string
	// signValidFor is how long a signature drctl makes with --sign-key
	// is good (--sign-valid-for).
	signValidFor time.Duration
	by           string
}

func (a *app) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "drctl",
		Short: "Drover's operator CLI: plans, DR actions, and their progress",
		Long: `drctl checks DR plans and drives Drover's actions through Temporal.

PLAN is a plan file. RUN is a plan name, a plan file or a workflow id
(drover-action-NAME for failover, reprotect, failback and drill;
drover-protect-NAME for protection).

Connection: as the temporal CLI, with its flags (--address, --namespace,
--api-key, --tls-cert-path, --tls-key-path, --tls-ca-path,
--tls-server-name, --profile, --env) over TEMPORAL_ADDRESS (default
localhost:7233), TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_* and
TEMPORAL_PROFILE.

Exit codes: 0 done, 1 the action failed, 2 bad input, 3 Temporal
cannot be reached, refuses drctl's credentials or has no such namespace.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SetOut(a.stderr)
			_ = cmd.Usage()
			return silent(exitBadInput)
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			switch a.output {
			case "text", "json":
				return nil
			}
			return badInput("-o %q: want text or json", a.output)
		},
	}
	root.PersistentFlags().StringVarP(&a.output, "output", "o", "text", "output format: text or json")
	a.conn.add(root)
	root.PersistentFlags().DurationVar(&a.signValidFor, "sign-valid-for", DefaultSignatureValidity, "how long a signature made with --sign-key is good; 0 for no end (an old version of the plan then stays signed until the worker sees a newer one)")
	root.PersistentFlags().StringVar(&a.signKey, "sign-key", os.Getenv("DROVER_PLAN_SIGNING_KEY"), "sign the plan of an action with this ed25519 key (PEM; default DROVER_PLAN_SIGNING_KEY); without it, the signature file PLAN.sig beside the plan is sent")
	root.PersistentFlags().StringVar(&a.by, "by", os.Getenv("DROVER_BY"), "who acts, recorded in the action (default DROVER_BY, or user@host)")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return badInput("%v (see %s --help)", err, cmd.CommandPath())
	})
	root.AddCommand(a.planCommand())
	root.AddCommand(a.actionCommands()...)
	root.AddCommand(a.runCommands()...)
	root.AddCommand(a.reportCommand(), a.evidenceCommand(), a.scheduleCommand(), a.uiCommand())
	root.AddCommand(a.conformanceCommand(), a.pointsCommand(), a.genDocsCommand())
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "The module version and VCS revision drctl was built from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.json() {
				writeJSON(a.stdout, map[string]string{"version": version.String()})
				return nil
			}
			fmt.Fprintf(a.stdout, "drctl %s\n", version.String())
			return nil
		},
	})
	return root
}

// json reports whether -o json was asked for.
func (a *app) json() bool { return a.output == "json" }

// dial connects to Temporal once per invocation.
func (a *app) dial(ctx context.Context) (client.Client, error) {
	if a.client != nil {
		return a.client, nil
	}
	opts, err := a.conn.options()
	if err != nil {
		return nil, err
	}
	opts.Logger = log.NewStructuredLogger(discardLogger())
	opts.DataConverter = codec.Converter()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.DialContext(dctx, opts)
	if err != nil {
		addr := opts.HostPort
		if addr == "" {
			addr = client.DefaultHostPort
		}
		return nil, &exitError{exitUnreachable, fmt.Errorf("cannot reach Temporal at %s: %v\n%s", addr, err, reachHint(err, opts))}
	}
	a.client = c
	a.ns = namespaceOf(opts)
	if err := checkNamespace(dctx, c, opts); err != nil {
		return nil, err
	}
	return c, nil
}

// checkNamespace asks Temporal for the namespace drctl works in, so that
// a missing one is said before anything else is tried (a real server has
// only the namespaces an operator created). Any other answer than "no
// such namespace" or "unreachable" lets drctl go on: the call that needs
// the namespace tells.
func checkNamespace(ctx context.Context, c client.Client, opts client.Options) error {
	_, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespaceOf(opts)})
	switch {
	case isNamespaceNotFound(err):
		return missingNamespace(opts)
	case err != nil && isUnavailable(err):
		return &exitError{exitUnreachable, fmt.Errorf("cannot reach Temporal at %s: %v\n%s", hostPort(opts), err, reachHint(err, opts))}
	}
	return nil
}

const clientCertHint = "a client certificate it accepts (--tls-cert-path and --tls-key-path, or TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH)"

// reachHint says what to do about a failed connection: credentials the
// server refused, a TLS handshake that failed, or no server there.
func reachHint(err error, opts client.Options) string {
	msg := err.Error()
	switch c := status.Code(err); {
	case c == codes.Unauthenticated || c == codes.PermissionDenied || strings.Contains(msg, "Unauthenticated") || strings.Contains(msg, "PermissionDenied"):
		return "Temporal refused drctl's credentials: give the namespace's API key (--api-key or TEMPORAL_API_KEY) or " + clientCertHint
	case strings.Contains(msg, "remote error: tls:"):
		// The server's alert: a client certificate missing or refused.
		return "the server refused the TLS handshake: give " + clientCertHint
	case strings.Contains(msg, "x509:") || strings.Contains(msg, "tls:") || strings.Contains(msg, "authentication handshake failed"):
		return "the TLS handshake failed: give the CA that signs the server's certificate (TEMPORAL_TLS_SERVER_CA_CERT_PATH or --tls-ca-path) and, for mutual TLS, " + clientCertHint
	}
	hint := "start it (make up) or point drctl at it with TEMPORAL_ADDRESS or --address"
	if opts.ConnectionOptions.TLS == nil {
		return hint + "; a server that takes TLS only needs --tls (TEMPORAL_TLS=true) or the other TLS settings"
	}
	// A server that refuses a client certificate may close the connection
	// without an alert drctl sees.
	return hint + "; a server that asks for client certificates needs " + clientCertHint
}

// missingNamespace is the exit-3 error for a namespace the server lacks.
func missingNamespace(opts client.Options) error {
	ns := namespaceOf(opts)
	return &exitError{exitUnreachable, fmt.Errorf("the Temporal server at %s has no namespace %q: create it (temporal operator namespace create --namespace %s --retention 720h) or point drctl at the right one with TEMPORAL_NAMESPACE or --namespace",
		hostPort(opts), ns, ns)}
}

func namespaceOf(opts client.Options) string {
	if opts.Namespace == "" {
		return client.DefaultNamespace
	}
	return opts.Namespace
}

func hostPort(opts client.Options) string {
	if opts.HostPort == "" {
		return client.DefaultHostPort
	}
	return opts.HostPort
}

// temporalError classifies an error from a Temporal call: a lost
// connection exits 3, a missing workflow is bad input, the rest failed.
func temporalError(what string, err error) error {
	var xe *exitError
	if errors.As(err, &xe) {
		return err
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return badInput("%s: %v", what, err)
	}
	if isNamespaceNotFound(err) {
		return &exitError{exitUnreachable, fmt.Errorf("%s: %v: create the namespace (temporal operator namespace create) or point drctl at the right one with TEMPORAL_NAMESPACE or --namespace", what, err)}
	}
	if isUnavailable(err) {
		return &exitError{exitUnreachable, fmt.Errorf("%s: Temporal stopped answering: %v", what, err)}
	}
	return failed("%s: %v", what, err)
}

func isNamespaceNotFound(err error) bool {
	var nf *serviceerror.NamespaceNotFound
	return errors.As(err, &nf)
}

func isUnavailable(err error) bool {
	var u *serviceerror.Unavailable
	return errors.As(err, &u) || strings.Contains(err.Error(), "connection refused")
}
