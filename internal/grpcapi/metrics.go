package grpcapi

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc/codes"
)

// metrics are the gRPC edge's collectors. The method label is the full
// gRPC method name of a registered RPC, so its values are bounded by the
// services the server registers (gRPC answers unknown methods before any
// interceptor runs).
type metrics struct {
	requests *prometheus.CounterVec   // method, code
	duration *prometheus.HistogramVec // method
	// series caches each (method, code)'s collectors, so a call does not
	// hash its label values; methods and codes are bounded, so is this.
	series sync.Map // methodCode -> *methodSeries
}

type methodCode struct {
	method string
	code   codes.Code
}

type methodSeries struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// observe records one call of method that ended with code after d
// seconds.
func (m *metrics) observe(method string, code codes.Code, seconds float64) {
	key := methodCode{method, code}
	v, ok := m.series.Load(key)
	if !ok {
		v, _ = m.series.LoadOrStore(key, &methodSeries{
			requests: m.requests.WithLabelValues(method, code.String()),
			duration: m.duration.WithLabelValues(method),
		})
	}
	ms := v.(*methodSeries)
	ms.duration.Observe(seconds)
	ms.requests.Inc()
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_grpc_requests_total",
			Help: "gRPC requests handled, by full method name and status code.",
		}, []string{"method", "code"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:                           "sluice_grpc_request_duration_seconds",
			Help:                           "Time to handle a gRPC request (a whole stream for streaming RPCs), by full method name.",
			Buckets:                        []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
			NativeHistogramBucketFactor:    1.1,
			NativeHistogramMaxBucketNumber: 100,
		}, []string{"method"}),
	}
}
