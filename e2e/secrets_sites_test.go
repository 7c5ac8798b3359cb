package e2e_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/drover-dr/drover/internal/stack"
)

// TestSitesRequiringSecrets: both sites' storage requires a secret with
// every fence and replication call, and the plan names it. Protection,
// a drill (whose preflight asks Probe and GetCapabilities, which carry no
// secrets) and a failover all pass; a site whose secret the worker lacks
// would fail them with UNAUTHENTICATED.
func TestSitesRequiringSecrets(t *testing.T) {
	const secret = "s3cret-of-both-sites"
	t.Setenv("DROVER_EAST_CSI_token", secret)
	t.Setenv("DROVER_WEST_CSI_token", secret)
	endpoint := regexp.MustCompile(`(?m)^  - name: (east|west)\n    storage: \{endpoint: ("[^"]+")\}`)
	h := startWith(t, 2, 2, func(plan string) string {
		return endpoint.ReplaceAllStringFunc(plan, func(m string) string {
			site := endpoint.FindStringSubmatch(m)[1]
			return strings.TrimSuffix(m, "}") + ", secret: {env: DROVER_" + strings.ToUpper(site) + "_CSI}}"
		})
	}, func(o *stack.Options) { o.Secrets = map[string]string{"token": secret} })

	h.must("protect", "start", h.plan, "--primary", "east", "--interval", "1s")
	h.syncedAndIdle()
	out := h.must("drill", h.plan, "--to", "west", "--wait")
	if !strings.Contains(out, "every check passed") {
		t.Fatalf("drill against sites requiring secrets:\n%s", out)
	}
	h.siteDown("east")
	out = h.must("failover", h.plan, "--to", "west", "--yes", "--wait")
	if !strings.Contains(out, "completed") {
		t.Fatalf("failover against sites requiring secrets:\n%s", out)
	}
	h.check()
}
