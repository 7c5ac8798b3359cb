package workflows_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/drover-dr/drover/workflows"
)

// recordEnv, when set, makes the dev-server tests write the histories of
// the workflows they run to testdata/, for TestReplay. `make histories`
// sets it, after removing the old files: the histories are always those
// of the current code, one per workflow type and shape.
const recordEnv = "DROVER_RECORD_HISTORIES"

var identity = regexp.MustCompile(`"identity": "[^"]*"`)

// record writes a finished run's history to testdata/<name>.json when
// recording is on.
func record(t *testing.T, ctx context.Context, c client.Client, run client.WorkflowRun, name string) {
	t.Helper()
	recordRun(t, ctx, c, run.GetID(), run.GetRunID(), name)
}

// recordRun writes the history of workflow id's run (the latest for "")
// to testdata/<name>.json when recording is on. A run still going (a
// plan's record) is written as far as it has got.
func recordRun(t *testing.T, ctx context.Context, c client.Client, id, runID, name string) {
	t.Helper()
	if os.Getenv(recordEnv) == "" {
		return
	}
	h := &historypb.History{}
	it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		mustOK(t, err)
		h.Events = append(h.Events, ev)
	}
	data, err := temporalproto.CustomJSONMarshalOptions{Indent: " "}.Marshal(h)
	mustOK(t, err)
	// The worker identity (pid@host) says nothing about the workflow.
	data = identity.ReplaceAll(data, []byte(`"identity": "test-worker"`))
	mustOK(t, os.MkdirAll("testdata", 0o755))
	mustOK(t, os.WriteFile(filepath.Join("testdata", name+".json"), data, 0o644))
	t.Logf("recorded testdata/%s.json (%d events)", name, len(h.Events))
}

// recordChild writes the history of the first child of type childType
// that run started to testdata/<name>.json when recording is on.
func recordChild(t *testing.T, ctx context.Context, c client.Client, run client.WorkflowRun, childType, name string) {
	t.Helper()
	if os.Getenv(recordEnv) == "" {
		return
	}
	it := c.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		mustOK(t, err)
		if a := ev.GetChildWorkflowExecutionStartedEventAttributes(); a != nil && a.GetWorkflowType().GetName() == childType {
			recordRun(t, ctx, c, a.GetWorkflowExecution().GetWorkflowId(), a.GetWorkflowExecution().GetRunId(), name)
			return
		}
	}
	t.Fatalf("%s started no %s child to record", run.GetID(), childType)
}

// replayID is the workflow id a history in testdata/ was recorded under
// (plan "shop", site "east"): child workflow ids derive from it.
func replayID(file string) string {
	switch base := filepath.Base(file); {
	case strings.HasPrefix(base, "protect"):
		return workflows.ProtectID("shop")
	case strings.HasPrefix(base, "record"):
		return workflows.RecordID("shop")
	case strings.HasPrefix(base, "verify"):
		return workflows.VerifyID("shop")
	case strings.HasPrefix(base, "test-"):
		return workflows.TestRecoveryID("shop")
	case strings.HasPrefix(base, "site-"):
		return workflows.SiteActionID("east")
	}
	return workflows.ActionID("shop")
}

// TestReplay replays every history in testdata/, recorded from the
// current code by `make histories`, against the workflow code: a change
// that would make a running workflow non-deterministic fails here instead
// of in the middle of a failover. Every workflow type the worker
// registers has a history. Changing what a pinned workflow does on
// purpose needs no patch: record the histories again (a new worker build
// is a new Worker Deployment Version, and runs pinned to the old one
// finish on it). Protect and PlanRecorder auto-upgrade: their histories
// from before a change stay in testdata/upgrade/ (make histories keeps
// them) and replay here until the change's patch is retired.
func TestReplay(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	mustOK(t, err)
	// The auto-upgrading workflows' histories from before a change that
	// runs of theirs may still have (see Register).
	upgrade, err := filepath.Glob("testdata/upgrade/*.json")
	mustOK(t, err)
	if len(files) == 0 {
		t.Fatal("no recorded histories in testdata/: run make histories")
	}
	var types registered
	workflows.Register(&types)
	replayed := map[string]bool{}
	for _, f := range append(files, upgrade...) {
		t.Run(strings.TrimPrefix(f, "testdata/"), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			workflows.Register(r)
			file, err := os.Open(f)
			mustOK(t, err)
			defer file.Close()
			h, err := client.HistoryFromJSON(file, client.HistoryJSONOptions{})
			mustOK(t, err)
			replayed[h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetWorkflowType().GetName()] = true
			if err := r.ReplayWorkflowHistoryWithOptions(nil, h, worker.ReplayWorkflowHistoryOptions{
				OriginalExecution: workflow.Execution{ID: replayID(f)}}); err != nil {
				t.Fatalf("replay of %s: %v", f, err)
			}
		})
	}
	for _, typ := range types {
		if !replayed[typ] {
			t.Errorf("no history of %s in testdata/: record one (make histories) from a dev-server test that runs it", typ)
		}
	}
}

// registered collects the names of the workflow types Register registers.
type registered []string

func (r *registered) RegisterWorkflowWithOptions(w any, _ workflow.RegisterOptions) {
	name := runtime.FuncForPC(reflect.ValueOf(w).Pointer()).Name()
	*r = append(*r, name[strings.LastIndex(name, ".")+1:])
	slices.Sort(*r)
}
