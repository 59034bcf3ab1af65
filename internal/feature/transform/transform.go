package transform

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/vm"

	"github.com/sluice-ml/sluice/internal/feature"
)

// Limits on one expression: they are short formulas written by people,
// so anything larger is a mistake, and the bound keeps a hostile
// definition from costing the server.
const (
	MaxExprLen   = 4096
	maxExprNodes = 1000
)

// Input is one variable the expressions of a view may use: a request
// field, or a feature of one of the view's source feature views.
type Input struct {
	// Name is the variable's name in expressions: the request field's
	// name, or view__feature for a feature (Feast's full feature name).
	Name string
	// Alias is a second name for a feature (its bare name) when no other
	// input has it; "" otherwise.
	Alias string
	Type  feature.Type
}

// Output is one computed feature of a view.
type Output struct {
	Field feature.Field
	Expr  string
	// Uses are the indexes (into the view's inputs) of the inputs the
	// expression reads, sorted.
	Uses []int

	prog *vm.Program
}

// View is a compiled on-demand feature view: the expressions of its
// features, type-checked against its inputs. It is immutable and safe for
// concurrent use.
type View struct {
	Name    string
	Inputs  []Input
	Outputs []Output

	envs sync.Pool // *evalEnv
}

type evalEnv struct {
	m  map[string]any
	vm vm.VM
}

// CompileError is a problem with one output's expression.
type CompileError struct {
	Output int // index of the output
	// Line and Column locate the problem in the expression (1-based);
	// 0 when it is about the expression as a whole.
	Line, Column int
	Msg          string
}

func (e *CompileError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
	}
	return e.Msg
}

// allowedBuiltins are the functions an expression may call: expr's
// numeric builtins and a few math functions of ours. Everything else
// (I/O-free as expr is) is left out so expressions stay cheap and
// bounded: no maps, filters or ranges over request data.
var allowedBuiltins = []string{"abs", "ceil", "floor", "round", "min", "max", "len", "sum", "mean", "lower", "upper", "trim", "int", "float", "string"}

// allowedOps are the binary operators an expression may use. Left out:
// ".." (builds arrays), "matches" (compiles a regular expression per
// evaluation when the pattern is not constant) and "|" (pipes).
var allowedOps = map[string]bool{
	"+": true, "-": true, "*": true, "/": true, "%": true, "**": true, "^": true,
	"==": true, "!=": true, "<": true, "<=": true, ">": true, ">=": true,
	"&&": true, "||": true, "and": true, "or": true, "??": true, "in": true,
	"contains": true, "startsWith": true, "endsWith": true,
}

// ourFuncs are the math functions expr lacks.
var ourFuncs = map[string]func(float64) float64{
	"sqrt": math.Sqrt, "log": math.Log, "exp": math.Exp, "log1p": math.Log1p,
}

// goType is the Go type an input of type t has in expressions.
func goType(t feature.Type) (any, error) {
	var z any
	switch t.Kind {
	case feature.KindInt32, feature.KindInt64, feature.KindUnixTimestamp:
		z = int(0)
		if t.List {
			z = []int{}
		}
	case feature.KindFloat32, feature.KindFloat64:
		z = float64(0)
		if t.List {
			z = []float64{}
		}
	case feature.KindString:
		z = ""
		if t.List {
			z = []string{}
		}
	case feature.KindBool:
		z = false
		if t.List {
			z = []bool{}
		}
	default:
		return nil, fmt.Errorf("%s values cannot be used in expressions", t)
	}
	return z, nil
}

// OutputTypeOK reports whether t can be an output type.
func OutputTypeOK(t feature.Type) bool {
	if t.List {
		return false
	}
	switch t.Kind {
	case feature.KindInt32, feature.KindInt64, feature.KindFloat32, feature.KindFloat64, feature.KindString, feature.KindBool:
		return true
	default:
		return false
	}
}

