package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/drover-dr/drover/internal/stack"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
)

// TestComposeConfig loads docker-compose.yaml (loadCompose: interpolation,
// anchors, a strict decode of the Compose keys the file uses and the
// consistency checks of `docker compose config`), and the services the
// docs promise (docs/guides/upgrades.md, Docker Compose) must be there.
func TestComposeConfig(t *testing.T) {
	p, err := loadCompose("../docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	names := p.serviceNames()
	for _, want := range []string{"postgresql", "temporal-schema", "temporal", "temporal-namespace", "temporal-ui", "worker", "sim-east", "sim-west", "app-east", "app-west"} {
		if !slices.Contains(names, want) {
			t.Errorf("docker-compose.yaml has no service %q (it has %v)", want, names)
		}
	}
	for _, name := range []string{"worker", "sim-east", "sim-west"} {
		s := p.Services[name]
		if s.Build == nil || s.Build.Dockerfile != "Dockerfile" {
			t.Errorf("service %s is not built from the repository's Dockerfile: %+v", name, s.Build)
		}
	}
	// The worker runs signed plans only, with drctl in its container
	// signing; the sites' peer API needs their shared token.
	if w := strings.Join(p.Services["worker"].Command, " "); !strings.Contains(w, "--trusted-plan-key") || strings.Contains(w, "--allow-unsigned-plans") ||
		p.Services["worker"].Environment["DROVER_PLAN_SIGNING_KEY"] == nil {
		t.Errorf("the compose worker does not run signed plans only: %q", w)
	}
	for _, name := range []string{"sim-east", "sim-west"} {
		if tok := p.Services[name].Environment["DROVER_SIM_PEER_TOKEN"]; tok == nil || *tok == "" {
			t.Errorf("service %s has no peer token", name)
		}
	}
	if _, err := os.Stat("../Dockerfile"); err != nil {
		t.Fatal(err)
	}
	for name, s := range p.Services {
		for _, port := range s.Ports {
			if ip, target, _ := parsePort(port); ip != "127.0.0.1" {
				t.Errorf("service %s publishes port %s on %q; publish on 127.0.0.1 only", name, target, ip)
			}
		}
	}
}

// TestComposeFiles: the plan and the site configurations the services
// mount load, and name each other's addresses.
func TestComposeFiles(t *testing.T) {
	p, err := plans.Load("compose/demo-plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	compose, err := os.ReadFile("../docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, site := range []string{"east", "west"} {
		raw, err := os.ReadFile(filepath.Join("compose", "site-"+site+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var fc struct {
			Sites []sim.Config `yaml:"sites"`
		}
		dec := yaml.NewDecoder(strings.NewReader(string(raw)))
		dec.KnownFields(true)
		if err := dec.Decode(&fc); err != nil || len(fc.Sites) != 1 {
			t.Fatalf("site-%s.yaml: %v", site, err)
		}
		c := fc.Sites[0]
		if !strings.HasSuffix(p.Site(site).Storage.Endpoint, ":"+strings.Split(c.GRPCAddr, ":")[1]) {
			t.Errorf("the plan's %s endpoint %s is not the site's gRPC port %s", site, p.Site(site).Storage.Endpoint, c.GRPCAddr)
		}
		for _, cidr := range p.Site(site).Fence.CIDRs {
			if ip := strings.TrimSuffix(cidr, "/32"); !strings.Contains(string(compose), "--from\", \""+ip+"\"") {
				t.Errorf("no application of docker-compose.yaml writes from %s, which the plan fences for %s", ip, site)
			}
		}
	}
}

// TestComposeTemporal: the Temporal services are the ones Temporal
// maintains, at the server version the Makefile builds (the one the
// pinned CLI and SDK go with); the schemas, then the namespace and
// Drover's search attributes, are set up by one-shot services; the
// server counts as healthy only once the namespace answers, and the
// worker starts only then.
func TestComposeTemporal(t *testing.T) {
	p, err := loadCompose("../docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^TEMPORAL_SERVER \?= v(\S+)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile pins no TEMPORAL_SERVER")
	}
	version := string(m[1])
	if img := p.Services["temporal"].Image; img != "temporalio/server:"+version {
		t.Errorf("temporal runs %s; want temporalio/server:%s, the server make temporal-server builds", img, version)
	}
	for _, name := range []string{"temporal-schema", "temporal-namespace"} {
		s := p.Services[name]
		if !strings.HasPrefix(s.Image, "temporalio/admin-tools:"+version+"-") {
			t.Errorf("%s runs %s; want temporalio/admin-tools:%s-…", name, s.Image, version)
		}
		if s.Restart != "no" {
			t.Errorf("%s is a one-shot setup but restarts %q", name, s.Restart)
		}
	}
	script := func(name string) string { return strings.Join(p.Services[name].Command, " ") }
	for _, want := range []string{"create-database", "setup-schema -v 0.0", "update-schema --schema-name", "postgresql/v12/", "temporal:temporal", "temporal_visibility:visibility"} {
		if !strings.Contains(script("temporal-schema"), want) {
			t.Errorf("temporal-schema does not run %q:\n%s", want, script("temporal-schema"))
		}
	}
	ns := script("temporal-namespace")
	if !strings.Contains(ns, "namespace create --namespace default --retention ") {
		t.Errorf("temporal-namespace creates no namespace with a retention:\n%s", ns)
	}
	for _, attr := range stack.SearchAttributes {
		if !strings.Contains(ns, "--name "+attr+" --type Keyword") {
			t.Errorf("temporal-namespace does not register search attribute %s:\n%s", attr, ns)
		}
	}
	if hc := p.Services["temporal"].HealthCheck; hc == nil || !strings.Contains(strings.Join(hc.Test, " "), "operator namespace describe --namespace default") {
		t.Errorf("temporal's health check does not ask for the namespace: %+v", hc)
	}
	deps := map[string]map[string]string{
		"temporal":           {"temporal-schema": "service_completed_successfully"},
		"temporal-namespace": {"temporal": "service_started"},
		"worker":             {"temporal": "service_healthy", "temporal-namespace": "service_completed_successfully"},
	}
	for svc, want := range deps {
		for on, cond := range want {
			if got := p.Services[svc].DependsOn[on]; got != cond {
				t.Errorf("%s waits for %s with %q; want %q", svc, on, got, cond)
			}
		}
	}
}
