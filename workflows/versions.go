package workflows

import (
	"maps"

	"go.temporal.io/sdk/workflow"
)

// changeGeneration marks runs that take every change of generation1 at
// the version given there from one marker: where each change had a
// marker of its own (workflow.GetVersion records a marker and upserts
// the TemporalChangeVersion search attribute the first time a run asks
// for a change), a failover recorded some 14 of each, every one a
// command the server handles before the action completes.
//
// Runs recorded before it ask for each change on its own, as before: in
// their replay the generation is DefaultVersion. The generations are
// frozen: a later change goes into a new generation that holds every
// change before it.
const changeGeneration = "generation"

// generation1 is each change a run of generation 1 has, at its version.
var generation1 = map[string]workflow.Version{
	changeBatchCalls:    1,
	changeLocalCalls:    1,
	changeUnlistedFence: 1,
	changeHandover:      1,
	changeRoleCheck:     2,
	changeDrillFast:     1,
	changeStopLostLocal: 1,
	changeFanOut:        1,
	changeOpKinds:       1,
	changeProtectAfter:  1,
	changeSurvey:        1,
	changeStopWaits:     1,
	changeWatch:         1,
	changeRecord:        1,
	changeNotesAside:    1,
	changeEndAside:      1,
	changeTogether:      2,
	changeCancelledEnd:  1,
	changeHealthNotes:   1,
	changeHealthLocal:   1,
	changeStartLocal:    1,
	changeStopConfirmed: 1,
	changeForceResync:   1,
	changeFindLost:      1,
	changeTrustedPlan:   1,
}

// generation2 is generation 1 and the first attempt of a batch of calls
// made locally (changeLocalBatch).
var generation2 = with(generation1, map[string]workflow.Version{changeLocalBatch: 1})

// generation3 is generation 2, a site fence skipped by the operator
// leaving its verification to the plans (changeSiteFenceSkip), a site
// fence leaving out busy plans (changeSiteBusyFence), and a test cleanup
// taking its copies from the run (changeCleanupFromRun).
var generation3 = with(generation2, map[string]workflow.Version{changeSiteFenceSkip: 1, changeSiteBusyFence: 1, changeCleanupFromRun: 1})

// generation4 is generation 3, protection promoting the primary's copies
// after enabling them (changeProtectPromote), and a resync done once the
// primary has shipped to the copy since it began (changeResyncShipped).
var generation4 = with(generation3, map[string]workflow.Version{changeProtectPromote: 1, changeResyncShipped: 1})

// generations are the frozen generations by number; the last is the one
// new runs take.
var generations = []map[string]workflow.Version{1: generation1, 2: generation2, 3: generation3, 4: generation4}

// with is a generation: every change of before, and those of more.
func with(before, more map[string]workflow.Version) map[string]workflow.Version {
	g := maps.Clone(before)
	maps.Copy(g, more)
	return g
}

// version is workflow.GetVersion(ctx, change, DefaultVersion, max) for a
// run of a generation too: such a run has change at its generation's
// version (DefaultVersion when its generation is older than the change),
// with no marker of its own. A run asks for its generation the first
// time it asks for any change, where it would have recorded that
// change's marker: a run recorded before generations asked for each
// change there, and replays with DefaultVersion.
func version(ctx workflow.Context, change string, max workflow.Version) workflow.Version {
	last := workflow.Version(len(generations) - 1)
	if _, ok := generations[last][change]; ok {
		if g := workflow.GetVersion(ctx, changeGeneration, workflow.DefaultVersion, last); g != workflow.DefaultVersion {
			if v, ok := generations[g][change]; ok {
				return v
			}
			return workflow.DefaultVersion
		}
	}
	return workflow.GetVersion(ctx, change, workflow.DefaultVersion, max)
}
