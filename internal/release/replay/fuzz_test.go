package replay

import (
	"encoding/json"
	"testing"

	"github.com/sluice-ml/sluice/internal/release/record"
)

// FuzzToInferTensor feeds recorded tensors (untrusted: a recording may
// come from anywhere) to the JSON → binary conversion. A tensor it
// accepts must hold exactly the elements its shape asks for.
func FuzzToInferTensor(f *testing.F) {
	f.Add("FP32", int64(1), int64(4), []byte("[[1,2.5,-3,4e-3]]"))
	f.Add("INT64", int64(2), int64(1), []byte("[9007199254740993,-1]"))
	f.Add("BYTES", int64(1), int64(2), []byte(`["a","\u00e9"]`))
	f.Add("BOOL", int64(1), int64(1), []byte("[true]"))
	f.Add("UINT8", int64(0), int64(7), []byte("[]"))
	f.Fuzz(func(t *testing.T, datatype string, d0, d1 int64, data []byte) {
		if !json.Valid(data) {
			data = append([]byte("["), append(data, ']')...)
		}
		tn, err := toInferTensor(&record.Tensor{Name: "x", DataType: datatype, Shape: []int64{d0, d1}, Data: data})
		if err != nil {
			return
		}
		if err := tn.CheckSize(); err != nil {
			t.Fatalf("accepted tensor %s %v from %q: %v", datatype, tn.Shape, data, err)
		}
	})
}

// FuzzDecodeAnswers feeds answer bodies, as a KServe v2 HTTP server or
// an inference service could send them, to both decoders: they must not
// panic, and every output they accept stays within the element limit.
func FuzzDecodeAnswers(f *testing.F) {
	f.Add([]byte(`{"model_name":"m","outputs":[{"name":"y","datatype":"FP32","shape":[1],"data":[1.5]}]}`))
	f.Add([]byte(`{"model":"m","version":"1","outputs":{"eta":41.5,"v":[1,[2,null]]}}`))
	f.Add([]byte(`{"outputs":[{"name":"s","datatype":"BYTES","data":["x"]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		const limit = 64
		for _, a := range []record.Arm{
			func() record.Arm { a, _ := decodeV2Response(body, "m", "1", limit); return a }(),
			func() record.Arm { a, _ := decodeServiceAnswer(body, limit); return a }(),
		} {
			for name, v := range a.Outputs {
				if name == "" || len(v) > limit {
					t.Fatalf("accepted output %q with %d values", name, len(v))
				}
			}
		}
	})
}
