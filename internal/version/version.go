// Package version says which build of Drover is running: the module
// version and the VCS revision Go recorded in the binary.
package version

import (
	"fmt"
	"runtime/debug"
)

// Revision is the commit a build was made from when the build could not
// record it itself (a git worktree, -buildvcs=false): make build sets it
// with -ldflags "-X github.com/drover-dr/drover/internal/version.Revision=…".
var Revision string

// String is "VERSION (revision REV, modified, GOVERSION)": the main
// module's version ("(devel)" for a build from a checkout) and, when the
// build recorded them, the commit and whether the tree had local changes.
func String() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information in the binary)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		rev = Revision
	}
	if rev == "" {
		return fmt.Sprintf("%s (no VCS revision recorded, %s)", v, bi.GoVersion)
	}
	out := fmt.Sprintf("%s (revision %s", v, rev)
	if at != "" {
		out += " of " + at
	}
	if modified {
		out += ", modified"
	}
	return out + ", " + bi.GoVersion + ")"
}
