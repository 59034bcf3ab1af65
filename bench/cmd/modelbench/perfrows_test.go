package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/perf"
)

func TestParsePerfCSVReadsWhatSluicePerfWrites(t *testing.T) {
	us := time.Microsecond
	var b strings.Builder
	require.NoError(t, perf.WriteCSV(&b, []perf.Result{
		{
			Concurrency: 1, Batch: 1, Throughput: 3000.4, P50: 300 * us, P90: 400 * us, P95: 450 * us, P99: 600 * us,
			Avg: 320 * us, Requests: 9000, Stable: true,
			Server: &perf.ServerSplit{
				Inferences: 9000, Executions: 3000, Request: 100 * us, Queue: 20 * us,
				ComputeInput: 5 * us, ComputeInfer: 60 * us, ComputeOutput: 5 * us,
			},
		},
		{Concurrency: 32, Batch: 1, Throughput: 500, P50: 9000 * us, P99: 20000 * us, Avg: 9500 * us, Errors: 3},
	}, true))
	levels, err := parsePerfCSV(b.String())
	require.NoError(t, err)
	require.Len(t, levels, 2)
	l := levels[0]
	require.Equal(t, 1, l.Concurrency)
	require.InDelta(t, 3000.4, l.Throughput, 1e-9)
	require.Equal(t, 300*us, l.P50)
	require.Equal(t, 400*us, l.P90)
	require.Equal(t, 600*us, l.P99)
	require.True(t, l.HasServer)
	require.Equal(t, 20*us, l.Queue)
	require.Equal(t, 70*us, l.Compute)
	require.InDelta(t, 3.0, l.AvgBatch, 1e-9)
	require.True(t, l.Stable)
	require.False(t, levels[1].HasServer, "no statistics: no server columns")
	require.Equal(t, 3, levels[1].Errors)
	require.False(t, levels[1].Stable)

	for _, bad := range []string{"", "a,b\n1,2\n", "Concurrency,Inferences/Second\n1\n"} {
		_, err := parsePerfCSV(bad)
		require.True(t, errors.Is(err, errCSV), "%q: %v", bad, err)
	}
}

func TestRowSpecs(t *testing.T) {
	cfg := config{
		SluiceHTTP: "h:1", SluiceGRPC: "g:2", Model: "m", BatchedModel: "mb",
		Transports: "grpc,http-json,http-binary", PeerHTTP: "p:3", PeerDesc: "Flask", Levels: "1,8",
		RequestFile: "r.json", Window: 1500 * time.Millisecond, Trials: 5,
	}
	specs := rowSpecs(cfg)
	require.Len(t, specs, 7)
	labels := make([]string, len(specs))
	for i, s := range specs {
		labels[i] = s.label()
	}
	require.Equal(t, []string{
		"Sluice, gRPC, batching off", "Sluice, gRPC, batching on",
		"Sluice, HTTP JSON, batching off", "Sluice, HTTP JSON, batching on",
		"Sluice, HTTP binary, batching off", "Sluice, HTTP binary, batching on",
		"Flask, HTTP JSON, batching n/a",
	}, labels)
	args := strings.Join(specs[5].perfArgs(cfg), " ")
	require.Equal(t, "perf -m mb -u h:1 -i http --concurrency-range 1,8 --input-data r.json --measurement-interval 1500 --max-trials 5 --request-timeout 10s --binary", args)
	require.Equal(t, "p:3", specs[6].URL)
	require.True(t, specs[6].IsPeer)

	cfg.SluiceGRPC, cfg.BatchedModel, cfg.PeerHTTP = "", "", ""
	require.Len(t, rowSpecs(cfg), 2, "no gRPC address, no batched model, no peer")
}

func TestTimeLoopBoundsAndStopsOnError(t *testing.T) {
	calls := 0
	r := timeLoop(t.Context(), func(context.Context) error { calls++; time.Sleep(time.Millisecond); return nil }, 30*time.Millisecond)
	require.Equal(t, calls, r.Calls)
	require.Positive(t, r.Calls)
	require.Less(t, r.Calls, 40)
	require.Len(t, r.Latencies, r.Calls)
	require.GreaterOrEqual(t, r.Latencies[0], time.Millisecond)

	n := 0
	r = timeLoop(t.Context(), func(context.Context) error {
		n++
		if n == 3 {
			return errors.New("boom")
		}
		return nil
	}, time.Second)
	require.Equal(t, 2, r.Calls)
	require.Equal(t, "boom", r.Err)
}
