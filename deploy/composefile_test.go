package deploy

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// composeFile is the part of the Compose format docker-compose.yaml
// uses. loadCompose decodes it strictly: a key outside this subset (a
// misspelt one, or one the file never used) fails the test, where
// `docker compose` would reject or ignore it.
type composeFile struct {
	Name     string                     `yaml:"name"`
	Services map[string]composeService  `yaml:"services"`
	Networks map[string]*composeNetwork `yaml:"networks"`
	Volumes  map[string]*struct{}       `yaml:"volumes"`
	// Extensions holds the top-level keys outside the format: Compose
	// allows only x-… ones (the file's anchors).
	Extensions map[string]any `yaml:",inline"`
}

type composeNetwork struct {
	IPAM struct {
		Config []struct {
			Subnet string `yaml:"subnet"`
		} `yaml:"config"`
	} `yaml:"ipam"`
}

type composeService struct {
	Image       string               `yaml:"image"`
	Build       *composeBuild        `yaml:"build"`
	Restart     string               `yaml:"restart"`
	DependsOn   listOrMap[dependsOn] `yaml:"depends_on"`
	Environment map[string]*string   `yaml:"environment"`
	Entrypoint  composeCommand       `yaml:"entrypoint"`
	Command     composeCommand       `yaml:"command"`
	Volumes     []string             `yaml:"volumes"`
	Ports       []string             `yaml:"ports"`
	Networks    listOrMap[network]   `yaml:"networks"`
	HealthCheck *composeHealth       `yaml:"healthcheck"`
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

type composeHealth struct {
	Test        composeCommand `yaml:"test"`
	Interval    string         `yaml:"interval"`
	Timeout     string         `yaml:"timeout"`
	Retries     int            `yaml:"retries"`
	StartPeriod string         `yaml:"start_period"`
}

// composeCommand is a command in either of Compose's forms: a list, or a
// string (split on spaces, as Compose does for a command without shell
// quoting).
type composeCommand []string

func (c *composeCommand) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*c = strings.Fields(n.Value)
		return nil
	}
	var l []string
	if err := n.Decode(&l); err != nil {
		return err
	}
	*c = l
	return nil
}

// listOrMap is a setting Compose takes in two forms, depends_on and a
// service's networks: a list of names, or a map of names to settings (T,
// decoded strictly). Either way it maps each name to one value of its
// settings, T.value, or T.fromList for a name listed without any.
type listOrMap[T interface {
	value() string
	fromList() string
}] map[string]string

func (l *listOrMap[T]) UnmarshalYAML(n *yaml.Node) error {
	*l = listOrMap[T]{}
	var zero T
	if n.Kind == yaml.SequenceNode {
		var names []string
		if err := n.Decode(&names); err != nil {
			return err
		}
		for _, s := range names {
			(*l)[s] = zero.fromList()
		}
		return nil
	}
	var m map[string]T
	if err := decodeStrict(n, &m); err != nil {
		return err
	}
	for s, v := range m {
		(*l)[s] = v.value()
	}
	return nil
}

// dependsOn is one service waited for: its condition, service_started
// when listed.
type dependsOn struct {
	Condition string `yaml:"condition"`
}

func (d dependsOn) value() string  { return d.Condition }
func (dependsOn) fromList() string { return "service_started" }

// network is one network a service joins: its address there.
type network struct {
	IPv4 string `yaml:"ipv4_address"`
}

func (n network) value() string  { return n.IPv4 }
func (network) fromList() string { return "" }

// decodeStrict decodes a node refusing unknown keys (Node.Decode does
// not carry the decoder's KnownFields).
func decodeStrict(n *yaml.Node, v any) error {
	b, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	return dec.Decode(v)
}

// interpolation matches what Compose substitutes: $$, ${NAME},
// ${NAME:-default}, ${NAME-default} and $NAME.
var interpolation = regexp.MustCompile(`\$(\$|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}|[A-Za-z_][A-Za-z0-9_]*)`)

// interpolate substitutes as Compose does with no variable set (the test
// runs without the caller's environment): a variable with a default
// becomes the default, one without becomes empty; $$ is a $.
func interpolate(s string) string {
	return interpolation.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		sm := interpolation.FindStringSubmatch(m)
		return sm[4] // the default; empty when there is none
	})
}

