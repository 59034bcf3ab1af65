package httpapi

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"io"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/admission"
)

// Triton's HTTP endpoint compresses inference responses when the client
// accepts it (tritonclient.http response_compression_algorithm "gzip" or
// "deflate"); the binary header length stays the uncompressed JSON's.
func TestInferResponseCompression(t *testing.T) {
	// Every response compressed, however small: the encodings themselves.
	h := New(newFakeModels(), Options{MaxBodyBytes: 1 << 16, CompressMinBytes: 1}, nil, nil)
	body := []byte(simpleRequest(seq(0, 16), seq(0, 16)))
	plain := do(t, h, "POST", "/v2/models/simple/infer", body, nil)
	require.Equal(t, 200, plain.Code)
	require.Empty(t, plain.Header().Get("Content-Encoding"))

	for _, tc := range []struct{ accept, enc string }{
		{"gzip", "gzip"},
		{"deflate", "deflate"},
		{"br;q=1.0, deflate;q=0.5, gzip;q=0.8", "gzip"},
		{"gzip;q=0, deflate", "deflate"},
	} {
		rec := do(t, h, "POST", "/v2/models/simple/infer", body, map[string]string{"Accept-Encoding": tc.accept})
		require.Equal(t, 200, rec.Code)
		require.Equal(t, tc.enc, rec.Header().Get("Content-Encoding"), tc.accept)
		require.Equal(t, strconv.Itoa(rec.Body.Len()), rec.Header().Get("Content-Length"))
		var r io.Reader
		var err error
		if tc.enc == "gzip" {
			r, err = gzip.NewReader(bytes.NewReader(rec.Body.Bytes()))
		} else {
			r, err = zlib.NewReader(bytes.NewReader(rec.Body.Bytes()))
		}
		require.NoError(t, err)
		got, err := io.ReadAll(r)
		require.NoError(t, err)
		require.Equal(t, plain.Body.Bytes(), got, tc.accept)
	}
	rec := do(t, h, "POST", "/v2/models/simple/infer", body, map[string]string{"Accept-Encoding": "br"})
	require.Empty(t, rec.Header().Get("Content-Encoding"), "an encoding Sluice does not offer: plain")

	// Binary outputs are compressed with the JSON; the header length is the
	// uncompressed JSON's.
	bin := []byte(`{"inputs":[{"name":"IN","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}],"parameters":{"binary_data_output":true}}`)
	plainBin := do(t, h, "POST", "/v2/models/identity/infer", bin, nil)
	rec = do(t, h, "POST", "/v2/models/identity/infer", bin, map[string]string{"Accept-Encoding": "gzip"})
	require.Equal(t, plainBin.Header().Get(headerLength), rec.Header().Get(headerLength))
	zr, err := gzip.NewReader(bytes.NewReader(rec.Body.Bytes()))
	require.NoError(t, err)
	got, err := io.ReadAll(zr)
	require.NoError(t, err)
	require.Equal(t, plainBin.Body.Bytes(), got)
}

// Responses under CompressMinBytes go out uncompressed even to a client
// that accepts gzip (Go's default transport always does): compressing
// parcel_eta's 214-byte answer made every such client's request cost 8×
// the CPU (issue 23). Larger ones are compressed.
func TestInferResponseCompressionMinSize(t *testing.T) {
	h, _ := newTestHandler(t, newFakeModels()) // the default minimum, 1 KiB
	gz := map[string]string{"Accept-Encoding": "gzip"}
	small := do(t, h, "POST", "/v2/models/simple/infer", []byte(simpleRequest(seq(0, 16), seq(0, 16))), gz)
	require.Equal(t, 200, small.Code)
	require.Less(t, small.Body.Len(), 1024)
	require.Empty(t, small.Header().Get("Content-Encoding"), "a response under 1 KiB is not compressed")
	require.Equal(t, strconv.Itoa(small.Body.Len()), small.Header().Get("Content-Length"))

	large := identityRequest(64) // 64×4 FP32 values: a few KiB of JSON
	plain := do(t, h, "POST", "/v2/models/identity/infer", large, nil)
	require.Equal(t, 200, plain.Code)
	require.Greater(t, plain.Body.Len(), 1024)
	for _, enc := range []string{"gzip", "deflate"} {
		rec := do(t, h, "POST", "/v2/models/identity/infer", large, map[string]string{"Accept-Encoding": enc})
		require.Equal(t, 200, rec.Code)
		require.Equal(t, enc, rec.Header().Get("Content-Encoding"))
		require.Less(t, rec.Body.Len(), plain.Body.Len())
		require.Equal(t, plain.Body.Bytes(), inflate(t, enc, rec.Body.Bytes()))
	}

	// The minimum is the server's setting: -1 never compresses.
	never := New(newFakeModels(), Options{MaxBodyBytes: 1 << 16, CompressMinBytes: -1}, nil, nil)
	rec := do(t, never, "POST", "/v2/models/identity/infer", large, gz)
	require.Empty(t, rec.Header().Get("Content-Encoding"))
	require.Equal(t, plain.Body.Bytes(), rec.Body.Bytes())
}

// identityRequest is a request for the fake identity model of n rows.
func identityRequest(n int) []byte {
	vals := make([]int, 4*n)
	for i := range vals {
		vals[i] = i * 7919
	}
	return []byte(`{"inputs":[{"name":"IN","datatype":"FP32","shape":[` + strconv.Itoa(n) + `,4],"data":` + jsonInts(vals) + `}]}`)
}

func inflate(t *testing.T, enc string, b []byte) []byte {
	t.Helper()
	var r io.Reader
	var err error
	if enc == "gzip" {
		r, err = gzip.NewReader(bytes.NewReader(b))
	} else {
		r, err = zlib.NewReader(bytes.NewReader(b))
	}
	require.NoError(t, err)
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	return got
}

// Accept-Encoding is client input: any value picks gzip, deflate or
// nothing, without panicking.
func FuzzAcceptedEncoding(f *testing.F) {
	for _, s := range []string{"gzip", "deflate", "gzip;q=0", "br;q=1.0, deflate;q=0.5", ";;,,q=", "GZIP ; q = 0.0", "*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		switch enc := acceptedEncoding(header); enc {
		case "", "gzip", "deflate":
		default:
			t.Fatalf("acceptedEncoding(%q) = %q", header, enc)
		}
	})
}

// An inference answer is charged to the process's in-flight budget before
// it is built (issue 22): one the budget cannot take now is 503
// overloaded, one it never could is 413 response_too_large, and the
// charge is given back once the answer is written.
func TestInferResponseChargedToBudget(t *testing.T) {
	budget := admission.NewBudget(64<<10, nil) // 56 KiB for large bodies and answers
	h := New(newFakeModels(), Options{MaxBodyBytes: 1 << 20, Budget: budget}, nil, nil)
	ok := do(t, h, "POST", "/v2/models/identity/infer", identityRequest(64), nil)
	require.Equal(t, 200, ok.Code)
	require.Zero(t, budget.InUse(), "released once written")

	// 4,096 values as JSON: far more than the budget could ever hold.
	rec := do(t, h, "POST", "/v2/models/identity/infer", identityRequest(1024), nil)
	requireError(t, rec, 413, "response_too_large")

	// The budget taken by others: a small answer is refused for now.
	require.True(t, budget.TryAcquire(64<<10))
	rec = do(t, h, "POST", "/v2/models/identity/infer", identityRequest(64), nil)
	requireError(t, rec, 503, "overloaded")
	budget.Release(64 << 10)
	require.Equal(t, 200, do(t, h, "POST", "/v2/models/identity/infer", identityRequest(64), nil).Code)
}
