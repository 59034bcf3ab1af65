package accuracy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseOutcomes(t *testing.T) {
	tests := []struct {
		body    string
		n       int
		wantErr string
	}{
		{body: `{"key":"o-1","values":{"actual_minutes":42.5}}`, n: 1},
		{body: `[{"key":17,"values":{"late":true},"time":"2026-12-01T10:00:00Z"},{"key":"x","values":{"a":0}}]`, n: 2},
		{body: ``, wantErr: "empty body"},
		{body: `{"key":"","values":{"a":1}}`, wantErr: "outcome.key: must not be empty"},
		{body: `{"key":1.5,"values":{"a":1}}`, wantErr: "outcome.key: want a string or an integer"},
		{body: `{"values":{"a":1}}`, wantErr: "outcome.key: is required"},
		{body: `{"key":"k","values":{}}`, wantErr: "outcome.values: is required"},
		{body: `[{"key":"k","values":{"a":"x"}}]`, wantErr: "outcomes[0].values.a: want a number"},
		{body: `{"key":"k","values":{"a":1},"time":"yesterday"}`, wantErr: "outcome.time"},
		{body: `{"key":"k","values":{"a":1},"colour":1}`, wantErr: "unknown field"},
		{body: `{"key":"k","values":{"a":1}} {}`, wantErr: "trailing data"},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			got, err := ParseOutcomes("eta", []byte(tt.body))
			if tt.wantErr != "" {
				var oe *OutcomeError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &oe) {
					t.Fatalf("err = %v, want an *OutcomeError containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(got) != tt.n {
				t.Fatalf("got %d outcomes, %v; want %d", len(got), err, tt.n)
			}
		})
	}
}

func FuzzParseOutcomes(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "outcomes", "*.json"))
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		outs, err := ParseOutcomes("eta", body)
		if err != nil {
			if _, ok := errors.AsType[*OutcomeError](err); !ok {
				t.Fatalf("error %v is not an *OutcomeError", err)
			}
			return
		}
		if len(outs) > MaxBatch {
			t.Fatalf("%d outcomes", len(outs))
		}
		for _, o := range outs {
			if o.Key == "" || len(o.Key) > maxKeyLen || len(o.Values) == 0 {
				t.Fatalf("accepted outcome %+v", o)
			}
		}
	})
}
