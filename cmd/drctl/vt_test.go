package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"golang.org/x/text/width"

	"github.com/drover-dr/drover/workflows"
)

// vt is a small terminal emulator, enough for what the live table
// writes: printable text that wraps at the right margin the way xterm
// wraps it (the cursor waits at the last column until the next
// character), newline as a tty driver sends it (to the start of the
// next row), carriage return, cursor up (ESC [ n A) and erase down
// (ESC [ J). A wide East Asian character takes two cells (and wraps
// whole). The screen scrolls into a scrollback. Any other control
// sequence fails the test: the table must not rely on what this does
// not check.
type vt struct {
	t          *testing.T
	cols, rows int
	screen     [][]rune
	scrollback []string
	r, c       int
	wrapNext   bool
	// wraps counts the characters that went past the right margin onto
	// the next row; ups is the scrollback's length at each cursor up
	// (each redraw).
	wraps int
	ups   []int
}

// Size is the terminal's: drctl takes it for a terminal.
func (v *vt) Size() (int, int) { return v.cols, v.rows }

func newVT(t *testing.T, cols, rows int) *vt {
	v := &vt{t: t, cols: cols, rows: rows}
	for range rows {
		v.screen = append(v.screen, v.blank())
	}
	return v
}

func (v *vt) blank() []rune { return []rune(strings.Repeat(" ", v.cols)) }

// vtWidth is how many cells a character takes, as xterm counts them.
func vtWidth(r rune) int {
	if unicode.In(r, unicode.Mn, unicode.Me) {
		return 0
	}
	if k := width.LookupRune(r).Kind(); k == width.EastAsianWide || k == width.EastAsianFullwidth {
		return 2
	}
	return 1
}

// rowText is a row as text, without the second cells of wide characters.
func rowText(row []rune) string {
	return strings.TrimRight(strings.ReplaceAll(string(row), "\x00", ""), " ")
}

func (v *vt) lineFeed() {
	v.c, v.wrapNext = 0, false
	if v.r < v.rows-1 {
		v.r++
		return
	}
	v.scrollback = append(v.scrollback, rowText(v.screen[0]))
	v.screen = append(v.screen[1:], v.blank())
}

var csi = regexp.MustCompile(`^\x1b\[([0-9]*)([A-Za-z])`)

func (v *vt) Write(p []byte) (int, error) {
	s := string(p)
	for len(s) > 0 {
		if s[0] == 0x1b {
			m := csi.FindStringSubmatch(s)
			if m == nil {
				v.t.Fatalf("the table wrote an escape sequence the emulator does not know: %q", s[:min(len(s), 8)])
			}
			n, _ := strconv.Atoi(m[1])
			switch m[2] {
			case "A":
				v.ups = append(v.ups, len(v.scrollback))
				v.r, v.wrapNext = max(v.r-max(n, 1), 0), false
			case "J":
				if n != 0 {
					v.t.Fatalf("erase mode %d", n)
				}
				copy(v.screen[v.r][v.c:], v.blank()[v.c:])
				for r := v.r + 1; r < v.rows; r++ {
					v.screen[r] = v.blank()
				}
			default:
				v.t.Fatalf("the table wrote an escape sequence the emulator does not know: %q", m[0])
			}
			s = s[len(m[0]):]
			continue
		}
		ch := []rune(s[:len(string([]rune(s)[0]))])[0]
		s = s[len(string(ch)):]
		switch {
		case ch == '\n':
			v.lineFeed()
		case ch == '\r':
			v.c, v.wrapNext = 0, false
		case ch < ' ':
			v.t.Fatalf("the table wrote control character %q", ch)
		default:
			w := vtWidth(ch)
			if w == 0 {
				continue // a combining mark: on the cell before
			}
			if v.wrapNext || v.c+w > v.cols {
				v.wraps++
				v.lineFeed()
			}
			v.screen[v.r][v.c] = ch
			if w == 2 {
				v.screen[v.r][v.c+1] = 0 // the wide character's second cell
			}
			if v.c+w == v.cols {
				v.c, v.wrapNext = v.cols-1, true
			} else {
				v.c += w
			}
		}
	}
	return len(p), nil
}

