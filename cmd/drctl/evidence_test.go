package main_test

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/workflows"
)

type evidenceRow struct {
	Plan, Action, WorkflowID, RunID, Outcome, StartedBy, Verdict, Verified, Path, Error string
	RPOKnown                                                                            bool
	RPO, RPOTarget                                                                      time.Duration
	Files                                                                               map[string]string
	End                                                                                 time.Time
}

// TestEvidence: drctl evidence collect stores the report of each closed
// drill (one that passes, one whose target site is down) as JSON,
// Markdown and HTML with a sealed record; drctl evidence lists them with
// outcome, RPO and the verdict against the plan's RPO target, verifies
// their seals, names a tampered report (exit 1) and exports one archive.
// A collector that cannot store a run's evidence says so (exit 1), and
// the listing marks the run NOT STORED.
func TestEvidence(t *testing.T) {
	st := newSiteStack(t)
	c := st.c
	since := time.Now().UTC().Add(-time.Minute).Format(time.RFC3339)
	shop := st.plan(t, "", "shop", "west", 0, "{groupID: vg-1}", simtest.NodeA+"/32", "  drills: {drill: 1h, testRecovery: 2160h}\n")
	st.protect(shop)
	var o outcome
	c.ok(&o, "--by", "auditor-drill@example", "drill", shop, "--to", "west", "--wait")
	if o.Status != "completed" {
		t.Fatalf("drill: %+v", o)
	}
	st.west.Down()
	code, out, errs := c.run("-o", "json", "--by", "auditor-drill@example", "drill", shop, "--to", "west", "--wait")
	if code == 2 || code == 3 {
		t.Fatalf("drill with west down: exit %d\n%s\n%s", code, out, errs)
	}
	if err := st.west.Up(); err != nil {
		t.Fatal(err)
	}

	keys := t.TempDir()
	c.ok(nil, "plan", "keygen", filepath.Join(keys, "evidence"))
	key, pub := filepath.Join(keys, "evidence.key"), filepath.Join(keys, "evidence.pub")

	// A store that cannot be written: the collector names each run it
	// could not store and exits 1; the listing marks them.
	blocked := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(blocked, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs = c.run("evidence", "collect", "--dir", blocked, "--key", key, "--since", since)
	if code != 1 || strings.Count(errs, "NOT STORED") != 2 {
		t.Fatalf("collect into a file: exit %d, want 1 naming both runs NOT STORED\n%s\n%s", code, out, errs)
	}
	empty := t.TempDir()
	var rows []evidenceRow
	c.ok(&rows, "evidence", "shop", "--dir", empty, "--since", since)
	if len(rows) != 2 || rows[0].Verdict != "NOT STORED: no evidence of this run in the store" || rows[1].Verdict != rows[0].Verdict {
		t.Fatalf("evidence of runs never stored: %+v", rows)
	}

	store := t.TempDir()
	c.ok(nil, "evidence", "collect", "--dir", store, "--key", key, "--since", since)
	// A second round stores nothing twice.
	code, _, errs = c.run("evidence", "collect", "--dir", store, "--key", key, "--since", since)
	if code != 0 || strings.Contains(errs, "stored the evidence") {
		t.Fatalf("second collect: exit %d\n%s", code, errs)
	}
	c.ok(&rows, "evidence", "shop", "--dir", store, "--since", since, "--verify", "--trust", pub)
	if len(rows) != 2 {
		t.Fatalf("evidence: %+v", rows)
	}
	good, bad := rows[0], rows[1]
	if good.Action != "drill" || good.Outcome != "completed" || good.Verdict != "met" || good.StartedBy != "auditor-drill@example" ||
		good.RPOTarget != 5*time.Minute || good.WorkflowID != workflows.ActionID("shop") || good.Verified != "ok" {
		t.Errorf("the passing drill's evidence: %+v", good)
	}
	if bad.Outcome != "failed" || !strings.HasPrefix(bad.Verdict, "failed: ") || !strings.Contains(bad.Verdict, "check(s) failed") || !strings.Contains(bad.Verdict, `site "west"`) || bad.Verified != "ok" {
		t.Errorf("the failing drill's evidence: %+v", bad)
	}
	for _, f := range []string{"report.json", "report.md", "report.html"} {
		b, err := os.ReadFile(filepath.Join(good.Path, f))
		if err != nil || len(good.Files[f]) != 64 {
			t.Fatalf("%s of the evidence: %v %v", f, err, good.Files)
		}
		if f == "report.json" {
			var r struct{ RunID, Status string }
			if json.Unmarshal(b, &r) != nil || r.RunID != good.RunID || r.Status != "completed" {
				t.Errorf("report.json of the evidence: %s", b)
			}
		}
	}
	if code, out, errs := c.run("evidence", "shop", "--dir", store, "--since", since); code != 0 || !strings.Contains(out, "VERDICT") || !strings.Contains(out, "met") ||
		!strings.Contains(out, "tests (from the evidence store):\n  drill: last run ") {
		t.Errorf("evidence as text: exit %d\n%s\n%s", code, out, errs)
	}

	// The collector's metrics: the drill succeeded within its hour, but
	// its newest run failed; the test recovery the plan asks for never
	// ran, so it is overdue.
	metrics := collectMetrics(t, c, store, key, since, filepath.Dir(shop))
	for _, want := range []string{
		`drover_test_overdue{plan="shop",kind="drill"} 0`,
		`drover_test_last_failed{plan="shop",kind="drill"} 1`,
		`drover_test_overdue{plan="shop",kind="test-recovery"} 1`,
		`drover_test_required_every_seconds{plan="shop",kind="drill"} 3600`,
		`drover_test_last_success_timestamp_seconds{plan="shop",kind="drill"} ` + strconv.FormatInt(good.End.Unix(), 10),
		"drover_evidence_not_stored 0",
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("the collector's metrics lack %q:\n%s", want, metrics)
		}
	}

	// drctl status shows where the tests stand, from the store: the
	// newest drill failed, the last success and when the next is due;
	// the test recovery the plan file asks for never ran.
	withStore := c
	withStore.env = []string{"DROVER_EVIDENCE_DIR=" + store}
	code, out, errs = withStore.run("status", shop)
	if code != 0 || !strings.Contains(out, "tests (from the evidence store):") ||
		!regexp.MustCompile(`drill: last run [0-9: -]+, failed: .*; last success [0-9: -]+; next due by [0-9: -]+ \(every 1h0m0s\)`).MatchString(out) ||
		!strings.Contains(out, "test recovery: never run; OVERDUE (policy.drills: every 2160h0m0s)") {
		t.Errorf("status with the evidence store: exit %d\n%s\n%s", code, out, errs)
	}
	var sj struct {
		Tests []struct {
			Kind    string
			Overdue bool
			Due     time.Time
		}
	}
	withStore.ok(&sj, "status", "shop")
	if len(sj.Tests) != 1 || sj.Tests[0].Kind != "drill" || sj.Tests[0].Overdue || !sj.Tests[0].Due.Equal(good.End.Add(time.Hour)) {
		t.Errorf("status -o json: tests %+v", sj.Tests)
	}

	// Export: one archive with both entries.
	archive := filepath.Join(t.TempDir(), "audit.tar.gz")
	c.ok(nil, "evidence", "shop", "--dir", store, "--since", since, "--export", archive)
	unpacked := t.TempDir()
	names := untar(t, archive, unpacked)
	for _, r := range rows {
		if !names["shop/"+filepath.Base(r.Path)+"/record.sig"] || !names["shop/"+filepath.Base(r.Path)+"/report.html"] {
			t.Errorf("archive lacks the entry %s: %v", r.Path, names)
		}
	}

	// The archive, unpacked, verifies as the store does.
	var fromArchive []evidenceRow
	c.ok(&fromArchive, "evidence", "shop", "--dir", unpacked, "--verify", "--trust", pub)
	if len(fromArchive) != 2 || fromArchive[0].Verified != "ok" || fromArchive[1].Verified != "ok" || fromArchive[0].RunID != good.RunID {
		t.Errorf("the unpacked archive: %+v", fromArchive)
	}

	// Tampering: a verdict edited in the Markdown report is found.
	md := filepath.Join(bad.Path, "report.md")
	os.Chmod(md, 0o644)
	b, _ := os.ReadFile(md)
	if err := os.WriteFile(md, []byte(strings.Replace(string(b), "| Status | failed", "| Status | completed", 1)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs = c.run("-o", "json", "evidence", "shop", "--dir", store, "--since", since, "--verify", "--trust", pub)
	// Standard output holds the rows, then the error's JSON.
	if code != 1 || json.NewDecoder(strings.NewReader(out)).Decode(&rows) != nil || len(rows) != 2 || rows[0].Verified != "ok" ||
		!strings.Contains(rows[1].Verified, "report.md was changed") || !strings.Contains(errs, "1 of 2") {
		t.Fatalf("verify of a tampered report: exit %d\n%s\n%s", code, out, errs)
	}
	c.want(2, "--verify needs --trust", "evidence", "shop", "--dir", store, "--verify", "--trust", "")
	c.want(2, "--since", "evidence", "shop", "--dir", store, "--since", "last tuesday")
}

// collectMetrics runs drctl evidence collect --every with --metrics on
// an ephemeral port, reads its metrics once its first round is done, and
// stops it.
func collectMetrics(t *testing.T, c cli, store, key, since, plansDir string) string {
	t.Helper()
	cmd := exec.Command(c.bin, "evidence", "collect", "--dir", store, "--key", key, "--since", since, "--every", "1s",
		"--metrics", "127.0.0.1:0", "--plans", plansDir)
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+c.addr, "TEMPORAL_NAMESPACE=default")
	var errb simtest.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	addr := regexp.MustCompile(`metrics on (http://[0-9.:]+/metrics)`)
	var body string
	simtest.Eventually(t, time.Minute, "the collector's metrics", func() bool {
		m := addr.FindStringSubmatch(errb.String())
		if m == nil {
			return false
		}
		resp, err := http.Get(m[1])
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return strings.Contains(body, "drover_test_overdue{")
	})
	return body
}

// untar unpacks a .tar.gz into dir and returns the names it held.
func untar(t *testing.T, path, dir string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = true
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(dir, filepath.FromSlash(h.Name))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
