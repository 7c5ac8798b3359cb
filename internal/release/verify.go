package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Says names the commands that say their version, and how to ask.
var Says = map[string]string{"drctl": "version", "worker": "--version"}

// Verify checks the release of version in dir as an operator relies on
// it: SHA256SUMS names every file of the release with its right sum;
// each archive holds its command alone, executable, built for its
// platform (drctl and the worker with the version stamped); the SBOM
// lists each archive (its checksum) and every module its binary holds;
// the image has one manifest per platform whose entrypoint is the
// worker, held in its layer byte for byte as in that platform's archive;
// and drctl and the worker of this machine's platform, run, say the
// version. It returns every problem found.
func Verify(ctx context.Context, dir, version string, commands []string, platforms []Platform) error {
	if len(platforms) == 0 {
		platforms = Platforms
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	// The sums.
	want := []string{SBOM(version)}
	for _, p := range platforms {
		for _, c := range commands {
			want = append(want, Archive(c, version, p))
		}
	}
	if slices.Contains(commands, "worker") {
		want = append(want, Image(version))
	}
	sums := map[string]string{}
	raw, err := os.ReadFile(filepath.Join(dir, Sums))
	if err != nil {
		return fmt.Errorf("read %s: %w", Sums, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 {
			bad("%s: line %q is not \"SHA256  FILE\"", Sums, line)
			continue
		}
		sums[name] = sum
	}
	for _, f := range want {
		got, err := fileSHA256(filepath.Join(dir, f))
		switch {
		case err != nil:
			bad("%s: %v", f, err)
		case sums[f] == "":
			bad("%s lists no sum of %s", Sums, f)
		case sums[f] != got:
			bad("%s: sha256 %s, %s says %s", f, got, Sums, sums[f])
		}
	}

	// The archives: one binary each, kept for the checks below.
	bins := map[string][]byte{} // archive => binary
	for _, p := range platforms {
		for _, c := range commands {
			a := Archive(c, version, p)
			body, err := readArchive(filepath.Join(dir, a), c)
			if err != nil {
				bad("%s: %v", a, err)
				continue
			}
			bins[a] = body
			bi, err := buildinfo.Read(bytes.NewReader(body))
			if err != nil {
				bad("%s: no Go build information: %v", a, err)
				continue
			}
			settings := map[string]string{}
			for _, s := range bi.Settings {
				settings[s.Key] = s.Value
			}
			if settings["GOOS"] != p.OS || settings["GOARCH"] != p.Arch || settings["CGO_ENABLED"] != "0" {
				bad("%s: built for %s/%s (CGO_ENABLED=%s), want %s, static", a, settings["GOOS"], settings["GOARCH"], settings["CGO_ENABLED"], p)
			}
			// -trimpath keeps -ldflags out of the build information: the
			// stamped string is in the binary's data (and the host's
			// binaries are run below).
			if Says[c] != "" && !bytes.Contains(body, []byte(version)) {
				bad("%s: the version %s is not stamped in the binary", a, version)
			}
		}
	}

	errs = append(errs, verifySBOM(dir, version, commands, platforms, bins)...)
	if slices.Contains(commands, "worker") {
		errs = append(errs, verifyImage(dir, version, platforms, bins)...)
	}

	// Run what this machine can run.
	host := Platform{runtime.GOOS, runtime.GOARCH}
	if slices.Contains(platforms, host) {
		for _, c := range commands {
			body := bins[Archive(c, version, host)]
			if Says[c] == "" || body == nil {
				continue
			}
			out, err := runBinary(ctx, body, Says[c])
			if prefix := c + " " + version + " ("; err != nil || !strings.HasPrefix(out, prefix) {
				bad("%s %s printed %q (%v), want it to start with %q", c, Says[c], out, err, prefix)
			}
		}
	}
	return errors.Join(errs...)
}

// readArchive returns the one file of the .tar.gz at path, which must be
// name, a regular executable file.
func readArchive(path, name string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(gz)
	var body []byte
	for n := 0; ; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			if body == nil {
				return nil, fmt.Errorf("holds no %s", name)
			}
			return body, nil
		}
		if err != nil {
			return nil, err
		}
		if n > 0 || h.Name != name || h.Typeflag != tar.TypeReg || h.Mode&0o111 != 0o111 {
			return nil, fmt.Errorf("entry %q (mode %o): want %s alone, executable", h.Name, h.Mode, name)
		}
		if body, err = io.ReadAll(tr); err != nil {
			return nil, err
		}
	}
}

