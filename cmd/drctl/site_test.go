package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// siteStack is a dev server, a worker and a pair of simulated sites with
// groups vg-1 and vg-2 and the volume solo, and a directory for plans.
type siteStack struct {
	c          cli
	srv        *devserver.Server
	east, west *simtest.Site
	dir        string
}

// plan writes plan name into the stack's directory (or into dir when
// given): one group, data, from ref on each site; east fenced by cidr.
func (st *siteStack) plan(t *testing.T, dir, name, sites string, tier int, ref, cidr, extra string) string {
	t.Helper()
	if dir == "" {
		dir = st.dir
	}
	path := filepath.Join(dir, name+".yaml")
	body := fmt.Sprintf(`apiVersion: drover.dev/v1alpha1
kind: FailoverPlan
metadata: {name: %s, tier: %d}
sites:
  - name: east
    storage: {endpoint: %q}
    fence: {cidrs: [%s]}
    orchestrator: {exec: {}}
  - name: %s
    storage: {endpoint: %q}
    fence: {cidrs: [%s/32]}
    orchestrator: {exec: {}}
volumeGroups:
  - name: data
    sites: {east: %s, %s: %s}
policy:
  retry: {initialInterval: 50ms, maximumInterval: 200ms}
%s`, name, tier, st.east.Endpoint(), cidr, sites, st.west.Endpoint(), simtest.NodeB, ref, sites, ref, extra)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func newSiteStack(t *testing.T) *siteStack {
	return newSiteStackWith(t, "--allow-unsigned-plans")
}

// newSiteStackWith is newSiteStack with the worker's trust flags given.
func newSiteStackWith(t *testing.T, trust ...string) *siteStack {
	bins := bintest.Build(t, "drctl", "worker")
	srv := devserver.Start(t, nil)
	east, west := simtest.StartPair(t, simtest.Options{Interval: 50 * time.Millisecond,
		Groups:  []sim.GroupSpec{{ID: "vg-1", Volumes: []string{"v1"}}, {ID: "vg-2", Volumes: []string{"v2"}}},
		Volumes: []string{"solo"},
		TweakA:  func(c *sim.Config) { c.Name = "east" }, TweakB: func(c *sim.Config) { c.Name = "west" }})
	worker := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + srv.Address()}, filepath.Join(bins, "worker"), append([]string{"--metrics", ""}, trust...)...)
	simtest.Eventually(t, 30*time.Second, "the worker to start", func() bool { return strings.Contains(worker.Log.String(), "worker started") })
	return &siteStack{c: cli{t: t, bin: filepath.Join(bins, "drctl"), addr: srv.Address()}, srv: srv, east: east, west: west, dir: t.TempDir()}
}

// protect starts the protection of the plans from east and waits for a
// sync of each.
func (st *siteStack) protect(paths ...string) {
	for _, p := range paths {
		st.c.ok(nil, "protect", "start", p, "--primary", "east", "--interval", "200ms")
	}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".yaml")
		st.c.eventually("protection of "+name, name, func(s statusOut) bool {
			return s.Protection != nil && !s.Protection.Groups["data"].LastSync.IsZero()
		})
	}
}

