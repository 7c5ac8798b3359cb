package devserver_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/workflows"
)

// TestWarningsSeen: the server's size warnings reach Warnings, so a test
// that finds none has really looked. 700 KiB of random bytes (which the
// client's codec cannot shrink) are over the 512 KiB blob warn limit.
func TestWarningsSeen(t *testing.T) {
	srv := devserver.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	noise := make([]byte, 700<<10)
	if _, err := rand.Read(noise); err != nil {
		t.Fatal(err)
	}
	run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "big-input", TaskQueue: "nobody-polls"},
		"Anything", noise)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Client.TerminateWorkflow(context.Background(), run.GetID(), "", "test over")
	for len(srv.Warnings("exceeds the warning limit")) == 0 {
		if ctx.Err() != nil {
			t.Fatal("no blob size warning in the server's log")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if w := srv.Warnings("exceeds the warning limit"); !strings.Contains(w[0], "big-input") {
		t.Fatalf("warning %q does not name the workflow", w[0])
	}
}

// TestSearchAttributesRegistered: the dev server has Drover's search
// attributes, as an operator registers them on a real namespace.
func TestSearchAttributesRegistered(t *testing.T) {
	srv := devserver.Start(t, nil)
	missing, err := workflows.MissingAttributes(context.Background(), srv.Client, "default")
	if err != nil || len(missing) != 0 {
		t.Fatalf("missing %v, %v", missing, err)
	}
}
