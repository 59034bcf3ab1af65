package httpapi

import (
	"bytes"
	"log/slog"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/telemetry"
	"github.com/sluice-ml/sluice/internal/tritonsettings"
)

// /v2/logging and /v2/trace/setting as Triton's logging and trace
// extensions define them (qa/L0_logging, qa/L0_trace).
func TestSettingsHTTP(t *testing.T) {
	var lv slog.LevelVar
	sampling := telemetry.NewSampling(0.1)
	sampling.SetExporting(true)
	h := New(newFakeModels(), Options{Settings: tritonsettings.New(&lv, "json", sampling)}, nil, prometheus.NewRegistry())

	rec := do(t, h, http.MethodGet, "/v2/logging", nil, nil)
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, `{"log_file":"","log_info":true,"log_warning":true,"log_error":true,"log_verbose_level":0,"log_format":"default"}`, rec.Body.String())
	rec = do(t, h, http.MethodPost, "/v2/logging", []byte(`{"log_verbose_level":1}`), nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), `"log_verbose_level":1`)
	require.Equal(t, slog.LevelDebug, lv.Level())
	requireError(t, do(t, h, http.MethodPost, "/v2/logging", []byte(`{"log_info":"no"}`), nil), http.StatusBadRequest, tritonsettings.ReasonInvalid, "'log_info'")
	requireError(t, do(t, h, http.MethodPost, "/v2/logging", []byte(`{"log_verbose_level":1.5}`), nil), http.StatusBadRequest, reasonInvalidParameter)
	requireError(t, do(t, h, http.MethodPost, "/v2/logging", []byte(`[`), nil), http.StatusBadRequest, reasonInvalidJSON)
	// A body over its limit is 400 on this port, as every body is (Triton).
	requireError(t, do(t, h, http.MethodPost, "/v2/logging", bytes.Repeat([]byte(" "), maxSettingsBody+1), nil), http.StatusBadRequest, reasonBodyTooLarge, "at most 65536 bytes")

	rec = do(t, h, http.MethodGet, "/v2/trace/setting", nil, nil)
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, `{"trace_level":["TIMESTAMPS"],"trace_rate":"10","trace_count":"-1","log_frequency":"0","trace_file":"","trace_mode":"opentelemetry"}`, rec.Body.String())
	rec = do(t, h, http.MethodGet, "/v2/models/simple/trace/setting", nil, nil)
	require.Equal(t, http.StatusOK, rec.Code)
	requireError(t, do(t, h, http.MethodGet, "/v2/models/nope/trace/setting", nil, nil), http.StatusNotFound, "model_not_found")
	rec = do(t, h, http.MethodPost, "/v2/trace/setting", []byte(`{"trace_rate":"2","trace_level":["TIMESTAMPS"]}`), nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), `"trace_rate":"2"`)
	require.InDelta(t, 0.5, sampling.Ratio(), 1e-12)
	requireError(t, do(t, h, http.MethodPost, "/v2/trace/setting", []byte(`{"trace_file":"/tmp/x"}`), nil), http.StatusBadRequest, tritonsettings.ReasonInvalid, "trace file location can not be updated through network protocol")

	rec = do(t, h, http.MethodGet, "/v2", nil, nil)
	require.Contains(t, rec.Body.String(), `"logging","trace"`)

	bare := New(newFakeModels(), Options{}, nil, prometheus.NewRegistry())
	requireError(t, do(t, bare, http.MethodGet, "/v2/logging", nil, nil), http.StatusNotFound, reasonNotFound)
}

// qa/L0_trace trace_endpoint_test.py test_http_clear_settings, over HTTP
// as tritonclient sends it: per-model settings win over global ones, and
// null clears a setting (a model's follows the global one again, a global
// one returns to its value at start).
func TestTraceSettingsHTTPPerModel(t *testing.T) {
	var lv slog.LevelVar
	sampling := telemetry.NewSampling(1)
	sampling.SetExporting(true)
	st := tritonsettings.New(&lv, "json", sampling)
	require.NoError(t, st.ConfigureTrace(tritonsettings.TraceConfig{Level: []string{"TIMESTAMPS"}, Rate: 1, File: "global_unittest.log", Mode: tritonsettings.ModeTriton}))
	h := New(newFakeModels(), Options{Settings: st}, nil, prometheus.NewRegistry())
	post := func(target, body string) string {
		t.Helper()
		rec := do(t, h, http.MethodPost, target, []byte(body), nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		return rec.Body.String()
	}
	want := func(level, rate, freq string) string {
		return `{"trace_file":"global_unittest.log","trace_level":` + level + `,"trace_rate":"` + rate + `","trace_count":"-1","log_frequency":"` + freq + `","trace_mode":"triton"}`
	}
	post("/v2/models/simple/trace/setting", `{"trace_rate":"12","log_frequency":"34"}`)
	post("/v2/trace/setting", `{"trace_rate":"56","trace_count":"78","trace_level":["OFF"]}`)
	require.JSONEq(t, want(`["OFF"]`, "1", "0"), post("/v2/trace/setting", `{"trace_rate":null,"trace_count":null}`))
	require.JSONEq(t, want(`["OFF"]`, "12", "34"), do(t, h, http.MethodGet, "/v2/models/simple/trace/setting", nil, nil).Body.String())
	require.JSONEq(t, want(`["OFF"]`, "1", "34"), post("/v2/models/simple/trace/setting", `{"trace_rate":null,"trace_level":null}`))
	require.JSONEq(t, want(`["OFF"]`, "1", "0"), do(t, h, http.MethodGet, "/v2/trace/setting", nil, nil).Body.String())
	// trace_endpoint_test.py looks for Triton's words.
	requireError(t, do(t, h, http.MethodPost, "/v2/models/does-not-exist/trace/setting", []byte(`{"trace_rate":"2"}`), nil), http.StatusNotFound, "model_not_found", "Request for unknown model : does-not-exist")
	requireError(t, do(t, h, http.MethodGet, "/v2/models/does-not-exist/trace/setting", nil, nil), http.StatusNotFound, "model_not_found", "Request for unknown model : does-not-exist")
}
