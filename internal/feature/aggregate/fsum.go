package aggregate

import "math"

// partials is an exact sum of float64s: non-overlapping partial sums in
// increasing magnitude (Shewchuk's algorithm, as Python's math.fsum
// keeps them). Its rounded value is the correctly rounded exact sum, so
// it does not depend on the order values were added in or how they were
// grouped.
type partials []float64

// add adds x exactly.
func (p partials) add(x float64) partials {
	i := 0
	for _, y := range p {
		if math.Abs(x) < math.Abs(y) {
			x, y = y, x
		}
		hi := x + y
		lo := y - (hi - x)
		if lo != 0 {
			p[i] = lo
			i++
		}
		x = hi
	}
	return append(p[:i], x)
}

// merge adds every partial of q.
func (p partials) merge(q partials) partials {
	for _, x := range q {
		p = p.add(x)
	}
	return p
}

// value is the exact sum rounded to the nearest float64 (half to even).
func (p partials) value() float64 {
	n := len(p)
	if n == 0 {
		return 0
	}
	n--
	hi := p[n]
	lo := 0.0
	for n > 0 {
		x := hi
		n--
		y := p[n]
		hi = x + y
		yr := hi - x
		lo = y - yr
		if lo != 0 {
			break
		}
	}
	if n > 0 && ((lo < 0 && p[n-1] < 0) || (lo > 0 && p[n-1] > 0)) {
		y := lo * 2
		x := hi + y
		if yr := x - hi; y == yr {
			hi = x
		}
	}
	return hi
}
