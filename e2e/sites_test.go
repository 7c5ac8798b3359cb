package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/internal/stack"
	"github.com/drover-dr/drover/sim"
	"github.com/drover-dr/drover/workflows"
)

// sitesUp brings up the rig: the network, then at each site PostgreSQL,
// its Temporal cluster, its storage and its worker; the two clusters
// joined, the drover namespace global and active at east, Drover's
// search attributes registered once, on east. With outside, Temporal
// lives in a third location instead (a namespace of its own on the WAN,
// with its PostgreSQL and the only cluster), which both sites' workers
// poll.
func sitesUp(t *testing.T, groups []sim.GroupSpec, outside bool) *rig {
	if sitesBin == "" {
		t.Skip("the sites-as-networks test runs with make e2e-sites (DROVER_E2E_SITES names the directory of temporal-server and temporal-sql-tool)")
	}
	if why := canNetns(); why != "" {
		t.Skip("the sites-as-networks test needs network namespaces: " + why)
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	pgBin := stack.PostgresBin()
	if pgBin == "" {
		t.Skip("PostgreSQL is not installed (Debian's postgresql package)")
	}
	sweepStaleNetns()
	r := &rig{t: t, dir: t.TempDir()}
	t.Cleanup(func() {
		if t.Failed() {
			if e := r.ended(); len(e) > 0 {
				t.Logf("processes that ended on their own: %v", e)
			}
			r.dumpLogs()
		}
		r.close()
	})
	var err error
	r.pgDir, err = os.MkdirTemp("", "drover-sites-pg-")
	if err != nil {
		t.Fatal(err)
	}
	cred := pgUser(t)
	if err := os.Chown(r.pgDir, int(cred.Uid), int(cred.Gid)); err != nil {
		t.Fatal(err)
	}
	r.net, err = newWAN()
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"east", "west"} {
		s, err := r.net.addSite(name, i+1)
		if err != nil {
			t.Fatal(err)
		}
		r.up = append(r.up, s)
	}
	east, west := r.up[0], r.up[1]
	rtt, err := r.net.roundTrip(east, west)
	if err != nil {
		t.Fatalf("the WAN between east and west: %v", err)
	}
	r.say("network: %s (a hub delaying each frame %v), %s (%s, clients %s), %s (%s, clients %s); round trip east→west %v (TCP connect, least of 5)",
		r.net.ns, wanDelay, east.ns, east.host, east.client, west.ns, west.host, west.client, rtt.Round(100*time.Microsecond))
	// The rig's own check: a WAN that does not delay would make every
	// figure below a loopback's.
	if rtt < 2*wanDelay {
		t.Fatalf("the WAN's round trip is %v, less than twice its delay %v: the hub does not delay", rtt, wanDelay)
	}
	r.keys()
	start := time.Now()
	temporal := filepath.Join(bin, "temporal")
	if outside {
		dc, err := r.net.addSite("dc3", 3)
		if err != nil {
			t.Fatal(err)
		}
		r.say("Temporal outside both sites: %s (%s)", dc.ns, dc.host)
		for _, s := range r.up {
			s.temporal = dc
		}
		r.startPostgres(dc, pgBin)
		r.startTemporal(dc, 1, false)
		r.retry(dc, 2*time.Minute, temporal, "operator", "cluster", "health", "--address", dc.frontend())
		r.retry(dc, 2*time.Minute, temporal, "operator", "namespace", "create", "--address", dc.frontend(), "--namespace", sitesNamespace, "--retention", "72h")
		r.retry(dc, time.Minute, temporal, r.searchAttributes(dc)...)
		r.say("the one Temporal cluster serves namespace %s with the search attributes (%v)", sitesNamespace, time.Since(start).Round(time.Millisecond))
	} else {
		r.twoClusters(pgBin, start)
	}
	for i, s := range r.up {
		r.startSim(s, r.up[1-i], i == 0, groups)
	}
	for _, s := range r.up {
		simtest.Eventually(t, 30*time.Second, "storage of "+s.name, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := s.control_().State(ctx)
			return err == nil
		})
		r.startWorker(s)
	}
	r.say("storage and a worker at each site (%v)", time.Since(start).Round(time.Millisecond))
	return r
}

