package report

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/release/record"
)

type sliceSource struct{ recs []*record.Record }

func (s *sliceSource) Next(context.Context) (*record.Record, error) {
	if len(s.recs) == 0 {
		return nil, io.EOF
	}
	r := s.recs[0]
	s.recs = s.recs[1:]
	return r, nil
}

func (s *sliceSource) Close() error { return nil }

func TestReport(t *testing.T) {
	start := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	var recs []*record.Record
	var absSA2, nSA2 float64
	for i := range 600 {
		v := []string{"1", "2"}[i%2]
		region := []string{"eu", "us", "sa"}[i%3]
		pred := 30 + float64(i%11)
		obs := pred + float64(i%5) - 2
		if v == "2" && region == "sa" {
			obs = pred - 15 // version 2 is far off in sa
			absSA2 += 15
			nSA2++
		}
		at := start.Add(time.Duration(i) * 10 * time.Minute)
		// A prediction record (no outcome) that the report skips, and its
		// joined record.
		base := record.Record{
			Schema: 1, RequestID: fmt.Sprint(i), Time: at, Service: "eta", JoinKey: fmt.Sprint(i), Route: "default",
			Headers: map[string]string{"x-region": region},
			Arms:    map[string]record.Arm{record.ArmPrimary: {Model: "m", Version: v, Status: 200, Outputs: map[string][]float64{"eta_minutes": {pred}}}},
		}
		joined := base
		joined.Outcome = &record.Outcome{Time: at.Add(time.Hour), Values: map[string]float64{"actual_minutes": obs}}
		recs = append(recs, &base, &joined)
	}
	rep, err := Build(t.Context(), &sliceSource{recs: recs}, Options{
		Outputs: []Output{{Name: "eta_minutes", Observed: "actual_minutes", Kind: "regression"}},
		Since:   start.Add(-time.Hour), Now: start.Add(7 * 24 * time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pairs != 600 || len(rep.Outputs) != 1 {
		t.Fatalf("%d pairs, %d outputs; want 600 and 1", rep.Pairs, len(rep.Outputs))
	}
	out := rep.Outputs[0]
	if w := out.Worst[0]; w.Version != "2" || w.Slice != "x-region=sa" || w.N != int(nSA2) || math.Abs(w.MAE-absSA2/nSA2) > 1e-9 {
		t.Errorf("worst slice %+v, want version 2 in x-region=sa with MAE %v over %v pairs", w, absSA2/nSA2, nSA2)
	}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, rep); err != nil {
		t.Fatal(err)
	}
	html := buf.String()
	for _, want := range []string{"Online accuracy of eta", `id="worst-eta_minutes"`, "x-region=sa", `src="data:image/svg`, "Residuals"} {
		if !strings.Contains(html, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(html, "http://") || strings.Contains(html, "https://") {
		t.Error("the report links to the network; it must be self-contained")
	}
	// Since cuts the older pairs.
	rep, err = Build(t.Context(), &sliceSource{recs: recs}, Options{Since: start.Add(50 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pairs != 300 {
		t.Errorf("%d pairs since hour 50, want 300", rep.Pairs)
	}
}
