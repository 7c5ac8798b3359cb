package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/workflows"
)

// The dashboard (drctl ui) is a small read-only web page over Temporal:
// the plans with their primary and each group's protection lag against
// the RPO target (a chart of the recent lag), the running actions with
// their live step table, and the past actions with their report and a
// link to the Temporal UI. Server-rendered from embedded templates; the
// only script refreshes a running action's step table. It answers GET
// alone, and only for the host names of the loopback or of its listen
// address, so that a page elsewhere cannot read it through a rebound DNS
// name.

//go:embed templates/ui.html
var uiHTML string

var uiTemplates = template.Must(template.New("ui").Funcs(template.FuncMap{
	"stamp": stamp, "dur": dur, "took": took, "word": firstWord, "tries": tries, "note": stepNote, "title": titleCase, "since": func(t time.Time) string { return dur(time.Since(t)) },
	"esc": url.PathEscape, "lag": lagText,
}).Parse(uiHTML))

// firstWord is the first word of a state ("failed" of "failed at step
// …"), for its class on the page.
func firstWord(s string) string {
	w, _, _ := strings.Cut(s, " ")
	return w
}

// lagPoint is one look at a group's lag.
type lagPoint struct {
	At  time.Time
	Lag time.Duration
}

// lagHistory is how many looks a group's chart shows.
const lagHistory = 60

type dashboard struct {
	a        *app
	c        client.Client
	temporal string // the Temporal UI's base URL, "" for none
	ns       string
	every    time.Duration

	mu  sync.Mutex
	lag map[string][]lagPoint // plan/group → recent looks, oldest first
}

func (a *app) uiCommand() *cobra.Command {
	var listen, temporalUI string
	var every time.Duration
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "A read-only dashboard: plans and their protection lag, running actions live, past actions and their reports",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if every < 100*time.Millisecond {
				return badInput("--every %v: want 100ms or more", every)
			}
			return a.ui(cmd.Context(), listen, temporalUI, every)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8090", "address to serve on (keep it on the loopback: the page has no login)")
	cmd.Flags().StringVar(&temporalUI, "temporal-ui", "http://127.0.0.1:8233", "the Temporal UI's address, for links to each workflow (\"\" for none)")
	cmd.Flags().DurationVar(&every, "every", 2*time.Second, "how often the protection lag is sampled for its chart")
	return cmd
}

func (a *app) ui(ctx context.Context, listen, temporalUI string, every time.Duration) error {
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	d := &dashboard{a: a, c: c, temporal: strings.TrimSuffix(temporalUI, "/"), ns: a.ns, every: every, lag: map[string][]lagPoint{}}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return badInput("--listen %s: %v", listen, err)
	}
	host, _, _ := net.SplitHostPort(l.Addr().String())
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		fmt.Fprintf(a.stderr, "drctl: warning: the dashboard listens on %s, off the loopback: it has no login, and anyone who reaches it reads every plan's state\n", l.Addr())
	}
	srv := &http.Server{Handler: d.routes(l.Addr().String()), ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(a.stdout, "dashboard on http://%s/ (Ctrl-C stops it)\n", l.Addr())
	go d.sample(ctx)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return failed("serve the dashboard: %v", err)
	}
	return nil
}

// routes serves the pages; listen is the address served, whose host name
// (with the loopback's) is the only one accepted.
func (d *dashboard) routes(listen string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", d.overview)
	mux.HandleFunc("GET /action/{id}", d.action)
	mux.HandleFunc("GET /action/{id}/steps", d.steps)
	mux.HandleFunc("GET /report/{id}", d.report)
	lhost, _, _ := net.SplitHostPort(listen)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		host = strings.Trim(host, "[]")
		if host != "localhost" && host != lhost && !isLoopback(host) {
			http.Error(w, "unknown host name "+r.Host, http.StatusMisdirectedRequest)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "the dashboard is read-only", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		mux.ServeHTTP(w, r)
	})
}

