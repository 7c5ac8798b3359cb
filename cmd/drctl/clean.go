package main

import (
	"bytes"
	"fmt"
	"io"
	"unicode/utf8"
)

// cleanWriter is drctl's standard output and error: it writes the control
// characters that a field anyone can set may carry (the `by` of a
// workflow, a plan's names, a driver's message) as visible escapes
// (\x1b), so that none moves the cursor, sets a title or rings a bell on
// an operator's terminal and hides what is around it. Newlines and tabs
// pass. JSON output has none to escape: encoding/json escapes them.
// The live view writes its own cursor moves to the terminal underneath
// (raw), and its text here.
type cleanWriter struct {
	w io.Writer
	// carry is the start of a character the last write cut.
	carry []byte
}

func newCleanWriter(w io.Writer) io.Writer {
	if w == nil {
		return nil
	}
	if _, ok := w.(*cleanWriter); ok {
		return w
	}
	return &cleanWriter{w: w}
}

// raw is the writer underneath w, for the live view's cursor moves and
// its terminal checks.
func raw(w io.Writer) io.Writer {
	if c, ok := w.(*cleanWriter); ok {
		return c.w
	}
	return w
}

func (c *cleanWriter) Write(p []byte) (int, error) {
	n := len(p)
	if len(c.carry) > 0 {
		p = append(c.carry, p...)
		c.carry = nil
	}
	// A character cut at the end waits for the next write.
	for i := 1; i <= 3 && i <= len(p); i++ {
		if utf8.RuneStart(p[len(p)-i]) {
			if !utf8.FullRune(p[len(p)-i:]) {
				c.carry = append([]byte(nil), p[len(p)-i:]...)
				p = p[:len(p)-i]
			}
			break
		}
	}
	if _, err := c.w.Write(cleanText(p)); err != nil {
		return 0, err
	}
	return n, nil
}

// cleanText is p with its control characters but newline and tab
// written as escapes.
func cleanText(p []byte) []byte {
	if !hasControl(p) {
		return p
	}
	var b bytes.Buffer
	for len(p) > 0 {
		r, size := utf8.DecodeRune(p)
		switch {
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, p[0])
		case isControl(r):
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.Write(p[:size])
		}
		p = p[size:]
	}
	return b.Bytes()
}

// isControl: C0 but newline and tab, DEL, C1, and the characters that
// reorder or hide text (bidirectional overrides and isolates).
func isControl(r rune) bool {
	return (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r < 0xa0) ||
		(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

func hasControl(p []byte) bool {
	for len(p) > 0 {
		r, size := utf8.DecodeRune(p)
		if isControl(r) || (r == utf8.RuneError && size == 1) {
			return true
		}
		p = p[size:]
	}
	return false
}
