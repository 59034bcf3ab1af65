package materialize

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/offline"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/embedded"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// base is the fixtures' reference time; tN is base + N hours.
var base = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func tN(n int) time.Time { return base.Add(time.Duration(n) * time.Hour) }

var clicksSchema = []feature.Field{{Name: "clicks", Type: feature.Type{Kind: feature.KindInt64}}}

// row is a source row of the test views: one int64 join key, one int64
// feature.
type row struct {
	user    int64
	event   time.Time
	created time.Time // zero: none
	clicks  int64
}

func (r row) offline() offline.Row {
	var created int64
	if !r.created.IsZero() {
		created = r.created.UnixNano()
	}
	return offline.Row{
		Keys:      []feature.Value{{I64: r.user}},
		EventTS:   r.event.UnixNano(),
		CreatedTS: created,
		Values:    []feature.Value{{I64: r.clicks}},
	}
}

// fakeSource serves rows per view like offline.ScanView: the rows whose
// event timestamp is in [start, end], in order. Tests change it between
// runs.
type fakeSource struct {
	mu      sync.Mutex
	rows    map[string][]row
	failOn  map[string]int // view → fail after this many rows
	scanned map[string][2]time.Time
}

func newFakeSource() *fakeSource {
	return &fakeSource{rows: map[string][]row{}, failOn: map[string]int{}, scanned: map[string][2]time.Time{}}
}

func (s *fakeSource) add(view string, rows ...row) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows[view] = append(s.rows[view], rows...)
}

func (s *fakeSource) scan(ctx context.Context, _ *registry.Repo, v *feature.View, start, end time.Time, fn func(offline.Row) error) error {
	s.mu.Lock()
	rows := append([]row(nil), s.rows[v.Name]...)
	fail, failing := s.failOn[v.Name]
	s.scanned[v.Name] = [2]time.Time{start, end}
	s.mu.Unlock()
	n := 0
	for _, r := range rows {
		if r.event.Before(start) || r.event.After(end) {
			continue
		}
		if failing && n == fail {
			return errors.New("corrupt parquet file 'x.parquet': column 'clicks'")
		}
		n++
		if err := fn(r.offline()); err != nil {
			return err
		}
	}
	return ctx.Err()
}

func userView(name string) *feature.View {
	return &feature.View{Name: name, Entities: []string{"user"}, Schema: clicksSchema, TTL: 24 * time.Hour, Online: true, Source: "src"}
}

func testRepo(views ...*feature.View) *registry.Repo {
	r := &registry.Repo{
		Project:  "test",
		Entities: map[string]*feature.Entity{"user": {Name: "user", JoinKey: "user_id", ValueType: feature.Type{Kind: feature.KindInt64}}},
		Sources:  map[string]*feature.Source{"src": {Name: "src", Kind: feature.SourceFile, Path: "data.parquet", TimestampField: "ts"}},
		Views:    map[string]*feature.View{},
	}
	for _, v := range views {
		r.Views[v.Name] = v
	}
	return r
}

func openStore(t *testing.T) online.Store {
	t.Helper()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "online.db"), embedded.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	return st
}

// clock is a settable test clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

type harness struct {
	t     *testing.T
	repo  *registry.Repo
	store online.Store
	src   *fakeSource
	clk   *clock
	m     *Materializer
}

func newHarness(t *testing.T, store online.Store, opts Options, views ...*feature.View) *harness {
	t.Helper()
	if store == nil {
		store = openStore(t)
	}
	h := &harness{t: t, repo: testRepo(views...), store: store, src: newFakeSource(), clk: &clock{t: tN(1000)}}
	opts.Now = h.clk.now
	h.m = New(h.repo, store, opts, nil, nil)
	h.m.scan = h.src.scan
	return h
}

func entityKey(t *testing.T, user int64) []byte {
	t.Helper()
	k, err := feature.AppendEntityKey(nil, []feature.Kind{feature.KindInt64}, []feature.Value{{I64: user}})
	require.NoError(t, err)
	return k
}

