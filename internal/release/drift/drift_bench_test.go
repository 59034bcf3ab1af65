package drift

import (
	"math/rand/v2"
	"testing"
	"time"
)

func BenchmarkWindowObserve(b *testing.B) {
	w := NewWindow(WindowOptions{})
	for i := range 10_000 { // past the fill phase: steady-state replacement
		w.Observe(float64(i))
	}
	b.ReportAllocs()
	v := 0.0
	for b.Loop() {
		v++
		w.Observe(v)
	}
}

func BenchmarkWindowObserveParallel(b *testing.B) {
	w := NewWindow(WindowOptions{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		v := 0.0
		for pb.Next() {
			v++
			w.Observe(v)
		}
	})
}

func BenchmarkMonitorObserve(b *testing.B) {
	m, err := NewMonitor("svc", []Variable{{Name: "distance_km"}, {Name: "region", Kind: Categorical, Categories: []string{"north", "south", "east"}}}, Options{}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	v := 0.0
	for b.Loop() {
		v++
		m.Observe("distance_km", v)
		m.ObserveCategory("region", "south")
	}
}

// BenchmarkCheck measures one Check of 20 numeric variables with full
// default windows (6144 values each) against quantile references.
func BenchmarkCheck(b *testing.B) {
	var vars []Variable
	for i := range 20 {
		name := "f" + string(rune('a'+i))
		vars = append(vars, Variable{Name: name, Reference: &Reference{Name: name, Quantiles: normalQuantiles(0)}})
	}
	m, err := NewMonitor("svc", vars, Options{Window: WindowOptions{Buckets: 1, Size: 6144}}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for range 20_000 {
		for _, v := range vars {
			m.Observe(v.Name, rng.NormFloat64())
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		m.Check()
	}
}

func BenchmarkWindowObserveAt(b *testing.B) {
	w := NewWindow(WindowOptions{})
	now := time.Now()
	for i := range 10_000 {
		w.ObserveAt(float64(i), now)
	}
	b.ReportAllocs()
	v := 0.0
	for b.Loop() {
		v++
		w.ObserveAt(v, now)
	}
}
