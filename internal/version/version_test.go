package version

import (
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

// TestBuildID: the build ID names the revision a build says it was made
// from, cut to twelve characters, after the module version; a build that
// recorded none is named by its executable's digest.
func TestBuildID(t *testing.T) {
	defer func(r string) { Revision = r }(Revision)
	recorded := false
	if bi, ok := debug.ReadBuildInfo(); ok {
		recorded = slices.ContainsFunc(bi.Settings, func(s debug.BuildSetting) bool { return s.Key == "vcs.revision" })
	}
	Revision = "0123456789abcdef"
	id := BuildID()
	if !recorded && !strings.HasSuffix(id, "-0123456789ab") || strings.Contains(id, "0123456789abc") {
		t.Fatalf("build ID %q: want the module version and a revision of twelve characters", id)
	}
	if strings.ContainsAny(id, " /") {
		t.Fatalf("build ID %q holds a character a deployment version should not", id)
	}
	Revision = ""
	if id := BuildID(); !recorded && !strings.Contains(id, "-x") {
		t.Fatalf("build ID %q of a build without a revision: want its executable's digest", id)
	}
}
