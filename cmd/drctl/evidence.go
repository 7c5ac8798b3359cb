package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/evidence"
	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/plans"
)

// Evidence: the reports of drills, test recoveries and failovers kept
// where Temporal's retention does not reach, sealed so that an auditor
// can check them (see internal/evidence and docs/guides/evidence.md).

// evidenceTypes are the workflow types whose runs are evidence.
var evidenceTypes = []string{names.Drill, names.TestRecovery, names.Failover}

// evidenceActions names each type as the evidence says it.
var evidenceActions = map[string]string{names.Drill: "drill", names.TestRecovery: "test recovery", names.Failover: "failover"}

func (a *app) evidenceCommand() *cobra.Command {
	var dir, since, trust, export string
	var verify bool
	cmd := &cobra.Command{
		Use:   "evidence PLAN",
		Short: "The stored evidence of a plan's drills, test recoveries and failovers: outcome, RTO, RPO, verdict; verify, export",
		Long: `Lists the evidence stored for PLAN (a name or plan file) in --dir: each run's
action, start, who started it, outcome, RTO, RPO and the verdict against the
plan's targets (met, missed, failed). With Temporal reachable, a run Temporal
still knows that has no evidence stored is listed as NOT STORED.

--verify checks each entry's seal against the keys of --trust (PEM public
keys) and the digest of every file of its report: a changed, missing or added
file, or a record changed after it was stored, is named and the command exits 1.
--export FILE writes the listed entries into one gzipped tar archive.
drctl evidence collect stores the evidence.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			from, err := sinceArg(since)
			if err != nil {
				return err
			}
			if dir == "" {
				return badInput("--dir: the evidence store (or DROVER_EVIDENCE_DIR)")
			}
			var keys []ed25519.PublicKey
			if verify {
				if trust == "" {
					return badInput("--verify needs --trust FILE: the public key(s) evidence is sealed with (or DROVER_EVIDENCE_TRUST)")
				}
				if keys, err = plans.ReadPublicKeys(trust); err != nil {
					return badInput("--trust: %v", err)
				}
			}
			return a.evidence(cmd.Context(), planName(args[0]), evidence.Dir{Root: dir}, from, keys, verify, export)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", os.Getenv("DROVER_EVIDENCE_DIR"), "the evidence store: a directory (default DROVER_EVIDENCE_DIR)")
	cmd.Flags().StringVar(&since, "since", "", "only runs started on or after this date (2026-01-01) or instant (RFC 3339)")
	cmd.Flags().BoolVar(&verify, "verify", false, "verify each entry's seal and files; exit 1 if any is not as stored")
	cmd.Flags().StringVar(&trust, "trust", os.Getenv("DROVER_EVIDENCE_TRUST"), "PEM public key(s) evidence is sealed with, for --verify (default DROVER_EVIDENCE_TRUST)")
	cmd.Flags().StringVar(&export, "export", "", "write the listed entries into this archive (.tar.gz)")

	var key, cdir, metrics, planDir string
	var every time.Duration
	collect := &cobra.Command{
		Use:   "collect",
		Short: "Store the evidence of every closed drill, test recovery and failover not stored yet",
		Long: `Reads the runs of drills, test recoveries and failovers that Temporal has
closed since --since (default: 30 days ago) and stores each one not stored yet
in --dir: its report as JSON, Markdown and HTML, and a record of plan, action,
who, when, outcome, RTO, RPO, the plan's targets and a verdict, sealed with the
ed25519 key --key. A run whose evidence cannot be stored is named on standard
error, and the command exits 1 (with --every it goes on and tries again at
the next round). With --every it runs until stopped, a round each interval:
run it beside the worker, well within the namespace's retention.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			from, err := sinceArg(since)
			if err != nil {
				return err
			}
			if since == "" {
				from = time.Now().AddDate(0, 0, -30)
			}
			if cdir == "" {
				return badInput("--dir: the evidence store (or DROVER_EVIDENCE_DIR)")
			}
			if key == "" {
				return badInput("--key: the ed25519 key (PEM) that seals the evidence (or DROVER_EVIDENCE_KEY)")
			}
			k, err := plans.ReadPrivateKey(key)
			if err != nil {
				return badInput("--key: %v", err)
			}
			col := &collector{store: evidence.Dir{Root: cdir}, key: k, since: from, plans: planDir}
			if metrics != "" {
				if every <= 0 {
					return badInput("--metrics serves while collect runs: give --every too")
				}
				if err := col.serve(metrics, a.stderr); err != nil {
					return failed("--metrics %s: %v", metrics, err)
				}
			}
			return a.collect(cmd.Context(), col, every)
		},
	}
	collect.Flags().StringVar(&cdir, "dir", os.Getenv("DROVER_EVIDENCE_DIR"), "the evidence store: a directory (default DROVER_EVIDENCE_DIR)")
	collect.Flags().StringVar(&key, "key", os.Getenv("DROVER_EVIDENCE_KEY"), "the ed25519 private key (PEM) that seals the evidence (default DROVER_EVIDENCE_KEY; drctl plan keygen makes one)")
	collect.Flags().StringVar(&since, "since", "", "runs started on or after this date or instant (default: 30 days ago)")
	collect.Flags().DurationVar(&every, "every", 0, "run until stopped, a round each interval (0: one round)")
	collect.Flags().StringVar(&metrics, "metrics", "", "serve Prometheus metrics of each plan's tests on this address (/metrics): last success, overdue, last failed, runs not stored")
	collect.Flags().StringVar(&planDir, "plans", "", "a directory of plan files: their policy.drills count a test never run as overdue")
	cmd.AddCommand(collect)
	return cmd
}

