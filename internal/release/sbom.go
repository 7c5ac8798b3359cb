package release

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

// The SPDX 2.3 document make release writes: one package per binary (its
// archive's checksum, the release version) and one per Go module linked
// into any of them (path, version, purl), each binary DEPENDS_ON the
// modules its build information lists, read from the binary itself as
// `go version -m` reads it.

type spdxDoc struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreation       `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	SPDXID           string         `json:"SPDXID"`
	Name             string         `json:"name"`
	VersionInfo      string         `json:"versionInfo"`
	DownloadLocation string         `json:"downloadLocation"`
	FilesAnalyzed    bool           `json:"filesAnalyzed"`
	PackageFileName  string         `json:"packageFileName,omitempty"`
	Purpose          string         `json:"primaryPackagePurpose,omitempty"`
	Checksums        []spdxChecksum `json:"checksums,omitempty"`
	ExternalRefs     []spdxRef      `json:"externalRefs,omitempty"`
	Comment          string         `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

var spdxIDChars = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

func spdxID(kind string, parts ...string) string {
	return "SPDXRef-" + kind + "-" + spdxIDChars.ReplaceAllString(strings.Join(parts, "-"), "-")
}

// moduleOf is the module a build information entry stands for, after
// its replacement.
func moduleOf(m *debug.Module) (path, version, sum string) {
	if m.Replace != nil {
		m = m.Replace
	}
	return m.Path, m.Version, m.Sum
}

func writeSBOM(path string, o Options, binaries map[Platform]string) error {
	doc := spdxDoc{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:         "drover-" + o.Version,
		CreationInfo: spdxCreation{Created: o.Time.UTC().Format(time.RFC3339), Creators: []string{"Tool: drover make release"}},
	}
	modules := map[string]bool{}
	for _, p := range o.Platforms {
		for _, c := range o.Commands {
			bi, err := buildinfo.ReadFile(filepath.Join(binaries[p], c))
			if err != nil {
				return fmt.Errorf("%s for %s: %w", c, p, err)
			}
			archive := Archive(c, o.Version, p)
			sum, err := fileSHA256(filepath.Join(o.Dir, archive))
			if err != nil {
				return err
			}
			id := spdxID("Binary", c, p.OS, p.Arch)
			doc.Packages = append(doc.Packages, spdxPackage{
				SPDXID: id, Name: c, VersionInfo: o.Version, DownloadLocation: "NOASSERTION",
				PackageFileName: archive, Purpose: "APPLICATION",
				Checksums:    []spdxChecksum{{"SHA256", sum}},
				ExternalRefs: []spdxRef{{"PACKAGE-MANAGER", "purl", fmt.Sprintf("pkg:golang/%s@%s?goos=%s&goarch=%s", bi.Path, o.Version, p.OS, p.Arch)}},
				Comment:      fmt.Sprintf("%s for %s, built with %s from revision %s", bi.Path, p, bi.GoVersion, o.Revision),
			})
			doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", id})
			deps := []*debug.Module{{Path: "stdlib", Version: bi.GoVersion}}
			deps = append(deps, bi.Deps...)
			for _, m := range deps {
				mp, mv, msum := moduleOf(m)
				mid := spdxID("Module", mp, mv)
				if !modules[mid] {
					modules[mid] = true
					pkg := spdxPackage{
						SPDXID: mid, Name: mp, VersionInfo: mv, DownloadLocation: "NOASSERTION", Purpose: "LIBRARY",
						ExternalRefs: []spdxRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + mp + "@" + mv}},
					}
					if msum != "" {
						pkg.Comment = "go.sum " + msum
					}
					doc.Packages = append(doc.Packages, pkg)
				}
				doc.Relationships = append(doc.Relationships, spdxRelationship{id, "DEPENDS_ON", mid})
			}
		}
	}
	slices.SortStableFunc(doc.Packages[:], func(a, b spdxPackage) int {
		return strings.Compare(kindOrder(a.SPDXID), kindOrder(b.SPDXID))
	})
	body, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	ns := sha256.Sum256(body)
	doc.DocumentNamespace = "https://github.com/drover-dr/drover/releases/" + o.Version + "/sbom-" + hex.EncodeToString(ns[:8])
	body, err = json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(body, '\n'), 0o644)
}

// kindOrder sorts binaries first, then modules by ID.
func kindOrder(id string) string {
	if strings.HasPrefix(id, "SPDXRef-Binary-") {
		return "0" + id
	}
	return "1" + id
}
