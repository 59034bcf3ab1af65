package modelrepo

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
)

// entrySize is what put charges for one output tensor of n data bytes
// named "OUT" with a 1-dimensional shape.
func entrySize(n int) int64 {
	return cacheEntryOverhead + cacheTensorOverhead + int64(len("OUT")) + 8 + int64(n)
}

func bytesTensor(n int, fill byte) []infer.Tensor {
	data := make([]byte, n)
	for i := range data {
		data[i] = fill
	}
	return []infer.Tensor{{Name: "OUT", DataType: infer.Uint8, Shape: infer.Shape{int64(n)}, Data: data}}
}

func testCache(limit int64) (*responseCache, prometheus.Gauge, prometheus.Counter) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_cache_bytes", Help: "Cache bytes."})
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_cache_evictions_total", Help: "Cache evictions."})
	return newResponseCache(limit, g, c), g, c
}

func TestCacheEvictsLeastRecentlyUsedByBytes(t *testing.T) {
	one := entrySize(100)
	c, gauge, evictions := testCache(3 * one)
	key := func(i int) cacheKey { return cacheKey{byte(i)} }
	for i := range 3 {
		c.put(key(i), 1, bytesTensor(100, byte(i)))
	}
	used, n := c.size()
	require.Equal(t, 3*one, used)
	require.Equal(t, 3, n)
	require.InDelta(t, float64(3*one), testutil.ToFloat64(gauge), 0)

	// Touch 0, so 1 is now the least recently used.
	_, ok := c.get(key(0))
	require.True(t, ok)
	c.put(key(3), 1, bytesTensor(100, 3))
	_, ok = c.get(key(1))
	require.False(t, ok, "the least recently used entry is evicted")
	for _, i := range []int{0, 2, 3} {
		got, ok := c.get(key(i))
		require.True(t, ok, "entry %d", i)
		require.Equal(t, bytesTensor(100, byte(i)), got)
	}
	require.InDelta(t, 1, testutil.ToFloat64(evictions), 0)

	// One entry twice the size pushes out two.
	c.put(key(4), 1, bytesTensor(int(2*one)-int(entrySize(0)), 4))
	used, n = c.size()
	require.LessOrEqual(t, used, 3*one)
	require.Equal(t, 2, n)
	require.InDelta(t, 3, testutil.ToFloat64(evictions), 0)

	// A response larger than the whole cache is not stored and evicts
	// nothing.
	_, fits := c.put(key(5), 1, bytesTensor(int(3*one), 5))
	require.False(t, fits)
	_, ok = c.get(key(5))
	require.False(t, ok)
	_, n = c.size()
	require.Equal(t, 2, n)
}

func TestCacheCopiesWhatItStoresAndReturns(t *testing.T) {
	c, _, _ := testCache(1 << 20)
	k := cacheKey{1}
	outs := bytesTensor(4, 7)
	c.put(k, 1, outs)
	outs[0].Data[0] = 99 // the caller reuses its buffer
	got, ok := c.get(k)
	require.True(t, ok)
	require.Equal(t, []byte{7, 7, 7, 7}, got[0].Data)
	got[0].Data[1] = 42 // a client changes its copy
	again, _ := c.get(k)
	require.Equal(t, []byte{7, 7, 7, 7}, again[0].Data)
}

func TestCacheDropsOneLoadsEntries(t *testing.T) {
	c, gauge, _ := testCache(1 << 20)
	c.put(cacheKey{1}, 1, bytesTensor(10, 1))
	c.put(cacheKey{2}, 2, bytesTensor(10, 2))
	c.put(cacheKey{3}, 1, bytesTensor(10, 3))
	require.Equal(t, 2, c.drop(1))
	_, n := c.size()
	require.Equal(t, 1, n)
	_, ok := c.get(cacheKey{2})
	require.True(t, ok)
	require.InDelta(t, float64(entrySize(10)), testutil.ToFloat64(gauge), 0)
}

