package main_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
)

// TestSigningKeys: against a worker that trusts one key, drctl signs
// what it sends with --sign-key, or with DROVER_PLAN_SIGNING_KEY, in
// place of PLAN.sig: signed by that key, protection runs and a failover
// completes, and its report names the key; signed by another, the
// failover is refused (UntrustedPlan) before any storage call. A
// PLAN.sig past its --valid-for is refused by drctl (exit 2) before
// anything starts.
func TestSigningKeys(t *testing.T) {
	bins := bintest.Build(t, "drctl", "worker")
	srv := devserver.Start(t, nil)
	east, west := eastWest(t)
	dir := t.TempDir()
	shop := onePlan(t, filepath.Join(dir, "shop.yaml"), "shop", east, west, fmt.Sprintf("{cidrs: [%s/32]}", simtest.NodeA), "")
	c := cli{t: t, bin: filepath.Join(bins, "drctl"), addr: srv.Address()}
	ops, rogue := filepath.Join(dir, "ops"), filepath.Join(dir, "rogue")
	var key struct {
		KeyID string `json:"keyId"`
	}
	c.ok(&key, "plan", "keygen", ops)
	c.ok(nil, "plan", "keygen", rogue)
	worker := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + srv.Address()}, filepath.Join(bins, "worker"), "--metrics", "", "--trusted-plan-key", ops+".pub")
	simtest.Eventually(t, 30*time.Second, "the worker to start", func() bool { return strings.Contains(worker.Log.String(), "worker started") })
	untouched := func(when string) {
		t.Helper()
		if f := west.FencedCIDRs(); len(f) != 0 {
			t.Fatalf("%s: fenced %v", when, f)
		}
		if u := west.Snapshot().Unit("vg/vg-1"); u != nil && u.Role == sim.RolePrimary {
			t.Fatalf("%s: west's vg-1 is primary", when)
		}
	}

	// From the environment: protection runs, east primary.
	c.env = []string{"DROVER_PLAN_SIGNING_KEY=" + ops + ".key"}
	c.ok(nil, "protect", "start", shop, "--primary", "east", "--interval", "200ms")
	c.eventually("protection from east", "shop", func(s statusOut) bool {
		return s.Protection != nil && s.Protection.Primary == "east" && !s.Protection.Groups["db"].LastSync.IsZero()
	})

	// --sign-key over the environment: signed by a key the worker does
	// not trust, the failover is refused and touches nothing.
	code, out, errs := c.run("failover", shop, "--to", "west", "--yes", "--wait", "--sign-key", rogue+".key")
	if code == 0 || !strings.Contains(out+errs, "UntrustedPlan") {
		t.Fatalf("a failover signed by an untrusted key: exit %d\n%s\n%s", code, out, errs)
	}
	untouched("a failover signed by an untrusted key")

	// A signature file past its end, without a key to sign with.
	c.env = nil
	c.ok(nil, "plan", "sign", shop, "--key", ops+".key", "--valid-for", "1s")
	time.Sleep(1100 * time.Millisecond)
	c.want(2, "the plan's signature has expired", "failover", shop, "--to", "west", "--yes")
	untouched("a failover with an ended signature")

	// --sign-key with the trusted key: the failover completes, and its
	// report names the key that signed the plan.
	c.ok(nil, "failover", shop, "--to", "west", "--yes", "--wait", "--sign-key", ops+".key")
	var rep struct {
		Plans []struct {
			Name, SignedBy string
		}
	}
	c.ok(&rep, "report", "shop")
	if len(rep.Plans) != 1 || rep.Plans[0].SignedBy != key.KeyID {
		t.Fatalf("the report's plans %+v, want shop signed by %s", rep.Plans, key.KeyID)
	}
	if u := west.Snapshot().Unit("vg/vg-1"); u == nil || u.Role != sim.RolePrimary {
		t.Fatalf("after the failover west's vg-1 is %+v, want primary", u)
	}
}

// TestProtectStartSaysARefusal (issue 56): protection started with an
// older signed version of the plan, once a newer one ran, is refused by
// the worker at its first check; drctl protect start waits for that
// check and says so (exit 1, naming the newer version) instead of that
// protection runs. The current version's protection is said to run.
func TestProtectStartSaysARefusal(t *testing.T) {
	bins := bintest.Build(t, "drctl", "worker")
	srv := devserver.Start(t, nil)
	east, west := eastWest(t)
	dir := t.TempDir()
	shop := onePlan(t, filepath.Join(dir, "shop.yaml"), "shop", east, west, fmt.Sprintf("{cidrs: [%s/32]}", simtest.NodeA), "")
	old := onePlan(t, filepath.Join(dir, "shop-old.yaml"), "shop", east, west, fmt.Sprintf("{cidrs: [%s/32]}", simtest.NodeA), "  parallelism: 3\n")
	c := cli{t: t, bin: filepath.Join(bins, "drctl"), addr: srv.Address()}
	ops := filepath.Join(dir, "ops")
	c.ok(nil, "plan", "keygen", ops)
	worker := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + srv.Address()}, filepath.Join(bins, "worker"), "--metrics", "", "--trusted-plan-key", ops+".pub")
	simtest.Eventually(t, 30*time.Second, "the worker to start", func() bool { return strings.Contains(worker.Log.String(), "worker started") })

	// The older version, signed an hour ago, still good.
	key, err := plans.ReadPrivateKey(ops + ".key")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plans.Load(old)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := plans.Sign(p, key, time.Now().Add(-time.Hour), 720*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := plans.WriteSignature(plans.SignatureFile(old), sig); err != nil {
		t.Fatal(err)
	}

	// The current version runs, and drctl says so.
	code, out, errs := c.run("protect", "start", shop, "--primary", "east", "--interval", "200ms", "--sign-key", ops+".key")
	if code != 0 || !strings.Contains(out, `protection of plan "shop" from east runs`) {
		t.Fatalf("protect start of the current version: exit %d\n%s\n%s", code, out, errs)
	}
	c.ok(nil, "protect", "stop", "shop")

	// The older version is refused, and drctl says so.
	code, out, errs = c.run("protect", "start", old, "--primary", "east", "--interval", "200ms")
	if code != 1 || strings.Contains(out, "runs") || !strings.Contains(errs, "protection was refused") || !strings.Contains(errs, "a newer version of the plan") {
		t.Fatalf("protect start of an older version: exit %d\n%s\n%s; want exit 1 saying it was refused, and why", code, out, errs)
	}
}
