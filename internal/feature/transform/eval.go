package transform

import (
	"math"

	"github.com/sluice-ml/sluice/internal/feature"
)

// Outcome says how computing one value went.
type Outcome uint8

// The outcomes. Only OK carries a value; the others leave it null.
const (
	OK           Outcome = iota
	MissingInput         // an input the expression reads is null or absent, so it was not run
	Failed               // the expression failed on these inputs (integer division by zero, out of the dtype's range)
	NotFinite            // the result is NaN or ±Inf (e.g. a float division by zero)
)

var outcomeReasons = [...]string{OK: "", MissingInput: "missing_input", Failed: "evaluation_failed", NotFinite: "not_finite"}

// Reason is the outcome's reason code ("" for OK).
func (o Outcome) Reason() string {
	if int(o) < len(outcomeReasons) {
		return outcomeReasons[o]
	}
	return "evaluation_failed"
}

// Eval computes the outputs of one row that want marks (all when want is
// nil). in holds the inputs' values in
// the order of v.Inputs; a Null value marks an absent input (a missing
// request field, a feature that was not found). out and outcomes (one
// per output) receive the results; an output whose outcome is not OK is
// Null, one that is not wanted is left as it was. Serving and historical retrieval both call Eval, so training
// rows and served values are computed by the same code.
func (v *View) Eval(in []feature.Value, want []bool, out []feature.Value, outcomes []Outcome) {
	e := v.envs.Get().(*evalEnv)
	defer v.envs.Put(e)
	for oi := range v.Outputs {
		if want != nil && !want[oi] {
			continue
		}
		o := &v.Outputs[oi]
		out[oi], outcomes[oi] = v.evalOne(e, o, in) //nolint:gosec // G602: out and outcomes hold one entry per output, as Eval documents
	}
}

func (v *View) evalOne(e *evalEnv, o *Output, in []feature.Value) (feature.Value, Outcome) {
	null := feature.Value{Null: true}
	for _, u := range o.Uses {
		if in[u].Null {
			return null, MissingInput
		}
	}
	for _, u := range o.Uses {
		x := goValue(v.Inputs[u].Type, &in[u])
		e.m[v.Inputs[u].Name] = x
		if a := v.Inputs[u].Alias; a != "" {
			e.m[a] = x
		}
	}
	res, err := e.vm.Run(o.prog, e.m)
	if err != nil {
		return null, Failed
	}
	return fromResult(o.Field.Type, res)
}

// goValue converts a feature value to its expression type (goType).
func goValue(t feature.Type, v *feature.Value) any {
	switch t.Kind {
	case feature.KindInt32, feature.KindInt64, feature.KindUnixTimestamp:
		if t.List {
			out := make([]int, len(v.I64s))
			for i, x := range v.I64s {
				out[i] = int(x)
			}
			return out
		}
		return int(v.I64)
	case feature.KindFloat32:
		if t.List {
			out := make([]float64, len(v.F32s))
			for i, x := range v.F32s {
				out[i] = float64(x)
			}
			return out
		}
		return v.F64
	case feature.KindFloat64:
		if t.List {
			return v.F64s
		}
		return v.F64
	case feature.KindString:
		if t.List {
			return v.Ss
		}
		return v.S
	case feature.KindBool:
		if t.List {
			return v.Bools
		}
		return v.Bool
	default:
		return nil
	}
}

// fromResult converts an expression's result to a value of type t.
func fromResult(t feature.Type, res any) (feature.Value, Outcome) {
	null := feature.Value{Null: true}
	switch t.Kind {
	case feature.KindFloat32, feature.KindFloat64:
		var x float64
		switch r := res.(type) {
		case float64:
			x = r
		case int:
			x = float64(r)
		default:
			return null, Failed
		}
		if t.Kind == feature.KindFloat32 {
			if math.Abs(x) > math.MaxFloat32 && !math.IsInf(x, 0) && !math.IsNaN(x) {
				return null, Failed
			}
			x = float64(float32(x))
		}
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return null, NotFinite
		}
		return feature.Value{F64: x}, OK
	case feature.KindInt32, feature.KindInt64:
		r, ok := res.(int)
		if !ok {
			return null, Failed
		}
		if t.Kind == feature.KindInt32 && (r < math.MinInt32 || r > math.MaxInt32) {
			return null, Failed
		}
		return feature.Value{I64: int64(r)}, OK
	case feature.KindString:
		r, ok := res.(string)
		if !ok {
			return null, Failed
		}
		return feature.Value{S: r}, OK
	case feature.KindBool:
		r, ok := res.(bool)
		if !ok {
			return null, Failed
		}
		return feature.Value{Bool: r}, OK
	default:
		return null, Failed
	}
}
