package stack

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
)

// TestEndedNamesACrashedProcess: a process that dies on its own is named
// with its exit and the end of its log, and a wait gives up at once; a
// process the stack kills on purpose is not reported.
func TestEndedNamesACrashedProcess(t *testing.T) {
	bin := bintest.Build(t, "drover-sim")
	layout, err := Free()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := Start(ctx, Options{Dir: filepath.Join(t.TempDir(), "run"), Bin: bin, Plan: "../../plans/examples/demo.yaml",
		Layout: layout, StorageOnly: true, Out: &simtest.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Stop()
	if err := st.Ended(); err != nil {
		t.Fatalf("a fresh stack reports an ended process: %v", err)
	}

	if err := st.Kill("sim-east"); err != nil {
		t.Fatal(err)
	}
	if err := st.Ended(); err != nil {
		t.Fatalf("a process killed on purpose is reported: %v", err)
	}

	west := st.PIDs()["sim-west"]
	if err := syscall.Kill(west, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	simtest.Eventually(t, 10*time.Second, "the crash to be seen", func() bool { return st.Ended() != nil })
	msg := st.Ended().Error()
	for _, want := range []string{"sim-west", "ended: signal: killed", "sim-west.log"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Ended() = %q, lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "sim-east") {
		t.Errorf("Ended() names the process killed on purpose: %q", msg)
	}

	// The error says which process ended, not that the minute ran out.
	err = st.waitFor(ctx, time.Minute, "something that never comes", func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "waiting for something that never comes") || !strings.Contains(err.Error(), "sim-west") {
		t.Fatalf("waitFor with a crashed process: %v", err)
	}
}

// TestTourPlanIsSigned: make up (the fixed layout, SignOriginal) signs
// the demo plan itself, with the key its worker trusts, so that the
// tour's commands (README, docs/tutorial/getting-started.md), which name plans/examples/demo.yaml, send a
// valid signature; the stack's copy is signed too. The signatures end
// after SignatureValidity (30 days, as drctl's), as every signature
// should (issue 56).
func TestTourPlanIsSigned(t *testing.T) {
	src, err := os.ReadFile("../../plans/examples/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plan := filepath.Join(dir, "demo.yaml")
	if err := os.WriteFile(plan, src, 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Stack{Options: Options{Dir: filepath.Join(dir, "run"), Plan: plan, Layout: Fixed(), SignOriginal: true}}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.writePlan(); err != nil {
		t.Fatal(err)
	}
	pubFile, err := s.signPlans()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := plans.ReadPublicKeys(pubFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{plan, s.PlanFile} {
		p, err := plans.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		sig, err := plans.ReadSignature(plans.SignatureFile(f))
		if err != nil {
			t.Fatalf("%s has no signature: %v", f, err)
		}
		if err := plans.Verify(p, sig, keys, time.Now()); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if sig.ExpiresAt.IsZero() || sig.ExpiresAt.Sub(sig.SignedAt) != SignatureValidity {
			t.Fatalf("%s: signed at %v, good until %v: want an end %v later", f, sig.SignedAt, sig.ExpiresAt, SignatureValidity)
		}
		if err := plans.Verify(p, sig, keys, time.Now().Add(SignatureValidity+time.Hour)); !errors.Is(err, plans.ErrExpired) {
			t.Fatalf("%s checked after its end: %v, want %v", f, err, plans.ErrExpired)
		}
	}
}
