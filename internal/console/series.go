package console

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The metric families the charts are drawn from (see docs/metrics.md).
// A family the registry does not have leaves its charts empty.
const (
	metricModelRequests = "sluice_model_inference_requests_total" // {model, version}: successes
	metricModelFailures = "sluice_model_inference_failures_total" // {model, version, reason}
	metricModelDuration = "sluice_model_request_duration_seconds" // {model, version}
	metricModelQueue    = "sluice_model_queue_duration_seconds"   // {model, version}
	metricGWRequests    = "sluice_gateway_requests_total"         // {service, route, code, source}
	metricGWDuration    = "sluice_gateway_request_duration_seconds"
	metricFeatureReads  = "sluice_feature_get_online_features_seconds" // {outcome}
	metricHotReads      = "sluice_feature_hot_reads_total"             // {view, outcome=hit|miss}
)

// Series ids: "model/<name>", "service/<name>", "features/reads" and
// "view/<name>".
const (
	kindModel    = "model"
	kindService  = "service"
	kindFeatures = "features"
	kindView     = "view"
)

// raw is one series' cumulative values in one gather.
type raw struct {
	total, errs float64 // requests and failed requests (5xx for a service)
	errs4       float64 // a service's 4xx answers
	lat, queue  buckets // latency and queue time histograms
	hits, miss  float64 // hot subset reads
}

// buckets is a classic histogram: cumulative counts by upper bound, the
// +Inf bucket included.
type buckets map[float64]float64

func (b *buckets) add(h *dto.Histogram) {
	if h == nil {
		return
	}
	if *b == nil {
		*b = buckets{}
	}
	for _, bk := range h.GetBucket() {
		(*b)[bk.GetUpperBound()] += float64(bk.GetCumulativeCount())
	}
	(*b)[math.Inf(1)] += float64(h.GetSampleCount())
}

// point is one series' derived values over one sampling interval. NaN
// means unknown (no requests, or a counter reset).
type point struct {
	rps, eps   float64 // requests and failures per second
	e4ps       float64 // a service's 4xx answers per second
	p50, p99   float64 // latency quantiles, seconds
	queue99    float64 // queue time p99, seconds
	hits, miss float64 // hot reads per second
}

type frame struct {
	t      time.Time
	points map[string]point
}

// sampler turns gathers of the registry into rates and quantiles, and
// keeps the last frames.
type sampler struct {
	g     prometheus.Gatherer
	every time.Duration
	keep  int

	mu     sync.Mutex // protects the fields below
	prev   map[string]*raw
	prevAt time.Time
	frames []frame // oldest first
	err    error   // of the last gather
}

func newSampler(g prometheus.Gatherer, every time.Duration, keep int) *sampler {
	return &sampler{g: g, every: every, keep: keep}
}

// sampleIfDue gathers when the last sample is at least every old.
func (s *sampler) sampleIfDue(now time.Time) {
	s.mu.Lock()
	due := s.prevAt.IsZero() || now.Sub(s.prevAt) >= s.every || now.Before(s.prevAt)
	s.mu.Unlock()
	if due {
		s.sample(now)
	}
}

// sample gathers the registry once and appends a frame.
func (s *sampler) sample(now time.Time) {
	if s.g == nil {
		return
	}
	mfs, err := s.g.Gather()
	cur := collect(mfs)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.prev != nil && !now.After(s.prevAt) {
		return // a concurrent, later sample won the race
	}
	s.err = err
	if s.prev != nil {
		dt := now.Sub(s.prevAt).Seconds()
		f := frame{t: now, points: make(map[string]point, len(cur))}
		for id, c := range cur {
			p, ok := s.prev[id]
			if !ok {
				// A series born since the last gather: its counters
				// started at zero within the interval.
				p = &raw{}
			}
			f.points[id] = derive(p, c, dt)
		}
		s.frames = append(s.frames, f)
		if over := len(s.frames) - s.keep; over > 0 {
			s.frames = slices.Delete(s.frames, 0, over)
		}
	}
	s.prev, s.prevAt = cur, now
}

