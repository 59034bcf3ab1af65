package connect

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-ml/sluice/internal/telemetry"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/feature/online"
)

// Operation label values.
const (
	opRead       = "read"
	opWrite      = "write"
	opDeleteView = "delete_view"
	opGetMeta    = "get_meta"
	opPutMeta    = "put_meta"
	opPing       = "ping"
)

type metrics struct {
	requests    *prometheus.CounterVec   // store, op, outcome
	duration    *prometheus.HistogramVec // store, op
	breakerOpen *prometheus.GaugeVec     // store
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		requests: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_feature_online_requests_total",
			Help: "Online store calls by store type, operation and outcome (ok, unavailable, error).",
		}, []string{"store", "op", "outcome"})),
		duration: telemetry.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_feature_online_request_duration_seconds",
			Help:    "Online store call latency by store type and operation.",
			Buckets: []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"store", "op"})),
		breakerOpen: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_feature_online_breaker_open",
			Help: "1 while the online store's circuit breaker is open (calls fail at once; one probe per interval), else 0. Only stores with a breaker (redis) export it.",
		}, []string{"store"})),
	}
}

// breakerStore is a store with a circuit breaker (redis.Store).
type breakerStore interface {
	BreakerOpen() bool
}

// instrumented wraps an online.Store with request metrics.
type instrumented struct {
	online.Store
	store   string
	m       *metrics
	breaker breakerStore     // nil when the store has none
	open    prometheus.Gauge // breakerOpen of store; nil without a breaker
}

// Instrument wraps s so every call is counted and timed under the store
// label kind ("embedded" or "redis"). reg nil leaves the metrics
// unregistered.
func Instrument(s online.Store, kind string, reg prometheus.Registerer) online.Store {
	i := &instrumented{Store: s, store: kind, m: newMetrics(reg)}
	if b, ok := s.(breakerStore); ok {
		i.breaker, i.open = b, i.m.breakerOpen.WithLabelValues(kind)
		i.open.Set(0)
	}
	return i
}

// Unwrap returns the wrapped store.
func (i *instrumented) Unwrap() online.Store { return i.Store }

// CountRows passes the wrapped store's row count on (the embedded store
// counts; a store that cannot answers -1).
func (i *instrumented) CountRows(ctx context.Context, view string) (int64, error) {
	if c, ok := i.Store.(interface {
		CountRows(ctx context.Context, view string) (int64, error)
	}); ok {
		return c.CountRows(ctx, view)
	}
	return -1, nil
}

func (i *instrumented) observe(op string, start time.Time, err error) {
	i.m.duration.WithLabelValues(i.store, op).Observe(time.Since(start).Seconds())
	outcome := "ok"
	switch {
	case errors.Is(err, online.ErrUnavailable):
		outcome = "unavailable"
	case err != nil:
		outcome = "error"
	}
	i.m.requests.WithLabelValues(i.store, op, outcome).Inc()
	if i.breaker != nil {
		// The breaker changes state only at the end of a call, so
		// reading it after each one keeps the gauge current.
		v := 0.0
		if i.breaker.BreakerOpen() {
			v = 1
		}
		i.open.Set(v)
	}
}

func (i *instrumented) Read(ctx context.Context, keys []online.Key) ([]online.Result, error) {
	start := time.Now()
	r, err := i.Store.Read(ctx, keys)
	i.observe(opRead, start, err)
	return r, err
}

func (i *instrumented) Write(ctx context.Context, entries []online.Entry, opts online.WriteOptions) (online.WriteStats, error) {
	start := time.Now()
	st, err := i.Store.Write(ctx, entries, opts)
	i.observe(opWrite, start, err)
	return st, err
}

func (i *instrumented) DeleteView(ctx context.Context, view string) error {
	start := time.Now()
	err := i.Store.DeleteView(ctx, view)
	i.observe(opDeleteView, start, err)
	return err
}

func (i *instrumented) GetMeta(ctx context.Context, name string) ([]byte, error) {
	start := time.Now()
	v, err := i.Store.GetMeta(ctx, name)
	i.observe(opGetMeta, start, err)
	return v, err
}

func (i *instrumented) PutMeta(ctx context.Context, name string, value []byte) error {
	start := time.Now()
	err := i.Store.PutMeta(ctx, name, value)
	i.observe(opPutMeta, start, err)
	return err
}

func (i *instrumented) Ping(ctx context.Context) error {
	start := time.Now()
	err := i.Store.Ping(ctx)
	i.observe(opPing, start, err)
	return err
}
