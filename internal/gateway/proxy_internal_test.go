package gateway

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUsesSharedMemory: an inference body that names a shared-memory
// region is found however it is written (escaped, duplicate keys,
// compressed, the binary extension's JSON part), and tensor data that
// merely holds the words is not.
func TestUsesSharedMemory(t *testing.T) {
	gz := func(s string) []byte {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, _ = w.Write([]byte(s))
		_ = w.Close()
		return b.Bytes()
	}
	const shm = `{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"parameters":{"shared_memory_region":"r","shared_memory_byte_size":4}}]}`
	binary := []byte(`{"inputs":[{"name":"x","datatype":"BYTES","shape":[1],"parameters":{"binary_data_size":24}}]}`)
	for _, tc := range []struct {
		name string
		body []byte
		hdr  map[string]string
		want bool
	}{
		{"plain", []byte(`{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}]}`), nil, false},
		{"region", []byte(shm), nil, true},
		{"escaped", []byte(`{"inputs":[{"parameters":{"shared\u005fmemory_region":"r"}}]}`), nil, true},
		{"duplicate key", []byte(`{"outputs":[{"parameters":{"shared_memory_region":"r"},"parameters":{}}]}`), nil, true},
		{"escapes without a region", []byte(`{"inputs":[{"datatype":"BYTES","data":["\u003cb\u003e"]}]}`), nil, false},
		{"gzip", gz(shm), map[string]string{"Content-Encoding": "gzip"}, true},
		{
			"binary tail holds the words", append(binary, []byte(`"shared_memory_region"`)...),
			map[string]string{"Inference-Header-Content-Length": strconv.Itoa(len(binary))},
			false,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.hdr {
				h.Set(k, v)
			}
			got, err := usesSharedMemory(tc.body, h)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	uses, err := usesSharedMemory([]byte(`{"inputs":[{"parameters":{"shared_memory_`), http.Header{})
	require.True(t, uses || err != nil, "a truncated header that may name a region is refused, not guessed")
}

func FuzzUsesSharedMemory(f *testing.F) {
	f.Add([]byte(`{"inputs":[{"parameters":{"shared_memory_region":"r"}}]}`), "")
	f.Add([]byte(`{"inputs":[{"parameters":{"shared\u005fmemory_region":"r"}}]}`), "")
	f.Add([]byte(`{"a":"\u0073hared_memory_region"}`), "12")
	f.Fuzz(func(t *testing.T, body []byte, headerLen string) {
		h := http.Header{}
		if headerLen != "" {
			h.Set("Inference-Header-Content-Length", headerLen)
		}
		uses, err := usesSharedMemory(body, h)
		// JSON whose decoded form has the parameter as a key anywhere is
		// never let through.
		var v any
		if err == nil && !uses && json.Unmarshal(jsonPart(body, headerLen), &v) == nil && hasKey(v, "shared_memory_region") {
			t.Fatalf("%q passed", body)
		}
	})
}

// hasKey reports whether a decoded JSON value has key anywhere.
func hasKey(v any, key string) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k == key || hasKey(e, key) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasKey(e, key) {
				return true
			}
		}
	}
	return false
}

// jsonPart is the part of body usesSharedMemory reads.
func jsonPart(body []byte, headerLen string) []byte {
	if n, err := strconv.Atoi(headerLen); err == nil && n >= 0 && n <= len(body) {
		return body[:n]
	}
	return body
}
