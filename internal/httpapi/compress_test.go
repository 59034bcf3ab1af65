package httpapi

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"io"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// Triton's HTTP endpoint compresses inference responses when the client
// accepts it (tritonclient.http response_compression_algorithm "gzip" or
// "deflate"); the binary header length stays the uncompressed JSON's.
func TestInferResponseCompression(t *testing.T) {
	h, _ := newTestHandler(t, newFakeModels())
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
