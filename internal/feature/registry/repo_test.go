package registry

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConfigRedis(t *testing.T) {
	dir := writeRepo(t, map[string]string{ConfigFile: "project: p\nonline_store:\n  type: redis\n  redis_type: cluster\n  addrs: [\"127.0.0.1:7000\"]\n  read_timeout: 250ms\nentity_key_serialization_version: 2\n"})
	r, err := Load(t.Context(), dir)
	require.NoError(t, err)
	require.Equal(t, "redis", r.Config.Online.Type)
	require.Equal(t, "cluster", r.Config.Online.Redis.Mode)
	require.Equal(t, []string{"127.0.0.1:7000"}, r.Config.Online.Redis.Addrs)
	require.Equal(t, 250*time.Millisecond, r.Config.Online.Redis.ReadTimeout)
	require.Equal(t, DefaultRegistry, r.Config.Registry)
}

func TestResolveFeatures(t *testing.T) {
	r, err := Load(t.Context(), exampleDir)
	require.NoError(t, err)
	tests := []struct {
		name       string
		refs       []string
		service    string
		want       []feature.FeatureRef
		wantReason string
		wantMsg    string
	}{
		{
			name: "grouped by view in first-seen order, duplicates dropped",
			refs: []string{"route_features:stops", "user_stats:u_f01", "route_features:hour_sin", "user_stats:u_f01"},
			want: []feature.FeatureRef{{View: "route_features", Features: []string{"stops", "hour_sin"}}, {View: "user_stats", Features: []string{"u_f01"}}},
		},
		{name: "unknown view", refs: []string{"user_stat:u_f01"}, wantReason: "unknown_feature_view", wantMsg: "feature view 'user_stat'"},
		{name: "unknown feature", refs: []string{"user_stats:u_f99"}, wantReason: "unknown_feature", wantMsg: "no feature 'u_f99'"},
		{name: "unknown service", service: "eta", wantReason: "unknown_feature_service", wantMsg: "feature service 'eta'"},
		{name: "malformed ref", refs: []string{"user_stats"}, wantReason: "invalid_feature_ref", wantMsg: `"user_stats"`},
		{name: "both", refs: []string{"user_stats:u_f01"}, service: "parcel_eta", wantReason: "invalid_feature_ref"},
		{name: "neither", wantReason: "no_features"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.ResolveFeatures(tt.refs, tt.service)
			if tt.wantReason == "" {
				require.NoError(t, err)
				require.Equal(t, tt.want, got)
				return
			}
			ie, ok := errors.AsType[*apierr.Error](err)
			require.True(t, ok, "error %v is not *apierr.Error", err)
			require.Equal(t, apierr.KindInvalid, ie.Kind)
			require.Equal(t, tt.wantReason, ie.Reason)
			require.Contains(t, ie.Msg, tt.wantMsg)
		})
	}
	t.Run("service result is a copy", func(t *testing.T) {
		got, err := r.ResolveFeatures(nil, "parcel_eta")
		require.NoError(t, err)
		got[0].Features[0] = "mutated"
		again, _ := r.ResolveFeatures(nil, "parcel_eta")
		require.Equal(t, "u_f00", again[0].Features[0])
	})
}

const holderDefs = `entities: [{name: user, join_keys: [user_id], value_type: Int64}]
sources: [{name: s, path: s.parquet, timestamp_field: ts}]
feature_views:
  - {name: v, entities: [user], source: s, ttl: TTL, schema: [{name: f, dtype: Float32}]}
`

func TestHolderSwapUnderReaders(t *testing.T) {
	dir := writeRepo(t, map[string]string{ConfigFile: "project: p\n", "d.yaml": strings.Replace(holderDefs, "TTL", "1h", 1)})
	h, err := NewHolder(t.Context(), dir, nil, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				r := h.Current()
				// Every Repo a reader sees is complete and valid.
				if v := r.Views["v"]; v == nil || (v.TTL != time.Hour && v.TTL != 2*time.Hour) {
					t.Errorf("reader saw view %+v", v)
					return
				}
			}
		})
	}
	write := func(ttl string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(strings.Replace(holderDefs, "TTL", ttl, 1)), 0o644))
	}
	for i := range 20 {
		ttl := []string{"2h", "1h"}[i%2]
		write(ttl)
		r, err := h.Reload(t.Context())
		require.NoError(t, err)
		require.Equal(t, h.Current(), r)
	}
	// Broken definitions leave the last good Repo serving.
	good := h.Current()
	write("-1h")
	r, err := h.Reload(t.Context())
	require.ErrorContains(t, err, "ttl")
	require.Same(t, good, r)
	require.Same(t, good, h.Current())
	cancel()
	wg.Wait()
}

