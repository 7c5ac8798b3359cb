package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

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
	w      io.Writer
	on     bool // text output at all
	tty    bool
	drawn  int // lines of the last redraw
	states map[string]string
}

func newLiveTable(w io.Writer, on bool) *liveTable {
	return &liveTable{w: w, on: on, tty: isTerminal(w), states: map[string]string{}}
}

// isTerminal: w is a terminal, so the live table redraws in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
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
			skip := "--skip"
			if s.Guard {
				skip = "--skip --override"
			}
			note += fmt.Sprintf(" — decide with: drctl resolve %s --retry|%s|--abort", runArg(id), skip)
		}
		if s.State == workflows.StateWaiting {
			note += fmt.Sprintf(" — open it with: drctl approve %s", id)
		}
		fmt.Fprintf(l.w, "%s  %-8s  %s  %s\n", stepTime(s).Local().Format("15:04:05.000"), shortState(s.State), s.Name, note)
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

// stepTime is when a step reached its state: its end once it has
// ended, else its start (a pending step has neither: the zero time is
// replaced by now).
func stepTime(s *workflows.Step) time.Time {
	switch {
	case !s.End.IsZero():
		return s.End
	case !s.Start.IsZero():
		return s.Start
	}
	return time.Now()
}

// noteWidth is where the step table wraps a note: a long note (an
// error's whole text) goes on in the NOTE column on the lines below.
const noteWidth = 60

// stepNote is what a step's line says: the last error of a step that is
// failing (running again, paused, failed, aborted), else its note (what
// a running step is doing), else its output, whole, on one line. A step
// that ended well shows its output: an error an earlier attempt met is
// history, not its note.
func stepNote(s *workflows.Step) string {
	note := s.Output
	switch s.State {
	case workflows.StateDone, workflows.StateSkipped, workflows.StatePending, workflows.StateWaiting:
	default:
		if s.Note != "" {
			note = s.Note
		}
		if s.LastError != "" {
			note = s.LastError
		}
		if s.LastError != "" && s.State == workflows.StateRunning && s.Retries > 0 {
			note = fmt.Sprintf("retrying (%d failed): %s", s.Retries, s.LastError)
		}
	}
	return oneLine(note)
}

// tries is how many times a step's work was tried: each run of the step
// (the first, and each operator's retry) is one try, and each failed
// call the step tried again within a run is one more.
func tries(s *workflows.Step) int { return s.Attempts + s.Retries }

// wrap cuts text into lines of at most n characters, at spaces where it
// can, in the middle of a word longer than a line.
func wrap(text string, n int) []string {
	var lines []string
	for utf8.RuneCountInString(text) > n {
		r := []rune(text)
		cut := strings.LastIndexByte(string(r[:n+1]), ' ')
		rest := ""
		if cut <= 0 {
			cut = len(string(r[:n]))
			rest = text[cut:]
		} else {
			rest = text[cut+1:]
		}
		lines = append(lines, strings.TrimRight(text[:cut], " "))
		text = strings.TrimLeft(rest, " ")
	}
	return append(lines, text)
}

// renderSteps writes the step table of an action.
func renderSteps(w io.Writer, p *workflows.Progress, id string) {
	counts := map[string]int{}
	for _, s := range p.Steps {
		counts[s.State]++
	}
	of := fmt.Sprintf("plan %q", p.Plan)
	if workflows.IsSiteAction(p.Action) {
		of = "site " + strings.TrimPrefix(p.Plan, "site-")
	}
	fmt.Fprintf(w, "%s of %s: %s — %d/%d steps done\n", p.Action, of, p.State, counts[workflows.StateDone]+counts[workflows.StateSkipped], len(p.Steps))
	if p.By != "" || p.Trust != "" {
		fmt.Fprintf(w, "  started by %s; %s\n", orUnknown(p.By), orUnknown(p.Trust))
	}
	t := newTable(w, "  STATE", "STEP", "TRIES", "TOOK", "NOTE")
	for _, s := range p.Steps {
		took := ""
		switch {
		case !s.End.IsZero() && !s.Start.IsZero():
			took = s.End.Sub(s.Start).Round(time.Millisecond).String()
		case !s.Start.IsZero():
			took = time.Since(s.Start).Round(100*time.Millisecond).String() + "…"
		}
		note := stepNote(s)
		if s.By != "" {
			note = strings.TrimSpace(note + " (by " + s.By + ")")
		}
		lines := wrap(note, noteWidth)
		t.row("  "+shortState(s.State), s.Name, fmt.Sprint(tries(s)), took, lines[0])
		for _, more := range lines[1:] {
			t.row("", "", "", "", more)
		}
	}
	t.flush()
	plan := runArg(id)
	for _, s := range p.Steps {
		if s.State != workflows.StatePaused {
			continue
		}
		n := tries(s)
		fmt.Fprintf(w, "paused for the operator: step %q after %d %s\n  error: %s\n", s.Name, n, plural(n, "try", "tries"), oneLine(s.LastError))
		step := ""
		if len(stepsIn(p, workflows.StatePaused)) > 1 {
			step = " --step " + s.Key()
		}
		fmt.Fprintf(w, "  next: drctl resolve %s%s --retry (run it again), %s or --abort (end the action)\n", plan, step, skipHint(s))
	}
	if waiting := stepsIn(p, workflows.StateWaiting); len(waiting) > 0 {
		names := make([]string, len(waiting))
		for i, s := range waiting {
			names[i] = s.Name
		}
		fmt.Fprintf(w, "waiting for approval: %q — open it with drctl approve %s\n", names, plan)
	}
}

// skipHint is how the operator goes on without a paused step: a step
// later steps rely on (a fence) is skipped only with --override, which
// says so.
func skipHint(s *workflows.Step) string {
	if s.Guard {
		return "--skip --override (go on without it, although later steps rely on it)"
	}
	return "--skip (go on without it)"
}

func orUnknown(s string) string {
	if s == "" {
		return "(not recorded)"
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
