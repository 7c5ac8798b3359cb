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

// TestStampedVersion: a release build's stamped version (make release's
// -ldflags -X) is what String and BuildID name the build by.
func TestStampedVersion(t *testing.T) {
	defer func(v, r string) { Version, Revision = v, r }(Version, Revision)
	Version, Revision = "v9.8.7", "0123456789abcdef"
	if s := String(); !strings.HasPrefix(s, "v9.8.7 (") {
		t.Errorf("String() = %q, want it to start with the stamped version", s)
	}
	if id := BuildID(); !strings.HasPrefix(id, "v9.8.7-") {
		t.Errorf("BuildID() = %q, want it to start with the stamped version", id)
	}
	Version = ""
	if s := String(); strings.Contains(s, "v9.8.7") {
		t.Errorf("String() = %q names a version nothing stamped", s)
	}
}
