package deploy

import (
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// renderJob renders a Nomad job file with HCL2 as `nomad job run -var`
// does before it sends the job: the variables (given, else their
// defaults; one without either is an error), the locals, then the job
// block with its dynamic blocks expanded, every attribute evaluated.
// Nomad's runtime references (${NOMAD_...}, ${attr...}, ${node...}) are
// left as they are written, as Nomad leaves them for the client. It
// needs no Nomad agent; the tests with a real agent (TestNomadJobSpecs)
// parse the same files through its own parser where one is installed.
func renderJob(file string, vars map[string]cty.Value) (*hclBlock, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	f, diags := hclsyntax.ParseConfig(src, file, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diags
	}
	body := f.Body.(*hclsyntax.Body)
	values := map[string]cty.Value{}
	declared := map[string]bool{}
	for _, b := range body.Blocks {
		if b.Type != "variable" {
			continue
		}
		name := b.Labels[0]
		declared[name] = true
		v, ok := vars[name]
		if !ok {
			def, ok := b.Body.Attributes["default"]
			if !ok {
				return nil, fmt.Errorf("%s: no value for the required variable %q", file, name)
			}
			var diags hcl.Diagnostics
			if v, diags = def.Expr.Value(nil); diags.HasErrors() {
				return nil, diags
			}
		}
		// Of the variable's type, as Nomad converts it.
		if ta, ok := b.Body.Attributes["type"]; ok {
			ty, diags := typeexpr.TypeConstraint(ta.Expr)
			if diags.HasErrors() {
				return nil, diags
			}
			if v, err = convert.Convert(v, ty); err != nil {
				return nil, fmt.Errorf("%s: variable %q: %w", file, name, err)
			}
		}
		values[name] = v
	}
	for name := range vars {
		if !declared[name] {
			return nil, fmt.Errorf("%s: no variable %q is declared", file, name)
		}
	}
	ctx := &hcl.EvalContext{
		Variables: map[string]cty.Value{"var": cty.ObjectVal(values)},
		Functions: map[string]function.Function{
			"length": stdlib.LengthFunc, "concat": stdlib.ConcatFunc, "join": stdlib.JoinFunc, "substr": stdlib.SubstrFunc,
		},
	}
	// The locals, each once what it refers to is known.
	locals := map[string]cty.Value{}
	var pending []*hclsyntax.Attribute
	for _, b := range body.Blocks {
		if b.Type == "locals" {
			for _, a := range b.Body.Attributes {
				pending = append(pending, a)
			}
		}
	}
	for len(pending) > 0 {
		var next []*hclsyntax.Attribute
		for _, a := range pending {
			ready := true
			for _, tr := range a.Expr.Variables() {
				if tr.RootName() == "local" {
					if name := tr[1].(hcl.TraverseAttr).Name; !mapHas(locals, name) {
						ready = false
					}
				}
			}
			if !ready {
				next = append(next, a)
				continue
			}
			ctx.Variables["local"] = cty.ObjectVal(locals)
			v, diags := a.Expr.Value(ctx)
			if diags.HasErrors() {
				return nil, diags
			}
			locals[a.Name] = v
		}
		if len(next) == len(pending) {
			var names []string
			for _, a := range next {
				names = append(names, a.Name)
			}
			return nil, fmt.Errorf("%s: locals %v refer to each other or to a local not declared", file, names)
		}
		pending = next
	}
	ctx.Variables["local"] = cty.ObjectVal(locals)
	for _, b := range body.Blocks {
		if b.Type == "job" {
			job, err := renderBlock(b.Type, b.Labels, b.Body, ctx)
			if err != nil {
				return nil, err
			}
			return job[0], nil
		}
	}
	return nil, fmt.Errorf("%s: no job block", file)
}

func mapHas(m map[string]cty.Value, k string) bool { _, ok := m[k]; return ok }

// hclBlock is a rendered block: its attributes' values and its blocks.
type hclBlock struct {
	Type   string
	Labels []string
	Attrs  map[string]cty.Value
	Blocks []*hclBlock
}

// renderBlock renders one block's body; a dynamic block renders as the
// blocks it makes.
func renderBlock(typ string, labels []string, body *hclsyntax.Body, ctx *hcl.EvalContext) ([]*hclBlock, error) {
	out := &hclBlock{Type: typ, Labels: labels, Attrs: map[string]cty.Value{}}
	for name, a := range body.Attributes {
		v, diags := a.Expr.Value(withRuntimeRefs(ctx, a.Expr))
		if diags.HasErrors() {
			return nil, diags
		}
		out.Attrs[name] = v
	}
	for _, b := range body.Blocks {
		if b.Type != "dynamic" {
			bs, err := renderBlock(b.Type, b.Labels, b.Body, ctx)
			if err != nil {
				return nil, err
			}
			out.Blocks = append(out.Blocks, bs...)
			continue
		}
		made, err := renderDynamic(b, ctx)
		if err != nil {
			return nil, err
		}
		out.Blocks = append(out.Blocks, made...)
	}
	return []*hclBlock{out}, nil
}

// renderDynamic expands a dynamic block: one block of its label's type
// per element of for_each, its content rendered with the iterator
// (.key, .value) in scope.
func renderDynamic(b *hclsyntax.Block, ctx *hcl.EvalContext) ([]*hclBlock, error) {
	typ := b.Labels[0]
	iter := typ
	if a, ok := b.Body.Attributes["iterator"]; ok {
		iter = hcl.ExprAsKeyword(a.Expr)
	}
	each, diags := b.Body.Attributes["for_each"].Expr.Value(ctx)
	if diags.HasErrors() {
		return nil, diags
	}
	var content *hclsyntax.Body
	for _, c := range b.Body.Blocks {
		if c.Type == "content" {
			content = c.Body
		}
	}
	var out []*hclBlock
	for it := each.ElementIterator(); it.Next(); {
		k, v := it.Element()
		child := ctx.NewChild()
		child.Variables = map[string]cty.Value{iter: cty.ObjectVal(map[string]cty.Value{"key": k, "value": v})}
		var labels []string
		if a, ok := b.Body.Attributes["labels"]; ok {
			lv, diags := a.Expr.Value(child)
			if diags.HasErrors() {
				return nil, diags
			}
			for _, l := range lv.AsValueSlice() {
				labels = append(labels, l.AsString())
			}
		}
		made, err := renderBlock(typ, labels, content, child)
		if err != nil {
			return nil, err
		}
		out = append(out, made...)
	}
	return out, nil
}

// runtimeRoots are the names Nomad interpolates on the client, which the
// HCL2 parse leaves as written.
func isRuntimeRoot(name string) bool {
	return strings.HasPrefix(name, "NOMAD_") || name == "attr" || name == "node" || name == "meta" || name == "env"
}

// withRuntimeRefs is ctx with each runtime reference of expr bound to its
// own text, "${attr.cpu.arch}", so that it renders as written.
func withRuntimeRefs(ctx *hcl.EvalContext, expr hclsyntax.Expression) *hcl.EvalContext {
	vars := map[string]any{}
	for _, tr := range expr.Variables() {
		if !isRuntimeRoot(tr.RootName()) {
			continue
		}
		path := []string{tr.RootName()}
		for _, step := range tr[1:] {
			if a, ok := step.(hcl.TraverseAttr); ok {
				path = append(path, a.Name)
			}
		}
		m := vars
		for i, p := range path {
			if i == len(path)-1 {
				m[p] = "${" + strings.Join(path, ".") + "}"
				break
			}
			sub, ok := m[p].(map[string]any)
			if !ok {
				sub = map[string]any{}
				m[p] = sub
			}
			m = sub
		}
	}
	if len(vars) == 0 {
		return ctx
	}
	child := ctx.NewChild()
	child.Variables = map[string]cty.Value{}
	for k, v := range vars {
		child.Variables[k] = toCty(v)
	}
	return child
}

func toCty(v any) cty.Value {
	if s, ok := v.(string); ok {
		return cty.StringVal(s)
	}
	m := map[string]cty.Value{}
	for k, sub := range v.(map[string]any) {
		m[k] = toCty(sub)
	}
	return cty.ObjectVal(m)
}

// all returns the blocks under b along path of block types, at any
// depth of the path (group, then task, ...).
func (b *hclBlock) all(path ...string) []*hclBlock {
	if len(path) == 0 {
		return []*hclBlock{b}
	}
	var out []*hclBlock
	for _, c := range b.Blocks {
		if c.Type == path[0] {
			out = append(out, c.all(path[1:]...)...)
		}
	}
	return out
}

// str is a string attribute's value, "" when absent or not a string.
func (b *hclBlock) str(name string) string {
	v, ok := b.Attrs[name]
	if !ok || v.IsNull() || !v.IsKnown() || v.Type() != cty.String {
		return ""
	}
	return v.AsString()
}

// strs is a list attribute's strings.
func (b *hclBlock) strs(name string) []string {
	v, ok := b.Attrs[name]
	if !ok || v.IsNull() || !v.CanIterateElements() {
		return nil
	}
	var out []string
	for _, e := range v.AsValueSlice() {
		if e.Type() == cty.String {
			out = append(out, e.AsString())
		} else {
			out = append(out, e.GoString())
		}
	}
	return out
}
