package perf

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Distribution is how open-loop arrivals are spaced.
type Distribution string

// The arrival distributions (perf_analyzer's --request-distribution).
const (
	// Constant spaces arrivals exactly 1/rate apart.
	Constant Distribution = "constant"
	// Poisson draws exponentially distributed gaps with mean 1/rate.
	Poisson Distribution = "poisson"
)

// maxGapFactor caps one Poisson gap at this many mean gaps, so a single
// draw can never stall a window. The chance of a longer gap is e^-20.
const maxGapFactor = 20

// schedule yields the gaps between open-loop arrivals.
type schedule struct {
	dist Distribution
	mean time.Duration
	rng  *rand.Rand
}

func newSchedule(dist Distribution, rate float64, seed uint64) (*schedule, error) {
	if rate <= 0 {
		return nil, fmt.Errorf("request rate must be positive, got %g", rate)
	}
	switch dist {
	case Constant, Poisson:
	default:
		return nil, fmt.Errorf("unknown request distribution %q (want constant or poisson)", dist)
	}
	mean := time.Duration(float64(time.Second) / rate)
	if mean <= 0 {
		return nil, fmt.Errorf("request rate %g is too high", rate)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) //nolint:gosec // arrival times, not secrets: repeatable by design
	return &schedule{dist: dist, mean: mean, rng: rng}, nil
}

// next returns the gap before the next arrival.
func (s *schedule) next() time.Duration {
	if s.dist == Constant {
		return s.mean
	}
	g := s.rng.ExpFloat64()
	g = min(g, maxGapFactor)
	return time.Duration(g * float64(s.mean))
}
