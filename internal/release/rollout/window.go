package rollout

import (
	"math"
	"time"
)

// Outcome is what the gateway saw of one request served by an arm.
type Outcome struct {
	// Status is the HTTP-equivalent status; 500 and above count as errors
	// (4xx are the client's, not the version's).
	Status int
	// Latency is the time the version took to answer.
	Latency time.Duration
	// Confidence is the model's confidence score, when HasConfidence.
	Confidence float64
	// HasConfidence says whether the answer carried a confidence score.
	HasConfidence bool
}

// The latency histogram has log-spaced buckets: bucket 0 holds latencies up
// to 1µs and bucket i > 0 holds (g^(i-1), g^i] µs with g = 1.02, so a
// quantile read from it is within 1 % of the true value, memory is fixed
// (latBuckets counters per window) and windows merge by adding counts.
const (
	latBuckets = 1200 // 1.02^1199 µs ≈ 5.8 h: anything slower lands in the last bucket
	latGrowth  = 1.02
)

var lnGrowth = math.Log(latGrowth)

func latBucket(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if !(us > 1) {
		return 0
	}
	i := int(math.Ceil(math.Log(us) / lnGrowth))
	return min(max(i, 1), latBuckets-1)
}

// latValue is the geometric middle of bucket i.
func latValue(i int) time.Duration {
	if i == 0 {
		return time.Microsecond
	}
	return time.Duration(math.Pow(latGrowth, float64(i)-0.5) * float64(time.Microsecond))
}

// window accumulates one arm's outcomes in one group during one stage.
type window struct {
	n       uint64 // requests
	errors  uint64 // requests with status >= 500
	confN   uint64 // requests with a confidence score
	lowConf uint64 // of those, below the threshold
	lat     []uint64
}

func (w *window) add(o *Outcome, confidenceBelow float64) {
	w.n++
	if o.Status >= 500 {
		w.errors++
	}
	if o.HasConfidence {
		w.confN++
		// NaN counts as low: a score that is not a number is no confidence.
		if !(o.Confidence >= confidenceBelow) {
			w.lowConf++
		}
	}
	if w.lat == nil {
		w.lat = make([]uint64, latBuckets)
	}
	w.lat[latBucket(o.Latency)]++
}

func (w *window) merge(o *window) {
	w.n += o.n
	w.errors += o.errors
	w.confN += o.confN
	w.lowConf += o.lowConf
	if o.lat == nil {
		return
	}
	if w.lat == nil {
		w.lat = make([]uint64, latBuckets)
	}
	for i, c := range o.lat {
		w.lat[i] += c
	}
}

func (w *window) errorRate() float64 {
	if w.n == 0 {
		return 0
	}
	return float64(w.errors) / float64(w.n)
}

func (w *window) lowConfShare() float64 {
	if w.confN == 0 {
		return 0
	}
	return float64(w.lowConf) / float64(w.confN)
}

// p95 is the nearest-rank 95th percentile latency; 0 for an empty window.
func (w *window) p95() time.Duration {
	if w.n == 0 || w.lat == nil {
		return 0
	}
	rank := uint64(math.Ceil(0.95 * float64(w.n)))
	var cum uint64
	for i, c := range w.lat {
		cum += c
		if cum >= rank {
			return latValue(i)
		}
	}
	return latValue(latBuckets - 1)
}
