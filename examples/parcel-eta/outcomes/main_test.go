package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/release/record"
)

func TestOutcomes(t *testing.T) {
	dir := t.TempDir()
	sink, err := record.NewFileSink(record.FileOptions{Dir: dir, Base: "predictions"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var recs []*record.Record
	for i, region := range []string{"eu", "sa", "sa", "us"} {
		recs = append(recs, &record.Record{
			RequestID: "r", Time: at, Service: "parcel-eta", JoinKey: "o-" + string(rune('a'+i)), Headers: map[string]string{"x-region": region},
			Arms: map[string]record.Arm{record.ArmPrimary: {Model: "m", Version: "1", Status: 200, Outputs: map[string][]float64{"eta_minutes": {40}}}},
		})
	}
	if _, err := sink.Write(t.Context(), recs); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"-log", dir, "-noise", "0", "-late", "sa=1.5"}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d outcomes, want 4:\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		var o outcome
		if err := json.Unmarshal([]byte(l), &o); err != nil {
			t.Fatal(err)
		}
		want := 40.0
		if o.Key == "o-b" || o.Key == "o-c" {
			want = 60
		}
		if o.Values["actual_minutes"] != want {
			t.Errorf("%s: actual %v, want %v", o.Key, o.Values["actual_minutes"], want)
		}
	}
	if err := run([]string{"-log", filepath.Join(dir, "none")}, &out); err == nil {
		t.Error("a missing log folder is no error")
	}
}