// TestSiteFailover: `drctl failover --site east --to west DIR` fails over,
// as one site action, the three plans of a directory that use east (a
// fourth, on other sites, is left out with a note): tier 0 (shop and
// logs) before tier 1 (loose), one fence for the three plans' CIDRs that
// each plan's own failover finds made, each plan under its own action id
// with its RTO, and a site-wide RTO over them all.
func TestSiteFailover(t *testing.T) {
	st := newSiteStack(t)
	c, west, dir := st.c, st.west, st.dir
	cidrs := []string{simtest.NodeA + "/32", "127.0.0.9/32", "127.0.0.10/32"}
	shop := st.plan(t, "", "shop", "west", 0, "{groupID: vg-1}", cidrs[0], "")
	logs := st.plan(t, "", "logs", "west", 0, "{groupID: vg-2}", cidrs[1], "")
	loose := st.plan(t, "", "loose", "west", 1, "{volumes: [solo]}", cidrs[2], "")
	st.plan(t, "", "elsewhere", "north", 0, "{groupID: vg-1}", cidrs[0], "")
	st.protect(shop, logs, loose)
	st.east.Down()

	code, out, errs := c.run("-o", "json", "failover", "--site", "east", "--to", "west", dir, "--yes", "--wait")
	if code != 0 {
		t.Fatalf("site failover: exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(errs, `plan "elsewhere"`) {
		t.Errorf("no note of the plan left out: %s", errs)
	}
	var o outcome
	var res workflows.SiteFailoverResult
	if err := json.Unmarshal([]byte(out), &o); err != nil || json.Unmarshal(o.Result, &res) != nil {
		t.Fatalf("site failover output: %v\n%s", err, out)
	}
	if o.WorkflowID != workflows.SiteActionID("east") || o.Status != "completed" || len(res.Plans) != 3 {
		t.Fatalf("site failover: %+v %+v", o, res)
	}
	for _, p := range res.Plans {
		if p.State != workflows.StateCompleted || p.RTO <= 0 || p.RTO > res.RTO || p.Workflow != workflows.ActionID(p.Plan) {
			t.Errorf("plan %s: %+v, want completed with an RTO within the site's %v", p.Plan, p, res.RTO)
		}
	}
	// Tier 1 started once tier 0 had ended.
	at := func(plan string) *workflows.Step {
		i := slices.IndexFunc(res.Steps, func(s *workflows.Step) bool { return s.ID == "plan-failover/"+plan })
		if i < 0 {
			t.Fatalf("no step for plan %s in %+v", plan, res.Steps)
		}
		return res.Steps[i]
	}
	if l := at("loose"); l.Start.Before(at("shop").End) || l.Start.Before(at("logs").End) {
		t.Errorf("tier 1 (loose) started %v, before tier 0 ended (shop %v, logs %v)", l.Start, at("shop").End, at("logs").End)
	}
	// One fence, for all three plans' CIDRs; each plan found its own.
	got := west.FencedCIDRs()
	slices.Sort(got)
	slices.Sort(cidrs)
	if !slices.Equal(got, cidrs) {
		t.Errorf("west lists %v as fenced, want %v", got, cidrs)
	}
	for _, name := range []string{"shop", "logs", "loose"} {
		var po outcome
		c.ok(&po, "watch", name)
		var fr workflows.FailoverResult
		if err := json.Unmarshal(po.Result, &fr); err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(fr.Steps, func(s *workflows.Step) bool { return s.ID == "fence/east" })
		if i < 0 || !strings.Contains(fr.Steps[i].Output, "by the site action "+workflows.SiteActionID("east")) {
			t.Errorf("plan %s's fence step: %+v, want the site action's fence found", name, fr.Steps)
		}
	}
	// The text form: the step table, then a row per plan.
	code, out, errs = c.run("watch", workflows.SiteActionID("east"))
	t.Logf("drctl watch %s:\n%s", workflows.SiteActionID("east"), out)
	for _, want := range []string{"site failover from east ended", "site-wide RTO", "fail over plan loose", "tier 1: 1 plan(s)"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("watch of the site action: exit %d, lacks %q\n%s%s", code, want, out, errs)
		}
	}
	if r := sim.Check(west.Snapshot()); !r.OK() {
		t.Errorf("invariants on west: %s", r)
	}
}

