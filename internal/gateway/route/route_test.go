package route

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/config"
)

func one(backend, version string) config.RouteAction {
	return config.RouteAction{Weighted: []config.WeightedBackend{{Backend: backend, Version: version, Weight: 100}}}
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func mustTable(t *testing.T, routes []config.Route, opts ...Option) *Table {
	t.Helper()
	tb, err := FromConfig(routes, opts...)
	require.NoError(t, err)
	return tb
}

func TestAllHeadersMustMatch(t *testing.T) {
	tb := mustTable(t, []config.Route{{
		Name: "r",
		Match: config.Match{Headers: []config.HeaderMatch{
			{Name: "x-a", Exact: new("1")},
			{Name: "x-b", Present: new(true)},
		}},
		Route: one("b", ""),
	}})
	_, ok := tb.Match(Request{Headers: hdr("X-A", "1")})
	require.False(t, ok)
	_, ok = tb.Match(Request{Headers: hdr("X-A", "1", "X-B", "")})
	require.True(t, ok)
}

func canaryRoutes() []config.Route {
	return []config.Route{
		{
			Name:  "canary",
			Match: config.Match{Headers: []config.HeaderMatch{{Name: "x-canary", Exact: new("true")}}},
			Route: one("triton", "2"),
		},
		{Name: "default", Route: one("triton", "1")},
	}
}

func TestCanaryAndOrder(t *testing.T) {
	tb := mustTable(t, canaryRoutes())
	require.Equal(t, 2, tb.Len())

	got, ok := tb.Match(Request{Headers: hdr("X-Canary", "true")})
	require.True(t, ok)
	require.Equal(t, Target{Route: "canary", Backend: "triton", Version: "2"}, got)

	got, ok = tb.Match(Request{Headers: hdr("X-Canary", "false")})
	require.True(t, ok)
	require.Equal(t, Target{Route: "default", Backend: "triton", Version: "1"}, got)

	got, ok = tb.Match(Request{})
	require.True(t, ok)
	require.Equal(t, "default", got.Route)

	// First match wins: a catch-all first shadows the canary route.
	routes := canaryRoutes()
	routes[0], routes[1] = routes[1], routes[0]
	tb = mustTable(t, routes)
	got, ok = tb.Match(Request{Headers: hdr("X-Canary", "true")})
	require.True(t, ok)
	require.Equal(t, Target{Route: "default", Backend: "triton", Version: "1"}, got)
}

func TestNoMatch(t *testing.T) {
	tb := mustTable(t, canaryRoutes()[:1])
	got, ok := tb.Match(Request{Headers: hdr("X-Other", "true")})
	require.False(t, ok)
	require.Equal(t, Target{}, got)

	empty := mustTable(t, nil)
	_, ok = empty.Match(Request{})
	require.False(t, ok)
}

func split(sticky string) []config.Route {
	return []config.Route{{
		Name: "split",
		Route: config.RouteAction{
			StickyKey: sticky,
			Weighted: []config.WeightedBackend{
				{Backend: "triton", Version: "1", Weight: 90},
				{Backend: "triton", Version: "2", Weight: 10},
			},
		},
	}}
}

func TestWeightedRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tb := mustTable(t, split(""), WithRand(rng.IntN))
	const n = 10000
	counts := map[string]int{}
	for range n {
		got, ok := tb.Match(Request{})
		require.True(t, ok)
		counts[got.Version]++
	}
	require.Len(t, counts, 2)
	// 10 % of 10k has a standard deviation of 30; allow ~5 sigma.
	require.InDelta(t, 1000, counts["2"], 150, "counts %v", counts)
}

func TestWeightedRandomUsesWholeRange(t *testing.T) {
	// Bucket 89 is the last of v1, bucket 90 the first of v2.
	for _, tc := range []struct {
		bucket int
		want   string
	}{{0, "1"}, {89, "1"}, {90, "2"}, {99, "2"}} {
		t.Run(fmt.Sprint(tc.bucket), func(t *testing.T) {
			tb := mustTable(t, split(""), WithRand(func(n int) int {
				require.Equal(t, Buckets, n)
				return tc.bucket
			}))
			got, ok := tb.Match(Request{})
			require.True(t, ok)
			require.Equal(t, tc.want, got.Version)
		})
	}
}