// text is the scrollback and the screen, trailing blanks and blank rows
// at the end left out.
func (v *vt) text() string {
	lines := append([]string(nil), v.scrollback...)
	for _, row := range v.screen {
		lines = append(lines, rowText(row))
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return strings.Join(lines, "\n")
}

// liveFrames is an action as the live table sees it over several
// looks: steps start and end, and a step retrying a call with a long
// error that changes length from look to look.
func liveFrames(steps int) []*workflows.Progress {
	t0 := time.Now().Add(-time.Minute)
	errs := []string{
		longError,
		"PromoteVolume of vg-1 on west: UNAVAILABLE: the storage of west is busy",
		"DEADLINE_EXCEEDED",
		longError + "; " + longError,
	}
	var frames []*workflows.Progress
	for i := range 8 {
		p := &workflows.Progress{Action: "failover", Plan: "shop", State: workflows.StateRunning, Start: t0, By: "operator@example", Trust: "signed by ops"}
		cur := min(i, steps-1)
		for j := range steps {
			s := &workflows.Step{ID: fmt.Sprintf("promote/west/vg-%d", j), Name: fmt.Sprintf("promote vg-%d on west, a group with a long name", j), State: workflows.StatePending}
			switch {
			case j < cur:
				s.State, s.Attempts, s.Start, s.End, s.Output = workflows.StateDone, 1, t0, t0.Add(time.Duration(j)*time.Second), "promoted; the copy on west is primary now and takes writes"
			case j == cur:
				s.State, s.Attempts, s.Retries, s.Start, s.LastError = workflows.StateRunning, 1, i, t0, errs[i%len(errs)]
			}
			p.Steps = append(p.Steps, s)
		}
		if i >= 4 && i < 7 {
			// Paused, retried by the operator, paused again; then it runs.
			p.Steps[cur].State, p.Steps[cur].Guard, p.Steps[cur].Attempts = workflows.StatePaused, true, i-3
		}
		// A step whose name alone is wider than the terminal.
		p.Steps[0].Name = "start web-frontend-with-a-long-job-name on west in namespace production-eu-west (tier 0)"
		frames = append(frames, p)
	}
	return frames
}

// redrawAt: what one redraw wrote, without the erasure of the last.
var lastErase = regexp.MustCompile(`^\r?\x1b\[[0-9]+A\x1b\[J`)

// TestLiveTableRedrawsAtAnyWidth renders the live table, redraw after
// redraw, into an 80×24 terminal, below a line of earlier output: after
// every redraw the screen and its scrollback hold that line and the
// latest table once, as a terminal that had only ever been sent that
// table would show it — no stale rows, no fragments of earlier tables,
// no table repeated — also when lines wrap and the table is taller than
// the screen.
func TestLiveTableRedrawsAtAnyWidth(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps int
	}{
		{"wrapped lines", 3},
		{"taller than the screen", 14},
	} {
		t.Run(tc.name, func(t *testing.T) {
			term := newVT(t, 80, 24)
			var sent bytes.Buffer
			w := &teeWriter{a: term, b: &sent}
			fmt.Fprintln(w, "drover-action-shop started: failover of shop from east to west")
			l := &liveTable{w: w, on: true, tty: true, seen: map[string]string{}, size: func() (int, int) { return 80, 24 }}
			for i, p := range liveFrames(tc.steps) {
				if i == 6 && !strings.Contains(term.text(), "next: drctl resolve shop") {
					t.Errorf("the paused step's hint is not on the screen:\n%s", term.text())
				}
				from := sent.Len()
				l.show(p, workflows.ActionID("shop"))
				frame := lastErase.ReplaceAllString(sent.String()[from:], "")
				want := newVT(t, 80, 24)
				fmt.Fprintln(want, "drover-action-shop started: failover of shop from east to west")
				want.Write([]byte(frame))
				if got := term.text(); got != want.text() {
					t.Fatalf("after redraw %d the terminal shows\n%s\n---- where a fresh terminal shows\n%s", i+1, got, want.text())
				}
				if n := strings.Count(term.text(), `failover of plan "shop"`); n != 1 {
					t.Fatalf("after redraw %d the table's header is there %d times:\n%s", i+1, n, term.text())
				}
			}
			last := term.text()
			t.Logf("\n%s", last)
			if tc.steps > 10 && (!strings.Contains(last, "more steps: a taller terminal, or drctl status, shows them all") ||
				!strings.Contains(last, "running  promote vg-7")) {
				t.Error("a table cut to the screen does not say so, or leaves out the running step")
			}
		})
	}
}

