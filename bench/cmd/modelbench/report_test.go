package main

import (
	"testing"
	"time"

	"github.com/sluice-ml/sluice/bench/internal/machine"

	"github.com/stretchr/testify/require"
)

func lvl(c int, tput float64, p50, p99 time.Duration, avgBatch float64) level {
	return level{
		Concurrency: c, Throughput: tput, P50: p50, P99: p99, Avg: p50, HasServer: avgBatch > 0,
		AvgBatch: avgBatch, Compute: 50 * time.Microsecond, Stable: true,
	}
}

func sampleReport() *report {
	us := time.Microsecond
	ort1 := ortResult{Batch: 1, Calls: 1000, Elapsed: 100 * time.Millisecond, Latencies: []time.Duration{90 * us, 100 * us, 110 * us}}
	ort32 := ortResult{Batch: 32, Calls: 100, Elapsed: 100 * time.Millisecond, Latencies: []time.Duration{900 * us}}
	return &report{
		Cfg:     config{Levels: "1,32", Window: 2 * time.Second, Trials: 5, Model: "parcel_eta", BatchedModel: "parcel_eta_batched", SluiceBin: "bin/sluice", StartupRepo: "examples/models", PeerDesc: "Flask"},
		Machine: machine.Info{CPUs: 2, Commit: "abc"},
		ORT:     []ortResult{ort1, ort32},
		Rows: []perfRow{
			{
				rowSpec: rowSpec{System: "Sluice", Transport: "gRPC", Batching: "off"}, Command: "bin/sluice perf -m parcel_eta",
				Levels: []level{lvl(1, 4000, 180*us, 400*us, 1), lvl(32, 5000, 6000*us, 9000*us, 1)},
			},
			{
				rowSpec: rowSpec{System: "Sluice", Transport: "gRPC", Batching: "on"},
				Levels:  []level{lvl(1, 3000, 400*us, 800*us, 1), lvl(32, 25000, 1200*us, 2000*us, 20)},
			},
			{
				rowSpec: rowSpec{System: "Sluice", Transport: "HTTP JSON", Batching: "on"},
				Levels:  []level{lvl(32, 9000, 3000*us, 5000*us, 12)},
			},
			{
				rowSpec: rowSpec{System: "Flask", Transport: "HTTP JSON", Batching: "n/a", IsPeer: true},
				Levels:  []level{lvl(32, 1000, 30000*us, 60000*us, 0)},
			},
		},
		Startup: []time.Duration{50 * time.Millisecond, 70 * time.Millisecond, 60 * time.Millisecond},
	}
}

func TestEvaluateTargets(t *testing.T) {
	ts := evaluateTargets(sampleReport())
	require.Len(t, ts, 4)
	// 1: 25000 / 5000 = 5× ≥ 4×.
	require.True(t, ts[0].Known)
	require.True(t, ts[0].Met)
	require.Contains(t, ts[0].Measured, "5.00×")
	// 2: 180 − 100 = 80 µs ≤ 100 µs.
	require.True(t, ts[1].Met)
	require.Contains(t, ts[1].Measured, "80 µs")
	// 3: 9000 / 1000 = 9× < 10×, with a note saying why.
	require.True(t, ts[2].Known)
	require.False(t, ts[2].Met)
	require.Contains(t, ts[2].Measured, "9.00×")
	require.NotEmpty(t, ts[2].Note)
	require.Contains(t, ts[2].Note, "25.0×", "the note cites the gRPC row")
	// 4: 5000 / 60000 = 0.083 ≤ 0.2.
	require.True(t, ts[3].Met)
}

func TestEvaluateTargetsExplainsMissingBatching(t *testing.T) {
	rep := sampleReport()
	rep.Rows[1].Levels[1] = lvl(32, 5200, 6000*time.Microsecond, 9000*time.Microsecond, 1)
	ts := evaluateTargets(rep)
	require.False(t, ts[0].Met)
	require.Contains(t, ts[0].Note, "not being formed")
}

func TestEvaluateTargetsWithoutRows(t *testing.T) {
	ts := evaluateTargets(&report{})
	for _, tt := range ts {
		require.False(t, tt.Known)
		require.Equal(t, "not measured", tt.verdict())
	}
}

func TestRenderMarkdown(t *testing.T) {
	md := renderMarkdown(sampleReport())
	for _, want := range []string{
		"## Targets (issue 3)",
		"| 1 | dynamic batching, gRPC, c=32: throughput on ÷ off | 5.00× (25000 vs 5000 infer/s) | ≥ 4× | **met** |",
		"| 3 | vs Flask at c=32 (HTTP JSON, batching on): throughput ÷ peer | 9.00× (9000 vs 1000 infer/s) | ≥ 10× | **not met** |",
		"| 32 | 1000 | 32000 | 900 | 900 | 3.20× |",
		"| Sluice | gRPC | on | 3000 | 25000 |",
		"| Flask | HTTP JSON | n/a | – | 1000 |",
		"| Flask | HTTP JSON | n/a | 32 | 1000 | 30000 | – | 60000 | 30000 | n/a | n/a | n/a | 0 | yes |",
		"bin/sluice perf -m parcel_eta",
		"| 3/3 | 60.0 | 70.0 | 50.0, 70.0, 60.0 | meets |",
		"share this machine's 2 cores",
	} {
		require.Contains(t, md, want)
	}
	require.NotContains(t, md, "%!", "no formatting mistakes")
	require.NotContains(t, md, "machine was busy")

	rep := sampleReport()
	rep.LoadStart, rep.LoadEnd = "0.50 1.00 1.00", "5.37 4.42 3.78"
	require.Contains(t, renderMarkdown(rep), "load average reached 5.4 on 2 cores")
}

func TestMedianAndFormatting(t *testing.T) {
	require.Equal(t, 2*time.Millisecond, median([]time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond}))
	require.Equal(t, 15*time.Millisecond/10, median([]time.Duration{2 * time.Millisecond, time.Millisecond}))
	require.Zero(t, median(nil))
	require.Equal(t, "12.0×", fmtRatio(12))
	require.Equal(t, "0.25×", fmtRatio(0.25))
	require.Equal(t, "n/a", fmtRatio(0))
	require.Equal(t, "–", fmtUs(0))
	require.Equal(t, "1500", fmtUs(1500*time.Microsecond))
	require.Equal(t, "a / b c", oneLine("a | b\nc"))
	require.Equal(t, 90*time.Microsecond, percentile([]time.Duration{90 * time.Microsecond, 100 * time.Microsecond}, 0.5))
}
