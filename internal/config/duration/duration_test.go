package duration

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

type doc struct {
	D Duration `yaml:"d"`
}

func TestUnmarshal(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string // substring; empty means the decode must succeed
	}{
		{in: "d: 250ms", want: 250 * time.Millisecond},
		{in: "d: 1h30m", want: 90 * time.Minute},
		{in: "d: 0s"},
		{in: `d: "-5s"`, want: -5 * time.Second},
		{in: "\n\nd: soon", wantErr: `line 3: "soon" is not a duration`},
		{in: "d: 10", wantErr: `"10" is not a duration`},
		{in: "d: [1s]", wantErr: "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var got doc
			err := yaml.Unmarshal([]byte(tt.in), &got)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				var te *yaml.TypeError
				require.True(t, errors.As(err, &te), "want a *yaml.TypeError, got %T", err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got.D.Std())
		})
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	in := doc{D: Duration(90 * time.Second)}
	out, err := yaml.Marshal(in)
	require.NoError(t, err)
	require.Equal(t, "d: 1m30s\n", string(out))
	var back doc
	require.NoError(t, yaml.Unmarshal(out, &back))
	require.Equal(t, in, back)
}

// FuzzUnmarshal decodes arbitrary YAML into a Duration: it must reject or
// accept without panicking, and what it accepts must marshal and decode
// back to the same duration.
func FuzzUnmarshal(f *testing.F) {
	for _, s := range []string{"d: 250ms", "d: -1h2m3.5s", "d: soon", "d: 1e9", "d: 9999999999h", `d: "1µs"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var got doc
		if yaml.Unmarshal([]byte(in), &got) != nil {
			return
		}
		out, err := yaml.Marshal(got)
		if err != nil {
			t.Fatalf("marshal %v: %v", got.D.Std(), err)
		}
		var back doc
		if err := yaml.Unmarshal(out, &back); err != nil || back != got {
			t.Fatalf("round trip of %v: got %v, %v (%q)", got.D.Std(), back.D.Std(), err, out)
		}
	})
}
