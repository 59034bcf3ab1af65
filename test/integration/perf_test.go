package integration_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// TestPerfAgainstRealServer runs `sluice perf` against the real server over
// HTTP (JSON and binary) and gRPC with tiny windows and checks the CSV:
// one row per level, throughput above zero, no errors, and the server-side
// split filled from the statistics extension.
func TestPerfAgainstRealServer(t *testing.T) {
	// Not parallel: it measures throughput.
	s := startServer(t, "--model-repository", filepath.Join(repoDir, "examples", "models"))
	harness.WaitFor(t, 30*time.Second, 50*time.Millisecond, "parcel_eta ready", func() (bool, string) {
		code, _, _ := do(t, http.MethodGet, "http://"+s.http+"/v2/models/parcel_eta/ready", nil, nil)
		return code == http.StatusOK, fmt.Sprintf("%d; logs:\n%s", code, s.logs)
	})
	cases := []struct {
		name string
		args []string
	}{
		{"http-json", []string{"-u", s.http, "-i", "http"}},
		{"http-binary", []string{"-u", s.http, "-i", "http", "--binary", "-b", "4"}},
		{"grpc", []string{"-u", s.grpc, "-i", "grpc"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "perf.csv")
			args := append([]string{
				"perf", "-m", "parcel_eta", "--concurrency-range", "1:2",
				"--input-data", filepath.Join(repoDir, "examples", "requests", "parcel_eta.json"),
				"--measurement-interval", "150", "--max-trials", "3", "-f", out, "--verbose-csv",
			}, tc.args...)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, binPath, args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("sluice perf: %v\n%s", err, stderr.String())
			}
			if !bytes.Contains(stderr.Bytes(), []byte("perf: concurrency 2, window 3/3")) {
				t.Errorf("no progress line per window on stderr:\n%s", stderr.String())
			}
			raw, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := csv.NewReader(bytes.NewReader(raw)).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 3 {
				t.Fatalf("want a header and 2 rows, got %d:\n%s", len(rows), raw)
			}
			col := map[string]int{}
			for i, h := range rows[0] {
				col[h] = i
			}
			for i, r := range rows[1:] {
				if got := r[col["Concurrency"]]; got != strconv.Itoa(i+1) {
					t.Errorf("row %d: concurrency %s", i, got)
				}
				if v, err := strconv.ParseFloat(r[col["Inferences/Second"]], 64); err != nil || v <= 0 {
					t.Errorf("row %d: throughput %q", i, r[col["Inferences/Second"]])
				}
				if r[col["Errors"]] != "0" {
					t.Errorf("row %d: %s errors", i, r[col["Errors"]])
				}
				for _, c := range []string{"Server Queue", "Server Compute Input", "Server Compute Infer", "Server Compute Output"} {
					if _, err := strconv.Atoi(r[col[c]]); err != nil {
						t.Errorf("row %d: %s is %q, want a number of µs", i, c, r[col[c]])
					}
				}
				if v, _ := strconv.Atoi(r[col["Server Compute Infer"]]); v <= 0 {
					t.Errorf("row %d: server compute infer %d µs, want > 0", i, v)
				}
			}
		})
	}
}
