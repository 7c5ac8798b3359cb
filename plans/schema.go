package plans

import (
	"encoding/json"
	"reflect"
	"strings"
)

// JSONSchema returns the JSON Schema of a plan, generated from the Go types
// (field names, required keys, descriptions), so that editors complete and
// check plans. `make schema` writes it to plans/plan.schema.json.
func JSONSchema() ([]byte, error) {
	root := schemaOf(reflect.TypeOf(Plan{}))
	root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	root["$id"] = "https://drover.dev/schemas/plan-v1alpha1.json"
	root["title"] = "Drover failover plan"
	props := root["properties"].(map[string]any)
	props["apiVersion"].(map[string]any)["const"] = APIVersion
	props["kind"].(map[string]any)["const"] = Kind
	constrain(root)
	b, err := json.MarshalIndent(root, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func schemaOf(t reflect.Type) map[string]any {
	if t == durationType {
		return map[string]any{"type": "string", "pattern": `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$|^[0-9]+d$`, "description": "A duration: 30s, 5m, 1h30m, 2d."}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return schemaOf(t.Elem())
	case reflect.Struct:
		props := map[string]any{}
		var required []string
		for _, f := range structFields(t) {
			sf := t.Field(f.index)
			s := schemaOf(sf.Type)
			if doc := sf.Tag.Get("doc"); doc != "" {
				s["description"] = doc
			}
			props[f.name] = s
			if f.required {
				required = append(required, f.name)
			}
		}
		out := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(required) > 0 {
			out["required"] = required
		}
		return out
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaOf(t.Elem())}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem())}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Int:
		return map[string]any{"type": "integer"}
	case reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	}
	return map[string]any{"description": strings.ToLower(t.String())}
}

// constrain adds to the generated schema the enums, bounds and item
// counts that validate enforces, from the same tables (nameRE, RPCs,
// Gates, NomadStops, OnFailures), so an editor flags what
// `drctl plan validate` rejects. TestSchemaMatchesValidate holds the two
// to the same verdicts.
func constrain(root map[string]any) {
	// at walks property names; "[]" steps into array items, "{}" into
	// map values.
	at := func(path ...string) map[string]any {
		s := root
		for _, p := range path {
			switch p {
			case "[]":
				s = s["items"].(map[string]any)
			case "{}":
				s = s["additionalProperties"].(map[string]any)
			default:
				s = s["properties"].(map[string]any)[p].(map[string]any)
			}
		}
		return s
	}
	set := func(s map[string]any, kv ...any) {
		for i := 0; i < len(kv); i += 2 {
			s[kv[i].(string)] = kv[i+1]
		}
	}
	name := nameRE.String()
	set(at("metadata", "name"), "pattern", name)
	set(at("metadata", "tier"), "minimum", 0)
	set(at("sites"), "minItems", 2, "maxItems", 2)
	set(at("sites", "[]", "name"), "pattern", name)
	set(at("sites", "[]", "storage", "callParameters"), "propertyNames", map[string]any{"enum": RPCs})
	set(at("volumeGroups"), "minItems", 1)
	set(at("volumeGroups", "[]", "name"), "pattern", name)
	set(at("volumeGroups", "[]", "priority"), "minimum", 0)
	set(at("volumeGroups", "[]", "sites", "{}"), "dependentRequired", map[string]any{"members": []string{"groupID"}})
	set(at("volumeGroups", "[]", "sites", "{}", "members"), "uniqueItems", true)
	set(at("volumeGroups", "[]", "sites", "{}", "members", "[]"), "minLength", 1)
	set(at("workloads", "[]", "name"), "pattern", name)
	set(at("workloads", "[]", "priority"), "minimum", 0)
	set(at("workloads", "[]", "sites", "{}", "nomad", "stop"), "enum", NomadStops)
	set(at("workloads", "[]", "sites", "{}", "nomad", "groups", "{}"), "minimum", 0)
	set(at("workloads", "[]", "sites", "{}", "exec", "retryExitCodes", "[]"), "minimum", 1, "maximum", 255)
	set(at("policy", "parallelism"), "minimum", 0)
	set(at("policy", "retry", "backoffCoefficient"), "anyOf", []any{map[string]any{"const": 0}, map[string]any{"minimum": 1}})
	set(at("policy", "retry", "maximumAttempts"), "minimum", 0)
	set(at("policy", "deadlines"), "propertyNames", map[string]any{"enum": append([]string{"default"}, RPCs...)})
	set(at("policy", "onFailure"), "enum", OnFailures)
	set(at("policy", "approvals", "[]"), "enum", Gates)
	set(at("policy", "pointsInTime"), "anyOf", []any{map[string]any{"required": []string{"keep"}}, map[string]any{"required": []string{"keepFor"}}})
	set(at("policy", "pointsInTime", "keep"), "minimum", 1)
	set(at("policy", "pointsInTime", "cut"), "enum", Cuts)
}
