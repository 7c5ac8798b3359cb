package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
// search attributes registered once, on east.
func sitesUp(t *testing.T, groups []sim.GroupSpec) *rig {
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
	if r.net.noDelay != "" {
		r.say("%s", r.net.noDelay)
	}
	r.say("network: %s (a bridge, links delayed %s), %s (%s, clients %s), %s (%s, clients %s)",
		r.net.ns, r.net.delay(), east.ns, east.host, east.client, west.ns, west.host, west.client)
	r.keys()
	start := time.Now()
	for i, s := range r.up {
		r.startPostgres(s, pgBin)
		r.startTemporal(s, i+1)
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
	sa := []string{"operator", "search-attribute", "create", "--address", east.frontend(), "--namespace", sitesNamespace}
	for _, name := range names.SearchAttributes {
		sa = append(sa, "--name", name, "--type", "Keyword")
	}
	r.retry(east, time.Minute, temporal, sa...)
	simtest.Eventually(t, time.Minute, "the search attributes to replicate to west", func() bool {
		out, code := r.run(west, 30*time.Second, nil, temporal, "operator", "namespace", "describe", "--address", west.frontend(), "--namespace", sitesNamespace, "-o", "json")
		return code == 0 && strings.Contains(out, names.SearchAttributes[len(names.SearchAttributes)-1])
	})
	r.say("namespace %s global, active at east, known at west, search attributes registered at east (%v)", sitesNamespace, time.Since(start).Round(time.Millisecond))
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
// active. The link returns: Temporal keeps west's history, east's
// clients are fenced on west's storage, reprotect and failback work, and
// every invariant holds.
func TestSitesAsNetworks(t *testing.T) {
	groups := sim.GenerateGroups(4, 1)
	r := sitesUp(t, groups)
	east, west := r.up[0], r.up[1]
	ce, cw := r.client(east), r.client(west)
	plan := r.sitesPlan(groups)
	simtest.Eventually(t, time.Minute, "east's worker to poll east's cluster", east.workerReady)
	r.mustDrctl(east, "protect", "start", plan, "--primary", "east", "--interval", "1s")
	simtest.Eventually(t, time.Minute, "protection to record a sync of every group", func() bool {
		ps, err := workflows.ReadProtect(context.Background(), ce, "sites")
		return err == nil && ps != nil && len(ps.Groups) == len(groups) && !ps.LastSync().IsZero()
	})
	r.say("protected; east says active %q, west says active %q", activeAt(ce), activeAt(cw))
	_ = fmt.Sprint
}
