package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// pausedProgress is a reprotect paused at a demotion the storage refused,
// after a step that needed a second try.
func pausedProgress() *workflows.Progress {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	return &workflows.Progress{Action: "reprotect", Plan: "shop", State: workflows.StateRunning, Start: t0, Steps: []*workflows.Step{
		{Name: "stop web on east", State: workflows.StateDone, Attempts: 2, Start: t0, End: t0.Add(1500 * time.Millisecond),
			LastError: "exit status 75: the scheduler is busy, try again", Output: "stopped web"},
		{Name: "demote db on east", State: workflows.StatePaused, Attempts: 1, Start: t0.Add(2 * time.Second),
			LastError: "DemoteVolume of vg-1 on east: INVALID_ARGUMENT: injected refusal of the demotion by the storage of the site"},
		{Name: "resync db on east", State: workflows.StatePending},
	}}
}

// TestStepTableOfAPausedAction reads the text status gives of a paused
// action: every step with its state, tries, time and note, the paused
// step with its whole error, and the command to run next.
func TestStepTableOfAPausedAction(t *testing.T) {
	var b bytes.Buffer
	renderSteps(&b, pausedProgress(), "drover-action-shop")
	out := b.String()
	t.Logf("\n%s", out)
	for _, want := range []string{
		// The headline says paused, as the dashboard does: the run goes
		// on in Temporal, the action waits for the operator.
		`reprotect of plan "shop": paused — 1/3 steps done`,
		"STATE", "TRIES", "TOOK", "NOTE",
		"done     stop web on east", "1.5s", "stopped web",
		"paused   demote db on east",
		`paused for the operator: step "demote db on east" after 1 try`,
		"error: DemoteVolume of vg-1 on east: INVALID_ARGUMENT: injected refusal of the demotion by the storage of the site",
		"next: drctl resolve shop --retry",
		"pending  resync db on east",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the step table lacks %q", want)
		}
	}
	if strings.Contains(out, "scheduler is busy") {
		t.Errorf("a done step shows the error of an earlier attempt:\n%s", out)
	}
}

// TestHintsNameTheRun: the commands a step table suggests name a plan's
// DR action by the plan, and any other run (a test recovery, a site
// action) by its workflow id: "drctl approve shop" would reach the plan's
// action, not its test.
func TestHintsNameTheRun(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	waiting := &workflows.Progress{Action: "test recovery", Plan: "shop", State: workflows.StateRunning, Start: t0, Steps: []*workflows.Step{
		{ID: "approve/endTest", Name: "approve endTest", State: workflows.StateWaiting, Start: t0}}}
	for id, want := range map[string]string{
		workflows.TestRecoveryID("shop"): "drctl approve drover-test-shop",
		workflows.ActionID("shop"):       "drctl approve shop",
		workflows.SiteActionID("east"):   "drctl approve drover-site-action-east",
	} {
		var b bytes.Buffer
		renderSteps(&b, waiting, id)
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("%s: the hint is not %q:\n%s", id, want, b.String())
		}
	}
	site := &workflows.Progress{Action: workflows.SiteAction(workflows.SiteFailoverAction), Plan: "site-east", State: workflows.StateRunning, Start: t0}
	var h bytes.Buffer
	renderSteps(&h, site, workflows.SiteActionID("east"))
	if !strings.HasPrefix(h.String(), "site failover of site east: running") {
		t.Errorf("a site action's header: %q", h.String())
	}
	var b bytes.Buffer
	renderSteps(&b, pausedProgress(), workflows.SiteActionID("east"))
	if !strings.Contains(b.String(), "next: drctl resolve drover-site-action-east --retry") {
		t.Errorf("a site action's resolve hint:\n%s", b.String())
	}
}

