package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	enums "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/codec"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// A report is what an auditor asks of a DR action, drill or test
// recovery: the plan and its digest, who started and who approved, every
// step with its start, end, tries and note, the RTO and RPO, the fenced
// CIDRs and a timeline. drctl report writes it as Markdown (a Mermaid
// Gantt chart for the timeline), as one self-contained HTML file (the
// timeline an inline SVG, no external asset), or as JSON (-o json).

// Report is the data of a report.
type Report struct {
	WorkflowID string         `json:"workflowId"`
	RunID      string         `json:"runId"`
	Type       string         `json:"type"`
	Action     string         `json:"action"`
	Status     string         `json:"status"`
	Plans      []ReportPlan   `json:"plans"`
	StartedBy  string         `json:"startedBy,omitempty"`
	Trust      string         `json:"trust,omitempty"`
	Approvals  []ReportSigner `json:"approvals,omitempty"`
	Decisions  []ReportSigner `json:"decisions,omitempty"`
	Start      time.Time      `json:"start"`
	End        time.Time      `json:"end,omitzero"`
	// Took is how long the action took, as every view says it
	// (execution.Took): "" while it runs.
	Took  string       `json:"took,omitempty"`
	Steps []ReportStep `json:"steps"`
	// The outcome, as far as the action has one.
	RTO         time.Duration            `json:"rto,omitempty"`
	RPO         time.Duration            `json:"rpo,omitempty"`
	RPOKnown    bool                     `json:"rpoKnown"`
	Fenced      []string                 `json:"fenced,omitempty"`
	WorkloadRTO map[string]time.Duration `json:"workloadRTO,omitempty"`
	PlanResults []workflows.PlanOutcome  `json:"planResults,omitempty"`
	// LeftBehind are the plans a site action did not move: it ended
	// partial, and PlanResults say how to recover each.
	LeftBehind []string `json:"leftBehind,omitempty"`
	// Undone says what each skipped step left undone: the action ran
	// to its end incomplete.
	Undone []string `json:"undone,omitempty"`
	// Failures are the checks a drill found failing (it completes
	// whatever they find).
	Failures []string `json:"failures,omitempty"`
	// The plan's targets (a site action: none).
	RPOTarget time.Duration `json:"rpoTarget,omitempty"`
	RTOTarget time.Duration `json:"rtoTarget,omitempty"`
	// Drills is how often the plan says its tests must succeed.
	Drills    *plans.Drills `json:"drills,omitempty"`
	Error     string        `json:"error,omitempty"`
	Generated time.Time     `json:"generated"`
}

// ReportPlan is a plan the action ran, with the SHA-256 of its canonical
// form (what a signature covers) and who signed it.
type ReportPlan struct {
	Name     string    `json:"name"`
	Digest   string    `json:"digest"`
	SignedBy string    `json:"signedBy,omitempty"`
	SignedAt time.Time `json:"signedAt,omitzero"`
}

// ReportSigner is who opened a gate or decided on a paused step, and
// what they decided (retry, skip or abort).
type ReportSigner struct {
	Step     string    `json:"step"`
	By       string    `json:"by"`
	At       time.Time `json:"at,omitzero"`
	Decision string    `json:"decision,omitempty"`
}

// ReportStep is one step of the timeline.
type ReportStep struct {
	ID    string        `json:"id"`
	Name  string        `json:"name"`
	State string        `json:"state"`
	Start time.Time     `json:"start,omitzero"`
	End   time.Time     `json:"end,omitzero"`
	Took  time.Duration `json:"took,omitempty"`
	Tries int           `json:"tries"`
	Note  string        `json:"note,omitempty"`
}

