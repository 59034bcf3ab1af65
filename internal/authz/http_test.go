package authz

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

type errorBody struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

func decodeError(t *testing.T, rec *httptest.ResponseRecorder) errorBody {
	t.Helper()
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var b errorBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &b))
	return b
}

// whoAmI answers the Principal its context carries.
var whoAmI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	pr, ok := PrincipalFrom(r.Context())
	if !ok {
		http.Error(w, "no principal", http.StatusInternalServerError)
		return
	}
	_, _ = io.WriteString(w, pr.ID+"/"+pr.Via+"/"+pr.Role.String())
})

func TestRequire(t *testing.T) {
	p := mustPolicy(t, PolicyOptions{Tokens: testTokens()})
	h := p.Require(RoleOperate, "", whoAmI)
	for _, tc := range []struct {
		name    string
		header  string
		status  int
		reason  string
		wwwAuth string
		body    string
	}{
		{name: "missing", status: 401, reason: ReasonMissingCredential, wwwAuth: `Bearer realm="sluice"`},
		{name: "invalid", header: "Bearer nope-nope-nope", status: 401, reason: ReasonInvalidCredential, wwwAuth: `Bearer realm="sluice", error="invalid_token"`},
		{name: "insufficient", header: "Bearer " + viewerSecret, status: 403, reason: ReasonInsufficientRole},
		{name: "allowed", header: "Bearer " + opsSecret, status: 200, body: "ops/token/operate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/reload", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			require.Equal(t, tc.status, rec.Code)
			require.Equal(t, tc.wwwAuth, rec.Header().Get("WWW-Authenticate"))
			if tc.status == 200 {
				require.Equal(t, tc.body, rec.Body.String())
				return
			}
			b := decodeError(t, rec)
			require.Equal(t, tc.reason, b.Reason)
			require.NotEmpty(t, b.Error)
			require.NotContains(t, rec.Body.String(), "nope-nope-nope")
			require.NotContains(t, rec.Body.String(), viewerSecret)
		})
	}
}

func TestOperateAudits(t *testing.T) {
	var buf bytes.Buffer
	reg := prometheus.NewRegistry()
	a := NewAuditor(&buf, reg)
	p := mustPolicy(t, PolicyOptions{Tokens: testTokens()})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("fail") != "" {
			http.Error(w, `{"error":"no such service","reason":"not_found"}`, http.StatusNotFound)
			return
		}
		whoAmI(w, r)
	})
	h := p.Operate(a, ComponentAdmin, "rollout.promote", func(r *http.Request) string { return r.PathValue("service") }, handler)
	mux := http.NewServeMux()
	mux.Handle("POST /rollout/{service}/promote", h)

	call := func(url, token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, url, nil)
		r.RemoteAddr = "192.0.2.9:5555"
		r.Header.Set("X-Request-Id", "req-1")
		if token != "" {
			r.Header.Set("X-Sluice-Token", token)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, r)
		return rec
	}
	require.Equal(t, 401, call("/rollout/fraud/promote", "").Code)
	require.Equal(t, 403, call("/rollout/fraud/promote", viewerSecret).Code)
	ok := call("/rollout/fraud/promote", opsSecret)
	require.Equal(t, 200, ok.Code)
	require.Equal(t, "ops/token/operate", ok.Body.String())
	require.Equal(t, 404, call("/rollout/nope/promote?fail=1", opsSecret).Code)

	got := lines(t, buf.Bytes())
	require.Len(t, got, 4, "one line per call, denied ones included")
	want := []struct {
		target, who, via, result, reason string
		status                           float64
	}{
		{"fraud", "", "", ResultDenied, ReasonMissingCredential, 401},
		{"fraud", "viewer", ViaToken, ResultDenied, ReasonInsufficientRole, 403},
		{"fraud", "ops", ViaToken, ResultOK, "", 200},
		{"nope", "ops", ViaToken, ResultError, "", 404},
	}
	for i, w := range want {
		l := got[i]
		require.Equal(t, ComponentAdmin, l["component"])
		require.Equal(t, "rollout.promote", l["action"])
		require.Equal(t, w.target, l["target"])
		require.Equal(t, w.who, l["who"])
		require.Equal(t, w.via, l["via"])
		require.Equal(t, w.result, l["result"])
		require.Equal(t, w.reason, l["reason"])
		require.InDelta(t, w.status, l["status"], 0)
		require.Equal(t, "192.0.2.9:5555", l["source_addr"])
		require.Equal(t, "req-1", l["request_id"])
	}
	require.NotContains(t, buf.String(), opsSecret)
	require.NotContains(t, buf.String(), viewerSecret)
	require.InDelta(t, 2, testutil.ToFloat64(a.events.WithLabelValues(ComponentAdmin, "rollout.promote", ResultDenied)), 0)
	require.InDelta(t, 1, testutil.ToFloat64(a.events.WithLabelValues(ComponentAdmin, "rollout.promote", ResultOK)), 0)
	require.InDelta(t, 1, testutil.ToFloat64(a.events.WithLabelValues(ComponentAdmin, "rollout.promote", ResultError)), 0)
}