// TestStepNote: a done step's note is its output, never an earlier
// attempt's error; a step waiting for a site's worker says so over an
// earlier attempt's error; a long note is kept whole.
func TestStepNote(t *testing.T) {
	done := &workflows.Step{State: workflows.StateDone, LastError: "old error", Output: "promoted"}
	if got := stepNote(done); got != "promoted" {
		t.Errorf("done step note %q, want its output", got)
	}
	retrying := &workflows.Step{State: workflows.StateRunning, LastError: "UNAVAILABLE", Output: ""}
	if got := stepNote(retrying); got != "UNAVAILABLE" {
		t.Errorf("running step note %q, want its last error", got)
	}
	cut := &workflows.Step{State: workflows.StateRunning, LastError: "StartWorkload: timeout", Retries: 1, WaitsForWorker: true,
		Note: "waits for site west's worker: ...; the action goes on by itself when a worker polls the queue again, no resolve needed"}
	if got := stepNote(cut); got != cut.Note {
		t.Errorf("a step waiting for a site's worker says %q, want what it waits for", got)
	}
	long := &workflows.Step{State: workflows.StatePaused, LastError: strings.Repeat("abcdefghi ", 20) + "the end"}
	if got := stepNote(long); got != strings.Repeat("abcdefghi ", 20)+"the end" {
		t.Errorf("long note cut as %q", got)
	}
}

// longError is a storage error longer than any column: its end says
// what the operator needs.
const longError = "PromoteVolume of vg-1 on west: UNAVAILABLE: connection error: desc = " +
	"transport: error while dialing: dial tcp 10.0.0.7:9070: connect: connection refused; " +
	"the storage of west did not answer within 5s: check that its CSI-Addons sidecar runs (the-last-words)"

// TestStepTableShowsTriesAndTheWholeError: a step whose call failed six
// times and runs again shows 7 tries, in the table and in the pause
// line, and its last error whole, wrapped in the NOTE column, not cut.
func TestStepTableShowsTriesAndTheWholeError(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	p := &workflows.Progress{Action: "failover", Plan: "shop", State: workflows.StateRunning, Start: t0, Steps: []*workflows.Step{
		{ID: "promote/west/db", Name: "promote db on west", State: workflows.StateRunning, Attempts: 1, Retries: 6, Start: t0, LastError: longError},
		{ID: "fence/east", Name: "fence east", State: workflows.StatePaused, Attempts: 2, Retries: 3, Start: t0, LastError: longError, Guard: true},
	}}
	var b bytes.Buffer
	renderSteps(&b, p, workflows.ActionID("shop"))
	out := b.String()
	t.Logf("\n%s", out)
	var notes []string
	tries := map[string]string{}
	col := -1
	for _, line := range strings.Split(out, "\n") {
		if i := strings.Index(line, "NOTE"); col < 0 && i >= 0 {
			col = i
			continue
		}
		if col < 0 || len(line) <= col {
			continue
		}
		if strings.HasPrefix(line, "paused for") {
			break
		}
		if f := strings.Fields(line[:col]); len(f) > 4 {
			tries[strings.Join(f[1:len(f)-2], " ")] = f[len(f)-2]
		}
		notes = append(notes, line[col:])
	}
	if tries["promote db on west"] != "7" || tries["fence east"] != "5" {
		t.Errorf("tries %v, want 7 for the running promotion and 5 for the paused fence", tries)
	}
	if got := strings.Join(strings.Fields(strings.Join(notes, " ")), " "); !strings.Contains(got, "retrying (6 failed): "+longError) {
		t.Errorf("the NOTE column does not hold the whole error:\n%s", got)
	}
	for _, n := range notes {
		if len(n) > noteWidth+len("…") || strings.Contains(n, "…") {
			t.Errorf("a note line of %d characters, or cut: %q", len(n), n)
		}
	}
	for _, want := range []string{
		`paused for the operator: step "fence east" after 5 tries`,
		"error: " + longError,
		"next: drctl resolve shop --retry (run it again), --skip --override",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the step table lacks %q", want)
		}
	}
}