// runBinary runs body with args and returns what it printed.
func runBinary(ctx context.Context, body []byte, args ...string) (string, error) {
	dir, err := os.MkdirTemp("", "drover-release-run-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, body, 0o755); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"HOME=" + dir}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func verifySBOM(dir, version string, commands []string, platforms []Platform, bins map[string][]byte) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	raw, err := os.ReadFile(filepath.Join(dir, SBOM(version)))
	if err != nil {
		return []error{err}
	}
	var doc spdxDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		return []error{fmt.Errorf("%s: %w", SBOM(version), err)}
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.SPDXID != "SPDXRef-DOCUMENT" || doc.DocumentNamespace == "" || doc.CreationInfo.Created == "" {
		bad("%s: not an SPDX 2.3 document (version %q, id %q, namespace %q)", SBOM(version), doc.SPDXVersion, doc.SPDXID, doc.DocumentNamespace)
	}
	pkgs := map[string]spdxPackage{}
	for _, p := range doc.Packages {
		pkgs[p.SPDXID] = p
	}
	deps := map[string]bool{}
	for _, r := range doc.Relationships {
		deps[r.Element+" "+r.Type+" "+r.Related] = true
	}
	for _, p := range platforms {
		for _, c := range commands {
			a := Archive(c, version, p)
			body := bins[a]
			if body == nil {
				continue
			}
			id := spdxID("Binary", c, p.OS, p.Arch)
			pkg, ok := pkgs[id]
			sum, _ := fileSHA256(filepath.Join(dir, a))
			if !ok || pkg.VersionInfo != version || pkg.PackageFileName != a || len(pkg.Checksums) != 1 || pkg.Checksums[0].Value != sum {
				bad("SBOM: no package of %s with version %s and sha256 %s: %+v", a, version, sum, pkg)
				continue
			}
			if !deps["SPDXRef-DOCUMENT DESCRIBES "+id] {
				bad("SBOM: the document does not describe %s", a)
			}
			bi, err := buildinfo.Read(bytes.NewReader(body))
			if err != nil {
				continue
			}
			for _, m := range bi.Deps {
				mp, mv, _ := moduleOf(m)
				mid := spdxID("Module", mp, mv)
				if mod, ok := pkgs[mid]; !ok || mod.Name != mp || mod.VersionInfo != mv || !deps[id+" DEPENDS_ON "+mid] {
					bad("SBOM: %s holds module %s %s, which the SBOM does not list as its dependency", a, mp, mv)
				}
			}
		}
	}
	return errs
}

func verifyImage(dir, version string, platforms []Platform, bins map[string][]byte) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	name := Image(version)
	tmp, err := os.MkdirTemp("", "drover-release-oci-")
	if err != nil {
		return []error{err}
	}
	defer os.RemoveAll(tmp)
	if err := untar(filepath.Join(dir, name), tmp); err != nil {
		return []error{fmt.Errorf("%s: %w", name, err)}
	}
	idx, err := imageIndex(tmp, version)
	if err != nil {
		return []error{fmt.Errorf("%s: %w", name, err)}
	}
	man, err := idx.IndexManifest()
	if err != nil {
		return []error{fmt.Errorf("%s: %w", name, err)}
	}
	seen := map[Platform]bool{}
	for _, d := range man.Manifests {
		if d.Platform == nil {
			bad("%s: manifest %s names no platform", name, d.Digest)
			continue
		}
		p := Platform{d.Platform.OS, d.Platform.Architecture}
		seen[p] = true
		img, err := idx.Image(d.Digest)
		if err != nil {
			bad("%s: image %s: %v", name, p, err)
			continue
		}
		cf, err := img.ConfigFile()
		if err != nil {
			bad("%s: image %s: %v", name, p, err)
			continue
		}
		if cf.OS != p.OS || cf.Architecture != p.Arch {
			bad("%s: the %s image's config says %s/%s", name, p, cf.OS, cf.Architecture)
		}
		if !slices.Equal(cf.Config.Entrypoint, []string{"/" + ImageBinary}) || cf.Config.User == "" || strings.HasPrefix(cf.Config.User, "0") || cf.Config.User == "root" {
			bad("%s: the %s image's entrypoint %q as user %q; want /%s, not as root", name, p, cf.Config.Entrypoint, cf.Config.User, ImageBinary)
		}
		if cf.Config.Labels["org.opencontainers.image.version"] != version {
			bad("%s: the %s image's version label is %q, want %s", name, p, cf.Config.Labels["org.opencontainers.image.version"], version)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) == 0 {
			bad("%s: the %s image has no layers (%v)", name, p, err)
			continue
		}
		var got []byte
		var mode int64
		for _, l := range layers {
			rc, err := l.Uncompressed()
			if err != nil {
				bad("%s: %s layer: %v", name, p, err)
				continue
			}
			tr := tar.NewReader(rc)
			for {
				h, err := tr.Next()
				if err != nil {
					break
				}
				if strings.TrimPrefix(h.Name, "/") == ImageBinary {
					got, _ = io.ReadAll(tr)
					mode = h.Mode
				}
			}
			rc.Close()
		}
		want := bins[Archive("worker", version, p)]
		switch {
		case got == nil:
			bad("%s: the %s image holds no /%s", name, p, ImageBinary)
		case want != nil && !bytes.Equal(got, want):
			bad("%s: the %s image's worker (sha256 %s) is not the archive's (%s)", name, p, sha256Hex(got), sha256Hex(want))
		case mode&0o111 != 0o111:
			bad("%s: the %s image's worker has mode %o, not executable", name, p, mode)
		}
	}
	for _, p := range platforms {
		if !seen[p] {
			bad("%s: no image for %s", name, p)
		}
	}
	return errs
}

// untar unpacks the tar at path into dir (regular files and directories
// only, no path out of dir).
func untar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("entry %q leaves the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			body, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			if err := os.WriteFile(p, body, 0o644); err != nil {
				return err
			}
		}
	}
}

// imageIndex is the multi-platform index the OCI layout at dir names,
// alone, by version.
func imageIndex(dir, version string) (v1.ImageIndex, error) {
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("not an OCI image layout: %w", err)
	}
	man, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(man.Manifests) != 1 || man.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != version || !man.Manifests[0].MediaType.IsIndex() {
		return nil, fmt.Errorf("the layout's index.json lists %d entries; want one image index named %s: %+v", len(man.Manifests), version, man.Manifests)
	}
	return top.ImageIndex(man.Manifests[0].Digest)
}
