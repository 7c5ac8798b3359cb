package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestRelease builds a release of drctl and the worker for this machine's
// platform with the tool make release runs and checks it: the archives,
// SHA256SUMS, the SBOM and the worker's image pass its check (Verify); drctl version of the
// archived binary prints the stamped version; the image's entrypoint is
// the worker, which its layer holds as the archive does. Then each kind
// of damage an operator must be told of is made once, and the tool's
// check (--verify) must fail naming it.
func TestRelease(t *testing.T) {
	host := Platform{runtime.GOOS, runtime.GOARCH}
	if !slices.Contains(Platforms, host) {
		t.Skipf("releases are built for %v; this machine is %s", Platforms, host)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	// The release tool as make release runs it, built once (without the
	// race detector, whose cost on hashing and unpacking tens of
	// megabytes would make this test minutes long).
	tool := filepath.Join(t.TempDir(), "release")
	if out, err := exec.Command("go", "build", "-o", tool, "./scripts/release").CombinedOutput(); err != nil {
		t.Fatalf("build the release tool: %v\n%s", err, out)
	}
	dir := t.TempDir()
	const version = "v0.0.0-test.1"
	cmds := []string{"drctl", "worker"}
	common := []string{"--version", version, "--commands", strings.Join(cmds, ","), "--platforms", host.String()}
	args := append([]string{"--revision", "0123456789ab", "--time", "2026-12-01T00:00:00Z", "--out", dir}, common...)
	if out, err := exec.CommandContext(t.Context(), tool, args...).CombinedOutput(); err != nil || !strings.Contains(string(out), "checked") {
		t.Fatalf("the release tool: %v\n%s", err, out)
	}

	// What Verify checks, seen directly once.
	drctl, err := readArchive(filepath.Join(dir, Archive("drctl", version, host)), "drctl")
	if err != nil {
		t.Fatal(err)
	}
	out, err := runBinary(t.Context(), drctl, "version")
	if err != nil || !strings.HasPrefix(out, "drctl "+version+" (revision 0123456789ab") {
		t.Errorf("drctl version of the release printed %q (%v), want the stamped version and revision", out, err)
	}
	sums, _ := os.ReadFile(filepath.Join(dir, Sums))
	for _, f := range []string{Archive("drctl", version, host), Archive("worker", version, host), Image(version), SBOM(version)} {
		sum, _ := fileSHA256(filepath.Join(dir, f))
		if !strings.Contains(string(sums), sum+"  "+f+"\n") {
			t.Errorf("SHA256SUMS lacks %s %s:\n%s", sum, f, sums)
		}
	}
	oci := t.TempDir()
	if err := untar(filepath.Join(dir, Image(version)), oci); err != nil {
		t.Fatal(err)
	}
	idx, err := imageIndex(oci, version)
	if err != nil {
		t.Fatal(err)
	}
	man, err := idx.IndexManifest()
	if err != nil || len(man.Manifests) != 1 {
		t.Fatalf("the image index lists %d manifests (%v), want 1", len(man.Manifests), err)
	}
	img, err := idx.Image(man.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil || !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/worker"}) || cf.Architecture != host.Arch {
		t.Errorf("the image's config: entrypoint %q, architecture %q (%v)", cf.Config.Entrypoint, cf.Architecture, err)
	}

	// The image as a tool that is not ours reads it: skopeo, which
	// docs/guides/install.md copies it into a registry with.
	if _, err := exec.LookPath("skopeo"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("skopeo is not installed (.ci/run installs it): the image was not read by it")
		}
		t.Log("skopeo is not installed: the image was not read by it")
	} else {
		archive := "oci-archive:" + filepath.Join(dir, Image(version))
		out, err := exec.CommandContext(t.Context(), "skopeo", "inspect", "--config", archive).Output()
		var sc struct {
			Architecture string
			Config       struct{ Entrypoint []string }
		}
		if err != nil || json.Unmarshal(out, &sc) != nil || !slices.Equal(sc.Config.Entrypoint, []string{"/usr/local/bin/worker"}) || sc.Architecture != host.Arch {
			t.Errorf("skopeo inspect --config %s: %v\n%s", archive, err, out)
		}
		if out, err := exec.CommandContext(t.Context(), "skopeo", "copy", "--all", archive, "dir:"+filepath.Join(t.TempDir(), "copy")).CombinedOutput(); err != nil {
			t.Errorf("skopeo copy --all %s: %v\n%s", archive, err, out)
		}
	}

	// Damage, one kind at a time, each on a fresh copy.
	body, err := readArchive(filepath.Join(dir, Archive("worker", version, host)), "worker")
	if err != nil {
		t.Fatal(err)
	}
	damages := []struct {
		name, want string
		damage     func(t *testing.T, d string)
	}{
		{"an archive changed after its sum was taken", "sha256", func(t *testing.T, d string) {
			appendTo(t, filepath.Join(d, Archive("drctl", version, host)), "x")
		}},
		{"a file the sums leave out", "lists no sum of " + SBOM(version), func(t *testing.T, d string) {
			p := filepath.Join(d, Sums)
			b, _ := os.ReadFile(p)
			var keep []string
			for _, l := range strings.SplitAfter(string(b), "\n") {
				if !strings.Contains(l, SBOM(version)) {
					keep = append(keep, l)
				}
			}
			write(t, p, strings.Join(keep, ""))
		}},
		{"a worker archive whose binary is not the image's", "is not the archive's", func(t *testing.T, d string) {
			writeArchiveBytes(t, filepath.Join(d, Archive("worker", version, host)), "worker", append(body, 0))
			resum(t, d)
		}},
		{"an archive of another name", "want drctl alone", func(t *testing.T, d string) {
			writeArchiveBytes(t, filepath.Join(d, Archive("drctl", version, host)), "bin/drctl", drctl)
			resum(t, d)
		}},
		{"a binary without the stamped version", "drctl version printed", func(t *testing.T, d string) {
			writeArchiveBytes(t, filepath.Join(d, Archive("drctl", version, host)), "drctl",
				bytes.ReplaceAll(drctl, []byte(version), []byte("v0.0.0-tEst.1")))
			resum(t, d)
		}},
	}
	for _, dm := range damages {
		t.Run(dm.name, func(t *testing.T) {
			d := t.TempDir()
			for _, f := range []string{Archive("drctl", version, host), Archive("worker", version, host), Image(version), SBOM(version), Sums} {
				b, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				write(t, filepath.Join(d, f), string(b))
			}
			dm.damage(t, d)
			out, err := exec.CommandContext(t.Context(), tool, append([]string{"--verify", "--out", d}, common...)...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), dm.want) {
				t.Fatalf("the check of a release with %s: %v\n%s\nwant it to fail naming %q", dm.name, err, out, dm.want)
			}
		})
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendTo(t *testing.T, p, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// writeArchiveBytes writes a .tar.gz holding body as name.
func writeArchiveBytes(t *testing.T, p, name string, body []byte) {
	t.Helper()
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.NoCompression) // quick under the race detector
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write(body)
	tw.Close()
	gz.Close()
	write(t, p, buf.String())
}

// resum rewrites SHA256SUMS over the release files in d, so that only
// the damage made is left to find.
func resum(t *testing.T, d string) {
	t.Helper()
	entries, _ := os.ReadDir(d)
	var files []string
	for _, e := range entries {
		if e.Name() != Sums {
			files = append(files, e.Name())
		}
	}
	if err := writeSums(d, files); err != nil {
		t.Fatal(err)
	}
}
