// Command release builds a release of Drover into a directory (make
// release runs it): an archive of every command under cmd/ for
// linux/amd64 and linux/arm64, the worker's OCI image, an SPDX SBOM and
// SHA256SUMS; then it checks what it built (internal/release.Verify).
//
//	go run ./scripts/release --version v1.4.0 --revision abc123 --time 2026-12-01T00:00:00Z --out dist
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/drover-dr/drover/internal/release"
)

func main() {
	var (
		version, revision, at, out, cmds, platforms string
		verifyOnly                                  bool
	)
	flag.StringVar(&version, "version", "", "the release's version (required)")
	flag.StringVar(&revision, "revision", "", "the commit it is built from")
	flag.StringVar(&at, "time", "", "the commit's time (RFC 3339): every archive entry carries it; default now")
	flag.StringVar(&out, "out", "dist", "the release directory")
	flag.StringVar(&cmds, "commands", "", "comma-separated commands under cmd/ (default: all)")
	flag.StringVar(&platforms, "platforms", "", "comma-separated OS/ARCH (default linux/amd64,linux/arm64)")
	flag.BoolVar(&verifyOnly, "verify", false, "only check the release in --out")
	flag.Parse()
	if err := run(version, revision, at, out, cmds, platforms, verifyOnly); err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
}

func run(version, revision, at, out, cmds, platforms string, verifyOnly bool) error {
	ctx := context.Background()
	if version == "" {
		return fmt.Errorf("--version is required")
	}
	t := time.Now().UTC().Truncate(time.Second)
	if at != "" {
		var err error
		if t, err = time.Parse(time.RFC3339, at); err != nil {
			return fmt.Errorf("--time: %w", err)
		}
	}
	commands, err := release.Commands(".")
	if err != nil {
		return err
	}
	if cmds != "" {
		commands = strings.Split(cmds, ",")
	}
	var ps []release.Platform
	for _, p := range strings.Split(platforms, ",") {
		if p == "" {
			continue
		}
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok {
			return fmt.Errorf("--platforms: %q is not OS/ARCH", p)
		}
		ps = append(ps, release.Platform{OS: goos, Arch: goarch})
	}
	if !verifyOnly {
		if err := release.Build(ctx, release.Options{Dir: out, Version: version, Revision: revision, Time: t,
			Commands: commands, Platforms: ps, Log: os.Stderr}); err != nil {
			return err
		}
	}
	if err := release.Verify(ctx, out, version, commands, ps); err != nil {
		return fmt.Errorf("the release in %s fails its checks:\n%w", out, err)
	}
	fmt.Printf("release %s in %s: checked\n", version, out)
	return nil
}
