package console_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/console"
	"github.com/sluice-ml/sluice/internal/gateway/accesslog"
)

func line(tb testing.TB, e accesslog.Entry) string {
	tb.Helper()
	b, err := json.Marshal(e)
	require.NoError(tb, err)
	return string(b) + "\n"
}

func TestErrorLogKeepsTheLatestFailures(t *testing.T) {
	l := console.NewErrorLog(3)
	var stream strings.Builder
	for i := range 6 {
		stream.WriteString(line(t, accesslog.Entry{RequestID: "ok-" + strconv.Itoa(i), Status: 200}))
		stream.WriteString(line(t, accesslog.Entry{RequestID: "e" + strconv.Itoa(i), Status: 503, Reason: "model_unavailable"}))
	}
	stream.WriteString("not json\n{\"status\": \n")
	stream.WriteString(line(t, accesslog.Entry{RequestID: "err-no-status", Status: 200, Error: "upstream reset"}))
	// The access log writes in arbitrary chunks: split lines across writes.
	s := stream.String()
	for i := 0; i < len(s); i += 7 {
		n, err := l.Write([]byte(s[i:min(i+7, len(s))]))
		require.NoError(t, err)
		require.Equal(t, min(7, len(s)-i), n)
	}
	require.Equal(t, uint64(7), l.ErrorsSeen())
	var ids []string
	for _, e := range l.RecentErrors(10) {
		ids = append(ids, e.RequestID)
	}
	require.Equal(t, []string{"err-no-status", "e5", "e4"}, ids, "newest first, bounded")
	require.Len(t, l.RecentErrors(1), 1)
	require.Empty(t, l.RecentErrors(0))

	l.Record(accesslog.Entry{RequestID: "fine", Status: 204})
	l.Record(accesslog.Entry{RequestID: "direct", Status: 429})
	require.Equal(t, "direct", l.RecentErrors(1)[0].RequestID)
	require.Equal(t, uint64(8), l.ErrorsSeen())
}

func TestErrorLogBeforeItFills(t *testing.T) {
	l := console.NewErrorLog(0)
	_, _ = l.Write([]byte(line(t, accesslog.Entry{RequestID: "a", Status: 500}) + line(t, accesslog.Entry{RequestID: "b", Status: 400})))
	got := l.RecentErrors(5)
	require.Len(t, got, 2)
	require.Equal(t, "b", got[0].RequestID)
	require.Equal(t, "a", got[1].RequestID)
}

func FuzzErrorLogWrite(f *testing.F) {
	f.Add([]byte(line(f, accesslog.Entry{RequestID: "x", Status: 500})), 3)
	f.Add([]byte("{\"status\":404}\n{\"status\":"), 1)
	f.Add([]byte(strings.Repeat("{", 100)+"\n"), 50)
	f.Fuzz(func(t *testing.T, data []byte, chunk int) {
		l := console.NewErrorLog(4)
		chunk = max(1, chunk%64+1)
		for i := 0; i < len(data); i += chunk {
			n, err := l.Write(data[i:min(i+chunk, len(data))])
			if err != nil || n != min(chunk, len(data)-i) {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		got := l.RecentErrors(10)
		if len(got) > 4 || uint64(len(got)) > l.ErrorsSeen() {
			t.Fatalf("kept %d of %d seen, ring of 4", len(got), l.ErrorsSeen())
		}
		for _, e := range got {
			if !e.IsError() {
				t.Fatalf("kept a success: %+v", e)
			}
		}
	})
}

func TestGroupErrors(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	e := func(sec int, svc string, status int, reason, id string) accesslog.Entry {
		return accesslog.Entry{Time: t0.Add(time.Duration(sec) * time.Second), Service: svc, Status: status, Reason: reason, RequestID: id, Error: reason + " " + id}
	}
	// Newest first, as RecentErrors returns them.
	groups := console.GroupErrors([]accesslog.Entry{
		e(9, "eta", 404, "missing_feature", "r9"),
		e(8, "eta", 401, "missing_api_key", "r8"),
		e(7, "eta", 404, "missing_feature", "r7"),
		e(6, "rank", 404, "missing_feature", "r6"),
		e(5, "eta", 404, "missing_feature", "r5"),
		e(4, "eta", 503, "upstream_timeout", "r4"),
	})
	require.Len(t, groups, 4)
	require.Equal(t, "eta", groups[0].Service)
	require.Equal(t, "missing_feature", groups[0].Reason)
	require.Equal(t, 3, groups[0].Count)
	require.Equal(t, "r9", groups[0].Last.RequestID, "the example is the latest")
	require.Equal(t, t0.Add(9*time.Second), groups[0].Last.Time)
	// Single failures: the most recent first.
	require.Equal(t, []string{"missing_api_key", "missing_feature", "upstream_timeout"},
		[]string{groups[1].Reason, groups[2].Reason, groups[3].Reason})
	require.Equal(t, "rank", groups[2].Service)
	require.Empty(t, console.GroupErrors(nil))
}

// With a Grafana and a trace URL configured, every page links to its
// dashboard and each failed request to its trace.
func TestLinksOut(t *testing.T) {
	errs := console.NewErrorLog(10)
	errs.Record(accesslog.Entry{Time: time.Now(), Service: "eta", Status: 404, Reason: "missing_feature", RequestID: "r1", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"})
	errs.Record(accesslog.Entry{Time: time.Now(), Service: "eta", Status: 401, Reason: "missing_api_key", RequestID: "r2"})
	c := console.New(console.Sources{Errors: errs, GrafanaURL: "https://grafana.example.test/", TraceURL: "http://jaeger.example.test:16686/trace/{trace_id}"}, nil)
	get := func(path string) string {
		w := httptest.NewRecorder()
		c.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		return w.Body.String()
	}
	page := get("/console/errors")
	require.Contains(t, page, `href="https://grafana.example.test/d/sluice-gateway"`)
	require.Contains(t, page, `href="http://jaeger.example.test:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736"`)
	require.Equal(t, 2, strings.Count(page, ">trace</a>"), "the request with a trace, in its group and in the list; none for the one without")
	require.Contains(t, get("/console/models"), `href="https://grafana.example.test/d/sluice-model-server"`)
	// Without the URLs, no links.
	plain := console.New(console.Sources{Errors: errs}, nil)
	w := httptest.NewRecorder()
	plain.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/console/errors", nil))
	require.NotContains(t, w.Body.String(), "Grafana ↗")
	require.NotContains(t, w.Body.String(), ">trace</a>")
}
