package activities

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/drover-dr/drover/plans"
)

// SecretResolver turns a plan's secret reference into the secret values,
// on the worker, at call time. Implementations must not put a value into
// an error.
type SecretResolver interface {
	Resolve(ref *plans.SecretRef) (map[string]string, error)
}

// EnvFileSecrets resolves references from the worker's environment and
// files. The zero value reads the process environment.
type EnvFileSecrets struct {
	// Environ, when set, replaces os.Environ (for tests).
	Environ func() []string
}

// Resolve implements SecretResolver. An env reference PREFIX takes every
// variable PREFIX_KEY as secret KEY; a file reference reads key=value
// lines or a YAML map. Both are read anew on every call, so rotating a
// secret needs no worker restart. With both set, file values win.
func (r EnvFileSecrets) Resolve(ref *plans.SecretRef) (map[string]string, error) {
	if ref == nil {
		return nil, nil
	}
	out := map[string]string{}
	if ref.Env != "" {
		environ := os.Environ
		if r.Environ != nil {
			environ = r.Environ
		}
		prefix := ref.Env + "_"
		for _, kv := range environ() {
			k, v, _ := strings.Cut(kv, "=")
			if key, ok := strings.CutPrefix(k, prefix); ok && key != "" {
				out[key] = v
			}
		}
		if len(out) == 0 && ref.File == "" {
			return nil, fmt.Errorf("no environment variable %s* is set on this worker", prefix)
		}
	}
	if ref.File != "" {
		m, err := readSecretFile(ref.File)
		if err != nil {
			return nil, err
		}
		for k, v := range m {
			out[k] = v
		}
	}
	return out, nil
}

// readSecretFile reads key=value lines, or a YAML map when the file is not
// in that form. Errors name the file and line, never a value.
func readSecretFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("secret file %s: %v", path, pe.Err)
		}
		return nil, fmt.Errorf("secret file %s: cannot read", path)
	}
	if m, ok := parseKeyValues(data); ok {
		return m, nil
	}
	var m map[string]string
	if err := yaml.Unmarshal(data, &m); err != nil || m == nil {
		// yaml's messages can quote the offending value: say only where.
		return nil, fmt.Errorf("secret file %s: want key=value lines or a YAML map of strings", path)
	}
	return m, nil
}

// parseKeyValues reads KEY=VALUE lines, skipping blanks and # comments. It
// reports false as soon as a line is not in that form.
func parseKeyValues(data []byte) (map[string]string, bool) {
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.ContainsAny(k, " \t:") {
			return nil, false
		}
		m[k] = strings.TrimSpace(v)
	}
	return m, sc.Err() == nil
}

// redact replaces every secret value found in s. Plugins build their error
// messages themselves; one that echoes a credential must not carry it into
// the workflow history.
func redact(s string, secrets map[string]string) string {
	if len(secrets) == 0 || s == "" {
		return s
	}
	vals := make([]string, 0, len(secrets))
	for _, v := range secrets {
		if len(v) >= 3 {
			vals = append(vals, v)
		}
	}
	// Longest first, so a value containing another is replaced whole.
	sort.Slice(vals, func(i, j int) bool { return len(vals[i]) > len(vals[j]) })
	for _, v := range vals {
		s = strings.ReplaceAll(s, v, "[redacted]")
	}
	return s
}
