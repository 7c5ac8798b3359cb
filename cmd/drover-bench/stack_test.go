package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/stack"
)

// TestStartStackTriesOtherPorts: a row's stack whose picked port is taken
// by another program before it starts is started once more on other
// ports, so that a long bench run does not end at that row.
func TestStartStackTriesOtherPorts(t *testing.T) {
	bin := bintest.Build(t, "drover-sim")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	picked := 0
	freeLayout = func() (stack.Layout, error) {
		picked++
		l, err := stack.Free()
		if picked == 1 {
			l.Sites[0].Control = taken.Addr().String()
		}
		return l, err
	}
	t.Cleanup(func() { freeLayout = stack.Free })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, p, err := startStack(ctx, options{dir: t.TempDir(), bin: bin, parallelism: 10}, 3, 0, true)
	if err != nil {
		t.Fatalf("the stack did not start: %v", err)
	}
	defer st.Stop()
	if picked != 2 {
		t.Fatalf("%d layouts picked, want 2 (the first had a taken port)", picked)
	}
	if got := st.Layout.Sites[0].Control; got == taken.Addr().String() {
		t.Fatalf("the stack runs on the taken address %s", got)
	}
	if len(p.VolumeGroups) != 3 {
		t.Fatalf("the plan has %d groups, want 3", len(p.VolumeGroups))
	}
}
