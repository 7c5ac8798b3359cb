package workflows

// Every step has an ID made of its kind and its subjects
// ("fence/east", "start/west/web", "promote/west/db"), and a display
// name ("fence east", "start web on west"). Code, decisions and tools
// go by the ID; the name is for people and may change between releases.
// All the names are written here, next to their IDs.

import (
	"fmt"
	"strings"
)

// StepKind is what a step does: the first part of its ID.
type StepKind string

// The kinds of step. A per-group step's kind is its operation's OpKind
// ("promote", "wait-sync", …), or "rollback-" and the OpKind when it
// undoes a failed failback.
const (
	KindPreflight     StepKind = "preflight"
	KindCheckRoles    StepKind = "check-roles"
	KindCheckDemoted  StepKind = "check-demoted"  // a failback's read-back of the roles its demotion left
	KindStopLost      StepKind = "stop-workloads" // a failover's best-effort stop of every workload of the lost site
	KindStop          StepKind = "stop"
	KindFence         StepKind = "fence"
	KindVerifyFence   StepKind = "verify-fence"
	KindUnfence       StepKind = "unfence"
	KindStart         StepKind = "start"
	KindApprove       StepKind = "approve"
	KindRecordState   StepKind = "record-state"
	KindRecordPrimary StepKind = "record-primary"
	// A failover's note that it runs without its plan's record, by the
	// operator's override (recordlater.go).
	KindWithoutRecord StepKind = "without-record"
	KindProtect       StepKind = "protect"
	// After a failover to a point in time: the reprotect's record of the
	// volumes that stand in for the plan's, and drctl release's steps.
	KindRecordReplaced StepKind = "record-replaced"
	KindRelease        StepKind = "release"
	// Where Nomad runs the workloads, the reprotect's check of the jobs
	// on the volumes that will stand in, and its register of the
	// restored volumes' copies with the returned site's Nomad.
	KindCheckStandIns StepKind = "check-stand-ins"
	KindRegister      StepKind = "register"
	// The checks of a drill.
	KindCheckStorage     StepKind = "check-storage"
	KindCheckSecrets     StepKind = "check-secrets"
	KindCheckFencing     StepKind = "check-fencing"
	KindCheckReplication StepKind = "check-replication"
	KindCheckWorkload    StepKind = "check-workload"
)

// Kind is the kind of the step, from its ID ("" for a step from before
// steps had IDs).
func (s *Step) Kind() StepKind {
	k, _, _ := strings.Cut(s.ID, "/")
	return StepKind(k)
}

// stepRef is a step's ID and display name.
type stepRef struct {
	id   string
	name string
}

func newRef(kind StepKind, name string, subjects ...string) stepRef {
	return stepRef{id: strings.Join(append([]string{string(kind)}, subjects...), "/"), name: name}
}

func preflightStep(site string) stepRef {
	return newRef(KindPreflight, "preflight "+site, site)
}

func checkRolesStep(site string) stepRef {
	return newRef(KindCheckRoles, "check roles on "+site, site)
}

func checkDemotedStep(site string) stepRef {
	return newRef(KindCheckDemoted, "check the demotion held on "+site, site)
}

func stopLostStep(site string) stepRef {
	return newRef(KindStopLost, "stop workloads on "+site, site)
}

func stopStep(site, workload string) stepRef {
	return newRef(KindStop, fmt.Sprintf("stop %s on %s", workload, site), site, workload)
}

func fenceStep(site string) stepRef { return newRef(KindFence, "fence "+site, site) }

func verifyFenceStep(site string) stepRef {
	return newRef(KindVerifyFence, "verify fence of "+site, site)
}

func unfenceStep(site string) stepRef { return newRef(KindUnfence, "unfence "+site, site) }

func startStep(site, workload string) stepRef {
	return newRef(KindStart, fmt.Sprintf("start %s on %s", workload, site), site, workload)
}

func approveStep(gate string) stepRef { return newRef(KindApprove, "approve "+gate, gate) }

func withoutRecordStep() stepRef {
	return newRef(KindWithoutRecord, "go on without the plan's record")
}

