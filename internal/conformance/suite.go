package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/csiaddons/identity"
	"github.com/drover-dr/drover/csiaddons/replication"
)

// DefaultCIDR is the fence checks' CIDR: one address of TEST-NET-1
// (RFC 5737), which no real client holds.
const DefaultCIDR = "192.0.2.1/32"

// DefaultExtraCIDRs are fenced together in one call beside CIDR, blocks of
// other lengths from TEST-NET-2: a driver must fence each, whole, and keep
// the fences already there.
var DefaultExtraCIDRs = []string{"198.51.100.0/28", "198.51.100.64/26"}

// Site is one endpoint under test: where each service is reached (one
// address for all three, usually), and the secrets and parameters sent
// with its calls.
type Site struct {
	Name        string
	Identity    activities.Endpoint
	Fence       activities.Endpoint
	Replication activities.Endpoint
	// Secrets are the resolved secret values sent with fence and
	// replication calls.
	Secrets map[string]string
}

// Config is one run of the suite.
type Config struct {
	// A is the endpoint under test; its copies of the scratch sources are
	// primary at the start and at the end.
	A Site
	// B is A's replication peer; without it the replication checks skip.
	B *Site
	// Volume and Group are the scratch sources; an empty one skips its
	// replication checks. Their replication must be disabled at the start.
	Volume, Group string
	// CIDR is fenced and unfenced; empty skips the fence checks.
	CIDR string
	// ExtraCIDRs are fenced and unfenced together, beside CIDR
	// (DefaultExtraCIDRs when nil; none when empty).
	ExtraCIDRs []string
	// RequireHooks fails each check that needs a hook the run was not
	// given, where it is otherwise skipped (and listed as unchecked).
	RequireHooks bool
	// CallTimeout bounds each check of single calls; SyncTimeout each
	// check that waits for the storage (first sync, promotion after the
	// final sync, resync until ready).
	CallTimeout, SyncTimeout time.Duration
	// PollInterval is the pause between the calls of a waiting check.
	PollInterval time.Duration
	// Observe is how long a check that must see something not happen
	// watches for it (no sync reaching a diverged copy that was resynced
	// without force).
	Observe time.Duration
	// ClockSkew is how far the driver's clock may be ahead of the suite's:
	// a last sync time later than the answer's arrival by more is refused.
	ClockSkew time.Duration
	// Hooks are commands that do what the CSI-Addons API cannot: without
	// them the checks that need them skip, saying so.
	Hooks Hooks
	// DryRun lists the calls without making any.
	DryRun bool
	// Progress, when set, is told what the suite waits on while a call
	// goes unanswered (every WaitNote): a driver that hangs shows which
	// call of which check hangs, and for how long.
	Progress io.Writer
	// WaitNote is how often Progress hears of a call still unanswered
	// (default a third of CallTimeout, between 1 and 10 s).
	WaitNote time.Duration
	// Abandon, when set, ends the clean-up of an interrupted run when it
	// ends (a second Ctrl-C): each step not done is reported so.
	Abandon context.Context
}

// Hooks are shell commands (sh -c) the suite runs to provoke a state no
// CSI-Addons call can. Each gets the environment of the suite plus
// DROVER_CONF_SITE_A and DROVER_CONF_SITE_B (the site names),
// DROVER_CONF_KIND (volume or group) and DROVER_CONF_SOURCE (its ID);
// Write also gets DROVER_CONF_SITE, the site whose copy to write.
type Hooks struct {
	// LinkDown makes each site's peer unreachable from it (the replication
	// link cut), LinkUp restores it.
	LinkDown, LinkUp string
	// Write writes to the scratch source's copy on DROVER_CONF_SITE while
	// that copy is primary, so that it holds data its peer never received.
	Write string
	// Run runs a hook; nil runs it with sh -c. Tests set it.
	Run func(ctx context.Context, command string, env []string) error
}

// Status of one check.
type Status string

// Check outcomes.
const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip"
	// Planned is a check of a dry run: its calls are listed, none made.
	Planned Status = "planned"
)

// Result is the outcome of one check.
type Result struct {
	ID       string        `json:"id"`
	Spec     string        `json:"spec"`
	Status   Status        `json:"status"`
	Detail   string        `json:"detail,omitempty"`
	Duration time.Duration `json:"durationNs"`
	Calls    []string      `json:"calls,omitempty"`
}

