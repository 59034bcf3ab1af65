package servingapi

import (
	"errors"
	"fmt"
	"math"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/pb/feastpb"
)

// fromProtoRequest converts the request data columns of a gRPC request
// (those p reads, from its entities or its request_context) into out.
func fromProtoRequest(p serving.Plan, cols map[string]*feastpb.RepeatedValue, maxRows int, out map[string][]feature.Value) error {
	for name, col := range cols {
		t, ok := p.RequestField(name)
		if !ok {
			continue
		}
		if _, set := out[name]; set && out[name] != nil {
			continue // given in entities too: entities win, as for JSON
		}
		vals := col.GetVal()
		if len(vals) > maxRows {
			return apierr.Errorf(apierr.KindResourceExhausted, serving.ReasonTooManyEntityRows,
				"request data '%s' has %d values: a request may read at most %d entity rows; split it into several requests", name, len(vals), maxRows)
		}
		conv := make([]feature.Value, len(vals))
		for i, v := range vals {
			var err error
			if conv[i], err = fromProtoValue(v, t); err != nil {
				return invalidf(serving.ReasonInvalidRequestValue, "request data '%s' value %d: %v", name, i, err)
			}
		}
		out[name] = conv
	}
	return nil
}

// fromProtoValue converts one request data value to type t. Numbers
// convert between Feast's numeric fields; null_val and an unset value
// are null.
func fromProtoValue(v *feastpb.Value, t feature.Type) (feature.Value, error) {
	var out feature.Value
	if t.List {
		return out, errors.New("list request data is not supported over gRPC")
	}
	num, isNum := 0.0, false
	isInt := false
	switch x := v.GetVal().(type) {
	case nil, *feastpb.Value_NullVal:
		return feature.Value{Null: true}, nil
	case *feastpb.Value_Int32Val:
		num, isNum, isInt = float64(x.Int32Val), true, true
		out.I64 = int64(x.Int32Val)
	case *feastpb.Value_Int64Val:
		num, isNum, isInt = float64(x.Int64Val), true, true
		out.I64 = x.Int64Val
	case *feastpb.Value_FloatVal:
		num, isNum = float64(x.FloatVal), true
	case *feastpb.Value_DoubleVal:
		num, isNum = x.DoubleVal, true
	case *feastpb.Value_StringVal:
		if t.Kind == feature.KindString {
			return feature.Value{S: x.StringVal}, nil
		}
	case *feastpb.Value_BoolVal:
		if t.Kind == feature.KindBool {
			return feature.Value{Bool: x.BoolVal}, nil
		}
	case *feastpb.Value_BytesVal:
		if t.Kind == feature.KindBytes {
			return feature.Value{B: x.BytesVal}, nil
		}
	}
	switch {
	case isNum && (t.Kind == feature.KindFloat64 || t.Kind == feature.KindFloat32):
		if t.Kind == feature.KindFloat32 {
			num = float64(float32(num))
		}
		return feature.Value{F64: num}, nil
	case isInt && t.Kind == feature.KindInt64:
		return out, nil
	case isInt && t.Kind == feature.KindInt32:
		if out.I64 < math.MinInt32 || out.I64 > math.MaxInt32 {
			return out, fmt.Errorf("%d is out of Int32's range", out.I64)
		}
		return out, nil
	}
	return out, fmt.Errorf("want a %s value, got %s", t, valueKind(v))
}