// stored returns the stored records of users in view (nil Payload and
// zero timestamps for a missing one), as their storage bytes.
func (h *harness) stored(view string, users ...int64) [][]byte {
	h.t.Helper()
	keys := make([]online.Key, len(users))
	for i, u := range users {
		keys[i] = online.Key{View: view, Entity: entityKey(h.t, u)}
	}
	res, err := h.store.Read(h.t.Context(), keys)
	require.NoError(h.t, err)
	out := make([][]byte, len(res))
	for i, r := range res {
		if r.Found {
			out[i] = feature.AppendRecord(nil, r.Record)
		}
	}
	return out
}

// clicks returns the stored clicks of each user (-1 when not found).
func (h *harness) clicks(view string, users ...int64) []int64 {
	h.t.Helper()
	out := make([]int64, len(users))
	for i, b := range h.stored(view, users...) {
		if b == nil {
			out[i] = -1
			continue
		}
		rec, err := feature.ParseRecord(b)
		require.NoError(h.t, err)
		vals, err := feature.DecodeValues(rec.Payload, clicksSchema, nil)
		require.NoError(h.t, err)
		out[i] = vals[0].I64
	}
	return out
}

func (h *harness) state(view string) (feature.ViewState, bool) {
	h.t.Helper()
	b, err := h.store.GetMeta(h.t.Context(), feature.ViewStateName(view))
	require.NoError(h.t, err)
	if b == nil {
		return feature.ViewState{}, false
	}
	var st feature.ViewState
	require.NoError(h.t, json.Unmarshal(b, &st))
	return st, true
}

func TestRunTwiceChangesNothing(t *testing.T) {
	h := newHarness(t, nil, Options{BatchSize: 2}, userView("user_stats"))
	h.src.add("user_stats",
		row{user: 1, event: tN(1), clicks: 10},
		row{user: 2, event: tN(2), clicks: 20},
		row{user: 1, event: tN(3), clicks: 11},
		row{user: 3, event: tN(4), clicks: 30},
		row{user: 2, event: tN(1), clicks: 19}, // late row, older than user 2's latest
	)
	rep, err := h.m.Run(t.Context(), tN(0), tN(10), nil, false)
	require.NoError(t, err)
	require.Len(t, rep.Views, 1)
	first := rep.Views[0]
	require.Equal(t, int64(5), first.RowsRead)
	require.Equal(t, int64(3), first.Written)
	require.Equal(t, []int64{11, 20, 30}, h.clicks("user_stats", 1, 2, 3))
	before := h.stored("user_stats", 1, 2, 3)

	h.clk.t = h.clk.t.Add(time.Hour)
	rep, err = h.m.Run(t.Context(), tN(0), tN(10), nil, false)
	require.NoError(t, err)
	second := rep.Views[0]
	require.Equal(t, int64(0), second.Written)
	require.Equal(t, int64(3), second.Skipped)
	require.Equal(t, before, h.stored("user_stats", 1, 2, 3), "stored records must be byte-identical")

	st, ok := h.state("user_stats")
	require.True(t, ok)
	require.True(t, st.Watermark.Equal(tN(10)))
	require.True(t, st.NewestEventTS.Equal(tN(4)))
	require.True(t, st.LastSuccess.Equal(h.clk.t))
	require.Equal(t, int64(0), st.Rows)
}

func TestLatestRowPerEntity(t *testing.T) {
	tests := []struct {
		name string
		rows []row
		want int64
	}{
		{"later event wins over file order", []row{
			{user: 1, event: tN(5), clicks: 5},
			{user: 1, event: tN(3), clicks: 3},
		}, 5},
		{"created ts breaks event ts ties", []row{
			{user: 1, event: tN(5), created: tN(7), clicks: 7},
			{user: 1, event: tN(5), created: tN(6), clicks: 6},
		}, 7},
		{"created ts does not beat a later event", []row{
			{user: 1, event: tN(5), created: tN(9), clicks: 9},
			{user: 1, event: tN(6), created: tN(6), clicks: 6},
		}, 6},
		{"exact tie goes to the later row", []row{
			{user: 1, event: tN(5), created: tN(5), clicks: 1},
			{user: 1, event: tN(5), created: tN(5), clicks: 2},
		}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil, Options{}, userView("v"))
			h.src.add("v", tc.rows...)
			rep, err := h.m.Run(t.Context(), tN(0), tN(10), nil, false)
			require.NoError(t, err)
			require.Equal(t, int64(1), rep.Views[0].Entities)
			require.Equal(t, []int64{tc.want}, h.clicks("v", 1))
		})
	}
}

