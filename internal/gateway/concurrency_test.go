package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway"
)

// syncBuffer is a bytes.Buffer safe for the access logger's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestAccessLog(t *testing.T) {
	var buf syncBuffer
	cfg := parseConfig(t, gatewayYAML(yamlOpts{
		plain: true, routes: poolRoutes("1s", retryAll), backends: poolBackend(""),
		gateway: []string{clientsYAML("{}"), "log_sampling: {success_percent: 100, errors_percent: 100}"},
	}))
	e := newEnv(t, cfg, func(o *gateway.Options) { o.AccessLog = &buf })
	e.remote.set(epA, behaveUnavailable)
	e.remote.set(epB, behaveUnavailable)
	ok := e.post(t, `{"user_id": 7, "base_eta": 30}`, "Authorization", "Bearer alice-key", "X-Request-Id", "log-ok")
	requireOK(t, ok)
	unauth := e.post(t, plainBody, "X-Request-Id", "log-401")
	requireError(t, unauth, http.StatusUnauthorized, "missing_api_key")
	require.NoError(t, e.g.Close(context.Background()), "Close flushes the log")

	entries := map[string]map[string]any{}
	sc := bufio.NewScanner(bytes.NewReader([]byte(buf.String())))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "line %s", sc.Text())
		entries[m["request_id"].(string)] = m
	}
	require.Len(t, entries, 2)
	good := entries["log-ok"]
	require.Equal(t, "alice", good["client_id"])
	require.Equal(t, "eta", good["service"])
	require.Equal(t, "default", good["route"])
	require.Equal(t, "pool", good["backend"])
	require.Equal(t, epC, good["endpoint"], "the endpoint that answered")
	require.Equal(t, 200.0, good["status"])
	require.Equal(t, "model", good["source"])
	require.Equal(t, float64(len(e.remote.callsOf("log-ok"))-1), good["retries"])
	require.Equal(t, float64(len(`{"user_id": 7, "base_eta": 30}`)), good["request_bytes"])
	require.Equal(t, float64(len(ok.Body)), good["response_bytes"], "the bytes of the answer sent")

	bad := entries["log-401"]
	require.Equal(t, 401.0, bad["status"])
	require.Equal(t, "missing_api_key", bad["reason"])
	require.Equal(t, float64(len(unauth.Body)), bad["response_bytes"], "the bytes of the error body sent")
	require.Positive(t, len(unauth.Body))
	require.NotContains(t, buf.String(), "alice-key", "keys are never logged")
}

// TestConcurrentTraffic runs requests, admin reads and reloads at once,
// for the race detector and for answers that stay correct under load.
func TestConcurrentTraffic(t *testing.T) {
	cfgYAML := func(timeout string) *config.Config {
		return parseConfig(t, gatewayYAML(yamlOpts{
			gateway: []string{anonAllowed},
			// Generous timeouts: only a real hang may fail a request here,
			// not a slow (loaded, race-instrumented) machine.
			routes:   poolRoutes(timeout, `{retry_on: [unavailable], num_retries: 2, per_try_timeout: 3s}`),
			backends: poolBackend(""),
			service:  []string{breakerYAML, fallbackYAML},
		}))
	}
	e := newEnv(t, cfgYAML("5s"))
	seedFeatures(e.features)
	e.remote.set(epA, behaveUnavailable)
	admin := e.g.AdminHandler(nil)

	// ctx bounds the load in time; a slow machine runs fewer iterations.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	report := func(s string) {
		select {
		case errs <- s:
		default:
		}
	}
	for w := range 8 {
		wg.Go(func() {
			for i := 0; i < 60 && ctx.Err() == nil; i++ {
				e.clock.Advance(10 * time.Millisecond)
				r := httptest.NewRequestWithContext(context.Background(), http.MethodPost, etaPath, bytes.NewReader([]byte(fallbackBody(i%3 == w%3))))
				rec := httptest.NewRecorder()
				e.g.ServeHTTP(rec, r)
				if rec.Code != http.StatusOK {
					report(rec.Body.String())
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; i < 100 && ctx.Err() == nil; i++ {
			for _, p := range []string{"/endpoints", "/breakers", "/fallback", "/ratelimit", "/config_dump", "/routes"} {
				rec := httptest.NewRecorder()
				admin.ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), http.MethodGet, p, nil))
				if rec.Code != http.StatusOK || !json.Valid(rec.Body.Bytes()) {
					report(p + ": " + rec.Body.String())
				}
			}
		}
	})
	cfgs := []*config.Config{cfgYAML("4s"), cfgYAML("5s")}
	wg.Go(func() {
		for i := 0; i < 50 && ctx.Err() == nil; i++ {
			if err := e.g.Reload(cfgs[i%2]); err != nil {
				report("reload: " + err.Error())
			}
		}
	})
	wg.Wait()
	close(errs)
	for s := range errs {
		t.Error(s)
	}
}