// TestStreamedPauseOffersWhatResolveTakes: piped, a paused guard step
// (a fence) offers --skip --override, which resolve needs to skip it.
func TestStreamedPauseOffersWhatResolveTakes(t *testing.T) {
	var b bytes.Buffer
	l := newLiveTable(&b, true)
	p := &workflows.Progress{Action: "failover", Plan: "shop", State: workflows.StateRunning, Steps: []*workflows.Step{
		{ID: "fence/east", Name: "fence east", State: workflows.StatePaused, Attempts: 1, LastError: "INVALID_ARGUMENT", Guard: true},
		{ID: "stop/east", Name: "stop on east", State: workflows.StatePaused, Attempts: 1, LastError: "exit 1"},
	}}
	l.show(p, workflows.ActionID("shop"))
	out := b.String()
	if !strings.Contains(out, "fence east  INVALID_ARGUMENT — decide with: drctl resolve shop --retry|--skip --override|--abort") ||
		!strings.Contains(out, "stop on east  exit 1 — decide with: drctl resolve shop --retry|--skip|--abort") {
		t.Errorf("the pause hints:\n%s", out)
	}
}

// TestStreamedLinesCarryTheStepTime: in a log (no terminal), each line
// is stamped with when its step reached its state, not when drctl polled.
func TestStreamedLinesCarryTheStepTime(t *testing.T) {
	var b bytes.Buffer
	l := newLiveTable(&b, true)
	p := pausedProgress()
	l.show(p, "drover-action-shop")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a line per started step:\n%s", b.String())
	}
	for i, s := range p.Steps[:2] {
		want := stepTime(s).Local().Format("15:04:05.000")
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %q does not start with the step's time %s", lines[i], want)
		}
	}
}

