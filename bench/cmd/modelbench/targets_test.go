package main

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeServer answers infer requests the way a KServe v2 server does: JSON
// for JSON requests, binary outputs when the binary extension is used.
func fakeServer(t *testing.T, status int) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path != "/v2/models/m/infer" {
			http.NotFound(w, r)
			return
		}
		if status != http.StatusOK {
			http.Error(w, `{"error":"nope"}`, status)
			return
		}
		if r.Header.Get("Inference-Header-Content-Length") == "" {
			_, _ = io.WriteString(w, `{"model_name":"m","outputs":[{"name":"z","datatype":"FP32","shape":[2,1],"data":[9,9]},`+
				`{"name":"y","datatype":"FP32","shape":[2,1],"data":[0.5,1.5]}]}`)
			return
		}
		head := `{"model_name":"m","outputs":[{"name":"z","datatype":"FP32","shape":[2,1],"parameters":{"binary_data_size":8}},` +
			`{"name":"y","datatype":"FP32","shape":[2,1],"parameters":{"binary_data_size":8}}]}`
		body := []byte(head)
		for _, v := range []float32{9, 9, 0.5, 1.5} {
			body = binary.LittleEndian.AppendUint32(body, math.Float32bits(v))
		}
		w.Header().Set("Inference-Header-Content-Length", strconv.Itoa(len(head)))
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestHTTPTargetsProbeAndDo(t *testing.T) {
	src, err := loadFeatures(writeRequest(t, twoRows))
	require.NoError(t, err)
	w, err := newWorkload("m", []string{"y", "z"}, src, 2)
	require.NoError(t, err)
	ok := fakeServer(t, http.StatusOK)
	bad := fakeServer(t, http.StatusBadRequest)

	mk := map[string]func(url string) *target{
		"json":   func(url string) *target { return jsonTarget("x", url, w, newHTTPClient(2)) },
		"binary": func(url string) *target { return binaryTarget("x", url, w, newHTTPClient(2)) },
	}
	for name, build := range mk {
		t.Run(name, func(t *testing.T) {
			tg := build(ok.URL)
			defer tg.Close()
			got, err := tg.Probe(t.Context())
			require.NoError(t, err)
			require.Equal(t, []float32{0.5, 1.5}, got, "the first requested output, found by name")
			require.NoError(t, tg.Do(t.Context()))

			tb := build(bad.URL)
			defer tb.Close()
			err = tb.Do(t.Context())
			require.True(t, errors.Is(err, errStatus), "a non-200 answer is an error: %v", err)
			_, err = tb.Probe(t.Context())
			require.Error(t, err)
		})
	}
}

func TestBinaryProbeRejectsOverrunningSizes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		head := `{"outputs":[{"name":"y","parameters":{"binary_data_size":4000}}]}`
		w.Header().Set("Inference-Header-Content-Length", strconv.Itoa(len(head)))
		_, _ = io.WriteString(w, head+"abcd")
	}))
	defer srv.Close()
	src, err := loadFeatures(writeRequest(t, twoRows))
	require.NoError(t, err)
	w, err := newWorkload("m", []string{"y"}, src, 1)
	require.NoError(t, err)
	tg := binaryTarget("x", srv.URL, w, newHTTPClient(1))
	defer tg.Close()
	_, err = tg.Probe(t.Context())
	require.ErrorContains(t, err, "overruns")
}
