package upstream

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var addrs4 = []string{"a:8000", "b:8000", "c:8000", "d:8000"}

func newSet(t *testing.T, endpoints []string, opts Options) (*Set, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	if opts.Rand == nil {
		opts.Rand = rand.New(rand.NewPCG(1, 2))
	}
	opts.Backend = "resnet"
	s, err := New(endpoints, opts, nil, reg)
	require.NoError(t, err)
	return s, reg
}

// hit picks addr (by excluding every other endpoint) and reports o.
func hit(t *testing.T, s *Set, addr string, o Outcome) {
	t.Helper()
	var others []string
	for _, e := range s.endpoints {
		if e.addr != addr {
			others = append(others, e.addr)
		}
	}
	p, err := s.Pick(others...)
	require.NoError(t, err)
	require.Equal(t, addr, p.Addr, "endpoint %s not routable", addr)
	p.Done(o)
}

// picked returns how often each address is picked in n picks, each done at once.
func picked(t *testing.T, s *Set, n int, exclude ...string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for range n {
		p, err := s.Pick(exclude...)
		require.NoError(t, err)
		counts[p.Addr]++
		p.Done(Outcome{Status: 200})
	}
	return counts
}

func state(t *testing.T, s *Set, addr string) EndpointState {
	t.Helper()
	for _, st := range s.Snapshot() {
		if st.Addr == addr {
			return st
		}
	}
	t.Fatalf("no endpoint %s", addr)
	return EndpointState{}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name      string
		endpoints []string
		opts      Options
		wantErr   string
	}{
		{"empty", nil, Options{}, "no upstream endpoints"},
		{"duplicate", []string{"a", "a"}, Options{}, `duplicate upstream endpoint "a"`},
		{"blank address", []string{"a", ""}, Options{}, "empty upstream endpoint address"},
		{"error rate above 100", []string{"a"}, Options{ErrorRatePercent: 101}, "error rate percent"},
		{"negative ejection", []string{"a"}, Options{MaxEjectionPercent: -1}, "max ejection percent"},
		{"negative duration", []string{"a"}, Options{Interval: -time.Second}, "durations"},
		{"ok", []string{"a", "b"}, Options{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.endpoints, tt.opts, nil, nil)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestPickPrefersFewerInFlight(t *testing.T) {
	s, _ := newSet(t, addrs4[:3], Options{})
	// Hold 10 leases on a and 5 on b; c is idle.
	var held []*Endpoint
	for range 10 {
		p, err := s.Pick("b:8000", "c:8000")
		require.NoError(t, err)
		held = append(held, p)
	}
	for range 5 {
		p, err := s.Pick("a:8000", "c:8000")
		require.NoError(t, err)
		held = append(held, p)
	}
	const n = 3000
	counts := picked(t, s, n)
	// P2C over three endpoints: c wins every pair it is in (2/3 of pairs),
	// b wins {a, b}, a never wins.
	require.Zero(t, counts["a:8000"])
	require.InDelta(t, 2.0/3, float64(counts["c:8000"])/n, 0.05)
	require.InDelta(t, 1.0/3, float64(counts["b:8000"])/n, 0.05)
	for _, p := range held {
		p.Done(Outcome{Status: 200})
	}
	// Equal load spreads evenly.
	counts = picked(t, s, n)
	for _, a := range addrs4[:3] {
		require.InDelta(t, 1.0/3, float64(counts[a])/n, 0.05, a)
	}
}

func TestPickExclude(t *testing.T) {
	s, _ := newSet(t, addrs4[:3], Options{})
	t.Run("excluded never picked while others exist", func(t *testing.T) {
		counts := picked(t, s, 300, "a:8000")
		require.Zero(t, counts["a:8000"])
		require.Positive(t, counts["b:8000"])
		require.Positive(t, counts["c:8000"])
	})
	t.Run("single remaining candidate", func(t *testing.T) {
		p, err := s.Pick("a:8000", "b:8000")
		require.NoError(t, err)
		require.Equal(t, "c:8000", p.Addr)
		require.False(t, p.Reused)
		p.Done(Outcome{})
	})
	t.Run("all excluded returns one marked reused", func(t *testing.T) {
		p, err := s.Pick(addrs4[:3]...)
		require.NoError(t, err)
		require.Contains(t, addrs4[:3], p.Addr)
		require.True(t, p.Reused)
		p.Done(Outcome{})
	})
	t.Run("unknown excluded address is ignored", func(t *testing.T) {
		p, err := s.Pick("zz:1")
		require.NoError(t, err)
		require.False(t, p.Reused)
		p.Done(Outcome{})
	})
}

func TestErrorRateEjection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, reg := newSet(t, addrs4, Options{})
		const a = "a:8000"
		for range 19 {
			hit(t, s, a, Outcome{Status: 200})
			time.Sleep(100 * time.Millisecond)
		}
		// 1 failure in 20 is exactly 5 %: not above the threshold.
		hit(t, s, a, Outcome{Status: 500})
		require.False(t, state(t, s, a).Ejected)
		// 2 in 21 is 9.5 %.
		hit(t, s, a, Outcome{Err: errors.New("connection reset")})
		ejectedAt := time.Now()
		st := state(t, s, a)
		require.True(t, st.Ejected)
		require.Equal(t, ejectedAt.Add(30*time.Second), st.EjectedUntil)
		require.InDelta(t, 2.0/21, st.ErrorRate, 1e-9)
		require.InDelta(t, 1, testutil.ToFloat64(s.metrics.ejections.WithLabelValues("resnet", a, ReasonErrorRate)), 0)
		require.InDelta(t, 1, testutil.ToFloat64(s.metrics.ejected.WithLabelValues("resnet", a)), 0)

		time.Sleep(30*time.Second - time.Nanosecond)
		require.Zero(t, picked(t, s, 200)[a], "ejected endpoint picked")
		require.True(t, state(t, s, a).Ejected)

		time.Sleep(time.Nanosecond)
		st = state(t, s, a)
		require.False(t, st.Ejected)
		require.Zero(t, st.ErrorRate, "probation starts with an empty window")
		require.InDelta(t, 0, testutil.ToFloat64(s.metrics.ejected.WithLabelValues("resnet", a)), 0)
		require.Positive(t, picked(t, s, 200)[a])

		// The ejection is fixed, not growing: a second one lasts 30 s too.
		time.Sleep(time.Minute)
		for i := 0; !state(t, s, a).Ejected; i++ {
			require.Less(t, i, 100, "not ejected again")
			hit(t, s, a, Outcome{Status: 502})
		}
		require.Equal(t, time.Now().Add(30*time.Second), state(t, s, a).EjectedUntil)
		require.InDelta(t, 2, testutil.ToFloat64(s.metrics.ejections.WithLabelValues("resnet", a, ReasonErrorRate)), 0)
		require.Equal(t, 1, testutil.CollectAndCount(reg, "sluice_gateway_upstream_ejections_total"))
	})
}