// activeAt is the cluster that site's cluster names active for the
// namespace ("" when it does not answer).
func activeAt(c client.Client) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: sitesNamespace})
	if err != nil {
		return ""
	}
	return d.GetReplicationConfig().GetActiveClusterName()
}

// TestSitesAsNetworks: Drover survives the disaster it manages. Two
// sites as network namespaces joined by a WAN with 20 ms of delay, each
// with its storage, its worker and its own Temporal cluster; the drover
// namespace global, active at east. East is cut off (a partition: its
// processes run on) while protection runs and its application writes.
// At west drctl failover finds the namespace active on a cluster it
// cannot reach and says so; with --take-over-namespace it makes west's
// cluster active and fails over. East, isolated, still thinks itself
// active, and its cluster restarted alone comes back so. The link returns: Temporal keeps west's history, east's
// clients are fenced on west's storage, reprotect and failback work, and
// every invariant holds.
func TestSitesAsNetworks(t *testing.T) { sitesCycle(t, false) }

// TestSitesWithTemporalOutside is the same with the other layout: the
// one Temporal cluster in a third location (a namespace of its own on
// the WAN), both sites' workers polling it. East's loss changes nothing
// for Temporal: drctl failover at west fails over as always.
func TestSitesWithTemporalOutside(t *testing.T) { sitesCycle(t, true) }

