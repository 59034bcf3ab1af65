package httpapi

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelrepo"
)

// Seed corpora live in testdata/fuzz/<Name>/: real requests (simple,
// parcel_eta at batch 2, BYTES, BOOL, nested arrays, binary bodies) plus a
// few broken ones.

// checkDecoded asserts what every decode must guarantee: failures are
// domain errors with a reason, and successes carry tensors whose data
// matches their shapes.
func checkDecoded(t *testing.T, b *inferBody, err error) {
	t.Helper()
	if err != nil {
		var ie *apierr.Error
		if !errors.As(err, &ie) || ie.Reason == "" || ie.Kind != apierr.KindInvalid && ie.Kind != apierr.KindUnsupported {
			t.Fatalf("error is not a client error with a reason: %#v", err)
		}
		return
	}
	for i := range b.req.Inputs {
		in := &b.req.Inputs[i]
		if in.Data == nil {
			if b.binarySize[i] < 0 {
				t.Fatalf("input %q has neither data nor binary_data_size", in.Name)
			}
			continue // binary data not attached (JSON-only decode)
		}
		if err := in.CheckSize(); err != nil {
			t.Fatalf("input %q: %v", in.Name, err)
		}
	}
}

func FuzzDecodeInferJSON(f *testing.F) {
	f.Add([]byte(`{"inputs":[{"name":"X","datatype":"FP32","shape":[1],"data":[1]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := decodeInferJSON(data)
		checkDecoded(t, b, err)
		if err == nil && !json.Valid(data) {
			t.Fatalf("accepted invalid JSON: %q", data)
		}
	})
}

// fuzzRawModel is the model that raw body mode (header length 0) decodes
// against in FuzzDecodeBinary.
var fuzzRawModel = &modelrepo.Metadata{
	Name:   "m",
	Inputs: []infer.TensorSpec{{Name: "IN", DataType: infer.FP32, Shape: infer.Shape{-1, -1}}},
}

func FuzzDecodeBinary(f *testing.F) {
	f.Add([]byte(`{"inputs":[{"name":"X","datatype":"INT8","shape":[2],"parameters":{"binary_data_size":2}}]}`+"\x01\x02"), 89)
	f.Fuzz(func(t *testing.T, body []byte, headerLen int) {
		if headerLen < -1 || headerLen > len(body) {
			return // the handler refuses these before decoding
		}
		var b *inferBody
		var err error
		if headerLen == 0 {
			b, err = decodeRawBody(fuzzRawModel, true, body)
		} else {
			b, err = decodeInferBody(body, headerLen)
		}
		checkDecoded(t, b, err)
		if err != nil {
			return
		}
		for _, in := range b.req.Inputs {
			if in.Data == nil {
				t.Fatalf("input %q has no data after attaching the binary part", in.Name)
			}
		}
	})
}

// TestFuzzSeedsAreRealRequests keeps the committed seeds meaningful: every
// seed not named as broken must decode.
func TestFuzzSeedsAreRealRequests(t *testing.T) {
	broken := map[string]bool{"invalid": true, "ragged": true, "size_mismatch": true}
	for _, target := range []string{"FuzzDecodeInferJSON", "FuzzDecodeBinary"} {
		files, err := filepath.Glob(filepath.Join("testdata", "fuzz", target, "*"))
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(files), 5, target)
		for _, file := range files {
			t.Run(target+"/"+filepath.Base(file), func(t *testing.T) {
				raw, err := os.ReadFile(file)
				require.NoError(t, err)
				lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
				require.Equal(t, "go test fuzz v1", lines[0])
				lit := strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")")
				body, err := strconv.Unquote(lit)
				require.NoError(t, err)
				var b *inferBody
				if target == "FuzzDecodeInferJSON" {
					b, err = decodeInferJSON([]byte(body))
				} else {
					hl, convErr := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(lines[2], "int("), ")"))
					require.NoError(t, convErr)
					if hl == 0 {
						b, err = decodeRawBody(fuzzRawModel, true, []byte(body))
					} else {
						b, err = decodeInferBody([]byte(body), hl)
					}
				}
				if broken[filepath.Base(file)] {
					require.Error(t, err)
					return
				}
				require.NoError(t, err)
				checkDecoded(t, b, nil)
			})
		}
	}
}

// A decoder from the handler's pool, which parses data into its arena
// and reuses the last request's tensors and names, decodes every body as
// a fresh decoder does, whatever the body it decoded before.
func FuzzReusedDecoder(f *testing.F) {
	f.Add([]byte(`{"inputs":[{"name":"A","datatype":"FP32","shape":[2],"data":[1.5,2]}]}`),
		[]byte(`{"id":"x","inputs":[{"name":"A","datatype":"FP32","shape":[1],"data":[3]},{"name":"B","datatype":"INT64","shape":[2],"data":[4,5]}]}`))
	f.Add(parcelETARequest(), []byte(`{"inputs":[{"name":"user_features","datatype":"BYTES","shape":[1],"data":["a"]}]}`))
	f.Fuzz(func(t *testing.T, first, second []byte) {
		var pool decoderPool
		d := pool.get()
		_, _ = d.decodeBody(first, -1)
		pool.put(d)
		d = pool.get()
		got, gotErr := d.decodeBody(second, -1)
		want, wantErr := decodeInferBody(second, -1)
		if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
			t.Fatalf("reused decoder: error %v, fresh decoder: %v", gotErr, wantErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("reused decoder decoded\n%+v\nfresh decoder\n%+v", got, want)
		}
	})
}
