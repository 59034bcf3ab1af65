package serving

import (
	"bufio"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/materialize"
	"github.com/sluice-ml/sluice/internal/feature/offline"
	"github.com/sluice-ml/sluice/internal/feature/online/embedded"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
)

// consistencyDefs: route_stats rows come from a Parquet file; the
// on-demand view combines them with request data, including expressions
// that fail on some inputs (a zero divisor, a modulo by zero).
const consistencyDefs = `
entities:
  - {name: route, join_keys: [route_id], value_type: Int64}
sources:
  - {name: route_file, path: data/routes.parquet, timestamp_field: event_timestamp}
  - name: dispatch
    type: request
    schema: [{name: weather_factor, dtype: Float64}, {name: hour, dtype: Int64}]
feature_views:
  - name: route_stats
    entities: [route]
    source: route_file
    ttl: 1h
    schema:
      - {name: distance_km, dtype: Float32}
      - {name: delay, dtype: Float64}
      - {name: stops, dtype: Int64}
on_demand_feature_views:
  - name: adj
    sources: [route_stats, dispatch]
    schema:
      - {name: weather_km, dtype: Float64, expression: "distance_km * weather_factor"}
      - {name: per_stop, dtype: Float64, expression: "delay / stops"}
      - {name: rush, dtype: Bool, expression: "hour >= 7 && hour <= 9 && delay > 5.0"}
      - {name: stops_mod, dtype: Int64, expression: "stops % (hour - 12)"}
      - {name: third_km, dtype: Float32, expression: "distance_km / 3 + sqrt(abs(delay))"}
      - {name: factor_sq, dtype: Float64, expression: "weather_factor ** 2"}
`

// odServedRow is one captured online answer and, for reading back, one
// row of the historical retrieval's output.
type odServedRow struct {
	RouteID   int64    `parquet:"route_id"`
	WeatherKM *float64 `parquet:"weather_km,optional"`
	PerStop   *float64 `parquet:"per_stop,optional"`
	Rush      *bool    `parquet:"rush,optional"`
	StopsMod  *int64   `parquet:"stops_mod,optional"`
	ThirdKM   *float32 `parquet:"third_km,optional"`
	FactorSq  *float64 `parquet:"factor_sq,optional"`
}

