package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCleanWriterEscapesControls: what a client could put in a field
// reaches the terminal with its control characters escaped: no escape
// sequence, bell, carriage return or bidirectional override gets
// through, newlines and tabs do, and text in any script stays whole,
// also when a write cuts a character in two.
func TestCleanWriterEscapesControls(t *testing.T) {
	var b bytes.Buffer
	w := newCleanWriter(&b)
	in := "by root\x1b]0;owned\a\x1b[2J\r\u202eevil\x7f\u0085 é\tok\n"
	mid := strings.Index(in, "é") + 1 // inside é's two bytes
	if _, err := w.Write([]byte(in[:mid])); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(in[mid:])); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	want := `by root\x1b]0;owned\x07\x1b[2J\x0d\u202eevil\x7f\x85 é` + "\tok\n"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestOutputIsCleaned: drctl's own output goes through the clean writer:
// a plan file whose name carries an escape sequence is named escaped in
// plan validate's errors.
func TestOutputIsCleaned(t *testing.T) {
	file := filepath.Join(t.TempDir(), "shop\x1b[2J\x1b]0;owned\a.yaml")
	if err := os.WriteFile(file, []byte("apiVersion: drover.dev/v1alpha1\nkind: FailoverPlan\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run([]string{"plan", "validate", file}, nil, &out, &errb)
	all := out.String() + errb.String()
	if code != exitBadInput || strings.ContainsAny(all, "\x1b\a") || !strings.Contains(all, `shop\x1b[2J\x1b]0;owned\x07.yaml`) {
		t.Fatalf("exit %d, output %q: want the file named with its controls escaped", code, all)
	}
}
