package plans

import (
	"fmt"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// Load reads, validates and defaults the plan in a file. A plan that does
// not validate returns Errors with every problem found.
func Load(path string) (*Plan, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read plan: %w", err)
	}
	return Parse(path, data)
}

// Parse validates and defaults a plan read from file (the name is used in
// error positions only).
func Parse(file string, data []byte) (*Plan, error) {
	p, d := parseYAML(file, data)
	if !d.fatal {
		// Semantic checks run even when some keys did not decode, so that
		// one run reports every problem; a check on a key that already has
		// a decoding error is left out.
		decoded := len(d.errs)
		p.validate(d)
		d.errs = append(d.errs[:decoded], dropShadowed(d.errs[:decoded], d.errs[decoded:])...)
	}
	if len(d.errs) > 0 {
		sortErrors(d.errs)
		return nil, d.errs
	}
	p.ApplyDefaults()
	return p, nil
}

// YAML renders the plan (typically the effective plan, with defaults) as
// YAML.
func (p *Plan) YAML() ([]byte, error) { return yaml.Marshal(p) }

// dropShadowed removes semantic errors on paths at or below a path that
// already failed to decode.
func dropShadowed(decodeErrs, semErrs Errors) Errors {
	var out Errors
	for _, e := range semErrs {
		shadowed := false
		for _, de := range decodeErrs {
			if de.Path == "" || e.Path == de.Path || strings.HasPrefix(e.Path, de.Path+".") || strings.HasPrefix(e.Path, de.Path+"[") {
				shadowed = true
				break
			}
		}
		if !shadowed {
			out = append(out, e)
		}
	}
	return out
}
