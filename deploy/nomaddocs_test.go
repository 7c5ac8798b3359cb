package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// shellCommands returns the commands of the ```sh blocks of a Markdown
// file, continuation lines joined.
func shellCommands(t *testing.T, file string) []string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in, cur := false, ""
	for _, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "```sh"):
			in = true
		case strings.HasPrefix(trimmed, "```"):
			in = false
		case in:
			if strings.HasSuffix(trimmed, "\\") {
				cur += strings.TrimSuffix(trimmed, "\\") + " "
				continue
			}
			out = append(out, cur+trimmed)
			cur = ""
		}
	}
	return out
}

// shellWords splits a command into words as a shell does for the
// quoting the docs use: single quotes, double quotes, no escapes.
func shellWords(cmd string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range cmd {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// TestNomadDocCommands runs docs/guides/nomad-worker.md's commands as far as
// they can run without a Nomad cluster: every `nomad job run` renders
// its job with the variables it gives (the shell's $V and $SUM, and the
// "sha256:..." placeholders, standing for a release's), a site worker's
// job ID is the one the doc writes a variable for, and every `nomad var
// put` prints no items (-out none) and takes every value from a file.
func TestNomadDocCommands(t *testing.T) {
	const doc = "../docs/guides/nomad-worker.md"
	cmds := shellCommands(t, doc)
	puts := map[string]bool{}
	var runs [][]string
	for _, c := range cmds {
		w := shellWords(c)
		switch {
		case len(w) > 3 && w[0] == "nomad" && w[1] == "var" && w[2] == "put":
			var path string
			out := false
			for i := 3; i < len(w); i++ {
				switch {
				case w[i] == "-out" && i+1 < len(w) && w[i+1] == "none":
					out = true
					i++
				case strings.HasPrefix(w[i], "-"):
					t.Errorf("%s: nomad var put with option %s: %s", doc, w[i], c)
				case path == "":
					path = w[i]
				case strings.HasPrefix(w[i], "@"):
				default:
					if _, v, ok := strings.Cut(w[i], "="); !ok || !strings.HasPrefix(v, "@") {
						t.Errorf("%s: nomad var put gives %q on the command line, not from a file: %s", doc, w[i], c)
					}
				}
			}
			if !out {
				t.Errorf("%s: nomad var put without -out none prints the variable's items: %s", doc, c)
			}
			puts[path] = true
		case len(w) > 3 && w[0] == "nomad" && w[1] == "job" && w[2] == "run":
			runs = append(runs, w)
		}
	}
	if len(runs) < 4 || len(puts) < 3 {
		t.Fatalf("%s: %d nomad job run and %d nomad var put commands found; the doc lost its steps", doc, len(runs), len(puts))
	}
	subst := strings.NewReplacer("$V", "v1.4.0", "$SUM", testChecksum, "sha256:...", testChecksum)
	for _, w := range runs {
		file := strings.TrimPrefix(w[len(w)-1], "deploy/")
		vars := map[string]cty.Value{}
		for i := 3; i < len(w)-1; i++ {
			if w[i] != "-var" {
				t.Fatalf("%s: nomad job run with %s: %v", doc, w[i], w)
			}
			i++
			name, val, _ := strings.Cut(subst.Replace(w[i]), "=")
			v := cty.StringVal(val)
			if strings.HasPrefix(val, "[") || strings.HasPrefix(val, "{") {
				expr, diags := hclsyntax.ParseExpression([]byte(val), "-var", hcl.InitialPos)
				if diags.HasErrors() {
					t.Fatalf("%s: -var %s: %v", doc, w[i], diags)
				}
				if v, diags = expr.Value(nil); diags.HasErrors() {
					t.Fatalf("%s: -var %s: %v", doc, w[i], diags)
				}
			}
			vars[name] = v
		}
		job, err := renderJob(file, vars)
		if err != nil {
			t.Errorf("%s: %s: %v", doc, strings.Join(w, " "), err)
			continue
		}
		if id := jobID(job); !puts["nomad/jobs/"+id] {
			t.Errorf("%s: job %s is run, but no nomad var put writes its variable nomad/jobs/%s", doc, id, id)
		}
	}
}

// TestTemporalServerCommandsGivePort: each documented start of the
// Temporal server on PostgreSQL that names the database host names its
// port too, which the README's example once left out.
func TestTemporalServerCommandsGivePort(t *testing.T) {
	files, _ := filepath.Glob("../docs/*/*.md")
	files = append(files, "../README.md")
	start := regexp.MustCompile(`temporal-server .*start`)
	n := 0
	for _, f := range files {
		for _, c := range shellCommands(t, f) {
			if start.MatchString(c) && strings.Contains(c, "POSTGRES_HOST=") {
				n++
				if !strings.Contains(c, "POSTGRES_PORT=") {
					t.Errorf("%s: the Temporal server is started without POSTGRES_PORT: %s", f, c)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no documented start of the Temporal server found")
	}
}
