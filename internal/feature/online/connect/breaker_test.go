package connect

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/redis"
)

var _ breakerStore = (*redis.Store)(nil)

// breakerFake is a store whose breaker state the test sets.
type breakerFake struct {
	online.Store
	open atomic.Bool
}

func (b *breakerFake) BreakerOpen() bool          { return b.open.Load() }
func (b *breakerFake) Ping(context.Context) error { return nil }

func TestBreakerGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := &breakerFake{}
	s := Instrument(f, "redis", reg)
	m := newMetrics(reg)
	gauge := m.breakerOpen.WithLabelValues("redis")
	require.InDelta(t, 0, testutil.ToFloat64(gauge), 0, "exported from the start")

	f.open.Store(true)
	require.NoError(t, s.Ping(t.Context()))
	require.InDelta(t, 1, testutil.ToFloat64(gauge), 0)
	f.open.Store(false)
	require.NoError(t, s.Ping(t.Context()))
	require.InDelta(t, 0, testutil.ToFloat64(gauge), 0)

	// A store without a breaker exports no series.
	Instrument(downStore{}, "embedded", reg)
	require.Equal(t, 1, testutil.CollectAndCount(m.breakerOpen))
}