// sinceArg reads a date (2026-01-01, UTC) or an RFC 3339 instant; "" is
// no bound.
func sinceArg(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, badInput("--since %q: want a date (2026-01-01) or an RFC 3339 instant", s)
}

// evidenceRow is a line of drctl evidence.
type evidenceRow struct {
	evidence.Record
	Path string `json:"path,omitempty"`
	// Verified is --verify's word: "ok" or what is wrong.
	Verified string `json:"verified,omitempty"`
}

func (a *app) evidence(ctx context.Context, plan string, store evidence.Dir, since time.Time, trust []ed25519.PublicKey, verify bool, export string) error {
	entries, err := store.List(plan, since)
	if err != nil {
		return failed("%v", err)
	}
	var rows []evidenceRow
	bad := 0
	for _, e := range entries {
		row := evidenceRow{Record: e.Record, Path: e.Path}
		if verify {
			row.Verified = "ok"
			if err := evidence.Verify(e.Path, trust); err != nil {
				row.Verified, bad = err.Error(), bad+1
			}
		}
		rows = append(rows, row)
	}
	// Runs Temporal still knows that have no evidence: said, not hidden.
	if missing, err := a.unstored(ctx, store, plan, since); err != nil {
		fmt.Fprintf(a.stderr, "drctl: note: runs not compared with Temporal's: %v\n", err)
	} else {
		rows = append(rows, missing...)
	}
	if export != "" {
		var buf bytes.Buffer
		if err := evidence.Export(&buf, entries); err != nil {
			return failed("export: %v", err)
		}
		if err := os.WriteFile(export, buf.Bytes(), 0o644); err != nil {
			return failed("export: %v", err)
		}
		fmt.Fprintf(a.stderr, "%d entr(ies) of %s exported to %s\n", len(entries), plan, export)
	}
	if a.json() {
		if rows == nil {
			rows = []evidenceRow{}
		}
		writeJSON(a.stdout, rows)
	} else {
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		head := "STARTED\tACTION\tBY\tOUTCOME\tRTO\tRPO\tVERDICT"
		if verify {
			head += "\tVERIFIED"
		}
		fmt.Fprintln(tw, head)
		for _, r := range rows {
			rto, rpo := "-", "-"
			if r.RTO > 0 {
				rto = dur(r.RTO)
			}
			if r.RPOKnown {
				rpo = dur(r.RPO)
			}
			line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", stamp(r.Start), r.Action, r.StartedBy, r.Outcome, rto, rpo, r.Verdict)
			if verify {
				line += "\t" + r.Verified
			}
			fmt.Fprintln(tw, line)
		}
		tw.Flush()
		if len(rows) == 0 {
			fmt.Fprintf(a.stdout, "no evidence of %s in %s\n", plan, store.Root)
		}
		renderTests(a.stdout, testsOf(store, plan, nil), time.Now())
	}
	if bad > 0 {
		return failed("%d of %d entr(ies) of %s are not as they were stored", bad, len(entries), plan)
	}
	return nil
}

// notStored is the verdict of a run Temporal knows whose evidence is not
// in the store.
const notStored = "NOT STORED: no evidence of this run in the store"

