// Package version says which build of Drover is running: the module
// version and the VCS revision Go recorded in the binary.
package version

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime/debug"
)

// Revision is the commit a build was made from when the build could not
// record it itself (a git worktree, -buildvcs=false): make build sets it
// with -ldflags "-X github.com/drover-dr/drover/internal/version.Revision=…".
var Revision string

// Version is the release a build was made for ("v1.4.0", or what `git
// describe` said of a snapshot), stamped by make release with -ldflags
// "-X github.com/drover-dr/drover/internal/version.Version=…". When set
// it stands for the module version, which a build from a checkout lacks.
var Version string

// moduleVersion is Version when stamped, else the main module's version
// ("(devel)" or "" for a build from a checkout).
func moduleVersion(bi *debug.BuildInfo) string {
	if Version != "" {
		return Version
	}
	return bi.Main.Version
}

// String is "VERSION (revision REV, modified, GOVERSION)": the stamped
// release version, else the main module's version ("(devel)" for a build
// from a checkout) and, when the
// build recorded them, the commit and whether the tree had local changes.
func String() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information in the binary)"
	}
	v := moduleVersion(bi)
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

// BuildID names this build as a Worker Deployment Version: the stamped
// release version (else the module version) and the VCS revision ("devel-0123456789ab" for a build from a
// checkout), with "-modified" when the tree had local changes. A build
// that recorded no revision (a container image built without .git) is
// named by a digest of its own executable instead ("devel-x…"), so that
// two builds of different code never share one. A build from a modified
// tree should be given its own (the worker's --build-id).
func BuildID() string {
	v, rev, modified := "devel", Revision, false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if mv := moduleVersion(bi); mv != "" && mv != "(devel)" {
			v = mv
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if rev == "" {
		rev = executableDigest()
	}
	id := v
	if rev != "" {
		id += "-" + rev[:min(len(rev), 12)]
	}
	if modified {
		id += "-modified"
	}
	return id
}

// executableDigest is "x" and the SHA-256 of the running executable in
// hex, or "" when it cannot be read.
func executableDigest() string {
	p, err := os.Executable()
	if err != nil {
		return ""
	}
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return "x" + hex.EncodeToString(h.Sum(nil))
}
