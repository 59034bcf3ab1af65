package servingapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
)

// wideServer is a Server over servingtest.Wide's embedded store (1,000
// users' rows of the view "wide", 50 Float32 features); it returns the
// features' references and the store too.
func wideServer(tb testing.TB) (*serving.Server, []string, online.Store) {
	tb.Helper()
	store, repo, refs := servingtest.Wide(tb)
	h := &servingtest.Holder{}
	h.P.Store(repo)
	return serving.New(h, store, serving.Options{Now: func() time.Time { return now }}, nil, nil), refs, store
}

// wideBody is the JSON body of POST /get-online-features for every
// feature of the view "wide" for n users (of wideServer's 1,000).
func wideBody(tb testing.TB, refs []string, n int) []byte {
	tb.Helper()
	body, err := json.Marshal(map[string]any{"features": refs, "entities": map[string]any{"user_id": servingtest.WideIDs(n)}})
	require.NoError(tb, err)
	return body
}

// BenchmarkGetOnlineFeatures100x50 reads 100 entities × 50 Float32
// features from the embedded store by POST /get-online-features through
// the handler (request decoding and response encoding, no network): the
// "http" case of serving's BenchmarkGetOnlineFeatures100x50, which
// measures the store read alone and the Go API.
func BenchmarkGetOnlineFeatures100x50(b *testing.B) {
	srv, refs, _ := wideServer(b)
	ctx := b.Context()
	body := wideBody(b, refs, 100)
	b.Run("http", func(b *testing.B) {
		h := NewHandler(srv, HandlerOptions{}, nil, nil)
		w := &discardResponse{hdr: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/get-online-features", bytes.NewReader(body))
			w.code = 0
			h.ServeHTTP(w, r)
			if w.code != http.StatusOK {
				b.Fatalf("status %d", w.code)
			}
		}
	})
}

// discardResponse is an http.ResponseWriter that keeps only the status.
type discardResponse struct {
	hdr  http.Header
	code int
}

func (w *discardResponse) Header() http.Header { return w.hdr }
func (w *discardResponse) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *discardResponse) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(p), nil
}
