package activities

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/drover-dr/drover/orchestrators"
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
	resolved.add(out)
	return out, nil
}

// resolved remembers every secret value this worker has resolved, so that
// text leaving an activity (hook output, a plugin's or a CO's message) is
// redacted of all of them, not only of the call's own.
var resolved = &secretSet{vals: map[string]struct{}{}}

// maxRemembered bounds the values remembered; past it the oldest are not
// dropped but no new ones are added, and the worker says so once.
const maxRemembered = 4096

type secretSet struct {
	mu   sync.Mutex
	vals map[string]struct{}
	full bool
}

func (s *secretSet) add(m map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range m {
		if len(v) < 3 {
			continue
		}
		if _, ok := s.vals[v]; !ok && len(s.vals) >= maxRemembered {
			if !s.full {
				s.full = true
				slog.Warn("more secret values resolved than are remembered for redaction; later ones are redacted only in their own calls", "limit", maxRemembered)
			}
			continue
		}
		s.vals[v] = struct{}{}
	}
}

func (s *secretSet) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.vals))
	for v := range s.vals {
		out = append(out, v)
	}
	return out
}

// secretWord is a word of a variable's name that says it holds a
// secret: TEMPORAL_API_KEY, TEMPORAL_TLS_CLIENT_KEY_DATA, NOMAD_HTTP_AUTH,
// TEMPORAL_GRPC_META_AUTHORIZATION, a storage secret's userKey or
// encryptionPassphrase.
var secretWord = map[string]bool{"key": true, "token": true, "secret": true, "password": true, "passwd": true, "pass": true, "pwd": true,
	"passphrase": true, "credential": true, "credentials": true, "auth": true, "authorization": true, "dsn": true}

// notSecretWord is a last word that says the variable names, or says
// something of, a secret rather than holding it (NOMAD_SECRETS_DIR, a
// key's file or id, a flag).
var notSecretWord = map[string]bool{"dir": true, "file": true, "path": true, "name": true, "id": true, "url": true, "endpoint": true,
	"keys": true, "enabled": true, "disabled": true, "type": true, "size": true, "format": true}

// notSecretName is a variable whose name has a secret word and holds no
// secret: the shell's working directories (PWD, OLDPWD), where "pwd" is
// no password, as it is in MYSQL_PWD.
var notSecretName = map[string]bool{"PWD": true, "OLDPWD": true}

// holdsSecret tells whether a variable's name says it holds a secret.
func holdsSecret(name string) bool {
	if notSecretName[name] {
		return false
	}
	var words []string
	for _, part := range strings.FieldsFunc(name, func(r rune) bool { return r == '_' || r == '-' || r == '.' }) {
		start := 0
		for i := 1; i < len(part); i++ {
			if part[i] >= 'A' && part[i] <= 'Z' && part[i-1] >= 'a' && part[i-1] <= 'z' {
				words = append(words, strings.ToLower(part[start:i]))
				start = i
			}
		}
		words = append(words, strings.ToLower(part[start:]))
	}
	if len(words) == 0 || notSecretWord[words[len(words)-1]] {
		return false
	}
	for _, w := range words {
		if secretWord[w] {
			return true
		}
	}
	return false
}

// minEnvSecret is the shortest value taken from the environment as a
// secret: shorter ones ("true", "/run") would redact ordinary words.
const minEnvSecret = 8

// RememberEnvSecrets adds to what RedactResolved replaces the values of
// environ's variables whose names say they hold a secret. A hook runs
// as the worker's child and can read the worker's environment
// (/proc/PPID/environ): its output is redacted of these from the start,
// not only of the secrets resolved so far.
func RememberEnvSecrets(environ []string) {
	m := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || len(v) < minEnvSecret || !holdsSecret(k) {
			continue
		}
		m[k] = v
	}
	resolved.add(m)
}

// RedactResolved replaces in s every secret value this worker has
// resolved so far, and those RememberEnvSecrets took.
func RedactResolved(s string) string {
	if s == "" {
		return s
	}
	return orchestrators.Redact(s, resolved.list())
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

// redact replaces every secret value found in s: the call's own and every
// other this worker resolved. Plugins build their error messages
// themselves; one that echoes a credential must not carry it into the
// workflow history.
func redact(s string, secrets map[string]string) string {
	if s == "" {
		return s
	}
	vals := resolved.list()
	for _, v := range secrets {
		vals = append(vals, v)
	}
	return orchestrators.Redact(s, vals)
}
