// Command drover-stack runs Drover's local embedded stack: the Temporal
// dev server with a file database, two simulated storage sites that
// replicate to each other, the worker, and an application writing on
// each site. No Docker is needed; the binaries come from `make build
// temporal`.
//
//	drover-stack demo   start the stack, fail over, reprotect, fail back,
//	                    print RTO, RPO and the invariant check, stop it all
//	drover-stack up     start the stack and leave it running (.run/stack)
//	drover-stack down   stop the stack that up started
//	drover-stack write  an application writing to one site (up runs two)
//
// Exit codes: 0 done, 1 the demo or the stack failed, 2 bad flags,
// 130 interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/drover-dr/drover/internal/stack"
	"github.com/drover-dr/drover/plans"
)

const usage = `usage: drover-stack demo|up|down|write [flags]   (drover-stack CMD -h for flags)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "drover-stack: %v\n", err)
		return 1
	}
	fs := flag.NewFlagSet("drover-stack "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	defDir := ".run/stack"
	if args[0] == "demo" {
		defDir = ".run/demo"
	}
	dir := fs.String("dir", defDir, "run directory: state, logs, the plan copy and the pid file")
	bin := fs.String("bin", filepath.Dir(exe), "directory holding temporal, worker, drover-sim and drctl")
	planFile := fs.String("plan", "plans/examples/demo.yaml", "the demo plan; the stack fills in its site endpoints")
	site := fs.String("site", "", "write: the site's name")
	data := fs.String("data", "", "write: the site's data address")
	from := fs.String("from", "", "write: the client address to write from")
	interval := fs.Duration("interval", 100*time.Millisecond, "write: time between writes")
	ports := fs.String("ports", "fixed", "up: fixed (the Temporal CLI's defaults and the demo plan's sites) or free")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "drover-stack %s: unexpected arguments %q\n", args[0], fs.Args())
		return 2
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fmt.Fprintf(stderr, "drover-stack: %v\n", err)
		return 2
	}
	o := stack.Options{Dir: abs, Bin: *bin, Plan: *planFile, Out: stdout}
	switch args[0] {
	case "demo":
		o.Layout, err = stack.Free()
		if err == nil {
			_ = os.RemoveAll(abs) // a demo starts from nothing
			var res *stack.DemoResult
			if res, err = stack.Demo(ctx, o, filepath.Join(*bin, "drctl")); err == nil {
				fmt.Fprintf(stdout, "\ndemo: SUCCESS — failover, reprotect and failback of plan %q completed, no write lost in the failback, invariants hold, nothing left running\n", res.Plan)
			}
		}
		if err == nil {
			return 0
		}
	case "up":
		if *ports != "fixed" && *ports != "free" {
			fmt.Fprintf(stderr, "drover-stack up: --ports %q: want fixed or free\n", *ports)
			return 2
		}
		err = up(ctx, o, exe, *ports == "free")
		if err == nil {
			return 0
		}
	case "down":
		if err = stack.Down(abs, stdout); err == nil {
			return 0
		}
	case "write":
		if *site == "" || *data == "" || *from == "" {
			fmt.Fprintln(stderr, "drover-stack write: give --site, --data and --from")
			return 2
		}
		err = write(ctx, stack.SiteLayout{Name: *site, Data: *data, Client: *from}, *interval, stdout)
		if err == nil {
			return 0
		}
	default:
		fmt.Fprintf(stderr, "drover-stack: unknown command %q\n%s", args[0], usage)
		return 2
	}
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "drover-stack %s: interrupted; everything it started is stopped\n", args[0])
		return 130
	}
	fmt.Fprintf(stderr, "drover-stack %s: %v\n", args[0], err)
	return 1
}

// up starts the stack detached, with a writer per site, and says how to
// use it.
func up(ctx context.Context, o stack.Options, exe string, freePorts bool) error {
	o.Layout, o.Detach, o.SignOriginal = stack.Fixed(), true, true
	if freePorts {
		l, err := stack.Free()
		if err != nil {
			return err
		}
		o.Layout = l
	}
	st, err := stack.Start(ctx, o)
	if err != nil {
		return err
	}
	for _, s := range o.Layout.Sites {
		if err := st.Spawn("writer-"+s.Name, exe, nil, "write", "--site", s.Name, "--data", s.Data, "--from", s.Client, "--dir", o.Dir); err != nil {
			st.Stop()
			return err
		}
	}
	return upNotes(o.Out, o, st.PlanFile, exe)
}

// upNotes says how to use the stack up started: how to stop it (make
// down stops only the default run directory), where it is, and the
// commands to try with its plan, by the plan's name and site names.
func upNotes(out io.Writer, o stack.Options, planFile, exe string) error {
	p, err := plans.Load(planFile)
	if err != nil {
		return fmt.Errorf("the stack's plan: %w", err)
	}
	// The plan's site for each of the stack's: the one naming its
	// endpoint; the first site is the primary.
	site := make([]string, len(o.Layout.Sites))
	for i, l := range o.Layout.Sites {
		site[i] = l.Name
		for _, s := range p.Sites {
			if s.Storage.Endpoint == l.GRPC {
				site[i] = s.Name
			}
		}
	}
	// make down stops the stack of the default directory, from where
	// the Makefile is.
	stop := shortPath(exe) + " down -dir " + shortPath(o.Dir)
	if _, err := os.Stat("Makefile"); err == nil && o.Dir == absOr(".run/stack") {
		stop = "make down"
	}
	drctl := shortPath(filepath.Join(o.Bin, "drctl"))
	plan := shortPath(planFile)
	_, err = fmt.Fprintf(out, `
The stack is up; %s stops it. Logs and state are in %s.
  Temporal UI   http://%s
  metrics       http://%s/metrics
  the plan      %s (%s with this stack's endpoints)
Try:
  export TEMPORAL_ADDRESS=%[7]s
  %[8]s protect start %[5]s
  %[8]s status %[9]s
  %[8]s drill %[5]s --to %[10]s --wait
  curl -X POST http://%[11]s/v1/down      # lose %[12]s
  %[8]s failover %[5]s --to %[10]s --wait
`, stop, shortPath(o.Dir), o.Layout.UI, o.Layout.Metrics, plan, shortPath(o.Plan), o.Layout.Temporal,
		drctl, p.Metadata.Name, site[1], o.Layout.Sites[0].Control, site[0])
	return err
}

// absOr is path made absolute, or path when it cannot be.
func absOr(path string) string {
	if a, err := filepath.Abs(path); err == nil {
		return a
	}
	return path
}

// shortPath is path relative to the working directory when it lies
// under it, else as it is.
func shortPath(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	rel, err := filepath.Rel(wd, absOr(path))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return path
	}
	return rel
}

// write runs one site's application until interrupted, reporting its
// counts every ten seconds.
func write(ctx context.Context, site stack.SiteLayout, interval time.Duration, out io.Writer) error {
	w, err := stack.NewWriter(site, []string{"db-data", "web-assets"})
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { w.Run(ctx, interval); close(done) }()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			fmt.Fprintf(out, "writer %s: %v\n", site.Name, w.Counts())
			return nil
		case <-tick.C:
			fmt.Fprintf(out, "writer %s: %v\n", site.Name, w.Counts())
		}
	}
}