// Report is a whole run.
type Report struct {
	Driver  string   `json:"driver,omitempty"`
	Version string   `json:"version,omitempty"`
	Results []Result `json:"results"`
	// Cleanup says what the clean-up of an interrupted or failed run did.
	Cleanup []string `json:"cleanup,omitempty"`
	// Unchecked lists the checks that did not run for want of a hook
	// (Config.Hooks), with why: rules the run says nothing about.
	Unchecked []string `json:"unchecked,omitempty"`
}

// Counts returns how many checks passed, failed and were skipped.
func (r *Report) Counts() (pass, fail, skip int) {
	for _, c := range r.Results {
		switch c.Status {
		case Pass:
			pass++
		case Fail:
			fail++
		case Skip:
			skip++
		}
	}
	return
}

// OK reports whether no check failed.
func (r *Report) OK() bool {
	_, f, _ := r.Counts()
	return f == 0
}

// Validate checks a configuration before anything is called.
func (c *Config) Validate() error {
	var errs []string
	if c.A.Identity.Address == "" {
		errs = append(errs, "no endpoint to test")
	}
	if c.B == nil && (c.Volume != "" || c.Group != "") {
		errs = append(errs, "replication checks need a peer endpoint (--peer or --peer-endpoint)")
	}
	for _, x := range c.ExtraCIDRs {
		if _, err := netip.ParsePrefix(x); err != nil {
			errs = append(errs, fmt.Sprintf("--extra-cidr %q is not a CIDR block", x))
		}
	}
	if c.CIDR != "" {
		if _, err := netip.ParsePrefix(c.CIDR); err != nil {
			errs = append(errs, fmt.Sprintf("--cidr %q is not a CIDR block", c.CIDR))
		}
	}
	if c.Volume != "" && c.Volume == c.Group {
		errs = append(errs, "the scratch volume and group need different IDs")
	}
	if (c.Hooks.LinkDown == "") != (c.Hooks.LinkUp == "") {
		errs = append(errs, "a link-down command needs its link-up command, and the other way round")
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 30 * time.Second
	}
	if c.SyncTimeout <= 0 {
		c.SyncTimeout = 3 * time.Minute
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 500 * time.Millisecond
	}
	if c.Observe <= 0 {
		c.Observe = 20 * time.Second
	}
	if c.ClockSkew <= 0 {
		c.ClockSkew = 5 * time.Second
	}
	if c.WaitNote <= 0 {
		c.WaitNote = min(10*time.Second, max(c.CallTimeout/3, time.Second))
	}
	return nil
}

// Run runs the suite. ctx cancelled (Ctrl-C) stops it at the next call;
// the clean-up then runs on a context of its own.
func Run(ctx context.Context, cfg Config, d *activities.Dialer) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, dialer: d, report: &Report{}, runCtx: ctx}
	r.identity(ctx, &cfg.A)
	if cfg.B != nil {
		r.identity(ctx, cfg.B)
	}
	r.replicationErrors(ctx)
	r.replication(ctx, "volume", cfg.Volume)
	r.replication(ctx, "group", cfg.Group)
	r.fence(ctx)
	return r.report, nil
}

type runner struct {
	cfg    Config
	dialer *activities.Dialer
	report *Report
	// unanswered is when the call in flight was made, while it has no
	// answer; it stays set when the call ended without one (its context
	// ended first): the driver left it hanging.
	unanswered time.Time
	// unansweredCall names that call.
	unansweredCall string
	// runCtx is the run's context: ended, the run was interrupted.
	runCtx context.Context
	// hangs, once set, says how the driver hung: the checks after it are
	// not run, nor the clean-up's calls, which would hang as well.
	hangs string
	// caps by site name, from GetCapabilities.
	caps map[string]map[string]bool
	// cur collects the calls of the running check.
	cur *Result
}

func (r *runner) skip(id, spec, why string) {
	r.report.Results = append(r.report.Results, Result{ID: id, Spec: spec, Status: Skip, Detail: why})
}

// flow is an ordered run of checks where later ones need earlier ones:
// once a needed step does not pass, every later step is still listed, as
// skipped with the reason, so that the table always holds every planned
// check.
type flow struct {
	r       *runner
	ctx     context.Context
	pre     string
	blocked string
}

func (r *runner) flow(ctx context.Context, pre, blocked string) *flow {
	return &flow{r: r, ctx: ctx, pre: pre, blocked: blocked}
}

