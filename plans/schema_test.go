package plans

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"
)

// TestSchemaMatchesValidate: each enum, bound and item count that
// validate enforces is in plans/plan.schema.json too. Every example plan
// passes both; each plan below, one example broken in one place, fails
// both — so an editor using the schema rejects what `drctl plan
// validate` rejects.
func TestSchemaMatchesValidate(t *testing.T) {
	raw, err := os.ReadFile("plan.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("plan.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	schema, err := c.Compile("plan.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	load := func(name string) map[string]any {
		b, err := os.ReadFile("examples/" + name)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	// verdicts returns the error of Parse and of the schema.
	verdicts := func(m map[string]any) (error, error) {
		y, err := yaml.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		j, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
		if err != nil {
			t.Fatal(err)
		}
		_, perr := Parse("plan.yaml", y)
		return perr, schema.Validate(inst)
	}
	for _, name := range []string{"minimal.yaml", "nomad.yaml", "exec.yaml", "demo.yaml"} {
		if perr, serr := verdicts(load(name)); perr != nil || serr != nil {
			t.Errorf("examples/%s: validate says %v; the schema says %v", name, perr, serr)
		}
	}
	rpcs := RPCs[1:]
	cases := []struct {
		plan, path string
		value      any
	}{
		{"minimal.yaml", "metadata.name", "Not_A_Name"},
		{"minimal.yaml", "sites.0.name", "East"},
		{"minimal.yaml", "volumeGroups.0.name", "-data"},
		{"minimal.yaml", "volumeGroups.0.priority", -1},
		{"minimal.yaml", "volumeGroups.0.sites.west", map[string]any{"volumes": []any{"v1"}, "members": []any{"v1"}}},
		{"minimal.yaml", "volumeGroups.0.sites.west", map[string]any{"groupID": "vg-data", "members": []any{"v1", "v1"}}},
		{"minimal.yaml", "volumeGroups.0.sites.west", map[string]any{"groupID": "vg-data", "members": []any{""}}},
		{"minimal.yaml", "metadata.tier", -1},
		{"minimal.yaml", "volumeGroups", []any{}},
		{"minimal.yaml", "sites", func(m map[string]any) any { return m["sites"].([]any)[:1] }},
		{"minimal.yaml", "sites", func(m map[string]any) any {
			s := m["sites"].([]any)
			third := map[string]any{}
			for k, v := range s[1].(map[string]any) {
				third[k] = v
			}
			third["name"] = "north"
			return append(s, third)
		}},
		{"nomad.yaml", "sites.0.storage.callParameters.Promote", map[string]any{"force": "true"}},
		{"nomad.yaml", "workloads.0.name", "web.shop"},
		{"nomad.yaml", "workloads.0.priority", -2},
		{"nomad.yaml", "workloads.0.sites.east.nomad.stop", "purge"},
		{"nomad.yaml", "workloads.0.sites.east.nomad.groups.web", -1},
		{"exec.yaml", "workloads.0.sites.dc2.exec.retryExitCodes", []any{75, 256}},
		{"exec.yaml", "workloads.0.sites.dc2.exec.retryExitCodes", []any{0}},
		{"nomad.yaml", "policy.parallelism", -1},
		{"nomad.yaml", "policy.retry.backoffCoefficient", 0.5},
		{"nomad.yaml", "policy.retry.maximumAttempts", -3},
		{"nomad.yaml", "policy.deadlines.Promote", "1m"},
		{"nomad.yaml", "policy.deadlines." + strings.ToLower(rpcs[0]), "1m"},
		{"nomad.yaml", "policy.onFailure", "retry"},
		{"nomad.yaml", "policy.approvals", []any{"beforePromote", "afterStart"}},
		{"nomad.yaml", "policy.pointsInTime", map[string]any{"every": "15m"}},
		{"nomad.yaml", "policy.pointsInTime", map[string]any{"every": "15m", "keep": -1}},
		{"nomad.yaml", "policy.pointsInTime", map[string]any{"keep": 4}},
	}
	for _, tc := range cases {
		m := load(tc.plan)
		value := tc.value
		if f, ok := value.(func(map[string]any) any); ok {
			value = f(m)
		}
		if err := setPath(m, strings.Split(tc.path, "."), value); err != nil {
			t.Fatalf("%s %s: %v", tc.plan, tc.path, err)
		}
		perr, serr := verdicts(m)
		if perr == nil || serr == nil {
			t.Errorf("%s with %s = %v: validate says %v; the schema says %v; both must reject it", tc.plan, tc.path, tc.value, perr, serr)
		}
	}
}

// setPath sets a value inside decoded YAML: a number steps into a list,
// any other key into a mapping.
func setPath(v any, path []string, value any) error {
	last := len(path) == 1
	switch n := v.(type) {
	case map[string]any:
		if last {
			n[path[0]] = value
			return nil
		}
		next, ok := n[path[0]]
		if !ok {
			return fmt.Errorf("no key %q", path[0])
		}
		return setPath(next, path[1:], value)
	case []any:
		i, err := strconv.Atoi(path[0])
		if err != nil || i >= len(n) {
			return fmt.Errorf("bad index %q", path[0])
		}
		if !last {
			return setPath(n[i], path[1:], value)
		}
		n[i] = value
		return nil
	}
	return fmt.Errorf("cannot step into %T at %q", v, path[0])
}
