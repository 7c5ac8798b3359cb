package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/drover-dr/drover/plans"
)

// markdownFiles are the README, the other top-level documents and every
// Markdown file under docs/, as paths from the repository's root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "TESTING.md", "SECURITY.md", "BENCHMARKS.md"}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, filepath.ToSlash(filepath.Join("docs", path)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(path)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`(?m)^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	htmlRef    = regexp.MustCompile(`(?i)<(?:a|img)\s[^>]*(?:href|src)="([^"]+)"`)
	htmlAnchor = regexp.MustCompile(`(?i)<a\s[^>]*(?:name|id)="([^"]+)"`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	heading    = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
)

// prose returns the lines of a Markdown text outside fenced code blocks,
// with inline code spans blanked: links are only links there.
func prose(text string) []string {
	var out []string
	fence := ""
	for _, l := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(l, " ")
		if fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")) {
			fence = trimmed[:3]
			out = append(out, "")
			continue
		}
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			out = append(out, "")
			continue
		}
		out = append(out, l)
	}
	return out
}

// anchors gives the anchors GitHub makes for a Markdown text's headings:
// the heading's text, lower-cased, with everything but letters, digits,
// spaces, dashes and underscores taken out, spaces made dashes, and -1,
// -2… added to repeats; and the names of HTML anchors.
func anchors(text string) map[string]bool {
	got := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(text) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			got[m[1]] = true
		}
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a := githubAnchor(m[2])
		if n, ok := seen[a]; ok {
			seen[a] = n + 1
			got[a+"-"+itoa(n+1)] = true
			continue
		}
		seen[a] = 0
		got[a] = true
	}
	return got
}

var linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

func githubAnchor(h string) string {
	h = linkText.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + itoa(n%10)
}

// links returns the link targets of a Markdown text with their lines.
func links(text string) [][2]string {
	var out [][2]string
	for i, l := range prose(text) {
		l = codeSpan.ReplaceAllString(l, "``")
		for _, re := range []*regexp.Regexp{inlineLink, refDef, htmlRef} {
			for _, m := range re.FindAllStringSubmatch(l, -1) {
				out = append(out, [2]string{m[1], itoa(i + 1)})
			}
		}
	}
	return out
}

// TestLinks fails on a relative link in README.md, the top-level
// documents or docs/ whose file does not exist in the repository, or
// whose #anchor no heading of that file makes (GitHub's anchor rules).
func TestLinks(t *testing.T) {
	files := markdownFiles(t)
	cache := map[string]map[string]bool{}
	n := 0
	for _, f := range files {
		text := read(t, f)
		for _, l := range links(text) {
			target, line := l[0], l[1]
			if regexp.MustCompile(`^[a-zA-Z][a-zA-Z+.-]*:`).MatchString(target) {
				continue // http:, https:, mailto:
			}
			n++
			path, frag, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.ToSlash(filepath.Join(filepath.Dir(f), path))
				if strings.HasPrefix(dest, "../") {
					t.Errorf("%s:%s: %s leaves the repository", f, line, target)
					continue
				}
				if _, err := os.Stat(filepath.Join("..", filepath.FromSlash(dest))); err != nil {
					t.Errorf("%s:%s: %s: no file %s", f, line, target, dest)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s:%s: %s: an anchor in a file that is not Markdown", f, line, target)
				continue
			}
			if cache[dest] == nil {
				cache[dest] = anchors(read(t, dest))
			}
			if !cache[dest][frag] {
				t.Errorf("%s:%s: %s: no heading of %s makes #%s", f, line, target, dest, frag)
			}
		}
	}
	if n < 50 {
		t.Fatalf("only %d relative links found in %d files: the link finder is broken", n, len(files))
	}
}