// siteFailoverWithBusyPlan starts a site failover of east's two plans,
// shop (tier 0) and loose (tier 1), with east down and loose already
// running a failover of its own that waits at its beforeFence gate; it
// returns the stack and the site action's workflow id.
func siteFailoverWithBusyPlan(t *testing.T) (*siteStack, string) {
	t.Helper()
	st := newSiteStack(t)
	c := st.c
	shop := st.plan(t, "", "shop", "west", 0, "{groupID: vg-1}", simtest.NodeA+"/32", "")
	loose := st.plan(t, "", "loose", "west", 1, "{volumes: [solo]}", "127.0.0.10/32", "")
	gated := st.plan(t, t.TempDir(), "loose", "west", 1, "{volumes: [solo]}", "127.0.0.10/32", "  approvals: [beforeFence]\n")
	st.protect(shop, loose)
	st.east.Down()
	c.ok(nil, "failover", gated, "--to", "west", "--yes")
	c.eventually("loose's gate", "loose", func(s statusOut) bool { return stepIn(s, "waiting for approval") })
	c.ok(nil, "failover", "--site", "east", "--to", "west", st.dir, "--yes")
	return st, workflows.SiteActionID("east")
}

// TestSiteFailoverLeavesABusyPlanAlone: a plan already running an action
// (a failover waiting at its approval gate) is not restarted by the site
// action, nor are its clients in the site's fence: it is reported busy
// and its tier pauses the site action. drctl
// resolve --retry on the site action tries the plan again (still busy,
// it pauses again, the plan's own action untouched); once that action is
// cancelled, --retry fails the plan over and the site action completes.
// A second site action on the site meanwhile is refused (exit 1).
func TestSiteFailoverLeavesABusyPlanAlone(t *testing.T) {
	st, site := siteFailoverWithBusyPlan(t)
	c := st.c
	var pausedWith string
	tries := func() int {
		code, out, _ := c.run("-o", "json", "status", site)
		var s struct {
			Action *struct{ Progress *workflows.Progress }
		}
		if code != 0 || json.Unmarshal([]byte(out), &s) != nil || s.Action == nil || s.Action.Progress == nil {
			return 0
		}
		for _, st := range s.Action.Progress.Steps {
			if st.ID == "tier/1" && st.State == workflows.StatePaused {
				pausedWith = st.LastError
				return st.Attempts
			}
		}
		return 0
	}
	simtest.Eventually(t, time.Minute, "tier 1 to pause", func() bool { return tries() == 1 })
	// The pause says what loose is busy with, and how to end it.
	for _, want := range []string{`plan "loose" is running a failover of its own`, "drctl cancel " + workflows.ActionID("loose")} {
		if !strings.Contains(pausedWith, want) {
			t.Errorf("tier 1 paused with %q; want it to say %q", pausedWith, want)
		}
	}
	// Left alone: the site fence took shop's clients, not loose's, which
	// its own failover, waiting at its gate, has not fenced yet.
	if got := st.west.FencedCIDRs(); !slices.Contains(got, simtest.NodeA+"/32") || slices.Contains(got, "127.0.0.10/32") {
		t.Fatalf("west fences %v while loose's own failover waits at its gate; want shop's %s/32 and not loose's 127.0.0.10/32", got, simtest.NodeA)
	}
	// One site action per site at a time: a second, paused or not, is
	// refused and names the running one.
	c.want(1, "a site action on east is running already (workflow "+site, "failover", "--site", "east", "--to", "west", st.dir, "--yes")
	// These ask first; answered no, they do nothing (the steps below
	// find the gate and the pause as they were).
	declined(t, c, "approve", "loose")
	declined(t, c, "cancel", "loose")
	declined(t, c, "resolve", site, "--skip")
	declined(t, c, "resolve", site, "--abort")
	declined(t, c, "failover", "--site", "east", "--to", "west", st.dir)
	c.ok(nil, "resolve", site, "--retry")
	simtest.Eventually(t, time.Minute, "tier 1 to pause again", func() bool { return tries() == 2 })
	c.eventually("loose's own failover still at its gate", "loose", func(s statusOut) bool {
		return s.Action != nil && s.Action.Status == "running" && stepIn(s, "waiting for approval")
	})
	c.ok(nil, "cancel", "loose", "--yes")
	c.eventually("loose's own failover cancelled", "loose", func(s statusOut) bool { return s.Action != nil && s.Action.Status != "running" })
	c.ok(nil, "resolve", site, "--retry")
	var o outcome
	c.ok(&o, "watch", site)
	var res workflows.SiteFailoverResult
	if err := json.Unmarshal(o.Result, &res); err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Plans {
		if p.State != workflows.StateCompleted {
			t.Errorf("plan %s: %+v, want completed after the retry", p.Plan, p)
		}
	}
	if i := slices.IndexFunc(res.Steps, func(s *workflows.Step) bool { return s.ID == "tier/1" }); i < 0 || res.Steps[i].Attempts != 3 {
		t.Errorf("tier 1: %+v, want done at its third try", res.Steps)
	}
}

