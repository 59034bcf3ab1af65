package serving

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/embedded"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
)

// BenchmarkOnDemand measures what on-demand features add to a read of
// stored ones: the same 50 Float32 features of the view "wide" from the
// embedded store, alone ("stored") and with on-demand features computed
// from two of them and a request field ("+od1": one expression, "+od4":
// four), for 1 and 100 entity rows, through the Go API.
func BenchmarkOnDemand(b *testing.B) {
	srv := onDemandBenchServer(b)
	stored := make([]string, 50)
	for i := range stored {
		stored[i] = fmt.Sprintf("wide:f%02d", i)
	}
	for _, rows := range []int{1, 100} {
		ids := make([]feature.Value, rows)
		factors := make([]feature.Value, rows)
		for r := range rows {
			ids[r] = feature.Value{I64: int64(r * 7 % 1000)}
			factors[r] = feature.Value{F64: 1.25}
		}
		for _, tc := range []struct {
			name  string
			extra []string
		}{
			{"stored", nil},
			{"+od1", []string{"wide_od:scaled"}},
			{"+od4", []string{"wide_od:scaled", "wide_od:ratio", "wide_od:over", "wide_od:bucket"}},
		} {
			b.Run(fmt.Sprintf("%dx50%s", rows, tc.name), func(b *testing.B) {
				req := &Request{
					Features:       append(append([]string(nil), stored...), tc.extra...),
					Entities:       map[string][]feature.Value{"user_id": ids},
					RequestContext: map[string][]feature.Value{"factor": factors},
				}
				resp, err := srv.GetOnlineFeatures(b.Context(), req)
				require.NoError(b, err)
				for _, c := range resp.Results[resp.EntityColumns:] {
					require.Equal(b, StatusPresent, c.Statuses[0])
				}
				b.ReportAllocs()
				// CPU time per call (this process's, GC included): on a
				// shared machine it varies far less than ns/op.
				cpu0 := processCPU(b)
				for b.Loop() {
					if _, err := srv.GetOnlineFeatures(b.Context(), req); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// onDemandBenchServer loads a repository with the view "wide" (50
// Float32 features of user) and the on-demand view "wide_od" over it and
// a request field, and stores 1,000 users' rows in an embedded store.
func onDemandBenchServer(b *testing.B) *Server {
	b.Helper()
	dir := b.TempDir()
	var defs strings.Builder
	defs.WriteString(`entities:
  - {name: user, join_keys: [user_id], value_type: Int64}
sources:
  - {name: user_file, path: data/users.parquet, timestamp_field: event_timestamp}
  - {name: req, type: request, schema: [{name: factor, dtype: Float64}]}
feature_views:
  - name: wide
    entities: [user]
    source: user_file
    ttl: 1d
    schema:
`)
	for i := range 50 {
		fmt.Fprintf(&defs, "      - {name: f%02d, dtype: Float32}\n", i)
	}
	defs.WriteString(`on_demand_feature_views:
  - name: wide_od
    sources: [wide, req]
    schema:
      - {name: scaled, dtype: Float64, expression: "f01 * factor"}
      - {name: ratio, dtype: Float64, expression: "f02 / (f03 + 1)"}
      - {name: over, dtype: Bool, expression: "f04 * factor > 2.0"}
      - {name: bucket, dtype: Int64, expression: "int(f05 * 10) % 7"}
`)
	require.NoError(b, os.WriteFile(filepath.Join(dir, registry.ConfigFile), []byte("project: bench\n"), 0o644))
	require.NoError(b, os.WriteFile(filepath.Join(dir, "defs.yaml"), []byte(defs.String()), 0o644))
	repo, err := registry.Load(b.Context(), dir)
	require.NoError(b, err)
	h := &servingtest.Holder{}
	h.P.Store(repo)

	store, err := embedded.Open(filepath.Join(dir, "online.db"), embedded.Options{NoSync: true})
	require.NoError(b, err)
	b.Cleanup(func() { _ = store.Close() })
	v := repo.Views["wide"]
	vals := make([]feature.Value, 50)
	for i := range vals {
		vals[i] = feature.Value{F64: float64(float32(float64(i) / 4))}
	}
	payload, err := feature.AppendValues(nil, v.Schema, vals)
	require.NoError(b, err)
	var entries []online.Entry
	for u := range int64(1000) {
		ek, err := feature.AppendEntityKey(nil, []feature.Kind{feature.KindInt64}, []feature.Value{{I64: u}})
		require.NoError(b, err)
		entries = append(entries, online.Entry{Key: online.Key{View: "wide", Entity: ek}, Record: feature.Record{EventTS: now.Add(-time.Minute).UnixNano(), Schema: feature.Fingerprint(v.Schema), Payload: payload}})
	}
	_, err = store.Write(b.Context(), entries, online.WriteOptions{})
	require.NoError(b, err)
	require.NoError(b, store.PutMeta(b.Context(), feature.ViewStateName("wide"), []byte(`{"last_success":"2026-01-02T11:59:00Z"}`)))
	return New(h, store, Options{Now: func() time.Time { return now }}, nil, nil)
}

// processCPU is this process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
