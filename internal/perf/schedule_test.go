package perf

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestScheduleConstant(t *testing.T) {
	s, err := newSchedule(Constant, 250, 1)
	require.NoError(t, err)
	for range 10 {
		require.Equal(t, 4*time.Millisecond, s.next())
	}
}

func TestSchedulePoissonMeanRate(t *testing.T) {
	for _, rate := range []float64{10, 1000, 50000} {
		s, err := newSchedule(Poisson, rate, 42)
		require.NoError(t, err)
		const n = 20000
		mean := time.Duration(float64(time.Second) / rate)
		var total time.Duration
		var short, long int
		for range n {
			g := s.next()
			require.GreaterOrEqual(t, g, time.Duration(0))
			require.LessOrEqual(t, g, maxGapFactor*mean, "a gap is bounded")
			total += g
			if g < mean/10 {
				short++
			}
			if g > 3*mean {
				long++
			}
		}
		got := float64(n) / total.Seconds()
		require.InDelta(t, rate, got, rate*0.03, "achieved mean rate")
		// Exponential gaps: P(g < mean/10) = 9.5%, P(g > 3·mean) = 5%. A
		// constant schedule would have neither.
		require.InDelta(t, 0.095*n, float64(short), 0.02*n)
		require.InDelta(t, 0.05*n, float64(long), 0.015*n)
	}
}

func TestSchedulePoissonRepeatable(t *testing.T) {
	a, _ := newSchedule(Poisson, 100, 7)
	b, _ := newSchedule(Poisson, 100, 7)
	for range 100 {
		require.Equal(t, a.next(), b.next())
	}
}

func TestScheduleRejects(t *testing.T) {
	_, err := newSchedule(Poisson, 0, 1)
	require.Error(t, err)
	_, err = newSchedule("bursty", 10, 1)
	require.Error(t, err)
	_, err = newSchedule(Constant, 1e12, 1)
	require.Error(t, err)
}
