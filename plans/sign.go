package plans

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Signature says who vouches for a plan: an ed25519 signature, by a key a
// worker may trust, over the plan as it is submitted.
//
// What is signed is a statement naming the plan, the SHA-256 of its
// canonical form (CanonicalJSON: the effective plan, every default filled
// in, as JSON), when it was signed and until when it is good. Binding the
// name means a signature cannot be moved onto another plan, and binding
// the digest means any change to an endpoint, a hook, a CIDR or a policy
// breaks it. A signature authorizes a plan's content, not one action: an
// older signed version of a plan verifies as long as it has not expired,
// so that sign plans with a validity (drctl plan sign --valid-for) and
// rotate keys to retire old versions; who may start actions at all is the
// Temporal namespace's permissions.
type Signature struct {
	// Key is the signer's ed25519 public key; a worker accepts only keys
	// it is configured with.
	Key []byte `json:"key"`
	// SignedAt and ExpiresAt bound the signature; ExpiresAt zero means no
	// end.
	SignedAt  time.Time `json:"signedAt"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
	// Value is the signature of the statement.
	Value []byte `json:"value"`
}

// KeyID is a short name of an ed25519 public key: the first 8 bytes of
// its SHA-256, in hex.
func KeyID(key ed25519.PublicKey) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

// KeyID names the signing key.
func (s *Signature) KeyID() string { return KeyID(s.Key) }

// CanonicalJSON is the form of a plan that signatures cover: the JSON of
// the plan as an action runs it, defaults applied, as encoding/json writes
// it (fields in declaration order, map keys sorted). A plan decoded from
// that JSON encodes to the same bytes, so a worker computes it from the
// plan in a workflow's input; and a workflow that applies the defaults to
// its input (as every action does, once) keeps the signature valid for
// the children and the next runs it hands the plan to.
func CanonicalJSON(p *Plan) ([]byte, error) {
	if p == nil {
		return nil, errors.New("no plan")
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	var q Plan
	if err := json.Unmarshal(b, &q); err != nil {
		return nil, err
	}
	q.ApplyDefaults()
	return json.Marshal(&q)
}

// statement is what the signature covers.
func statement(p *Plan, signedAt, expiresAt time.Time) ([]byte, error) {
	b, err := CanonicalJSON(p)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	exp := ""
	if !expiresAt.IsZero() {
		exp = expiresAt.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Appendf(nil, "drover plan signature v1\nplan %s\nsha256 %s\nsigned %s\nexpires %s\n",
		p.Metadata.Name, hex.EncodeToString(sum[:]), signedAt.UTC().Format(time.RFC3339Nano), exp), nil
}

// Sign signs the plan as it stands (defaults applied, as drctl submits
// it), good from now for validFor (zero: no end). The signing time keeps
// its nanoseconds: it is the plan's version, and two versions signed
// within one second must still be ordered. (Signatures made before cut
// it to the second; the statement writes both the same way, RFC 3339
// with as many fractional digits as there are, so they still verify.)
func Sign(p *Plan, key ed25519.PrivateKey, now time.Time, validFor time.Duration) (*Signature, error) {
	s := &Signature{Key: key.Public().(ed25519.PublicKey), SignedAt: now.UTC().Round(0)}
	if validFor > 0 {
		s.ExpiresAt = s.SignedAt.Add(validFor)
	}
	msg, err := statement(p, s.SignedAt, s.ExpiresAt)
	if err != nil {
		return nil, err
	}
	s.Value = ed25519.Sign(key, msg)
	return s, nil
}

// Reasons a plan is not trusted.
var (
	ErrUnsigned   = errors.New("the plan is not signed")
	ErrUnknownKey = errors.New("the plan is signed by a key this worker does not trust")
	ErrTampered   = errors.New("the plan does not match its signature (changed after signing, or signed for another plan)")
	ErrExpired    = errors.New("the plan's signature has expired")
)

// Verify checks that sig is a valid, unexpired signature of p by one of
// trusted. The error wraps one of ErrUnsigned, ErrUnknownKey, ErrTampered
// or ErrExpired.
func Verify(p *Plan, sig *Signature, trusted []ed25519.PublicKey, now time.Time) error {
	if sig == nil || len(sig.Value) == 0 {
		return ErrUnsigned
	}
	if len(sig.Key) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: the signature names no valid key", ErrUnknownKey)
	}
	known := false
	for _, k := range trusted {
		if k.Equal(ed25519.PublicKey(sig.Key)) {
			known = true
			break
		}
	}
	if !known {
		return fmt.Errorf("%w (key %s)", ErrUnknownKey, sig.KeyID())
	}
	msg, err := statement(p, sig.SignedAt, sig.ExpiresAt)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrTampered, err)
	}
	if !ed25519.Verify(ed25519.PublicKey(sig.Key), msg, sig.Value) {
		return fmt.Errorf("%w (key %s)", ErrTampered, sig.KeyID())
	}
	if !sig.ExpiresAt.IsZero() && now.After(sig.ExpiresAt) {
		return fmt.Errorf("%w (key %s, expired %s): sign the plan again", ErrExpired, sig.KeyID(), sig.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return nil
}

// GenerateKey makes a signing key pair.
func GenerateKey() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	return ed25519.GenerateKey(rand.Reader)
}

// Key file blocks: PKCS #8 and PKIX, as openssl writes them
// (openssl genpkey -algorithm ed25519; openssl pkey -pubout).
const (
	pemPrivate = "PRIVATE KEY"
	pemPublic  = "PUBLIC KEY"
)

// EncodePrivateKey and EncodePublicKey write keys as PEM.
func EncodePrivateKey(k ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPrivate, Bytes: der}), nil
}

// EncodePublicKey writes a public key as PEM.
func EncodePublicKey(k ed25519.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPublic, Bytes: der}), nil
}

// ReadPrivateKey reads an ed25519 private key from a PEM file.
func ReadPrivateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("plan signing key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != pemPrivate {
		return nil, fmt.Errorf("plan signing key %s: want a PEM %q block (drctl plan keygen, or openssl genpkey -algorithm ed25519)", path, pemPrivate)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("plan signing key %s: %w", path, err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("plan signing key %s: a %T, want ed25519", path, k)
	}
	return ek, nil
}

// ReadPublicKeys reads the ed25519 public keys of a PEM file: one or more
// PUBLIC KEY blocks.
func ReadPublicKeys(path string) ([]ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("trusted plan key: %w", err)
	}
	var keys []ed25519.PublicKey
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != pemPublic {
			return nil, fmt.Errorf("trusted plan key %s: a PEM %q block, want %q (a private key does not belong on the worker)", path, blk.Type, pemPublic)
		}
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("trusted plan key %s: %w", path, err)
		}
		ek, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("trusted plan key %s: a %T, want ed25519", path, k)
		}
		keys = append(keys, ek)
	}
	if len(keys) == 0 || strings.TrimSpace(string(b)) != "" {
		return nil, fmt.Errorf("trusted plan key %s: want PEM %q blocks", path, pemPublic)
	}
	return keys, nil
}

// SignatureFile is where a plan file's detached signature lives: beside
// it, with .sig appended.
func SignatureFile(planFile string) string { return planFile + ".sig" }

// ReadSignature reads a detached signature file.
func ReadSignature(path string) (*Signature, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Signature
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("plan signature %s: %v", path, err)
	}
	return &s, nil
}

// WriteSignature writes a detached signature file.
func WriteSignature(path string, s *Signature) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
