package rollout

import (
	"testing"
	"time"
)

func TestDecideDoesNotAllocate(t *testing.T) {
	h := newHarness(t, testConfig(t), Options{})
	reqs := []Attributes{attrs(0), attrs(1), attrs(2), attrs(3)}
	allocs := testing.AllocsPerRun(1000, func() {
		for _, r := range reqs {
			h.c.Decide(r)
		}
	})
	if allocs != 0 {
		t.Fatalf("Decide allocates %v times per 4 calls", allocs)
	}
}

func BenchmarkDecide(b *testing.B) {
	c, err := New("parcel-eta", testConfig(b), Options{}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]Attributes, 64)
	for i := range reqs {
		reqs[i] = attrs(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c.Decide(reqs[i%len(reqs)])
		i++
	}
}

func BenchmarkObserveParallel(b *testing.B) {
	c, err := New("parcel-eta", Config{Candidate: Target{Version: "2"}}, Options{}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	o := Outcome{Status: 200, Latency: 12 * time.Millisecond, Confidence: 0.9, HasConfidence: true}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Observe(ArmCandidate, AllGroup, o)
		}
	})
}
