package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	enums "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// planState is where Drover last knew a plan's primary to be, and how it
// knows. Primary is empty when nothing is recorded.
type planState struct {
	Primary string
	Basis   string
}

// recordedState reads a plan's recorded state: the plan's durable record
// (workflows.PlanRecord) when it names a primary; for plans from before
// the record, the last completed action (failover, reprotect, failback; a
// drill changes nothing), or else the primary its protection watches. An
// action that runs, or did not complete, leaves the state unknown: the
// operator is recovering from it and is not held back (and a second
// action is refused while one runs). This is the one reader of the
// recorded state that actions check their direction against.
func recordedState(ctx context.Context, c client.Client, p *plans.Plan) (planState, error) {
	name := p.Metadata.Name
	l, err := lastAction(ctx, c, name)
	if err != nil {
		return planState{}, err
	}
	if l.status == enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
		// An action runs: the record lags it (its changes reach the
		// record within about a second), and the action itself refuses
		// a second one, saying which runs.
		return planState{}, nil
	}
	rec, rerr := glanceRecord(ctx, c, name)
	if rerr == nil && rec != nil {
		// The record's last action says where it left the primary: a
		// failover, reprotect or failback on To, a drill (which changes
		// nothing) on the From it rehearsed leaving. Its primary field alone
		// may still carry a protection summary sent before the action ended.
		if a := rec.LastAction; a != nil {
			switch {
			case l.runID != "" && l.runID != a.RunID && l.status != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED:
				// A later action that did not complete (cancelled within
				// its first second, terminated) and never reached the record.
				return planState{}, nil
			case a.Outcome != "completed":
				return planState{}, nil
			case strings.HasPrefix(a.Action, "drill") && a.From != "":
				return planState{a.From, fmt.Sprintf("the plan's record: its last action, a %s, rehearsed leaving %s", a.Action, a.From)}, nil
			case a.To != "":
				return planState{a.To, fmt.Sprintf("the plan's record: its last action, a %s, completed on %s", a.Action, a.To)}, nil
			}
		}
		if rec.Primary != "" {
			return planState{rec.Primary, fmt.Sprintf("the plan's record, updated %s", rec.Updated.UTC().Format(time.RFC3339))}, nil
		}
	}
	done := l.status == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED
	switch {
	case l.typ == "Failover" && done:
		var in workflows.FailoverInput
		if err := l.read(ctx, c, &in, nil); err != nil {
			return planState{}, err
		}
		return planState{in.To, fmt.Sprintf("the last action, %s, failed over to %s", l, in.To)}, nil
	case l.typ == "Reprotect" && done:
		var in workflows.ReprotectInput
		if err := l.read(ctx, c, &in, nil); err != nil {
			return planState{}, err
		}
		return planState{in.To, fmt.Sprintf("the last action, %s, made %s the replica of %s", l, in.From, in.To)}, nil
	case l.typ == "Failback" && done:
		var in workflows.FailbackInput
		var res workflows.FailbackResult
		if err := l.read(ctx, c, &in, &res); err != nil {
			return planState{}, err
		}
		if res.RolledBack {
			return planState{in.From, fmt.Sprintf("the last action, %s, rolled back to %s", l, in.From)}, nil
		}
		return planState{in.To, fmt.Sprintf("the last action, %s, moved the plan to %s", l, in.To)}, nil
	case l.typ != "" && l.typ != "Drill":
		return planState{}, nil
	}
	if ps, err := glanceProtect(ctx, c, name); err == nil && ps.Primary != "" {
		return planState{ps.Primary, fmt.Sprintf("the protection of plan %q replicates from %s", name, ps.Primary)}, nil
	}
	return planState{}, nil
}

// checkDirection refuses (exit 2), unless override, an action that
// contradicts the recorded state: one that makes site to the primary
// when it already is (failover, failback, drill), or a reprotect that
// would demote and resync the recorded primary (from). Before a reprotect
// or failback it would refuse, it asks the storage (storageDenies): the
// storage is the truth, and a record it contradicts does not hold the
// operator back (the worker checks the storage again before it demotes
// anything).
func (a *app) checkDirection(ctx context.Context, c client.Client, file string, p *plans.Plan, action, from, to string, override bool) error {
	if action == "failback" {
		if err := a.checkRestored(ctx, c, p); err != nil {
			return err
		}
	}
	s, err := recordedState(ctx, c, p)
	if err != nil {
		return err
	}
	var wrong string
	switch {
	case s.Primary == "":
		return nil
	case action == "reprotect" && s.Primary == from:
		wrong = fmt.Sprintf("%s is the primary (%s); a reprotect would demote it with force and discard its writes", from, s.Basis)
	case action != "reprotect" && s.Primary == to:
		wrong = fmt.Sprintf("%s is already the primary (%s); a %s to it would act against the healthy site %s", to, s.Basis, action, from)
	default:
		return nil
	}
	if override {
		if !a.json() {
			fmt.Fprintf(a.stderr, "note: plan %q: %s; going on because of --override-state\n", p.Metadata.Name, wrong)
		}
		return nil
	}
	if action == "reprotect" || action == "failback" {
		if denied := a.storageDenies(ctx, c, file, p, s.Primary); denied != "" {
			if !a.json() {
				fmt.Fprintf(a.stderr, "note: plan %q: %s; but the storage says otherwise: %s. Going by the storage, which the worker checks again before it demotes anything\n",
					p.Metadata.Name, wrong, denied)
			}
			return nil
		}
	}
	return badInput("plan %q: %s. Nothing was done. If the recorded state is wrong and you mean it, pass --override-state", p.Metadata.Name, wrong)
}

// storageDenies asks the plan's storage, through the Verify workflow (the
// worker makes the calls), whether primary holds the primary copies the
// record says it holds, and returns what the storage says when it does
// not ("" when it agrees, or cannot tell).
func (a *app) storageDenies(ctx context.Context, c client.Client, file string, p *plans.Plan, primary string) string {
	o, err := a.origin(file, p)
	if err != nil {
		return ""
	}
	v, err := verifyRecord(ctx, c, p, &workflows.PlanRecord{Plan: p.Metadata.Name, Primary: primary, Fences: []workflows.FenceEntry{}}, o)
	if err != nil {
		return ""
	}
	for _, d := range v.Drift {
		if strings.HasPrefix(d, "the record names "+primary+" as primary, but its storage says") {
			return d
		}
	}
	return ""
}

// checkRestored refuses a failback of a plan whose record says it runs
// on volumes a failover to a point in time restored and no reprotect
// has protected yet: the failback would move the promoted replicas, not
// the restored volumes the workloads write to. The worker refuses it
// too; a reprotect first makes the restored volumes the protected ones.
func (a *app) checkRestored(ctx context.Context, c client.Client, p *plans.Plan) error {
	rec, err := glanceRecord(ctx, c, p.Metadata.Name)
	if err != nil || rec == nil || rec.Restored == nil {
		return nil
	}
	x := rec.Restored
	return badInput("plan %q runs on volumes restored from point %s at %s (a failover to a point in time): a failback would move the promoted replicas at %s, which hold what the failover went back from, not the restored volumes its workloads write to. Nothing was done. Reprotect first (drctl reprotect %s), which makes the restored volumes the protected ones, then fail back",
		p.Metadata.Name, x.Point, x.Site, x.Site, p.Metadata.Name)
}