// unstored lists the closed runs of plan since that Temporal knows and
// the store lacks. Without a reachable Temporal it says so.
func (a *app) unstored(ctx context.Context, store evidence.Dir, plan string, since time.Time) ([]evidenceRow, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := a.dial(dctx)
	if err != nil {
		return nil, err
	}
	runs, err := closedRuns(dctx, c, plan, since)
	if err != nil {
		return nil, err
	}
	var out []evidenceRow
	for _, x := range runs {
		if store.Has(x.Plan, x.RunID) {
			continue
		}
		out = append(out, evidenceRow{Record: evidence.Record{Plan: x.Plan, Action: evidenceActions[x.Type], WorkflowID: x.WorkflowID, RunID: x.RunID,
			Outcome: x.Status, StartedBy: x.By, Start: x.Start, End: x.Close, Verdict: notStored}})
	}
	return out, nil
}

// closedRuns are the closed runs of evidence types started since, of
// plan ("" for every plan), oldest first.
func closedRuns(ctx context.Context, c client.Client, plan string, since time.Time) ([]execution, error) {
	q := "WorkflowType IN ('" + strings.Join(evidenceTypes, "','") + "') AND ExecutionStatus != 'Running' AND StartTime >= '" +
		since.UTC().Format(time.RFC3339Nano) + "'"
	if plan != "" {
		q = names.AttrPlan + " = '" + strings.ReplaceAll(plan, "'", "") + "' AND " + q
	}
	var out []execution
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, PageSize: 100, NextPageToken: token})
		if err != nil {
			return nil, temporalError("list the closed runs", err)
		}
		for _, e := range resp.GetExecutions() {
			out = append(out, executionOf(e))
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// collector is drctl evidence collect's state: the store, its key,
// and what the last round found, for its metrics.
type collector struct {
	store evidence.Dir
	key   ed25519.PrivateKey
	since time.Time
	plans string // plan files' directory, for their policy.drills

	mu        sync.Mutex
	health    []evidence.Health
	notStored int
}

// serve serves the collector's metrics on addr until the process ends.
func (col *collector) serve(addr string, log io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		col.mu.Lock()
		hs, n := col.health, col.notStored
		col.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_ = evidence.WriteMetrics(w, hs, n)
	})
	fmt.Fprintf(log, "metrics on http://%s/metrics\n", ln.Addr())
	go func() { _ = http.Serve(ln, mux) }()
	return nil
}

