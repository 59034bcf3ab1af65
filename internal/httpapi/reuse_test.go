package httpapi

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelrepo"

	"github.com/stretchr/testify/require"
)

// identityBody is a JSON infer request of model "identity" whose IN holds
// vals, rows of four.
func identityBody(vals []float32) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"inputs":[{"name":"IN","datatype":"FP32","shape":[%d,4],"data":[`, len(vals)/4)
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, v)
	}
	b.WriteString(`]}]}`)
	return []byte(b.String())
}

// echoed reads the OUT values of an identity answer.
func echoed(t *testing.T, body []byte) []float32 {
	t.Helper()
	var resp struct {
		Outputs []struct {
			Name string    `json:"name"`
			Data []float32 `json:"data"`
		} `json:"outputs"`
	}
	require.NoError(t, json.Unmarshal(body, &resp), "body: %s", body)
	require.Len(t, resp.Outputs, 1)
	return resp.Outputs[0].Data
}

func floats(n int, base float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = base + float32(i)
	}
	return v
}

// JSON requests' decoders, tensors and data buffers are reused from one
// request to the next: a request gets exactly its own data, whatever the
// previous request (larger, smaller, other values) left behind. The model
// echoes its input, so the answer aliases the reused buffer.
func TestInferReusedBuffersDoNotLeak(t *testing.T) {
	h, _ := newTestHandler(t, newFakeModels())
	for _, vals := range [][]float32{floats(16, 1), floats(4, 100), floats(8, -50), {0, 0, 0, 0}, floats(400, 7), floats(4, 3)} {
		rec := do(t, h, http.MethodPost, "/v2/models/identity/infer", identityBody(vals), nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.Equal(t, vals, echoed(t, rec.Body.Bytes()))
	}
}

// Concurrent requests each get their own buffers (run with -race: a
// buffer shared by two requests at once is a data race).
func TestInferReusedBuffersConcurrent(t *testing.T) {
	h, _ := newTestHandler(t, newFakeModels())
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				vals := floats(4*(1+(g+i)%5), float32(1000*g+i))
				rec := do(t, h, http.MethodPost, "/v2/models/identity/infer", identityBody(vals), nil)
				if rec.Code != http.StatusOK {
					t.Errorf("status %d: %s", rec.Code, rec.Body.String())
					return
				}
				if got := echoed(t, rec.Body.Bytes()); !slicesEqual(got, vals) {
					t.Errorf("goroutine %d request %d: sent %v, got back %v", g, i, vals, got)
					return
				}
			}
		})
	}
	wg.Wait()
}

func slicesEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// A request the model fails may still be in use elsewhere (a batch that
// runs on after its caller gave up), so its buffers are not reused: the
// data a failed request's model kept is intact after later requests.
func TestInferFailedRequestBuffersNotReused(t *testing.T) {
	fm := newFakeModels()
	var kept *infer.Request
	fail := true
	fm.infer = func(_ context.Context, req *infer.Request) (*infer.Response, error) {
		if fail {
			kept = req
			return nil, apierr.Errorf(apierr.KindUnavailable, modelrepo.ReasonShuttingDown, "gone")
		}
		in := req.Input("IN")
		return &infer.Response{Outputs: []infer.Tensor{{Name: "OUT", DataType: infer.FP32, Shape: in.Shape.Clone(), Data: in.Data}}}, nil
	}
	h, _ := newTestHandler(t, fm)
	first := floats(8, 1)
	rec := do(t, h, http.MethodPost, "/v2/models/identity/infer", identityBody(first), nil)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	require.NotNil(t, kept)
	want := append([]byte(nil), kept.Inputs[0].Data...)
	fail = false
	for i := range 10 {
		vals := floats(8, float32(100*(i+1)))
		rec := do(t, h, http.MethodPost, "/v2/models/identity/infer", identityBody(vals), nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.Equal(t, vals, echoed(t, rec.Body.Bytes()))
	}
	require.Equal(t, "IN", kept.Inputs[0].Name)
	require.Equal(t, want, kept.Inputs[0].Data)
	require.Equal(t, first[1], math.Float32frombits(binary.LittleEndian.Uint32(kept.Inputs[0].Data[4:])))
}