func TestOlderRowNeverOverwritesNewerAndOverwriteDoes(t *testing.T) {
	h := newHarness(t, nil, Options{}, userView("v"))
	h.src.add("v",
		row{user: 1, event: tN(1), clicks: 100}, // old window
		row{user: 2, event: tN(2), clicks: 200},
		row{user: 1, event: tN(11), clicks: 101}, // new window
		row{user: 2, event: tN(12), clicks: 201},
	)
	_, err := h.m.Run(t.Context(), tN(10), tN(20), nil, false)
	require.NoError(t, err)
	require.Equal(t, []int64{101, 201}, h.clicks("v", 1, 2))

	// Re-running an earlier window offers older rows: none may win.
	rep, err := h.m.Run(t.Context(), tN(0), tN(5), nil, false)
	require.NoError(t, err)
	require.Equal(t, int64(0), rep.Views[0].Written)
	require.Equal(t, int64(2), rep.Views[0].Skipped)
	require.Equal(t, []int64{101, 201}, h.clicks("v", 1, 2))
	st, _ := h.state("v")
	require.True(t, st.Watermark.Equal(tN(20)), "the watermark must not move backwards: %v", st.Watermark)
	require.True(t, st.NewestEventTS.Equal(tN(12)))

	// --overwrite corrects history.
	rep, err = h.m.Run(t.Context(), tN(0), tN(5), nil, true)
	require.NoError(t, err)
	require.Equal(t, int64(2), rep.Views[0].Written)
	require.Equal(t, []int64{100, 200}, h.clicks("v", 1, 2))
	st, _ = h.state("v")
	require.True(t, st.Watermark.Equal(tN(5)), "overwrite resets the watermark: %v", st.Watermark)
}

func TestFutureEndIsClamped(t *testing.T) {
	h := newHarness(t, nil, Options{}, userView("v"))
	now := h.clk.t
	h.src.add("v",
		row{user: 1, event: now.Add(-time.Hour), clicks: 1},
		row{user: 1, event: now.Add(time.Hour), clicks: 2}, // from the future: not materialized
	)
	rep, err := h.m.Run(t.Context(), now.Add(-48*time.Hour), now.Add(365*24*time.Hour), nil, false)
	require.NoError(t, err)
	require.True(t, rep.Views[0].End.Equal(now))
	require.Equal(t, int64(1), rep.Views[0].RowsRead)
	require.Equal(t, []int64{1}, h.clicks("v", 1))
	st, _ := h.state("v")
	require.True(t, st.Watermark.Equal(now), "watermark %v, want now %v", st.Watermark, now)

	// A start in the future is nothing to do, not an error.
	rep, err = h.m.Run(t.Context(), now.Add(time.Hour), now.Add(2*time.Hour), nil, false)
	require.NoError(t, err)
	require.Contains(t, rep.Views[0].Note, "nothing to do")

	_, err = h.m.Run(t.Context(), tN(5), tN(4), nil, false)
	require.ErrorContains(t, err, "before start")
}

