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

// TestBudgetReserve: the last eighth of the budget is open only to
// requests of at most SmallBytes; chunks of bodies of unknown length never
// take it, whatever their size.
func TestBudgetReserve(t *testing.T) {
	const mib = 1 << 20
	type op struct {
		n    int64
		bulk bool // a chunk of a body of unknown length
		want bool
	}
	tests := []struct {
		name  string
		ops   []op
		inUse int64
	}{
		{name: "chunks stop at seven eighths", ops: []op{{n: 7 * mib, bulk: true, want: true}, {n: 1, bulk: true, want: false}}, inUse: 7 * mib},
		{name: "small requests take the reserve", ops: []op{{n: 7 * mib, bulk: true, want: true}, {n: SmallBytes, want: true}, {n: 1, want: false}}, inUse: 8 * mib},
		{name: "a large request does not", ops: []op{{n: 6 * mib, bulk: true, want: true}, {n: SmallBytes + 1, want: false}, {n: SmallBytes, want: true}}, inUse: 7 * mib},
		{name: "a large request alone fits seven eighths", ops: []op{{n: 7*mib + 1, want: false}, {n: 7 * mib, want: true}}, inUse: 7 * mib},
		{name: "small chunks are still chunks", ops: []op{{n: 7 * mib, want: true}, {n: 1, bulk: true, want: false}, {n: 1, want: true}}, inUse: 7*mib + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBudget(8*mib, nil)
			for i, o := range tt.ops {
				var got bool
				if o.bulk {
					got = b.tryAcquireBulk(o.n)
				} else {
					got = b.TryAcquire(o.n)
				}
				require.Equal(t, o.want, got, "op %d: %+v", i, o)
			}
			require.Equal(t, tt.inUse, b.InUse())
		})
	}
	t.Run("unlimited", func(t *testing.T) {
		b := NewBudget(0, nil)
		require.True(t, b.tryAcquireBulk(1<<40))
		require.True(t, b.TryAcquire(1<<40))
	})
}

func TestBudgetOverReleasePanics(t *testing.T) {
	b := NewBudget(10, nil)
	require.True(t, b.TryAcquire(5))
	require.Panics(t, func() { b.Release(6) })
}

func TestBudgetConcurrent(t *testing.T) {
	const limit = 1000
	b := NewBudget(limit, NewMetrics(nil))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 2000 {
				n := int64(i%97 + 1)
				if b.TryAcquire(n) {
					if got := b.InUse(); got > limit {
						t.Errorf("in use %d > limit %d", got, limit)
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
		{
			name: "negative", l: Limits{MaxBodyBytes: -1, MaxHeaderBytes: -1, MaxHeaderCount: -1},
			wantErr: []string{"max_body_bytes must not be negative", "max_header_bytes must not be negative", "max_header_count must not be negative"},
		},
		{name: "body over the budget", l: DefaultLimits(2 << 20), budget: 1 << 20, wantErr: []string{"exceeds the memory budget"}},
		{name: "small body may use the reserve", l: DefaultLimits(1 << 20), budget: 1 << 20},
		{
			name: "large body over seven eighths", l: DefaultLimits(60 << 20), budget: 64 << 20,
			wantErr: []string{"exceeds the memory budget's 58720256 bytes open to bodies over 1 MiB"},
		},
		{name: "large body within seven eighths", l: DefaultLimits(56 << 20), budget: 64 << 20},
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
