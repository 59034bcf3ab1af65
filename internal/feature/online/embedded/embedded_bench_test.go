package embedded

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/onlinetest"
)

// BenchmarkWrite10k writes batches of 10k new rows (the materializer's
// shape); ns/op divided by 10k is the per-row store cost.
func BenchmarkWrite10k(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "online.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	payload := make([]byte, 60)
	es := make([]online.Entry, 10_000)
	for i := range es {
		es[i].Key = online.Key{View: "v", Entity: onlinetest.Ent(int64(i))}
	}
	// The materializer hands rows over in map order: shuffle.
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(es), func(i, j int) { es[i], es[j] = es[j], es[i] })
	ts := int64(0)
	b.ReportAllocs()
	for b.Loop() {
		ts++
		for i := range es {
			es[i].Record = feature.Record{EventTS: ts, Payload: payload}
		}
		if _, err := s.Write(b.Context(), es, online.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRead1 reads one row (the 1-entity online request).
func BenchmarkRead1(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "online.db"), Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	k := online.Key{View: "v", Entity: onlinetest.Ent(42)}
	if _, err := s.Write(b.Context(), []online.Entry{{Key: k, Record: feature.Record{EventTS: 1, Payload: make([]byte, 250)}}}, online.WriteOptions{}); err != nil {
		b.Fatal(err)
	}
	keys := []online.Key{k}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Read(b.Context(), keys); err != nil {
			b.Fatal(err)
		}
	}
}
