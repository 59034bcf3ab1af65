package admission

import (
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestBudget(t *testing.T) {
	tests := []struct {
		name    string
		max     int64
		acquire []int64
		want    []bool
		inUse   int64
	}{
		{name: "fits", max: 100, acquire: []int64{40, 60}, want: []bool{true, true}, inUse: 100},
		{name: "over", max: 100, acquire: []int64{40, 61, 60}, want: []bool{true, false, true}, inUse: 100},
		{name: "larger than the budget", max: 100, acquire: []int64{101}, want: []bool{false}, inUse: 0},
		{name: "zero and negative take nothing", max: 1, acquire: []int64{0, -5, 1}, want: []bool{true, true, true}, inUse: 1},
		{name: "unlimited still counts", max: 0, acquire: []int64{1 << 40, 1 << 40}, want: []bool{true, true}, inUse: 2 << 40},
		{name: "negative max is unlimited", max: -1, acquire: []int64{1 << 40}, want: []bool{true}, inUse: 1 << 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMetrics(nil)
			b := NewBudget(tt.max, m)
			for i, n := range tt.acquire {
				require.Equal(t, tt.want[i], b.TryAcquire(n), "TryAcquire(%d)", n)
			}
			require.Equal(t, tt.inUse, b.InUse())
			require.InDelta(t, float64(tt.inUse), testutil.ToFloat64(m.inflight), 0)
			require.InDelta(t, float64(max(tt.max, 0)), testutil.ToFloat64(m.budget), 0)
			for i, n := range tt.acquire {
				if tt.want[i] {
					b.Release(n)
				}
			}
			require.Zero(t, b.InUse())
			require.Zero(t, testutil.ToFloat64(m.inflight))
		})
	}
}

func TestBudgetOverReleasePanics(t *testing.T) {
	b := NewBudget(10, nil)
	require.True(t, b.TryAcquire(5))
	require.Panics(t, func() { b.Release(6) })
}

func TestBudgetConcurrent(t *testing.T) {
	const max = 1000
	b := NewBudget(max, NewMetrics(nil))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 2000 {
				n := int64(i%97 + 1)
				if b.TryAcquire(n) {
					if got := b.InUse(); got > max {
						t.Errorf("in use %d > max %d", got, max)
					}
					b.Release(n)
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, b.InUse())
}

func TestLimitsValidate(t *testing.T) {
	tests := []struct {
		name    string
		l       Limits
		budget  int64
		wantErr []string
	}{
		{name: "defaults", l: DefaultLimits(64 << 20), budget: DefaultBudgetBytes},
		{name: "zero", l: Limits{}, budget: 0},
		{name: "unlimited budget", l: DefaultLimits(1 << 40), budget: 0},
		{name: "negative", l: Limits{MaxBodyBytes: -1, MaxHeaderBytes: -1, MaxHeaderCount: -1},
			wantErr: []string{"max_body_bytes must not be negative", "max_header_bytes must not be negative", "max_header_count must not be negative"}},
		{name: "body over the budget", l: DefaultLimits(2 << 20), budget: 1 << 20, wantErr: []string{"exceeds the memory budget"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.l.Validate(tt.budget)
			if len(tt.wantErr) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tt.wantErr {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	l := DefaultLimits(64 << 20)
	require.Equal(t, Limits{MaxBodyBytes: 64 << 20, MaxHeaderBytes: 64 << 10, MaxHeaderCount: 100}, l)
	require.GreaterOrEqual(t, int64(DefaultBudgetBytes), l.MaxBodyBytes, "one maximal request always fits the default budget")
	require.True(t, strings.HasPrefix(ErrOverloaded.Error(), "server overloaded"))
}