func sitesCycle(t *testing.T, outside bool) {
	groups := sim.GenerateGroups(4, 1)
	r := sitesUp(t, groups, outside)
	east, west := r.up[0], r.up[1]
	ce, cw := r.client(east), r.client(west)
	plan := r.sitesPlan(groups)
	simtest.Eventually(t, time.Minute, "east's worker to poll east's cluster", east.workerReady)
	r.mustDrctl(east, "protect", "start", plan, "--primary", "east", "--interval", "1s")
	simtest.Eventually(t, time.Minute, "protection to record a sync of every group", func() bool {
		ps, err := workflows.ReadProtect(context.Background(), ce, "sites")
		return err == nil && ps != nil && len(ps.Groups) == len(groups) && !ps.LastSync().IsZero()
	})
	if outside {
		r.say("protected; the one cluster outside serves the namespace")
	} else {
		r.say("protected; east's cluster says the namespace is active at %q, west's at %q", activeAt(ce), activeAt(cw))
	}

	if outside {
		simtest.Eventually(t, time.Minute, "west's worker to poll the cluster outside", west.workerReady)
		r.say("both sites' workers poll the one cluster outside")
	} else {
		// West's worker polls nothing while its cluster is standby.
		r.waitLog("worker-west", "paused: the namespace is not active on this worker's Temporal cluster", time.Minute)
		if west.workerReady() {
			t.Fatal("west's worker says ready (polling) while its cluster is standby for the namespace")
		}
		r.say("west's worker is paused: its cluster is standby")
	}

	vols := make([]string, len(groups))
	for i, g := range groups {
		vols[i] = g.Volumes[0]
	}
	apps := r.startApps(vols)
	apps.wait(t, "east", "acknowledged", acked, 40)

	// East is cut off: a partition, every process of east runs on.
	cutAt := time.Now()
	if err := r.net.cut("east"); err != nil {
		t.Fatal(err)
	}
	r.zombie = east
	r.say("PARTITION: east cut off from the WAN at %s (its processes run on)", cutAt.UTC().Format("15:04:05.000"))
	apps.wait(t, "east", "acknowledged by east's storage, cut off", acked, 20)

	if outside {
		// West fails over as always: Temporal is not at east.
		foStart := time.Now()
		out := r.mustDrctl(west, "failover", plan, "--to", "west", "--yes", "--wait")
		foWall := time.Since(foStart)
		if strings.Contains(out, "taking namespace") || strings.Contains(out, "is active on Temporal cluster") {
			t.Fatalf("drctl spoke of a namespace takeover with one cluster outside both sites:\n%s", out)
		}
		var res workflows.FailoverResult
		if err := cw.GetWorkflow(context.Background(), workflows.ActionID("sites"), "").Get(context.Background(), &res); err != nil {
			t.Fatal(err)
		}
		if res.RTO <= 0 {
			t.Fatalf("failover result: RTO %v", res.RTO)
		}
		r.say("FAILOVER at west (no takeover: Temporal lives outside): failover RTO %v (RPO estimate %v, known %v); drctl start to workloads healthy %v",
			res.RTO, res.RPO, res.RPOKnown, foWall.Round(time.Millisecond))
		if !r.runningOn("west") {
			t.Fatal("the application does not run on west")
		}
		apps.wait(t, "west", "acknowledged", acked, 40)
		apps.wait(t, "east", "acknowledged by the cut-off east", acked, 10)
		r.say("ZOMBIE: east's worker cannot reach Temporal; its application writes on (%v)", apps.counts("east"))
		healAt := time.Now()
		if err := r.net.heal("east"); err != nil {
			t.Fatal(err)
		}
		r.say("HEAL: east back on the WAN at %s, after a partition of %v", healAt.UTC().Format("15:04:05.000"), healAt.Sub(cutAt).Round(time.Millisecond))
		r.afterHeal(t, plan, apps, vols)
		return
	}

	// At west: the namespace is active on a cluster drctl cannot reach.
	out, code := r.drctl(west, "failover", plan, "--to", "west", "--yes")
	if code != 1 || !strings.Contains(out, "is active on Temporal cluster east") || !strings.Contains(out, "--take-over-namespace") {
		t.Fatalf("failover at west with the namespace active on unreachable east: exit %d, want 1 naming the cluster and the flag:\n%s", code, out)
	}
	if a := activeAt(cw); a != "east" {
		t.Fatalf("after a refused failover west's cluster says active %q, want east (nothing changed)", a)
	}
	r.say("drctl failover at west without --take-over-namespace: refused (exit 1), namespace still active at east")
	// A view at west cannot read what lives at east: it says so, exit 3.
	out, code = r.drctl(west, "status", plan)
	if code != 3 || !strings.Contains(out, "is active on Temporal cluster east") || strings.Contains(out, "protection: running") {
		t.Fatalf("status at west with the namespace active on unreachable east: exit %d, want 3 naming the cluster, no stale protection:\n%s", code, out)
	}
	r.say("drctl status at west: the active cluster east does not answer (exit 3)")

	foStart := time.Now()
	out = r.mustDrctl(west, "failover", plan, "--to", "west", "--yes", "--wait", "--take-over-namespace")
	foWall := time.Since(foStart)
	takeover := takeoverTime(t, out)
	var res workflows.FailoverResult
	if err := cw.GetWorkflow(context.Background(), workflows.ActionID("sites"), "").Get(context.Background(), &res); err != nil {
		t.Fatal(err)
	}
	if res.RTO <= 0 {
		t.Fatalf("failover result: RTO %v", res.RTO)
	}
	r.say("FAILOVER at west: namespace takeover %v, failover RTO %v (RPO estimate %v, known %v); drctl start to workloads healthy %v",
		takeover, res.RTO, res.RPO, res.RPOKnown, foWall.Round(time.Millisecond))
	if !r.runningOn("west") {
		t.Fatal("the application does not run on west")
	}
	apps.wait(t, "west", "acknowledged", acked, 40)

	// The zombie side: east's cluster still names itself active, its
	// worker still polls it, its application still writes on its storage.
	if a := activeAt(ce); a != "east" {
		t.Fatalf("east's isolated cluster says active %q; want east (it cannot know)", a)
	}
	if !east.workerReady() {
		t.Fatal("east's worker stopped polling its isolated cluster, which still names itself active")
	}
	apps.wait(t, "east", "acknowledged by the zombie east", acked, 10)
	r.say("ZOMBIE: east's cluster says active %q, its worker polls, its application writes on (%v)", activeAt(ce), apps.counts("east"))

	// The trap of an isolated cluster restarted alone: it comes back
	// naming itself active (nothing can tell it otherwise) and east's
	// worker acts again. The heal must still keep west's history and
	// every invariant below must still hold.
	restartAt := time.Now()
	r.temporal["east"].stop()
	r.temporal["east"] = r.startTemporal(east, 1, true)
	r.retry(east, 2*time.Minute, filepath.Join(bin, "temporal"), "operator", "cluster", "health", "--address", east.frontend())
	serving := time.Since(restartAt)
	if a := activeAt(ce); a != "east" {
		t.Fatalf("east's cluster, restarted alone, says active %q; want east (it cannot learn otherwise)", a)
	}
	simtest.Eventually(t, 2*time.Minute, "east's worker to poll its restarted cluster", east.workerReady)
	apps.wait(t, "east", "acknowledged by the zombie east after its cluster's restart", acked, 10)
	r.say("ZOMBIE RESTARTED: east's cluster, restarted alone, serves after %v and says active %q; east's worker polls it again", serving.Round(time.Millisecond), activeAt(ce))

	// Heal: the namespace moves to west on east's cluster too, east's
	// worker pauses, Temporal keeps west's history.
	healAt := time.Now()
	if err := r.net.heal("east"); err != nil {
		t.Fatal(err)
	}
	r.say("HEAL: east back on the WAN at %s, after a partition of %v", healAt.UTC().Format("15:04:05.000"), healAt.Sub(cutAt).Round(time.Millisecond))
	simtest.Eventually(t, 2*time.Minute, "east's cluster to learn that the namespace is active at west", func() bool { return activeAt(ce) == "west" })
	learned := time.Since(healAt)
	r.waitLog("worker-east", "paused: the namespace is not active on this worker's Temporal cluster", time.Minute)
	r.say("east's cluster says active west %v after the heal; east's worker paused", learned.Round(time.Millisecond))
	simtest.Eventually(t, 2*time.Minute, "west's failover to replicate to east's cluster", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d, err := ce.DescribeWorkflowExecution(ctx, workflows.ActionID("sites"), "")
		return err == nil && d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	})

	// Temporal keeps west's history: the protection east's zombie worker
	// went on running is west's on both clusters.
	var hl int64
	simtest.Eventually(t, 2*time.Minute, "the protection's history to be west's on both clusters", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		de, err1 := ce.DescribeWorkflowExecution(ctx, workflows.ProtectID("sites"), "")
		dw, err2 := cw.DescribeWorkflowExecution(ctx, workflows.ProtectID("sites"), "")
		if err1 != nil || err2 != nil {
			return false
		}
		ie, iw := de.GetWorkflowExecutionInfo(), dw.GetWorkflowExecutionInfo()
		hl = iw.GetHistoryLength()
		return ie.GetExecution().GetRunId() == iw.GetExecution().GetRunId() && ie.GetHistoryLength() == iw.GetHistoryLength()
	})
	r.say("HISTORY: the protection's run on east's cluster is west's (%d events on both)", hl)

	r.afterHeal(t, plan, apps, vols)

	// The namespace back at east, both sides up: east's worker polls
	// again, west's pauses, and east's acts (a drill).
	r.tool(west, filepath.Join(bin, "temporal"), "operator", "namespace", "update", "--address", west.frontend(), "--namespace", sitesNamespace, "--active-cluster", "east")
	simtest.Eventually(t, time.Minute, "both clusters to name east active", func() bool { return activeAt(ce) == "east" && activeAt(cw) == "east" })
	r.waitLog("worker-east", "resumed: the namespace is active on this worker's Temporal cluster again", time.Minute)
	simtest.Eventually(t, time.Minute, "east's worker to poll again and west's to pause", func() bool {
		b, _ := os.ReadFile(filepath.Join(r.dir, "worker-west.log"))
		return east.workerReady() && !west.workerReady() && strings.Count(string(b), "paused: the namespace is not active") >= 2
	})
	r.mustDrctl(east, "drill", plan, "--to", "west", "--wait")
	r.say("NAMESPACE BACK at east: east's worker resumed, west's paused; a drill from east ran on east's worker")
}

