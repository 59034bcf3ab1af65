package servingapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature/materialize"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/serving"
)

// internals matches what must never reach a client: addresses (ip:port,
// host:port), socket operations and absolute paths.
var internals = regexp.MustCompile(`\d{1,3}(\.\d{1,3}){3}|\[[0-9a-fA-F:]+\]|[A-Za-z0-9-]+:\d{2,5}\b|\btcp\b|\bi/o timeout\b|(^|[\s'"])/[a-z]`)

// errRedisOutage is the error a Redis store returns when Redis is hung.
var errRedisOutage = fmt.Errorf("read redis: %w: read tcp 127.0.0.1:41294->127.0.0.1:28079: i/o timeout", online.ErrUnavailable)

// errorBody decodes a JSON error body.
func errorBody(t *testing.T, body []byte) (msg, reason string) {
	t.Helper()
	var e map[string]string
	require.NoError(t, json.Unmarshal(body, &e), string(body))
	return e["error"], e["reason"]
}

// fixtureMaterializer runs a real materialize.Materializer over the
// fixture's repository and store, as the CLI's does.
type fixtureMaterializer struct{ f *fixture }

func (m fixtureMaterializer) m() *materialize.Materializer {
	return materialize.New(m.f.Repo, m.f.Store, materialize.Options{Now: func() time.Time { return now }}, nil, nil)
}

func (m fixtureMaterializer) Materialize(ctx context.Context, start, end time.Time, views []string) (any, error) {
	return m.m().Run(ctx, start, end, views, false)
}

func (m fixtureMaterializer) MaterializeIncremental(ctx context.Context, end time.Time, views []string) (any, error) {
	return m.m().RunIncremental(ctx, end, views)
}

// withMaterializer gives f's handler a real materializer.
func withMaterializer(f *fixture) {
	f.h = NewHandler(f.srv, HandlerOptions{MaxBodyBytes: 1 << 16, Materializer: fixtureMaterializer{f}}, f.Logger, nil)
}

// TestOutageBodiesCarryNoInternals: every answer during a Redis outage is
// 503 online_store_unavailable with a message that names no address;
// the log keeps the detail.
func TestOutageBodiesCarryNoInternals(t *testing.T) {
	f, _ := offlineFixture(t)
	withMaterializer(f)
	f.Seed(t)
	f.Store.SetErr(errRedisOutage)
	cases := []struct{ name, method, path, body string }{
		{"get-online-features", http.MethodPost, "/get-online-features", `{"features":["route_stats:eta"],"entities":{"route_id":["r1"]}}`},
		{"stale check", http.MethodPost, "/get-online-features", `{"features":["user_stats:clicks"],"entities":{"user_id":[1]}}`},
		{"push", http.MethodPost, "/push", `{"push_source_name":"user_push","df":{"user_id":[1],"level":[1],"event_timestamp":["2026-01-02T11:00:00Z"]}}`},
		{"push online and offline", http.MethodPost, "/push", `{"push_source_name":"user_push","df":{"user_id":[1],"level":[1],"event_timestamp":["2026-01-02T11:00:00Z"]},"to":"online_and_offline"}`},
		{"materialize", http.MethodPost, "/materialize", `{"start_ts":"2026-01-01T00:00:00Z","end_ts":"2026-01-02T00:00:00Z","feature_views":["user_live"]}`},
		{"materialize-incremental", http.MethodPost, "/materialize-incremental", `{"end_ts":"2026-01-02T00:00:00Z"}`},
		{"health", http.MethodGet, "/health", ``},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			f.h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
			require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
			msg, reason := errorBody(t, rec.Body.Bytes())
			require.Equal(t, serving.ReasonStoreUnavailable, reason)
			require.Contains(t, msg, "online store unavailable")
			require.NotRegexp(t, internals, msg)
		})
	}
	require.Contains(t, f.Logs.String(), "127.0.0.1:28079", "the log keeps the detail")
}

// TestMaterializeEmptyBatchFolder: /materialize of a view whose push
// source's batch folder holds no Parquet file yet succeeds with zero rows,
// and the report's keys are snake_case.
func TestMaterializeEmptyBatchFolder(t *testing.T) {
	f, _ := offlineFixture(t)
	withMaterializer(f)
	for _, path := range []string{"/materialize", "/materialize-incremental"} {
		t.Run(path, func(t *testing.T) {
			code, body := f.post(t, path, `{"start_ts":"2026-01-01T00:00:00Z","end_ts":"2026-01-02T00:00:00Z","feature_views":["user_live"]}`)
			require.Equal(t, http.StatusOK, code, string(body))
			var rep struct {
				Views []map[string]any `json:"views"`
			}
			require.NoError(t, json.Unmarshal(body, &rep), string(body))
			require.Len(t, rep.Views, 1, string(body))
			v := rep.Views[0]
			require.Equal(t, "user_live", v["view"])
			require.InDelta(t, 0, v["rows_read"], 0)
			require.InDelta(t, 0, v["written"], 0)
			for k := range v {
				require.Regexp(t, `^[a-z]+(_[a-z]+)*$`, k, string(body))
			}
		})
	}
}