// TestSiteRoundTrip: after east's site failover of three plans in two
// tiers, east comes back: drctl reprotect --site east makes east the
// replica of every plan, tier by tier, and lifts the fences; drctl drill
// --site west --to east --action failback rehearses the failback of all
// three and changes nothing; drctl failback --site west --to east brings
// all three home,
// tier by tier, each under its own action id. East is the primary of
// every group at the end, nothing is fenced, and drctl report renders the
// site action with its plans' outcomes.
func TestSiteRoundTrip(t *testing.T) {
	st := newSiteStack(t)
	c, east, west, dir := st.c, st.east, st.west, st.dir
	st.plan(t, "", "shop", "west", 0, "{groupID: vg-1}", simtest.NodeA+"/32", "")
	st.plan(t, "", "logs", "west", 0, "{groupID: vg-2}", "127.0.0.9/32", "")
	st.plan(t, "", "loose", "west", 1, "{volumes: [solo]}", "127.0.0.10/32", "")
	st.protect(filepath.Join(dir, "shop.yaml"), filepath.Join(dir, "logs.yaml"), filepath.Join(dir, "loose.yaml"))
	east.Down()
	site := func(args ...string) workflows.SiteFailoverResult {
		t.Helper()
		var o outcome
		code, out, errs := c.run(append([]string{"-o", "json"}, args...)...)
		if code != 0 || json.Unmarshal([]byte(out), &o) != nil {
			t.Fatalf("drctl %v: exit %d\n%s%s", args, code, out, errs)
		}
		_ = errs
		var res workflows.SiteFailoverResult
		if err := json.Unmarshal(o.Result, &res); err != nil || o.Status != "completed" || len(res.Plans) != 3 {
			t.Fatalf("drctl %v: %v %+v %+v", args, err, o, res)
		}
		for _, p := range res.Plans {
			if p.State != workflows.StateCompleted || p.Workflow != workflows.ActionID(p.Plan) {
				t.Fatalf("drctl %v: plan %s: %+v", args, p.Plan, p)
			}
		}
		return res
	}
	site("failover", "--site", "east", "--to", "west", dir, "--yes", "--wait")
	if err := east.Up(); err != nil {
		t.Fatal(err)
	}

	rp := site("reprotect", "--site", "east", dir, "--yes", "--wait")
	at := func(res workflows.SiteFailoverResult, id string) *workflows.Step {
		i := slices.IndexFunc(res.Steps, func(s *workflows.Step) bool { return s.ID == id })
		if i < 0 {
			t.Fatalf("no step %s in %+v", id, res.Steps)
		}
		return res.Steps[i]
	}
	if l := at(rp, "plan-reprotect/loose"); l.Start.Before(at(rp, "plan-reprotect/shop").End) {
		t.Errorf("tier 1 reprotected before tier 0 ended")
	}
	if got := west.FencedCIDRs(); len(got) != 0 {
		t.Errorf("after the site reprotect, west lists %v as fenced", got)
	}

	before := east.Snapshot()
	dr := site("drill", "--site", "west", "--to", "east", "--action", "failback", dir, "--wait")
	if dr.Action != workflows.SiteAction(workflows.SiteDrillAction) {
		t.Errorf("the drill's action: %q", dr.Action)
	}
	if d := sim.ReplicasUnchanged(before, east.Snapshot(), false); len(d) != 0 {
		t.Fatalf("the site drill changed east: %v", d)
	}

	fb := site("failback", "--site", "west", "--to", "east", dir, "--yes", "--wait")
	if l := at(fb, "plan-failback/loose"); l.Start.Before(at(fb, "plan-failback/logs").End) {
		t.Errorf("tier 1 failed back before tier 0 ended")
	}
	for _, u := range east.Snapshot().Units {
		if u.Role != sim.RolePrimary {
			t.Errorf("east's %s is %s after the site failback", u.Key(), u.Role)
		}
	}
	for _, name := range []string{"shop", "logs", "loose"} {
		simtest.Eventually(t, 30*time.Second, name+"'s record of east as primary", func() bool {
			code, out, _ := c.run("-o", "json", "status", name)
			var r recordOut
			return code == 0 && json.Unmarshal([]byte(out), &r) == nil && r.Record != nil && r.Record.Primary == "east" && len(r.Record.Fences) == 0
		})
	}
	if r := sim.Check(east.Snapshot(), west.Snapshot()); !r.OK() {
		t.Errorf("invariants: %s", r)
	}

	code, md, errs := c.run("report", workflows.SiteActionID("west"))
	for _, want := range []string{"# Site failback: logs, loose, shop", "## Plans' outcomes", "| loose | 1 | completed |"} {
		if code != 0 || !strings.Contains(md, want) {
			t.Errorf("the report of the site failback lacks %q: exit %d\n%s%s", want, code, md, errs)
		}
	}
	c.want(2, "not --site west", "failback", "--site", "west", "--to", "west", dir, "--yes")

	// Every plan is home now: a site failback or reprotect fits none of
	// them; each is left out with a note saying why, and nothing starts.
	for _, args := range [][]string{
		{"failback", "--site", "west", "--to", "east", dir, "--yes"},
		{"reprotect", "--site", "east", dir, "--yes"},
	} {
		code, out, errs := c.run(args...)
		if code != 2 || !strings.Contains(errs, "none of the 3 plan(s) given can take part") {
			t.Errorf("drctl %v with every plan home: exit %d, want 2 and none of the plans taking part\n%s%s", args, code, out, errs)
		}
		for _, name := range []string{"shop", "logs", "loose"} {
			if !strings.Contains(errs, fmt.Sprintf("note: plan %q left out: ", name)) {
				t.Errorf("drctl %v: no note leaving out %s:\n%s", args, name, errs)
			}
		}
	}
}

