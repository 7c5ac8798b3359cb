package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// TestExitCodesReference checks docs/reference/exit-codes.md's drctl
// table against drctl's exit codes: each code has its row, and no row
// names a code drctl does not use.
func TestExitCodesReference(t *testing.T) {
	raw, err := os.ReadFile("../../docs/reference/exit-codes.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n## drctl\n")
	if !ok {
		t.Fatal("docs/reference/exit-codes.md has no drctl section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var rows []string
	for _, l := range strings.Split(section, "\n") {
		if f := strings.Split(l, "|"); len(f) > 2 && strings.TrimSpace(f[1]) != "code" && !strings.HasPrefix(strings.TrimSpace(f[1]), "-") {
			rows = append(rows, strings.TrimSpace(f[1]))
		}
	}
	var want []string
	for _, c := range []int{exitOK, exitFailed, exitBadInput, exitUnreachable, exitInterrupted} {
		want = append(want, strconv.Itoa(c))
	}
	if !slices.Equal(rows, want) {
		t.Errorf("the drctl exit codes documented are %v, drctl's are %v", rows, want)
	}
}

// TestDocumentedCommandsParse runs every drctl command line the README and
// the docs show in their code blocks (`bin/drctl …`, `drctl …`, `go run
// ./cmd/drctl …`) through drctl's own parsing, without running it: the
// command must exist, and its flags and argument count be ones it takes.
// A renamed flag or command fails here before a reader trips on it.
func TestDocumentedCommandsParse(t *testing.T) {
	for _, v := range envDefaults {
		t.Setenv(v, "")
	}
	files := []string{"../../README.md"}
	err := filepath.WalkDir("../../docs", func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".md") && !strings.HasSuffix(p, "reference/drctl.md") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fence, console, cont := false, false, ""
		for i, l := range strings.Split(string(raw), "\n") {
			if t := strings.TrimSpace(l); strings.HasPrefix(t, "```") {
				fence = !fence
				console = fence && strings.TrimPrefix(t, "```") == "console"
				continue
			}
			if !fence {
				continue
			}
			if console {
				// A console block shows commands after "$ " and
				// their output on the lines between.
				cmdLine, ok := strings.CutPrefix(strings.TrimSpace(l), "$ ")
				if !ok && cont == "" {
					continue
				}
				if ok {
					l = cmdLine
				}
			}
			l = cont + l
			cont = ""
			if strings.HasSuffix(l, `\`) {
				cont = strings.TrimSuffix(l, `\`) + " "
				continue
			}
			line := strings.TrimSpace(l)
			var rest string
			for _, p := range []string{"bin/drctl ", "drctl ", "go run ./cmd/drctl "} {
				if r, ok := strings.CutPrefix(line, p); ok {
					rest = r
				}
			}
			if rest == "" {
				continue
			}
			rest, _, _ = strings.Cut(rest, " #")
			if strings.ContainsAny(rest, "|$<>;&\"'") || strings.Contains(rest, "...") || strings.Contains(rest, "…") {
				continue // a shell pipeline, substitution or quoting: not a bare command line
			}
			args := strings.Fields(rest)
			n++
			root := (&app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}).root()
			root.InitDefaultHelpCmd()
			root.InitDefaultCompletionCmd()
			cmd, flagsAndArgs, err := root.Find(args)
			where := fmt.Sprintf("%s:%d: drctl %s", strings.TrimPrefix(f, "../../"), i+1, rest)
			if err != nil || (cmd == root && len(args) > 0 && !strings.HasPrefix(args[0], "-")) {
				t.Errorf("%s: no such command (%v)", where, err)
				continue
			}
			if err := cmd.ParseFlags(flagsAndArgs); err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
				t.Errorf("%s: %v", where, err)
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d drctl command lines found in the docs", n)
	}
	t.Logf("%d documented drctl command lines checked", n)
}
