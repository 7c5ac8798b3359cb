package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	enums "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/workflows"
)

// Schedules: drills and test recoveries of a plan on a cadence, on
// Temporal Schedules. Each run starts workflows.Scheduled, which runs
// the drill or test under the plan's own id (see workflows/scheduled.go).

// scheduleIDPrefix starts the id of every schedule drctl makes.
const scheduleIDPrefix = "drover-schedule-"

// Memo fields of a schedule.
const (
	memoSchedPlan = "plan"
	memoSchedKind = "kind"
	memoSchedSite = "site"
	memoSchedBy   = "by"
)

func (a *app) scheduleCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Drills and test recoveries of a plan on a schedule: create, list, pause, unpause, trigger, delete",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return badInput("give a subcommand: drctl schedule create|list|pause|unpause|trigger|delete (see drctl schedule --help)")
		},
	}
	var kind, to, at, cron, tz, id string
	var every, jitter, testLimit time.Duration
	create := &cobra.Command{
		Use:   "create PLAN",
		Short: "Schedule a plan's drill (--to SITE) or test recovery (--kind test-recovery --at SITE): --cron or --every",
		Long: `Creates a Temporal Schedule that runs PLAN's drill of a failover to --to, or
(--kind test-recovery) its test recovery at --at, on a cron expression (--cron,
in --time-zone) or every interval (--every), each start delayed by up to
--jitter. A run that would overlap the schedule's previous one is skipped.

Schedules run signed plans only: the plan is sent with its signature (PLAN.sig,
or --sign-key), which the worker checks at each run; sign the plan again and
re-create the schedule before the signature expires. Each run is recorded as
started by the schedule and whoever created it, under the plan's own action id
(a test recovery: its test id), so that a plan busy with another action skips
the scheduled run, which then fails and says so. A scheduled test recovery
runs unattended: a step that fails for good fails it rather than wait for an
operator, and its workloads run on the copies for --test-time-limit at most,
then it cleans up.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (cron == "") == (every <= 0) {
				return badInput("give one of --cron EXPR or --every DURATION")
			}
			return a.scheduleCreate(cmd.Context(), args[0], scheduleSpec{kind: kind, to: to, at: at, cron: cron, tz: tz, id: id,
				every: every, jitter: jitter, testLimit: testLimit})
		},
	}
	create.Flags().StringVar(&kind, "kind", workflows.ScheduledDrill, "drill or test-recovery")
	create.Flags().StringVar(&to, "to", "", "a drill's target site (as drctl drill --to)")
	create.Flags().StringVar(&at, "at", "", "a test recovery's site (as drctl test-recovery --at)")
	create.Flags().StringVar(&cron, "cron", "", `a cron expression ("0 3 * * 1": Mondays at 03:00)`)
	create.Flags().DurationVar(&every, "every", 0, "run every interval (e.g. 168h)")
	create.Flags().StringVar(&tz, "time-zone", "UTC", "the time zone of --cron (an IANA name, e.g. Europe/Paris)")
	create.Flags().DurationVar(&jitter, "jitter", 0, "delay each start by a random time up to this")
	create.Flags().DurationVar(&testLimit, "test-time-limit", 10*time.Minute, "how long a scheduled test recovery's workloads run on the copies before it cleans up (at most the plan's testTimeLimit)")
	create.Flags().StringVar(&id, "id", "", "the schedule's id (default drover-schedule-PLAN-KIND)")

	list := &cobra.Command{
		Use:   "list",
		Short: "The schedules of drills and test recoveries: plan, kind, spec, paused, last and next run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.scheduleList(cmd.Context())
		},
	}
	var note string
	one := func(use, short string, do func(ctx context.Context, h client.ScheduleHandle) error) *cobra.Command {
		c := &cobra.Command{
			Use:   use + " SCHEDULE",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return a.scheduleDo(cmd.Context(), args[0], use, do)
			},
		}
		return c
	}
	pause := one("pause", "Pause a schedule: no run starts until unpause", func(ctx context.Context, h client.ScheduleHandle) error {
		return h.Pause(ctx, client.SchedulePauseOptions{Note: a.noteOf("paused", note)})
	})
	pause.Flags().StringVar(&note, "note", "", "why (kept on the schedule)")
	unpause := one("unpause", "Unpause a schedule", func(ctx context.Context, h client.ScheduleHandle) error {
		return h.Unpause(ctx, client.ScheduleUnpauseOptions{Note: a.noteOf("unpaused", note)})
	})
	unpause.Flags().StringVar(&note, "note", "", "why (kept on the schedule)")
	trigger := one("trigger", "Run a schedule's drill or test now (skipped while its previous run runs)", func(ctx context.Context, h client.ScheduleHandle) error {
		return h.Trigger(ctx, client.ScheduleTriggerOptions{Overlap: enums.SCHEDULE_OVERLAP_POLICY_SKIP})
	})
	del := one("delete", "Delete a schedule (its runs and their evidence stay)", func(ctx context.Context, h client.ScheduleHandle) error {
		return h.Delete(ctx)
	})
	cmd.AddCommand(create, list, pause, unpause, trigger, del)
	return cmd
}

// noteOf is a schedule's note: what was done, by whom, and why.
func (a *app) noteOf(what, why string) string {
	n := what + " by " + a.identity()
	if why != "" {
		n += ": " + why
	}
	return n
}

type scheduleSpec struct {
	kind, to, at, cron, tz, id string
	every, jitter, testLimit   time.Duration
}

// scheduleID is a schedule's id: the given one, or drover-schedule-PLAN-KIND.
func scheduleID(id, plan, kind string) string {
	if id != "" {
		return id
	}
	return scheduleIDPrefix + plan + "-" + kind
}

func (a *app) scheduleCreate(ctx context.Context, file string, s scheduleSpec) error {
	if s.jitter < 0 || s.every < 0 || s.testLimit < 0 {
		return badInput("--every, --jitter and --test-time-limit are positive durations")
	}
	if _, err := time.LoadLocation(s.tz); err != nil {
		return badInput("--time-zone %q: %v", s.tz, err)
	}
	in := workflows.ScheduledInput{Kind: s.kind, CreatedBy: a.identity()}
	var site string
	var c client.Client
	switch s.kind {
	case workflows.ScheduledDrill:
		if s.at != "" {
			return badInput("--at is for a test recovery; a drill goes --to a site")
		}
		p, from, to, cl, err := a.prepare(ctx, file, s.to)
		if err != nil {
			return err
		}
		c = cl
		d, err := a.drillInput(ctx, c, file, p, "failover", from, to, false)
		if err != nil {
			return err
		}
		in.Drill, site = &d, to
	case workflows.ScheduledTest:
		if s.to != "" {
			return badInput("--to is for a drill; a test recovery is --at a site")
		}
		p, err := loadPlan(file)
		if err != nil {
			return err
		}
		if s.at == "" || p.Site(s.at) == nil {
			return badInput("give the site to test the recovery at with --at (one of the plan's sites)")
		}
		o, err := a.origin(file, p)
		if err != nil {
			return err
		}
		in.Test, site = &workflows.TestRecoveryInput{Origin: o, Plan: p, At: s.at, TimeLimit: s.testLimit, Unattended: true}, s.at
		if c, err = a.dial(ctx); err != nil {
			return err
		}
	default:
		return badInput("--kind %q: want %s or %s", s.kind, workflows.ScheduledDrill, workflows.ScheduledTest)
	}
	var o workflows.Origin
	var plan string
	if in.Drill != nil {
		o, plan = in.Drill.Origin, in.Drill.Plan.Metadata.Name
	} else {
		o, plan = in.Test.Origin, in.Test.Plan.Metadata.Name
	}
	if o.Signature == nil {
		return badInput("schedules run signed plans only: sign %s (drctl plan sign %s --key KEY) or give --sign-key", file, file)
	}
	in.Schedule = scheduleID(s.id, plan, s.kind)
	spec := client.ScheduleSpec{Jitter: s.jitter, TimeZoneName: s.tz}
	if s.cron != "" {
		spec.CronExpressions = []string{s.cron}
	} else {
		spec.Intervals = []client.ScheduleIntervalSpec{{Every: s.every}}
	}
	_, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID:      in.Schedule,
		Spec:    spec,
		Overlap: enums.SCHEDULE_OVERLAP_POLICY_SKIP,
		Note:    a.noteOf("created", ""),
		Memo:    map[string]any{memoSchedPlan: plan, memoSchedKind: s.kind, memoSchedSite: site, memoSchedBy: in.CreatedBy},
		Action: &client.ScheduleWorkflowAction{
			ID:        in.Schedule,
			Workflow:  workflows.Scheduled,
			Args:      []any{in},
			TaskQueue: workflows.TaskQueue,
			Memo:      map[string]any{workflows.MemoBy: workflows.ScheduledBy(in.Schedule, in.CreatedBy)},
		},
	})
	if errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return failed("schedule %s exists already: drctl schedule delete %s first, or give --id", in.Schedule, in.Schedule)
	}
	if err != nil {
		var ia *serviceerror.InvalidArgument
		if errors.As(err, &ia) {
			return badInput("schedule %s: %v", in.Schedule, err)
		}
		return temporalError("create schedule "+in.Schedule, err)
	}
	if a.json() {
		writeJSON(a.stdout, map[string]string{"schedule": in.Schedule, "plan": plan, "kind": s.kind, "site": site, "createdBy": in.CreatedBy})
		return nil
	}
	fmt.Fprintf(a.stdout, "schedule %s created: the %s of %s at %s\n", in.Schedule, s.kind, plan, site)
	return nil
}

// scheduleRow is a line of drctl schedule list.
type scheduleRow struct {
	ID        string    `json:"id"`
	Plan      string    `json:"plan"`
	Kind      string    `json:"kind"`
	Site      string    `json:"site"`
	CreatedBy string    `json:"createdBy"`
	Spec      string    `json:"spec"`
	Paused    bool      `json:"paused"`
	Note      string    `json:"note,omitempty"`
	LastRun   time.Time `json:"lastRun,omitzero"`
	LastID    string    `json:"lastWorkflowId,omitempty"`
	Next      time.Time `json:"next,omitzero"`
}

func specText(s *client.ScheduleSpec) string {
	if s == nil {
		return ""
	}
	var parts []string
	for _, c := range s.CronExpressions {
		parts = append(parts, "cron "+c)
	}
	for _, i := range s.Intervals {
		parts = append(parts, "every "+i.Every.String())
	}
	if len(parts) == 0 && len(s.Calendars) > 0 {
		parts = append(parts, fmt.Sprintf("%d calendar(s)", len(s.Calendars)))
	}
	if s.TimeZoneName != "" && s.TimeZoneName != "UTC" {
		parts = append(parts, "in "+s.TimeZoneName)
	}
	if s.Jitter > 0 {
		parts = append(parts, "jitter "+s.Jitter.String())
	}
	return strings.Join(parts, ", ")
}

func (a *app) scheduleRows(ctx context.Context, c client.Client) ([]scheduleRow, error) {
	it, err := c.ScheduleClient().List(ctx, client.ScheduleListOptions{PageSize: 100})
	if err != nil {
		return nil, temporalError("list the schedules", err)
	}
	var rows []scheduleRow
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil, temporalError("list the schedules", err)
		}
		if e.WorkflowType.Name != "Scheduled" {
			continue
		}
		r := scheduleRow{ID: e.ID, Spec: specText(e.Spec), Paused: e.Paused, Note: e.Note}
		for k, v := range map[string]*string{memoSchedPlan: &r.Plan, memoSchedKind: &r.Kind, memoSchedSite: &r.Site, memoSchedBy: &r.CreatedBy} {
			if f := e.Memo.GetFields()[k]; f != nil {
				_ = converter.GetDefaultDataConverter().FromPayload(f, v)
			}
		}
		if n := len(e.RecentActions); n > 0 {
			r.LastRun = e.RecentActions[n-1].ActualTime
			if w := e.RecentActions[n-1].StartWorkflowResult; w != nil {
				r.LastID = w.WorkflowID
			}
		}
		if len(e.NextActionTimes) > 0 {
			r.Next = e.NextActionTimes[0]
		}
		if a.planFilter != "" && r.Plan != a.planFilter {
			continue
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(x, y scheduleRow) int { return strings.Compare(x.ID, y.ID) })
	return rows, nil
}

func (a *app) scheduleList(ctx context.Context) error {
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	rows, err := a.scheduleRows(ctx, c)
	if err != nil {
		return err
	}
	if a.json() {
		if rows == nil {
			rows = []scheduleRow{}
		}
		writeJSON(a.stdout, rows)
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULE\tPLAN\tKIND\tSITE\tSPEC\tPAUSED\tLAST RUN\tNEXT\tCREATED BY")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t%s\t%s\t%s\n", r.ID, r.Plan, r.Kind, r.Site, r.Spec, r.Paused, stamp(r.LastRun), stamp(r.Next), r.CreatedBy)
	}
	tw.Flush()
	if len(rows) == 0 {
		fmt.Fprintln(a.stdout, "no schedules (drctl schedule create makes one)")
	}
	return nil
}

func (a *app) scheduleDo(ctx context.Context, id, what string, do func(ctx context.Context, h client.ScheduleHandle) error) error {
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	err = do(ctx, c.ScheduleClient().GetHandle(ctx, id))
	if isNotFound(err) {
		return badInput("no schedule %s (drctl schedule list shows them)", id)
	}
	if err != nil {
		return temporalError(what+" schedule "+id, err)
	}
	if a.json() {
		writeJSON(a.stdout, map[string]string{"schedule": id, "done": what})
		return nil
	}
	fmt.Fprintf(a.stdout, "schedule %s: %s\n", id, what)
	return nil
}
