package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/perf"
)

func TestMoreRowSpecs(t *testing.T) {
	cfg := config{
		SluiceHTTP: "h:1", SluiceGRPC: "g:2", Model: "m_off", BatchedModel: "m_on", ShippedModel: "m",
		Transports: "grpc", PeerHTTP: "p:3", PeerDesc: "Flask", PeerModel: "m", PeerPID: 30, SluicePID: 20,
		TrivialHTTP: "t:4", TrivialPID: 40, Rates: "1000", Levels: "1,32",
		RankerModel: "r", RankerUnbatched: "r_off", RankerLevels: "1,8,32", RankerRequest: "r.json",
		RequestFile: "req.json", Window: 2 * time.Second, Trials: 5,
	}
	specs := rowSpecs(cfg)
	labels := make([]string, len(specs))
	for i, s := range specs {
		labels[i] = s.label()
	}
	require.Equal(t, []string{
		"Sluice, gRPC, batching off", "Sluice, gRPC, batching on", "Flask, HTTP JSON, batching n/a",
		"Sluice, gRPC, batching as shipped", "Sluice, HTTP JSON, batching as shipped",
		"Sluice, HTTP JSON, batching as shipped, 1000/s", "Flask, HTTP JSON, batching n/a, 1000/s",
		"trivial Go net/http server, HTTP JSON, batching n/a, 1000/s",
		"Sluice, gRPC, batching off", "Sluice, gRPC, batching on",
	}, labels)
	args := func(i int) string { return strings.Join(specs[i].perfArgs(cfg), " ") }
	require.Equal(t, "perf -m m_off -u g:2 -i grpc --concurrency-range 1,32 --input-data req.json --measurement-interval 2000 --max-trials 5 --request-timeout 10s --server-pid 20", args(0))
	require.Equal(t, "perf -m m -u p:3 -i http --concurrency-range 1,32 --input-data req.json --measurement-interval 2000 --max-trials 5 --request-timeout 10s --server-pid 30", args(2), "the peer serves the model under its own name")
	require.Equal(t, "perf -m m -u h:1 -i http --request-rate-range 1000 --input-data req.json --measurement-interval 2000 --max-trials 5 --request-timeout 10s --server-pid 20", args(5))
	require.Equal(t, "perf -m m -u t:4 -i http --request-rate-range 1000 --input-data req.json --measurement-interval 2000 --max-trials 5 --request-timeout 10s --server-pid 40", args(7))
	require.True(t, specs[7].Trivial)
	require.Equal(t, "perf -m r -u g:2 -i grpc --concurrency-range 1,8,32 --input-data r.json --measurement-interval 2000 --max-trials 5 --request-timeout 10s --server-pid 20", args(9))
	require.Equal(t, rankerGroup, specs[9].Group)
}

func TestParsePerfCSVOpenLoopAndCPU(t *testing.T) {
	var b strings.Builder
	require.NoError(t, perf.WriteCSV(&b, []perf.Result{{
		RequestRate: 1000, Batch: 1, Throughput: 999, P50: 300 * time.Microsecond, Requests: 6000,
		CPUMeasured: true, ServerCPU: 600 * time.Millisecond, ClientCPU: 300 * time.Millisecond, Stable: true,
	}}, true))
	levels, err := parsePerfCSV(b.String())
	require.NoError(t, err)
	require.Len(t, levels, 1)
	l := levels[0]
	require.Zero(t, l.Concurrency)
	require.InDelta(t, 1000, l.Rate, 1e-9)
	require.True(t, l.HasCPU)
	require.Equal(t, 100*time.Microsecond, l.ServerCPU)
	require.Equal(t, 50*time.Microsecond, l.ClientCPU)
}

func cpuLevel(c int, tput float64, cpu time.Duration, avgBatch float64) level {
	l := lvl(c, tput, time.Millisecond, 2*time.Millisecond, avgBatch)
	l.HasCPU, l.ServerCPU, l.ClientCPU = true, cpu, cpu/2
	return l
}

