package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

func drctl(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestPlanValidate(t *testing.T) {
	code, out, errs := drctl("plan", "validate", "../../plans/examples/demo.yaml", "../../plans/examples/nomad.yaml")
	if code != 0 || !strings.Contains(out, `plan "demo" is valid`) || !strings.Contains(out, `plan "shop" is valid`) {
		t.Fatalf("code %d out %q err %q", code, out, errs)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: drover.dev/v1alpha1\nkind: FailoverPlan\nmetadata: {name: x}\nsites: []\nvolumeGroups: []\npolicy: {onFailure: maybe}\n"), 0o644)
	code, _, errs = drctl("plan", "validate", bad)
	if code != 2 || !strings.Contains(errs, "bad.yaml:4:1: sites: a plan has exactly two sites, this one has 0") ||
		!strings.Contains(errs, `bad.yaml:6:21: policy.onFailure: "maybe" is not pause or abort`) || !strings.Contains(errs, "3 problem(s)") {
		t.Fatalf("code %d err:\n%s", code, errs)
	}
	code, out, _ = drctl("plan", "validate", "-o", "json", bad)
	var res []struct {
		Valid  bool
		Errors []struct {
			Line, Column int
			Path         string
		}
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 2 || res[0].Valid || len(res[0].Errors) != 3 || res[0].Errors[0].Line != 4 {
		t.Fatalf("json: code %d %v %s", code, err, out)
	}
}

func TestPlanShowPrintsDefaults(t *testing.T) {
	code, out, errs := drctl("plan", "show", "../../plans/examples/minimal.yaml")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errs)
	}
	for _, want := range []string{"parallelism: 10", "rpoTarget: 5m0s", "onFailure: pause", "PromoteVolume: 3m0s", "shell: /bin/sh", "testTimeLimit: 1h0m0s"} {
		if !strings.Contains(out, want) {
			t.Errorf("effective plan lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = drctl("plan", "show", "-o", "json", "../../plans/examples/minimal.yaml")
	var p map[string]any
	if err := json.Unmarshal([]byte(out), &p); err != nil || code != 0 || p["policy"].(map[string]any)["parallelism"].(float64) != 10 {
		t.Fatalf("json show: %v %s", err, out)
	}
}

func TestBadInputExitsTwo(t *testing.T) {
	for _, args := range [][]string{{}, {"failover"}, {"plan"}, {"plan", "frob"}, {"plan", "validate"}, {"plan", "show"}, {"plan", "show", "/no/such.yaml"}, {"plan", "validate", "-o", "xml", "x"}} {
		if code, _, _ := drctl(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, out, _ := drctl("plan", "schema"); code != 0 || !strings.Contains(out, `"$schema"`) {
		t.Fatalf("schema: %d", code)
	}
}

// writePadded writes the minimal example plan with a label of random
// letters long enough that its action input encodes to at least size
// bytes, and no more than a few bytes past it. The search runs on the
// plan in memory (the encoded size is near linear in the label's length),
// so it compresses a few megabytes a dozen times, not forty: under -race
// on a busy machine each compression takes seconds.
func writePadded(t *testing.T, size int) string {
	t.Helper()
	const example = "../../plans/examples/minimal.yaml"
	base, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	p, err := plans.Load(example)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"
	pad := make([]byte, 4*size)
	for i := range pad {
		pad[i] = letters[rng.IntN(len(letters))]
	}
	sizeOf := func(n int) int {
		p.Metadata.Labels = map[string]string{"pad": string(pad[:n])}
		got, err := workflows.InputSize(p)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	// Secant steps to near the length, then bisection over what is left.
	lo, hi := 0, len(pad)
	sLo, sHi := sizeOf(lo), sizeOf(hi)
	for i := 0; i < 6 && hi-lo > 64; i++ {
		guess := lo + int(float64(hi-lo)*float64(size-sLo)/float64(sHi-sLo))
		guess = min(max(guess, lo+1), hi-1)
		if sg := sizeOf(guess); sg < size {
			lo, sLo = guess, sg
		} else {
			hi, sHi = guess, sg
		}
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if sizeOf(mid) < size {
			lo = mid
		} else {
			hi = mid
		}
	}
	doc := strings.Replace(string(base), "  name: minimal\n", "  name: minimal\n  labels: {pad: "+string(pad[:hi])+"}\n", 1)
	file := filepath.Join(t.TempDir(), fmt.Sprintf("padded-%d.yaml", size))
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	written, err := plans.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := workflows.InputSize(written); err != nil || got < size || got > size+8 {
		t.Fatalf("padded plan encodes to %d bytes (%v), want %d", got, err, size)
	}
	return file
}

func TestPlanValidateRefusesWhatCannotStart(t *testing.T) {
	limit := workflows.MaxInputBytes - workflows.InputReserve
	within := writePadded(t, limit-16)
	if code, out, errs := drctl("plan", "validate", within); code != 0 || !strings.Contains(out, "is valid") {
		t.Fatalf("a plan within the limit: exit %d\n%s%s", code, out, errs)
	}
	past := writePadded(t, limit+16)
	code, _, errs := drctl("plan", "validate", past)
	if code != 2 || !strings.Contains(errs, fmt.Sprintf("over the limit of %d bytes", limit)) || !strings.Contains(errs, "is too large to start") {
		t.Fatalf("a plan past the limit: exit %d\n%s", code, errs)
	}
	t.Logf("%s", errs)
	code, _, errs = drctl("failover", past, "--to", "west", "--yes")
	if code != 2 || !strings.Contains(errs, "is too large to start") {
		t.Fatalf("failover on a plan past the limit: exit %d\n%s", code, errs)
	}
}

// TestJSONRefusals: with -o json, a refusal is JSON on stdout (its
// message and exit code), whatever refused: a flag, a missing file, a
// contradictory decision, an unreachable Temporal. stderr keeps the line.
func TestJSONRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-o", "json", "list", "--nosuch"}, 2, "unknown flag: --nosuch"},
		{[]string{"-o", "json", "plan", "show", "nosuch.yaml"}, 2, "nosuch.yaml"},
		{[]string{"-o", "json", "--address", "127.0.0.1:1", "resolve", "shop", "--retry", "--skip"}, 2, "give exactly one of --retry, --skip or --abort"},
		{[]string{"-o", "json", "--address", "127.0.0.1:1", "list"}, 3, "cannot reach Temporal"},
	} {
		code, out, errs := drctl(tc.args...)
		var r struct {
			Error    string
			ExitCode int
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != tc.code || r.ExitCode != code || !strings.Contains(r.Error, tc.want) || !strings.Contains(errs, tc.want) {
			t.Errorf("drctl %v: exit %d, stdout %q (%v), stderr %q; want exit %d and %q as JSON", tc.args, code, out, err, errs, tc.code, tc.want)
		}
	}
}
