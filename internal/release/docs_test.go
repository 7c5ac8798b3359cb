package release

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestInstallDocNamesTheFiles: docs/guides/install.md names each file a release
// holds as Build names it, for every command under cmd/.
func TestInstallDocNamesTheFiles(t *testing.T) {
	raw, err := os.ReadFile("../../docs/guides/install.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	want := []string{Image("VERSION"), SBOM("VERSION"), Sums}
	for _, p := range Platforms {
		for _, c := range []string{"drctl", "worker"} {
			want = append(want, Archive(c, "VERSION", p))
		}
	}
	cmds, err := Commands("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		want = append(want, Archive(c, "VERSION", Platforms[0])[:len(c)+1])
	}
	for _, name := range want {
		if !strings.Contains(doc, "`"+name) {
			t.Errorf("docs/guides/install.md does not name %s", name)
		}
	}
	for c, ask := range Says {
		if !strings.Contains(doc, c+" "+ask) && !strings.Contains(doc, c+" v1.4.0") {
			t.Errorf("docs/guides/install.md does not say how %s tells its version (%s %s)", c, c, ask)
		}
	}
}

// TestChangelogForm: CHANGELOG.md keeps Keep a Changelog's form: an
// Unreleased section first, then releases newest first as
// "## [VERSION] - DATE", each with only the standard kinds of change.
func TestChangelogForm(t *testing.T) {
	raw, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	release := regexp.MustCompile(`^## \[v?\d+\.\d+\.\d+[^\]]*\] - \d{4}-\d{2}-\d{2}$`)
	kinds := map[string]bool{"Added": true, "Changed": true, "Deprecated": true, "Removed": true, "Fixed": true, "Security": true}
	var sections []string
	for i, line := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			if len(sections) == 0 && line != "## [Unreleased]" {
				t.Errorf("CHANGELOG.md line %d: the first section is %q, want ## [Unreleased]", i+1, line)
			}
			if len(sections) > 0 && !release.MatchString(line) {
				t.Errorf("CHANGELOG.md line %d: %q is not \"## [VERSION] - YYYY-MM-DD\"", i+1, line)
			}
			sections = append(sections, line)
		case strings.HasPrefix(line, "### "):
			if !kinds[strings.TrimPrefix(line, "### ")] {
				t.Errorf("CHANGELOG.md line %d: %q is not a Keep a Changelog kind of change", i+1, line)
			}
		}
	}
	if len(sections) == 0 {
		t.Fatal("CHANGELOG.md has no sections")
	}
}