// takeoverRE is drctl's line once the namespace is active here.
var takeoverRE = regexp.MustCompile(`namespace \S+ is active on \S+ \(failover version \d+ -> \d+\) after (\S+)`)

// takeoverTime is how long drctl's namespace takeover took, as it says.
func takeoverTime(t *testing.T, out string) time.Duration {
	t.Helper()
	m := takeoverRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("drctl did not say it took the namespace over:\n%s", out)
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// waitLog waits until a process's log holds text.
func (r *rig) waitLog(name, text string, limit time.Duration) {
	r.t.Helper()
	simtest.Eventually(r.t, limit, name+" to log "+strconv.Quote(text), func() bool {
		b, _ := os.ReadFile(filepath.Join(r.dir, name+".log"))
		return strings.Contains(string(b), text)
	})
}

// runningOn reports whether the application's marker says it runs on
// site.
func (r *rig) runningOn(site string) bool {
	_, err := os.Stat(filepath.Join(r.dir, "app-running."+site))
	return err == nil
}

// states reads both sites' storage state, each from inside its site.
func (r *rig) states() []*sim.State {
	r.t.Helper()
	var out []*sim.State
	for _, s := range r.up {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := s.control_().State(ctx)
		cancel()
		if err != nil {
			r.t.Fatalf("state of %s: %v", s.name, err)
		}
		out = append(out, st)
	}
	return out
}

// check runs the simulator's invariant checker over both sites. Once
// east has been cut off (zombie set) it allows one kind of violation
// only, the partition's own: east's storage, which nothing could reach,
// accepted writes from east's own clients after west was promoted,
// until it learned of the fence from west when the link came back.
// Those writes are the RPO's loss (reprotect discards them). Every other
// violation fails the test, and so does a write east accepted after it
// learned of the fence, or one on west from east's clients.
func (r *rig) check() (*sim.Report, int) {
	r.t.Helper()
	states := r.states()
	rep := sim.Check(states...)
	if rep.OK() {
		return rep, 0
	}
	if r.zombie == nil {
		r.t.Fatalf("invariants violated:\n%v", rep)
	}
	zombie := r.zombie
	var east, west *sim.State
	for _, st := range states {
		switch st.Site {
		case zombie.name:
			east = st
		default:
			west = st
		}
	}
	// When east learned that its clients are fenced.
	learned := time.Time{}
	for _, e := range east.FenceLog {
		if e.Fenced && strings.HasPrefix(e.CIDR, zombie.client+"/") {
			learned = e.Learned
			if learned.IsZero() {
				learned = e.Time
			}
			break
		}
	}
	writes := 0
	for _, u := range east.Units {
		wu := west.Unit(u.Key())
		if wu == nil {
			continue
		}
		for _, w := range u.Writes {
			// As the checker has it: west promoted past the write's
			// epoch before east accepted it.
			after := slices.ContainsFunc(wu.RoleChanges, func(rc sim.RoleChange) bool {
				return rc.Role == sim.RolePrimary && rc.Epoch > w.Epoch && rc.Time.Before(w.Time)
			})
			if !after {
				continue
			}
			if w.Client != zombie.client {
				r.t.Fatalf("%s on east: write seq %d from %s after west's promotion, not from east's own clients", u.Key(), w.Seq, w.Client)
			}
			if learned.IsZero() || w.Time.After(learned) {
				r.t.Fatalf("%s on east: write seq %d at %s accepted after east learned of the fence (%s)", u.Key(), w.Seq, w.Time.Format(time.RFC3339Nano), learned.Format(time.RFC3339Nano))
			}
			writes++
		}
	}
	for _, v := range rep.Violations {
		if v.Kind != sim.SplitBrain || v.Site != zombie.name {
			r.t.Fatalf("invariants violated beyond the partition's own writes on east:\n%v", rep)
		}
	}
	if len(rep.Violations) != writes {
		r.t.Fatalf("%d violations, %d writes east accepted while cut off after west's promotion: they must be the same:\n%v", len(rep.Violations), writes, rep)
	}
	return rep, writes
}

// apps are the sites' applications, each writing from its site's client
// address to its site's storage every 20 ms.
type apps struct {
	w    map[string]*stack.Writer
	stop func()
}

func (r *rig) startApps(vols []string) *apps {
	a := &apps{w: map[string]*stack.Writer{}}
	ctx, cancel := context.WithCancel(context.Background())
	var done []chan struct{}
	for _, s := range r.up {
		w := s.writer(vols)
		a.w[s.name] = w
		ch := make(chan struct{})
		done = append(done, ch)
		go func() { defer close(ch); w.Run(ctx, 20*time.Millisecond) }()
	}
	a.stop = func() {
		cancel()
		for _, ch := range done {
			<-ch
		}
	}
	r.t.Cleanup(a.stop)
	return a
}

func (a *apps) counts(site string) stack.WriteCounts { return a.w[site].Counts() }

// wait waits until site's application saw more of what field picks.
func (a *apps) wait(t *testing.T, site, what string, field func(stack.WriteCounts) int, more int) {
	t.Helper()
	from := field(a.counts(site))
	simtest.Eventually(t, time.Minute, fmt.Sprintf("%d more writes %s on %s", more, what, site), func() bool { return field(a.counts(site)) >= from+more })
}

// viewsAgree: drctl at either site lists the same actions and tells the
// same record and last action, and the record agrees with both sites'
// storage (status --verify at each: through a standby the verify starts
// on the active cluster, and drctl waits until the standby knows it).
func (r *rig) viewsAgree(east, west *siteNet, plan string) {
	r.t.Helper()
	drctl := filepath.Join(bin, "drctl")
	view := func(s *siteNet) (string, bool) {
		list, c1 := r.run(s, time.Minute, s.temporalEnv(), drctl, "list", "--plan", "sites", "-o", "json")
		status, c2 := r.run(s, time.Minute, s.temporalEnv(), drctl, "status", "sites", "-o", "json")
		var st map[string]json.RawMessage
		if c1 != 0 || c2 != 0 || json.Unmarshal([]byte(status), &st) != nil {
			return "", false
		}
		return list + string(st["record"]) + string(st["action"]), true
	}
	var e, w string
	simtest.Eventually(r.t, time.Minute, "drctl list and status at east and at west to agree", func() bool {
		var oke, okw bool
		e, oke = view(east)
		w, okw = view(west)
		return oke && okw && e == w
	})
	for _, s := range r.up {
		// A query a standby forwards can fail on the way right after
		// the heal (its connection to the active cluster cut by the
		// partition): drctl says it could not read the record; ask again.
		simtest.Eventually(r.t, time.Minute, "drctl status --verify at "+s.name+" to read the record and find no drift", func() bool {
			out, code := r.drctl(s, "status", plan, "--verify")
			if code != 0 && !strings.Contains(out, "read the record of plan") {
				r.t.Fatalf("drctl status --verify at %s: exit %d", s.name, code)
			}
			return code == 0
		})
	}
	r.say("VIEWS: drctl list, the record and the last action agree at east and at west; drctl status --verify at each: the record matches both sites' storage")
}

// twoClusters starts a Temporal cluster at each site and joins them:
// each learns the other, the namespace global and active at east, the
// search attributes registered once, on east.
func (r *rig) twoClusters(pgBin string, start time.Time) {
	t := r.t
	t.Helper()
	east, west := r.up[0], r.up[1]
	r.temporal = map[string]*rigProc{}
	for i, s := range r.up {
		r.startPostgres(s, pgBin)
		r.temporal[s.name] = r.startTemporal(s, i+1, true)
	}
	temporal := filepath.Join(bin, "temporal")
	for _, s := range r.up {
		r.retry(s, 2*time.Minute, temporal, "operator", "cluster", "health", "--address", s.frontend())
	}
	r.say("both Temporal clusters serve (%v)", time.Since(start).Round(time.Millisecond))
	// Each cluster learns the other; without --enable-connection the
	// CLI registers it disabled.
	r.tool(east, temporal, "operator", "cluster", "upsert", "--address", east.frontend(), "--frontend-address", west.frontend(), "--enable-connection")
	r.tool(west, temporal, "operator", "cluster", "upsert", "--address", west.frontend(), "--frontend-address", east.frontend(), "--enable-connection")
	// east's frontend takes --cluster west once its cluster metadata
	// cache has refreshed (system.clusterMetadataRefreshInterval).
	r.retry(east, 2*time.Minute, temporal, "operator", "namespace", "create", "--address", east.frontend(), "--namespace", sitesNamespace,
		"--global", "--cluster", "east", "--cluster", "west", "--active-cluster", "east", "--retention", "72h")
	r.retry(west, time.Minute, temporal, "operator", "namespace", "describe", "--address", west.frontend(), "--namespace", sitesNamespace)
	// The search attributes once, on the active cluster: registered on
	// both, each cluster would map them to columns of its own.
	r.retry(east, time.Minute, temporal, r.searchAttributes(east)...)
	simtest.Eventually(t, time.Minute, "the search attributes to replicate to west", func() bool {
		out, code := r.run(west, 30*time.Second, nil, temporal, "operator", "namespace", "describe", "--address", west.frontend(), "--namespace", sitesNamespace, "-o", "json")
		return code == 0 && strings.Contains(out, names.SearchAttributes[len(names.SearchAttributes)-1])
	})
	r.say("namespace %s global, active at east, known at west, search attributes registered at east (%v)", sitesNamespace, time.Since(start).Round(time.Millisecond))
}

// searchAttributes is the temporal CLI's command registering Drover's
// search attributes on s's cluster.
func (r *rig) searchAttributes(s *siteNet) []string {
	sa := []string{"operator", "search-attribute", "create", "--address", s.frontend(), "--namespace", sitesNamespace}
	for _, name := range names.SearchAttributes {
		sa = append(sa, "--name", name, "--type", "Keyword")
	}
	return sa
}

// afterHeal checks the invariants once the link is back, then runs
// reprotect and failback at west and checks that every view agrees.
func (r *rig) afterHeal(t *testing.T, plan string, apps *apps, vols []string) {
	east, west := r.up[0], r.up[1]
	// East's clients are fenced on west's storage.
	// The link has just come back: until the sites' neighbour entries
	// are learnt again a connection may find no route; retry those.
	probe := sim.NewClientVia(west.data(), "east-app", dialer(east.ns, east.client))
	var err error
	simtest.Eventually(t, 30*time.Second, "a write from east's client to reach west's storage", func() bool {
		pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer pcancel()
		_, err = probe.Write(pctx, vols[0], 0, []byte("east after the heal"))
		return !errors.Is(err, sim.ErrUnavailable)
	})
	if !errors.Is(err, sim.ErrFenced) {
		t.Fatalf("a write from east's client on west's storage: %v, want refused by the fence", err)
	}
	// East learns of the fence from west once the link is back: the
	// invariants are checked after it did (checked before, the check
	// found no fence east knew of, and failed on its own writes).
	apps.wait(t, "east", "refused by the fence east learned at the heal", fenced, 5)
	rep, zw := r.check()
	if n := lostOn(rep, "west"); n != 0 {
		t.Fatalf("writes west acknowledged were lost: %v", rep.Lost)
	}
	r.say("INVARIANTS after the heal: a write from east's client on west's storage refused by the fence; east's own writes refused since the heal; "+
		"%d writes east's storage accepted while cut off after west's promotion (the partition's split brain, before east could learn of the fence), %d writes east acknowledged after its last sync lost, as the RPO allows; no other violation (%d units, %d writes, %d promotions)",
		zw, lostOn(rep, "east"), rep.Units, rep.Writes, rep.Promotions)

	r.mustDrctl(west, "reprotect", plan, "--yes", "--wait")
	simtest.Eventually(t, time.Minute, "east's copies to be in-sync secondaries", func() bool {
		for _, st := range r.states() {
			for _, u := range st.Units {
				if (st.Site == "east") != (u.Role == sim.RoleSecondary) || (u.Role == sim.RoleSecondary && !u.InSync) {
					return false
				}
			}
		}
		return true
	})
	r.check()
	apps.wait(t, "east", "refused by east's secondary copies", readOnly, 5)
	r.say("REPROTECT at west: east's copies are in-sync secondaries")
	rep, _ = r.check()
	before := lostOn(rep, "west")
	r.mustDrctl(west, "failback", plan, "--to", "east", "--yes", "--wait")
	apps.wait(t, "east", "acknowledged after the failback", acked, 40)
	if !r.runningOn("east") || r.runningOn("west") {
		t.Fatalf("the application runs on east %v, on west %v; want east only", r.runningOn("east"), r.runningOn("west"))
	}
	apps.stop()
	rep, zw = r.check()
	if lost := lostOn(rep, "west") - before; lost != 0 {
		t.Fatalf("the failback lost %d acknowledged writes: %v", lost, rep.Lost)
	}
	r.say("FAILBACK to east: no write west acknowledged lost; %d units, %d writes, %d promotions, the partition's %d writes on east the only violations", rep.Units, rep.Writes, rep.Promotions, zw)
	r.viewsAgree(east, west, plan)
}
