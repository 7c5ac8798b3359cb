package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/workflows"
)

// TestShapedChildCarriesItsShape: a child shaped from a failover's
// history writes what that history held. Read back the way the bench
// reads a failover, its shape is the one it was given: its input's and
// result's bytes, each task's markers with their bytes, its timers and
// activities, the changes its record took. A floor child that dropped
// any of it would be lighter than the failover it stands for.
func TestShapedChildCarriesItsShape(t *testing.T) {
	srv := devserver.Start(t, nil)
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const queue = "drover-bench-shape-test"
	w := worker.New(c, queue, worker.Options{})
	registerFloors(w, c)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	// As a failover of the site rows: checks and their settle, then the
	// calls, the record's change and the end.
	want := planShape{
		Input: 2839,
		Tasks: []taskShape{
			{Markers: []int{120, 2300, 400}, Activities: 1, Timers: 1},
			{Markers: []int{30, 0, 0, 0, 0, 140, 0}, Cancels: 1},
		},
		Result:  4084,
		Changes: []int{700},
	}
	const plan = "shaped"
	record := workflows.RecordID(plan)
	if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: record, TaskQueue: queue}, "StandInRecord"); err != nil {
		t.Fatal(err)
	}
	defer c.TerminateWorkflow(context.Background(), record, "", "the test ended")
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.ActionID(plan), TaskQueue: queue},
		"ShapedChild", want, shapedInput(want, record), record)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatalf("the shaped child failed: %v", err)
	}
	got, err := readShape(ctx, c, plan, run.GetRunID())
	if err != nil {
		t.Fatal(err)
	}
	// Local activities run together: their markers' order is the
	// order they ended in.
	for _, s := range []planShape{want, got} {
		for _, t := range s.Tasks {
			slices.Sort(t.Markers)
		}
	}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Fatalf("the shaped child's history reads back as\n%+v\nwant\n%+v", got, want)
	}
}