func TestErrorRateVolumeAndWindow(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, s *Set, a string)
		want bool
	}{
		{"below minimum volume", func(t *testing.T, s *Set, a string) {
			t.Helper()
			for range 19 {
				hit(t, s, a, Outcome{Status: 500})
			}
		}, false},
		{"at minimum volume", func(t *testing.T, s *Set, a string) {
			t.Helper()
			for range 20 {
				hit(t, s, a, Outcome{Status: 500})
			}
		}, true},
		{"old failures leave the window", func(t *testing.T, s *Set, a string) {
			t.Helper()
			for range 19 {
				hit(t, s, a, Outcome{Status: 500})
			}
			time.Sleep(11 * time.Second)
			hit(t, s, a, Outcome{Status: 500})
		}, false},
		{"client errors do not count", func(t *testing.T, s *Set, a string) {
			t.Helper()
			for range 30 {
				hit(t, s, a, Outcome{Status: 429})
				hit(t, s, a, Outcome{GRPCCode: 3}) // INVALID_ARGUMENT
			}
		}, false},
		{"grpc internal counts", func(t *testing.T, s *Set, a string) {
			t.Helper()
			for range 20 {
				hit(t, s, a, Outcome{GRPCCode: 13})
			}
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, _ := newSet(t, addrs4, Options{})
				tt.run(t, s, "a:8000")
				require.Equal(t, tt.want, state(t, s, "a:8000").Ejected)
			})
		})
	}
}

