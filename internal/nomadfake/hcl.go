package nomadfake

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/hashicorp/nomad/api"
)

// The fake's /v1/jobs/parse understands the part of HCL2 a job file for
// a test uses: blocks with labels, attributes whose values are strings,
// numbers, booleans or lists of those, and comments. Anything else is an
// error, as a malformed file is on a real agent.

type hclBlock struct {
	kind   string
	labels []string
	attrs  map[string]any
	blocks []*hclBlock
}

type hclLexer struct {
	src  []rune
	pos  int
	line int
	// lineStart is where the current line begins; tok where the last
	// token began, for the line and column of an error.
	lineStart, tok int
}

// errf is an error at the last token, placed as a real agent places it:
// "input.hcl:LINE,COL-ENDCOL: ...", input.hcl being the name Nomad gives
// the HCL it is sent.
func (l *hclLexer) errf(format string, args ...any) error {
	col := l.tok - l.lineStart + 1
	end := max(col+1, l.pos-l.lineStart+1)
	return fmt.Errorf("input.hcl:%d,%d-%d: %s", l.line, col, end, fmt.Sprintf(format, args...))
}

func (l *hclLexer) skip() {
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == '\n':
			l.line++
			l.pos++
			l.lineStart = l.pos
		case unicode.IsSpace(c):
			l.pos++
		case c == '#' || (c == '/' && l.pos+1 < len(l.src) && l.src[l.pos+1] == '/'):
			for l.pos < len(l.src) && l.src[l.pos] != '\n' {
				l.pos++
			}
		default:
			return
		}
	}
}

// next returns the next token: an identifier, a quoted string (with its
// quotes), a number, or one punctuation rune; "" at the end.
func (l *hclLexer) next() (string, error) {
	l.skip()
	if l.pos >= len(l.src) {
		return "", nil
	}
	start := l.pos
	l.tok = start
	c := l.src[l.pos]
	switch {
	case c == '"':
		l.pos++
		for l.pos < len(l.src) && l.src[l.pos] != '"' {
			if l.src[l.pos] == '\\' {
				l.pos++
			}
			if l.pos < len(l.src) && l.src[l.pos] == '\n' {
				return "", l.errf("unterminated string")
			}
			l.pos++
		}
		if l.pos >= len(l.src) {
			return "", l.errf("unterminated string")
		}
		l.pos++
	case unicode.IsLetter(c) || c == '_' || unicode.IsDigit(c) || c == '-':
		for l.pos < len(l.src) && (unicode.IsLetter(l.src[l.pos]) || unicode.IsDigit(l.src[l.pos]) || strings.ContainsRune("_-.", l.src[l.pos])) {
			l.pos++
		}
	case strings.ContainsRune("{}[]=,", c):
		l.pos++
	default:
		return "", l.errf("unexpected %q", c)
	}
	return string(l.src[start:l.pos]), nil
}

func (l *hclLexer) peek() (string, error) {
	save, line := l.pos, l.line
	t, err := l.next()
	l.pos, l.line = save, line
	return t, err
}

// body parses attributes and blocks up to a closing brace (or the end,
// at the top level).
func (l *hclLexer) body(b *hclBlock, top bool) error {
	for {
		t, err := l.next()
		if err != nil {
			return err
		}
		switch {
		case t == "" && top:
			return nil
		case t == "":
			return l.errf("missing }")
		case t == "}" && !top:
			return nil
		case !isIdent(t):
			return l.errf("unexpected %s", t)
		}
		nt, err := l.peek()
		if err != nil {
			return err
		}
		if nt == "=" {
			l.next()
			v, err := l.value()
			if err != nil {
				return err
			}
			b.attrs[t] = v
			continue
		}
		child := &hclBlock{kind: t, attrs: map[string]any{}}
		for {
			lt, err := l.next()
			if err != nil {
				return err
			}
			if lt == "{" {
				break
			}
			if !strings.HasPrefix(lt, `"`) {
				return l.errf("block %s: want a quoted label or {, got %s", t, lt)
			}
			child.labels = append(child.labels, trimQuotes(lt))
		}
		if err := l.body(child, false); err != nil {
			return err
		}
		b.blocks = append(b.blocks, child)
	}
}

func (l *hclLexer) value() (any, error) {
	t, err := l.next()
	if err != nil {
		return nil, err
	}
	switch {
	case strings.HasPrefix(t, `"`):
		return strconv.Unquote(t)
	case t == "true" || t == "false":
		return t == "true", nil
	case t == "[":
		var list []any
		for {
			nt, err := l.peek()
			if err != nil {
				return nil, err
			}
			if nt == "]" {
				l.next()
				return list, nil
			}
			v, err := l.value()
			if err != nil {
				return nil, err
			}
			list = append(list, v)
			if nt, _ := l.peek(); nt == "," {
				l.next()
			}
		}
	default:
		if n, err := strconv.Atoi(t); err == nil {
			return n, nil
		}
		return nil, l.errf("unsupported value %s", t)
	}
}

func isIdent(t string) bool {
	return t != "" && (unicode.IsLetter(rune(t[0])) || t[0] == '_')
}

func parseHCL(src string) (*api.Job, error) {
	l := &hclLexer{src: []rune(src), line: 1}
	root := &hclBlock{attrs: map[string]any{}}
	if err := l.body(root, true); err != nil {
		return nil, fmt.Errorf("Failed to parse job: %v", err) //lint:ignore ST1005 Nomad's own wording, which clients match
	}
	var jb *hclBlock
	for _, b := range root.blocks {
		if b.kind == "job" {
			jb = b
		}
	}
	if jb == nil || len(jb.labels) != 1 {
		return nil, fmt.Errorf("Failed to parse job: a job file needs one job \"name\" block") //lint:ignore ST1005 Nomad's own wording, which clients match
	}
	job := &api.Job{ID: ptr(jb.labels[0]), Name: ptr(jb.labels[0]), Type: ptr(str(jb.attrs["type"], "service"))}
	if ns, ok := jb.attrs["namespace"].(string); ok {
		job.Namespace = ptr(ns)
	}
	job.Datacenters = append(job.Datacenters, list(jb.attrs["datacenters"])...)
	for _, g := range jb.blocks {
		if g.kind != "group" || len(g.labels) != 1 {
			continue
		}
		count := 1
		if c, ok := g.attrs["count"].(int); ok {
			count = c
		}
		tg := &api.TaskGroup{Name: ptr(g.labels[0]), Count: ptr(count)}
		for _, b := range g.blocks {
			switch {
			case b.kind == "task" && len(b.labels) == 1:
				task := &api.Task{Name: b.labels[0], Driver: str(b.attrs["driver"], "")}
				for _, c := range b.blocks {
					if c.kind == "config" {
						task.Config = c.attrs
					}
				}
				tg.Tasks = append(tg.Tasks, task)
			case b.kind == "volume" && len(b.labels) == 1:
				if tg.Volumes == nil {
					tg.Volumes = map[string]*api.VolumeRequest{}
				}
				tg.Volumes[b.labels[0]] = &api.VolumeRequest{Name: b.labels[0], Type: str(b.attrs["type"], "host"), Source: str(b.attrs["source"], "")}
			}
		}
		job.TaskGroups = append(job.TaskGroups, tg)
	}
	return job, nil
}

func str(v any, def string) string {
	if s, ok := v.(string); ok {
		return s
	}
	return def
}

func list(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, x := range l {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}
