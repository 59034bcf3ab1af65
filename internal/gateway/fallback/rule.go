package fallback

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"sync"
	"unicode/utf8"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/vm"
)

// VarType is the declared type of a rule variable (a feature or a request
// field). Rules are type-checked against these declarations at load time.
type VarType int

// Variable types a rule may reference.
const (
	Float  VarType = iota + 1 // float64
	Int                       // int
	String                    // string
	Bool                      // bool
)

// String returns the lower-case name of t, as used in error messages.
func (t VarType) String() string {
	switch t {
	case Float:
		return "float"
	case Int:
		return "int"
	case String:
		return "string"
	case Bool:
		return "bool"
	default:
		return fmt.Sprintf("VarType(%d)", int(t))
	}
}

// zero returns the typed zero value expr's checker uses to infer t.
func (t VarType) zero() (any, bool) {
	switch t {
	case Float:
		return float64(0), true
	case Int:
		return int(0), true
	case String:
		return "", true
	case Bool:
		return false, true
	default:
		return nil, false
	}
}

// matches reports whether v has exactly the Go type that t declares.
func (t VarType) matches(v any) bool {
	switch v.(type) {
	case float64:
		return t == Float
	case int:
		return t == Int
	case string:
		return t == String
	case bool:
		return t == Bool
	default:
		return false
	}
}

// maxRuleNodes bounds the size of a rule's syntax tree; rules are short
// operator-written formulas, so anything larger is a mistake.
const maxRuleNodes = 1000

// maxRuleLen bounds the rule source length for the same reason.
const maxRuleLen = 4096

// allowedFuncs are the only calls a rule may make. min, max and abs are expr
// builtins; clamp is ours. Every other builtin is disabled.
var allowedFuncs = map[string]bool{"min": true, "max": true, "abs": true, "clamp": true}

// allowedBinary are the binary operators a rule may use. Left out on
// purpose: ".." (builds arrays, unbounded memory), "matches" (compiles a
// regular expression per evaluation when the pattern is not constant),
// "in" and "|" (collections and pipes do not exist over scalar variables).
var allowedBinary = map[string]bool{
	"+": true, "-": true, "*": true, "/": true, "%": true, "**": true, "^": true,
	"==": true, "!=": true, "<": true, "<=": true, ">": true, ">=": true,
	"&&": true, "||": true, "and": true, "or": true,
	"contains": true, "startsWith": true, "endsWith": true,
	"??": true, // a ?? b: b when the variable a is absent (a feature NOT_FOUND or null)
}

// Rule is a compiled, type-checked fallback expression. It is safe for
// concurrent use.
type Rule struct {
	src     string
	program *vm.Program
	vars    []ruleVar // the declared variables the rule references, sorted
	vms     sync.Pool // *vm.VM, reused so Eval does not allocate a VM per call
}

type ruleVar struct {
	name string
	typ  VarType
	// optional: the rule reads it only as the left side of ??, so an
	// absent value is nil, not an error.
	optional bool
}

// Source returns the rule's source text.
func (r *Rule) Source() string { return r.src }