func TestCacheKeyDistinguishesRequests(t *testing.T) {
	lv := &loaded{model: "m", version: 1, id: 1}
	base := []infer.Tensor{int32Tensor("A", []int64{1, 2}, 1, 2), int32Tensor("B", []int64{1, 2}, 3, 4)}
	outs := []string{"OUT"}
	k0 := newCacheKey(lv, base, outs)
	require.Equal(t, k0, newCacheKey(&loaded{model: "m", version: 1, id: 1}, cloneTensors(base), []string{"OUT"}), "equal requests share a key")

	change := map[string]func() cacheKey{
		"model":       func() cacheKey { return newCacheKey(&loaded{model: "n", version: 1, id: 1}, base, outs) },
		"version":     func() cacheKey { return newCacheKey(&loaded{model: "m", version: 2, id: 1}, base, outs) },
		"load":        func() cacheKey { return newCacheKey(&loaded{model: "m", version: 1, id: 2}, base, outs) },
		"outputs":     func() cacheKey { return newCacheKey(lv, base, []string{"OUT", "OUT2"}) },
		"output name": func() cacheKey { return newCacheKey(lv, base, []string{"OUT2"}) },
		"no outputs":  func() cacheKey { return newCacheKey(lv, base, nil) },
		"data": func() cacheKey {
			in := cloneTensors(base)
			in[1].Data[0]++
			return newCacheKey(lv, in, outs)
		},
		"shape": func() cacheKey {
			in := cloneTensors(base)
			in[0].Shape = infer.Shape{2, 1}
			return newCacheKey(lv, in, outs)
		},
		"datatype": func() cacheKey {
			in := cloneTensors(base)
			in[0].DataType = infer.FP32
			return newCacheKey(lv, in, outs)
		},
		"name": func() cacheKey {
			in := cloneTensors(base)
			in[0].Name = "C"
			return newCacheKey(lv, in, outs)
		},
		"bytes moved between inputs": func() cacheKey {
			in := []infer.Tensor{int32Tensor("A", []int64{1, 2}, 1, 2, 3), int32Tensor("B", []int64{1, 2}, 4)}
			return newCacheKey(lv, in, outs)
		},
	}
	seen := map[cacheKey]string{k0: "base"}
	for name, f := range change {
		t.Run(name, func(t *testing.T) {
			k := f()
			prev, dup := seen[k]
			require.False(t, dup, "same key as %s", prev)
			seen[k] = name
		})
	}
}

func TestResponseCacheInManager(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt":       fakeConfig("response_cache { enable: true }"),
		"m/1/model.fake":       fakeFile(1),
		"plain/config.pbtxt":   fakeConfig(""),
		"plain/1/model.fake":   fakeFile(2),
		"nocache/config.pbtxt": fakeConfig("response_cache { enable: false }"),
		"nocache/1/model.fake": fakeFile(3),
	})
	h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlExplicit, StartupModels: []string{"*"}, CacheSizeBytes: 1 << 20})
	h.start(t)

	stats := func(model string) ModelStats {
		t.Helper()
		s, err := h.m.Statistics(t.Context(), model, "1")
		require.NoError(t, err)
		require.Len(t, s, 1)
		return s[0]
	}
	before := h.fake.executions.Load()
	first, err := h.infer(t.Context(), "m", "")
	require.NoError(t, err)
	second, err := h.infer(t.Context(), "m", "")
	require.NoError(t, err)
	require.Equal(t, first.Outputs, second.Outputs)
	require.Equal(t, int64(1), h.fake.executions.Load()-before, "the second request is answered from the cache")

	s := stats("m")
	require.Equal(t, uint64(1), s.CacheHit.Count)
	require.Equal(t, uint64(1), s.CacheMiss.Count)
	require.Equal(t, uint64(2), s.Success.Count, "a hit is a success")
	require.Equal(t, uint64(1), s.InferenceCount, "a hit is no inference")
	require.Equal(t, uint64(1), s.ExecutionCount)
	require.Equal(t, uint64(1), s.ComputeInfer.Count)
	require.InDelta(t, 1, testutil.ToFloat64(h.m.metrics.cacheHits.WithLabelValues("m", "1")), 0)
	require.InDelta(t, 1, testutil.ToFloat64(h.m.metrics.cacheMisses.WithLabelValues("m", "1")), 0)

	// Different inputs miss.
	_, err = h.m.Infer(t.Context(), &infer.Request{Model: "m", Inputs: []infer.Tensor{int32Tensor("IN", []int64{1, 4}, 9, 9, 9, 9)}})
	require.NoError(t, err)
	require.Equal(t, uint64(2), stats("m").CacheMiss.Count)

	// Models without response_cache never touch it.
	for _, name := range []string{"plain", "nocache"} {
		for range 2 {
			_, err := h.infer(t.Context(), name, "")
			require.NoError(t, err)
		}
		s := stats(name)
		require.Zero(t, s.CacheHit.Count+s.CacheMiss.Count, name)
		require.Equal(t, uint64(2), s.ExecutionCount, name)
	}
	_, entriesNow := h.m.cache.size()
	require.Equal(t, 2, entriesNow)

	// A reload of the same version starts from an empty cache: the old
	// load's entries are dropped once it has drained.
	require.NoError(t, h.m.Load(t.Context(), "m", LoadOptions{}))
	_, entriesNow = h.m.cache.size()
	require.Zero(t, entriesNow)
	before = h.fake.executions.Load()
	_, err = h.infer(t.Context(), "m", "")
	require.NoError(t, err)
	require.Equal(t, int64(1), h.fake.executions.Load()-before, "after a reload the request executes again")

	// Unloading drops the entries too.
	require.NoError(t, h.m.Unload(t.Context(), "m", UnloadOptions{}))
	used, entriesNow := h.m.cache.size()
	require.Zero(t, entriesNow)
	require.Zero(t, used)
	require.Zero(t, testutil.ToFloat64(h.m.metrics.cacheBytes))
}

