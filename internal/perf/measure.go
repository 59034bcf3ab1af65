package perf

import (
	"math"
	"slices"
	"sync"
	"time"
)

// StabilityWindows is how many consecutive windows must agree before a
// load level counts as stable (perf_analyzer's rule).
const StabilityWindows = 3

// recorder collects request outcomes from many goroutines until a window
// boundary takes them.
type recorder struct {
	mu       sync.Mutex // guards the fields below
	lat      []time.Duration
	errs     int
	firstErr string
}

func (r *recorder) add(lat time.Duration, err error) {
	r.mu.Lock()
	if err != nil {
		r.errs++
		if r.firstErr == "" {
			r.firstErr = err.Error()
		}
	} else {
		r.lat = append(r.lat, lat)
	}
	r.mu.Unlock()
}

// count returns how many requests completed since the last take.
func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lat) + r.errs
}

// take returns what was recorded since the last take and starts afresh.
func (r *recorder) take() (lat []time.Duration, errs int, firstErr string) {
	r.mu.Lock()
	lat, errs, firstErr = r.lat, r.errs, r.firstErr
	r.lat = make([]time.Duration, 0, max(64, len(lat)))
	r.errs, r.firstErr = 0, ""
	r.mu.Unlock()
	slices.Sort(lat)
	return lat, errs, firstErr
}

// window is one measurement window: the requests that completed in it.
type window struct {
	Elapsed   time.Duration
	Latencies []time.Duration // successful requests, ascending
	Errors    int
	FirstErr  string
}

// throughput is completed inferences (successful requests × batch) per
// second.
func (w window) throughput(batch int) float64 {
	if w.Elapsed <= 0 {
		return 0
	}
	return float64(len(w.Latencies)*batch) / w.Elapsed.Seconds()
}

// stabilizer returns the latency the stability rule watches: the given
// percentile, or the average when pct is 0 (perf_analyzer's default).
func (w window) stabilizer(pct int) time.Duration {
	if pct <= 0 {
		return mean(w.Latencies)
	}
	return percentile(w.Latencies, float64(pct)/100)
}

// percentile returns the nearest-rank p-quantile (0 < p <= 1) of sorted, or
// 0 for no samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(n))) - 1
	return sorted[max(0, min(i, n-1))]
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// stable applies the stability rule to the last StabilityWindows windows:
// each must have completed requests, and in both throughput and the
// stabilizing latency the largest value may exceed the smallest by at most
// threshold percent.
func stable(ws []window, batch int, threshold float64, pct int) bool {
	if len(ws) < StabilityWindows {
		return false
	}
	last := ws[len(ws)-StabilityWindows:]
	tput := make([]float64, len(last))
	lat := make([]float64, len(last))
	for i, w := range last {
		tput[i] = w.throughput(batch)
		lat[i] = float64(w.stabilizer(pct))
		if tput[i] <= 0 || lat[i] <= 0 {
			return false
		}
	}
	limit := 1 + threshold/100
	return slices.Max(tput)/slices.Min(tput) <= limit && slices.Max(lat)/slices.Min(lat) <= limit
}

// mergeWindows combines windows into one, for the reported numbers.
func mergeWindows(ws []window) window {
	var out window
	n := 0
	for _, w := range ws {
		n += len(w.Latencies)
	}
	out.Latencies = make([]time.Duration, 0, n)
	for _, w := range ws {
		out.Elapsed += w.Elapsed
		out.Latencies = append(out.Latencies, w.Latencies...)
		out.Errors += w.Errors
		if out.FirstErr == "" {
			out.FirstErr = w.FirstErr
		}
	}
	slices.Sort(out.Latencies)
	return out
}