// CompileRule parses src, checks that it uses only the declared variables,
// allowed operators and the functions min, max, abs and clamp, and
// type-checks it so that it yields a number (float or int; an int result is
// converted). Errors name the problem and its line and column.
func CompileRule(src string, vars map[string]VarType) (*Rule, error) {
	if len(src) > maxRuleLen {
		return nil, fmt.Errorf("compile rule: rule is %d bytes, longer than the limit of %d", len(src), maxRuleLen)
	}
	env := make(map[string]any, len(vars))
	for name, t := range vars {
		z, ok := t.zero()
		if !ok {
			return nil, fmt.Errorf("compile rule: variable %q has unknown type %v", name, t)
		}
		env[name] = z
	}
	tree, err := parser.Parse(src)
	if err != nil {
		return nil, fmt.Errorf("compile rule: %w", err)
	}
	w := &safetyWalker{src: src, vars: vars, used: map[string]bool{}, guarded: map[string]int{}, uses: map[string]int{}}
	// Three passes so the most useful error wins: a disallowed function is
	// reported as such, not as an unknown variable named like it.
	for w.pass = passCalls; w.pass <= passIdents; w.pass++ {
		ast.Walk(&tree.Node, w)
		if w.err != nil {
			return nil, fmt.Errorf("compile rule: %w", w.err)
		}
	}
	w.nodes /= 3
	if w.nodes > maxRuleNodes {
		return nil, fmt.Errorf("compile rule: rule has %d nodes, more than the limit of %d", w.nodes, maxRuleNodes)
	}
	opts := []expr.Option{
		expr.Env(env),
		expr.DisableAllBuiltins(),
		expr.EnableBuiltin("min"),
		expr.EnableBuiltin("max"),
		expr.EnableBuiltin("abs"),
		expr.Function("clamp", clamp, new(func(float64, float64, float64) float64)),
		expr.MaxNodes(maxRuleNodes),
	}
	// Compile once to learn the result type and name it in the error, then
	// again with AsFloat64 so int results are converted by the program.
	probe, err := expr.Compile(src, opts...)
	if err != nil {
		return nil, fmt.Errorf("compile rule: %w", err)
	}
	if t := probe.Node().Type(); t != nil {
		switch t.Kind() {
		case reflect.Float64, reflect.Int, reflect.Interface:
		default:
			return nil, fmt.Errorf("compile rule: result is %s, want a number (line 1, column 1)", t)
		}
	}
	program, err := expr.Compile(src, append(opts, expr.AsFloat64())...)
	if err != nil {
		return nil, fmt.Errorf("compile rule: %w", err)
	}
	r := &Rule{src: src, program: program}
	for name := range w.used {
		r.vars = append(r.vars, ruleVar{name: name, typ: vars[name], optional: w.guarded[name] == w.uses[name]})
	}
	sort.Slice(r.vars, func(i, j int) bool { return r.vars[i].name < r.vars[j].name })
	r.vms.New = func() any { return new(vm.VM) }
	return r, nil
}

// clamp implements clamp(x, lo, hi).
func clamp(params ...any) (any, error) {
	x, lo, hi := toFloat(params[0]), toFloat(params[1]), toFloat(params[2])
	if lo > hi {
		return nil, fmt.Errorf("clamp: lower bound %v is above upper bound %v", lo, hi)
	}
	return math.Min(math.Max(x, lo), hi), nil
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

// ErrEval marks rule evaluation failures: a missing or mistyped variable, a
// runtime error or a non-finite result.
var ErrEval = errors.New("evaluate rule")

// Eval runs the rule over vars, which must hold every variable the rule
// references with its declared Go type (float64, int, string, bool); extra
// entries are ignored. A NaN or infinite result is an error.
func (r *Rule) Eval(vars map[string]any) (float64, error) {
	for _, v := range r.vars {
		val, ok := vars[v.name]
		if !ok || val == nil {
			if v.optional {
				continue // read as nil: the ?? default applies
			}
			return 0, fmt.Errorf("%w: variable %q is missing", ErrEval, v.name)
		}
		if !v.typ.matches(val) {
			return 0, fmt.Errorf("%w: variable %q is %T, want %v", ErrEval, v.name, val, v.typ)
		}
	}
	m, _ := r.vms.Get().(*vm.VM)
	out, err := m.Run(r.program, vars)
	r.vms.Put(m)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrEval, err)
	}
	f, ok := out.(float64)
	if !ok {
		return 0, fmt.Errorf("%w: result is %T, want a number", ErrEval, out)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%w: result %v is not a finite number", ErrEval, f)
	}
	return f, nil
}

// safetyWalker rejects every syntax node outside a small allowlist before the
// expression reaches expr's compiler, so rules stay scalar formulas.
type safetyWalker struct {
	src  string
	vars map[string]VarType
	used map[string]bool
	// uses counts each variable's occurrences, guarded those that are the
	// left side of ??.
	uses, guarded map[string]int
	nodes         int
	pass          int
	err           error
}

// Passes of safetyWalker.
const (
	passCalls = iota
	passStructure
	passIdents
)