// Compile type-checks exprs (one per output field) against inputs and
// compiles them. Every problem is returned, each naming its output.
func Compile(name string, inputs []Input, outputs []feature.Field, exprs []string) (*View, []*CompileError) {
	v := &View{Name: name, Inputs: inputs}
	env := make(map[string]any, 2*len(inputs))
	byName := make(map[string]int, 2*len(inputs))
	var errs []*CompileError
	for i, in := range inputs {
		z, err := goType(in.Type)
		if err != nil {
			errs = append(errs, &CompileError{Output: -1, Msg: fmt.Sprintf("input '%s': %v", in.Name, err)})
			continue
		}
		env[in.Name], byName[in.Name] = z, i
		if in.Alias != "" {
			env[in.Alias], byName[in.Alias] = z, i
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	opts := []expr.Option{expr.Env(env), expr.DisableAllBuiltins(), expr.MaxNodes(maxExprNodes)}
	for _, b := range allowedBuiltins {
		opts = append(opts, expr.EnableBuiltin(b))
	}
	for fname, f := range ourFuncs {
		opts = append(opts, expr.Function(fname, func(p ...any) (any, error) { return f(toFloat(p[0])), nil },
			new(func(float64) float64), new(func(int) float64)))
	}
	for oi, out := range outputs {
		src := exprs[oi]
		fail := func(line, col int, format string, args ...any) {
			errs = append(errs, &CompileError{Output: oi, Line: line, Column: col, Msg: fmt.Sprintf(format, args...)})
		}
		switch {
		case strings.TrimSpace(src) == "":
			fail(0, 0, "expression is empty")
			continue
		case len(src) > MaxExprLen:
			fail(0, 0, "expression is %d bytes (at most %d)", len(src), MaxExprLen)
			continue
		case !OutputTypeOK(out.Type):
			fail(0, 0, "dtype %s cannot be computed (want Int32, Int64, Float32, Float64, String or Bool)", out.Type)
			continue
		}
		tree, err := parser.Parse(src)
		if err != nil {
			line, col, msg := position(err)
			fail(line, col, "%s", msg)
			continue
		}
		w := &walker{src: src, known: byName}
		ast.Walk(&tree.Node, w)
		if w.err != nil {
			fail(w.line, w.col, "%s", w.err)
			continue
		}
		prog, err := expr.Compile(src, opts...)
		if err != nil {
			line, col, msg := position(err)
			fail(line, col, "%s", msg)
			continue
		}
		if msg := checkResult(prog.Node().Type(), out.Type); msg != "" {
			fail(0, 0, "%s", msg)
			continue
		}
		uses := make([]int, 0, len(w.used))
		for n := range w.used {
			if !slices.Contains(uses, byName[n]) {
				uses = append(uses, byName[n])
			}
		}
		slices.Sort(uses)
		v.Outputs = append(v.Outputs, Output{Field: out, Expr: src, Uses: uses, prog: prog})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	v.envs.New = func() any { return &evalEnv{m: make(map[string]any, 2*len(inputs))} }
	return v, nil
}

// checkResult says why an expression of static type rt cannot fill a
// feature of type want, or "" when it can (an interface result is
// checked per value).
func checkResult(rt reflect.Type, want feature.Type) string {
	if rt == nil || rt.Kind() == reflect.Interface {
		return ""
	}
	ok := false
	switch want.Kind {
	case feature.KindFloat32, feature.KindFloat64:
		ok = rt.Kind() == reflect.Float64 || rt.Kind() == reflect.Int
	case feature.KindInt32, feature.KindInt64:
		ok = rt.Kind() == reflect.Int
	case feature.KindString:
		ok = rt.Kind() == reflect.String
	case feature.KindBool:
		ok = rt.Kind() == reflect.Bool
	default:
	}
	if ok {
		return ""
	}
	return fmt.Sprintf("the expression is %s, the feature's dtype is %s", exprTypeName(rt), want)
}

func exprTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Float64:
		return "a float"
	case reflect.Int:
		return "an int"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a bool"
	case reflect.Slice:
		return "a list"
	default:
		return t.String()
	}
}

// position extracts a line and column from an expr error.
func position(err error) (line, col int, msg string) {
	if fe, ok := errors.AsType[*file.Error](err); ok {
		return fe.Line, fe.Column + 1, fe.Message
	}
	return 0, 0, err.Error()
}

// walker checks that an expression uses only known variables, allowed
// operators and allowed functions, and records the variables it uses.
type walker struct {
	src       string
	known     map[string]int
	used      map[string]bool
	err       error
	line, col int
}

func (w *walker) Visit(node *ast.Node) {
	if w.err != nil {
		return
	}
	loc := (*node).Location()
	bad := func(format string, args ...any) {
		w.err = fmt.Errorf(format, args...)
		w.line, w.col = lineCol(w.src, loc.From)
	}
	switch n := (*node).(type) {
	case *ast.IdentifierNode:
		if _, ok := w.known[n.Value]; ok {
			if w.used == nil {
				w.used = map[string]bool{}
			}
			w.used[n.Value] = true
			return
		}
		if _, ok := ourFuncs[n.Value]; ok || slices.Contains(allowedBuiltins, n.Value) {
			return // a function name: CallNode checks it
		}
		bad("unknown name %q (inputs: %s)", n.Value, w.names())
	case *ast.BinaryNode:
		if !allowedOps[n.Operator] {
			bad("operator %q is not allowed", n.Operator)
		}
	case *ast.CallNode:
		id, ok := n.Callee.(*ast.IdentifierNode)
		if !ok {
			bad("only calls of named functions are allowed")
			return
		}
		if _, ours := ourFuncs[id.Value]; !ours {
			bad("function %q is not allowed (functions: %s)", id.Value, funcNames())
		}
	case *ast.BuiltinNode:
		if !slices.Contains(allowedBuiltins, n.Name) {
			bad("function %q is not allowed (functions: %s)", n.Name, funcNames())
		}
	case *ast.NilNode, *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.StringNode,
		*ast.ConstantNode, *ast.UnaryNode, *ast.ConditionalNode, *ast.ArrayNode:
	default:
		bad("%s is not allowed in a feature expression", strings.TrimPrefix(fmt.Sprintf("%T", n), "*ast."))
	}
}

func (w *walker) names() string {
	names := make([]string, 0, len(w.known))
	for n := range w.known {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) > 20 {
		return strings.Join(names[:20], ", ") + fmt.Sprintf(", … (%d in all)", len(names))
	}
	return strings.Join(names, ", ")
}

func funcNames() string {
	names := slices.Clone(allowedBuiltins)
	for n := range ourFuncs {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int:
		return float64(x)
	default:
		return math.NaN()
	}
}

// lineCol turns a rune offset in src into a 1-based line and column.
func lineCol(src string, off int) (line, col int) {
	line, col = 1, 1
	i := 0
	for _, r := range src {
		if i == off {
			break
		}
		i++
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}
