package plans

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// FieldError is one problem in a plan, located by file, line and column and
// by the path of the key (sites[1].fence.cidrs[0]).
type FieldError struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
	Path   string `json:"path"`
	Msg    string `json:"message"`
}

func (e *FieldError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d:%d", e.File, e.Line, e.Column)
	}
	if e.Path == "" {
		return fmt.Sprintf("%s: %s", loc, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", loc, e.Path, e.Msg)
}

// Errors is every problem found in a plan, in file order.
type Errors []*FieldError

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

type pos struct{ line, col int }

// decoder decodes a YAML node tree into Go values strictly: unknown and
// duplicate keys and ill-typed values are errors, and every error is
// collected with its position and key path.
type decoder struct {
	file string
	errs Errors
	at   map[string]pos // key path -> position of its value
	// present records the paths that the document set.
	present map[string]bool
	// fatal: the document could not be read at all (syntax, size).
	fatal bool
	// visits counts decoded nodes; aliases can make a small file expand
	// without bound, so decoding stops past maxVisits.
	visits int
}

const maxVisits = 1_000_000

// maxErrors bounds the errors reported for one plan.
const maxErrors = 100

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	if len(d.errs) >= maxErrors {
		if !d.fatal {
			d.fatal = true
			d.errs = append(d.errs, &FieldError{File: d.file, Msg: fmt.Sprintf("more than %d errors; stopped reading", maxErrors)})
		}
		return
	}
	e := &FieldError{File: d.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	d.errs = append(d.errs, e)
}

var durationType = reflect.TypeOf(Duration(0))

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if d.fatal {
		return
	}
	if d.visits++; d.visits > maxVisits {
		d.errorf(n, path, "the plan expands to more than %d values (aliases?); refusing to read it", maxVisits)
		d.fatal = true
		return
	}
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if _, set := d.at[path]; !set {
		d.at[path] = pos{n.Line, n.Column}
	}
	d.present[path] = true
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // leave the zero value
	}
	if v.Type() == durationType {
		if n.Kind != yaml.ScalarNode {
			d.errorf(n, path, "want a duration (e.g. 30s, 5m), got %s", kindName(n))
			return
		}
		dur, err := ParseDuration(n.Value)
		if err != nil {
			d.errorf(n, path, "%v", err)
			return
		}
		if dur < 0 {
			d.errorf(n, path, "%q is negative", n.Value)
			return
		}
		v.SetInt(int64(dur))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.errorf(n, path, "want a mapping, got %s", kindName(n))
			return
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		seen := map[string]bool{}
		d.entries(n, path, func(k, val *yaml.Node, p string) {
			if seen[k.Value] {
				d.errorf(k, p, "duplicate key %q", k.Value)
				return
			}
			seen[k.Value] = true
			d.at[p] = pos{k.Line, k.Column}
			ev := reflect.New(v.Type().Elem()).Elem()
			d.decode(val, ev, p)
			v.SetMapIndex(reflect.ValueOf(k.Value), ev)
		})
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.errorf(n, path, "want a list, got %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.errorf(n, path, "want a string, got %s", kindName(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Int:
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!str") {
			d.errorf(n, path, "want an integer, got %s", kindName(n))
			return
		}
		i, err := strconv.Atoi(n.Value)
		if err != nil {
			d.errorf(n, path, "%q is not an integer", n.Value)
			return
		}
		v.SetInt(int64(i))
	case reflect.Float64:
		f, err := strconv.ParseFloat(n.Value, 64)
		if n.Kind != yaml.ScalarNode || err != nil {
			d.errorf(n, path, "want a number, got %s", kindName(n))
			return
		}
		v.SetFloat(f)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			d.errorf(n, path, "want true or false, got %s", kindName(n))
			return
		}
		v.SetBool(n.Value == "true" || n.Value == "True" || n.Value == "TRUE")
	default:
		d.errorf(n, path, "cannot decode into %s", v.Type())
	}
}

type fieldInfo struct {
	index    int
	name     string
	required bool
}

func structFields(t reflect.Type) []fieldInfo {
	var out []fieldInfo
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, fieldInfo{index: i, name: name, required: f.Tag.Get("required") == "true"})
	}
	return out
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a mapping, got %s", kindName(n))
		return
	}
	fields := structFields(v.Type())
	byName := map[string]fieldInfo{}
	for _, f := range fields {
		byName[f.name] = f
	}
	seen := map[string]bool{}
	d.entries(n, path, func(k, val *yaml.Node, p string) {
		f, ok := byName[k.Value]
		if !ok {
			msg := fmt.Sprintf("unknown key %q", k.Value)
			if why, gone := removedKeys[p]; gone {
				msg += " (" + why + ")"
			} else if s := closest(k.Value, fields); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			d.errorf(k, p, "%s", msg)
			return
		}
		if seen[k.Value] {
			d.errorf(k, p, "duplicate key %q", k.Value)
			return
		}
		seen[k.Value] = true
		if val.Kind != yaml.ScalarNode {
			d.at[p] = pos{k.Line, k.Column}
		}
		d.decode(val, v.Field(f.index), p)
	})
	for _, f := range fields {
		if f.required && !seen[f.name] {
			d.errorf(n, join(path, f.name), "required key is missing")
		}
	}
}

