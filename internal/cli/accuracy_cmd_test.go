package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/release/record"
)

func TestParseSince(t *testing.T) {
	for in, want := range map[string]time.Duration{"7d": 7 * 24 * time.Hour, "36h": 36 * time.Hour, "90m": 90 * time.Minute} {
		if got, err := parseSince(in); err != nil || got != want {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0d", "-1h", "week", "7x"} {
		if _, err := parseSince(in); err == nil {
			t.Errorf("parseSince(%q) accepted", in)
		}
	}
}

func TestAccuracyReportCommand(t *testing.T) {
	dir := t.TempDir()
	sink, err := record.NewFileSink(record.FileOptions{Dir: dir, Base: "predictions"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	var recs []*record.Record
	for i := range 40 {
		recs = append(recs, &record.Record{
			RequestID: "r", Time: now.Add(-time.Duration(i) * time.Hour), Service: "eta", JoinKey: "k", Headers: map[string]string{"x-region": "eu"},
			Arms:    map[string]record.Arm{record.ArmPrimary: {Model: "m", Version: "1", Status: 200, Outputs: map[string][]float64{"eta_minutes": {30}}}},
			Outcome: &record.Outcome{Time: now, Values: map[string]float64{"eta_minutes": 32}},
		})
	}
	if _, err := sink.Write(t.Context(), recs); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "r.html")
	var stdout, stderr strings.Builder
	if code := Run(t.Context(), []string{"accuracy", "report", "--log", dir, "--since", "1d", "-o", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "24 joined pairs of eta") {
		t.Errorf("stderr %q: want 24 pairs (those of the last 24 hours)", stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(b), "Online accuracy of eta") {
		t.Fatalf("report %s: %v", out, err)
	}
}
