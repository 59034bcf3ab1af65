package perf

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MaxRangeSteps bounds the number of load levels one range may produce.
const MaxRangeSteps = 1000

// ErrRange reports a malformed or out-of-bounds load range.
var ErrRange = errors.New("invalid range")

// ParseRange parses a load range in perf_analyzer's START[:END[:STEP]] form
// (END defaults to START and STEP to 1), or, as a Sluice extension, a
// comma-separated list of levels such as "1,8,32,64". With integer set every
// value must be a whole number (concurrency); otherwise fractions are allowed
// (request rates). Every level must be positive and a range yields at most
// MaxRangeSteps levels.
func ParseRange(s string, integer bool) ([]float64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("%w: empty", ErrRange)
	}
	if strings.Contains(s, ",") {
		parts := strings.Split(s, ",")
		if len(parts) > MaxRangeSteps {
			return nil, fmt.Errorf("%w: %q has more than %d levels", ErrRange, s, MaxRangeSteps)
		}
		out := make([]float64, 0, len(parts))
		for _, p := range parts {
			v, err := parseLevel(p, integer)
			if err != nil {
				return nil, fmt.Errorf("%w: %q: %w", ErrRange, s, err)
			}
			out = append(out, v)
		}
		return out, nil
	}
	parts := strings.Split(s, ":")
	if len(parts) > 3 {
		return nil, fmt.Errorf("%w: %q: want START[:END[:STEP]]", ErrRange, s)
	}
	vals := make([]float64, len(parts))
	for i, p := range parts {
		v, err := parseLevel(p, integer)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrRange, s, err)
		}
		vals[i] = v
	}
	start, end, step := vals[0], vals[0], 1.0
	if len(vals) > 1 {
		end = vals[1]
	}
	if len(vals) > 2 {
		step = vals[2]
	}
	if end < start {
		return nil, fmt.Errorf("%w: %q: end %g is below start %g", ErrRange, s, end, start)
	}
	// A tiny tolerance keeps 0.1:0.3:0.1 from losing its last level to
	// floating-point rounding.
	n := math.Floor((end-start)/step+1e-9) + 1
	if n > MaxRangeSteps {
		return nil, fmt.Errorf("%w: %q yields more than %d levels", ErrRange, s, MaxRangeSteps)
	}
	out := make([]float64, 0, int(n))
	for i := range int(n) {
		out = append(out, start+float64(i)*step)
	}
	return out, nil
}

func parseLevel(p string, integer bool) (float64, error) {
	p = strings.TrimSpace(p)
	var v float64
	if integer {
		n, err := strconv.ParseInt(p, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%q is not a whole number", p)
		}
		v = float64(n)
	} else {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, fmt.Errorf("%q is not a number", p)
		}
		v = f
	}
	if v <= 0 {
		return 0, fmt.Errorf("%q must be positive", p)
	}
	return v, nil
}