// TestPartialSiteActionListsPartial: a site action whose paused tier the
// operator skips completes in Temporal with a plan left behind; drctl
// list (text and JSON) calls it partial, not completed, as its page and
// report do.
func TestPartialSiteActionListsPartial(t *testing.T) {
	st, site := siteFailoverWithBusyPlan(t)
	c := st.c
	c.eventually("tier 1 to pause on busy loose", site, func(s statusOut) bool { return stepIn(s, "paused") })
	c.ok(nil, "resolve", site, "--skip", "--yes")
	// watch exits 1 for an action that left plans behind.
	code, out, errs := c.run("-o", "json", "watch", site)
	var o outcome
	if err := json.Unmarshal([]byte(out), &o); code != 1 || err != nil {
		t.Fatalf("watch of the partial site action: exit %d (want 1), %v\n%s%s", code, err, out, errs)
	}
	var res workflows.SiteFailoverResult
	if err := json.Unmarshal(o.Result, &res); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.LeftBehind, []string{"loose"}) {
		t.Fatalf("the site action left behind %v, want [loose]", res.LeftBehind)
	}
	var listed []struct{ WorkflowID, Status string }
	c.ok(&listed, "list")
	i := slices.IndexFunc(listed, func(x struct{ WorkflowID, Status string }) bool { return x.WorkflowID == site })
	if i < 0 || listed[i].Status != workflows.StatePartial {
		t.Fatalf("list -o json: %+v; want %s partial", listed, site)
	}
	code, out, errs = c.run("list")
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, site) {
			line = l
		}
	}
	if code != 0 || !strings.Contains(line, " partial ") || strings.Contains(line, "completed") {
		t.Fatalf("list: exit %d, the site action's line %q; want it partial\n%s%s", code, line, out, errs)
	}
}
