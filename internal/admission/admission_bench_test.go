package admission

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// nopWriter is a ResponseWriter that keeps nothing.
type nopWriter struct{ h http.Header }

func (w nopWriter) Header() http.Header       { return w.h }
func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (nopWriter) WriteHeader(int)             {}

// benchSetup returns Handler with the default limits and budget in front
// of an endpoint that does nothing, and a typical small inference request
// with a Content-Length.
func benchSetup() (http.Handler, http.ResponseWriter, *http.Request) {
	m := NewMetrics(prometheus.NewRegistry())
	h := Handler("bench", DefaultLimits(64<<20), NewBudget(DefaultBudgetBytes, m), m,
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	body := `{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}]}`
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/v2/models/m/infer", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "bench/1.0")
	req.Header.Set("Accept", "*/*")
	req.Header.Set("Accept-Encoding", "gzip")
	req.Header.Set("Authorization", "Bearer 0123456789abcdef")
	req.Header.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	return h, nopWriter{h: http.Header{}}, req
}

func BenchmarkHandlerSmallRequest(b *testing.B) {
	h, w, req := benchSetup()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, req)
	}
}

func BenchmarkHandlerSmallRequestParallel(b *testing.B) {
	h, _, req := benchSetup()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := nopWriter{h: http.Header{}}
		for pb.Next() {
			h.ServeHTTP(w, req)
		}
	})
}
