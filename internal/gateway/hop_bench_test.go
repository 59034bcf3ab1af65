package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/gatewaypb"
)

// The benchmarks below measure the gateway hop as bench/cmd/gatewaybench
// drives it (auth + rate limit + route, no features), without the network:
// what the gateway's own code costs per request, in time and allocations.
// Profile one with -cpuprofile or -memprofile.

// hopBody is a KServe v2 JSON body of the size of
// examples/requests/parcel_eta.json (3113 bytes).
var hopBody = func() []byte {
	b := []byte(`{"inputs":[{"name":"features","shape":[1,64],"datatype":"FP32","data":[` +
		strings.Repeat("0.123456789,", 63) + `0.5]}],"outputs":[{"name":"eta"}]}`)
	return append(b, bytes.Repeat([]byte(" "), 3113-len(b))...)
}()

// benchWriter is a reusable http.ResponseWriter that keeps nothing.
type benchWriter struct {
	h    http.Header
	code int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) WriteHeader(code int)        { w.code = code }
func (w *benchWriter) Write(b []byte) (int, error) { return len(b), nil }

func (w *benchWriter) reset() {
	clear(w.h)
	w.code = http.StatusOK
}

// cannedModel answers every request with the same response.
type cannedModel struct{ resp *infer.Response }

func (m cannedModel) Infer(context.Context, *infer.Request) (*infer.Response, error) {
	return m.resp, nil
}

func (cannedModel) ModelReady(context.Context, string, string) error { return nil }

// newHopEnv is the gatewaybench configuration: one client with a token
// bucket it never exhausts, the proxy to a kserve_http backend, and a
// plain service on an in-process model.
func newHopEnv(b *testing.B, upstream string, client *http.Client) *testEnv {
	b.Helper()
	cfg := parseConfig(b, gatewayYAML(yamlOpts{
		plain: true,
		gateway: []string{
			clientsYAML("{requests_per_second: 1000000, burst: 1000000}"),
			"proxy: {backend: models-http, timeout: 5s}",
		},
		backends: `[{name: local, kind: in_process}, {name: models-http, kind: kserve_http, endpoints: ["` + upstream + `"]}]`,
	}))
	// A lean model: the test fake records every request, which would
	// dominate the profile.
	resp := &infer.Response{Model: "eta_model", Version: "1", Outputs: []infer.Tensor{fp32Tensor("eta_prediction", 42.5), fp32Tensor("confidence_score", 0.9)}}
	e := newEnv(b, cfg, func(o *gateway.Options) {
		o.HTTPClient = client
		o.Models = cannedModel{resp}
	})
	return e
}

// cannedUpstream is a KServe v2 HTTP endpoint on 127.0.0.1 that answers
// every request with the same small response, as cheaply as it can: the
// benchmark measures the gateway, not it.
func cannedUpstream(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	const body = `{"model_name":"parcel_eta","outputs":[{"name":"eta","datatype":"FP32","shape":[1,1],"data":[42.5]}]}`
	answer := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					r, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, r.Body)
					if _, err := io.WriteString(c, answer); err != nil {
						return
					}
				}
			})
		}
	})
	b.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

func BenchmarkHop(b *testing.B) {
	proxy := func(b *testing.B, client *http.Client) {
		b.Helper()
		e := newHopEnv(b, cannedUpstream(b), client)
		w := &benchWriter{h: http.Header{}}
		rd := bytes.NewReader(hopBody)
		r := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/v2/models/parcel_eta/infer", rd)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer alice-key")
		b.ReportAllocs()
		for b.Loop() {
			rd.Reset(hopBody)
			r.Body = io.NopCloser(rd)
			w.reset()
			e.g.ServeHTTP(w, r)
			if w.code != http.StatusOK {
				b.Fatalf("status %d", w.code)
			}
		}
	}
	// The proxy's own client (package h1), and net/http's in its place.
	b.Run("proxy", func(b *testing.B) { proxy(b, nil) })
	b.Run("proxy_nethttp", func(b *testing.B) {
		t := &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}
		b.Cleanup(t.CloseIdleConnections)
		proxy(b, &http.Client{Transport: t})
	})
	b.Run("service", func(b *testing.B) {
		e := newHopEnv(b, "127.0.0.1:9", nil)
		w := &benchWriter{h: http.Header{}}
		body := []byte(plainBody)
		rd := bytes.NewReader(body)
		r := httptest.NewRequestWithContext(context.Background(), http.MethodPost, etaPath, rd)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer alice-key")
		b.ReportAllocs()
		for b.Loop() {
			rd.Reset(body)
			r.Body = io.NopCloser(rd)
			w.reset()
			e.g.ServeHTTP(w, r)
			if w.code != http.StatusOK {
				b.Fatalf("status %d", w.code)
			}
		}
	})
	b.Run("service_grpc", func(b *testing.B) {
		e := newHopEnv(b, "127.0.0.1:9", nil)
		c := grpcClient(b, e)
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer alice-key")
		req := &gatewaypb.PredictRequest{Service: "eta", Fields: mustStruct(b, map[string]any{"user_id": 7, "base_eta": 30})}
		b.ReportAllocs()
		for b.Loop() {
			_, err := c.Predict(ctx, req)
			require.NoError(b, err)
		}
	})
}
