package fallback

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

var testVars = map[string]VarType{
	"base_eta":           Float,
	"route_delay_factor": Float,
	"distance":           Float,
	"stops":              Int,
	"zone":               String,
	"rush_hour":          Bool,
}

func testValues() map[string]any {
	return map[string]any{
		"base_eta": 12.5, "route_delay_factor": 0.5, "distance": 8.0,
		"stops": 3, "zone": "north", "rush_hour": true,
	}
}

func TestCompileRuleErrors(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string // substrings of the error
	}{
		{"unknown variable", "base_eta + speed", []string{`unknown variable "speed"`, "line 1, column 12"}},
		{"unknown variable on line 2", "base_eta +\n  speed", []string{`unknown variable "speed"`, "line 2, column 3"}},
		{"type mismatch", "base_eta + zone", []string{"mismatched types float64 and string", "(1:10)"}},
		{"string result", "zone", []string{"result is string, want a number"}},
		{"bool result", "distance > 3", []string{"result is bool, want a number"}},
		{"disallowed builtin", "len(zone) + base_eta", []string{"function len is not allowed", "column 1"}},
		{"disallowed function", "sqrt(distance)", []string{"function sqrt is not allowed"}},
		{"now", "now()", []string{"function now is not allowed"}},
		{"range", "sum(1..1000000000)", []string{"function sum is not allowed"}},
		{"range operator", "1..10", []string{`operator ".." is not allowed`, "column 2"}},
		{"matches", `zone matches "n.*" ? 1 : 2`, []string{`operator "matches" is not allowed`}},
		{"member access", "zone.x", []string{"member access is not allowed", "column 6"}},
		{"env access", "$env.base_eta", []string{"member access is not allowed"}},
		{"array", "[1, 2]", []string{"an array literal is not allowed"}},
		{"let", "let x = 1; x", []string{"let is not allowed"}},
		{"syntax", "base_eta +", []string{"compile rule:", "unexpected token"}},
		{"wrong clamp arity", "clamp(distance, 1)", []string{"not enough arguments"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CompileRule(tt.src, testVars)
			require.Error(t, err)
			for _, w := range tt.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestCompileRuleBadDeclaration(t *testing.T) {
	_, err := CompileRule("x", map[string]VarType{"x": VarType(42)})
	require.ErrorContains(t, err, `variable "x" has unknown type`)
}

func TestRuleEval(t *testing.T) {
	tests := []struct {
		name, src string
		want      float64
	}{
		{"issue example", "base_eta + route_delay_factor * distance", 16.5},
		{"int result converted", "stops * 2", 6},
		{"mixed int and float", "base_eta + stops", 15.5},
		{"conditional on bool", "rush_hour ? base_eta * 1.2 : base_eta", 15},
		{"conditional on string", `zone == "north" ? 1 : 2`, 1},
		{"string op", `zone startsWith "no" ? 1 : 0`, 1},
		{"min", "min(distance, 5)", 5},
		{"max", "max(stops, distance)", 8},
		{"abs", "abs(-distance)", 8},
		{"clamp above", "clamp(distance, 0, 5)", 5},
		{"clamp below", "clamp(-distance, 0, 5)", 0},
		{"clamp ints", "clamp(stops, 4, 10)", 4},
		{"power", "2 ** 3", 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := CompileRule(tt.src, testVars)
			require.NoError(t, err)
			got, err := r.Eval(testValues())
			require.NoError(t, err)
			require.InDelta(t, tt.want, got, 1e-9)
			require.Equal(t, tt.src, r.Source())
		})
	}
}

func TestRuleEvalErrors(t *testing.T) {
	r, err := CompileRule("base_eta + route_delay_factor * distance", testVars)
	require.NoError(t, err)

	v := testValues()
	delete(v, "distance")
	_, err = r.Eval(v)
	require.ErrorIs(t, err, ErrEval)
	require.ErrorContains(t, err, `variable "distance" is missing`)

	v = testValues()
	v["distance"] = "far"
	_, err = r.Eval(v)
	require.ErrorIs(t, err, ErrEval)
	require.ErrorContains(t, err, `variable "distance" is string, want float`)

	div, err := CompileRule("base_eta / (distance - 8)", testVars)
	require.NoError(t, err)
	_, err = div.Eval(testValues())
	require.ErrorIs(t, err, ErrEval)
	require.ErrorContains(t, err, "not a finite number")

	bad, err := CompileRule("clamp(distance, 5, 1)", testVars)
	require.NoError(t, err)
	_, err = bad.Eval(testValues())
	require.ErrorIs(t, err, ErrEval)
	require.ErrorContains(t, err, "lower bound 5 is above upper bound 1")
}

func TestRuleEvalConcurrent(t *testing.T) {
	r, err := CompileRule("base_eta + route_delay_factor * distance", testVars)
	require.NoError(t, err)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			for range 200 {
				got, err := r.Eval(testValues())
				if err == nil && got != 16.5 {
					err = errors.New("wrong result")
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		require.NoError(t, <-errs)
	}
}

func FuzzCompileRule(f *testing.F) {
	for _, s := range []string{
		"base_eta + route_delay_factor * distance", "clamp(distance, 0, 5)", "stops * 2",
		"rush_hour ? 1 : 2", "1..10", "len(zone)", "zone.x", "$env", "let x = 1; x",
		`zone matches "a"`, "[1,2][0]", "{a: 1}.a", "map([1], #)", "base_eta +", "\x00", "(((",
		"abs(-distance) ** 2 % 3", "min(1, 2, 3)", "max()", "clamp()",
		"base_eta + (distance ?? 0)", "distance ?? stops ?? 1", "(zone ?? 1) + 2", "nil ?? 1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		r, err := CompileRule(src, testVars)
		if err != nil {
			return
		}
		// A rule that compiled must evaluate without panicking, with
		// every variable and with none (what ?? lets be absent is nil).
		_, _ = r.Eval(testValues())
		_, _ = r.Eval(map[string]any{})
	})
}

func BenchmarkEval(b *testing.B) {
	r, err := CompileRule("base_eta + route_delay_factor * distance", testVars)
	require.NoError(b, err)
	v := testValues()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Eval(v); err != nil {
			b.Fatal(err)
		}
	}
}
