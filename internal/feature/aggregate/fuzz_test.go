package aggregate

import (
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
)

// FuzzDecodeEvent feeds arbitrary bytes to the JSON event decoder and the
// stored-tiles decoder: neither may panic, and a decoded state encodes
// back to the same bytes.
func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(`{"ts":"2026-01-01T00:00:00Z","route":"r1","x":1.5,"y":null}`))
	f.Add([]byte(`{"ts":1767225600.25,"route":"r2","x":-3}`))
	f.Add([]byte(`{"ts":"2026-13-01","route":7}`))
	s, err := NewSpec(&feature.StreamView{Tile: time.Minute, Aggregations: []feature.Aggregation{
		{Name: "a", Column: "x", Function: "sum", Window: 10 * time.Minute},
		{Name: "b", Column: "y", Function: "stddev", Window: time.Hour},
	}})
	if err != nil {
		f.Fatal(err)
	}
	st := NewState()
	ev := Event{Seq: 1, Arrival: 1, Time: 1, Values: []float64{1, 2}}
	st.Apply(s, &ev)
	f.Add(st.Append(nil, s))
	d := NewDecoder(s, "ts", []string{"route"}, []feature.Kind{feature.KindString}, nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		var ev Event
		if _, err := d.Decode(b, &ev, nil); err == nil && len(ev.Values) != len(s.Columns) {
			t.Fatalf("decoded %d values for %d columns", len(ev.Values), len(s.Columns))
		}
		if st, err := DecodeForRead(b, s); err == nil {
			out := make([]feature.Value, s.Features())
			st.Values(s, 0, out)
			at := make([]feature.Value, s.Features())
			if _, found, err := ValuesAt(b, s, 0, at); err != nil || (found && !st.Empty() && !sameAll(out, at)) {
				t.Fatalf("ValuesAt disagrees with Decode+Values: %v %+v %+v", err, at, out)
			}
		}
		if st, err := Decode(b, s); err == nil {
			_ = st.Append(nil, s)
			out := make([]feature.Value, s.Features())
			st.Values(s, 0, out)
		}
	})
}

func sameAll(a, b []feature.Value) bool {
	for i := range a {
		if !same(a[i], b[i]) && !(a[i].F64 != a[i].F64 && b[i].F64 != b[i].F64) {
			return false
		}
	}
	return true
}
