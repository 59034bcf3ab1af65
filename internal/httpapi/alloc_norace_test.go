//go:build !race

// The race detector allocates on its own, so allocation counts mean
// nothing under it: this file builds only without -race, and make test
// runs it in a separate pass without the race detector.

package httpapi

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/sluice-ml/sluice/internal/infer"

	"github.com/stretchr/testify/require"
)

func TestDecodeInferJSONAllocations(t *testing.T) {
	body := parcelETARequest()
	allocs := testing.AllocsPerRun(50, func() {
		if _, err := decodeInferJSON(body); err != nil {
			t.Fatal(err)
		}
	})
	// The decoder, the inputs and their binary sizes, the id and three
	// names, and three data buffers.
	require.LessOrEqual(t, allocs, 10.0)
}

// A compressed response takes its compressor and its output buffer from
// pools: issue 23's regression was a new gzip writer per response (17
// allocations, about 800 KB, for a 214-byte answer), which made the
// collector and compress/flate most of the server's CPU.
func TestCompressedResponseAllocations(t *testing.T) {
	h := New(newFakeModels(), Options{}, nil, nil)
	js := parcelETARequest() // a few KiB of JSON, over the minimum
	outs := []infer.Tensor{{Data: make([]byte, 4096)}}
	bin := []bool{true}
	w := &discardWriter{hdr: http.Header{}}
	for _, enc := range []string{"gzip", "deflate"} {
		h.writeCompressed(w, enc, js, outs, bin) // fill the pools
		allocs := testing.AllocsPerRun(50, func() {
			clear(w.hdr)
			h.writeCompressed(w, enc, js, outs, bin)
		})
		// The three header values (Content-Encoding, Vary, Content-Length),
		// the length's digits and the small writer the compressor writes
		// to; a new compressor alone was 17.
		require.LessOrEqual(t, allocs, 5.0, enc)
		require.Greater(t, w.n, 0)
	}
}

// A JSON inference request through the whole handler reuses its decoder,
// its tensors, its data buffers, its input names, its body and its
// response buffer. What is left: net/http's path values and the
// Content-Length value and its digits, the status-recording writer, the
// box the body goes back to its pool in and the request's id. Before the
// decoder was pooled it was 18: also the decoder, the inputs and their
// sizes, three names, three data buffers, the body limiter, the output
// flags and the Content-Type value.
func TestHandleInferJSONAllocations(t *testing.T) {
	resp := &infer.Response{ID: "bench", Model: "parcel_eta", Version: "1", Outputs: []infer.Tensor{
		{Name: "eta_prediction", DataType: infer.FP32, Shape: infer.Shape{2, 1}, Data: make([]byte, 8)},
		{Name: "confidence_score", DataType: infer.FP32, Shape: infer.Shape{2, 1}, Data: make([]byte, 8)},
	}}
	fm := newFakeModels()
	fm.infer = func(context.Context, *infer.Request) (*infer.Response, error) { return resp, nil }
	h := New(fm, Options{}, nil, nil)
	body := parcelETARequest()
	w := &discardWriter{hdr: http.Header{}}
	req, err := http.NewRequest(http.MethodPost, "/v2/models/parcel_eta/infer", nil)
	require.NoError(t, err)
	rd := bytes.NewReader(body)
	serve := func() {
		rd.Reset(body)
		req.Body = readCloser{rd}
		req.ContentLength = int64(len(body))
		clear(w.hdr)
		h.ServeHTTP(w, req)
	}
	serve() // fill the pools
	allocs := testing.AllocsPerRun(50, serve)
	require.Greater(t, w.n, 0)
	require.LessOrEqual(t, allocs, 6.0)
}