// step runs one check, or lists it as skipped once the flow is blocked.
func (f *flow) step(id, spec string, timeout time.Duration, fn func(ctx context.Context) (string, error)) bool {
	if f.blocked != "" {
		f.r.skip(f.pre+id, spec, f.blocked)
		return false
	}
	return f.r.check(f.ctx, f.pre+id, spec, timeout, fn)
}

// need runs a step the rest of the flow needs: when it does not pass,
// the rest is skipped.
func (f *flow) need(id, spec string, timeout time.Duration, fn func(ctx context.Context) (string, error)) bool {
	if f.step(id, spec, timeout, fn) {
		return true
	}
	f.block("not run: " + f.pre + id + " did not pass")
	return false
}

// block skips the rest of the flow, for why (the first reason stays).
func (f *flow) block(why string) {
	if f.blocked == "" {
		f.blocked = why
	}
}

// check runs one check under its deadline. fn returns "" or a detail on
// success, or an error that fails the check; errSkip skips it.
func (r *runner) check(ctx context.Context, id, spec string, timeout time.Duration, fn func(ctx context.Context) (string, error)) bool {
	res := Result{ID: id, Spec: spec}
	r.cur = &res
	defer func() { r.cur = nil }()
	if ctx.Err() != nil || r.hangs != "" {
		res.Status, res.Detail = Skip, "interrupted"
		if r.hangs != "" {
			res.Detail = "not run: " + r.hangs
		}
		r.report.Results = append(r.report.Results, res)
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	start := time.Now()
	detail, err := fn(cctx)
	// A driver's server that honours the deadline it was sent answers
	// DEADLINE_EXCEEDED itself, and on a busy machine that answer can come
	// before this side's timer has ended cctx (measured: 12.01 s into a
	// 12 s check, cctx not yet ended): a check that failed with a call
	// still unanswered after most of its deadline timed out all the same.
	timedOut := cctx.Err() == context.DeadlineExceeded ||
		err != nil && !r.unanswered.IsZero() && time.Since(start) >= timeout*9/10
	cancel()
	hangs := ""
	if err != nil && timedOut && !r.unanswered.IsZero() && time.Since(r.unanswered) >= max(hungAfter, timeout/2) {
		// The driver sat on a call for most of the check's deadline: it
		// would sit on every later call too (ceph-csi with a Ceph user its
		// cluster refuses, a monitor that does not answer), for minutes.
		hangs = fmt.Sprintf("the driver left %s unanswered for %v, to %s's deadline (%s)", r.unansweredCall,
			time.Since(r.unanswered).Round(time.Second), id, timeout)
	}
	res.Duration = time.Since(start)
	var sk skipError
	var hs hookSkip
	switch {
	case r.cfg.DryRun:
		res.Status, res.Detail = Planned, ""
	case errors.As(err, &hs) && r.cfg.RequireHooks:
		res.Status, res.Detail = Fail, "not checked: "+string(hs)+" (--require-hooks fails a run that leaves a rule unchecked)"
		r.report.Unchecked = append(r.report.Unchecked, id+": "+string(hs))
	case errors.As(err, &hs):
		res.Status, res.Detail = Skip, string(hs)
		r.report.Unchecked = append(r.report.Unchecked, id+": "+string(hs))
	case errors.As(err, &sk):
		res.Status, res.Detail = Skip, string(sk)
	case err != nil && ctx.Err() != nil:
		// Interrupted (Ctrl-C) while it ran: not a verdict on the driver.
		res.Status, res.Detail = Skip, "interrupted while it ran: "+err.Error()
	case err != nil:
		res.Status, res.Detail = Fail, err.Error()
		if timedOut {
			res.Detail += fmt.Sprintf(" (deadline %s)", timeout)
		}
		if hangs != "" {
			res.Detail += "; the driver hangs: the checks after this one are not run (its logs say why: a wrong user or an unreachable cluster hangs every call of ceph-csi)"
			r.hangs = hangs
		}
	default:
		res.Status, res.Detail = Pass, detail
	}
	r.report.Results = append(r.report.Results, res)
	return res.Status == Pass || res.Status == Planned
}

type skipError string

func (s skipError) Error() string { return string(s) }

// hookSkip is the skip of a check that needs what no CSI-Addons call can
// do and was given no hook for it: listed in Report.Unchecked, and a
// failure under Config.RequireHooks.
type hookSkip string

func (s hookSkip) Error() string { return string(s) }

// invoke makes one call, or records it in a dry run (filling resp with a
// plausible answer so the flow goes on).
func (r *runner) invoke(ctx context.Context, e activities.Endpoint, site, method string, req, resp proto.Message) error {
	rpc := method[strings.LastIndex(method, "/")+1:]
	if r.cur != nil {
		r.cur.Calls = append(r.cur.Calls, fmt.Sprintf("%s %s %s", site, rpc, describe(req)))
	}
	if r.cfg.DryRun {
		dryAnswer(resp)
		return nil
	}
	conn, err := r.dialer.Conn(e)
	if err != nil {
		return fmt.Errorf("%s: %w", site, err)
	}
	start := time.Now()
	r.unanswered, r.unansweredCall = start, site+" "+rpc
	stop := r.noteWaiting(ctx, site, rpc, start)
	err = conn.Invoke(ctx, method, req, resp, grpc.WaitForReady(false))
	stop()
	if err == nil || ctx.Err() == nil && !deadlineAnswer(err) {
		r.unanswered, r.unansweredCall = time.Time{}, "" // the driver answered
	}
	return err
}

// deadlineAnswer tells whether err is the end of a call's deadline or
// context, from either side: no answer of the driver's.
func deadlineAnswer(err error) bool {
	c := status.Code(err)
	return c == codes.DeadlineExceeded || c == codes.Canceled
}

// noteWaiting tells cfg.Progress, every WaitNote while a call goes
// unanswered, which call of which check waits and how long the check has
// left; the returned func ends it.
func (r *runner) noteWaiting(ctx context.Context, site, rpc string, start time.Time) func() {
	w := r.cfg.Progress
	if w == nil {
		return func() {}
	}
	check := ""
	if r.cur != nil {
		check = r.cur.ID + ": "
	}
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(r.cfg.WaitNote)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				left := ""
				if dl, ok := ctx.Deadline(); ok {
					left = fmt.Sprintf(", %v left of its deadline", time.Until(dl).Round(time.Second))
				}
				fmt.Fprintf(w, "conformance: %swaiting on %s's %s for %v%s\n", check, site, rpc, now.Sub(start).Round(time.Second), left)
			}
		}
	}()
	return func() { close(done); <-ended }
}

