package httpapi

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the HTTP edge's collectors. The route label is the matched
// ServeMux pattern (or "unmatched"), never the raw path, so its values are
// bounded by the route table. Per-model metrics belong to modelrepo.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// series caches each (route, code)'s collectors: looking them up by
	// label values hashes the labels on every request. Routes and codes
	// are bounded, so the cache is too.
	series sync.Map // routeCode -> *routeSeries
}

type routeCode struct {
	route string
	code  int
}

type routeSeries struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "http", Name: "requests_total",
			Help: "HTTP requests answered, by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "http", Name: "request_duration_seconds",
			Help:    "Time from receiving a request to finishing its answer, by route pattern.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18), // 50µs to ~6.5s
			// Native buckets as well, for scrapers that ask for them.
			NativeHistogramBucketFactor:    1.1,
			NativeHistogramMaxBucketNumber: 160,
		}, []string{"route"}),
	}
}

func (m *metrics) observe(route string, code int, d time.Duration) {
	key := routeCode{route, code}
	v, ok := m.series.Load(key)
	if !ok {
		v, _ = m.series.LoadOrStore(key, &routeSeries{
			requests: m.requests.WithLabelValues(route, codeLabel(code)),
			duration: m.duration.WithLabelValues(route),
		})
	}
	s := v.(*routeSeries)
	s.requests.Inc()
	s.duration.Observe(d.Seconds())
}

// codeLabel avoids formatting the common codes on every request.
func codeLabel(code int) string {
	switch code {
	case 200:
		return "200"
	case 400:
		return "400"
	case 404:
		return "404"
	case 413:
		return "413"
	case 429:
		return "429"
	case 500:
		return "500"
	case 503:
		return "503"
	}
	return strconv.Itoa(code)
}

func itoa(n int) string { return strconv.Itoa(n) }
