// Package evidence keeps the evidence of DR actions where Temporal's
// retention cannot delete it: each drill, test recovery and failover's
// report (JSON, Markdown, HTML), with a record of what an auditor asks
// (plan, action, who, when, outcome, RTO, RPO, the plan's targets and a
// verdict against them), sealed by an ed25519 signature over the record,
// which names the SHA-256 of every file.
//
// A store is a directory: one folder per plan, in it one folder per run,
// named by the run's start and its run id:
//
//	DIR/shop/20260301T120000Z-<run id>/record.json
//	                                  record.sig
//	                                  report.json report.md report.html
//
// A folder appears whole or not at all (it is written aside, then
// renamed). Verify finds a changed, missing or added file, a record
// changed after it was sealed, and a seal by a key the auditor does not
// trust.
package evidence

import (
	"archive/tar"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Record is the evidence of one run: what it was, its outcome, and the
// digest of each file of its report.
type Record struct {
	Plan       string `json:"plan"`
	Action     string `json:"action"`
	WorkflowID string `json:"workflowId"`
	RunID      string `json:"runId"`
	// Outcome is the run's status as its report says it: completed,
	// failed, partial, canceled, terminated, timed out.
	Outcome   string    `json:"outcome"`
	StartedBy string    `json:"startedBy,omitempty"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end,omitzero"`
	// RTO and RPO as the action measured them; RPOKnown false when it
	// had no sync to measure from.
	RTO      time.Duration `json:"rto,omitempty"`
	RPO      time.Duration `json:"rpo,omitempty"`
	RPOKnown bool          `json:"rpoKnown"`
	// The plan's targets the verdict is against (zero: none).
	RTOTarget time.Duration `json:"rtoTarget,omitempty"`
	RPOTarget time.Duration `json:"rpoTarget,omitempty"`
	// Every is how often the plan's policy.drills says this kind of
	// test must succeed (zero: it does not say).
	Every time.Duration `json:"every,omitempty"`
	// Verdict is Judge's word on the run.
	Verdict string `json:"verdict"`
	// Error is the run's error, if it ended with one.
	Error string `json:"error,omitempty"`
	// Files are the report's files by name, each with its SHA-256.
	Files    map[string]string `json:"files"`
	StoredAt time.Time         `json:"storedAt"`
}

// Verdicts.
const (
	Met    = "met"
	Missed = "missed"
	Failed = "failed"
)

// Judge says whether a run met its plan's targets: failed when it did
// not complete, missed when its RTO or RPO was over the target (or its
// RPO unknown against a target), else met. The reason follows a colon.
func Judge(r *Record) string {
	if r.Outcome != "completed" {
		why := r.Outcome
		switch {
		case r.Error != "" && r.Outcome == "failed":
			why = r.Error
		case r.Error != "":
			why += ": " + r.Error
		}
		return Failed + ": " + why
	}
	var miss []string
	if r.RTOTarget > 0 && r.RTO > r.RTOTarget {
		miss = append(miss, fmt.Sprintf("RTO %v over the target %v", r.RTO.Round(time.Millisecond), r.RTOTarget))
	}
	if r.RPOTarget > 0 && r.RPOKnown && r.RPO > r.RPOTarget {
		miss = append(miss, fmt.Sprintf("RPO %v over the target %v", r.RPO.Round(time.Millisecond), r.RPOTarget))
	}
	if len(miss) > 0 {
		return Missed + ": " + strings.Join(miss, "; ")
	}
	return Met
}

// Seal is the signature of a record: the signer's public key and an
// ed25519 signature of the statement "drover evidence v1\n" followed by
// the record file's bytes.
type Seal struct {
	Key   []byte `json:"key"`
	Value []byte `json:"value"`
}

const (
	recordFile = "record.json"
	sealFile   = "record.sig"
	sealPrefix = "drover evidence v1\n"
)

func statement(record []byte) []byte { return append([]byte(sealPrefix), record...) }

// Dir is a store in a directory.
type Dir struct{ Root string }

// Entry is a record as a store holds it.
type Entry struct {
	Record
	// Path is the entry's folder.
	Path string `json:"path"`
}

// Put stores the files of a run with its record, sealed by key. It fills
// in the record's Files, Verdict and StoredAt. Storing a run already
// stored is refused (evidence is written once).
func (d Dir) Put(rec Record, files map[string][]byte, key ed25519.PrivateKey, now time.Time) (*Entry, error) {
	if rec.Plan == "" || strings.ContainsAny(rec.Plan, `/\`) || rec.Plan[0] == '.' {
		return nil, fmt.Errorf("store evidence: plan name %q is not a folder name", rec.Plan)
	}
	if rec.RunID == "" || strings.ContainsAny(rec.RunID, `/\`) {
		return nil, fmt.Errorf("store evidence of %s: run id %q", rec.Plan, rec.RunID)
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("store evidence: no signing key")
	}
	rec.Files = map[string]string{}
	for name, b := range files {
		if name == recordFile || name == sealFile || strings.ContainsAny(name, `/\`) || name == "" || name[0] == '.' {
			return nil, fmt.Errorf("store evidence: file name %q", name)
		}
		sum := sha256.Sum256(b)
		rec.Files[name] = hex.EncodeToString(sum[:])
	}
	rec.Verdict = Judge(&rec)
	rec.StoredAt = now.UTC()
	rb, err := json.MarshalIndent(&rec, "", "  ")
	if err != nil {
		return nil, err
	}
	seal, err := json.MarshalIndent(Seal{Key: key.Public().(ed25519.PublicKey), Value: ed25519.Sign(key, statement(rb))}, "", "  ")
	if err != nil {
		return nil, err
	}
	planDir := filepath.Join(d.Root, rec.Plan)
	if err := os.MkdirAll(planDir, 0o755); err != nil {
		return nil, fmt.Errorf("store evidence: %w", err)
	}
	final := filepath.Join(planDir, rec.Start.UTC().Format("20060102T150405Z")+"-"+rec.RunID)
	if _, err := os.Stat(final); err == nil {
		return nil, fmt.Errorf("store evidence: %s is stored already (%s)", rec.RunID, final)
	}
	tmp, err := os.MkdirTemp(planDir, ".put-")
	if err != nil {
		return nil, fmt.Errorf("store evidence: %w", err)
	}
	defer os.RemoveAll(tmp)
	all := maps.Clone(files)
	if all == nil {
		all = map[string][]byte{}
	}
	all[recordFile], all[sealFile] = rb, seal
	for name, b := range all {
		if err := writeSynced(filepath.Join(tmp, name), b); err != nil {
			return nil, fmt.Errorf("store evidence: %w", err)
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		return nil, fmt.Errorf("store evidence: %w", err)
	}
	return &Entry{Record: rec, Path: final}, nil
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Has tells whether the run is stored for plan.
func (d Dir) Has(plan, runID string) bool {
	m, _ := filepath.Glob(filepath.Join(d.Root, plan, "*-"+runID))
	return len(m) > 0
}

// List returns the entries of plan that started at or after since,
// oldest first. An entry whose record cannot be read is listed with its
// Verdict saying so, never left out.
func (d Dir) List(plan string, since time.Time) ([]Entry, error) {
	des, err := os.ReadDir(filepath.Join(d.Root, plan))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list evidence of %s: %w", plan, err)
	}
	var out []Entry
	for _, de := range des {
		if !de.IsDir() || strings.HasPrefix(de.Name(), ".") {
			continue
		}
		path := filepath.Join(d.Root, plan, de.Name())
		e := Entry{Path: path}
		b, err := os.ReadFile(filepath.Join(path, recordFile))
		if err == nil {
			err = json.Unmarshal(b, &e.Record)
		}
		if err != nil {
			e.Plan, e.Verdict = plan, "unreadable: "+err.Error()
			if t, perr := time.Parse("20060102T150405Z", strings.SplitN(de.Name(), "-", 2)[0]); perr == nil {
				e.Start = t
			}
		}
		if !since.IsZero() && e.Start.Before(since) {
			continue
		}
		out = append(out, e)
	}
	slices.SortStableFunc(out, func(a, b Entry) int { return a.Start.Compare(b.Start) })
	return out, nil
}

// ErrTampered is what Verify's error wraps when the evidence is not as
// it was sealed.
var ErrTampered = errors.New("the evidence is not as it was stored")

// Verify checks an entry's folder: its seal by one of trusted over its
// record, and every file against the record's digest; a file missing,
// changed or added is named. The error wraps ErrTampered, or says the
// seal's key is not trusted.
func Verify(path string, trusted []ed25519.PublicKey) error {
	rb, err := os.ReadFile(filepath.Join(path, recordFile))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrTampered, err)
	}
	sb, err := os.ReadFile(filepath.Join(path, sealFile))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrTampered, err)
	}
	var seal Seal
	if err := json.Unmarshal(sb, &seal); err != nil || len(seal.Key) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: the seal %s cannot be read", ErrTampered, sealFile)
	}
	if !slices.ContainsFunc(trusted, func(k ed25519.PublicKey) bool { return k.Equal(ed25519.PublicKey(seal.Key)) }) {
		return fmt.Errorf("sealed by key %s, which is not among the trusted keys", keyID(seal.Key))
	}
	if !ed25519.Verify(ed25519.PublicKey(seal.Key), statement(rb), seal.Value) {
		return fmt.Errorf("%w: %s does not match its seal (changed after it was stored)", ErrTampered, recordFile)
	}
	var rec Record
	if err := json.Unmarshal(rb, &rec); err != nil {
		return fmt.Errorf("%w: %v", ErrTampered, err)
	}
	var bad []string
	for _, name := range slices.Sorted(keys(rec.Files)) {
		b, err := os.ReadFile(filepath.Join(path, name))
		if err != nil {
			bad = append(bad, name+" is missing")
			continue
		}
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != rec.Files[name] {
			bad = append(bad, name+" was changed")
		}
	}
	des, err := os.ReadDir(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrTampered, err)
	}
	for _, de := range des {
		if n := de.Name(); n != recordFile && n != sealFile && rec.Files[n] == "" {
			bad = append(bad, n+" was added")
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrTampered, strings.Join(bad, ", "))
	}
	return nil
}

func keys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func keyID(k []byte) string {
	sum := sha256.Sum256(k)
	return hex.EncodeToString(sum[:8])
}

// Export writes the entries' folders, as they are stored, into one
// gzipped tar archive, each under PLAN/FOLDER/, with index.json (the
// records) at its root. An auditor verifies an unpacked archive with
// Verify on each folder.
func Export(w io.Writer, entries []Entry) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	now := time.Now().UTC()
	var index []Record
	for _, e := range entries {
		index = append(index, e.Record)
		des, err := os.ReadDir(e.Path)
		if err != nil {
			return fmt.Errorf("export %s: %w", e.Path, err)
		}
		prefix := filepath.Base(filepath.Dir(e.Path)) + "/" + filepath.Base(e.Path) + "/"
		for _, de := range des {
			b, err := os.ReadFile(filepath.Join(e.Path, de.Name()))
			if err != nil {
				return fmt.Errorf("export %s: %w", e.Path, err)
			}
			if err := addFile(tw, prefix+de.Name(), b, now); err != nil {
				return err
			}
		}
	}
	ib, err := json.MarshalIndent(index, "", "  ")
	if err != nil {
		return err
	}
	if err := addFile(tw, "index.json", ib, now); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

func addFile(tw *tar.Writer, name string, b []byte, at time.Time) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o444, Size: int64(len(b)), ModTime: at, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err := tw.Write(b)
	return err
}
