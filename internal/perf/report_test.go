package perf

import (
	"bytes"
	"encoding/csv"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func osWriteFile(path string, b []byte) error { return os.WriteFile(path, b, 0o600) }

func TestWriteCSV(t *testing.T) {
	us := time.Microsecond
	res := []Result{
		{
			Concurrency: 1, Batch: 1, Throughput: 1234.56, P50: 100 * us, P90: 150 * us, P95: 170 * us, P99: 300 * us,
			Avg: 120 * us, Requests: 999, Stable: true,
			Server: &ServerSplit{
				Requests: 999, Inferences: 999, Executions: 333, Request: 80 * us, Queue: 10 * us,
				ComputeInput: 5 * us, ComputeInfer: 50 * us, ComputeOutput: 5 * us,
			},
		},
		{
			Concurrency: 8, Batch: 1, Throughput: 5000, P50: 1500 * us, P90: 2000 * us, P95: 2100 * us, P99: 2500 * us,
			Avg: 1600 * us, Requests: 10, Errors: 2, Stable: false,
		},
	}
	var buf bytes.Buffer
	require.NoError(t, WriteCSV(&buf, res, true))
	rows, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 3)
	require.Equal(t, CSVHeader(false, true), rows[0])
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	r := rows[1]
	require.Equal(t, "1", r[col["Concurrency"]])
	require.Equal(t, "1234.6", r[col["Inferences/Second"]])
	require.Equal(t, "10", r[col["Server Queue"]])
	require.Equal(t, "5", r[col["Server Compute Input"]])
	require.Equal(t, "50", r[col["Server Compute Infer"]])
	require.Equal(t, "5", r[col["Server Compute Output"]])
	require.Equal(t, "10", r[col["Server Overhead"]])
	require.Equal(t, "3.00", r[col["Server Avg Batch"]])
	require.Equal(t, "50", r[col["Network+Server Send/Recv"]], "avg latency minus queue and compute")
	require.Equal(t, "100", r[col["p50 latency"]])
	require.Equal(t, "300", r[col["p99 latency"]])
	require.Equal(t, "120", r[col["Avg latency"]])
	require.Equal(t, "true", r[col["Stable"]])
	r = rows[2]
	require.Empty(t, r[col["Server Queue"]])
	require.Equal(t, "2", r[col["Errors"]])
	require.Equal(t, "false", r[col["Stable"]])

	buf.Reset()
	require.NoError(t, WriteCSV(&buf, []Result{{RequestRate: 250.5, Batch: 1}}, false))
	rows, err = csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	require.Equal(t, "Request Rate", rows[0][0])
	require.Equal(t, "250.5", rows[1][0])
}

// TestCSVHeaderIsPerfAnalyzers: without --verbose-csv the columns are
// perf_analyzer's, names and order, so its parsers read the file; the
// verbose columns come only after them.
func TestCSVHeaderIsPerfAnalyzers(t *testing.T) {
	want := "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue," +
		"Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv," +
		"p50 latency,p90 latency,p95 latency,p99 latency"
	require.Equal(t, want, strings.Join(CSVHeader(false, false), ","))
	require.Equal(t, "Request Rate"+strings.TrimPrefix(want, "Concurrency"), strings.Join(CSVHeader(true, false), ","))
	require.Equal(t, CSVHeader(false, false), CSVHeader(false, true)[:13])
	var buf bytes.Buffer
	require.NoError(t, WriteCSV(&buf, []Result{{Concurrency: 2, Batch: 1, Throughput: 10, P50: time.Millisecond}}, false))
	rows, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows[1], 13)
	require.Equal(t, "1000", rows[1][9], "p50 in microseconds")
}
