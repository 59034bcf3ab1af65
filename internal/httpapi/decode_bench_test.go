package httpapi

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-ml/sluice/internal/infer"
)

// parcelETARequest is the parcel_eta model's request at batch 1: three FP32
// tensors of 128, 64 and 32 values, written the way Python clients write
// float32 data (numpy's tolist gives float64 reprs of about 17 digits).
func parcelETARequest() []byte {
	rng := rand.New(rand.NewPCG(5, 6))
	var b strings.Builder
	b.WriteString(`{"id":"bench","inputs":[`)
	for i, in := range []struct {
		name string
		n    int
	}{{"user_features", 128}, {"package_features", 64}, {"route_features", 32}} {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"name":"` + in.name + `","shape":[1,` + strconv.Itoa(in.n) + `],"datatype":"FP32","data":[`)
		for j := range in.n {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.FormatFloat(float64(float32(rng.NormFloat64())), 'g', -1, 64))
		}
		b.WriteString("]}")
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// BenchmarkDecodeInferJSON compares the purpose-built decoder with
// encoding/json on the same body. The decoder's result is ready for a
// backend (wire-layout bytes); encoding/json's still needs converting.
func BenchmarkDecodeInferJSON(b *testing.B) {
	body := parcelETARequest()
	b.Run("sluice", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			r, err := decodeInferJSON(body)
			if err != nil || len(r.req.Inputs) != 3 {
				b.Fatal(err)
			}
		}
	})
	// The body the client benchmarks send (bench/clients.sh): short
	// decimals, batch 2.
	example, err := os.ReadFile("../../examples/requests/parcel_eta.json")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("sluice_example", func(b *testing.B) {
		b.SetBytes(int64(len(example)))
		b.ReportAllocs()
		for b.Loop() {
			r, err := decodeInferJSON(example)
			if err != nil || len(r.req.Inputs) != 3 {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json_map", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var m map[string]any
			if err := json.Unmarshal(body, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json_struct", func(b *testing.B) {
		type input struct {
			Name       string         `json:"name"`
			Shape      []int64        `json:"shape"`
			Datatype   string         `json:"datatype"`
			Parameters map[string]any `json:"parameters"`
			Data       []float32      `json:"data"`
		}
		type request struct {
			ID         string         `json:"id"`
			Parameters map[string]any `json:"parameters"`
			Inputs     []input        `json:"inputs"`
		}
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var r request
			if err := json.Unmarshal(body, &r); err != nil || len(r.Inputs) != 3 {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEncodeInferResponse encodes parcel_eta's response at batch 128.
func BenchmarkEncodeInferResponse(b *testing.B) {
	resp := &infer.Response{ID: "bench", Model: "parcel_eta", Version: "1", Outputs: []infer.Tensor{
		{Name: "eta_prediction", DataType: infer.FP32, Shape: infer.Shape{128, 1}, Data: make([]byte, 512)},
		{Name: "confidence_score", DataType: infer.FP32, Shape: infer.Shape{128, 1}, Data: make([]byte, 512)},
	}}
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range resp.Outputs[0].Data {
		resp.Outputs[0].Data[i] = byte(rng.IntN(64)) // finite values
		resp.Outputs[1].Data[i] = byte(rng.IntN(64))
	}
	buf := make([]byte, 0, 16<<10)
	isBinary := []bool{false, false}
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = appendInferResponse(buf[:0], resp, isBinary); err != nil {
			b.Fatal(err)
		}
	}
}
