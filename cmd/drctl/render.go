package main

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/term"
	"golang.org/x/text/width"

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
// one line per step that changed, so the output reads as a log.
//
// In place means: move the cursor up over the rows the last redraw
// took and erase down. A line longer than the terminal is wide wraps
// onto more rows than its one newline says, so the rows are counted at
// the terminal's width; and rows that scrolled off the top of the screen
// cannot be reached again, so a table taller than the screen is cut to
// fit, with a line that says so.
type liveTable struct {
	w io.Writer
	// raw is the terminal under w (cleanWriter), for the cursor moves.
	raw   io.Writer
	on    bool // text output at all
	tty   bool
	drawn int // rows of the last redraw
	// size is the terminal's width and height (a test sets it).
	size func() (width, height int)
	// seen is what the log last said of each step: its state and tries.
	seen map[string]string
}

func newLiveTable(w io.Writer, on bool) *liveTable {
	l := &liveTable{w: w, raw: raw(w), on: on, tty: isTerminal(raw(w)), seen: map[string]string{}}
	l.size = func() (int, int) {
		if f, ok := raw(w).(*os.File); ok {
			if width, height, err := term.GetSize(int(f.Fd())); err == nil {
				return width, height
			}
		}
		return 80, 24
	}
	if t, ok := raw(w).(sizedTerminal); ok {
		// A terminal that is not a file (a test's emulator) says its size.
		l.tty, l.size = true, t.Size
	}
	return l
}

// sizedTerminal is a terminal that is no file descriptor and says its
// own width and height.
type sizedTerminal interface {
	io.Writer
	Size() (width, height int)
}

// isTerminal: w is a terminal, so the live table redraws in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// rows is how many rows of a terminal width columns wide a line without
// its newline takes: at least one, one more for each width it passes.
func rows(line string, width int) int {
	n := columns(line)
	if width <= 0 || n <= width {
		return 1
	}
	return (n + width - 1) / width
}

// columns is how many terminal columns text takes: two for a wide East
// Asian character, none for a combining mark, one for any other.
func columns(text string) int {
	n := 0
	for _, r := range text {
		n += runeColumns(r)
	}
	return n
}

func runeColumns(r rune) int {
	switch {
	case unicode.In(r, unicode.Mn, unicode.Me):
		return 0
	}
	switch width.LookupRune(r).Kind() {
	case width.EastAsianWide, width.EastAsianFullwidth:
		return 2
	}
	return 1
}

// cut shortens text to at most n terminal columns, the end of a longer
// text replaced by "…".
func cut(text string, n int) string {
	if n <= 0 || columns(text) <= n {
		return text
	}
	used := 0
	for i, r := range text {
		if used+runeColumns(r) > n-1 {
			return text[:i] + "…"
		}
		used += runeColumns(r)
	}
	return text
}

// cutMiddle shortens text to at most n terminal columns by leaving out
// its middle, marked "…": its start and its end stay.
func cutMiddle(text string, n int) string {
	if n <= 0 || columns(text) <= n {
		return text
	}
	head := cut(text, n/2+1) // its start and "…"
	r := []rune(text)
	tail := len(r)
	for used := columns(head); tail > 0 && used+runeColumns(r[tail-1]) <= n; tail-- {
		used += runeColumns(r[tail-1])
	}
	return head + string(r[tail:])
}

// wrapTo wraps each line wider than n columns at spaces (wrap), its
// further lines indented by indent, so that every line fits in n.
func wrapTo(lines []string, n int, indent string) []string {
	if n <= 0 {
		return lines
	}
	var out []string
	for _, ln := range lines {
		if columns(ln) <= n {
			out = append(out, ln)
			continue
		}
		parts := wrap(ln, n)
		out = append(out, parts[0])
		for _, more := range wrap(strings.Join(parts[1:], " "), max(n-columns(indent), 10)) {
			out = append(out, cut(indent+more, n))
		}
	}
	return out
}