func isLoopback(h string) bool {
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// sample looks at every plan's protection each d.every until ctx ends.
func (d *dashboard) sample(ctx context.Context) {
	t := time.NewTicker(d.every)
	defer t.Stop()
	for {
		d.protections(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// planView is a plan's row of the overview.
type planView struct {
	Plan    string
	Primary string
	Status  string
	RPO     time.Duration
	Groups  []groupView
	Note    string
	// Unprotected names the state a failover left the plan in (no
	// replica), as status does; empty while it is protected.
	Unprotected string
	// Ending says, as status does, that protection ended on its own, or
	// that the plan's signature, and protection with it, ends within
	// workflows.SignatureWarning; empty otherwise.
	Ending string
}

type groupView struct {
	Name     string
	Lag      time.Duration
	OutOfRPO bool
	LastSync time.Time
	Chart    template.HTML
}

// protections reads each plan's protection and records its groups' lag.
func (d *dashboard) protections(ctx context.Context) ([]planView, error) {
	xs, err := d.a.executions(ctx, d.c, 0, true)
	if err != nil {
		return nil, err
	}
	var out []planView
	for _, x := range xs {
		if x.Type != names.Protect {
			continue
		}
		pv := planView{Plan: x.Plan, Status: x.Status}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ps, err := workflows.ReadProtect(qctx, d.c, x.Plan)
		cancel()
		if err != nil {
			pv.Note = err.Error()
			out = append(out, pv)
			continue
		}
		pv.Primary, pv.RPO = ps.Primary, ps.RPOTarget
		now := time.Now()
		if ps.Unreachable != "" {
			pv.Note = "primary unreachable: " + oneLine(ps.Unreachable)
		}
		pv.Ending = protectionWarning(x.Plan, ps, now)
		if u := ps.Unprotected; u != nil {
			reprotecting := ""
			for i := range xs {
				if xs[i].Plan == x.Plan && runningReprotect(&xs[i]) != "" {
					reprotecting = xs[i].WorkflowID
				}
			}
			pv.Unprotected = unprotectedText(x.Plan, ps.Primary, u, now, reprotecting)
		}
		d.mu.Lock()
		for _, g := range slices.Sorted(mapKeys(ps.Groups)) {
			h := ps.Groups[g]
			k := x.Plan + "/" + g
			pts := d.lag[k]
			// One point per look of protection's (the lag as it judged
			// it, as every view shows it).
			if n := len(pts); !ps.Looked.IsZero() && (n == 0 || ps.Looked.After(pts[n-1].At)) {
				pts = append(pts, lagPoint{At: ps.Looked, Lag: h.Lag})
			}
			if len(pts) > lagHistory {
				pts = pts[len(pts)-lagHistory:]
			}
			d.lag[k] = pts
			pv.Groups = append(pv.Groups, groupView{Name: g, Lag: h.Lag, OutOfRPO: h.OutOfRPO, LastSync: h.LastSync, Chart: lagChart(pts, ps.RPOTarget)})
		}
		d.mu.Unlock()
		out = append(out, pv)
	}
	return out, nil
}

// lagChart draws the recent lag as a small inline SVG, with the RPO
// target as a dashed line.
func lagChart(pts []lagPoint, rpo time.Duration) template.HTML {
	const w, h = 160.0, 28.0
	top := rpo
	for _, p := range pts {
		top = max(top, p.Lag)
	}
	if top <= 0 {
		top = time.Second
	}
	y := func(d time.Duration) float64 { return h - 2 - (h-4)*float64(d)/float64(top) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="lag" width="%g" height="%g" viewBox="0 0 %g %g" role="img" aria-label="recent lag">`, w, h, w, h)
	if rpo > 0 {
		fmt.Fprintf(&b, `<line x1="0" x2="%g" y1="%.1f" y2="%.1f" class="rpo"/>`, w, y(rpo), y(rpo))
	}
	var coords []string
	for i, p := range pts {
		x := w - float64(len(pts)-1-i)*(w/float64(lagHistory-1))
		coords = append(coords, fmt.Sprintf("%.1f,%.1f", x, y(p.Lag)))
	}
	if len(coords) == 1 {
		coords = append([]string{fmt.Sprintf("%.1f,%.1f", w-2, y(pts[0].Lag))}, coords...)
	}
	fmt.Fprintf(&b, `<polyline points="%s" class="lagline"/></svg>`, strings.Join(coords, " "))
	return template.HTML(b.String()) // numbers only: nothing to escape
}

// actionView is an action of the overview.
type actionView struct {
	execution
	Current  string
	Temporal string
}

func (d *dashboard) temporalLink(x execution) string {
	if d.temporal == "" {
		return ""
	}
	return d.temporal + "/namespaces/" + url.PathEscape(d.ns) + "/workflows/" + url.PathEscape(x.WorkflowID) + "/" + url.PathEscape(x.RunID) + "/history"
}

func (d *dashboard) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	plansV, err := d.protections(ctx)
	if err != nil {
		d.fail(w, err)
		return
	}
	xs, err := d.a.executions(ctx, d.c, 200, false)
	if err != nil {
		d.fail(w, err)
		return
	}
	var running, past []actionView
	for _, x := range xs {
		if x.Type == names.Protect {
			continue
		}
		v := actionView{execution: x, Temporal: d.temporalLink(x)}
		if x.Status == "running" {
			if p, err := queryProgress(ctx, d.c, x.WorkflowID, x.RunID); err == nil {
				v.Current = currentStep(p)
			}
			running = append(running, v)
		} else if len(past) < 20 {
			markPartial(ctx, d.c, &v.execution)
			past = append(past, v)
		}
	}
	sort.SliceStable(plansV, func(i, j int) bool { return plansV[i].Plan < plansV[j].Plan })
	d.render(w, "overview", map[string]any{"Plans": plansV, "Running": running, "Past": past, "Now": time.Now()})
}

// currentStep names what an action is at: its running, paused or
// waiting steps, else its last step done.
func currentStep(p *workflows.Progress) string {
	var now []string
	last := ""
	for _, s := range p.Steps {
		switch s.State {
		case workflows.StateRunning, workflows.StatePaused, workflows.StateWaiting:
			now = append(now, s.Name+" ("+s.State+")")
		case workflows.StateDone:
			last = s.Name + " (done)"
		}
	}
	if len(now) > 0 {
		return strings.Join(now, ", ")
	}
	return last
}

// stepsView is an action's live step table. Status is Temporal's
// (running until the run ends); Shown is what the page says of the
// action: paused or waiting for approval while a step waits for the
// operator, partial for a site action that left plans behind. Next are
// the commands the operator's decision takes.
type stepsView struct {
	ID, Run  string
	Progress *workflows.Progress
	Status   string
	Shown    string
	Next     []string
	Done     bool
	Temporal string
}

// shown is what the page says of the action and the commands it waits
// for: the same resolve and approve commands as drctl's step table.
func (v *stepsView) shown() {
	p := v.Progress
	v.Shown = actionState(v.Status, p)
	if p == nil || v.Status != "running" {
		return
	}
	arg := runArg(v.ID)
	paused := stepsIn(p, workflows.StatePaused)
	for _, s := range paused {
		step := ""
		if len(paused) > 1 {
			step = " --step " + s.Key()
		}
		v.Next = append(v.Next, fmt.Sprintf("step %q paused: drctl resolve %s%s --retry (run it again), %s or --abort (end the action)", s.Name, arg, step, skipHint(s)))
	}
	if waiting := stepsIn(p, workflows.StateWaiting); len(waiting) > 0 {
		v.Next = append(v.Next, fmt.Sprintf("waiting for approval: drctl approve %s", arg))
	}
}

func (d *dashboard) stepsOf(ctx context.Context, id string) (*stepsView, error) {
	if !slices.ContainsFunc([]string{names.ActionIDPrefix, names.SiteActionIDPrefix, names.TestRecoveryIDPrefix}, func(p string) bool { return strings.HasPrefix(id, p) }) {
		return nil, badInput("%q is not an action's workflow id", id)
	}
	desc, err := d.c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return nil, err
	}
	x := executionOf(desc.GetWorkflowExecutionInfo())
	v := &stepsView{ID: id, Run: x.RunID, Status: x.Status, Done: x.Status != "running", Temporal: d.temporalLink(x)}
	if v.Progress, err = queryProgress(ctx, d.c, id, x.RunID); err != nil {
		return nil, fmt.Errorf("%s did not answer for its progress (is a worker running?): %w", id, err)
	}
	v.shown()
	return v, nil
}

func (d *dashboard) action(w http.ResponseWriter, r *http.Request) {
	v, err := d.stepsOf(r.Context(), r.PathValue("id"))
	if err != nil {
		d.fail(w, err)
		return
	}
	d.render(w, "action", v)
}

func (d *dashboard) steps(w http.ResponseWriter, r *http.Request) {
	v, err := d.stepsOf(r.Context(), r.PathValue("id"))
	if err != nil {
		d.fail(w, err)
		return
	}
	d.render(w, "steps", v)
}

func (d *dashboard) report(w http.ResponseWriter, r *http.Request) {
	rep, err := buildReport(r.Context(), d.c, r.PathValue("id"), r.URL.Query().Get("run"))
	if err != nil {
		d.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := rep.HTML(w); err != nil {
		fmt.Fprintf(d.a.stderr, "drctl ui: %v\n", err)
	}
}

func (d *dashboard) render(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := uiTemplates.ExecuteTemplate(w, name, data); err != nil {
		fmt.Fprintf(d.a.stderr, "drctl ui: render %s: %v\n", name, err)
	}
}

func (d *dashboard) fail(w http.ResponseWriter, err error) {
	code := http.StatusBadGateway
	var ee *exitError
	if errors.As(err, &ee) && ee.code == exitBadInput || isNotFound(err) {
		code = http.StatusNotFound
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintln(w, err)
}
