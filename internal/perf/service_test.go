package perf

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRunGatewayService drives a fake gateway service: every request goes
// to /v1/services/NAME:predict with the header given and a body filled
// from the template (ids spread over their ranges), and the results have
// no server columns.
func TestRunGatewayService(t *testing.T) {
	var mu sync.Mutex
	users := map[int64]bool{}
	bad := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			UserID  int64   `json:"user_id"`
			RouteID int64   `json:"route_id"`
			BaseETA float64 `json:"base_eta"`
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.URL.Path != "/v1/services/parcel-eta:predict" || r.Method != http.MethodPost:
			bad = r.Method + " " + r.URL.Path
		case r.Header.Get("Authorization") != "Bearer k":
			bad = "no API key"
		case json.Unmarshal(body, &req) != nil || req.UserID < 1 || req.UserID > 50 || req.RouteID < 3 || req.RouteID > 3 || req.BaseETA != 35:
			bad = "body " + string(body)
		}
		users[req.UserID] = true
		_, _ = io.WriteString(w, `{"source":"model"}`)
	}))
	t.Cleanup(srv.Close)
	var progress bytes.Buffer
	res, err := Run(t.Context(), quick(Options{
		Service: "parcel-eta", URL: srv.URL, Concurrency: []int{2},
		ServiceBody: []byte(`{"user_id": {{rand 1 50}}, "route_id": {{ rand 3 3 }}, "base_eta": 35}`),
		Header:      http.Header{"Authorization": {"Bearer k"}}, Progress: &progress,
	}))
	require.NoError(t, err)
	mu.Lock()
	require.Empty(t, bad)
	require.Greater(t, len(users), 10, "ids spread over the range")
	mu.Unlock()
	require.Len(t, res, 1)
	require.Positive(t, res[0].Throughput)
	require.Nil(t, res[0].Server)
	require.Contains(t, progress.String(), "no statistics extension")
	var out bytes.Buffer
	require.NoError(t, WriteCSV(&out, res, false))
	rows, err := csv.NewReader(&out).ReadAll()
	require.NoError(t, err)
	require.Equal(t, []string{"", "", "", ""}, rows[1][4:8], "no server split")

	// A service that refuses the call fails the first request, with its answer.
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":"no key","reason":"missing_api_key"}`)
	}))
	t.Cleanup(refuse.Close)
	_, err = Run(t.Context(), quick(Options{Service: "s", URL: refuse.URL, ServiceBody: []byte(`{}`)}))
	require.ErrorContains(t, err, "missing_api_key")
}

func TestServiceOptions(t *testing.T) {
	for _, o := range []Options{
		{Service: "s", Model: "m", ServiceBody: []byte(`{}`)},
		{Service: "s", Protocol: ProtocolGRPC, ServiceBody: []byte(`{}`)},
		{Service: "s", Batch: 4, ServiceBody: []byte(`{}`)},
		{Service: "s"},
	} {
		_, err := withDefaults(o)
		require.Error(t, err, "%+v", o)
	}
}

func TestParseBodyTemplate(t *testing.T) {
	tpl, err := parseBodyTemplate([]byte(`{"a": {{rand -2 2}}, "b": "x{{rand 7 7}}"}`))
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 1))
	for range 50 {
		var v struct {
			A int64  `json:"a"`
			B string `json:"b"`
		}
		require.NoError(t, json.Unmarshal(tpl.fill(nil, rng), &v))
		require.True(t, v.A >= -2 && v.A <= 2, "%d", v.A)
		require.Equal(t, "x7", v.B)
	}
	for _, bad := range []string{
		`{"a": {{rand 5 1}}}`,                                      // reversed
		`{"a": {{rand 1 99999999999999999999}}}`,                   // does not fit
		`{"a": {{rand -9223372036854775808 9223372036854775807}}}`, // range overflows
		`{"a": }`,            // not JSON
		`{"a": {{rand 1 2}}`, // not JSON once filled
	} {
		_, err := parseBodyTemplate([]byte(bad))
		require.ErrorIs(t, err, ErrInput, bad)
	}
	_, err = parseBodyTemplate([]byte(strings.Repeat(" ", maxTemplateBytes+1)))
	require.ErrorIs(t, err, ErrInput)
}

// FuzzBodyTemplate: any template either fails with ErrInput or fills to
// JSON, and filling never panics.
func FuzzBodyTemplate(f *testing.F) {
	for _, s := range []string{`{"user_id": {{rand 1 2000}}}`, `[{{rand -1 1}}, {{ rand 0 0 }}]`, `{{rand 9 1}}`, `"x"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tpl, err := parseBodyTemplate([]byte(s))
		if err != nil {
			require.ErrorIs(t, err, ErrInput)
			return
		}
		rng := rand.New(rand.NewPCG(3, 4))
		for range 3 {
			require.True(t, json.Valid(tpl.fill(nil, rng)))
		}
	})
}