// fit cuts a step table to at most height-1 rows of the terminal (the
// cursor's row stays free, so a redraw can reach every row it drew) and
// returns its text with the rows it takes. What it leaves out are whole
// steps: the header and the hints below the table (how to resolve a
// paused step) stay, and the steps shown start at the first one not
// done yet, then go back to earlier ones while there is room. A line
// says how many steps were left out.
func fit(t stepsText, width, height int) (string, int) {
	count := func(ls []string) int {
		n := 0
		for _, ln := range ls {
			n += rows(ln, width)
		}
		return n
	}
	text := t.String()
	total := count(strings.Split(strings.TrimSuffix(text, "\n"), "\n"))
	limit := height - 1
	if height <= 2 || total <= limit {
		return text, total
	}
	budget := limit - count(t.head) - count(t.tail) - 1
	from := slices.IndexFunc(t.steps, func(s stepRows) bool {
		return s.state != workflows.StateDone && s.state != workflows.StateSkipped
	})
	from = max(from, 0)
	to, used := from, 0
	steps := slices.Clone(t.steps)
	if from < len(steps) && count(steps[from].lines) > budget {
		// The first step not done yet comes first: what of its note fits
		// (a paused step's error is whole in the hints below).
		s := steps[from]
		s.lines = s.lines[:1]
		for _, ln := range t.steps[from].lines[1:] {
			if count(s.lines)+rows(ln, width) > budget {
				break
			}
			s.lines = append(s.lines, ln)
		}
		steps[from] = s
	}
	for to < len(steps) && used+count(steps[to].lines) <= budget {
		used += count(t.steps[to].lines)
		to++
	}
	for from > 0 && used+count(steps[from-1].lines) <= budget {
		from--
		used += count(steps[from].lines)
	}
	cut := stepsText{head: t.head, steps: slices.Clone(steps[from:to]), tail: t.tail}
	cut.steps = append(cut.steps, stepRows{lines: []string{cutMark(len(t.steps)-(to-from), width)}})
	if budget < 0 {
		// Not even the header and the hints fit: the first rows that do.
		var out []string
		used := 0
		for _, ln := range strings.Split(strings.TrimSuffix(cut.String(), "\n"), "\n") {
			if used+rows(ln, width) > limit-1 {
				break
			}
			out = append(out, ln)
			used += rows(ln, width)
		}
		out = append(out, cutMark(len(t.steps), width))
		return strings.Join(out, "\n") + "\n", used + 1
	}
	text = cut.String()
	return text, count(strings.Split(strings.TrimSuffix(text, "\n"), "\n"))
}

// cutMark says that n steps of the table were left out, within width.
func cutMark(n int, width int) string {
	return cut(fmt.Sprintf("  … %d more %s: a taller terminal, or drctl status, shows them all", n, plural(n, "step", "steps")), width)
}

// clear erases the last redraw: the cursor goes to the start of its
// first row, and everything from there down is erased.
func (l *liveTable) clear() {
	if l.drawn > 0 {
		fmt.Fprintf(cmp.Or(l.raw, l.w), "\r\x1b[%dA\x1b[J", l.drawn)
		l.drawn = 0
	}
}

// show renders the latest progress.
func (l *liveTable) show(p *workflows.Progress, id string) {
	if !l.on || p == nil {
		return
	}
	if l.tty {
		width, height := l.size()
		text, n := fit(stepTable(p, id, width), width, height)
		l.clear()
		io.WriteString(l.w, text)
		l.drawn = n
		return
	}
	l.log(p, id)
}