func TestConsecutive503(t *testing.T) {
	tests := []struct {
		name    string
		gaps    []time.Duration // sleep before each 503
		outcome Outcome
		want    bool
	}{
		{"three within a minute", []time.Duration{0, 20 * time.Second, 39 * time.Second}, Outcome{Status: 503}, true},
		{"grpc unavailable", []time.Duration{0, 10 * time.Second, 10 * time.Second}, Outcome{GRPCCode: 14}, true},
		{"spread over more than a minute", []time.Duration{0, 30 * time.Second, 31 * time.Second}, Outcome{Status: 503}, false},
		{"two only", []time.Duration{0, time.Second}, Outcome{Status: 503}, false},
		{"slides: last three within a minute", []time.Duration{0, 30 * time.Second, 31 * time.Second, 5 * time.Second}, Outcome{Status: 503}, true},
		{"other 5xx are not 503s", []time.Duration{0, 0, 0, 0}, Outcome{Status: 500}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// A high volume floor keeps the error-rate detector out.
				s, _ := newSet(t, addrs4, Options{MinRequestVolume: 1000})
				const a = "a:8000"
				for _, gap := range tt.gaps {
					time.Sleep(gap)
					// Successes in between do not reset the count.
					hit(t, s, a, Outcome{Status: 200})
					hit(t, s, a, tt.outcome)
				}
				st := state(t, s, a)
				require.Equal(t, tt.want, st.Ejected)
				want := 0.0
				if tt.want {
					want = 1
					require.Equal(t, time.Now().Add(30*time.Second), st.EjectedUntil)
				}
				require.InDelta(t, want, testutil.ToFloat64(
					s.metrics.ejections.WithLabelValues("resnet", a, ReasonConsecutive503)), 0)
			})
		})
	}
}

func TestMaxEjectionPercent(t *testing.T) {
	tests := []struct {
		name      string
		endpoints []string
		percent   float64
		want      int
	}{
		{"half of four", addrs4, 50, 2},
		{"quarter of four", addrs4, 25, 1},
		{"at least one", addrs4[:2], 10, 1},
		{"all", addrs4, 100, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, _ := newSet(t, tt.endpoints, Options{MaxEjectionPercent: tt.percent, PanicThresholdPercent: -1})
				for _, a := range tt.endpoints {
					for range 3 {
						// Pin the pick: once ejected, the endpoint is not
						// routable, so report on the lease directly.
						s.mu.Lock()
						e := s.byAddr[a]
						e.inFlight++
						s.mu.Unlock()
						(&Endpoint{Addr: a, set: s, ep: e}).Done(Outcome{Status: 503})
					}
				}
				ejected := 0
				for _, st := range s.Snapshot() {
					if st.Ejected {
						ejected++
					}
				}
				require.Equal(t, tt.want, ejected)
			})
		})
	}
}

