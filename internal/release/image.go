package release

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user: no root inside the container (distroless's nonroot).
const imageUser = "65532:65532"

// caBundle is where Debian keeps the CA certificates; when the building
// host has them, the image carries them at the same path, where Go's TLS
// looks, so that the worker can reach Temporal Cloud or a server with a
// public certificate.
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// writeImage builds the worker's OCI image for each platform, with no
// base image: one layer holding the static worker binary (and the CA
// certificates, /etc/passwd's nonroot user and /tmp), and writes the
// images under one index, named by the version, as an OCI image layout
// in a tar at path.
func writeImage(path string, binaries map[Platform]string, o Options, work string) error {
	ca, err := os.ReadFile(caBundle)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range o.Platforms {
		bin, err := os.ReadFile(filepath.Join(binaries[p], "worker"))
		if err != nil {
			return err
		}
		img, err := workerImage(bin, ca, p, o.Version, o.Revision, o.Time)
		if err != nil {
			return err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: p.OS, Architecture: p.Arch},
		}})
	}
	// The layout's index.json names one entry, the multi-platform index,
	// by the version: what skopeo, podman and crane take as the image.
	dir := filepath.Join(work, "oci")
	l, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := l.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": o.Version})); err != nil {
		return err
	}
	return tarDir(path, dir, o.Time)
}

// workerImage is the image of one platform's worker binary.
func workerImage(bin, ca []byte, p Platform, version, revision string, t time.Time) (v1.Image, error) {
	entries := []tarEntry{
		{name: "etc/", mode: 0o755},
		{name: "etc/passwd", mode: 0o644, body: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, body: []byte("root:x:0:\nnonroot:x:65532:\n")},
	}
	if ca != nil {
		entries = append(entries, tarEntry{name: "etc/ssl/", mode: 0o755}, tarEntry{name: "etc/ssl/certs/", mode: 0o755},
			tarEntry{name: caBundle[1:], mode: 0o644, body: ca})
	}
	entries = append(entries,
		tarEntry{name: "tmp/", mode: 0o1777},
		tarEntry{name: "usr/", mode: 0o755}, tarEntry{name: "usr/local/", mode: 0o755}, tarEntry{name: "usr/local/bin/", mode: 0o755},
		tarEntry{name: ImageBinary, mode: 0o755, body: bin})
	var buf bytes.Buffer
	if err := writeTar(&buf, entries, t); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: t}, CreatedBy: "make release: the worker " + version + " for " + p.String(),
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = p.OS, p.Arch, v1.Time{Time: t}
	cf.Config.Entrypoint = []string{"/" + ImageBinary}
	cf.Config.User = imageUser
	cf.Config.WorkingDir = "/tmp"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":    "drover-worker",
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.source":   "https://github.com/drover-dr/drover",
	}
	return mutate.ConfigFile(img, cf)
}

// tarDir writes the files under dir into a tar at path, in a fixed
// order, dated t.
func tarDir(path, dir string, t time.Time) error {
	var entries []tarEntry
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			entries = append(entries, tarEntry{name: rel + "/", mode: 0o755})
			return nil
		}
		body, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		entries = append(entries, tarEntry{name: rel, mode: 0o644, body: body})
		return nil
	})
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeTar(f, entries, t); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