func TestEntityRowCap(t *testing.T) {
	cases := []struct {
		name  string
		limit int
		rows  int
		code  int
	}{
		{"at the limit", 3, 3, http.StatusOK},
		{"over the limit", 3, 4, http.StatusRequestEntityTooLarge},
		{"default", 0, DefaultMaxEntityRows, http.StatusOK},
		{"over the default", 0, DefaultMaxEntityRows + 1, http.StatusRequestEntityTooLarge},
		{"no limit", -1, DefaultMaxEntityRows + 1, http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, serving.Options{})
			f.Seed(t)
			f.h = NewHandler(f.srv, HandlerOptions{MaxBodyBytes: 1 << 20, MaxEntityRows: tc.limit}, f.Logger, nil)
			ids := make([]string, tc.rows)
			for i := range ids {
				ids[i] = strconv.Itoa(i)
			}
			code, body := f.post(t, "/get-online-features", `{"features":["user_stats:clicks"],"entities":{"user_id":[`+strings.Join(ids, ",")+`]}}`)
			require.Equal(t, tc.code, code, string(body[:min(len(body), 300)]))
			if code != http.StatusOK {
				msg, reason := errorBody(t, body)
				require.Equal(t, serving.ReasonTooManyEntityRows, reason)
				limit := tc.limit
				if limit == 0 {
					limit = DefaultMaxEntityRows
				}
				require.Contains(t, msg, "at most "+strconv.Itoa(limit)+" entity rows")
				require.Contains(t, msg, "user_id")
			}
		})
	}
}

// TestHugeEntityRequest: 1.5 million entity ids are refused at the cap
// while decoding; the request costs about its body, not the ~200 bytes
// per id that decoding every value would.
func TestHugeEntityRequest(t *testing.T) {
	f := newFixture(t, serving.Options{})
	f.Seed(t)
	f.h = NewHandler(f.srv, HandlerOptions{MaxBodyBytes: 32 << 20}, f.Logger, nil)
	const ids = 1_500_000
	var b bytes.Buffer
	b.Grow(ids * 9)
	b.WriteString(`{"features":["user_stats:clicks"],"entities":{"user_id":[`)
	for i := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(1_000_000 + i))
	}
	b.WriteString(`]}}`)
	body := b.Bytes()
	t.Logf("body: %d MB", len(body)>>20)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/get-online-features", bytes.NewReader(body)))
	runtime.ReadMemStats(&after)

	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d MB while answering (body %d MB)", allocated>>20, len(body)>>20)
	require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
	_, reason := errorBody(t, rec.Body.Bytes())
	require.Equal(t, serving.ReasonTooManyEntityRows, reason)
	// Reading the body and keeping the entities' raw JSON cost several
	// times the body (about 100 MB here, the same for any body of this
	// size), the capped decode a fixed 10,000 values; decoding all 1.5M
	// ids as the server did before the cap costs about 400 MB more, which
	// this bound catches.
	require.Less(t, allocated, uint64(16*len(body)), "allocated %d bytes for a %d-byte body", allocated, len(body))
}

func TestPublicMessage(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"store unavailable", &apierr.Error{Kind: apierr.KindUnavailable, Reason: serving.ReasonStoreUnavailable, Msg: "read online features", Err: errRedisOutage}, "read online features: online store unavailable"},
		{"materialize", fmt.Errorf("materialize view 'v': write online store: %w", errRedisOutage), "online store unavailable"},
		{"internal with cause", &apierr.Error{Kind: apierr.KindInternal, Reason: serving.ReasonOfflineWriteFailed, Msg: "push source 'p': append to batch source 'b'", Err: errors.New("open /srv/repo/data/x.parquet: permission denied")}, "push source 'p': append to batch source 'b'"},
		{"internal message naming a path", apierr.Errorf(apierr.KindInternal, serving.ReasonOfflineWriteFailed, "push source 'p': mkdir /srv/repo/data: read-only file system"), "push source 'p': mkdir <path>: read-only file system"},
		{"address in the message", apierr.Errorf(apierr.KindUnavailable, serving.ReasonStoreUnavailable, "dial redis-0.redis:6379 and [::1]:6380 and 10.1.2.3"), "dial <address> and <address> and <address>: online store unavailable"},
		{"plain error", errors.New("open /etc/x: boom"), "internal error"},
		{"deadline", fmt.Errorf("read: %w", context.DeadlineExceeded), "the request did not finish within its deadline"},
		{"request error keeps its detail", invalidf(serving.ReasonInvalidEntityValue, "entity key 'user_id' value 1: Int64 key: want an integer"), "entity key 'user_id' value 1: Int64 key: want an integer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, reason := statusOf(tc.err)
			require.Equal(t, tc.want, publicMessage(code, reason, tc.err))
		})
	}
}
