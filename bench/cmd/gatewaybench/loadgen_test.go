package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func rawFor(t *testing.T, url string, maxIdle int, timeout time.Duration) *rawClient {
	t.Helper()
	rc, err := newRawClient(url, maxIdle, timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.closeIdle)
	return rc
}

func testSpec(url string, rate float64, d time.Duration) loadSpec {
	return loadSpec{
		URL: url, Header: http.Header{"Content-Type": {"application/json"}},
		Body: func(int) []byte { return []byte(`{}`) }, Rate: rate, Duration: d, MaxInFlight: 256,
	}
}

// The generator must not wait for answers before sending: 100 requests
// to a server that takes 50 ms each, at 200/s, finish in about the
// schedule's 0.5 s, not in 100 × 50 ms.
func TestRunLoadIsOpenLoop(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(50 * time.Millisecond)
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	t0 := time.Now()
	res := runLoad(context.Background(), rawFor(t, srv.URL, 256, 5*time.Second), testSpec(srv.URL, 200, 500*time.Millisecond))
	took := time.Since(t0)
	if res.Scheduled != 100 || res.Sent != 100 || res.OK != 100 || res.Errors() != 0 {
		t.Fatalf("scheduled %d sent %d ok %d errors %d; want 100, 100, 100, 0", res.Scheduled, res.Sent, res.OK, res.Errors())
	}
	if took > 2*time.Second {
		t.Fatalf("took %s: requests were serialized", took)
	}
	if p := pct(res.Latency, 0.5); p < 50*time.Millisecond {
		t.Fatalf("p50 %s is below the server's 50 ms", p)
	}
	if len(res.Latency) != 100 || len(res.Lag) != 100 || len(res.Service) != 100 {
		t.Fatalf("samples: %d latencies, %d lags, %d service times; want 100 each", len(res.Latency), len(res.Lag), len(res.Service))
	}
	if res.Span < 500*time.Millisecond {
		t.Fatalf("span %s is shorter than the schedule", res.Span)
	}
	if tp := res.Throughput(); tp > 200 || tp < 50 {
		t.Fatalf("throughput %.1f/s; want at most the offered 200/s and well above 50/s", tp)
	}
}

// When sends cannot go out on time (here: one request in flight at most,
// against a slow server), latency still counts from the scheduled time,
// so the stall shows up instead of being omitted, and the sends count as
// late.
func TestRunLoadCountsFromSchedule(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(20 * time.Millisecond)
	}))
	defer srv.Close()
	spec := testSpec(srv.URL, 200, 100*time.Millisecond) // 20 requests due within 100 ms
	spec.MaxInFlight = 1
	res := runLoad(context.Background(), rawFor(t, srv.URL, 4, 5*time.Second), spec)
	if res.Sent != 20 || res.OK != 20 {
		t.Fatalf("sent %d ok %d; want 20, 20", res.Sent, res.OK)
	}
	// The last request is due at 95 ms but cannot start before 19 × 20 ms.
	if m := pct(res.Latency, 1); m < 250*time.Millisecond {
		t.Fatalf("max latency from schedule %s; want ≥ 250 ms (coordinated omission)", m)
	}
	if m := pct(res.Service, 1); m > 200*time.Millisecond {
		t.Fatalf("max service time %s; want about the server's 20 ms", m)
	}
	if res.Late < 15 {
		t.Fatalf("late %d; want ≥ 15 of 20", res.Late)
	}
}

func TestRunLoadCountsOutcomes(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1)%4 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	res := runLoad(context.Background(), rawFor(t, srv.URL, 64, 5*time.Second), testSpec(srv.URL, 400, 250*time.Millisecond))
	if res.Sent != 100 || res.OK != 75 || res.Errors() != 25 {
		t.Fatalf("sent %d ok %d errors %d; want 100, 75, 25", res.Sent, res.OK, res.Errors())
	}
	if res.Outcomes["HTTP 200"] != 75 || res.Outcomes["HTTP 503"] != 25 {
		t.Fatalf("outcomes %v", res.Outcomes)
	}
	// Failures are in the latency sample too.
	if len(res.Latency) != 100 {
		t.Fatalf("%d latencies; want 100", len(res.Latency))
	}
}

func TestRunLoadTransportErrors(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	res := runLoad(context.Background(), rawFor(t, url, 8, time.Second), testSpec(url, 100, 50*time.Millisecond))
	if res.Sent != 5 || res.OK != 0 || res.Outcomes["connection refused"] != 5 || res.FirstErr == "" {
		t.Fatalf("sent %d ok %d outcomes %v first error %q", res.Sent, res.OK, res.Outcomes, res.FirstErr)
	}
}

func TestRunLoadStopsOnCancel(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	res := runLoad(ctx, rawFor(t, srv.URL, 8, time.Second), testSpec(srv.URL, 100, time.Minute))
	if time.Since(t0) > 5*time.Second || res.Sent >= res.Scheduled {
		t.Fatalf("sent %d of %d in %s after cancel", res.Sent, res.Scheduled, time.Since(t0))
	}
}

func TestPct(t *testing.T) {
	s := make([]time.Duration, 100)
	for i := range s {
		s[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.9, 90 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0.001, time.Millisecond}} {
		if got := pct(s, c.q); got != c.want {
			t.Errorf("pct(%v) = %s; want %s", c.q, got, c.want)
		}
	}
	if pct(nil, 0.5) != 0 {
		t.Error("pct of an empty sample is not 0")
	}
}

func TestMerge(t *testing.T) {
	a := loadResult{Rate: 10, Scheduled: 2, Sent: 2, OK: 1, Late: 1, Span: time.Second, Outcomes: map[string]int{"HTTP 200": 1, "timeout": 1}, Latency: []time.Duration{1, 5}}
	b := loadResult{Rate: 10, Scheduled: 3, Sent: 3, OK: 3, Span: time.Second, Outcomes: map[string]int{"HTTP 200": 3}, Latency: []time.Duration{2, 3, 4}}
	m := merge([]loadResult{a, b})
	if m.Sent != 5 || m.OK != 4 || m.Late != 1 || m.Span != 2*time.Second || m.Outcomes["HTTP 200"] != 4 || m.Outcomes["timeout"] != 1 {
		t.Fatalf("merged %+v", m)
	}
	for i, d := range []time.Duration{1, 2, 3, 4, 5} {
		if m.Latency[i] != d {
			t.Fatalf("latencies %v not merged in order", m.Latency)
		}
	}
	if m.Throughput() != 2 {
		t.Fatalf("throughput %v; want 2", m.Throughput())
	}
}