// loadCompose reads a Compose file: interpolation, anchors and merge
// keys, a strict decode, and the checks `docker compose config` makes
// on what the file references (services waited for, networks and named
// volumes declared, port syntax).
func loadCompose(path string) (*composeFile, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(strings.NewReader(interpolate(string(raw))))
	dec.KnownFields(true)
	var f composeFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var errs []string
	for k := range f.Extensions {
		if !strings.HasPrefix(k, "x-") {
			errs = append(errs, fmt.Sprintf("unknown top-level key %q", k))
		}
	}
	if len(f.Services) == 0 {
		errs = append(errs, "no services")
	}
	for name, s := range f.Services {
		if s.Image == "" && s.Build == nil {
			errs = append(errs, fmt.Sprintf("service %s has neither image nor build", name))
		}
		for on := range s.DependsOn {
			if _, ok := f.Services[on]; !ok {
				errs = append(errs, fmt.Sprintf("service %s depends on undefined service %q", name, on))
			}
			if c := s.DependsOn[on]; !slices.Contains([]string{"service_started", "service_healthy", "service_completed_successfully"}, c) {
				errs = append(errs, fmt.Sprintf("service %s waits for %s with unknown condition %q", name, on, c))
			}
		}
		for n := range s.Networks {
			if _, ok := f.Networks[n]; !ok {
				errs = append(errs, fmt.Sprintf("service %s refers to undefined network %q", name, n))
			}
		}
		for _, v := range s.Volumes {
			src, _, ok := strings.Cut(v, ":")
			if ok && !strings.HasPrefix(src, "/") && !strings.HasPrefix(src, ".") {
				if _, ok := f.Volumes[src]; !ok {
					errs = append(errs, fmt.Sprintf("service %s refers to undefined volume %q", name, src))
				}
			}
		}
		for _, p := range s.Ports {
			if _, _, err := parsePort(p); err != nil {
				errs = append(errs, fmt.Sprintf("service %s: %v", name, err))
			}
		}
		if s.Restart != "" && !slices.Contains([]string{"no", "always", "on-failure", "unless-stopped"}, strings.SplitN(s.Restart, ":", 2)[0]) {
			errs = append(errs, fmt.Sprintf("service %s has unknown restart policy %q", name, s.Restart))
		}
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		return nil, fmt.Errorf("%s: %s", path, strings.Join(errs, "; "))
	}
	return &f, nil
}

// serviceNames returns the file's services, sorted.
func (f *composeFile) serviceNames() []string {
	var names []string
	for n := range f.Services {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// portSyntax is Compose's short syntax of a port.
var portSyntax = regexp.MustCompile(`^(?:(?:(\d{1,3}(?:\.\d{1,3}){3}):)?(\d+(?:-\d+)?):)?(\d+(?:-\d+)?)(?:/(tcp|udp|sctp))?$`)

// parsePort splits a short-syntax port, [[IP:]HOST:]CONTAINER[/PROTO],
// into the host address it publishes on ("" for every address) and the
// container port.
func parsePort(p string) (hostIP, target string, err error) {
	m := portSyntax.FindStringSubmatch(p)
	if m == nil {
		return "", "", fmt.Errorf("port %q is not [[IP:]HOST:]CONTAINER[/PROTO]", p)
	}
	return m[1], m[3], nil
}

// TestComposeLoader: the loader refuses what `docker compose config`
// refuses, so that TestComposeConfig has teeth.
func TestComposeLoader(t *testing.T) {
	base := "services:\n  a:\n    image: x\n    networks: [n]\n    depends_on: [b]\n  b:\n    image: y\nnetworks:\n  n: {}\n"
	if _, err := loadComposeText(t, base); err != nil {
		t.Fatalf("a valid file is refused: %v", err)
	}
	for name, bad := range map[string]string{
		"misspelt key":      strings.Replace(base, "depends_on", "dependson", 1),
		"undefined service": strings.Replace(base, "[b]", "[c]", 1),
		"undefined network": strings.Replace(base, "[n]", "[m]", 1),
		"top-level key":     base + "servces: {}\n",
		"no image or build": strings.Replace(base, "    image: y\n", "    restart: always\n", 1),
		"bad port":          strings.Replace(base, "    image: y\n", "    image: y\n    ports: [\"localhost:80:80\"]\n", 1),
		"undefined volume":  strings.Replace(base, "    image: y\n", "    image: y\n    volumes: [\"data:/d\"]\n", 1),
		"unknown condition": strings.Replace(base, "depends_on: [b]", "depends_on: {b: {condition: service_ready}}", 1),
		"unknown restart":   strings.Replace(base, "    image: y\n", "    image: y\n    restart: sometimes\n", 1),
		"healthcheck typo":  strings.Replace(base, "    image: y\n", "    image: y\n    healthcheck: {test: [CMD, true], retry: 3}\n", 1),
	} {
		if _, err := loadComposeText(t, bad); err == nil {
			t.Errorf("%s: accepted:\n%s", name, bad)
		}
	}
	if got := interpolate("a $$b ${T:-def} ${U} $V ${W-x}"); got != "a $b def   x" {
		t.Errorf("interpolate = %q", got)
	}
	if ip, target, err := parsePort("127.0.0.1:7233:7233"); err != nil || ip != "127.0.0.1" || target != "7233" {
		t.Errorf("parsePort = %q %q %v", ip, target, err)
	}
	if ip, _, err := parsePort("8080:80"); err != nil || ip != "" {
		t.Errorf("parsePort(8080:80) = %q %v", ip, err)
	}
}

func loadComposeText(t *testing.T, text string) (*composeFile, error) {
	path := t.TempDir() + "/compose.yaml"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return loadCompose(path)
}