func recordStateStep() stepRef { return newRef(KindRecordState, "record the plan's state") }

func recordPrimaryStep(site string) stepRef {
	return newRef(KindRecordPrimary, "record "+site+" as primary", site)
}

func protectStep(site string) stepRef { return newRef(KindProtect, "protect from "+site, site) }

// stepKind is the kind of op's steps.
func (op GroupOp) stepKind() StepKind {
	if op.Rollback {
		return StepKind("rollback-" + string(op.Kind))
	}
	return StepKind(op.Kind)
}

// groupStep is op's step for one group.
func groupStep(op GroupOp, group string) stepRef {
	return newRef(op.stepKind(), fmt.Sprintf("%s %s on %s", op.verb(), group, op.Site), op.subjects(group)...)
}

// subjects are the subjects of op's step on group (or a batch's span).
func (op GroupOp) subjects(group string) []string {
	if op.Of != "" {
		return []string{op.Site, group, op.Of}
	}
	return []string{op.Site, group}
}

// batchStep is op's step for a batch of groups, named by its first and
// last group.
func batchStep(op GroupOp, batch []string) stepRef {
	if len(batch) == 1 {
		return newRef(op.stepKind(), fmt.Sprintf("%s %s on %s (a batch of 1)", op.verb(), batch[0], op.Site), op.subjects(batch[0])...)
	}
	return newRef(op.stepKind(), fmt.Sprintf("%s %s … %s on %s (%d groups)", op.verb(), batch[0], batch[len(batch)-1], op.Site, len(batch)),
		op.subjects(batch[0]+".."+batch[len(batch)-1])...)
}

// SkipMeans says what skipping s leaves undone, in the words every view
// shows (the confirmation of drctl resolve --skip, the step's Undone,
// the action's outcome).
func SkipMeans(s *Step) string {
	parts := strings.Split(s.ID, "/")
	site, what := "", ""
	if len(parts) > 1 {
		site = parts[1]
	}
	if len(parts) > 2 {
		what = parts[2]
	}
	switch strings.TrimPrefix(string(s.Kind()), "rollback-") {
	case string(OpPromote), string(OpFinalPromote):
		return fmt.Sprintf("the copies of %s on %s were not promoted: they may still be secondary, and no workload starts on them without --override", what, site)
	case string(OpDemote):
		return fmt.Sprintf("the copies of %s on %s were not demoted: they may still be primary", what, site)
	case string(OpResync):
		return fmt.Sprintf("the copies of %s on %s were not resynced: they may not follow the primary, and %s is not protected", what, site, what)
	case string(OpEnable):
		return fmt.Sprintf("replication of %s from %s was not enabled: %s is not protected", what, site, what)
	case string(OpDisable):
		return fmt.Sprintf("replication of %s on %s was not disabled", what, site)
	case string(OpWaitSync), string(OpCheck):
		return fmt.Sprintf("%s on %s was not seen in sync: the copies may not hold the newest writes", what, site)
	case string(KindFence), string(KindVerifyFence):
		return fmt.Sprintf("%s's clients may not be fenced off the storage: they may still write to copies the action promotes", site)
	case string(KindUnfence):
		return fmt.Sprintf("%s's clients may still be fenced off the storage", site)
	case string(KindPausePoints):
		return "protection's points were not paused: a point may be cut while the copies change roles"
	case string(KindStart):
		return fmt.Sprintf("%s was not started on %s", what, site)
	case string(KindStopLost):
		return fmt.Sprintf("the workloads of %s may still run there", site)
	case string(KindStop):
		return fmt.Sprintf("%s may still run on %s", what, site)
	}
	return s.Name + " was not done"
}

// Undone lists what the skipped steps of p left undone, one line each,
// in the order of the steps: an action with any ends incomplete.
func Undone(p *Progress) []string {
	var out []string
	for _, s := range p.Steps {
		if s.State == StateSkipped {
			u := s.Undone
			if u == "" {
				u = SkipMeans(s)
			}
			out = append(out, fmt.Sprintf("%s skipped: %s", s.Name, u))
		}
	}
	return out
}