// collect sums the families the charts use into series.
func collect(mfs []*dto.MetricFamily) map[string]*raw {
	out := map[string]*raw{}
	get := func(kind, name string) *raw {
		id := kind + "/" + name
		r, ok := out[id]
		if !ok {
			r = &raw{}
			out[id] = r
		}
		return r
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case metricModelRequests:
				get(kindModel, label(m, "model")).total += m.GetCounter().GetValue()
			case metricModelFailures:
				r := get(kindModel, label(m, "model"))
				r.total += m.GetCounter().GetValue()
				r.errs += m.GetCounter().GetValue()
			case metricModelDuration:
				get(kindModel, label(m, "model")).lat.add(m.GetHistogram())
			case metricModelQueue:
				get(kindModel, label(m, "model")).queue.add(m.GetHistogram())
			case metricGWRequests:
				r := get(kindService, label(m, "service"))
				r.total += m.GetCounter().GetValue()
				switch code, _ := strconv.Atoi(label(m, "code")); {
				case code >= 500:
					r.errs += m.GetCounter().GetValue()
				case code >= 400:
					r.errs4 += m.GetCounter().GetValue()
				}
			case metricGWDuration:
				get(kindService, label(m, "service")).lat.add(m.GetHistogram())
			case metricFeatureReads:
				r := get(kindFeatures, "reads")
				n := float64(m.GetHistogram().GetSampleCount())
				r.total += n
				if label(m, "outcome") != "ok" {
					r.errs += n
				}
				r.lat.add(m.GetHistogram())
			case metricHotReads:
				r := get(kindView, label(m, "view"))
				if label(m, "outcome") == "hit" {
					r.hits += m.GetCounter().GetValue()
				} else {
					r.miss += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// derive computes a point from two gathers dt seconds apart.
func derive(prev, cur *raw, dt float64) point {
	rate := func(a, b float64) float64 {
		if b < a {
			return math.NaN() // reset: a series went away and came back
		}
		return (b - a) / dt
	}
	return point{
		rps: rate(prev.total, cur.total), eps: rate(prev.errs, cur.errs), e4ps: rate(prev.errs4, cur.errs4),
		p50: quantile(0.5, prev.lat, cur.lat), p99: quantile(0.99, prev.lat, cur.lat),
		queue99: quantile(0.99, prev.queue, cur.queue),
		hits:    rate(prev.hits, cur.hits), miss: rate(prev.miss, cur.miss),
	}
}

// quantile estimates the q-quantile of the observations between two
// histogram snapshots as PromQL's histogram_quantile does: linear
// interpolation within the bucket that holds the rank, the highest finite
// bound when the rank falls in +Inf. It is NaN without observations.
func quantile(q float64, prev, cur buckets) float64 {
	if len(cur) == 0 {
		return math.NaN()
	}
	bounds := make([]float64, 0, len(cur))
	for b := range cur {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	counts := make([]float64, len(bounds))
	for i, b := range bounds {
		counts[i] = cur[b] - prev[b]
		if counts[i] < 0 || (i > 0 && counts[i] < counts[i-1]) {
			return math.NaN() // a reset between the snapshots
		}
	}
	total := counts[len(counts)-1]
	if total <= 0 || !math.IsInf(bounds[len(bounds)-1], 1) {
		return math.NaN()
	}
	rank := q * total
	for i, c := range counts {
		if c < rank {
			continue
		}
		if math.IsInf(bounds[i], 1) {
			if i == 0 {
				return math.NaN()
			}
			return bounds[i-1]
		}
		lower, below := 0.0, 0.0
		if i > 0 {
			lower, below = bounds[i-1], counts[i-1]
		}
		if c == below {
			return bounds[i]
		}
		return lower + (bounds[i]-lower)*(rank-below)/(c-below)
	}
	return bounds[len(bounds)-1]
}

// seriesJSON is the answer of /console/api/series: timestamps and, per
// series id, columns aligned with them (null where unknown).
type seriesJSON struct {
	IntervalSeconds float64                          `json:"interval_seconds"`
	T               []int64                          `json:"t"` // unix seconds
	Series          map[string]map[string][]*float64 `json:"series"`
	Error           string                           `json:"error,omitempty"`
}

// columns are the values each kind of series charts, by column name.
var columns = map[string][]struct {
	name string
	get  func(point) float64
}{
	kindModel: {
		{"rps", func(p point) float64 { return p.rps }},
		{"errors_per_second", func(p point) float64 { return p.eps }},
		{"p50_ms", func(p point) float64 { return p.p50 * 1e3 }},
		{"p99_ms", func(p point) float64 { return p.p99 * 1e3 }},
		{"queue_p99_ms", func(p point) float64 { return p.queue99 * 1e3 }},
	},
	kindService: {
		{"rps", func(p point) float64 { return p.rps }},
		// 2xx is what is neither 4xx nor 5xx (the gateway answers no 1xx
		// or 3xx).
		{"ok_per_second", func(p point) float64 { return p.rps - p.eps - p.e4ps }},
		{"client_errors_per_second", func(p point) float64 { return p.e4ps }},
		{"errors_per_second", func(p point) float64 { return p.eps }},
		{"p50_ms", func(p point) float64 { return p.p50 * 1e3 }},
		{"p99_ms", func(p point) float64 { return p.p99 * 1e3 }},
	},
	kindFeatures: {
		{"rps", func(p point) float64 { return p.rps }},
		{"errors_per_second", func(p point) float64 { return p.eps }},
		{"p50_ms", func(p point) float64 { return p.p50 * 1e3 }},
		{"p99_ms", func(p point) float64 { return p.p99 * 1e3 }},
	},
	kindView: {
		{"hot_hits_per_second", func(p point) float64 { return p.hits }},
		{"cold_fallbacks_per_second", func(p point) float64 { return p.miss }},
	},
}

// series returns the kept frames' series of one kind (all kinds when kind
// is empty).
func (s *sampler) series(kind string) seriesJSON {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := seriesJSON{IntervalSeconds: s.every.Seconds(), T: make([]int64, len(s.frames)), Series: map[string]map[string][]*float64{}}
	if s.err != nil {
		out.Error = s.err.Error()
	}
	for i, f := range s.frames {
		out.T[i] = f.t.Unix()
		for id, p := range f.points {
			k, _, _ := strings.Cut(id, "/")
			if kind != "" && k != kind {
				continue
			}
			cols, ok := out.Series[id]
			if !ok {
				cols = map[string][]*float64{}
				for _, c := range columns[k] {
					cols[c.name] = make([]*float64, len(s.frames))
				}
				out.Series[id] = cols
			}
			for _, c := range columns[k] {
				if v := c.get(p); !math.IsNaN(v) && !math.IsInf(v, 0) {
					cols[c.name][i] = &v
				}
			}
		}
	}
	return out
}

// totals returns the cumulative hot hits and misses per view from the last
// gather.
func (s *sampler) hotTotals() map[string][2]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][2]float64{}
	for id, r := range s.prev {
		if name, ok := strings.CutPrefix(id, kindView+"/"); ok {
			out[name] = [2]float64{r.hits, r.miss}
		}
	}
	return out
}