// cleanupBase is the context the clean-up runs on: its own (Ctrl-C does
// not end it), or Abandon's when set (a second Ctrl-C does).
func (r *runner) cleanupBase() context.Context {
	if r.cfg.Abandon != nil {
		return r.cfg.Abandon
	}
	return context.Background()
}

// hung says, after an interrupt, whether the driver left the run's last
// call unanswered for a while: a clean-up would hang the same way, so it
// is not tried, and why is reported instead.
func (r *runner) hung(interrupted bool) string {
	if r.hangs != "" {
		return "not tried: " + r.hangs + ", and would leave the clean-up's calls so too"
	}
	if !interrupted || r.unanswered.IsZero() || time.Since(r.unanswered) < hungAfter {
		return ""
	}
	return fmt.Sprintf("not tried: the driver left %s unanswered for %v before the interrupt, and would leave the clean-up's calls so too",
		r.unansweredCall, time.Since(r.unanswered).Round(time.Second))
}

// hungAfter is how long an unanswered call makes a driver hung.
const hungAfter = 5 * time.Second

func dryAnswer(resp proto.Message) {
	switch m := resp.(type) {
	case *replication.ResyncVolumeResponse:
		m.Ready = true
	case *replication.GetVolumeReplicationInfoResponse:
		m.LastSyncTime = timestamppb.Now()
	case *identity.ProbeResponse:
		m.Ready = wrapperspb.Bool(true)
	case *identity.GetIdentityResponse:
		m.Name, m.VendorVersion = "(dry run)", "(dry run)"
	}
}

