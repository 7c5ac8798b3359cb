package plans

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
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
