package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/drover-dr/drover/workflows"
)

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }
func (t *table) flush() error        { return t.tw.Flush() }

// liveTable shows an action's steps as they change: on a terminal it
// redraws the whole table in place; elsewhere (a log, a pipe) it prints
// one line per step that changed state, so the output reads as a log.
type liveTable struct {
	w       io.Writer
	on      bool // text output at all
	tty     bool
	drawn   int // lines of the last redraw
	states  map[string]string
	started bool
}

func newLiveTable(w io.Writer, on bool) *liveTable {
	return &liveTable{w: w, on: on, tty: isTerminal(w), states: map[string]string{}}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// show renders the latest progress.
func (l *liveTable) show(p *workflows.Progress, id string) {
	if !l.on || p == nil {
		return
	}
	if l.tty {
		var b bytes.Buffer
		renderSteps(&b, p, id)
		if l.drawn > 0 {
			fmt.Fprintf(l.w, "\x1b[%dA\x1b[J", l.drawn)
		}
		l.drawn = bytes.Count(b.Bytes(), []byte("\n"))
		l.w.Write(b.Bytes())
		return
	}
	for _, s := range p.Steps {
		if l.states[s.Name] == s.State {
			continue
		}
		l.states[s.Name] = s.State
		if s.State == workflows.StatePending {
			continue
		}
		note := stepNote(s)
		if s.State == workflows.StatePaused {
			note += fmt.Sprintf(" — decide with: drctl resolve %s --retry|--skip|--abort", id)
		}
		if s.State == workflows.StateWaiting {
			note += fmt.Sprintf(" — open it with: drctl approve %s", id)
		}
		fmt.Fprintf(l.w, "%s  %-8s  %s  %s\n", time.Now().Format("15:04:05.000"), shortState(s.State), s.Name, note)
	}
}

// final prints the whole table once the action has ended (a terminal's
// live table is replaced by it).
func (l *liveTable) final(p *workflows.Progress, id string) {
	if !l.on || p == nil {
		return
	}
	if l.tty && l.drawn > 0 {
		fmt.Fprintf(l.w, "\x1b[%dA\x1b[J", l.drawn)
		l.drawn = 0
	} else if len(l.states) > 0 {
		fmt.Fprintln(l.w)
	}
	renderSteps(l.w, p, id)
}

func shortState(s string) string {
	if s == workflows.StateWaiting {
		return "waiting"
	}
	return s
}

// stepNote is a step's last error, else its output, on one line.
func stepNote(s *workflows.Step) string {
	note := s.LastError
	if note == "" {
		note = s.Output
	}
	note = strings.Join(strings.Fields(note), " ")
	if len(note) > 100 {
		note = note[:97] + "..."
	}
	return note
}

// renderSteps writes the step table of an action.
func renderSteps(w io.Writer, p *workflows.Progress, id string) {
	counts := map[string]int{}
	for _, s := range p.Steps {
		counts[s.State]++
	}
	fmt.Fprintf(w, "%s of plan %q: %s — %d/%d steps done\n", p.Action, p.Plan, p.State, counts[workflows.StateDone]+counts[workflows.StateSkipped], len(p.Steps))
	t := newTable(w, "  STATE", "STEP", "TRIES", "TOOK", "NOTE")
	for _, s := range p.Steps {
		took := ""
		switch {
		case !s.End.IsZero() && !s.Start.IsZero():
			took = s.End.Sub(s.Start).Round(time.Millisecond).String()
		case !s.Start.IsZero():
			took = time.Since(s.Start).Round(100*time.Millisecond).String() + "…"
		}
		t.row("  "+shortState(s.State), s.Name, fmt.Sprint(s.Attempts), took, stepNote(s))
	}
	t.flush()
	if paused := stepsIn(p, workflows.StatePaused); len(paused) > 0 {
		fmt.Fprintf(w, "paused for the operator: %q — decide with drctl resolve %s --retry|--skip|--abort\n", paused, id)
	}
	if waiting := stepsIn(p, workflows.StateWaiting); len(waiting) > 0 {
		fmt.Fprintf(w, "waiting for approval: %q — open it with drctl approve %s\n", waiting, id)
	}
}