func TestOperateOpenWritesAuditsAnonymous(t *testing.T) {
	var buf bytes.Buffer
	a := NewAuditor(&buf, nil)
	p := mustPolicy(t, PolicyOptions{OpenWrites: true})
	h := p.Operate(a, ComponentFeatures, "materialize", nil, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusAccepted)
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/materialize", nil))
	require.Equal(t, http.StatusAccepted, rec.Code)
	got := lines(t, buf.Bytes())
	require.Len(t, got, 1)
	require.Equal(t, AnonymousID, got[0]["who"])
	require.Equal(t, ViaOpen, got[0]["via"])
	require.InDelta(t, 202, got[0]["status"], 0)
	require.Equal(t, ResultOK, got[0]["result"])
}

func TestOperateAuditsPanics(t *testing.T) {
	var buf bytes.Buffer
	a := NewAuditor(&buf, nil)
	p := mustPolicy(t, PolicyOptions{OpenWrites: true})
	h := p.Operate(a, ComponentAdmin, "reload", nil, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("boom")
	}))
	require.PanicsWithValue(t, "boom", func() {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/reload", nil))
	})
	got := lines(t, buf.Bytes())
	require.Len(t, got, 1)
	require.Equal(t, ResultError, got[0]["result"])
	require.InDelta(t, 500, got[0]["status"], 0)
}

// TestOperateKeepsFlushing checks that a handler behind Operate can still
// stream: the client reads the first chunk while the handler is blocked.
func TestOperateKeepsFlushing(t *testing.T) {
	var buf bytes.Buffer
	a := NewAuditor(&buf, nil)
	p := mustPolicy(t, PolicyOptions{Tokens: testTokens()})
	release := make(chan struct{})
	h := p.Operate(a, ComponentAdmin, "pprof", nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first\n")
		f, ok := w.(http.Flusher)
		if !ok {
			http.Error(w, "no flusher", http.StatusInternalServerError)
			return
		}
		f.Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "second\n")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+opsSecret)
	client := &http.Client{Timeout: 30 * time.Second}
	res, err := client.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	br := bufio.NewReader(res.Body)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "first\n", line, "the first chunk arrives before the handler returns")
	close(release)
	rest, err := io.ReadAll(br)
	require.NoError(t, err)
	require.Equal(t, "second\n", string(rest))
	srv.Close() // the audit line is written once the handler has returned
	got := lines(t, buf.Bytes())
	require.Len(t, got, 1)
	require.InDelta(t, 200, got[0]["status"], 0)
}

func TestRequireKServe(t *testing.T) {
	var buf bytes.Buffer
	a := NewAuditor(&buf, nil)
	p := mustPolicy(t, PolicyOptions{
		Tokens:       testTokens(),
		OpenReads:    true,
		Restrictions: []Restriction{{Groups: []string{GroupModelRepository}, Key: restrictKey, Value: restrictVal}},
	})
	h := p.RequireKServe(a, ComponentModelsHTTP, whoAmI)
	for _, tc := range []struct {
		name         string
		method, path string
		headers      map[string]string
		status       int
		reason       string
	}{
		{name: "health open", method: http.MethodGet, path: "/v2/health/ready", status: 200},
		{name: "infer open (open reads)", method: http.MethodPost, path: "/v2/models/m/infer", status: 200},
		{name: "index restricted", method: http.MethodPost, path: "/v2/repository/index", status: 403, reason: ReasonRestrictedAPI},
		{name: "index with restriction header", method: http.MethodPost, path: "/v2/repository/index", headers: map[string]string{restrictKey: restrictVal}, status: 200},
		{name: "load without token", method: http.MethodPost, path: "/v2/repository/models/m/load", headers: map[string]string{restrictKey: restrictVal}, status: 401, reason: ReasonMissingCredential},
		{name: "load with read token", method: http.MethodPost, path: "/v2/repository/models/m/load", headers: map[string]string{restrictKey: restrictVal, "Authorization": "Bearer " + viewerSecret}, status: 403, reason: ReasonInsufficientRole},
		{name: "unload with operate token", method: http.MethodPost, path: "/v2/repository/models/m/unload", headers: map[string]string{restrictKey: restrictVal, "Authorization": "Bearer " + opsSecret}, status: 200},
		{name: "unknown path needs operate", method: http.MethodGet, path: "/v2/secret", status: 401, reason: ReasonMissingCredential},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, nil)
			for k, v := range tc.headers {
				r.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			require.Equal(t, tc.status, rec.Code, rec.Body.String())
			if tc.reason != "" {
				require.Equal(t, tc.reason, decodeError(t, rec).Reason)
			}
		})
	}
	got := lines(t, buf.Bytes())
	require.Len(t, got, 4, "only calls needing operate are audited")
	var actions []string
	for _, l := range got {
		require.Equal(t, ComponentModelsHTTP, l["component"])
		actions = append(actions, l["action"].(string)+":"+l["result"].(string)+":"+l["target"].(string))
	}
	require.Equal(t, []string{
		"repository.load:denied:m", "repository.load:denied:m", "repository.unload:ok:m", "unclassified:denied:/v2/secret",
	}, actions)
	require.False(t, strings.Contains(buf.String(), opsSecret))
}