func (a *app) reportCommand() *cobra.Command {
	var format, file, run string
	cmd := &cobra.Command{
		Use:   "report RUN",
		Short: "A report of an action, drill or test recovery: plan, people, steps, RTO, RPO, fences, timeline",
		Long: `Writes the report of RUN (a plan name or file, or a workflow id; its last
run, or --run): the plan and its digest, who started it and who approved,
every step with its start, end, tries and note, the RTO and RPO, the fenced
CIDRs and a timeline chart. --format md (Markdown, the timeline a Mermaid
chart) or html (one self-contained file, the timeline inline SVG); -o json
writes the data.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "md" && format != "html" {
				return badInput("--format %q: want md or html", format)
			}
			return a.report(cmd.Context(), runID(args[0]), run, format, file)
		},
	}
	cmd.Flags().StringVar(&format, "format", "md", "md or html (-o json writes the data instead)")
	cmd.Flags().StringVarP(&file, "file", "f", "", "write the report to this file (default: standard output)")
	cmd.Flags().StringVar(&run, "run", "", "the run id (default: the workflow's last run)")
	return cmd
}

func (a *app) report(ctx context.Context, id, run, format, file string) error {
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	r, err := buildReport(ctx, c, id, run)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	switch {
	case a.json():
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		err = enc.Encode(r)
	case format == "html":
		err = r.HTML(&buf)
	default:
		err = r.Markdown(&buf)
	}
	if err != nil {
		return err
	}
	if file == "" {
		_, err = a.stdout.Write(buf.Bytes())
		return err
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		return failed("write the report: %v", err)
	}
	fmt.Fprintf(a.stderr, "report of %s written to %s\n", id, file)
	return nil
}

// reportInput is what every action's input holds that a report names.
type reportInput struct {
	Plan      *plans.Plan          `json:"plan"`
	Plans     []workflows.SitePlan `json:"plans"`
	Signature *plans.Signature     `json:"signature"`
	By        string               `json:"by"`
}

// buildReport reads a run of id: its description, its input (the first
// event of its history), and its progress and result.
func buildReport(ctx context.Context, c client.Client, id, run string) (*Report, error) {
	d, err := c.DescribeWorkflowExecution(ctx, id, run)
	if isNotFound(err) {
		return nil, badInput("Temporal knows no run of %s; drctl list shows the actions it knows", id)
	}
	if err != nil {
		return nil, temporalError("describe "+id, err)
	}
	info := d.GetWorkflowExecutionInfo()
	run = info.GetExecution().GetRunId()
	x := executionOf(info)
	r := &Report{WorkflowID: id, RunID: run, Type: info.GetType().GetName(), Generated: time.Now().UTC(), Took: x.Took(),
		Status: strings.ToLower(strings.TrimPrefix(info.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_"))}

	it := c.GetWorkflowHistory(ctx, id, run, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return nil, failed("the history of %s is empty", id)
	}
	ev, err := it.Next()
	if err != nil {
		return nil, temporalError("read the history of "+id, err)
	}
	var in reportInput
	if err := codec.Converter().FromPayloads(ev.GetWorkflowExecutionStartedEventAttributes().GetInput(), &in); err != nil {
		return nil, failed("decode the input of %s: %v", id, err)
	}
	r.StartedBy = in.By
	if in.Plan != nil {
		r.Plans = append(r.Plans, reportPlanOf(in.Plan, in.Signature))
		in.Plan.ApplyDefaults()
		r.RPOTarget = in.Plan.Policy.RPOTarget.D()
		r.Drills = in.Plan.Policy.Drills
	}
	for _, sp := range in.Plans {
		r.Plans = append(r.Plans, reportPlanOf(sp.Plan, sp.Signature))
	}

	var res result
	var progress *workflows.Progress
	if info.GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		var raw json.RawMessage
		if err := c.GetWorkflow(ctx, id, run).Get(ctx, &raw); err != nil {
			return nil, temporalError("read the result of "+id, err)
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, failed("decode the result of %s: %v", id, err)
		}
		progress = &res.Progress
	} else {
		if info.GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			if err := c.GetWorkflow(ctx, id, run).Get(ctx, nil); err != nil {
				r.Error = workflows.ErrorText(err)
			}
		}
		if progress, err = queryProgress(ctx, c, id, run); err != nil {
			return nil, failed("%s has no result to read and did not answer for its progress (is a worker running?): %v", id, err)
		}
	}
	// Started and ended as Temporal started and closed the run, the
	// instants its Took is from.
	r.Action, r.Trust, r.Start, r.End = progress.Action, progress.Trust, x.Start, x.Close
	if r.StartedBy == "" {
		r.StartedBy = progress.By
	}
	for _, s := range progress.Steps {
		note := s.Output
		if note == "" {
			note = s.LastError
		}
		if note == "" {
			note = s.Note
		}
		// Tries as status and the dashboard count them: every call of
		// the step's work, retries within a run included.
		rs := ReportStep{ID: s.ID, Name: s.Name, State: s.State, Start: s.Start, End: s.End, Tries: tries(s), Note: note}
		if !s.Start.IsZero() && !s.End.IsZero() {
			rs.Took = s.End.Sub(s.Start)
		}
		r.Steps = append(r.Steps, rs)
		if s.By != "" || s.Decided != "" {
			who := ReportSigner{Step: s.Name, By: s.By, At: s.End}
			if s.Kind() == workflows.KindApprove {
				r.Approvals = append(r.Approvals, who)
			} else {
				who.Decision = s.Decided
				if !s.DecidedAt.IsZero() {
					who.At = s.DecidedAt
				}
				r.Decisions = append(r.Decisions, who)
			}
		}
	}
	r.RTO, r.RPO, r.RPOKnown, r.Fenced, r.WorkloadRTO, r.PlanResults = res.RTO, res.RPO, res.RPOKnown, res.Fenced, res.WorkloadRTO, res.Plans
	if r.LeftBehind = res.LeftBehind; len(r.LeftBehind) > 0 && r.Status == "completed" {
		r.Status = workflows.StatePartial
	}
	r.Undone = workflows.Undone(&res.Progress)
	r.Failures = res.Failures
	r.Status = actionState(r.Status, progress)
	return r, nil
}

func reportPlanOf(p *plans.Plan, sig *plans.Signature) ReportPlan {
	rp := ReportPlan{}
	if p == nil {
		return rp
	}
	rp.Name = p.Metadata.Name
	if b, err := plans.CanonicalJSON(p); err == nil {
		sum := sha256.Sum256(b)
		rp.Digest = "sha256:" + hex.EncodeToString(sum[:])
	}
	if sig != nil {
		rp.SignedBy, rp.SignedAt = sig.KeyID(), sig.SignedAt
	}
	return rp
}

// dur prints a duration rounded for people.
func dur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(10 * time.Millisecond).String()
	}
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// mdCell makes text fit a Markdown table cell.
func mdCell(s string) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "\n", " ")
	s = strings.ReplaceAll(s, "|", `\|`)
	if len(s) > 200 {
		s = s[:197] + "…"
	}
	return s
}

// Markdown writes the report as Markdown, the timeline as a Mermaid
// Gantt chart.
func (r *Report) Markdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: %s\n\n", titleCase(r.Action), strings.Join(r.planNames(), ", "))
	fmt.Fprintf(&b, "| | |\n|---|---|\n")
	for _, kv := range r.facts() {
		fmt.Fprintf(&b, "| %s | %s |\n", kv[0], mdCell(kv[1]))
	}
	fmt.Fprintf(&b, "\n## Plans\n\n| Plan | Digest | Signed by | Signed at |\n|---|---|---|---|\n")
	for _, p := range r.Plans {
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s |\n", mdCell(p.Name), p.Digest, p.SignedBy, stamp(p.SignedAt))
	}
	if len(r.PlanResults) > 0 {
		fmt.Fprintf(&b, "\n## Plans' outcomes\n\n| Plan | Tier | State | RTO | RPO | Busy | Error | To recover |\n|---|---|---|---|---|---|---|---|\n")
		for _, p := range r.PlanResults {
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s |\n", mdCell(p.Plan), p.Tier, p.State, outcomeRTO(p), outcomeRPO(p),
				mdCell(busyText(p)), mdCell(p.Error), mdCell(p.Recover))
		}
	}
	fmt.Fprintf(&b, "\n## Steps\n\n| Step | State | Start | End | Took | Tries | Note |\n|---|---|---|---|---|---|---|\n")
	for _, s := range r.Steps {
		took := ""
		if s.Took > 0 || !s.End.IsZero() {
			took = dur(s.Took)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d | %s |\n", mdCell(s.Name), s.State, stamp(s.Start), stamp(s.End), took, s.Tries, mdCell(s.Note))
	}
	fmt.Fprintf(&b, "\n## Timeline\n\n```mermaid\ngantt\n    dateFormat x\n    axisFormat %%H:%%M:%%S\n")
	for _, s := range r.Steps {
		if s.Start.IsZero() {
			continue
		}
		end := s.End
		if end.IsZero() || !end.After(s.Start) {
			end = s.Start.Add(time.Millisecond)
		}
		tag := ""
		switch s.State {
		case workflows.StateDone:
			tag = "done, "
		case workflows.StateFailed, workflows.StatePaused, workflows.StateAborted:
			tag = "crit, "
		case workflows.StateRunning, workflows.StateWaiting:
			tag = "active, "
		}
		name := strings.NewReplacer(":", " ", "#", " ", ";", " ").Replace(s.Name)
		fmt.Fprintf(&b, "    %s : %s%d, %d\n", name, tag, s.Start.UnixMilli(), end.UnixMilli())
	}
	fmt.Fprintf(&b, "```\n\n_Generated %s by drctl report._\n", stamp(r.Generated))
	_, err := io.WriteString(w, b.String())
	return err
}

func titleCase(s string) string {
	if s == "" {
		return "Action"
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func (r *Report) planNames() []string {
	var out []string
	for _, p := range r.Plans {
		out = append(out, p.Name)
	}
	return out
}

// busyText says when a site action first found the plan busy, and with
// what: "drill, from try 1 at 2026-…".
func busyText(o workflows.PlanOutcome) string {
	if o.FirstBusy.IsZero() {
		return ""
	}
	what := o.Busy
	if what == "" {
		what = "an action"
	}
	return fmt.Sprintf("running %s, first found at try %d (%s)", what, o.FirstBusyTry, stamp(o.FirstBusy))
}

// rpoFact is a failover's RPO as drctl watch's summary and the report
// say it: an estimate (the time from the last sync protection had
// recorded to the action's start: writes after it may be lost), or
// unknown when protection had recorded none.
func rpoFact(d time.Duration, known bool) string {
	if !known {
		return "unknown (protection had recorded no sync)"
	}
	return "estimate " + dur(d)
}

// rpoText is an RPO in a table's cell (a site action's plans).
func rpoText(d time.Duration, known bool) string {
	if !known {
		return "unknown"
	}
	return dur(d)
}

// facts are the report's headline rows.
func (r *Report) facts() [][2]string {
	out := [][2]string{
		{"Workflow", r.WorkflowID + " (run " + r.RunID + ")"},
		{"Status", r.Status},
		{"Started", stamp(r.Start)},
		{"Ended", stamp(r.End)},
		{"Started by", r.StartedBy},
		{"Trust", r.Trust},
	}
	if r.Took != "" {
		out = append(out, [2]string{"Took", r.Took})
	}
	for _, a := range r.Approvals {
		out = append(out, [2]string{"Approved", fmt.Sprintf("%s by %s at %s", a.Step, a.By, stamp(a.At))})
	}
	for _, d := range r.Decisions {
		what := d.Step
		if d.Decision != "" {
			what = d.Decision + " of " + d.Step
		}
		by := d.By
		if by == "" {
			by = "(not recorded)"
		}
		out = append(out, [2]string{"Decided", fmt.Sprintf("%s by %s at %s", what, by, stamp(d.At))})
	}
	for _, u := range r.Undone {
		out = append(out, [2]string{"Undone", u})
	}
	if len(r.LeftBehind) > 0 {
		out = append(out, [2]string{"Left behind", fmt.Sprintf("%d of %d plan(s): %s (see each one's command to recover it below)",
			len(r.LeftBehind), len(r.PlanResults), strings.Join(r.LeftBehind, ", "))})
		if r.RTO > 0 {
			out = append(out, [2]string{"RTO of the plans that moved", dur(r.RTO)})
		}
	} else if r.RTO > 0 {
		out = append(out, [2]string{"RTO", dur(r.RTO)})
	}
	if r.RTO > 0 || r.RPOKnown {
		out = append(out, [2]string{"RPO", rpoFact(r.RPO, r.RPOKnown)})
	}
	if len(r.Fenced) > 0 {
		out = append(out, [2]string{"Fenced CIDRs", strings.Join(r.Fenced, ", ")})
	}
	for _, w := range slices.Sorted(mapKeys(r.WorkloadRTO)) {
		out = append(out, [2]string{"Test RTO of " + w, dur(r.WorkloadRTO[w])})
	}
	if r.Error != "" {
		out = append(out, [2]string{"Error", r.Error})
	}
	return out
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

//go:embed templates/report.html
var reportHTML string

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"stamp": stamp, "dur": dur, "title": titleCase, "join": strings.Join,
	"rto": outcomeRTO, "rpo": outcomeRPO, "busy": busyText,
}).Parse(reportHTML))

// labelRunes is how much of a step's name the timeline's label column
// (300 px at 11 px type) holds. A longer name keeps its start and its
// end, cut in the middle: steps differ at the start ("fence east …",
// "verify the fence of east …") or at the end (the storage address of
// each fence), never only in the middle of a long name, and a label cut
// at one side only (as the column's edge did) shows two of them as the
// same text. The label's and the bar's tooltips have the whole name.
const labelRunes = 44

func fitLabel(name string) string {
	r := []rune(name)
	if len(r) <= labelRunes {
		return name
	}
	head := labelRunes / 2
	tail := labelRunes - head - 1
	return string(r[:head]) + "…" + string(r[len(r)-tail:])
}

// bar is one step of the SVG timeline: Label as shown, Name whole.
type bar struct {
	Y, X, W   float64
	Label     string
	Name      string
	State     string
	Took      string
	TextRight bool
}

// timeline lays the steps out for the SVG chart: one row each, x in
// pixels from the action's start over width.
func (r *Report) timeline(width float64) (bars []bar, ticks []bar, height float64) {
	start, end := r.Start, r.End
	for _, s := range r.Steps {
		if !s.End.IsZero() && s.End.After(end) {
			end = s.End
		}
	}
	if end.IsZero() || !end.After(start) {
		end = start.Add(time.Second)
	}
	span := float64(end.Sub(start))
	x := func(t time.Time) float64 { return width * float64(t.Sub(start)) / span }
	for i, s := range r.Steps {
		b := bar{Y: float64(i) * 22, Label: fitLabel(s.Name), Name: s.Name, State: s.State}
		if !s.Start.IsZero() {
			stop := s.End
			if stop.IsZero() {
				stop = end
			}
			b.X, b.W = x(s.Start), max(x(stop)-x(s.Start), 2)
			b.Took = dur(stop.Sub(s.Start))
		}
		b.TextRight = b.X < width/2
		bars = append(bars, b)
	}
	for i := 0; i <= 4; i++ {
		at := start.Add(time.Duration(span * float64(i) / 4))
		ticks = append(ticks, bar{X: x(at), Label: dur(at.Sub(start))})
	}
	return bars, ticks, float64(len(r.Steps))*22 + 30
}

// HTML writes the report as one self-contained HTML page.
func (r *Report) HTML(w io.Writer) error {
	bars, ticks, height := r.timeline(760)
	return reportTemplate.Execute(w, map[string]any{"R": r, "Facts": r.facts(), "Bars": bars, "Ticks": ticks, "Height": height, "Names": r.planNames()})
}
