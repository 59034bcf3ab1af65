package perf

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseRange(t *testing.T) {
	tests := []struct {
		in      string
		integer bool
		want    []float64
		wantErr bool
	}{
		{in: "4", integer: true, want: []float64{4}},
		{in: "1:4", integer: true, want: []float64{1, 2, 3, 4}},
		{in: "1:10:4", integer: true, want: []float64{1, 5, 9}},
		{in: "8:8:3", integer: true, want: []float64{8}},
		{in: "1,8,32,64", integer: true, want: []float64{1, 8, 32, 64}},
		{in: " 2 , 4 ", integer: true, want: []float64{2, 4}},
		{in: "100:300:100", want: []float64{100, 200, 300}},
		{in: "0.1:0.3:0.1", want: []float64{0.1, 0.2, 0.30000000000000004}},
		{in: "2.5", want: []float64{2.5}},
		{in: "", integer: true, wantErr: true},
		{in: "0", integer: true, wantErr: true},
		{in: "-1:4", integer: true, wantErr: true},
		{in: "1.5", integer: true, wantErr: true},
		{in: "4:1", integer: true, wantErr: true},
		{in: "1:4:0", integer: true, wantErr: true},
		{in: "1:2:3:4", integer: true, wantErr: true},
		{in: "1:100000", integer: true, wantErr: true},
		{in: "1,,2", integer: true, wantErr: true},
		{in: "NaN", wantErr: true},
		{in: "1:Inf", wantErr: true},
		{in: "a:b", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseRange(tt.in, tt.integer)
			if tt.wantErr {
				require.ErrorIs(t, err, ErrRange)
				return
			}
			require.NoError(t, err)
			require.InDeltaSlice(t, tt.want, got, 1e-9)
		})
	}
}

func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"1", "1:64:8", "1,8,32", "0.5:10:0.5", "1:1000000:1", "-3", "1:2:3:4"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, s string, integer bool) {
		got, err := ParseRange(s, integer)
		if err != nil {
			return
		}
		if len(got) == 0 || len(got) > MaxRangeSteps {
			t.Fatalf("ParseRange(%q) = %d levels", s, len(got))
		}
		for _, v := range got {
			if !(v > 0) {
				t.Fatalf("ParseRange(%q) gave non-positive level %g", s, v)
			}
		}
	})
}