func sampleReport13() *report {
	us := time.Microsecond
	rep := sampleReport()
	rep.Cfg.Rates = "1000"
	rep.RankerORT = []ortResult{
		{Batch: 1, Calls: 100, Elapsed: 100 * time.Millisecond, Latencies: []time.Duration{time.Millisecond}},
		{Batch: 8, Calls: 100, Elapsed: 200 * time.Millisecond, Latencies: []time.Duration{2 * time.Millisecond}},  // 4×
		{Batch: 32, Calls: 100, Elapsed: 400 * time.Millisecond, Latencies: []time.Duration{4 * time.Millisecond}}, // 8×
	}
	cold := ortResult{Batch: 1, Calls: 10, Thrash: 8 << 20, Latencies: []time.Duration{300 * us}}
	rep.ORTCold = &cold
	shippedG := cpuLevel(32, 20000, 50*us, 2)
	shippedG1 := cpuLevel(1, 3000, 150*us, 1)
	shippedG1.Compute = 120 * us
	rep.Rows = append(rep.Rows,
		perfRow{rowSpec: rowSpec{System: "Sluice", Transport: "gRPC", Batching: "as shipped"}, Levels: []level{shippedG1, shippedG}},
		perfRow{rowSpec: rowSpec{System: "Sluice", Transport: "HTTP JSON", Batching: "as shipped"}, Levels: []level{cpuLevel(32, 15000, 70*us, 2)}},
		perfRow{rowSpec: rowSpec{System: "Sluice", Transport: "HTTP JSON", Batching: "as shipped", Rate: 1000}, Levels: []level{cpuLevel(0, 1000, 200*us, 1)}},
		perfRow{rowSpec: rowSpec{System: trivialDesc, Transport: "HTTP JSON", Batching: "n/a", Rate: 1000, Trivial: true}, Levels: []level{cpuLevel(0, 1000, 80*us, 0)}},
		perfRow{rowSpec: rowSpec{System: "Sluice", Transport: "gRPC", Batching: "off", Group: rankerGroup}, Levels: []level{cpuLevel(32, 1000, 900*us, 1)}},
		perfRow{rowSpec: rowSpec{System: "Sluice", Transport: "gRPC", Batching: "on", Group: rankerGroup}, Levels: []level{cpuLevel(32, 5000, 200*us, 16)}},
	)
	// The peer's c=32 level with its CPU.
	for i := range rep.Rows {
		if rep.Rows[i].IsPeer {
			rep.Rows[i].Levels[0] = cpuLevel(32, 1000, 600*us, 0)
		}
	}
	return rep
}

func TestEvaluateTargets13(t *testing.T) {
	ts := evaluateTargets13(sampleReport13())
	require.Len(t, ts, 6)
	// 1: HTTP JSON 70 / 600 µs = 0.117 > 0.1.
	require.True(t, ts[0].Known)
	require.False(t, ts[0].Met)
	require.Contains(t, ts[0].Measured, "70.0 vs 600.0 µs")
	require.NotEmpty(t, ts[0].Note)
	// 2: gRPC 50 / 600 = 0.083.
	require.True(t, ts[1].Met)
	// 3: reported, not judged.
	require.Equal(t, "reported", ts[2].verdict())
	require.Contains(t, ts[2].Measured, "Sluice 200.0 µs, trivial Go 80.0 µs")
	// 4: compute 120 µs vs raw 100 µs = 1.2× ≤ 1.3×.
	require.True(t, ts[3].Met, ts[3].Measured)
	// 5: gain 5× at batch 16; raw gain at 16 is 6× (halfway, in log
	// scale, between 4× at 8 and 8× at 32): 0.83 ≥ 0.8.
	require.True(t, ts[4].Known)
	require.True(t, ts[4].Met, ts[4].Measured)
	require.Contains(t, ts[4].Measured, "0.83")
	// 6: parcel_eta on ÷ off, gRPC: 25000 / 5000.
	require.True(t, ts[5].Met)
	require.Contains(t, ts[5].Measured, "5.00×")
}

func TestEvaluateTargets13ExplainsTheColdCache(t *testing.T) {
	rep := sampleReport13()
	for i := range rep.Rows {
		if rep.Rows[i].Batching == "as shipped" && rep.Rows[i].Transport == "gRPC" {
			rep.Rows[i].Levels[0].Compute = 400 * time.Microsecond
		}
	}
	ts := evaluateTargets13(rep)
	require.False(t, ts[3].Met)
	require.Contains(t, ts[3].Note, "8 MiB of other memory")
	require.Contains(t, ts[3].Note, "300 µs")
}

func TestEvaluateTargets13WithoutRows(t *testing.T) {
	for _, tt := range evaluateTargets13(&report{}) {
		require.False(t, tt.Known)
		require.Equal(t, "not measured", tt.verdict())
	}
}

func TestRankerGain(t *testing.T) {
	rep := sampleReport13()
	require.InDelta(t, 1, rep.rankerGain(1), 1e-9)
	require.InDelta(t, 4, rep.rankerGain(8), 1e-9)
	require.InDelta(t, 6, rep.rankerGain(16), 1e-9)
	require.InDelta(t, 8, rep.rankerGain(64), 1e-9, "flat past the largest batch measured")
	require.Zero(t, (&report{}).rankerGain(4))
}

func TestRenderMarkdownIssue13(t *testing.T) {
	md := renderMarkdown(sampleReport13())
	for _, want := range []string{
		"## Targets (issue 13)",
		"| 2 | server CPU per inference, parcel_eta as shipped, gRPC, c=32, ÷ the Flask peer's (HTTP JSON) |",
		"## Server CPU per inference",
		"| trivial Go net/http server, HTTP JSON, batching n/a, 1000/s | 1000 | 80.0 | 40.0 | 0.08 |",
		"| Sluice (route_ranker), gRPC, batching on, c=32 | 5000 | 200.0 | 100.0 | 1.00 |",
		"## Raw ONNX Runtime in-process, route_ranker (compute-bound)",
		"Cold cache: the same batch-1 call with 8 MiB",
		"| Sluice | HTTP JSON | as shipped | 1000/s | 1000 |",
		"## Targets (issue 3)",
	} {
		require.Contains(t, md, want)
	}
	require.NotContains(t, md, "%!", "no formatting mistakes")
}
