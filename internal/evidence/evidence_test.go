package evidence_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/evidence"
)

func key(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func put(t *testing.T, d evidence.Dir, priv ed25519.PrivateKey, run string, start time.Time, outcome string) *evidence.Entry {
	t.Helper()
	e, err := d.Put(evidence.Record{Plan: "shop", Action: "drill", WorkflowID: "drover-action-shop", RunID: run, Outcome: outcome,
		Start: start, End: start.Add(time.Minute), RPO: 2 * time.Second, RPOKnown: true, RPOTarget: 5 * time.Minute},
		map[string][]byte{"report.json": []byte(`{"status":"` + outcome + `"}`), "report.md": []byte("# Drill\n"), "report.html": []byte("<html></html>")},
		priv, start.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestVerifyFindsTampering: evidence as stored verifies; a report file
// changed, removed or added, a record changed after sealing, and a seal
// by a key the auditor does not trust are each found and named.
func TestVerifyFindsTampering(t *testing.T) {
	pub, priv := key(t)
	other, _ := key(t)
	cases := []struct {
		name   string
		change func(dir string)
		want   string
	}{
		{"report changed", func(dir string) { rewrite(t, filepath.Join(dir, "report.md"), "# Drill\nall fine\n") }, "report.md was changed"},
		{"report removed", func(dir string) { os.Remove(filepath.Join(dir, "report.html")) }, "report.html is missing"},
		{"file added", func(dir string) { rewrite(t, filepath.Join(dir, "note.txt"), "x") }, "note.txt was added"},
		{"record changed", func(dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, "record.json"))
			rewrite(t, filepath.Join(dir, "record.json"), strings.Replace(string(b), `"outcome": "failed"`, `"outcome": "completed"`, 1))
		}, "record.json does not match its seal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := evidence.Dir{Root: t.TempDir()}
			e := put(t, d, priv, "run-1", t0, "failed")
			if err := evidence.Verify(e.Path, []ed25519.PublicKey{pub}); err != nil {
				t.Fatalf("untouched evidence: %v", err)
			}
			tc.change(e.Path)
			err := evidence.Verify(e.Path, []ed25519.PublicKey{pub})
			if !errors.Is(err, evidence.ErrTampered) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("verify after %s: %v, want %q", tc.name, err, tc.want)
			}
		})
	}
	d := evidence.Dir{Root: t.TempDir()}
	e := put(t, d, priv, "run-1", t0, "completed")
	if err := evidence.Verify(e.Path, []ed25519.PublicKey{other}); err == nil || !strings.Contains(err.Error(), "not among the trusted keys") {
		t.Fatalf("verify with another key: %v", err)
	}
}

func rewrite(t *testing.T, path, body string) {
	t.Helper()
	os.Chmod(path, 0o644)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestListSinceAndExport: List returns a plan's runs from a date on,
// oldest first, each with its verdict; a run is stored once; Export
// writes the listed folders and an index into one archive.
func TestListSinceAndExport(t *testing.T) {
	_, priv := key(t)
	d := evidence.Dir{Root: t.TempDir()}
	put(t, d, priv, "old", t0.AddDate(-1, 0, 0), "completed")
	put(t, d, priv, "b", t0.Add(time.Hour), "failed")
	put(t, d, priv, "a", t0, "completed")
	if _, err := d.Put(evidence.Record{Plan: "shop", RunID: "a", Start: t0}, nil, priv, t0); err == nil || !strings.Contains(err.Error(), "stored already") {
		t.Fatalf("a run stored twice: %v", err)
	}
	if !d.Has("shop", "a") || d.Has("shop", "zzz") {
		t.Fatal("Has")
	}
	es, err := d.List("shop", t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].RunID != "a" || es[1].RunID != "b" || es[0].Verdict != evidence.Met || es[1].Verdict != "failed: failed" {
		t.Fatalf("list since %v: %+v", t0, es)
	}
	var buf bytes.Buffer
	if err := evidence.Export(&buf, es); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	got := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = true
	}
	for _, e := range es {
		for _, f := range []string{"record.json", "record.sig", "report.json", "report.md", "report.html"} {
			if n := "shop/" + filepath.Base(e.Path) + "/" + f; !got[n] {
				t.Errorf("archive lacks %s: %v", n, got)
			}
		}
	}
	if !got["index.json"] || len(got) != 11 {
		t.Errorf("archive: %v", got)
	}
}

// TestJudge: the verdict against the plan's targets.
func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		r    evidence.Record
		want string
	}{
		{evidence.Record{Outcome: "completed", RTO: time.Minute, RTOTarget: 2 * time.Minute, RPO: time.Second, RPOKnown: true, RPOTarget: time.Minute}, "met"},
		{evidence.Record{Outcome: "completed", RTO: 3 * time.Minute, RTOTarget: 2 * time.Minute}, "missed: RTO 3m0s over the target 2m0s"},
		{evidence.Record{Outcome: "completed", RPO: 2 * time.Minute, RPOKnown: true, RPOTarget: time.Minute}, "missed: RPO 2m0s over the target 1m0s"},
		{evidence.Record{Outcome: "failed", Error: "site west unreachable"}, "failed: site west unreachable"},
		{evidence.Record{Outcome: "canceled", Error: "canceled by ops"}, "failed: canceled: canceled by ops"},
		{evidence.Record{Outcome: "partial"}, "failed: partial"},
	} {
		if got := evidence.Judge(&tc.r); got != tc.want {
			t.Errorf("Judge(%+v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}