func TestZeroWeightNeverChosen(t *testing.T) {
	routes := []config.Route{{Name: "r", Route: config.RouteAction{Weighted: []config.WeightedBackend{
		{Backend: "a", Weight: 0}, {Backend: "b", Weight: 100}, {Backend: "c", Weight: 0},
	}}}}
	for b := range Buckets {
		tb := mustTable(t, routes, WithRand(func(int) int { return b }))
		got, _ := tb.Match(Request{})
		require.Equal(t, "b", got.Backend, "bucket %d", b)
	}
}

func TestWeightedSticky(t *testing.T) {
	// A random source that would fail the test if used for a sticky request.
	tb := mustTable(t, split("user_id"), WithRand(func(int) int {
		t.Fatal("random source used for a sticky request")
		return 0
	}))
	const n = 10000
	counts := map[string]int{}
	for i := range n {
		req := Request{Values: map[string]string{"user_id": fmt.Sprint(i)}}
		first, ok := tb.Match(req)
		require.True(t, ok)
		for range 3 {
			again, _ := tb.Match(req)
			require.Equal(t, first, again, "user %d", i)
		}
		counts[first.Version]++
	}
	require.InDelta(t, 1000, counts["2"], 150, "counts %v", counts)

	// A second table (another replica, or after a restart) agrees.
	tb2 := mustTable(t, split("user_id"))
	for i := range 200 {
		req := Request{Values: map[string]string{"user_id": fmt.Sprint(i)}}
		a, _ := tb.Match(req)
		b, _ := tb2.Match(req)
		require.Equal(t, a, b)
	}
}

func TestStickyKeyMissingFallsBackToRandom(t *testing.T) {
	calls := 0
	tb := mustTable(t, split("user_id"), WithRand(func(int) int { calls++; return 95 }))
	got, ok := tb.Match(Request{Values: map[string]string{"other": "x"}})
	require.True(t, ok)
	require.Equal(t, "2", got.Version)
	require.Equal(t, 1, calls)
}

func hotCold() []config.Route {
	return []config.Route{
		{
			Name:  "hot",
			Match: config.Match{EntityHash: &config.EntityHash{Key: "user_id", Below: 1}}, // modulo defaults to 100
			Route: one("hot-pool", ""),
		},
		{Name: "cold", Route: one("cold-pool", "")},
	}
}

func TestEntityHashHotCold(t *testing.T) {
	tb := mustTable(t, hotCold())
	const n = 20000
	hot := 0
	for i := range n {
		id := fmt.Sprint(i)
		req := Request{Values: map[string]string{"user_id": id}}
		got, ok := tb.Match(req)
		require.True(t, ok)
		again, _ := tb.Match(req)
		require.Equal(t, got, again)
		isHot := Hash(id)%100 < 1
		require.Equal(t, isHot, got.Backend == "hot-pool", "user %s", id)
		if isHot {
			hot++
		}
	}
	// 1 % of 20k = 200, sd ≈ 14; allow ~5 sigma.
	require.InDelta(t, 200, hot, 70)

	// Without the value the entity match does not hold.
	got, ok := tb.Match(Request{})
	require.True(t, ok)
	require.Equal(t, "cold-pool", got.Backend)
}

func TestEntityHashModulo(t *testing.T) {
	routes := []config.Route{{
		Name:  "half",
		Match: config.Match{EntityHash: &config.EntityHash{Key: "k", Modulo: 2, Below: 1}},
		Route: one("b", ""),
	}}
	tb := mustTable(t, routes)
	for i := range 100 {
		v := fmt.Sprint("id-", i)
		_, ok := tb.Match(Request{Values: map[string]string{"k": v}})
		require.Equal(t, Hash(v)%2 == 0, ok, v)
	}
}

func TestHashIsStable(t *testing.T) {
	// These values must never change: they decide where every id is routed.
	for s, want := range map[string]uint64{
		"":       17280346270528514342,
		"user-1": 4729620347622785477,
		"42":     9298553800152202476,
	} {
		require.Equal(t, want, Hash(s), "%q", s)
	}
}