// Visit implements ast.Visitor: each pass checks its own kind of node.
func (w *safetyWalker) Visit(node *ast.Node) {
	w.nodes++
	if w.err != nil {
		return
	}
	n := *node
	_, isCall := n.(*ast.CallNode)
	_, isBuiltin := n.(*ast.BuiltinNode)
	id, isIdent := n.(*ast.IdentifierNode)
	switch w.pass {
	case passCalls:
		if !isCall && !isBuiltin {
			return
		}
	case passStructure:
		if isCall || isBuiltin || isIdent {
			return
		}
	case passIdents:
		if isIdent {
			w.checkIdent(n, id.Value)
		}
		return
	}
	w.checkNode(n)
}

// checkIdent counts a use of a known variable, or fails on an unknown
// name that is not an allowed function.
func (w *safetyWalker) checkIdent(n ast.Node, name string) {
	if _, ok := w.vars[name]; ok {
		w.used[name] = true
		w.uses[name]++
	} else if !allowedFuncs[name] {
		w.fail(n, fmt.Sprintf("unknown variable %q", name))
	}
}

// checkNode fails on a node a rule may not hold: an operator or function
// outside the allowed ones, or any other kind of node than literals,
// conditionals, operators and calls.
func (w *safetyWalker) checkNode(n ast.Node) {
	switch n := n.(type) {
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.StringNode,
		*ast.ConstantNode, *ast.ConditionalNode:
	case *ast.UnaryNode:
		switch n.Operator {
		case "-", "+", "!", "not":
		default:
			w.fail(n, fmt.Sprintf("operator %q is not allowed", n.Operator))
		}
	case *ast.BinaryNode:
		if !allowedBinary[n.Operator] {
			w.fail(n, fmt.Sprintf("operator %q is not allowed", n.Operator))
		}
		if n.Operator == "??" {
			if id, ok := n.Left.(*ast.IdentifierNode); ok {
				w.guarded[id.Value]++
			}
		}
	case *ast.BuiltinNode:
		if !allowedFuncs[n.Name] {
			w.fail(n, fmt.Sprintf("function %s is not allowed (allowed: abs, clamp, max, min)", n.Name))
		}
	case *ast.CallNode:
		id, ok := n.Callee.(*ast.IdentifierNode)
		if !ok || !allowedFuncs[id.Value] {
			name := "this call"
			if ok {
				name = "function " + id.Value
			}
			w.fail(n, name+" is not allowed (allowed: abs, clamp, max, min)")
		}
	default:
		w.fail(n, fmt.Sprintf("%s is not allowed in a rule", nodeKind(n)))
	}
}

func (w *safetyWalker) fail(n ast.Node, msg string) {
	line, col := position(w.src, n.Location().From)
	w.err = fmt.Errorf("%s (line %d, column %d)", msg, line, col)
}

// position converts a rune offset into a 1-based line and column.
func position(src string, from int) (line, col int) {
	line, col = 1, 1
	runes := 0
	for i := 0; i < len(src) && runes < from; {
		r, size := utf8.DecodeRuneInString(src[i:])
		if r == '\n' {
			line++
			col = 1
		} else {
			col++
		}
		i += size
		runes++
	}
	return line, col
}

func nodeKind(n ast.Node) string {
	switch n.(type) {
	case *ast.MemberNode:
		return "member access"
	case *ast.SliceNode:
		return "slicing"
	case *ast.ArrayNode:
		return "an array literal"
	case *ast.MapNode, *ast.PairNode:
		return "a map literal"
	case *ast.PredicateNode, *ast.PointerNode:
		return "a predicate or closure"
	case *ast.VariableDeclaratorNode:
		return "let"
	case *ast.SequenceNode:
		return "a sequence"
	case *ast.NilNode:
		return "nil"
	case *ast.BytesNode:
		return "a bytes literal"
	default:
		return fmt.Sprintf("%T", n)
	}
}

// Vars returns the names of the variables the rule references, sorted.
func (r *Rule) Vars() []string {
	out := make([]string, len(r.vars))
	for i, v := range r.vars {
		out[i] = v.name
	}
	return out
}
