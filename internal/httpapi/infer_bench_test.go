package httpapi

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/sluice-ml/sluice/internal/infer"
)

// BenchmarkHandleInferJSON is one KServe v2 JSON infer of parcel_eta's
// body through the whole handler, against a model that answers with two
// FP32 [1,1] outputs, as parcel_eta does at batch 1.
func BenchmarkHandleInferJSON(b *testing.B) {
	fm := newFakeModels()
	fm.infer = func(_ context.Context, req *infer.Request) (*infer.Response, error) {
		return &infer.Response{Model: req.Model, Outputs: []infer.Tensor{
			{Name: "eta_prediction", DataType: infer.FP32, Shape: infer.Shape{1, 1}, Data: []byte{0, 0, 128, 63}},
			{Name: "confidence_score", DataType: infer.FP32, Shape: infer.Shape{1, 1}, Data: []byte{0, 0, 0, 63}},
		}}, nil
	}
	h := New(fm, Options{}, nil, nil)
	body := parcelETARequest()
	w := &discardWriter{hdr: http.Header{}}
	req, err := http.NewRequest(http.MethodPost, "/v2/models/parcel_eta/infer", nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	rd := bytes.NewReader(body)
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(body)
		req.Body = readCloser{rd}
		req.ContentLength = int64(len(body))
		clear(w.hdr)
		h.ServeHTTP(w, req)
	}
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// discardWriter is an http.ResponseWriter that keeps only its header map
// and the byte count.
type discardWriter struct {
	hdr http.Header
	n   int
}

func (d *discardWriter) Header() http.Header { return d.hdr }
func (d *discardWriter) WriteHeader(int)     {}
func (d *discardWriter) Write(p []byte) (int, error) {
	d.n = len(p)
	return len(p), nil
}