// removedKeys are keys earlier plans could hold, by path, with what to
// write instead.
var removedKeys = map[string]string{
	"policy.requireFencing": "a failover always fences the lost site; for a site that cannot be fenced, set its fence.unavailable: true",
}

// entries calls fn for each key and value of a mapping node with the
// key's path; keys that are not plain strings are reported and skipped.
func (d *decoder) entries(n *yaml.Node, path string, fn func(k, val *yaml.Node, p string)) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "keys must be plain strings")
			continue
		}
		fn(k, val, join(path, k.Value))
	}
}

// closest suggests the known key nearest to a misspelt one.
func closest(key string, fields []fieldInfo) string {
	best, bestD := "", 3
	for _, f := range fields {
		if dd := editDistance(strings.ToLower(key), strings.ToLower(f.name)); dd < bestD {
			best, bestD = f.name, dd
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// MaxPlanSize bounds a plan file.
const MaxPlanSize = 16 << 20

// parseYAML decodes one YAML document into a Plan, collecting every error.
func parseYAML(file string, data []byte) (*Plan, *decoder) {
	d := &decoder{file: file, at: map[string]pos{}, present: map[string]bool{}}
	p := &Plan{}
	if len(data) > MaxPlanSize {
		d.errorf(nil, "", "plan is larger than %d bytes", MaxPlanSize)
		d.fatal = true
		return p, d
	}
	if at, bad := invalidUTF8(data); bad {
		d.errs = append(d.errs, &FieldError{File: file, Line: at.line, Column: at.col,
			Msg: fmt.Sprintf("the file is not UTF-8 text: byte 0x%02x here starts no UTF-8 character; save the plan as UTF-8", data[at.off])})
		d.fatal = true
		return p, d
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.errorf(nil, "", "the file is empty")
		} else {
			d.yamlError(err)
		}
		d.fatal = true
		return p, d
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.errorf(&extra, "", "the file holds more than one YAML document; give one plan per file")
	} else if !errors.Is(err, io.EOF) {
		// A syntax error after the first document: the file as a whole
		// cannot be read, and checking the first document alone would
		// only add missing keys the operator did not leave out.
		d.yamlError(err)
		d.fatal = true
		return p, d
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		d.errorf(root, "", "a plan is a mapping with apiVersion, kind, metadata, sites, volumeGroups…; got %s", kindName(root))
		d.fatal = true
		return p, d
	}
	d.decode(root, reflect.ValueOf(p).Elem(), "")
	return p, d
}

// invalidUTF8 finds the first byte of data that is not UTF-8, with its
// line and column (in characters, from 1). A file that starts with a
// UTF-16 byte order mark is left to the YAML reader, which decodes it.
func invalidUTF8(data []byte) (struct{ off, line, col int }, bool) {
	var at struct{ off, line, col int }
	if bytes.HasPrefix(data, []byte{0xfe, 0xff}) || bytes.HasPrefix(data, []byte{0xff, 0xfe}) || utf8.Valid(data) {
		return at, false
	}
	at.line, at.col = 1, 1
	for at.off < len(data) {
		r, size := utf8.DecodeRune(data[at.off:])
		if r == utf8.RuneError && size <= 1 {
			return at, true
		}
		at.off += size
		at.col++
		if r == '\n' {
			at.line, at.col = at.line+1, 1
		}
	}
	return at, false
}

// yamlError turns a YAML syntax error ("yaml: line 3: ...") into a located
// FieldError.
func (d *decoder) yamlError(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		num, tail, found := strings.Cut(rest, ": ")
		if n, err := strconv.Atoi(num); err == nil && found {
			line, msg = n, tail
		}
	}
	e := &FieldError{File: d.file, Line: line, Column: 1, Msg: "YAML syntax: " + msg}
	if line == 0 {
		e.Column = 0
	}
	d.errs = append(d.errs, e)
}

// locate returns the position recorded for path, or for its nearest
// recorded parent.
func (d *decoder) locate(path string) pos {
	for p := path; ; {
		if at, ok := d.at[p]; ok {
			return at
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return d.at[""]
		}
		p = p[:i]
	}
}

func sortErrors(es Errors) {
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].Line != es[j].Line {
			return es[i].Line < es[j].Line
		}
		return es[i].Column < es[j].Column
	})
}
