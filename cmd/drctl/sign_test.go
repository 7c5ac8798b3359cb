package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/plans"
)

// TestKeygenAndValidFor: plan keygen writes the signing key for
// its owner alone and never overwrites a key; plan sign --valid-for
// writes a signature that ends then (TestSigningKeys has an action
// refused once it has), and protect start with it says protection
// stops then.
func TestKeygenAndValidFor(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "ops")
	if code, out, errs := drctl("plan", "keygen", key); code != 0 || !strings.Contains(out, "signing key "+key+".key") {
		t.Fatalf("keygen: exit %d, %q %q", code, out, errs)
	}
	fi, err := os.Stat(key + ".key")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("the signing key is %v, want readable by its owner only", fi.Mode().Perm())
	}
	if _, err := plans.ReadPrivateKey(key + ".key"); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(key + ".key")
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errs := drctl("plan", "keygen", key); code != 2 || !strings.Contains(errs, "drctl never overwrites a key") {
		t.Fatalf("a second keygen of the same name: exit %d, %q; want exit 2", code, errs)
	}
	if after, _ := os.ReadFile(key + ".key"); !bytes.Equal(before, after) {
		t.Fatal("a second keygen changed the signing key")
	}

	plan := filepath.Join(dir, "minimal.yaml")
	b, err := os.ReadFile("../../plans/examples/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plan, b, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, out, errs := drctl("-o", "json", "plan", "sign", plan, "--key", key+".key", "--valid-for", "2s")
	var signed []struct {
		Signature string
		ExpiresAt time.Time
	}
	if code != 0 || json.Unmarshal([]byte(out), &signed) != nil || len(signed) != 1 {
		t.Fatalf("sign: exit %d, %q %q", code, out, errs)
	}
	if e := signed[0].ExpiresAt; e.Before(start.Add(2*time.Second-time.Second)) || e.After(time.Now().Add(2*time.Second)) {
		t.Fatalf("the signature ends at %v, want 2s after %v", e, start)
	}
	sig, err := plans.ReadSignature(plans.SignatureFile(plan))
	if err != nil || !sig.ExpiresAt.Equal(signed[0].ExpiresAt) {
		t.Fatalf("%s: %+v, %v; want it to end at %v", plans.SignatureFile(plan), sig, err, signed[0].ExpiresAt)
	}
	// Protection ends with its signature, and protect start says when
	// (before it reaches for Temporal, which is not there).
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
	code, _, errs = drctl("protect", "start", plan)
	if want := "ends at " + sig.ExpiresAt.UTC().Format(time.RFC3339) + "; protection stops then"; code != 3 || !strings.Contains(errs, want) {
		t.Fatalf("protect start with a signature that ends: exit %d, %q; want %q", code, errs, want)
	}
}

// TestSignaturesExpireByDefault: a signature drctl makes without
// --valid-for ends after DefaultSignatureValidity (30 days), so that a
// signature collected from a history is of no use for ever; 0 still
// asks for none.
func TestSignaturesExpireByDefault(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "ops")
	if code, out, errs := drctl("plan", "keygen", key); code != 0 {
		t.Fatalf("keygen: exit %d, %q %q", code, out, errs)
	}
	plan := filepath.Join(dir, "minimal.yaml")
	b, err := os.ReadFile("../../plans/examples/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plan, b, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Truncate(time.Second)
	if code, out, errs := drctl("plan", "sign", plan, "--key", key+".key"); code != 0 || !strings.Contains(out, "good until") {
		t.Fatalf("sign: exit %d, %q %q; want it to say until when", code, out, errs)
	}
	sig, err := plans.ReadSignature(plans.SignatureFile(plan))
	if err != nil {
		t.Fatal(err)
	}
	if e := sig.ExpiresAt; e.Before(start.Add(DefaultSignatureValidity)) || e.After(time.Now().Add(DefaultSignatureValidity)) {
		t.Fatalf("the signature ends at %v, want %v after %v", e, DefaultSignatureValidity, start)
	}
	if code, _, errs := drctl("plan", "sign", plan, "--key", key+".key", "--valid-for", "0"); code != 0 {
		t.Fatalf("sign --valid-for 0: exit %d, %q", code, errs)
	}
	if sig, err := plans.ReadSignature(plans.SignatureFile(plan)); err != nil || !sig.ExpiresAt.IsZero() {
		t.Fatalf("--valid-for 0: %+v, %v; want no end", sig, err)
	}

	// A signature made at submission (--sign-key) ends too: after 30
	// days, or --sign-valid-for (protect start says when, before it
	// reaches for Temporal, which is not there).
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
	for _, c := range []struct {
		args []string
		want time.Duration
	}{{nil, DefaultSignatureValidity}, {[]string{"--sign-valid-for", "2h"}, 2 * time.Hour}} {
		start := time.Now().Truncate(time.Second)
		_, _, errs := drctl(append([]string{"protect", "start", plan, "--sign-key", key + ".key"}, c.args...)...)
		end := time.Now()
		_, rest, ok := strings.Cut(errs, "ends at ")
		var at time.Time
		if ok {
			at, err = time.Parse(time.RFC3339, strings.Fields(rest)[0][:len("2006-01-02T15:04:05Z")])
		}
		if !ok || err != nil || at.Before(start.Add(c.want)) || at.After(end.Add(c.want)) {
			t.Fatalf("protect start --sign-key %v: %q; want the signature to end %v from now", c.args, errs, c.want)
		}
	}
}
