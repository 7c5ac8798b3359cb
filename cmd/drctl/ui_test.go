package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/freeport"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// browser starts headless Chromium (Debian's, or DROVER_CHROMIUM) for
// the test; without one the test is skipped, except under CI, where
// .ci/run installs it and its absence is a failure.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin := os.Getenv("DROVER_CHROMIUM")
	if bin == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				bin = p
				break
			}
		}
	}
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no Chromium on PATH: .ci/run installs Debian's chromium package for the dashboard's browser test")
		}
		t.Skip("no Chromium on PATH (apt-get install chromium): the dashboard's browser test is skipped")
	}
	// The profile directory is chromedp's own, removed once the browser
	// has exited: the browser's helpers may still write to it as the
	// test ends, which a t.TempDir would count as a failure.
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1280, 900))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	bctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	// The first Run starts the browser for bctx's lifetime: the time
	// limit below bounds the test's steps, not the browser. It counts
	// from here, before the test builds its binaries and starts its
	// stack, which take minutes of it on a busy machine.
	if err := chromedp.Run(bctx); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() { _ = chromedp.Cancel(bctx) }) // close it and wait, before the contexts end
	ctx, cancel3 := context.WithTimeout(bctx, 6*time.Minute)
	t.Cleanup(cancel3)
	return ctx
}

// screenshot saves the page as PNG into DROVER_SCREENSHOTS, when set
// (docs/guides/reports-and-dashboard.md's pictures come from there).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("DROVER_SCREENSHOTS")
	if dir == "" {
		return
	}
	var png []byte
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// text evaluates a JavaScript expression that yields a string.
func text(t *testing.T, ctx context.Context, expr string) string {
	t.Helper()
	var s string
	if err := chromedp.Run(ctx, chromedp.Evaluate(expr, &s)); err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return s
}

// stateOf is the state cell of the step with the given ID on the page.
func stateOf(id string) string {
	return fmt.Sprintf(`(function(){var c=document.querySelector('tr[data-step="%s"] td.state');return c?c.textContent:"";})()`, id)
}

// noteOf and triesOf are the note and tries cells of a step on the page.
func noteOf(id string) string {
	return fmt.Sprintf(`(function(){var c=document.querySelector('tr[data-step="%s"] td.note');return c?c.textContent:"";})()`, id)
}

func triesOf(id string) string {
	return fmt.Sprintf(`(function(){var c=document.querySelector('tr[data-step="%s"] td.tries');return c?c.textContent:"";})()`, id)
}

// dashboardError is a storage error longer than the 100 characters the
// step table once cut notes at, its cause at the end.
const dashboardError = "the replication daemon of west is restarting after an upgrade and refuses promotions until it has " +
	"reloaded its peers; retry in a few seconds (cause: rbd-mirror restart)"