func TestHolderWatch(t *testing.T) {
	dir := writeRepo(t, map[string]string{ConfigFile: "project: p\n", "d.yaml": strings.Replace(holderDefs, "TTL", "1h", 1)})
	h, err := NewHolder(t.Context(), dir, nil, nil)
	require.NoError(t, err)
	first := h.Current()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Watch(ctx, 5*time.Millisecond) }()
	// Rewriting the same content is not a change.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(strings.Replace(holderDefs, "TTL", "1h", 1)), 0o644))
	time.Sleep(30 * time.Millisecond)
	require.Same(t, first, h.Current())
	// A new definitions file is picked up.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "more.yaml"), []byte("entities: [{name: shop, join_keys: [shop_id], value_type: String}]\n"), 0o644))
	harness.WaitFor(t, 5*time.Second, 5*time.Millisecond, "the new entity shop", func() (bool, string) {
		return h.Current().Entities["shop"] != nil, "not picked up"
	})
	cancel()
	require.NoError(t, <-done)
}

func TestPlanAndApply(t *testing.T) {
	dir := writeRepo(t, map[string]string{ConfigFile: "project: p\nregistry: state/reg.json\n", "d.yaml": strings.Replace(holderDefs, "TTL", "1h", 1) +
		"feature_services: [{name: svc, features: [v]}]\n"})
	r, err := Load(t.Context(), dir)
	require.NoError(t, err)
	path := r.Path(r.Config.Registry)
	old, err := ReadSnapshot(path)
	require.NoError(t, err)
	require.Nil(t, old)

	var out bytes.Buffer
	require.NoError(t, WritePlan(&out, Diff(old, r.Snapshot())))
	require.Equal(t, "+ entity 'user'\n+ source 's'\n+ feature view 'v'\n+ feature service 'svc'\n\n4 to add, 0 to change, 0 to remove.\n", out.String())

	require.NoError(t, WriteSnapshot(path, r.Snapshot()))
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "temporary files left behind")
	applied, err := ReadSnapshot(path)
	require.NoError(t, err)
	require.Empty(t, Diff(applied, r.Snapshot()))

	// Change the view: new ttl, a feature added and one retyped; drop the service.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(strings.Replace(
		strings.Replace(holderDefs, "TTL", "7d", 1), "{name: f, dtype: Float32}", "{name: f, dtype: Float64}, {name: g, dtype: \"Array(Float32, 4)\"}", 1)), 0o644))
	r2, err := Load(t.Context(), dir)
	require.NoError(t, err)
	out.Reset()
	require.NoError(t, WritePlan(&out, Diff(applied, r2.Snapshot())))
	require.Equal(t, "~ feature view 'v'\n"+
		"    schema: ~ f Float32 → Float64\n"+
		"        stored f values read NOT_FOUND until the view is re-materialized (never reinterpreted); apply needs --allow-type-change\n"+
		"    schema: + g Array(Float32, 4)\n"+
		"        g reads NOT_FOUND for rows stored before this change until the view is re-materialized\n"+
		"    online store: the values above are unavailable until the view is re-materialized or pushed to; materialization rewrites rows of the old schema even when their event time is unchanged\n"+
		"    ttl: \"1h0m0s\" → \"168h0m0s\"\n"+
		"- feature service 'svc'\n\n0 to add, 1 to change, 1 to remove.\n", out.String())
	require.Equal(t, []string{"v:f Float32 → Float64"}, TypeChanges(applied, r2.Snapshot()))

	// A write that cannot complete leaves the old registry intact.
	require.NoError(t, os.Chmod(filepath.Dir(path), 0o500))
	t.Cleanup(func() { _ = os.Chmod(filepath.Dir(path), 0o755) })
	if os.Geteuid() != 0 { // root ignores the permission
		require.Error(t, WriteSnapshot(path, r2.Snapshot()))
		still, err := ReadSnapshot(path)
		require.NoError(t, err)
		require.Empty(t, Diff(still, r.Snapshot()))
	}
}

func FuzzLoadDefinitions(f *testing.F) {
	for _, p := range []string{"testdata/good/minimal.good.yaml", "testdata/good/multidoc.good.yaml", "testdata/bad/many.yaml", "testdata/bad/types.yaml", "testdata/good/ondemand.good.yaml", "testdata/bad/ondemand.yaml", "testdata/good/stream.good.yaml", "testdata/bad/stream.yaml", "testdata/bad/remote.yaml"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("- &a [*a]\n"))
	f.Add([]byte("feature_services: [{name: s, features: [{view: v, <<: {features: [x]}}]}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fsys := fstest.MapFS{
			ConfigFile: {Data: []byte("project: p\n")},
			"d.yaml":   {Data: data},
			"keys.txt": {Data: []byte("1\n2\n")},
		}
		r, err := load(t.Context(), fsys, "/repo")
		if err != nil {
			errs, ok := errors.AsType[Errors](err)
			if !ok {
				t.Fatalf("error %v is not Errors", err)
			}
			for _, e := range errs {
				if e.Msg == "" {
					t.Fatalf("error without a message: %+v", e)
				}
			}
			return
		}
		// A valid repository snapshots and resolves its services.
		_ = r.Snapshot()
		for name := range r.Services {
			if _, err := r.ResolveFeatures(nil, name); err != nil {
				t.Fatal(err)
			}
		}
		for name := range r.Views {
			keys, kinds := r.JoinKeys(name)
			if len(keys) != len(kinds) || len(keys) == 0 {
				t.Fatalf("view %s: join keys %v %v", name, keys, kinds)
			}
		}
	})
}
