package transform

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
)

var (
	tF32   = feature.Type{Kind: feature.KindFloat32}
	tF64   = feature.Type{Kind: feature.KindFloat64}
	tI64   = feature.Type{Kind: feature.KindInt64}
	tI32   = feature.Type{Kind: feature.KindInt32}
	tStr   = feature.Type{Kind: feature.KindString}
	tBool  = feature.Type{Kind: feature.KindBool}
	tF32s  = feature.Type{Kind: feature.KindFloat32, List: true}
	inputs = []Input{
		{Name: "route__distance_km", Alias: "distance_km", Type: tF32},
		{Name: "route__stops", Alias: "stops", Type: tI64},
		{Name: "route__emb", Alias: "emb", Type: tF32s},
		{Name: "factor", Type: tF64},
		{Name: "label", Type: tStr},
		{Name: "urgent", Type: tBool},
	}
)

func compileOne(t *testing.T, typ feature.Type, src string) *View {
	t.Helper()
	v, errs := Compile("v", inputs, []feature.Field{{Name: "out", Type: typ}}, []string{src})
	require.Empty(t, errs)
	return v
}

func TestEval(t *testing.T) {
	row := []feature.Value{{F64: float64(float32(12.5))}, {I64: 4}, {F32s: []float32{1, 2, 3}}, {F64: 1.5}, {S: "ab"}, {Bool: true}}
	for _, tc := range []struct {
		name    string
		typ     feature.Type
		src     string
		in      func([]feature.Value)
		want    feature.Value
		outcome Outcome
	}{
		{name: "float", typ: tF64, src: "distance_km * factor", want: feature.Value{F64: 18.75}},
		{name: "full name", typ: tF64, src: "route__distance_km + 1", want: feature.Value{F64: 13.5}},
		{name: "int to float", typ: tF64, src: "stops * 2", want: feature.Value{F64: 8}},
		{name: "float32 rounds", typ: tF32, src: "factor / 3", want: feature.Value{F64: float64(float32(0.5))}},
		{name: "int", typ: tI64, src: "stops % 3", want: feature.Value{I64: 1}},
		{name: "bool", typ: tBool, src: "urgent && distance_km > 10.0", want: feature.Value{Bool: true}},
		{name: "string", typ: tStr, src: "upper(label) + '!'", want: feature.Value{S: "AB!"}},
		{name: "list", typ: tF64, src: "sum(emb) / len(emb)", want: feature.Value{F64: 2}},
		{name: "our math", typ: tF64, src: "sqrt(stops) + log(1)", want: feature.Value{F64: 2}},
		{name: "ternary", typ: tF64, src: "stops > 0 ? distance_km / stops : 0.0", want: feature.Value{F64: 3.125}},
		{name: "float division by zero", typ: tF64, src: "factor / (stops - 4)", outcome: NotFinite},
		{name: "nan", typ: tF64, src: "factor", in: func(r []feature.Value) { r[3].F64 = math.NaN() }, outcome: NotFinite},
		{name: "integer modulo by zero", typ: tI64, src: "stops % (stops - 4)", outcome: Failed},
		{name: "int32 overflow", typ: tI32, src: "stops * 1000000000", outcome: Failed},
		{name: "float32 overflow", typ: tF32, src: "factor * 1e300", outcome: Failed},
		{name: "missing input", typ: tF64, src: "factor * 2", in: func(r []feature.Value) { r[3] = feature.Value{Null: true} }, outcome: MissingInput},
		{name: "unused input missing", typ: tF64, src: "stops * 2", in: func(r []feature.Value) { r[3] = feature.Value{Null: true} }, want: feature.Value{F64: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := compileOne(t, tc.typ, tc.src)
			in := append([]feature.Value(nil), row...)
			if tc.in != nil {
				tc.in(in)
			}
			out := make([]feature.Value, 1)
			oc := make([]Outcome, 1)
			v.Eval(in, nil, out, oc)
			require.Equal(t, tc.outcome, oc[0], tc.outcome.Reason())
			if tc.outcome != OK {
				require.True(t, out[0].Null)
				return
			}
			require.Equal(t, tc.want, out[0])
		})
	}
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		typ          feature.Type
		src, want    string
		line, column int
	}{
		{tF64, "distance * 2", `unknown name "distance"`, 1, 1},
		{tF64, "factor *\n  nope", `unknown name "nope"`, 2, 3},
		{tI64, "factor * 2", "the expression is a float, the feature's dtype is Int64", 0, 0},
		{tF64, "label", "the expression is a string, the feature's dtype is Float64", 0, 0},
		{tF64, "now()", `function "now" is not allowed`, 1, 1},
		{tF64, "filter(emb, # > 1)", "is not allowed", 1, 13},
		{tF64, "1..100", `operator ".." is not allowed`, 1, 2},
		{tF64, "label matches 'a+'", `operator "matches" is not allowed`, 1, 7},
		{tF64, "{'a': 1}.a", "is not allowed in a feature expression", 1, 1},
		{tF64, "", "expression is empty", 0, 0},
		{tF64, "factor +", "unexpected token EOF", 1, 8},
		{feature.Type{Kind: feature.KindBytes}, "label", "dtype Bytes cannot be computed", 0, 0},
	} {
		t.Run(tc.src, func(t *testing.T) {
			_, errs := Compile("v", inputs, []feature.Field{{Name: "out", Type: tc.typ}}, []string{tc.src})
			require.Len(t, errs, 1)
			require.Contains(t, errs[0].Msg, tc.want)
			require.Equal(t, tc.line, errs[0].Line, errs[0].Error())
			if tc.line > 0 {
				require.Equal(t, tc.column, errs[0].Column, errs[0].Error())
			}
		})
	}
}

// BenchmarkEval is the per-row cost of one expression over two feature
// inputs and a request field.
func BenchmarkEval(b *testing.B) {
	v, errs := Compile("v", inputs, []feature.Field{{Name: "out", Type: tF64}}, []string{"stops > 0 ? distance_km * factor / stops : 0.0"})
	require.Empty(b, errs)
	in := []feature.Value{{F64: 12.5}, {I64: 4}, {F32s: []float32{1}}, {F64: 1.5}, {S: "x"}, {Bool: true}}
	out := make([]feature.Value, 1)
	oc := make([]Outcome, 1)
	b.ReportAllocs()
	for b.Loop() {
		v.Eval(in, nil, out, oc)
	}
}
