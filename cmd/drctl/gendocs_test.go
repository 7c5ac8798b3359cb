package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestGeneratedReferences regenerates the references in docs/reference
// (every command and flag, the plan format) and fails when a committed
// file differs: a flag, a command or a plan field changed without
// `make docs`.
func TestGeneratedReferences(t *testing.T) {
	for _, v := range envDefaults {
		t.Setenv(v, "")
	}
	schema, err := os.ReadFile("../../plans/plan.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	refs, err := references(schema)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 2 {
		t.Fatalf("%d references, want drctl.md and plan-format.md", len(refs))
	}
	for name, want := range refs {
		path := filepath.Join("..", "..", "docs", "reference", name)
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run make docs)", err)
		}
		if !bytes.Equal(got, want) {
			gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
			for i := 0; i < len(gl) || i < len(wl); i++ {
				var g, w string
				if i < len(gl) {
					g = gl[i]
				}
				if i < len(wl) {
					w = wl[i]
				}
				if g != w {
					t.Errorf("docs/reference/%s differs from the code at line %d (run make docs):\n  file: %q\n  code: %q", name, i+1, g, w)
					break
				}
			}
		}
	}
}

// TestCommandReferenceNamesEveryFlag checks the generator itself: every
// command the tree holds has its heading, and every flag of it a row.
func TestCommandReferenceNamesEveryFlag(t *testing.T) {
	for _, v := range envDefaults {
		t.Setenv(v, "")
	}
	refs, err := references([]byte(`{"type":"object"}`))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(refs["drctl.md"])
	root := (&app{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}).root()
	n := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden {
			if strings.Contains(doc, "## "+c.CommandPath()+"\n") {
				t.Errorf("hidden %s is in the reference", c.CommandPath())
			}
			return
		}
		n++
		if !strings.Contains(doc, "\n## "+c.CommandPath()+"\n") {
			t.Errorf("no section for %s", c.CommandPath())
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" && !strings.Contains(doc, "`--"+f.Name+"` |") {
				t.Errorf("%s: no row for --%s", c.CommandPath(), f.Name)
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	if n < 25 {
		t.Fatalf("only %d commands walked", n)
	}
}
