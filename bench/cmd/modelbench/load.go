package main

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// doFunc sends one request and waits for its answer. It must be safe to call
// from many goroutines at once.
type doFunc func(ctx context.Context) error

// loadConfig bounds one measurement cell.
type loadConfig struct {
	// Duration is how long requests are started for.
	Duration time.Duration
	// MaxRequests caps the requests started in the cell, whatever the
	// duration.
	MaxRequests int
	// RequestTimeout bounds each request.
	RequestTimeout time.Duration
	// Workers is the closed-loop concurrency, or the open-loop cap on
	// requests in flight.
	Workers int
	// Rate is the open-loop arrival rate in requests per second.
	Rate float64
	// Drain is how long an open-loop cell waits, after its last scheduled
	// arrival, for queued requests before it gives up on them.
	Drain time.Duration
}

// cellResult is what one cell measured. Latencies holds only successful
// requests, sorted ascending.
type cellResult struct {
	Requests  int // requests that completed successfully
	Errors    int // requests that failed or timed out
	Unsent    int // open loop: scheduled but never started (queue not drained in time)
	Elapsed   time.Duration
	Latencies []time.Duration
	FirstErr  string
	// Lag is, for an open-loop cell, how late each arrival was released
	// against its schedule, sorted ascending.
	Lag []time.Duration
}

// Throughput is successful requests per second of elapsed time.
func (r cellResult) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// Percentile returns the nearest-rank p-quantile (0 < p <= 1) of the
// successful latencies, or 0 when there are none.
func (r cellResult) Percentile(p float64) time.Duration {
	return percentile(r.Latencies, p)
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(n))) - 1
	i = max(0, min(i, n-1))
	return sorted[i]
}

// tally collects one worker's outcomes without locking; merge combines them.
type tally struct {
	lat      []time.Duration
	errs     int
	firstErr error
}

func (t *tally) record(lat time.Duration, err error) {
	if err != nil {
		t.errs++
		if t.firstErr == nil {
			t.firstErr = err
		}
		return
	}
	t.lat = append(t.lat, lat)
}

func merge(tallies []*tally, elapsed time.Duration, unsent int) cellResult {
	r := cellResult{Elapsed: elapsed, Unsent: unsent}
	n := 0
	for _, t := range tallies {
		n += len(t.lat)
	}
	r.Latencies = make([]time.Duration, 0, n)
	for _, t := range tallies {
		r.Latencies = append(r.Latencies, t.lat...)
		r.Errors += t.errs
		if r.FirstErr == "" && t.firstErr != nil {
			r.FirstErr = t.firstErr.Error()
		}
	}
	slices.Sort(r.Latencies)
	r.Requests = len(r.Latencies)
	return r
}

func callOnce(ctx context.Context, do doFunc, timeout time.Duration) error {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return do(rctx)
}

// closedLoop runs cfg.Workers goroutines that each send a request, wait for
// the answer and send the next, until cfg.Duration has passed or
// cfg.MaxRequests have been started. Throughput is what the system sustains;
// latency is measured from send to answer, so queueing in front of a
// saturated server is partly hidden (coordinated omission).
func closedLoop(ctx context.Context, do doFunc, cfg loadConfig) cellResult {
	workers := max(1, cfg.Workers)
	var started atomic.Int64
	tallies := make([]*tally, workers)
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	var wg sync.WaitGroup
	for w := range workers {
		t := &tally{lat: make([]time.Duration, 0, 1024)}
		tallies[w] = t
		wg.Go(func() {
			for ctx.Err() == nil {
				if started.Add(1) > int64(cfg.MaxRequests) {
					return
				}
				t0 := time.Now()
				if !t0.Before(deadline) {
					return
				}
				err := callOnce(ctx, do, cfg.RequestTimeout)
				t.record(time.Since(t0), err)
			}
		})
	}
	wg.Wait()
	return merge(tallies, time.Since(start), 0)
}

// openLoop schedules arrivals at a fixed rate, independent of how fast
// answers come back, and measures each latency from the moment the arrival
// was released to the workers: a request that waits for a free worker is
// charged for the wait, so the tail is not hidden when the server falls
// behind. How late the releases ran against their schedule (timer
// granularity, a starved load generator) is reported separately as Lag, not
// charged to the server. At most cfg.Workers requests are in flight.
// Arrivals still queued cfg.Drain after the last scheduled one are counted
// as unsent.
func openLoop(ctx context.Context, do doFunc, cfg loadConfig) cellResult {
	if cfg.Rate <= 0 {
		return cellResult{FirstErr: "open loop needs a positive rate"}
	}
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	n := min(cfg.MaxRequests, int(cfg.Rate*cfg.Duration.Seconds()))
	n = max(n, 1)
	queue := make(chan time.Time, n)
	workers := max(1, cfg.Workers)
	tallies := make([]*tally, workers)
	start := time.Now()
	giveUp := start.Add(time.Duration(n)*interval + cfg.Drain)
	var unsent atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		t := &tally{lat: make([]time.Duration, 0, 256)}
		tallies[w] = t
		wg.Go(func() {
			for released := range queue {
				if ctx.Err() != nil || time.Now().After(giveUp) {
					unsent.Add(1)
					continue
				}
				err := callOnce(ctx, do, cfg.RequestTimeout)
				t.record(time.Since(released), err)
			}
		})
	}
	// Arrivals: sleep until the next one is due, then release every arrival
	// whose time has come, so a late wake-up catches up instead of drifting.
	lag := make([]time.Duration, 0, n)
	for i := 0; i < n; {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			sleepCtx(ctx, d)
		}
		now := time.Now()
		for i < n {
			due = start.Add(time.Duration(i) * interval)
			if due.After(now) {
				break
			}
			lag = append(lag, now.Sub(due))
			queue <- now // never blocks: the buffer holds every arrival
			i++
		}
		if ctx.Err() != nil {
			for ; i < n; i++ {
				queue <- now
			}
		}
	}
	close(queue)
	wg.Wait()
	r := merge(tallies, time.Since(start), int(unsent.Load()))
	slices.Sort(lag)
	r.Lag = lag
	return r
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// errStatus reports an unexpected HTTP status.
var errStatus = errors.New("unexpected status")
