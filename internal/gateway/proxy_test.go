package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/gateway/auth"
)

// modelServer is a KServe v2 HTTP model server on 127.0.0.1 that records
// what it received and answers with status (and hangs while hang is set).
type modelServer struct {
	srv  *httptest.Server
	addr string

	mu     sync.Mutex
	status int
	hang   bool
	got    []*http.Request
	bodies []string
}

func newModelServer(t *testing.T) *modelServer {
	t.Helper()
	m := &modelServer{status: http.StatusOK}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		m.mu.Lock()
		m.got = append(m.got, r.Clone(context.Background()))
		m.bodies = append(m.bodies, string(body))
		status, hang := m.status, m.hang
		m.mu.Unlock()
		if hang {
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Model-Server", m.addr)
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"model_name":"simple","served_by":%q}`, m.addr)
	}))
	m.addr = strings.TrimPrefix(m.srv.URL, "http://")
	t.Cleanup(m.srv.Close)
	return m
}

func (m *modelServer) set(status int, hang bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status, m.hang = status, hang
}

func (m *modelServer) requests() ([]*http.Request, []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*http.Request(nil), m.got...), append([]string(nil), m.bodies...)
}

// deadAddr is a 127.0.0.1 address that refuses connections: port 1 is
// privileged, so no other test can start listening on it meanwhile.
func deadAddr(t *testing.T) string {
	t.Helper()
	const addr = "127.0.0.1:1"
	c, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", addr)
	if err == nil {
		_ = c.Close()
		t.Fatalf("%s accepts connections; the connect-failure tests need it closed", addr)
	}
	return addr
}

// newProxyEnv configures the KServe v2 proxy to endpoints with retries (a
// flow map or "").
func newProxyEnv(t *testing.T, endpoints []string, timeout, retries string) *testEnv {
	t.Helper()
	eps := make([]string, len(endpoints))
	for i, e := range endpoints {
		eps[i] = fmt.Sprintf("%q", e)
	}
	proxy := "proxy: {backend: models-http, timeout: " + timeout
	if retries != "" {
		proxy += ", retries: " + retries
	}
	cfg := parseConfig(t, gatewayYAML(yamlOpts{
		plain: true, gateway: []string{clientsYAML("{}"), proxy + "}"},
		backends: `[{name: local, kind: in_process}, {name: models-http, kind: kserve_http, endpoints: [` + strings.Join(eps, ", ") + `]}]`,
	}))
	return newEnv(t, cfg)
}

// proxyCall sends a KServe v2 request through the gateway as alice.
func proxyCall(t *testing.T, h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequestWithContext(context.Background(), method, path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer alice-key")
	r.Header.Set("X-Api-Key", "alice-key")
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Inference-Header-Content-Length", "12")
	r.Header.Set("X-Request-Id", "proxy-req-1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestProxyPassesThrough(t *testing.T) {
	ms := newModelServer(t)
	e := newProxyEnv(t, []string{ms.addr}, "1s", "")
	body := `{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT32","data":[1]}]}`
	w := proxyCall(t, e.g, http.MethodPost, "/v2/models/simple/infer?x=1", body)
	require.Equal(t, http.StatusOK, w.Code, "body: %s", w.Body)
	require.JSONEq(t, fmt.Sprintf(`{"model_name":"simple","served_by":%q}`, ms.addr), w.Body.String())
	require.Equal(t, ms.addr, w.Header().Get("X-Model-Server"), "the model server's headers come back")
	require.Equal(t, "proxy-req-1", w.Header().Get("X-Request-Id"))

	got, bodies := ms.requests()
	require.Len(t, got, 1)
	r := got[0]
	require.Equal(t, http.MethodPost, r.Method)
	require.Equal(t, "/v2/models/simple/infer", r.URL.Path)
	require.Equal(t, "x=1", r.URL.RawQuery)
	require.Equal(t, body, bodies[0])
	require.Empty(t, r.Header.Get("Authorization"), "the caller's credentials stay at the gateway")
	require.Empty(t, r.Header.Get("X-Api-Key"), "the caller's credentials stay at the gateway")
	require.Equal(t, "12", r.Header.Get("Inference-Header-Content-Length"), "KServe binary headers pass")
	require.Equal(t, "proxy-req-1", r.Header.Get("X-Request-Id"))

	// Model server errors pass through as they are.
	ms.set(http.StatusBadRequest, false)
	w = proxyCall(t, e.g, http.MethodPost, "/v2/models/simple/infer", body)
	require.Equal(t, http.StatusBadRequest, w.Code)
	require.Contains(t, w.Body.String(), "served_by")
}

func TestProxyAdmission(t *testing.T) {
	ms := newModelServer(t)
	e := newProxyEnv(t, []string{ms.addr}, "1s", "")
	r := httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/v2/health/ready", nil)
	w := httptest.NewRecorder()
	e.g.ServeHTTP(w, r)
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.Contains(t, w.Body.String(), auth.ReasonMissingAPIKey)
	require.Equal(t, `Bearer realm="sluice"`, w.Header().Get("WWW-Authenticate"))
	got, _ := ms.requests()
	require.Empty(t, got, "an unauthenticated request must not reach the model server")
}

func TestProxyRetries(t *testing.T) {
	t.Run("5xx is retried on the other endpoint", func(t *testing.T) {
		bad, good := newModelServer(t), newModelServer(t)
		bad.set(http.StatusServiceUnavailable, false)
		e := newProxyEnv(t, []string{bad.addr, good.addr}, "1s", "{retry_on: [5xx], num_retries: 1}")
		for i := 0; ; i++ {
			require.Less(t, i, 40, "no request went to the failing endpoint first")
			w := proxyCall(t, e.g, http.MethodGet, "/v2/health/ready", "")
			require.Equal(t, http.StatusOK, w.Code, "body: %s", w.Body)
			require.Equal(t, good.addr, w.Header().Get("X-Model-Server"))
			if got, _ := bad.requests(); len(got) > 0 {
				break
			}
		}
		got, _ := bad.requests()
		require.Len(t, got, 1, "each request tries an endpoint at most once")
	})
	t.Run("without retries the 503 passes", func(t *testing.T) {
		bad := newModelServer(t)
		bad.set(http.StatusServiceUnavailable, false)
		e := newProxyEnv(t, []string{bad.addr}, "1s", "")
		w := proxyCall(t, e.g, http.MethodGet, "/v2/health/ready", "")
		require.Equal(t, http.StatusServiceUnavailable, w.Code)
		require.Contains(t, w.Body.String(), "served_by", "the model server's own answer")
	})
	t.Run("connect failure", func(t *testing.T) {
		good := newModelServer(t)
		dead := deadAddr(t)
		e := newProxyEnv(t, []string{dead, good.addr}, "1s", "{retry_on: [connect-failure], num_retries: 1}")
		for range 10 {
			w := proxyCall(t, e.g, http.MethodGet, "/v2/health/ready", "")
			require.Equal(t, http.StatusOK, w.Code, "body: %s", w.Body)
		}
		only := newProxyEnv(t, []string{dead}, "1s", "")
		w := proxyCall(t, only.g, http.MethodGet, "/v2/health/ready", "")
		require.Equal(t, http.StatusBadGateway, w.Code, "body: %s", w.Body)
		require.Contains(t, w.Body.String(), gateway.ReasonUpstreamUnavailable)
	})
	t.Run("hanging endpoint", func(t *testing.T) {
		slow := newModelServer(t)
		slow.set(http.StatusOK, true)
		e := newProxyEnv(t, []string{slow.addr}, "200ms", "{retry_on: [5xx], num_retries: 1, per_try_timeout: 50ms}")
		start := time.Now()
		w := proxyCall(t, e.g, http.MethodGet, "/v2/health/ready", "")
		require.Equal(t, http.StatusGatewayTimeout, w.Code, "body: %s", w.Body)
		require.Contains(t, w.Body.String(), gateway.ReasonUpstreamTimeout)
		require.Less(t, time.Since(start), 2*time.Second)
	})
}
