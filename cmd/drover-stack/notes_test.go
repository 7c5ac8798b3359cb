package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-dr/drover/internal/stack"
)

// TestUpNotesSayWhatIsTrue: up's closing notes follow the stack they
// describe: a run directory other than the default is stopped with
// drover-stack down -dir, not make down, and the commands to try name
// the plan given (its name, its sites, its file), not the demo plan.
func TestUpNotesSayWhatIsTrue(t *testing.T) {
	demo, err := os.ReadFile("../../plans/examples/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.NewReplacer("name: demo", "name: shop", "east", "dc1", "west", "dc2").Replace(string(demo))
	dir := t.TempDir()
	given := filepath.Join(t.TempDir(), "shop.yaml")
	copied := filepath.Join(dir, "shop.yaml")
	for _, f := range []string{given, copied} {
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	o := stack.Options{Dir: dir, Bin: "/opt/drover/bin", Plan: given, Layout: stack.Fixed()}
	if err := upNotes(&b, o, copied, "/opt/drover/bin/drover-stack"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Log(out)
	for _, want := range []string{
		"/opt/drover/bin/drover-stack down -dir " + dir + " stops it",
		"the plan      " + copied + " (" + given + " with this stack's endpoints)",
		"/opt/drover/bin/drctl protect start " + copied,
		"/opt/drover/bin/drctl status shop",
		"/opt/drover/bin/drctl drill " + copied + " --to dc2 --wait",
		"/v1/down      # lose dc1",
		"/opt/drover/bin/drctl failover " + copied + " --to dc2 --wait",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("up's notes lack %q", want)
		}
	}
	for _, not := range []string{"make down", "status demo", "plans/examples/demo.yaml", "east", "west"} {
		if strings.Contains(out, not) {
			t.Errorf("up's notes say %q of a stack that is not so", not)
		}
	}
}
