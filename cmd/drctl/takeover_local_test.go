package main_test

import (
	"strings"
	"testing"
)

// TestTakeOverOfALocalNamespaceIsSaid: --take-over-namespace on a
// namespace that is not global (the dev server's) has nothing to take
// over: drctl says so on stderr instead of ignoring the flag in silence,
// and starts the failover as without it (issue 56).
func TestTakeOverOfALocalNamespaceIsSaid(t *testing.T) {
	_, c, shop, _, _ := shopWithWorker(t)
	code, out, errs := c.run("failover", shop, "--to", "west", "--take-over-namespace", "--yes")
	if code != 0 {
		t.Fatalf("failover --take-over-namespace: exit %d\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"namespace default is not global", "nothing to take over"} {
		if !strings.Contains(errs, want) {
			t.Errorf("drctl's stderr lacks %q:\n%s", want, errs)
		}
	}
}