// TestInterruptedWatchExits130: Ctrl-C while following an action ends
// drctl with 130 every time, never with "context canceled" and 1.
func TestInterruptedWatchExits130(t *testing.T) {
	srv := devserver.Start(t, nil)
	// No worker: the action waits on its task queue, running.
	run, err := srv.Client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: workflows.ActionID("waits"), TaskQueue: workflows.TaskQueue}, "Failover")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Client.TerminateWorkflow(context.Background(), run.GetID(), "", "test over")
	for i := range 8 {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Duration(100+50*i)*time.Millisecond, cancel)
		var out, errb bytes.Buffer
		code := runContext(ctx, []string{"--address", srv.Address(), "watch", "waits"}, strings.NewReader(""), &out, &errb)
		cancel()
		if code != exitInterrupted || strings.Contains(errb.String(), "context canceled") {
			t.Fatalf("try %d: exit %d, want 130\n%s", i, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	code := runContext(context.Background(), []string{"--address", srv.Address(), "watch", "nosuchplan"}, strings.NewReader(""), &out, &errb)
	if code != exitBadInput || !strings.Contains(errb.String(), `Temporal knows no action of plan "nosuchplan"`) || strings.Contains(errb.String(), "step table") {
		t.Errorf("watch nosuchplan: exit %d\n%s%s", code, out.String(), errb.String())
	}
}

// TestConnectionFlags: drctl takes the temporal CLI's connection flags:
// an environment of its env file (--env), a profile of the environment
// configuration file (--profile), TLS files (bad ones are bad input
// naming the flag); -o takes text or json only; version prints the
// module version.
func TestConnectionFlags(t *testing.T) {
	srv := devserver.Start(t, nil)
	dir := t.TempDir()
	envFile := filepath.Join(dir, "temporal.yaml")
	if err := os.WriteFile(envFile, []byte("env:\n  lab:\n    address: "+srv.Address()+"\n    namespace: default\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	toml := filepath.Join(dir, "temporal.toml")
	if err := os.WriteFile(toml, []byte("[profile.lab]\naddress = \""+srv.Address()+"\"\nnamespace = \"default\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEMPORAL_CONFIG_FILE", toml)
	for _, v := range []string{"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_PROFILE", "TEMPORAL_ENV"} {
		t.Setenv(v, "") // restored after the test
		os.Unsetenv(v)
	}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := runContext(context.Background(), args, strings.NewReader(""), &out, &errb)
		return code, out.String(), errb.String()
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--env", "lab", "--env-file", envFile, "list"}, 0, "no Drover actions yet"},
		{[]string{"--profile", "lab", "list"}, 0, "no Drover actions yet"},
		{[]string{"--env", "nosuch", "--env-file", envFile, "list"}, 2, "the env file " + envFile + " has no such environment"},
		{[]string{"--profile", "nosuch", "list"}, 2, "nosuch"},
		{[]string{"--tls-cert-path", filepath.Join(dir, "no.pem"), "--tls-key-path", filepath.Join(dir, "no.key"), "list"}, 2, "--tls-cert-path"},
		{[]string{"--tls-cert-path", toml, "list"}, 2, "give both --tls-cert-path and --tls-key-path"},
		{[]string{"--tls-ca-path", toml, "list"}, 2, "no PEM certificate"},
		{[]string{"-o", "yaml", "list"}, 2, `-o "yaml": want text or json`},
		{[]string{"version"}, 0, "drctl (devel)"},
	} {
		code, out, errs := run(tc.args...)
		if code != tc.code || !strings.Contains(out+errs, tc.want) {
			t.Errorf("drctl %v: exit %d\n%s%s\nwant exit %d and %q", tc.args, code, out, errs, tc.code, tc.want)
		}
	}
	// --api-key and --tls-server-name go on the connection: TLS to a
	// server that speaks plain gRPC fails, as it would with the CLI.
	code, _, errs := run("--address", srv.Address(), "--api-key", "k", "--tls-server-name", "temporal.example", "list")
	if code != 3 {
		t.Errorf("--api-key against a plain server: exit %d, want 3 (TLS attempted)\n%s", code, errs)
	}
}

// TestStreamedWaitForASiteWorker: in a log, a running step whose call
// comes to wait for a site's worker gets a line of its own saying so,
// though its state and tries are unchanged, and another when the wait
// ends; the table shows the wait in the step's note.
func TestStreamedWaitForASiteWorker(t *testing.T) {
	var b bytes.Buffer
	l := newLiveTable(&b, true)
	s := &workflows.Step{ID: "promote/west/db", Name: "promote db on west", State: workflows.StateRunning, Attempts: 1, Start: time.Now()}
	p := &workflows.Progress{Action: "failover", Plan: "shop", State: workflows.StateRunning, Steps: []*workflows.Step{s}}
	l.show(p, workflows.ActionID("shop"))
	note := "waits for site west's worker: PromoteVolume sits in task queue drover-site-west; the action goes on by itself"
	s.WaitsForWorker, s.Note = true, note
	l.show(p, workflows.ActionID("shop"))
	s.WaitsForWorker, s.Note = false, "PromoteVolume: taken by site west's worker after 40s without one"
	l.show(p, workflows.ActionID("shop"))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[1], "promote db on west  "+note) || !strings.Contains(lines[2], "taken by site west's worker") {
		t.Errorf("want a line as the step runs, one as it waits for west's worker and one as the wait ends:\n%s", b.String())
	}
	var tb bytes.Buffer
	renderSteps(&tb, &workflows.Progress{Action: "failover", Plan: "shop", State: workflows.StateRunning, Steps: []*workflows.Step{
		{ID: "promote/west/db", Name: "promote db on west", State: workflows.StateRunning, Attempts: 1, Retries: 1, LastError: "StartToClose timeout", WaitsForWorker: true, Note: note}}}, workflows.ActionID("shop"))
	if !strings.Contains(tb.String(), "waits for site west's worker") {
		t.Errorf("the step table hides the wait for west's worker:\n%s", tb.String())
	}
}

// TestPointsTableKeepsLongReasonsBelow: a point cut while a replica's
// replication could not be read names the group in the table, and the
// whole reason (a long error) goes on a line of its own below it, as a
// failed cut's error does: the table's rows stay one screen wide.
func TestPointsTableKeepsLongReasonsBelow(t *testing.T) {
	now := time.Date(2026, 11, 27, 13, 0, 0, 0, time.UTC)
	long := "0001: its replication could not be read: GetVolumeReplicationInfo on site \"east\" for volume group \"vg-0001\": NotFound: no sync to the peer has completed yet"
	l := pointsList{Plan: "shop", Points: []workflows.PointInTime{
		{ID: "20261127T125800Z", Site: "west", Taken: now.Add(-2 * time.Minute), NotInSync: long,
			Groups: []workflows.PointGroup{{Group: "0001", NotInSync: "its replication could not be read"}, {Group: "0002"}}},
		{ID: "20261127T125900Z", Site: "west", Taken: now.Add(-time.Minute), Error: "the cut failed on 0002: " + strings.Repeat("x", 100)},
	}}
	var b strings.Builder
	if err := renderPoints(&b, l, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "20261127T") && len(line) > 160 {
			t.Errorf("a row of %d characters: %q", len(line), line)
		}
	}
	for _, want := range []string{"NOT IN SYNC: 0001  -", "FAILED (below)", "  20261127T125800Z: not in sync when cut: " + long, "  20261127T125900Z: its cut failed: the cut failed on 0002: xxx"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
}

// TestPointsTableSaysWhereAPointWasCut: a point cut at the primary
// (policy.pointsInTime.cut: primary) shows where it was cut, and one
// whose copies still ship says so, with where it is usable meanwhile.
func TestPointsTableSaysWhereAPointWasCut(t *testing.T) {
	now := time.Date(2026, 11, 27, 13, 0, 0, 0, time.UTC)
	l := pointsList{Plan: "shop", Points: []workflows.PointInTime{
		{ID: "20261127T125800Z", Site: "west", CutAt: "east", Taken: now.Add(-2 * time.Minute), LastSync: now.Add(-2 * time.Minute), Synced: now.Add(-time.Minute)},
		{ID: "20261127T125900Z", Site: "west", CutAt: "east", Taken: now.Add(-time.Minute), LastSync: now.Add(-time.Minute)},
	}}
	var b strings.Builder
	if err := renderPoints(&b, l, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"20261127T125800Z  west (cut at east)", "in sync", "COPIES SHIPPING (below)",
		"  20261127T125900Z: cut at east; its copies have not all synced to west yet"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
}

// TestPointsJSONSaysWhenCopiesSynced: `drctl points -o json` gives a
// point cut at the primary its cutAt, and synced once its copies have
// all synced (docs/guides/point-in-time.md); a point still shipping
// has no synced.
func TestPointsJSONSaysWhenCopiesSynced(t *testing.T) {
	now := time.Date(2026, 11, 27, 13, 0, 0, 0, time.UTC)
	l := pointsList{Plan: "shop", Points: []workflows.PointInTime{
		{ID: "20261127T125800Z", Site: "west", CutAt: "east", Taken: now.Add(-2 * time.Minute), Synced: now.Add(-time.Minute)},
		{ID: "20261127T125900Z", Site: "west", CutAt: "east", Taken: now.Add(-time.Minute)},
	}}
	var b bytes.Buffer
	writeJSON(&b, l)
	var got struct {
		Points []map[string]any `json:"points"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%v:\n%s", err, b.String())
	}
	if len(got.Points) != 2 {
		t.Fatalf("%d points:\n%s", len(got.Points), b.String())
	}
	if got.Points[0]["synced"] != "2026-11-27T12:59:00Z" || got.Points[0]["cutAt"] != "east" {
		t.Errorf("the synced point: %v", got.Points[0])
	}
	if _, ok := got.Points[1]["synced"]; ok || got.Points[1]["cutAt"] != "east" {
		t.Errorf("the point still shipping: %v", got.Points[1])
	}
}

// TestFailoverToAPointSaysHowItsVolumesAreMade: the failover --point
// confirmation says the point's copies are promoted when the plan cuts
// its points at the primary, and volumes made of its snapshots when it
// cuts them at the replicas (docs/guides/point-in-time.md).
func TestFailoverToAPointSaysHowItsVolumesAreMade(t *testing.T) {
	at := time.Date(2026, 11, 27, 13, 0, 0, 0, time.UTC)
	p := &plans.Plan{Metadata: plans.Metadata{Name: "shop"}, VolumeGroups: make([]plans.VolumeGroup, 2),
		Policy: plans.Policy{PointsInTime: &plans.PointsInTime{Every: plans.Duration(time.Minute), Cut: plans.CutPrimary}}}
	fence := []string{"10.0.1.0/24"}
	if got := failoverText(p, "east", "west", fence, at); !strings.Contains(got, "force-promote the point's copies (cut at the primary, shipped to west)") ||
		strings.Contains(got, "snapshots") || !strings.Contains(got, "2026-11-27T13:00:00Z") {
		t.Errorf("cut at the primary: %s", got)
	}
	p.Policy.PointsInTime.Cut = plans.CutReplicas
	if got := failoverText(p, "east", "west", fence, at); !strings.Contains(got, "make volumes from the point's snapshots") || strings.Contains(got, "copies (cut") {
		t.Errorf("cut at the replicas: %s", got)
	}
	if got := failoverText(p, "east", "west", fence, time.Time{}); strings.Contains(got, "point") || !strings.Contains(got, "force-promote 2 volume groups on west") {
		t.Errorf("no point: %s", got)
	}
}

// TestFailoverAwayFromRestoredVolumesWarns: a failover from the site a
// failover to a point restored volumes at, before a reprotect, is warned
// of: the other site has no copy of them. Not from elsewhere, not once
// the record says nothing was restored.
func TestFailoverAwayFromRestoredVolumesWarns(t *testing.T) {
	rec := &workflows.PlanRecord{Plan: "shop", Restored: &workflows.RestoredEntry{Point: "20261127T125800Z", Site: "west", At: time.Date(2026, 11, 27, 13, 0, 0, 0, time.UTC)}}
	if got := restoredLoss("shop", rec, "west", "east"); !strings.Contains(got, "restored from point 20261127T125800Z") || !strings.Contains(got, "east holds no copy of them") ||
		!strings.Contains(got, "since then stays at west") {
		t.Errorf("from west: %q", got)
	}
	if got := restoredLoss("shop", rec, "east", "west"); got != "" {
		t.Errorf("from east: %q", got)
	}
	if got := restoredLoss("shop", &workflows.PlanRecord{Plan: "shop"}, "west", "east"); got != "" {
		t.Errorf("nothing restored: %q", got)
	}
	if got := restoredLoss("shop", nil, "west", "east"); got != "" {
		t.Errorf("no record: %q", got)
	}
}

// TestPointsSaysAFailbackPausedThem: while a failback pauses protection's
// points, `drctl points` says so, naming the run and since when, below
// the table (docs/guides/point-in-time.md; the DroverPointInTimeLate
// alert sends the operator here).
func TestPointsSaysAFailbackPausedThem(t *testing.T) {
	now := time.Date(2026, 11, 27, 13, 0, 0, 0, time.UTC)
	by := workflows.ActionHolder("drover-action-shop", "0f3c")
	ps := &workflows.ProtectState{Primary: "east", PointsPaused: &workflows.PointsPause{By: by, Since: now.Add(-90 * time.Second)}}
	l := pointsList{Plan: "shop", Points: []workflows.PointInTime{
		{ID: "20261127T125800Z", Site: "west", CutAt: "east", Taken: now.Add(-2 * time.Minute), LastSync: now.Add(-2 * time.Minute), Synced: now.Add(-time.Minute)},
	}, NotCut: whyNotCut(nil, ps, true)}
	var b strings.Builder
	if err := renderPoints(&b, l, now); err != nil {
		t.Fatal(err)
	}
	if want := "no points are cut: " + by + " paused them at "; !strings.Contains(b.String(), want) || !strings.Contains(b.String(), "1m30s ago while it runs") {
		t.Errorf("the points lack %q … 1m30s ago while it runs:\n%s", want, b.String())
	}
	l.NotCut = whyNotCut(nil, &workflows.ProtectState{Primary: "east"}, true)
	b.Reset()
	if err := renderPoints(&b, l, now); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "no points are cut") {
		t.Errorf("points not paused say they are:\n%s", b.String())
	}
}

// TestPointsSayWhyNoneAreCut: `drctl points` says why no point is cut
// now, text and JSON: a failover left the plan without a replica (from
// the running protection, or from the record while it does not answer),
// with the command that protects it again; protection does not run
// (whatever the record last heard from it). While protection runs
// protected, or does not answer while the record says it is protected,
// nothing is said.
func TestPointsSayWhyNoneAreCut(t *testing.T) {
	now := time.Date(2026, 11, 27, 13, 0, 0, 0, time.UTC)
	lost := &workflows.Unprotection{Lost: "east", Since: now.Add(-time.Hour), By: "drover-action-shop"}
	for _, tc := range []struct {
		name    string
		rec     *workflows.PlanRecord
		ps      *workflows.ProtectState
		running bool
		reason  string
		want    string
	}{
		{"unprotected", &workflows.PlanRecord{Plan: "shop", Protection: &workflows.ProtectionEntry{Primary: "west", Running: true}},
			&workflows.ProtectState{Primary: "west", Unprotected: lost}, true, "unprotected",
			"no points are cut: the plan has no replica since " + lost.Since.Local().Format(time.DateTime) + ", 1h0m0s ago (east was lost); drctl reprotect shop once east is back"},
		{"unprotected, as the record has it", &workflows.PlanRecord{Plan: "shop", Protection: &workflows.ProtectionEntry{Primary: "west", Running: true, Unprotected: lost}},
			nil, true, "unprotected", "no points are cut: the plan has no replica since"},
		{"unprotected, the record stale", &workflows.PlanRecord{Plan: "shop", Protection: &workflows.ProtectionEntry{Primary: "west", Running: true}},
			&workflows.ProtectState{Primary: "west", Unprotected: lost}, true, "unprotected", "(east was lost)"},
		{"protection stopped", &workflows.PlanRecord{Plan: "shop", Protection: &workflows.ProtectionEntry{Primary: "east", Unprotected: lost}},
			nil, false, "stopped", "no points are cut: the plan's protection is not running; drctl protect start"},
		{"no protection ever", &workflows.PlanRecord{Plan: "shop"}, nil, false, "stopped", "the plan's protection is not running"},
		{"protected", &workflows.PlanRecord{Plan: "shop", Protection: &workflows.ProtectionEntry{Primary: "east", Running: true}},
			&workflows.ProtectState{Primary: "east"}, true, "", ""},
		{"protection not answering", &workflows.PlanRecord{Plan: "shop", Protection: &workflows.ProtectionEntry{Primary: "east", Running: true}},
			nil, true, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := pointsList{Plan: "shop", Points: []workflows.PointInTime{{ID: "20261127T115800Z", Site: "west", Taken: now.Add(-62 * time.Minute)}},
				NotCut: whyNotCut(tc.rec, tc.ps, tc.running)}
			var b strings.Builder
			if err := renderPoints(&b, l, now); err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if l.NotCut != nil || strings.Contains(b.String(), "no points are cut") {
					t.Errorf("points cut say none are (%+v):\n%s", l.NotCut, b.String())
				}
				return
			}
			if !strings.Contains(b.String(), tc.want) {
				t.Errorf("the points lack %q:\n%s", tc.want, b.String())
			}
			var j bytes.Buffer
			writeJSON(&j, l)
			var got struct {
				NotCut map[string]any `json:"notCut"`
			}
			if err := json.Unmarshal(j.Bytes(), &got); err != nil || got.NotCut["reason"] != tc.reason {
				t.Errorf("JSON notCut %v (%v), want reason %q:\n%s", got.NotCut, err, tc.reason, j.String())
			}
		})
	}
}

// TestPointsTableSaysWhyAPointIsKept: a point kept beyond the policy,
// as the newest point in sync at its site, says so below the table.
func TestPointsTableSaysWhyAPointIsKept(t *testing.T) {
	now := time.Date(2026, 11, 27, 13, 0, 0, 0, time.UTC)
	kept := "the newest point in sync at west, kept though beyond the newest 2 (keep)"
	l := pointsList{Plan: "shop", Points: []workflows.PointInTime{
		{ID: "20261127T125700Z", Site: "west", Taken: now.Add(-3 * time.Minute), Kept: kept},
		{ID: "20261127T125800Z", Site: "west", Taken: now.Add(-2 * time.Minute), NotInSync: "db: replication DEGRADED"},
		{ID: "20261127T125900Z", Site: "west", Taken: now.Add(-time.Minute), NotInSync: "db: replication DEGRADED"},
	}}
	var b strings.Builder
	if err := renderPoints(&b, l, now); err != nil {
		t.Fatal(err)
	}
	if want := "  20261127T125700Z: " + kept + "\n"; !strings.Contains(b.String(), want) {
		t.Errorf("the points lack %q:\n%s", want, b.String())
	}
}
