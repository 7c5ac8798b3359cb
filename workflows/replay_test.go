package workflows_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
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

// recordEnv, when set, makes the dev-server test write the histories of
// the actions it runs to testdata/, for TestReplay. Re-record after a
// deliberate change of an action's sequence, and keep the old files of
// histories that running workflows may still have.
const recordEnv = "DROVER_RECORD_HISTORIES"

var identity = regexp.MustCompile(`"identity": "[^"]*"`)

// record writes a finished run's history to testdata/<name>.json when
// recording is on.
func record(t *testing.T, ctx context.Context, c client.Client, run client.WorkflowRun, name string) {
	t.Helper()
	if os.Getenv(recordEnv) == "" {
		return
	}
	h := &historypb.History{}
	it := c.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
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

// TestReplay replays every recorded history against today's workflow
// code: a change that would make a running action non-deterministic
// fails here instead of in the middle of a failover.
func TestReplay(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	mustOK(t, err)
	if len(files) == 0 {
		t.Fatal("no recorded histories in testdata/")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			workflows.Register(r)
			file, err := os.Open(f)
			mustOK(t, err)
			defer file.Close()
			h, err := client.HistoryFromJSON(file, client.HistoryJSONOptions{})
			mustOK(t, err)
			// Child workflow ids derive from the parent's: replay under
			// the id the history was recorded with (plan "shop").
			id := workflows.ActionID("shop")
			switch base := filepath.Base(f); {
			case strings.HasPrefix(base, "protect"):
				id = workflows.ProtectID("shop")
			case strings.HasPrefix(base, "test-"):
				id = workflows.TestRecoveryID("shop")
			case strings.HasPrefix(base, "site-"):
				id = workflows.SiteActionID("east")
			}
			if err := r.ReplayWorkflowHistoryWithOptions(nil, h, worker.ReplayWorkflowHistoryOptions{
				OriginalExecution: workflow.Execution{ID: id}}); err != nil {
				t.Fatalf("replay of %s: %v", f, err)
			}
		})
	}
}
