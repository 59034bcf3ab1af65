package rollout

import (
	"bytes"
	"testing"
	"time"
)

// FuzzParseSavedState feeds arbitrary bytes to the state-file parser: it
// must reject or accept without panicking, and what it accepts must encode
// and parse back to the same file.
func FuzzParseSavedState(f *testing.F) {
	s := &SavedState{
		Schema: StateSchema, Service: "parcel-eta", Stable: Target{Version: "1"}, Candidate: Target{Version: "2"},
		State: StateRolledBack, Stage: 1, StageName: "long-tail", StageSince: t0, StateSince: t0.Add(time.Minute),
		Reason: &Reason{
			Gate: GateErrorRate, Value: 0.5, Threshold: 0.01, Stage: "long-tail", Group: "region-sa",
			Suspects: []Suspect{{Feature: "x", PSI: 0.4, PValue: 1e-9}}, Message: "gate error_rate failed",
		},
		History: []Transition{{Time: t0, Kind: KindStart, To: "premium", State: StateProgressing}},
	}
	seed, err := s.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(`{"schema":1,"state":"paused","stage":0,"stage_since":"2026-01-01T00:00:00+02:00","history":[]}`))
	f.Add([]byte(`{"schema":1,"state":"progressing","stage":3,"stage_since":"2026-01-01T00:00:00Z","reason":null}`))
	f.Add([]byte(`{"schema":1}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"schema":1,"state":"complete","stage_since":"2026-01-01T00:00:00Z","history":[{"kind":"promote","state":"complete","reason":"\xff"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseSavedState(data)
		if err != nil {
			return
		}
		enc, err := got.Marshal()
		if err != nil {
			t.Fatalf("marshal an accepted state: %v", err)
		}
		again, err := ParseSavedState(enc)
		if err != nil {
			t.Fatalf("parse a marshalled state: %v\n%s", err, enc)
		}
		enc2, err := again.Marshal()
		if err != nil {
			t.Fatalf("marshal again: %v", err)
		}
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip changed the state:\n%s\n%s", enc, enc2)
		}
	})
}

// FuzzWindowsSnapshot feeds arbitrary bytes to the parser of another
// replica's window snapshot: it must reject or accept without panicking,
// and a window it accepts never counts more latencies than requests.
func FuzzWindowsSnapshot(f *testing.F) {
	f.Add([]byte(`{"schema":1,"stage":0,"stage_since":"2026-01-01T00:00:00Z","groups":[{"name":"all","cand":{"n":3,"errors":1,"lat":[[10,2],[11,1]]},"stab":{}}],"base":{"n":1,"lat":[[0,1]]}}`))
	f.Add([]byte(`{"schema":1,"base":{"n":1,"lat":[[1199,1]]}}`))
	f.Add([]byte(`{"schema":1,"base":{"n":18446744073709551615,"lat":[[1,18446744073709551615],[2,1]]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := parseWindowsSnapshot(data)
		if err != nil {
			return
		}
		recs := []windowRecord{s.Base}
		for _, g := range s.Groups {
			recs = append(recs, g.Cand, g.Stab)
		}
		for _, r := range recs {
			w, err := r.window()
			if err != nil {
				continue
			}
			var sum uint64
			for _, n := range w.lat {
				sum += n
			}
			if sum > w.n || w.errors > w.n {
				t.Fatalf("accepted a window with %d latencies and %d errors for %d requests", sum, w.errors, w.n)
			}
		}
	})
}
