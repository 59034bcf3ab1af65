//go:build !race

// The race detector allocates on its own, so allocation counts mean
// nothing under it: this file builds only without -race, and make test
// runs it in a separate pass without the race detector.

package httpapi

import (
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
