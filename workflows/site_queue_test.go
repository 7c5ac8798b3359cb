package workflows_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/names"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
)

// ran is one activity a worker ran: its type, whether it ran as a local
// activity, and its input as JSON.
type ran struct {
	activity string
	local    bool
	input    string
}

// ranBy records every activity a worker runs.
type ranBy struct {
	interceptor.WorkerInterceptorBase
	mu  sync.Mutex
	all []ran
}

func (r *ranBy) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &ranIn{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, r: r}
}

func (r *ranBy) list() []ran {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ran(nil), r.all...)
}

type ranIn struct {
	interceptor.ActivityInboundInterceptorBase
	r *ranBy
}

func (a *ranIn) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	info := activity.GetInfo(ctx)
	b, _ := json.Marshal(in.Args)
	a.r.mu.Lock()
	a.r.all = append(a.r.all, ran{activity: info.ActivityType.Name, local: info.IsLocalActivity, input: string(b)})
	a.r.mu.Unlock()
	return a.Next.ExecuteActivity(ctx, in)
}

// TestSiteQueueCallsRunOnTheSiteWorker: a site with a task queue of its
// own (a worker inside it, as docs/guides/deploy-nomad.md describes) has
// every storage call and every workload hook of that site run by the
// site's worker, never by the central worker that runs the workflows:
// not the single calls' or the hooks' local first attempts, not the
// local first attempt of a large plan's batch, not the best-effort stop
// on the lost site. The central worker may not reach a site's storage,
// nor hold its secrets. Both sites have workers of their own here (east's
// storage is down, its worker up); the plan has more than 100 groups, so
// that its promotions go as batches.
func TestSiteQueueCallsRunOnTheSiteWorker(t *testing.T) {
	srv := devserver.Start(t, nil)
	f := newFixtureN(t, 150)
	sites := map[string]*simtest.Site{"east": f.east, "west": f.west}
	// Each site's hooks carry a mark, so that a hook run for one site can
	// be told from one run for the other.
	mark := func(site string) string { return "# " + site + "'s hook" }
	for i := range f.plan.Sites {
		f.plan.Sites[i].TaskQueue = names.SiteTaskQueue(f.plan.Sites[i].Name)
	}
	for _, w := range f.plan.Workloads {
		for site, ref := range w.Sites {
			ref.Exec.Start += " " + mark(site)
			ref.Exec.Stop += " " + mark(site)
		}
	}
	of := func(r ran, site string) bool {
		return strings.Contains(r.input, sites[site].Endpoint()) || strings.Contains(r.input, mark(site))
	}

	central := &ranBy{}
	f.startWorker(t, srv, &activities.PlanTrust{AllowUnsigned: true}, central)
	own := map[string]*ranBy{}
	for site := range sites {
		own[site] = &ranBy{}
		sw := worker.New(srv.Client, names.SiteTaskQueue(site), worker.Options{Interceptors: []interceptor.WorkerInterceptor{own[site]}})
		st := activities.NewStorage()
		t.Cleanup(func() { st.Close() })
		sw.RegisterActivity(st)
		sw.RegisterActivity(activities.NewWorkloads())
		mustOK(t, sw.Start())
		t.Cleanup(sw.Stop)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	startRecord(t, ctx, srv)
	f.east.Down()
	failOverEast(t, ctx, srv, f)
	allRoles(t, f.west, sim.RolePrimary)

	for _, r := range central.list() {
		// The plan's check reads the whole plan, both sites included.
		if r.activity != "VerifyPlan" && (of(r, "east") || of(r, "west")) {
			t.Errorf("the central worker ran %s (local %v) for a site with a worker of its own: %.300s", r.activity, r.local, r.input)
		}
	}
	for site, want := range map[string][]string{
		"east": {"StopWorkload"},
		"west": {"Probe", "FenceClusterNetwork", "ListClusterFence", "ReplicateBatch", "StartWorkload", "WaitHealthy"},
	} {
		kinds := map[string]int{}
		for _, r := range own[site].list() {
			if !of(r, site) {
				t.Errorf("%s's worker ran %s for another site: %.300s", site, r.activity, r.input)
			}
			kinds[r.activity]++
		}
		for _, a := range want {
			if kinds[a] == 0 {
				t.Errorf("%s's worker ran no %s (it ran %v)", site, a, kinds)
			}
		}
	}
}