// TestOnDemandServingMatchesHistorical checks that serving and training
// agree on on-demand features: route rows arrive over six hours and are
// materialized as they come; at 20 random moments the served values of
// a few routes (with random request data) are captured, and historical
// retrieval for the same routes, timestamps and request data must return
// the same values (floats within 1e-9 relative, everything else exactly,
// nulls where serving had no PRESENT value).
func TestOnDemandServingMatchesHistorical(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 1))
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, registry.ConfigFile), []byte("project: consistency\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "defs.yaml"), []byte(consistencyDefs), 0o644))
	start := time.Date(2026, 3, 1, 6, 0, 0, 0, time.UTC)
	const routes = 12

	// Route rows: each route updates every 5 to 40 minutes; some values
	// are null, some stops are 0.
	srcCols := []offline.Column{
		{Name: "route_id", Type: feature.Type{Kind: feature.KindInt64}},
		{Name: "event_timestamp", Type: feature.Type{Kind: feature.KindUnixTimestamp}},
		{Name: "distance_km", Type: feature.Type{Kind: feature.KindFloat32}},
		{Name: "delay", Type: feature.Type{Kind: feature.KindFloat64}},
		{Name: "stops", Type: feature.Type{Kind: feature.KindInt64}},
	}
	var srcRows [][]feature.Value
	for r := range int64(routes) {
		end := start.Add(6 * time.Hour)
		if r < 2 {
			end = start.Add(time.Hour) // these go stale
		}
		for at := start.Add(time.Duration(rng.IntN(30)) * time.Minute); at.Before(end); at = at.Add(time.Duration(5+rng.IntN(36))*time.Minute + time.Duration(rng.IntN(1000))*time.Millisecond) {
			row := []feature.Value{{I64: r}, {I64: at.UnixNano()}, {F64: float64(float32(rng.Float64() * 80))}, {F64: rng.NormFloat64() * 6}, {I64: int64(rng.IntN(4))}}
			if rng.IntN(15) == 0 {
				row[2+rng.IntN(3)] = feature.Value{Null: true}
			}
			srcRows = append(srcRows, row)
		}
	}
	writeODParquet(t, filepath.Join(dir, "data", "routes.parquet"), srcCols, srcRows)

	repo, err := registry.Load(t.Context(), dir)
	require.NoError(t, err)
	hold := &servingtest.Holder{}
	hold.P.Store(repo)
	store, err := embedded.Open(filepath.Join(dir, "data", "online.db"), embedded.Options{NoSync: true})
	require.NoError(t, err)
	defer store.Close()

	// 20 random moments, in order; at each, materialize what has arrived
	// and capture what serving answers.
	var moments []time.Time
	for range 20 {
		moments = append(moments, start.Add(20*time.Minute+time.Duration(rng.Int64N(int64(6*time.Hour)))))
	}
	slices.SortFunc(moments, func(a, b time.Time) int { return a.Compare(b) })
	entCols := []offline.Column{
		{Name: "route_id", Type: feature.Type{Kind: feature.KindInt64}},
		{Name: "event_timestamp", Type: feature.Type{Kind: feature.KindUnixTimestamp}},
		{Name: "weather_factor", Type: feature.Type{Kind: feature.KindFloat64}},
		{Name: "hour", Type: feature.Type{Kind: feature.KindInt64}},
	}
	var entRows [][]feature.Value
	var served []odServedRow
	statuses := map[Status]int{}
	for _, at := range moments {
		clock := func() time.Time { return at }
		m := materialize.New(repo, store, materialize.Options{Now: clock}, slog.New(slog.DiscardHandler), nil)
		_, err := m.Run(t.Context(), start.Add(-time.Hour), at, nil, false)
		require.NoError(t, err)
		srv := New(hold, store, Options{Now: clock, StateCacheTTL: -1}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())

		n := 4
		ids := make([]feature.Value, n)
		factors := make([]feature.Value, n)
		hours := make([]feature.Value, n)
		for i := range n {
			ids[i] = feature.Value{I64: int64(rng.IntN(routes + 2))} // two ids that never exist
			factors[i] = feature.Value{F64: 0.5 + rng.Float64()*2}
			switch rng.IntN(12) {
			case 0:
				factors[i] = feature.Value{Null: true}
			case 1:
				factors[i] = feature.Value{F64: math.NaN()}
			}
			hours[i] = feature.Value{I64: int64(rng.IntN(24))}
			entRows = append(entRows, []feature.Value{ids[i], {I64: at.UnixNano()}, factors[i], hours[i]})
		}
		resp, err := srv.GetOnlineFeatures(t.Context(), &Request{
			FeatureService: "", Features: []string{"adj:weather_km", "adj:per_stop", "adj:rush", "adj:stops_mod", "adj:third_km", "adj:factor_sq"},
			Entities:       map[string][]feature.Value{"route_id": ids},
			RequestContext: map[string][]feature.Value{"weather_factor": factors, "hour": hours},
		})
		require.NoError(t, err)
		for i := range n {
			row := odServedRow{RouteID: ids[i].I64}
			cell := func(c int) (*feature.Value, bool) {
				col := &resp.Results[resp.EntityColumns+c]
				statuses[col.Statuses[i]]++
				return &col.Values[i], col.Statuses[i] == StatusPresent
			}
			if v, ok := cell(0); ok {
				row.WeatherKM = &v.F64
			}
			if v, ok := cell(1); ok {
				row.PerStop = &v.F64
			}
			if v, ok := cell(2); ok {
				row.Rush = &v.Bool
			}
			if v, ok := cell(3); ok {
				row.StopsMod = &v.I64
			}
			if v, ok := cell(4); ok {
				f := float32(v.F64)
				row.ThirdKM = &f
			}
			if v, ok := cell(5); ok {
				row.FactorSq = &v.F64
			}
			served = append(served, row)
		}
	}
	t.Logf("statuses of the served values: %v", statuses)
	// The generated data must exercise every path, or the test proves
	// less than it claims.
	require.Positive(t, statuses[StatusPresent], "statuses %v", statuses)
	require.Positive(t, statuses[StatusNotFound], "statuses %v", statuses)
	require.Positive(t, statuses[StatusNullValue], "statuses %v", statuses)
	require.Positive(t, statuses[StatusOutsideMaxAge], "statuses %v", statuses)

	entFile := filepath.Join(dir, "entities.parquet")
	writeODParquet(t, entFile, entCols, entRows)
	out := filepath.Join(dir, "training.parquet")
	require.NoError(t, offline.Historical(t.Context(), repo, entFile, []feature.FeatureRef{{View: "adj"}}, out, offline.Options{TempDir: t.TempDir()}))
	got, err := parquet.ReadFile[odServedRow](out)
	require.NoError(t, err)
	require.Len(t, got, len(served))
	for i := range served {
		w, g := served[i], got[i]
		at := moments[i/4].Format(time.RFC3339Nano)
		require.Equal(t, w.RouteID, g.RouteID)
		requireSameFloat(t, w.WeatherKM, g.WeatherKM, "weather_km", at, w.RouteID)
		requireSameFloat(t, w.PerStop, g.PerStop, "per_stop", at, w.RouteID)
		requireSameFloat(t, w.FactorSq, g.FactorSq, "factor_sq", at, w.RouteID)
		require.Equal(t, w.Rush, g.Rush, "rush of route %d at %s", w.RouteID, at)
		require.Equal(t, w.StopsMod, g.StopsMod, "stops_mod of route %d at %s", w.RouteID, at)
		require.Equal(t, w.ThirdKM, g.ThirdKM, "third_km of route %d at %s", w.RouteID, at)
	}
}

func requireSameFloat(t *testing.T, want, got *float64, name, at string, route int64) {
	t.Helper()
	if want == nil || got == nil {
		require.Equal(t, want == nil, got == nil, "%s of route %d at %s: served %v, historical %v", name, route, at, fmtPtr(want), fmtPtr(got))
		return
	}
	require.LessOrEqual(t, math.Abs(*want-*got), 1e-9*math.Max(math.Abs(*want), math.Abs(*got)),
		"%s of route %d at %s: served %v, historical %v", name, route, at, *want, *got)
}

func fmtPtr(p *float64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// writeODParquet writes rows to a new Parquet file at path.
func writeODParquet(t *testing.T, path string, cols []offline.Column, rows [][]feature.Value) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	f, err := os.Create(path)
	require.NoError(t, err)
	bw := bufio.NewWriter(f)
	w, err := offline.NewWriter(bw, cols)
	require.NoError(t, err)
	for _, r := range rows {
		require.NoError(t, w.Write(r))
	}
	require.NoError(t, w.Close())
	require.NoError(t, bw.Flush())
	require.NoError(t, f.Close())
}