func TestFromConfigErrors(t *testing.T) {
	ok := one("b", "")
	tests := []struct {
		name   string
		routes []config.Route
		want   string
	}{
		{"no name", []config.Route{{Route: ok}}, "name is empty"},
		{"duplicate", []config.Route{{Name: "a", Route: ok}, {Name: "a", Route: ok}}, "duplicate name"},
		{"no matcher", []config.Route{{Name: "a", Route: ok, Match: config.Match{Headers: []config.HeaderMatch{{Name: "x"}}}}}, "exactly one"},
		{"two matchers", []config.Route{{Name: "a", Route: ok, Match: config.Match{Headers: []config.HeaderMatch{{Name: "x", Exact: new("1"), Prefix: new("1")}}}}}, "exactly one"},
		{"no header name", []config.Route{{Name: "a", Route: ok, Match: config.Match{Headers: []config.HeaderMatch{{Exact: new("1")}}}}}, "name is empty"},
		{"bad regex", []config.Route{{Name: "a", Route: ok, Match: config.Match{Headers: []config.HeaderMatch{{Name: "x", Regex: new("(")}}}}}, "compile regex"},
		{"regex balanced only by the anchors", []config.Route{{Name: "a", Route: ok, Match: config.Match{Headers: []config.HeaderMatch{{Name: "x", Regex: new("a)|(b")}}}}}, "compile regex"},
		{"entity no key", []config.Route{{Name: "a", Route: ok, Match: config.Match{EntityHash: &config.EntityHash{Below: 1}}}}, "key is empty"},
		{"entity below too big", []config.Route{{Name: "a", Route: ok, Match: config.Match{EntityHash: &config.EntityHash{Key: "k", Modulo: 10, Below: 11}}}}, "below 11"},
		{"entity negative modulo", []config.Route{{Name: "a", Route: ok, Match: config.Match{EntityHash: &config.EntityHash{Key: "k", Modulo: -1}}}}, "negative"},
		{"no backends", []config.Route{{Name: "a"}}, "weighted is empty"},
		{"no backend name", []config.Route{{Name: "a", Route: one("", "")}}, "backend is empty"},
		{"bad sum", []config.Route{{Name: "a", Route: config.RouteAction{Weighted: []config.WeightedBackend{{Backend: "b", Weight: 90}}}}}, "sum to 90"},
		{"negative weight", []config.Route{{Name: "a", Route: config.RouteAction{Weighted: []config.WeightedBackend{{Backend: "b", Weight: 110}, {Backend: "c", Weight: -10}}}}}, "negative weight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromConfig(tt.routes)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	tb := benchTable(t)
	req := benchRequest()
	allocs := testing.AllocsPerRun(100, func() { tb.Match(req) })
	require.Zero(t, allocs)
}

func benchTable(tb testing.TB) *Table {
	tb.Helper()
	routes := append([]config.Route{
		{
			Name:  "region",
			Match: config.Match{Headers: []config.HeaderMatch{{Name: "x-region", Regex: new(`us-[a-z]+-\d`)}}},
			Route: one("us", ""),
		},
	}, hotCold()[0], canaryRoutes()[0])
	routes = append(routes, split("user_id")...)
	t, err := FromConfig(routes)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

func benchRequest() Request {
	return Request{
		Headers: hdr("X-Region", "eu-west-1", "X-Canary", "false", "User-Agent", "bench"),
		Values:  map[string]string{"user_id": "1234567", "distance_km": "12.5"},
	}
}

func BenchmarkMatch(b *testing.B) {
	tb := benchTable(b)
	req := benchRequest()
	b.ReportAllocs()
	for b.Loop() {
		tb.Match(req)
	}
}

func TestConcurrentMatch(t *testing.T) {
	tb := mustTable(t, append(canaryRoutes()[:1], split("")...)) // default random source
	t.Run("group", func(t *testing.T) {
		for g := range 4 {
			t.Run(fmt.Sprint(g), func(t *testing.T) {
				t.Parallel()
				for i := range 500 {
					got, ok := tb.Match(Request{Headers: hdr("X-Canary", fmt.Sprint(i%2 == 0))})
					if !ok || got.Backend != "triton" {
						t.Errorf("match %d: %+v, %v", i, got, ok)
						return
					}
				}
			})
		}
	})
}