func TestCacheEnabledWithoutServerCache(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt": fakeConfig("response_cache { enable: true }"),
		"m/1/model.fake": fakeFile(1),
	})
	h := newHarness(t, Options{Repositories: []string{repo}})
	h.start(t)
	for range 2 {
		_, err := h.infer(t.Context(), "m", "")
		require.NoError(t, err)
	}
	s, err := h.m.Statistics(t.Context(), "m", "1")
	require.NoError(t, err)
	require.Equal(t, uint64(2), s[0].ExecutionCount, "without --cache-size nothing is cached")
	require.Len(t, h.logs.logLines(t, "response_cache is enabled but the server has no cache (--cache-size 0); responses are not cached"), 1)
	_, err = New(Options{Repositories: []string{repo}, CacheSizeBytes: -1}, checkRegistry(), nil, nil)
	require.EqualError(t, err, fmt.Sprintf("cache size %d bytes is negative", -1))
}

// Modelled on qa/L0_response_cache test.sh's
// test_ensemble_cache_insertion_failure (a 200-byte cache): a response
// larger than the whole cache is a miss every time, and the server says
// so in its log ("Failed to insert key"), once per loaded version.
func TestResponseCacheTooSmallWarnsOnce(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt": fakeConfig("response_cache { enable: true }"),
		"m/1/model.fake": fakeFile(1),
	})
	h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlExplicit, StartupModels: []string{"*"}, CacheSizeBytes: 10})
	h.start(t)
	for range 3 {
		_, err := h.infer(t.Context(), "m", "")
		require.NoError(t, err)
	}
	s, err := h.m.Statistics(t.Context(), "m", "1")
	require.NoError(t, err)
	require.Equal(t, uint64(3), s[0].CacheMiss.Count)
	require.Zero(t, s[0].CacheHit.Count)
	warns := h.logs.logLines(t, "failed to insert key into the response cache: the response is larger than the whole cache, so this version's responses of that size are served uncached")
	require.Len(t, warns, 1)
	require.Equal(t, "m", warns[0]["model"])
}

// Modelled on qa/L0_response_cache test.sh check_server_failure_decoupled_model
// (decoupled_cache, and the ensemble with response_cache and
// model_transaction_policy { decoupled: True }): the load fails with
// Triton's words.
func TestResponseCacheRefusesDecoupled(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"d/config.pbtxt": fakeConfig("response_cache { enable: true }\nmodel_transaction_policy { decoupled: true }"),
		"d/1/model.fake": fakeFile(1),
	})
	h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlExplicit, CacheSizeBytes: 1 << 20})
	h.start(t)
	err := h.m.Load(t.Context(), "d", LoadOptions{})
	require.ErrorContains(t, err, "response cache does not currently support model 'd' with 'decoupled' transaction policy")
}

// A decoupled model is refused at load with a reason that names the
// setting, whatever its backend: it was ignored before, so a client that
// waits for a decoupled model's responses got one and no final flag.
func TestDecoupledRefused(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"d/config.pbtxt": fakeConfig("model_transaction_policy { decoupled: true }"),
		"d/1/model.fake": fakeFile(1),
	})
	h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlExplicit})
	h.start(t)
	err := h.m.Load(t.Context(), "d", LoadOptions{})
	require.ErrorContains(t, err, "decoupled: true } is not supported")
	require.ErrorContains(t, err, "config.pbtxt:")
}