// log prints a line for each step that changed since the last look.
func (l *liveTable) log(p *workflows.Progress, id string) {
	for _, s := range p.Steps {
		// A retry the operator asked for (drctl resolve) can pause the
		// step again between two looks: its tries tell the change.
		now := fmt.Sprintf("%s %d %s %v", s.State, tries(s), s.By, s.WaitsForWorker)
		if l.seen[s.Key()] == now {
			continue
		}
		l.seen[s.Key()] = now
		if s.State == workflows.StatePending {
			continue
		}
		note := stepNote(s)
		if s.By != "" {
			note = strings.TrimSpace(note + " (by " + s.By + ")")
		}
		if s.State == workflows.StatePaused {
			skip := "--skip"
			if s.Guard {
				skip += " --override"
			}
			note += fmt.Sprintf(" — decide with: drctl resolve %s --retry|%s|--abort", runArg(id), skip)
		}
		if s.State == workflows.StateWaiting {
			note += fmt.Sprintf(" — open it with: drctl approve %s", runArg(id))
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
	if l.tty {
		// The whole table, within the terminal's width.
		l.clear()
		width, _ := l.size()
		io.WriteString(l.w, stepTable(p, id, width).String())
		return
	}
	if len(l.seen) > 0 {
		// What changed since the last look (the steps that ran as the
		// action ended) is logged too, then the whole table.
		l.log(p, id)
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
// a running step is doing), else its output, whole, on one line. A
// running step whose call waits for a site's worker says so whatever
// error came before. A step
// that ended well shows its output: an error an earlier attempt met is
// history, not its note.
func stepNote(s *workflows.Step) string {
	note := s.Output
	if s.State == workflows.StateSkipped && s.Undone != "" {
		note = "not done: " + s.Undone
	}
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
		if s.State == workflows.StateRunning && s.WaitsForWorker {
			// A site's worker cut off: what it waits for matters more
			// than an error an attempt before the cut met.
			note = s.Note
		}
	}
	return oneLine(note)
}

// tries is how many times a step's work was tried: each run of the step
// (the first, and each operator's retry) is one try, and each failed
// call the step tried again within a run is one more.
func tries(s *workflows.Step) int { return s.Attempts + s.Retries }

// wrap cuts text into lines of at most n terminal columns, at spaces
// where it can, in the middle of a word longer than a line.
func wrap(text string, n int) []string {
	var lines []string
	for columns(text) > n {
		// at: the byte just past the n columns that fit.
		at, used := len(text), 0
		for i, r := range text {
			if used+runeColumns(r) > n {
				at = i
				break
			}
			used += runeColumns(r)
		}
		brk := strings.LastIndexByte(text[:min(at+1, len(text))], ' ')
		rest := ""
		if brk <= 0 {
			brk = max(at, len(string([]rune(text)[0])))
			rest = text[brk:]
		} else {
			rest = text[brk+1:]
		}
		lines = append(lines, strings.TrimRight(text[:brk], " "))
		text = strings.TrimLeft(rest, " ")
	}
	return append(lines, text)
}

// renderSteps writes the step table of an action.
func renderSteps(w io.Writer, p *workflows.Progress, id string) {
	io.WriteString(w, stepTable(p, id, 0).String())
}

// stepsText is a step table in lines: the header, each step's rows (its
// line and the lines its note wraps onto), and the hints below.
type stepsText struct {
	head  []string
	steps []stepRows
	tail  []string
}

type stepRows struct {
	state string
	lines []string
}

func (t stepsText) String() string {
	var b strings.Builder
	for _, ln := range t.head {
		b.WriteString(ln + "\n")
	}
	for _, s := range t.steps {
		for _, ln := range s.lines {
			b.WriteString(ln + "\n")
		}
	}
	for _, ln := range t.tail {
		b.WriteString(ln + "\n")
	}
	return b.String()
}

// noteIndent starts the note lines of a narrow table.
const noteIndent = "        "

// stepTable lays out the step table for a terminal width columns wide
// (0: not known). Notes wrap at noteWidth in the NOTE column; when the
// columns before it leave too little of the width for that, each note
// goes on the lines below its step instead, wrapped at the width, so a
// line wraps only where the table wraps it.
func stepTable(p *workflows.Progress, id string, width int) stepsText {
	var t stepsText
	counts := map[string]int{}
	for _, s := range p.Steps {
		counts[s.State]++
	}
	of := fmt.Sprintf("plan %q", p.Plan)
	if workflows.IsSiteAction(p.Action) {
		of = "site " + strings.TrimPrefix(p.Plan, "site-")
	}
	t.head = append(t.head, fmt.Sprintf("%s of %s: %s — %d/%d steps done", p.Action, of, actionState(p.State, p), counts[workflows.StateDone]+counts[workflows.StateSkipped], len(p.Steps)))
	if p.By != "" || p.Trust != "" {
		t.head = append(t.head, fmt.Sprintf("  started by %s; %s", orUnknown(p.By), orUnknown(p.Trust)))
	}
	type row struct{ cells, note []string }
	var rs []row
	for _, s := range p.Steps {
		took := took(s.Start, s.End)
		if took == "" && !s.Start.IsZero() {
			took = time.Since(s.Start).Round(100*time.Millisecond).String() + "…"
		}
		note := stepNote(s)
		if s.By != "" {
			note = strings.TrimSpace(note + " (by " + s.By + ")")
		}
		rs = append(rs, row{cells: []string{"  " + shortState(s.State), s.Name, fmt.Sprint(tries(s)), took}, note: []string{note}})
	}
	// The columns before NOTE do not depend on the notes: lay them out
	// once to learn where NOTE begins.
	lay := func(notes bool) []string {
		var b bytes.Buffer
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		title := "  STATE\tSTEP\tTRIES\tTOOK"
		if notes {
			title += "\tNOTE"
		}
		fmt.Fprintln(tw, title)
		for _, r := range rs {
			if !notes {
				fmt.Fprintln(tw, strings.Join(r.cells, "\t"))
				continue
			}
			fmt.Fprintln(tw, strings.Join(r.cells, "\t")+"\t"+r.note[0])
			for _, more := range r.note[1:] {
				fmt.Fprintln(tw, "\t\t\t\t"+more)
			}
		}
		tw.Flush()
		return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	}
	first := lay(true)
	col := utf8.RuneCountInString(first[0][:strings.Index(first[0], "NOTE")])
	narrow := width > 0 && width-col < 40
	at := noteWidth
	switch {
	case narrow:
		at = max(width-len(noteIndent), 20)
	case width > 0:
		at = min(width-col, noteWidth)
	}
	for i := range rs {
		rs[i].note = wrap(rs[i].note[0], at)
	}
	var lines []string
	if narrow {
		// The notes go below; a name too long for the row is cut in
		// its middle, where the steps of a long table differ least
		// (promote orders-…-09 on west).
		state, tries, took := len("  STATE"), len("TRIES"), len("TOOK")
		for _, r := range rs {
			state, tries, took = max(state, columns(r.cells[0])), max(tries, columns(r.cells[2])), max(took, columns(r.cells[3]))
		}
		other := state + 2 + 2 + tries + 2 + took
		if room := width - other; room >= 12 {
			for i := range rs {
				rs[i].cells[1] = cutMiddle(rs[i].cells[1], room)
			}
		}
		lines = lay(false)
	} else {
		lines = lay(true)
	}
	if width > 0 {
		// Every line within the width, so that none wraps where the
		// table did not wrap it: the headline and the hints wrap at
		// spaces (their words matter whole), a row is cut (a step's
		// note is on the lines below it, wrapped already).
		t.head = wrapTo(t.head, width, "    ")
		lines[0] = cut(lines[0], width)
	}
	t.head = append(t.head, lines[0])
	lines = lines[1:]
	for i, s := range p.Steps {
		sr := stepRows{state: s.State}
		if narrow {
			sr.lines = append(sr.lines, lines[0])
			lines = lines[1:]
			for _, n := range rs[i].note {
				if n != "" {
					sr.lines = append(sr.lines, noteIndent+n)
				}
			}
		} else {
			sr.lines, lines = lines[:len(rs[i].note)], lines[len(rs[i].note):]
		}
		t.steps = append(t.steps, sr)
	}
	plan := runArg(id)
	for _, s := range p.Steps {
		if s.State != workflows.StatePaused {
			continue
		}
		n := tries(s)
		t.tail = append(t.tail, fmt.Sprintf("paused for the operator: step %q after %d %s", s.Name, n, plural(n, "try", "tries")),
			"  error: "+oneLine(s.LastError))
		step := ""
		if len(stepsIn(p, workflows.StatePaused)) > 1 {
			step = " --step " + s.Key()
		}
		t.tail = append(t.tail, fmt.Sprintf("  next: drctl resolve %s%s --retry (run it again), %s or --abort (end the action)", plan, step, skipHint(s)))
	}
	if waiting := stepsIn(p, workflows.StateWaiting); len(waiting) > 0 {
		names := make([]string, len(waiting))
		for i, s := range waiting {
			names[i] = s.Name
		}
		t.tail = append(t.tail, fmt.Sprintf("waiting for approval: %q — open it with drctl approve %s", names, plan))
	}
	if width > 0 {
		t.tail = wrapTo(t.tail, width, "    ")
		for i := range t.steps {
			for j, ln := range t.steps[i].lines {
				t.steps[i].lines[j] = cut(ln, width)
			}
		}
	}
	return t
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