// collect stores the evidence of each closed run not stored yet: one
// round, or one each interval until ctx ends.
func (a *app) collect(ctx context.Context, col *collector, every time.Duration) error {
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	for {
		n, err := a.collectRound(ctx, c, col)
		hs, herr := col.healthNow(time.Now())
		if herr != nil {
			fmt.Fprintf(a.stderr, "drctl: %v\n", herr)
		}
		col.mu.Lock()
		col.health, col.notStored = hs, n
		col.mu.Unlock()
		if every <= 0 {
			return err
		}
		if err != nil {
			fmt.Fprintf(a.stderr, "drctl: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

// healthNow is where every plan's tests stand: the plans of the store,
// and those of the plan files (their policy.drills).
func (col *collector) healthNow(now time.Time) ([]evidence.Health, error) {
	every := map[string]map[string]time.Duration{}
	var errs []string
	if col.plans != "" {
		files, _ := filepath.Glob(filepath.Join(col.plans, "*.yaml"))
		yml, _ := filepath.Glob(filepath.Join(col.plans, "*.yml"))
		for _, f := range append(files, yml...) {
			p, err := plans.Load(f)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			if d := p.Policy.Drills; d != nil {
				every[p.Metadata.Name] = map[string]time.Duration{"drill": d.Every("drill"), "test recovery": d.Every("test recovery")}
			}
		}
	}
	names, err := col.store.Plans()
	if err != nil {
		errs = append(errs, err.Error())
	}
	for n := range every {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var out []evidence.Health
	for _, n := range names {
		entries, err := col.store.List(n, time.Time{})
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		out = append(out, evidence.HealthOf(n, entries, every[n], now)...)
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("the tests' health: %s", strings.Join(errs, "; "))
	}
	return out, nil
}

// collectRound stores what is not stored yet and returns how many runs
// it could not store.
func (a *app) collectRound(ctx context.Context, c client.Client, col *collector) (int, error) {
	runs, err := closedRuns(ctx, c, "", col.since)
	if err != nil {
		return 0, err
	}
	var lost []string
	for _, x := range runs {
		if col.store.Has(x.Plan, x.RunID) {
			continue
		}
		path, err := a.storeRun(ctx, c, col.store, col.key, x)
		if err != nil {
			fmt.Fprintf(a.stderr, "drctl: NOT STORED: the evidence of the %s of %s (run %s): %v\n", evidenceActions[x.Type], x.Plan, x.RunID, err)
			lost = append(lost, x.RunID)
			continue
		}
		fmt.Fprintf(a.stderr, "stored the evidence of the %s of %s (run %s) in %s\n", evidenceActions[x.Type], x.Plan, x.RunID, path)
	}
	if len(lost) > 0 {
		return len(lost), failed("the evidence of %d run(s) could not be stored: %s", len(lost), strings.Join(lost, ", "))
	}
	return 0, nil
}

// storeRun builds the report of one run and stores it as evidence.
func (a *app) storeRun(ctx context.Context, c client.Client, store evidence.Dir, key ed25519.PrivateKey, x execution) (string, error) {
	r, err := buildReport(ctx, c, x.WorkflowID, x.RunID)
	if err != nil {
		return "", err
	}
	files := map[string][]byte{}
	var js, md, html bytes.Buffer
	enc := json.NewEncoder(&js)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return "", err
	}
	if err := r.Markdown(&md); err != nil {
		return "", err
	}
	if err := r.HTML(&html); err != nil {
		return "", err
	}
	files["report.json"], files["report.md"], files["report.html"] = js.Bytes(), md.Bytes(), html.Bytes()
	rec := evidence.Record{Plan: x.Plan, Action: evidenceActions[x.Type], WorkflowID: x.WorkflowID, RunID: x.RunID, Outcome: r.Status,
		StartedBy: r.StartedBy, Start: r.Start, End: r.End, RTO: r.RTO, RPO: r.RPO, RPOKnown: r.RPOKnown,
		RTOTarget: r.RTOTarget, RPOTarget: r.RPOTarget, Error: r.Error, Every: r.Drills.Every(evidenceActions[x.Type])}
	if len(r.Failures) > 0 {
		// A drill runs to its end whatever its checks find: a check
		// that failed fails the drill's evidence.
		rec.Outcome, rec.Error = "failed", fmt.Sprintf("%d check(s) failed: %s", len(r.Failures), strings.Join(r.Failures, "; "))
	}
	e, err := store.Put(rec, files, key, time.Now())
	if err != nil {
		return "", err
	}
	return e.Path, nil
}

// testsOf is where plan's tests stand, from the store: against the
// plan file's policy.drills when status was given the file, else the
// newest records' own.
func testsOf(store evidence.Dir, plan string, p *plans.Plan) []evidence.Health {
	entries, err := store.List(plan, time.Time{})
	if err != nil {
		return nil
	}
	var every map[string]time.Duration
	if p != nil && p.Policy.Drills != nil {
		every = map[string]time.Duration{}
		for _, k := range evidence.Kinds {
			every[k] = p.Policy.Drills.Every(k)
		}
	}
	return evidence.HealthOf(plan, entries, every, time.Now())
}

// renderTests writes the tests' lines of drctl status and drctl
// evidence: the last run and its verdict, the last success, and when
// the next success is due (OVERDUE past it).
func renderTests(w io.Writer, hs []evidence.Health, now time.Time) {
	if len(hs) == 0 {
		return
	}
	fmt.Fprintf(w, "\ntests (from the evidence store):\n")
	for _, h := range hs {
		line := "  " + h.Kind + ": "
		if h.LastRun.IsZero() {
			line += "never run"
		} else {
			line += "last run " + h.LastRun.Local().Format(time.DateTime) + ", " + shortVerdict(h.LastVerdict)
			if h.LastVerdict != evidence.Met {
				if h.LastSuccess.IsZero() {
					line += "; no success on record"
				} else {
					line += "; last success " + h.LastSuccess.Local().Format(time.DateTime)
				}
			}
		}
		switch {
		case h.Every == 0:
		case h.Overdue && h.Due.IsZero():
			line += fmt.Sprintf("; OVERDUE (policy.drills: every %s)", h.Every)
		case h.Overdue:
			line += fmt.Sprintf("; OVERDUE since %s (every %s)", h.Due.Local().Format(time.DateTime), h.Every)
		default:
			line += fmt.Sprintf("; next due by %s (every %s)", h.Due.Local().Format(time.DateTime), h.Every)
		}
		fmt.Fprintln(w, line)
	}
}

// shortVerdict is a verdict on one short line (drctl evidence has it
// whole).
func shortVerdict(v string) string {
	v, _, _ = strings.Cut(v, "\n")
	if r := []rune(v); len(r) > 100 {
		v = string(r[:99]) + "…"
	}
	return v
}
