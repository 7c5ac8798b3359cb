package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"gopkg.in/yaml.v3"

	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
)

// TestComposeConfig loads docker-compose.yaml with the Compose
// specification's own loader (what `docker compose config` runs): the
// schema, interpolation, anchors and the consistency checks must pass,
// and the services the README promises must be there.
func TestComposeConfig(t *testing.T) {
	opts, err := cli.NewProjectOptions([]string{"../docker-compose.yaml"}, cli.WithWorkingDirectory(".."), cli.WithEnv(nil),
		cli.WithConsistency(true), cli.WithResolvedPaths(true))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(t.Context())
	if err != nil {
		t.Fatalf("docker-compose.yaml: %v", err)
	}
	names := p.ServiceNames()
	for _, want := range []string{"postgresql", "temporal", "temporal-ui", "worker", "sim-east", "sim-west", "app-east", "app-west"} {
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
	if _, err := os.Stat("../Dockerfile"); err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Services {
		for _, port := range s.Ports {
			if port.HostIP != "127.0.0.1" {
				t.Errorf("service %s publishes port %d on %q; publish on 127.0.0.1 only", s.Name, port.Target, port.HostIP)
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
