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
