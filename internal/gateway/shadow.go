package gateway

import (
	"strings"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/gateway/release/shadowhook"
	"github.com/sluice-ml/sluice/internal/gateway/route"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/release/record"
)

// Recorder takes finished records (record.Writer): Offer never blocks.
// Run does the recorder's background work until Close (Gateway.RunBackground
// starts it; a recorder never run does that work in Close).
type Recorder = shadowhook.Recorder

// MirrorBuckets is the resolution of the shadow share: a request is
// mirrored when Hash(key) % MirrorBuckets < percent × MirrorBuckets / 100.
const MirrorBuckets = route.ShareBuckets

// Mirrored reports whether a request whose shadow key is key falls in the
// mirrored share percent (route.InShare). It depends only on key and
// percent, so every replica, and every replay of a recording, mirrors the
// same requests.
func Mirrored(key string, percent float64) bool { return route.InShare(key, percent) }

// recordEncoder writes a record's tensors as the answers write them
// (shadowhook.Encoder).
type recordEncoder struct{}

func (recordEncoder) Tensors(ts []infer.Tensor) []record.Tensor      { return recordTensors(ts) }
func (recordEncoder) Outputs(ts []infer.Tensor) map[string][]float64 { return outputMap(ts) }

// requestMap is the request body as parsed.
func (s *service) requestMap(vals []value) map[string]any {
	out := make(map[string]any, len(vals))
	for i := range vals {
		v := &vals[i]
		if !v.set {
			continue
		}
		switch s.fields[i].kind {
		case kindInt64:
			out[s.fields[i].name] = v.i
		case kindBool:
			out[s.fields[i].name] = v.b
		case kindString:
			out[s.fields[i].name] = v.s
		case kindFloat32:
			// The float64 nearest the float32's shortest decimal: 0.4
			// is recorded as 0.4, not 0.4000000059604645.
			out[s.fields[i].name] = shortest(v.f, infer.FP32)
		default:
			out[s.fields[i].name] = v.f
		}
	}
	return out
}

// featureMap is the features read, "view__feature" → number, list or nil.
func (s *service) featureMap(feats *serving.Response) map[string]any {
	if feats == nil {
		return nil
	}
	out := make(map[string]any, len(s.features))
	for col, ref := range s.features {
		name := strings.Replace(ref, ":", "__", 1)
		fv, _ := featureCell(feats, col)
		if fv == nil {
			out[name] = nil
			continue
		}
		t := s.featureTypes[col]
		switch {
		case !t.List && (t.Kind == feature.KindInt32 || t.Kind == feature.KindInt64):
			out[name] = fv.I64
		case !t.List && t.Kind == feature.KindBool:
			out[name] = fv.Bool
		case !t.List && t.Kind == feature.KindString:
			out[name] = fv.S
		case !t.List && t.Kind == feature.KindFloat32:
			out[name] = shortest(fv.F64, infer.FP32)
		case !t.List:
			out[name] = fv.F64
		case len(fv.F32s) > 0:
			l := make([]float64, len(fv.F32s))
			for i, x := range fv.F32s {
				l[i] = shortest(float64(x), infer.FP32)
			}
			out[name] = l
		case len(fv.F64s) > 0:
			out[name] = fv.F64s
		default:
			out[name] = fv.I64s
		}
	}
	return out
}

// recordTensors writes the model inputs in KServe v2 JSON tensor form.
func recordTensors(ts []infer.Tensor) []record.Tensor {
	out := make([]record.Tensor, len(ts))
	for i := range ts {
		t := &ts[i]
		out[i] = record.Tensor{Name: t.Name, DataType: t.DataType.String(), Shape: append([]int64(nil), t.Shape...), Data: tensorJSON(t)}
	}
	return out
}

// tensorJSON is a numeric tensor's data as a flat JSON array.
func tensorJSON(t *infer.Tensor) []byte {
	size := t.DataType.Size()
	if size == 0 {
		return []byte("[]")
	}
	n := len(t.Data) / size
	b := make([]byte, 0, n*10+2)
	b = append(b, '[')
	for j := range n {
		if j > 0 {
			b = append(b, ',')
		}
		el := infer.Tensor{DataType: t.DataType, Data: t.Data[j*size : (j+1)*size]}
		x, _ := scalar(&el)
		b = appendFloat(b, x, t.DataType)
	}
	return append(b, ']')
}

// outputMap is a response's numeric outputs as flat float64 lists.
func outputMap(ts []infer.Tensor) map[string][]float64 {
	out := make(map[string][]float64, len(ts))
	for i := range ts {
		if ov, ok := tensorValues(ts[i].Name, &ts[i]); ok {
			for j, x := range ov.Values {
				ov.Values[j] = shortest(x, ts[i].DataType)
			}
			out[ts[i].Name] = ov.Values
		}
	}
	return out
}