// TestAnchorRules checks the anchor rules on headings of the kinds the
// docs use.
func TestAnchorRules(t *testing.T) {
	text := "# Drover\n## Where Temporal lives\n## drctl plan validate\n```sh\n# not a heading\n```\n" +
		"## Real Ceph and ceph-csi\n## Upgrading\n## Upgrading\n## `make test`, step 1: the [Makefile](Makefile)\n<a id=\"here\"></a>\n"
	got := anchors(text)
	for _, want := range []string{"drover", "where-temporal-lives", "drctl-plan-validate", "real-ceph-and-ceph-csi",
		"upgrading", "upgrading-1", "make-test-step-1-the-makefile", "here"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a comment in a code block made an anchor")
	}
	ls := links("see [a](b.md#c), `[x](nowhere.md)`, ![i](img.png)\n```\n[y](code.md)\n```\n[r]: ref.md\n")
	var targets []string
	for _, l := range ls {
		targets = append(targets, l[0])
	}
	if want := []string{"b.md#c", "img.png", "ref.md"}; !slices.Equal(targets, want) {
		t.Errorf("links %v, want %v", targets, want)
	}
}

// TestMakeTargets fails when the table of make targets
// (docs/reference/make-targets.md) and the Makefile's documented targets
// (those `make help` lists) differ either way.
func TestMakeTargets(t *testing.T) {
	mk := read(t, "Makefile")
	var targets []string
	for _, m := range regexp.MustCompile(`(?m)^([a-z0-9-]+):.*## `).FindAllStringSubmatch(mk, -1) {
		targets = append(targets, m[1])
	}
	if len(targets) < 10 {
		t.Fatalf("only %d targets in the Makefile", len(targets))
	}
	table := read(t, "docs/reference/make-targets.md")
	var listed []string
	for _, l := range strings.Split(table, "\n") {
		if !strings.HasPrefix(l, "| `make ") {
			continue
		}
		first := strings.SplitN(l, "|", 3)[1]
		for _, m := range regexp.MustCompile("`make ([a-z0-9-]+)`").FindAllStringSubmatch(first, -1) {
			listed = append(listed, m[1])
		}
	}
	for _, tg := range targets {
		if !slices.Contains(listed, tg) {
			t.Errorf("make %s is not in docs/reference/make-targets.md", tg)
		}
	}
	for _, l := range listed {
		if !slices.Contains(targets, l) {
			t.Errorf("docs/reference/make-targets.md lists make %s, which the Makefile does not document", l)
		}
	}
	readme := read(t, "README.md")
	for _, want := range []string{"make demo", "make test", "docs/reference/make-targets.md"} {
		if !strings.Contains(readme, want) {
			t.Errorf("the README does not name %s", want)
		}
	}
}

// TestPlansInDocsLoad loads every plan the docs show in full (a yaml
// code block with kind: FailoverPlan) as drctl plan validate does: a
// plan a reader copies must be valid.
func TestPlansInDocsLoad(t *testing.T) {
	n := 0
	for _, f := range markdownFiles(t) {
		var block []string
		in := false
		for i, l := range strings.Split(read(t, f), "\n") {
			switch {
			case !in && strings.TrimSpace(l) == "```yaml":
				in, block = true, nil
			case in && strings.TrimSpace(l) == "```":
				in = false
				text := strings.Join(block, "\n") + "\n"
				if !strings.Contains(text, "kind: FailoverPlan") {
					continue
				}
				n++
				// Blank lines before the block: the errors' lines are the
				// file's.
				at := strings.Repeat("\n", i-len(block))
				if _, err := plans.Parse(f, []byte(at+text)); err != nil {
					t.Errorf("the plan in %s: %v", f, err)
				}
			case in:
				block = append(block, l)
			}
		}
	}
	if n == 0 {
		t.Fatal("no plan found in the docs")
	}
}

// TestEveryDocIsOnTheMap fails when a file under docs/ is not linked from
// docs/README.md, the map a reader starts from.
func TestEveryDocIsOnTheMap(t *testing.T) {
	linked := map[string]bool{}
	for _, l := range links(read(t, "docs/README.md")) {
		path, _, _ := strings.Cut(l[0], "#")
		linked[filepath.ToSlash(filepath.Join("docs", path))] = true
	}
	for _, f := range markdownFiles(t) {
		if strings.HasPrefix(f, "docs/") && f != "docs/README.md" && !linked[f] {
			t.Errorf("%s is not on the map (docs/README.md)", f)
		}
	}
}
