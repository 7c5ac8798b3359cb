package workflows_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/drover-dr/drover/internal/codec"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

// paddedPlan is a two-site plan whose encoded action input is size bytes,
// give or take a few: a label of random letters (which compress little)
// pads it.
func paddedPlan(t *testing.T, name string, size int) *plans.Plan {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
	pad := make([]byte, 2*size)
	for i := range pad {
		pad[i] = letters[rng.IntN(len(letters))]
	}
	p := &plans.Plan{APIVersion: plans.APIVersion, Kind: plans.Kind, Metadata: plans.Metadata{Name: name},
		Sites: []plans.Site{{Name: "east", Storage: plans.Storage{Endpoint: "unix:///nowhere/east.sock"}},
			{Name: "west", Storage: plans.Storage{Endpoint: "unix:///nowhere/west.sock"}}}}
	p.ApplyDefaults()
	// Random letters of a 64-letter alphabet compress to 6 bits each, so
	// the encoded size grows by 3/4 byte a letter: aim, measure, correct.
	n := size * 4 / 3
	for range 12 {
		p.Metadata.Labels = map[string]string{"pad": string(pad[:n])}
		got, err := workflows.InputSize(p)
		mustOK(t, err)
		if got >= size && got <= size+8 {
			return p
		}
		n += (size-got)*4/3 + 1
	}
	t.Fatalf("could not pad the plan to %d bytes", size)
	return p
}

// TestInputSizeLine: a plan whose action input is just within the limit
// passes the check and starts on a real Temporal server; one just past it
// is refused with its size and the limit; and the limit is Temporal's:
// the server itself refuses an input just past MaxInputBytes.
func TestInputSizeLine(t *testing.T) {
	limit := workflows.MaxInputBytes - workflows.InputReserve
	within := paddedPlan(t, "within", limit-16)
	past := paddedPlan(t, "past", limit+16)
	over := paddedPlan(t, "over", workflows.MaxInputBytes+16)
	srv := devserver.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func(p *plans.Plan) error {
		run, err := workflows.Start(ctx, srv.Client, p.Metadata.Name, workflows.Failover, workflows.FailoverInput{Plan: p, From: "east", To: "west"})
		if err == nil {
			mustOK(t, srv.Client.TerminateWorkflow(ctx, run.GetID(), run.GetRunID(), "input size test"))
		}
		return err
	}

	mustOK(t, workflows.CheckInputSize(within))
	if err := start(within); err != nil {
		t.Fatalf("a plan within the limit did not start: %v", err)
	}

	var tooLarge *workflows.InputTooLargeError
	err := workflows.CheckInputSize(past)
	if !errors.As(err, &tooLarge) || tooLarge.Size <= limit || tooLarge.Limit != limit {
		t.Fatalf("a plan past the limit: %v", err)
	}
	t.Logf("refused: %v", err)

	// The limit is real: the server refuses a start whose input is just past
	// MaxInputBytes (the reserve is what the action's fields may add).
	if err := start(over); err == nil || !strings.Contains(strings.ToLower(err.Error()), "size") {
		t.Fatalf("the server accepted an input of %d bytes: %v", workflows.MaxInputBytes+16, err)
	} else {
		t.Logf("the server refuses %d bytes: %v", workflows.MaxInputBytes+16, err)
	}
}

// TestInputSizeCountsTheWholeInput: the size checked is that of an
// action's input with the plan and both site names, as the worker and
// drctl encode it; a plan whose input is exactly at the limit starts, one
// a byte past it does not.
func TestInputSizeCountsTheWholeInput(t *testing.T) {
	limit := workflows.MaxInputBytes - workflows.InputReserve
	p := paddedPlan(t, "edge", limit-24)
	payload, err := codec.Converter().ToPayload(workflows.FailoverInput{Plan: p, From: "east", To: "west"})
	mustOK(t, err)
	if got, err := workflows.InputSize(p); err != nil || got != proto.Size(payload) {
		t.Fatalf("InputSize %d (%v), want %d: the failover input from east to west", got, err, proto.Size(payload))
	}
	// Random letters added one at a time until the input is exactly at
	// the limit, then past it.
	rng := rand.New(rand.NewPCG(3, 4))
	pad := p.Metadata.Labels["pad"]
	var at, past bool
	for i := 0; i < 200 && !past; i++ {
		pad += string(rune('a' + rng.IntN(26)))
		p.Metadata.Labels = map[string]string{"pad": pad}
		n, err := workflows.InputSize(p)
		mustOK(t, err)
		err = workflows.CheckInputSize(p)
		switch {
		case n == limit:
			at = true
			if err != nil {
				t.Fatalf("an input of exactly %d bytes refused: %v", n, err)
			}
		case n > limit:
			past = true
			if err == nil {
				t.Fatalf("an input of %d bytes, over %d, passed", n, limit)
			}
		}
	}
	if !at || !past {
		t.Fatalf("the padding never hit the limit exactly (%v) or passed it (%v)", at, past)
	}
}