func TestIncremental(t *testing.T) {
	ttlView := userView("ttl_view") // ttl 24h
	noTTL := userView("no_ttl")
	noTTL.TTL = 0
	h := newHarness(t, nil, Options{}, ttlView, noTTL)
	now := h.clk.t
	for _, v := range []string{"ttl_view", "no_ttl"} {
		h.src.add(v,
			row{user: 1, event: now.Add(-30 * 24 * time.Hour), clicks: 1}, // a month ago
			row{user: 2, event: now.Add(-2 * time.Hour), clicks: 2},
		)
	}

	// Never materialized: now − ttl, or 52 weeks back without a ttl.
	rep, err := h.m.RunIncremental(t.Context(), now.Add(24*time.Hour), nil)
	require.NoError(t, err)
	byView := map[string]ViewReport{}
	for _, vr := range rep.Views {
		byView[vr.View] = vr
	}
	require.True(t, byView["ttl_view"].Start.Equal(now.Add(-24*time.Hour)))
	require.Equal(t, int64(1), byView["ttl_view"].RowsRead)
	require.True(t, byView["no_ttl"].Start.Equal(now.Add(-52*7*24*time.Hour)))
	require.Equal(t, int64(2), byView["no_ttl"].RowsRead)
	for _, vr := range rep.Views {
		require.True(t, vr.End.Equal(now), "%s: end %v clamped to now", vr.View, vr.End)
	}

	// New rows arrive; the next run starts at the watermark and reads
	// only them.
	later := now.Add(3 * time.Hour)
	h.src.add("ttl_view",
		row{user: 2, event: now.Add(time.Hour), clicks: 22},
		row{user: 3, event: now.Add(2 * time.Hour), clicks: 33},
	)
	h.clk.t = later
	rep, err = h.m.RunIncremental(t.Context(), later, []string{"ttl_view"})
	require.NoError(t, err)
	require.Len(t, rep.Views, 1)
	vr := rep.Views[0]
	require.True(t, vr.Start.Equal(now), "start %v, want the watermark %v", vr.Start, now)
	require.Equal(t, int64(2), vr.RowsRead)
	require.Equal(t, int64(2), vr.Written)
	require.Equal(t, []int64{-1, 22, 33}, h.clicks("ttl_view", 1, 2, 3))
	st, _ := h.state("ttl_view")
	require.True(t, st.Watermark.Equal(later))

	// An END before the watermark has nothing to do.
	rep, err = h.m.RunIncremental(t.Context(), now, []string{"ttl_view"})
	require.NoError(t, err)
	require.Contains(t, rep.Views[0].Note, "nothing to do")
	require.Equal(t, int64(0), rep.Views[0].RowsRead)
}

func TestIncrementalLateOverlap(t *testing.T) {
	h := newHarness(t, nil, Options{LateOverlap: 2 * time.Hour}, userView("v"))
	now := h.clk.t
	h.src.add("v", row{user: 1, event: now.Add(-time.Hour), clicks: 1})
	_, err := h.m.RunIncremental(t.Context(), now, nil)
	require.NoError(t, err)
	// A row arrives late with an event timestamp before the watermark.
	h.src.add("v", row{user: 2, event: now.Add(-30 * time.Minute), clicks: 2})
	h.clk.t = now.Add(time.Hour)
	rep, err := h.m.RunIncremental(t.Context(), h.clk.t, nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.Views[0].Written)
	require.Equal(t, int64(1), rep.Views[0].Skipped)
	require.Equal(t, []int64{1, 2}, h.clicks("v", 1, 2))
}

// failingStore fails writes of one view.
type failingStore struct {
	online.Store
	view string
}

func (s failingStore) Write(ctx context.Context, entries []online.Entry, opts online.WriteOptions) (online.WriteStats, error) {
	for _, e := range entries {
		if e.Key.View == s.view {
			return online.WriteStats{}, online.ErrUnavailable
		}
	}
	return s.Store.Write(ctx, entries, opts)
}