type teeWriter struct {
	a, b interface{ Write([]byte) (int, error) }
}

func (t *teeWriter) Write(p []byte) (int, error) {
	t.b.Write(p)
	return t.a.Write(p)
}

// TestRowsCountWrappedLines: a line takes a row per terminal width it
// spans, a wide East Asian character two columns; one exactly as wide
// as the terminal takes one.
func TestRowsCountWrappedLines(t *testing.T) {
	for _, tc := range []struct {
		line  string
		width int
		want  int
	}{
		{"", 80, 1},
		{strings.Repeat("x", 80), 80, 1},
		{strings.Repeat("x", 81), 80, 2},
		{strings.Repeat("é", 160), 80, 2},
		{strings.Repeat("x", 161), 80, 3},
		{strings.Repeat("表", 40), 80, 1},
		{strings.Repeat("表", 41), 80, 2},
	} {
		if got := rows(tc.line, tc.width); got != tc.want {
			t.Errorf("rows(%d characters, %d) = %d, want %d", len([]rune(tc.line)), tc.width, got, tc.want)
		}
	}
}

// TestStreamedLogAfterAResolve: piped, every change of a step is logged:
// a paused step the operator retries (drctl resolve) that pauses again
// between two looks is logged again with its tries, the steps after it
// as they run, and those that ran as the action ended before its closing
// table.
func TestStreamedLogAfterAResolve(t *testing.T) {
	var b bytes.Buffer
	l := newLiveTable(&b, true)
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	fence := &workflows.Step{ID: "fence/east", Name: "fence east", State: workflows.StatePaused, Attempts: 1, Start: t0, LastError: "INVALID_ARGUMENT: no", Guard: true}
	promote := &workflows.Step{ID: "promote/west/db", Name: "promote db on west", State: workflows.StatePending}
	p := &workflows.Progress{Action: "failover", Plan: "shop", State: workflows.StateRunning, Steps: []*workflows.Step{fence, promote}}
	l.show(p, workflows.ActionID("shop"))
	fence.Attempts, fence.By = 2, "operator@example" // retried, paused again
	l.show(p, workflows.ActionID("shop"))
	fence.State, fence.End, fence.By = workflows.StateSkipped, t0.Add(time.Minute), "operator@example"
	promote.State, promote.Attempts, promote.Start = workflows.StateRunning, 1, t0.Add(time.Minute)
	l.show(p, workflows.ActionID("shop"))
	promote.State, promote.End, promote.Output = workflows.StateDone, t0.Add(2*time.Minute), "promoted"
	l.show(p, workflows.ActionID("shop"))
	// Steps that ran between the last look and the action's end are
	// logged before the closing table.
	start := &workflows.Step{ID: "start/west/web", Name: "start web on west", State: workflows.StateDone, Attempts: 1, Start: t0, End: t0.Add(3 * time.Minute), Output: "healthy"}
	p.Steps = append(p.Steps, start)
	l.final(p, workflows.ActionID("shop"))
	out := b.String()
	t.Logf("\n%s", out)
	for _, want := range []string{
		"paused    fence east  INVALID_ARGUMENT: no — decide",
		"paused    fence east  INVALID_ARGUMENT: no (by operator@example) — decide",
		"skipped   fence east",
		"running   promote db on west",
		"done      promote db on west  promoted",
		"done      start web on west  healthy\n\nfailover of plan",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q", want)
		}
	}
}
