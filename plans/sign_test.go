package plans

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSignatureSurvivesTheTrip: a plan signed as drctl loads it verifies
// after the JSON round trip of a workflow input, and any change to it, to
// its name, or to the signature's dates does not.
func TestSignatureSurvivesTheTrip(t *testing.T) {
	for _, f := range []string{"examples/demo.yaml", "examples/exec.yaml", "examples/nomad.yaml"} {
		p, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		pub, key, err := GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		sig, err := Sign(p, key, now, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(struct {
			Plan *Plan      `json:"plan"`
			Sig  *Signature `json:"signature"`
		}{p, sig})
		var got struct {
			Plan *Plan      `json:"plan"`
			Sig  *Signature `json:"signature"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		trusted := []ed25519.PublicKey{pub}
		if err := Verify(got.Plan, got.Sig, trusted, now); err != nil {
			t.Fatalf("%s: the signed plan after a JSON round trip: %v", f, err)
		}
		for name, c := range map[string]struct {
			edit func(p *Plan, s *Signature)
			want error
		}{
			"a fence CIDR":  {func(p *Plan, _ *Signature) { p.Sites[0].Fence.CIDRs = append(p.Sites[0].Fence.CIDRs, "10.0.0.0/8") }, ErrTampered},
			"the name":      {func(p *Plan, _ *Signature) { p.Metadata.Name += "-x" }, ErrTampered},
			"the policy":    {func(p *Plan, _ *Signature) { p.Policy.Parallelism++ }, ErrTampered},
			"the expiry":    {func(_ *Plan, s *Signature) { s.ExpiresAt = s.ExpiresAt.Add(24 * time.Hour) }, ErrTampered},
			"the key":       {func(_ *Plan, s *Signature) { s.Key = make([]byte, ed25519.PublicKeySize) }, ErrUnknownKey},
			"no signature":  {func(_ *Plan, s *Signature) { s.Value = nil }, ErrUnsigned},
			"a flipped bit": {func(_ *Plan, s *Signature) { s.Value[0] ^= 1 }, ErrTampered},
		} {
			var p2 Plan
			_ = json.Unmarshal(b, &struct {
				Plan *Plan `json:"plan"`
			}{&p2})
			s2 := *sig
			s2.Value = append([]byte(nil), sig.Value...)
			c.edit(&p2, &s2)
			if err := Verify(&p2, &s2, trusted, now); !errors.Is(err, c.want) {
				t.Errorf("%s: changed %s: %v, want %v", f, name, err, c.want)
			}
		}
		if err := Verify(p, sig, trusted, now.Add(2*time.Hour)); !errors.Is(err, ErrExpired) {
			t.Errorf("%s: after its validity: %v, want expired", f, err)
		}
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	pub, key, _ := GenerateKey()
	kb, _ := EncodePrivateKey(key)
	pb, _ := EncodePublicKey(pub)
	pub2, _, _ := GenerateKey()
	pb2, _ := EncodePublicKey(pub2)
	os.WriteFile(filepath.Join(dir, "k"), kb, 0o600)
	os.WriteFile(filepath.Join(dir, "p"), append(pb, pb2...), 0o644)
	k, err := ReadPrivateKey(filepath.Join(dir, "k"))
	if err != nil || !k.Equal(key) {
		t.Fatalf("read private key: %v", err)
	}
	ks, err := ReadPublicKeys(filepath.Join(dir, "p"))
	if err != nil || len(ks) != 2 || !ks[0].Equal(pub) || !ks[1].Equal(pub2) {
		t.Fatalf("read public keys: %d, %v", len(ks), err)
	}
	if _, err := ReadPublicKeys(filepath.Join(dir, "k")); err == nil {
		t.Fatal("a private key read as a trusted public key")
	}
}

// TestExplicitNoRetryExitCodesSurvive: `retryExitCodes: []` says no exit
// code means "try again". It stays so through defaults, a workflow
// input's JSON round trip (defaults applied again there) and the
// effective plan's YAML; the signature covers it, so a plan signed with
// it is not the same plan as one that takes the default [75].
func TestExplicitNoRetryExitCodesSurvive(t *testing.T) {
	plan := func(extra string) string {
		p := strings.Replace(base, `nomad: {address: "http://127.0.0.1:4646"}`, `exec: {timeout: 30s}`, 1)
		return strings.Replace(p, `east: {nomad: {job: pg}}`, `east: {exec: {start: "true", stop: "true"`+extra+`}}`, 1)
	}
	none, err := Parse("none.yaml", []byte(plan(", retryExitCodes: []")))
	if err != nil {
		t.Fatal(err)
	}
	dflt, err := Parse("default.yaml", []byte(plan("")))
	if err != nil {
		t.Fatal(err)
	}
	codes := func(p *Plan) []int { return p.Workloads[0].Sites["east"].Exec.RetryExitCodes }
	if got := codes(dflt); !slices.Equal(got, []int{DefaultRetryExitCode}) {
		t.Fatalf("without retryExitCodes: %v, want the default", got)
	}
	if got := codes(none); got == nil || len(got) != 0 {
		t.Fatalf("retryExitCodes: [] after loading: %#v, want an empty list", got)
	}
	b, err := json.Marshal(none)
	if err != nil {
		t.Fatal(err)
	}
	var trip Plan
	if err := json.Unmarshal(b, &trip); err != nil {
		t.Fatal(err)
	}
	trip.ApplyDefaults()
	if got := codes(&trip); got == nil || len(got) != 0 {
		t.Fatalf("retryExitCodes: [] after a JSON round trip and defaults: %#v, want an empty list", got)
	}
	y, err := none.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(y), "retryExitCodes: []") {
		t.Errorf("the effective plan's YAML drops retryExitCodes: []:\n%s", y)
	}
	cn, _ := CanonicalJSON(none)
	cd, _ := CanonicalJSON(dflt)
	if string(cn) == string(cd) {
		t.Fatal("a plan with retryExitCodes: [] and one with the default have the same canonical JSON: one signature approves both")
	}
	pub, key, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sig, err := Sign(none, key, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(&trip, sig, []ed25519.PublicKey{pub}, now); err != nil {
		t.Fatalf("the signed plan after the trip: %v", err)
	}
	if err := Verify(dflt, sig, []ed25519.PublicKey{pub}, now); !errors.Is(err, ErrTampered) {
		t.Fatalf("the plan with the default codes under the signature of retryExitCodes: []: %v, want tampered", err)
	}
}

// TestSigningTimeOrdersVersions: the signing time is a plan's version,
// so it keeps its nanoseconds: two versions signed within one second are
// ordered (issue 56; they were cut to the second, and a version of other
// content signed in the same second was not). A signature of a whole
// second, as older drctl made them, still verifies, before and after a
// JSON round trip.
func TestSigningTimeOrdersVersions(t *testing.T) {
	p, err := Load("examples/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pub, key, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	trusted := []ed25519.PublicKey{pub}
	second := time.Date(2026, 12, 7, 18, 0, 0, 0, time.UTC)
	older, err := Sign(p, key, second.Add(250*time.Millisecond), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	newer, err := Sign(p, key, second.Add(750*time.Millisecond), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !newer.SignedAt.After(older.SignedAt) {
		t.Fatalf("signed at %v and at %v: the later signature is not the newer version", older.SignedAt, newer.SignedAt)
	}
	whole, err := Sign(p, key, second, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*Signature{"older": older, "newer": newer, "a whole second's": whole} {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var got Signature
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if !got.SignedAt.Equal(s.SignedAt) {
			t.Errorf("%s signature: signed at %v after the trip, want %v", name, got.SignedAt, s.SignedAt)
		}
		if err := Verify(p, &got, trusted, second.Add(time.Second)); err != nil {
			t.Errorf("%s signature after a JSON round trip: %v", name, err)
		}
	}
}
