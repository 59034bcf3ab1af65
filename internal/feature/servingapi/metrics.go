package servingapi

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// httpMetrics are the HTTP edge's request collectors. The route label
// takes only the handler's patterns (and "unmatched"), so its values are
// bounded.
type httpMetrics struct {
	httpReqs *prometheus.CounterVec
	httpDur  *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	f := promauto.With(reg)
	return &httpMetrics{
		httpReqs: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "feature_server", Name: "requests_total",
			Help: "Feature server HTTP requests answered, by route pattern and status code.",
		}, []string{"route", "code"}),
		httpDur: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "feature_server", Name: "request_duration_seconds",
			Help:    "Feature server HTTP request duration, by route pattern.",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 18),
		}, []string{"route"}),
	}
}

// grpcMetrics are the gRPC edge's call collectors, by method (two).
type grpcMetrics struct {
	grpcReqs *prometheus.CounterVec
	grpcDur  *prometheus.HistogramVec
}

func newGRPCMetrics(reg prometheus.Registerer) *grpcMetrics {
	f := promauto.With(reg)
	return &grpcMetrics{
		grpcReqs: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "feature_server", Name: "grpc_requests_total",
			Help: "Feature server gRPC calls answered (Feast's ServingService), by method and gRPC code.",
		}, []string{"method", "code"}),
		grpcDur: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "feature_server", Name: "grpc_request_duration_seconds",
			Help:    "Feature server gRPC call duration (Feast's ServingService), by method.",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 18),
		}, []string{"method"}),
	}
}
