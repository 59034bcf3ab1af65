package drift

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseReferences(t *testing.T) {
	tests := []struct {
		file    string
		wantErr []string // substrings; empty means the file must parse
	}{
		{file: "parcel_eta.good.yaml"},
		{file: "minimal.good.json"},
		{file: "unknown_field.bad.yaml", wantErr: []string{"field colour not found"}},
		{file: "version.bad.yaml", wantErr: []string{"version 0: want 1"}},
		{file: "edges.bad.yaml", wantErr: []string{`"distance_km"`, "edges[2] = 5: want strictly increasing edges"}},
		{file: "sum.bad.yaml", wantErr: []string{
			"variables[0]", "proportions sum to 0.75, want 1",
			"variables[1]", `categories[2]: duplicate "north"`, "sum to 1.2, want at most 1",
		}},
		{file: "quantiles.bad.yaml", wantErr: []string{"quantiles[1] = 2: want non-decreasing", "quantiles[2] = NaN: want a finite value"}},
		{file: "duplicate.bad.yaml", wantErr: []string{`variables[1]: duplicate name "distance_km"`}},
		{file: "kind.bad.yaml", wantErr: []string{
			`kind "ordinal": want numeric or categorical`,
			"edges and quantiles: only for a numeric variable",
			"variables[2]", "want edges and proportions, or quantiles",
		}},
		{file: "two_docs.bad.yaml", wantErr: []string{"want a single document"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			refs, err := LoadReferences(filepath.Join("testdata", tt.file))
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("LoadReferences: %v", err)
				}
				if len(refs) == 0 {
					t.Fatal("no references")
				}
				return
			}
			if err == nil {
				t.Fatalf("LoadReferences succeeded, want errors %q", tt.wantErr)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q\ndoes not contain %q", err, want)
				}
			}
		})
	}
}

func TestParseReferencesContent(t *testing.T) {
	refs, err := LoadReferences(filepath.Join("testdata", "parcel_eta.good.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := []*Reference{
		{
			Name: "distance_km", Kind: Numeric, Count: 250000,
			Edges:       []float64{1, 2.5, 5, 10},
			Proportions: []float64{0.1, 0.2, 0.3, 0.25, 0.15},
			Quantiles:   []float64{0.2, 0.9, 2.1, 3.4, 4.2, 5.0, 6.1, 7.5, 9.0, 12.5, 48},
		},
		{Name: "weight_kg", Kind: Numeric, Quantiles: []float64{0, 0.5, 1, 1, 1, 2, 5}},
		{
			Name: "region", Kind: Categorical, Count: 250000,
			Categories: []string{"north", "south", "east"}, Proportions: []float64{0.5, 0.3, 0.15},
		},
	}
	if !reflect.DeepEqual(refs, want) {
		t.Fatalf("parsed\n%+v\nwant\n%+v", refs, want)
	}
}

func TestMarshalReferencesRoundTrip(t *testing.T) {
	refs, err := LoadReferences(filepath.Join("testdata", "parcel_eta.good.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := MarshalReferences(refs)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseReferences(data)
	if err != nil {
		t.Fatalf("parse marshalled file: %v\n%s", err, data)
	}
	if !reflect.DeepEqual(again, refs) {
		t.Fatalf("round trip\n%+v\nwant\n%+v", again, refs)
	}
	if _, err := MarshalReferences([]*Reference{{Name: "x"}}); err == nil {
		t.Fatal("MarshalReferences accepted an invalid reference")
	}
}

func TestLoadReferencesErrors(t *testing.T) {
	if _, err := LoadReferences(filepath.Join(t.TempDir(), "missing.yaml")); !os.IsNotExist(err) {
		t.Fatalf("missing file: err = %v, want not-exist", err)
	}
	if _, err := ParseReferences(nil); err == nil || !strings.Contains(err.Error(), "empty reference file") {
		t.Fatalf("empty input: err = %v", err)
	}
	if _, err := ParseReferences([]byte("version: 1\nvariables: []\n")); err == nil || !strings.Contains(err.Error(), "no variables") {
		t.Fatalf("no variables: err = %v", err)
	}
}

func TestCompileDerivesBinsFromQuantiles(t *testing.T) {
	// Quantiles of U(0, 10) in tenths: equal-mass bins at 1, 2, …, 9.
	q := make([]float64, 11)
	for i := range q {
		q[i] = float64(i)
	}
	c, err := (&Reference{Name: "u", Quantiles: q}).compile(nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(c.edges, want) {
		t.Fatalf("edges = %v, want %v", c.edges, want)
	}
	for i, p := range c.props {
		if !near(p, 0.1, 1e-12) {
			t.Fatalf("props[%d] = %v, want 0.1", i, p)
		}
	}
	// A categorical reference aligned to a variable's categories: "east" is
	// unknown to the reference, "south" unknown to the variable (→ other).
	cat := &Reference{Name: "r", Kind: Categorical, Categories: []string{"north", "south"}, Proportions: []float64{0.6, 0.3}}
	c, err = cat.compile([]string{"east", "north"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{0, 0.6, 0.4}; !slices.EqualFunc(c.props, want, func(a, b float64) bool { return near(a, b, 1e-12) }) {
		t.Fatalf("props = %v, want %v", c.props, want)
	}
}

func TestNewReferenceFromSample(t *testing.T) {
	vals := make([]float64, 1000)
	for i := range vals {
		vals[i] = float64(i)
	}
	vals = append(vals, math.NaN(), math.Inf(1))
	r, err := NewReference("x", vals, 4)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{249, 499, 749}; !slices.Equal(r.Edges, want) {
		t.Fatalf("edges = %v, want %v", r.Edges, want)
	}
	if want := []float64{0.249, 0.25, 0.25, 0.251}; !slices.EqualFunc(r.Proportions, want, func(a, b float64) bool { return near(a, b, 1e-12) }) {
		t.Fatalf("proportions = %v, want %v", r.Proportions, want)
	}
	if r.Count != 1000 || len(r.Quantiles) != 101 || r.Quantiles[0] != 0 || r.Quantiles[100] != 999 || r.Quantiles[50] != 499 {
		t.Fatalf("count %d, quantiles %v", r.Count, r.Quantiles)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	// A constant sample still has a valid single-edge reference.
	r, err = NewReference("c", []float64{3, 3, 3}, 0)
	if err != nil || !slices.Equal(r.Edges, []float64{3}) || !slices.Equal(r.Proportions, []float64{0, 1}) {
		t.Fatalf("constant sample: %+v, %v", r, err)
	}
	if _, err := NewReference("x", []float64{math.NaN()}, 0); err == nil {
		t.Fatal("NewReference accepted a sample with no values")
	}
	if _, err := NewReference("", []float64{1}, 0); err == nil {
		t.Fatal("NewReference accepted an empty name")
	}
}