// describe summarizes a request for the call list: its source, force and
// CIDRs, never its secrets.
func describe(req proto.Message) string {
	type sourced interface {
		GetReplicationSource() *replication.ReplicationSource
	}
	type forced interface{ GetForce() bool }
	type cidred interface{ GetCidrs() []*fence.CIDR }
	var parts []string
	if s, ok := req.(sourced); ok {
		src := s.GetReplicationSource()
		switch {
		case src.GetVolume() != nil:
			parts = append(parts, fmt.Sprintf("volume=%q", src.GetVolume().GetVolumeId()))
		case src.GetVolumegroup() != nil:
			parts = append(parts, fmt.Sprintf("group=%q", src.GetVolumegroup().GetVolumeGroupId()))
		default:
			parts = append(parts, "no source")
		}
	}
	if f, ok := req.(forced); ok && f.GetForce() {
		parts = append(parts, "force")
	}
	if c, ok := req.(cidred); ok {
		var cs []string
		for _, x := range c.GetCidrs() {
			cs = append(cs, x.GetCidr())
		}
		parts = append(parts, "cidrs=["+strings.Join(cs, ",")+"]")
	}
	return strings.Join(parts, " ")
}

// codeOf is the gRPC code of err (OK for nil).
func codeOf(err error) codes.Code { return status.Code(err) }

// want checks that err, rpc's answer, carries the spec's code, or a code
// that a recorded deviation of the driver (activities.Deviations, the
// table Drover's own calls read) says means it; it returns the detail of
// a pass.
func (r *runner) want(rpc string, err error, spec codes.Code) (string, error) {
	got := codeOf(err)
	if r.cfg.DryRun || got == spec {
		return "", nil
	}
	if d, ok := r.deviation(rpc, err); ok && d.Means == spec {
		return fmt.Sprintf("%s instead of %s: %s", got, spec, describeDeviation(d)), nil
	}
	if err == nil {
		return "", fmt.Errorf("answered OK, want %s", spec)
	}
	return "", fmt.Errorf("answered %s (%s), want %s", got, status.Convert(err).Message(), spec)
}

// deviation finds the recorded deviation of the driver under test that
// explains err as rpc's answer.
func (r *runner) deviation(rpc string, err error) (activities.Deviation, bool) {
	if err == nil {
		return activities.Deviation{}, false
	}
	st := status.Convert(err)
	return activities.FindDeviation(r.report.Driver, rpc, st.Code(), st.Message())
}

func describeDeviation(d activities.Deviation) string {
	return fmt.Sprintf("a recorded deviation of %s, %s (%s; %s)", d.Driver, d.ID, d.Versions, d.Source)
}

// means is the code the suite reads err as (rpc's answer): the spec's code
// of a recorded deviation of the driver, or err's own. Drover's calls read
// only the rows marked Classify so; the others excuse their code here.
func (r *runner) means(rpc string, err error) codes.Code {
	if d, ok := r.deviation(rpc, err); ok {
		return d.Means
	}
	return codeOf(err)
}

// retryable: the spec's table for rpc (activities.Classify, the table
// Drover's calls follow) retries the code err means, so a waiting check
// asks again.
func (r *runner) retryable(rpc string, err error) bool {
	return err != nil && activities.Classify(rpc, r.means(rpc, err)) == activities.Retry
}

// ok fails a check on any error.
func ok(what string, err error) error {
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	return fmt.Errorf("%s: %s: %s", what, st.Code(), st.Message())
}

// poll calls fn until it reports done, an error that Drover's calls would
// not retry for rpc, or the deadline.
func (r *runner) poll(ctx context.Context, rpc string, fn func() (done bool, err error)) error {
	for {
		done, err := fn()
		if done || r.cfg.DryRun {
			return err
		}
		if err != nil && !r.retryable(rpc, err) {
			return err
		}
		if werr := r.pause(ctx); werr != nil {
			if err != nil {
				return fmt.Errorf("%w (still so at the deadline)", err)
			}
			return werr
		}
	}
}

// pause waits one poll interval, or fails at the deadline.
func (r *runner) pause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return errors.New("not done by the deadline")
	case <-time.After(r.cfg.PollInterval):
		return nil
	}
}

// hook runs one of the configured hooks, or lists it in a dry run.
func (r *runner) hook(ctx context.Context, name, command string, env ...string) error {
	if r.cur != nil {
		r.cur.Calls = append(r.cur.Calls, fmt.Sprintf("hook %s: %s", name, command))
	}
	if r.cfg.DryRun {
		return nil
	}
	env = append(os.Environ(), env...)
	if r.cfg.Hooks.Run != nil {
		if err := r.cfg.Hooks.Run(ctx, command, env); err != nil {
			return fmt.Errorf("%s command: %w", name, err)
		}
		return nil
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if len(msg) > 400 {
			msg = "…" + msg[len(msg)-400:]
		}
		return fmt.Errorf("%s command %q: %v: %s", name, command, err, msg)
	}
	return nil
}