func TestFailedViewLeavesNoState(t *testing.T) {
	t.Run("write fails", func(t *testing.T) {
		store := failingStore{Store: openStore(t), view: "bad"}
		h := newHarness(t, store, Options{}, userView("bad"), userView("good"))
		h.src.add("bad", row{user: 1, event: tN(1), clicks: 1})
		h.src.add("good", row{user: 1, event: tN(1), clicks: 1})
		rep, err := h.m.Run(t.Context(), tN(0), tN(10), nil, false)
		require.ErrorIs(t, err, online.ErrUnavailable)
		require.ErrorContains(t, err, "'bad'")
		require.Len(t, rep.Views, 2)
		require.Error(t, rep.Views[0].Err)
		require.NoError(t, rep.Views[1].Err)
		_, ok := h.state("bad")
		require.False(t, ok, "a failed view must not record state")
		_, ok = h.state("good")
		require.True(t, ok, "the other views still run")
	})
	t.Run("scan fails midway", func(t *testing.T) {
		h := newHarness(t, nil, Options{BatchSize: 1}, userView("v"))
		h.src.add("v", row{user: 1, event: tN(1), clicks: 1})
		_, err := h.m.Run(t.Context(), tN(0), tN(2), nil, false)
		require.NoError(t, err)
		before, _ := h.state("v")

		h.src.add("v", row{user: 1, event: tN(5), clicks: 5}, row{user: 2, event: tN(6), clicks: 6})
		h.src.failOn["v"] = 1
		h.clk.t = h.clk.t.Add(time.Hour)
		_, err = h.m.Run(t.Context(), tN(0), tN(10), nil, false)
		require.ErrorContains(t, err, "column 'clicks'")
		after, _ := h.state("v")
		require.Equal(t, before, after, "state unchanged")
		require.Equal(t, []int64{1, -1}, h.clicks("v", 1, 2), "nothing written from a failed scan")
	})
}

func TestHotSubset(t *testing.T) {
	v := userView("user_stats")
	v.Hot = &feature.HotSubset{View: "user_stats__hot", Keys: []feature.Value{{I64: 2}, {I64: 9}}, TTL: time.Hour}
	h := newHarness(t, nil, Options{}, v)
	h.src.add("user_stats",
		row{user: 1, event: tN(1), clicks: 1},
		row{user: 2, event: tN(1), clicks: 2},
		row{user: 2, event: tN(2), clicks: 3},
	)
	rep, err := h.m.Run(t.Context(), tN(0), tN(10), nil, false)
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.Views[0].HotWritten)
	require.Equal(t, []int64{1, 3}, h.clicks("user_stats", 1, 2))
	require.Equal(t, []int64{-1, 3}, h.clicks("user_stats__hot", 1, 2))
	require.Equal(t, h.stored("user_stats", 2), h.stored("user_stats__hot", 2), "same record in the hot view")
	st, ok := h.state("user_stats__hot")
	require.True(t, ok)
	require.True(t, st.Watermark.Equal(tN(10)))
}