// TestDashboard: drctl ui in a real browser. The overview shows the plan
// protected from east with its group's lag and a lag chart; during a
// failover that waits for approval, the action's page shows the gate
// waiting, the action "waiting for approval" (not running) and the
// approve command; once drctl approve opens it the same page, without a
// reload, shows the promotion, refused, paused, the action "paused" and
// the resolve command; after drctl resolve --retry, the promotion
// retrying with its whole error, then done after 17 tries, and the
// action completed. The
// overview then lists the action with a report that renders. Requests
// for another host name, and writes, are refused.
func TestDashboard(t *testing.T) {
	ctx := browser(t)
	st := newSiteStack(t)
	c := st.c
	shop := st.plan(t, "", "shop", "west", 0, "{groupID: vg-1}", simtest.NodeA+"/32", "  approvals: [beforePromote]\n")
	st.protect(shop)

	port, err := freeport.Port("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ui := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + c.addr, "TEMPORAL_NAMESPACE=default"}, c.bin, "ui", "--listen", addr, "--every", "200ms", "--temporal-ui", "http://127.0.0.1:8233")
	simtest.Eventually(t, 30*time.Second, "the dashboard to serve", func() bool { return strings.Contains(ui.Log.String(), "dashboard on http://"+addr) })
	base := "http://" + addr

	if err := chromedp.Run(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(`tr.plan[data-plan="shop"]`)); err != nil {
		t.Fatalf("overview: %v\n%s", err, ui.Log.String())
	}
	row := text(t, ctx, `document.querySelector('tr.plan[data-plan="shop"]').innerText`)
	if !strings.Contains(row, "east") || !strings.Contains(row, "data") {
		t.Fatalf("the plan's row: %q", row)
	}
	if n := text(t, ctx, `String(document.querySelectorAll('tr.plan[data-plan="shop"] svg.lag polyline').length)`); n != "1" {
		t.Fatalf("%s lag charts in the plan's row", n)
	}

	st.east.Down()
	c.ok(nil, "--by", "operator@example", "failover", shop, "--to", "west", "--yes")
	c.eventually("the promotion gate", "shop", func(s statusOut) bool { return stepIn(s, workflows.StateWaiting) })
	id := workflows.ActionID("shop")
	if err := chromedp.Run(ctx, chromedp.Navigate(base+"/action/"+id), chromedp.WaitVisible(`#steps`)); err != nil {
		t.Fatal(err)
	}
	if s := text(t, ctx, stateOf("approve/beforePromote")); s != workflows.StateWaiting {
		t.Fatalf("the gate's state on the page: %q", s)
	}
	if s := text(t, ctx, stateOf("promote/west/data")); s != "" && s != workflows.StatePending {
		t.Fatalf("the promotion's state on the page before the approval: %q", s)
	}
	// Waiting at its gate, the action is not said to run: the page says
	// it waits, and gives the command that opens the gate.
	if s := text(t, ctx, `document.getElementById("shown").textContent`); s != workflows.StateWaiting {
		t.Errorf("the action waiting at its gate is shown %q", s)
	}
	if s := text(t, ctx, `(function(){var n=document.getElementById("next");return n?n.textContent:"";})()`); !strings.Contains(s, "drctl approve shop") {
		t.Errorf("the page of the action waiting at its gate gives no approve command: %q", s)
	}
	screenshot(t, ctx, "dashboard-action.png")
	// The promotion is refused once for good: the step pauses, and the
	// page, by itself, says the action is paused (not running) and gives
	// the resolve command.
	if err := st.west.SetFaults([]sim.FaultRule{{Method: "PromoteVolume", Code: "INVALID_ARGUMENT", Count: 1, Message: "refused once"}}); err != nil {
		t.Fatal(err)
	}
	c.ok(nil, "--by", "auditor@example", "approve", "shop", "--yes")
	// The page updates itself: no navigation from here.
	simtest.Eventually(t, 30*time.Second, "the page to show the promotion paused", func() bool {
		return text(t, ctx, stateOf("promote/west/data")) == workflows.StatePaused
	})
	if s := text(t, ctx, `document.getElementById("shown").textContent`); s != workflows.StatePaused {
		t.Errorf("the action paused at its promotion is shown %q, want paused", s)
	}
	if s := text(t, ctx, `(function(){var n=document.getElementById("next");return n?n.textContent:"";})()`); !strings.Contains(s, "drctl resolve shop --retry") || !strings.Contains(s, "--skip") {
		t.Errorf("the page of the paused action gives no resolve command: %q", s)
	}
	// Retried, the promotion fails 15 times with an error longer than a
	// line (3 s of retries at the plan's 50-200 ms back-off, more than
	// the page's refresh), then goes through: while it retries the page
	// shows the error whole, and its tries count every call (17: the
	// refused one, 15 failed and the one that went through), not the
	// step's two runs.
	if err := st.west.SetFaults([]sim.FaultRule{{Method: "PromoteVolume", Code: "UNAVAILABLE", Count: 15, Message: dashboardError}}); err != nil {
		t.Fatal(err)
	}
	c.ok(nil, "--by", "operator@example", "resolve", "shop", "--retry")
	simtest.Eventually(t, 30*time.Second, "the page to show the promotion retrying with its whole error", func() bool {
		return strings.Contains(text(t, ctx, noteOf("promote/west/data")), dashboardError)
	})
	simtest.Eventually(t, 30*time.Second, "the page to show the promotion done", func() bool {
		return text(t, ctx, stateOf("promote/west/data")) == workflows.StateDone &&
			text(t, ctx, `document.getElementById("steps").dataset.status`) == "completed"
	})
	if n := text(t, ctx, triesOf("promote/west/data")); n != "17" {
		t.Errorf("the promotion's tries on the page: %q, want 17 (the refused call, 15 failed calls and the one that went through)", n)
	}
	if s := text(t, ctx, `document.getElementById("shown").textContent`); s != "completed" {
		t.Errorf("the completed action is shown %q", s)
	}
	if s := text(t, ctx, `document.getElementById("live").textContent`); !strings.Contains(s, "ended") {
		t.Fatalf("the page still says %q", s)
	}

	// The plan now runs on west with no replica: unprotected, not out of
	// RPO, in status (text and JSON) and on the overview, which names
	// what to do next. Protection follows the failover's word at its
	// next task: wait for it.
	var js struct {
		Record *struct {
			Primary    string
			Protection *struct{ Unprotected *struct{ Lost string } }
		}
		Protection *struct {
			Primary     string
			OutOfRPO    bool
			Unprotected *struct{ Lost string }
		}
	}
	simtest.Eventually(t, 30*time.Second, "status to say the plan is unprotected", func() bool {
		code, out, _ := c.run("-o", "json", "status", "shop")
		js.Protection, js.Record = nil, nil
		return code == 0 && json.Unmarshal([]byte(out), &js) == nil && js.Protection != nil && js.Protection.Unprotected != nil &&
			js.Record != nil && js.Record.Protection != nil && js.Record.Protection.Unprotected != nil
	})
	if js.Record.Primary != "west" || js.Record.Protection.Unprotected.Lost != "east" {
		t.Errorf("the record after the failover: primary %q, protection's %+v", js.Record.Primary, *js.Record.Protection.Unprotected)
	}
	if p := js.Protection; p.Primary != "west" || p.Unprotected.Lost != "east" || p.OutOfRPO {
		t.Errorf("status -o json's protection after the failover: %+v, want unprotected on west, east lost, not out of RPO", *p)
	}
	if _, out, _ := c.run("status", "shop"); !strings.Contains(out, "protection: running from west, UNPROTECTED: running on west, no replica since") ||
		!strings.Contains(out, "\n  UNPROTECTED: running on west") || strings.Contains(out, "OUT OF RPO") || !strings.Contains(out, "drctl reprotect shop once east is back") {
		t.Errorf("status after the failover:\n%s", out)
	}
	unprotected := `(function(){var c=document.querySelector('tr.plan[data-plan="shop"] td.unprotected');return c?c.textContent:"";})()`
	simtest.Eventually(t, 30*time.Second, "the overview to say the plan is unprotected", func() bool {
		if err := chromedp.Run(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(`tr.plan[data-plan="shop"]`)); err != nil {
			t.Fatal(err)
		}
		return text(t, ctx, unprotected) != ""
	})
	if s := text(t, ctx, unprotected); !strings.Contains(s, "running on west, no replica since") || !strings.Contains(s, "east was lost") ||
		!strings.Contains(s, "drctl reprotect shop once east is back") {
		t.Errorf("the overview's unprotected plan: %q", s)
	}
	if row := text(t, ctx, `document.querySelector('tr.plan[data-plan="shop"]').innerText`); !strings.Contains(row, "west") || strings.Contains(row, "out of RPO") {
		t.Errorf("the overview's row after the failover: %q", row)
	}
	screenshot(t, ctx, "dashboard-unprotected.png")

	// The overview's past actions come from Temporal's visibility, which
	// learns of the end a moment after the run: load it until it has.
	href := ""
	for deadline := time.Now().Add(30 * time.Second); href == "" && time.Now().Before(deadline); {
		if err := chromedp.Run(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(`#past`)); err != nil {
			t.Fatal(err)
		}
		href = text(t, ctx, `(function(){var a=document.querySelector('#past a[href^="/report/`+id+`"]');return a?a.getAttribute("href"):"";})()`)
		if href == "" {
			time.Sleep(300 * time.Millisecond)
		}
	}
	screenshot(t, ctx, "dashboard.png")
	if href == "" {
		t.Fatalf("no report link of %s in the past actions", id)
	}
	// How long the action took is the same on the overview as in drctl
	// list and in its report (below).
	took := text(t, ctx, `(function(){var a=document.querySelector('#past a[href^="/report/`+id+`"]');var c=a&&a.closest("tr").querySelector("td.took");return c?c.textContent:"";})()`)
	_, listOut, _ := c.run("list")
	listTook := ""
	for _, ln := range strings.Split(listOut, "\n") {
		if f := strings.Fields(ln); len(f) > 6 && f[0] == "shop" && f[1] == "Failover" && f[len(f)-1] == id {
			listTook = f[5]
		}
	}
	if took == "" || took != listTook {
		t.Errorf("the overview says the failover took %q, drctl list %q:\n%s", took, listTook, listOut)
	}
	if err := chromedp.Run(ctx, chromedp.Navigate(base+href), chromedp.WaitReady(`body`)); err != nil {
		t.Fatal(err)
	}
	if s := text(t, ctx, `(function(){var r=[].find.call(document.querySelectorAll("tr"),function(r){var h=r.querySelector("th");return h&&h.textContent==="Took";});return r?r.querySelector("td").textContent:"";})()`); s != took {
		t.Errorf("the report page says the failover took %q, the overview %q", s, took)
	}
	if s := text(t, ctx, `document.body.innerText`); !strings.Contains(s, "auditor@example") || !strings.Contains(s, "Failover: shop") {
		t.Fatalf("the report page: %.400s", s)
	}
	if n := text(t, ctx, `String(document.querySelectorAll("svg rect").length)`); n == "0" {
		t.Fatal("the report page has no timeline")
	}
	screenshot(t, ctx, "report.png")

	// Another host name (a rebound DNS name), and writes, are refused.
	req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
	req.Host = "evil.example:8090"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("a request for host evil.example: %v %v", resp, err)
	}
	if resp, err := http.Post(base+"/action/"+id, "text/plain", nil); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("a POST: %v %v", resp, err)
	}
}