func TestPanicRouting(t *testing.T) {
	tests := []struct {
		name      string
		unhealthy []string
		wantPanic bool
	}{
		{"half healthy is not panic", addrs4[:2], false},
		{"quarter healthy panics", addrs4[:3], true},
		{"none healthy panics", addrs4, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newSet(t, addrs4, Options{})
			for _, a := range tt.unhealthy {
				require.NoError(t, s.SetHealth(a, false))
			}
			const n = 400
			counts := map[string]int{}
			for range n {
				p, err := s.Pick()
				require.NoError(t, err)
				require.Equal(t, tt.wantPanic, p.Panic)
				counts[p.Addr]++
				p.Done(Outcome{Status: 200})
			}
			for _, a := range addrs4 {
				if tt.wantPanic || !slices.Contains(tt.unhealthy, a) {
					require.Positive(t, counts[a], "%s not picked", a)
				} else {
					require.Zero(t, counts[a], "unhealthy %s picked", a)
				}
			}
			wantPanics := 0.0
			if tt.wantPanic {
				wantPanics = n
			}
			require.InDelta(t, wantPanics, testutil.ToFloat64(s.panics), 0)
		})
	}
}

func TestPanicCountsEjected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := newSet(t, addrs4[:2], Options{})
		for range 3 {
			hit(t, s, "a:8000", Outcome{Status: 503})
		}
		require.True(t, state(t, s, "a:8000").Ejected)
		// One of two routable is 50 %: not below the threshold, so a is skipped.
		require.Zero(t, picked(t, s, 100)["a:8000"])
		require.NoError(t, s.SetHealth("b:8000", false))
		// Nothing routable: panic across both.
		counts := picked(t, s, 100)
		require.Positive(t, counts["a:8000"])
		require.Positive(t, counts["b:8000"])
	})
}

func TestSetHealth(t *testing.T) {
	s, _ := newSet(t, addrs4, Options{})
	require.ErrorContains(t, s.SetHealth("zz:1", false), "unknown upstream endpoint")
	require.NoError(t, s.SetHealth("a:8000", false))
	require.False(t, state(t, s, "a:8000").Healthy)
	require.Zero(t, picked(t, s, 300)["a:8000"])
	require.NoError(t, s.SetHealth("a:8000", true))
	require.Positive(t, picked(t, s, 300)["a:8000"])
}

func TestConcurrentPickDone(t *testing.T) {
	s, _ := newSet(t, addrs4, Options{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				p, err := s.Pick()
				if err != nil {
					t.Error(err)
					return
				}
				// Hold a few leases at once to exercise P2C under load.
				q, err := s.Pick(p.Addr)
				if err != nil {
					t.Error(err)
					return
				}
				status := 200
				if (g+i)%50 == 0 {
					status = 503
				}
				p.Done(Outcome{Status: status})
				q.Done(Outcome{Status: 200})
			}
		})
	}
	wg.Wait()
	for _, st := range s.Snapshot() {
		require.Zero(t, st.InFlight, st.Addr)
		require.InDelta(t, 0, testutil.ToFloat64(s.metrics.inFlight.WithLabelValues("resnet", st.Addr)), 0)
	}
}

func TestDoneTwicePanics(t *testing.T) {
	s, _ := newSet(t, addrs4, Options{})
	p, err := s.Pick()
	require.NoError(t, err)
	p.Done(Outcome{})
	require.Panics(t, func() { p.Done(Outcome{}) })
	require.Zero(t, state(t, s, p.Addr).InFlight)
}

func TestMetricsSharedRegistryAndClose(t *testing.T) {
	reg := prometheus.NewRegistry()
	s1, err := New([]string{"a"}, Options{Backend: "one"}, nil, reg)
	require.NoError(t, err)
	s2, err := New([]string{"a", "b"}, Options{Backend: "two"}, nil, reg)
	require.NoError(t, err)
	require.Equal(t, 3, testutil.CollectAndCount(reg, "sluice_gateway_upstream_in_flight"))
	p, err := s2.Pick()
	require.NoError(t, err)
	require.InDelta(t, 1, testutil.ToFloat64(s1.metrics.inFlight.WithLabelValues("two", p.Addr)), 0)
	p.Done(Outcome{})
	s2.Close()
	require.Equal(t, 1, testutil.CollectAndCount(reg, "sluice_gateway_upstream_in_flight"))
	require.Equal(t, 1, testutil.CollectAndCount(reg, "sluice_gateway_upstream_ejected"))
}