func TestViewSelection(t *testing.T) {
	off := userView("offline_only")
	off.Online = false
	h := newHarness(t, nil, Options{}, userView("a"), userView("b"), off)
	h.src.add("a", row{user: 1, event: tN(1), clicks: 1})
	h.src.add("b", row{user: 1, event: tN(1), clicks: 1})
	h.src.add("offline_only", row{user: 1, event: tN(1), clicks: 1})

	_, err := h.m.Run(t.Context(), tN(0), tN(2), []string{"a", "nope"}, false)
	require.ErrorContains(t, err, "unknown feature view 'nope'")
	_, ok := h.state("a")
	require.False(t, ok, "an unknown view fails the run before anything runs")

	rep, err := h.m.Run(t.Context(), tN(0), tN(2), []string{"b"}, false)
	require.NoError(t, err)
	require.Len(t, rep.Views, 1)
	require.Equal(t, "b", rep.Views[0].View)

	rep, err = h.m.Run(t.Context(), tN(0), tN(2), nil, false)
	require.NoError(t, err)
	require.Len(t, rep.Views, 3)
	require.Equal(t, "offline_only", rep.Views[2].View)
	require.Contains(t, rep.Views[2].Note, "offline-only")
	require.Equal(t, []int64{-1}, h.clicks("offline_only", 1))
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	h := newHarness(t, nil, Options{}, userView("v"))
	h.m = New(h.repo, h.store, Options{Now: h.clk.now}, nil, reg)
	h.m.scan = h.src.scan
	h.src.add("v", row{user: 1, event: tN(1), clicks: 1}, row{user: 2, event: tN(1), clicks: 2})
	for range 2 {
		_, err := h.m.Run(t.Context(), tN(0), tN(2), nil, false)
		require.NoError(t, err)
	}
	require.InDelta(t, 2, testutil.ToFloat64(h.m.met.rows.WithLabelValues("v", "written")), 0)
	require.InDelta(t, 2, testutil.ToFloat64(h.m.met.rows.WithLabelValues("v", "skipped")), 0)
	require.InDelta(t, float64(h.clk.t.Unix()), testutil.ToFloat64(h.m.met.lastMaterial.WithLabelValues("v")), 0.001)
	n, err := testutil.GatherAndCount(reg, "sluice_feature_materialize_duration_seconds")
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

func TestPushgateway(t *testing.T) {
	type push struct{ method, path, body string }
	var mu sync.Mutex
	var pushes []push
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		pushes = append(pushes, push{r.Method, r.URL.Path, string(b)})
		code := status
		mu.Unlock()
		w.WriteHeader(code)
	}))
	defer srv.Close()

	h := newHarness(t, nil, Options{Pushgateway: srv.URL}, userView("v"))
	h.src.add("v", row{user: 1, event: tN(1), clicks: 1})
	_, err := h.m.Run(t.Context(), tN(0), tN(2), nil, false)
	require.NoError(t, err)
	mu.Lock()
	require.Len(t, pushes, 1)
	p := pushes[0]
	mu.Unlock()
	require.Equal(t, http.MethodPut, p.method)
	require.Equal(t, "/metrics/job/sluice_materialize/view/v", p.path)
	// The body is protobuf-delimited; the metric names appear in it verbatim.
	require.Contains(t, p.body, "sluice_feature_view_last_materialized_timestamp_seconds")
	require.Contains(t, p.body, "sluice_feature_view_newest_event_timestamp_seconds")

	// A failing Pushgateway is logged, not fatal.
	mu.Lock()
	status = http.StatusInternalServerError
	mu.Unlock()
	var logs bytes.Buffer
	h.m.log = newTextLogger(&logs)
	_, err = h.m.Run(t.Context(), tN(0), tN(2), nil, false)
	require.NoError(t, err)
	require.Contains(t, logs.String(), "push freshness gauges")
}

func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	clk := &clock{t: base}
	p := newProgress(&buf, "user_stats", clk.now)
	require.False(t, p.tty)
	p.update(256) // too soon
	clk.t = base.Add(500 * time.Millisecond)
	p.update(512) // still under a second
	clk.t = base.Add(time.Second)
	p.update(1000) // not a check point
	p.update(45312)
	clk.t = base.Add(1500 * time.Millisecond)
	p.update(45568) // under a second since the last line
	clk.t = base.Add(2 * time.Second)
	p.done(90000, "written 3  skipped 0")
	require.Equal(t,
		"user_stats  45,312 rows  45,312 rows/s\n"+
			"user_stats  90,000 rows  45,000 rows/s  written 3  skipped 0\n",
		buf.String())

	var none *progress
	none.update(256) // a nil progress is a no-op
	none.done(1, "")
	require.Nil(t, newProgress(nil, "v", clk.now))
}

func TestProgressTerminal(t *testing.T) {
	var buf bytes.Buffer
	clk := &clock{t: base}
	p := newProgress(&buf, "v", clk.now)
	p.tty, p.interval = true, 200*time.Millisecond // as on a terminal
	clk.t = base.Add(250 * time.Millisecond)
	p.update(512)
	p.done(512, "")
	require.Equal(t, "\rv  512 rows  2,048 rows/s\x1b[K\rv  512 rows  2,048 rows/s\x1b[K\n", buf.String())
}

func TestCommas(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 45210: "45,210", 120334: "120,334", 1234567: "1,234,567", -1234: "-1,234"} {
		require.Equal(t, want, commas(n), "%d", n)
	}
}

func TestProgressDuringRun(t *testing.T) {
	var buf bytes.Buffer
	h := newHarness(t, nil, Options{Progress: &buf}, userView("user_stats"))
	h.src.add("user_stats", row{user: 1, event: tN(1), clicks: 1})
	_, err := h.m.Run(t.Context(), tN(0), tN(2), nil, false)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(buf.String(), "user_stats  1 rows  "), buf.String())
	require.Contains(t, buf.String(), "written 1  skipped 0\n")
}
