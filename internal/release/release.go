// Package release builds what make release publishes: an archive of
// each command per platform, an OCI image of the worker, an SPDX SBOM of
// the modules the binaries hold, and SHA256SUMS over them all; and it
// checks a release directory for what an operator relies on (Verify).
package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The package the -ldflags -X stamps go to.
const versionPkg = "github.com/drover-dr/drover/internal/version"

// Platform is a GOOS/GOARCH pair a release is built for.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// Platforms are the platforms a release is built for.
var Platforms = []Platform{{"linux", "amd64"}, {"linux", "arm64"}}

// Options say what Build builds and where.
type Options struct {
	Dir       string     // the release directory, created (emptied of a previous release's files)
	Version   string     // the release's version, stamped into every binary
	Revision  string     // the commit, stamped too
	Time      time.Time  // the commit's time: every archive entry and the image carry it
	Commands  []string   // the commands, by directory name under cmd/
	Platforms []Platform // default Platforms
	Go        string     // the go command, default "go"
	Log       io.Writer  // progress, default none
}

// Archive names the archive of command cmd for p in a release of version.
func Archive(cmd, version string, p Platform) string {
	return fmt.Sprintf("%s_%s_%s_%s.tar.gz", cmd, version, p.OS, p.Arch)
}

// Image names the worker's OCI image archive (an OCI image layout in a
// tar, one image per platform under one index).
func Image(version string) string { return fmt.Sprintf("worker_%s_oci.tar", version) }

// SBOM names the release's SPDX document.
func SBOM(version string) string { return fmt.Sprintf("drover_%s.spdx.json", version) }

// Sums is the checksum file's name.
const Sums = "SHA256SUMS"

// ImageBinary is where the image holds the worker.
const ImageBinary = "usr/local/bin/worker"

// Commands lists the commands under root/cmd.
func Commands(root string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Build builds the release into o.Dir from the module at the working
// directory.
func Build(ctx context.Context, o Options) error {
	if o.Version == "" || strings.ContainsAny(o.Version, "/ \t\n") {
		return fmt.Errorf("release version %q: want one word without slashes", o.Version)
	}
	if len(o.Platforms) == 0 {
		o.Platforms = Platforms
	}
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return err
	}
	if err := clean(o.Dir); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "drover-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	var pkgs []string
	for _, c := range o.Commands {
		pkgs = append(pkgs, "./cmd/"+c)
	}
	ldflags := fmt.Sprintf("-s -w -X %s.Version=%s -X %s.Revision=%s", versionPkg, o.Version, versionPkg, o.Revision)
	var files []string
	binaries := map[Platform]string{}
	for _, p := range o.Platforms {
		out := filepath.Join(work, p.OS+"_"+p.Arch)
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		fmt.Fprintf(o.Log, "release: building %s for %s\n", strings.Join(o.Commands, ", "), p)
		args := append([]string{"build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out + "/"}, pkgs...)
		cmd := exec.CommandContext(ctx, o.Go, args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
		cmd.Stdout, cmd.Stderr = o.Log, o.Log
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build for %s: %w", p, err)
		}
		binaries[p] = out
		for _, c := range o.Commands {
			name := Archive(c, o.Version, p)
			if err := writeArchive(filepath.Join(o.Dir, name), filepath.Join(out, c), c, o.Time); err != nil {
				return err
			}
			files = append(files, name)
		}
	}
	if slices.Contains(o.Commands, "worker") {
		fmt.Fprintf(o.Log, "release: the worker's image\n")
		if err := writeImage(filepath.Join(o.Dir, Image(o.Version)), binaries, o, work); err != nil {
			return fmt.Errorf("worker image: %w", err)
		}
		files = append(files, Image(o.Version))
	}
	fmt.Fprintf(o.Log, "release: the SBOM\n")
	if err := writeSBOM(filepath.Join(o.Dir, SBOM(o.Version)), o, binaries); err != nil {
		return fmt.Errorf("SBOM: %w", err)
	}
	files = append(files, SBOM(o.Version))
	return writeSums(o.Dir, files)
}

// clean removes what an earlier release left in dir: its archives, image,
// SBOM and sums, and nothing else.
func clean(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		n := e.Name()
		if n == Sums || strings.HasSuffix(n, ".tar.gz") || strings.HasSuffix(n, "_oci.tar") || strings.HasSuffix(n, ".spdx.json") {
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// tarEntry is one regular file or directory of an archive.
type tarEntry struct {
	name string
	mode int64
	body []byte // nil: a directory
}

// writeTar writes entries as a tar, in order, owned by root and dated t.
func writeTar(w io.Writer, entries []tarEntry, t time.Time) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: t, Uname: "root", Gname: "root", Format: tar.FormatPAX}
		if e.body == nil {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(e.body); err != nil {
			return err
		}
	}
	return tw.Close()
}

// writeArchive packs the binary at bin as name (executable) into a
// .tar.gz at path: the form Nomad's artifact unpacks with the mode kept.
func writeArchive(path, bin, name string, t time.Time) error {
	body, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	gz.ModTime = t
	if err := writeTar(gz, []tarEntry{{name: name, mode: 0o755, body: body}}, t); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// writeSums writes SHA256SUMS over files in dir, in the form sha256sum -c
// reads.
func writeSums(dir string, files []string) error {
	slices.Sort(files)
	var b strings.Builder
	for _, f := range files {
		sum, err := fileSHA256(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, f)
	}
	return os.WriteFile(filepath.Join(dir, Sums), []byte(b.String()), 0o644)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
