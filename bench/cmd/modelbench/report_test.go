package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func cell(n int, elapsed time.Duration, lat time.Duration) *cellResult {
	r := &cellResult{Requests: n, Elapsed: elapsed}
	for range n {
		r.Latencies = append(r.Latencies, lat)
	}
	return r
}

func TestRenderMarkdownRatiosAgainstPeer(t *testing.T) {
	rep := &report{
		Cfg:     config{Model: "m", Workers: 8, Rate: 500, OpenWorkers: 64, Seconds: time.Second, StartupRuns: 3, SluiceBin: "bin/sluice", ModelRepo: "r", PeerDesc: "Flask"},
		Machine: machineInfo{CPUs: 2, CPUModel: "cpu", MemTotal: "1 GiB", Commit: "abc"},
		Batch1: []measured{
			{T: &target{Row: "Sluice", Transport: "HTTP JSON", Batch: 1}, Closed: cell(3000, time.Second, 2*time.Millisecond), Open: cell(10, time.Second, time.Millisecond)},
			{T: &target{Row: "Flask", Transport: "HTTP JSON", Batch: 1, IsPeer: true}, Closed: cell(1000, time.Second, 8*time.Millisecond), Open: cell(10, time.Second, 4*time.Millisecond)},
		},
		Startup:   []time.Duration{100 * time.Millisecond, 300 * time.Millisecond},
		StartErrs: []string{"server exited before ready"},
		LoadStart: "0.50 0.40 0.30",
		LoadEnd:   "1.00 0.90 0.80",
	}
	md := renderMarkdown(rep)
	row := lineWith(t, md, "| 1 | Sluice | HTTP JSON |")
	require.Contains(t, row, "| 3000 |", "req/s")
	require.Contains(t, row, "| 3.00× | 0.25× |", "req/s ÷ peer and p99 ÷ peer")
	peer := lineWith(t, md, "| 2 | Flask | HTTP JSON | 1 |")
	require.Contains(t, peer, "| 1.00× | 1.00× |")
	open := lineWith(t, md, "| 1 | Sluice | HTTP JSON | 500 |")
	require.Contains(t, open, "| 0.25× |", "open-loop p99 ÷ peer")
	require.Contains(t, md, "share this machine's 2 cores")
	start := lineWith(t, md, "| 2/3 |")
	require.Contains(t, start, "| 200 | 300 |", "median and max of the successful runs")
	require.Contains(t, start, "meets")
	require.Contains(t, md, "- failed run: server exited before ready")
	require.NotContains(t, md, "The machine was busy", "load below the core count")
	require.NotContains(t, md, "unreliable")
}

func TestRenderMarkdownFlagsBusyMachineAndStarvedGenerator(t *testing.T) {
	open := cell(10, time.Second, time.Millisecond)
	open.Lag = []time.Duration{time.Millisecond, 500 * time.Millisecond}
	rep := &report{
		Cfg:       config{Model: "m", Workers: 8, Rate: 500},
		Machine:   machineInfo{CPUs: 2},
		LoadStart: "1.50 1.00 1.00",
		LoadEnd:   "6.25 3.00 1.00",
		Batch1:    []measured{{T: &target{Row: "Sluice", Transport: "gRPC", Batch: 1}, Closed: cell(10, time.Second, time.Millisecond), Open: open}},
	}
	md := renderMarkdown(rep)
	require.Contains(t, md, "load average reached 6.2 on 2 cores")
	require.Contains(t, md, "Open-loop row 1 (Sluice, gRPC)")
	require.Contains(t, lineWith(t, md, "| 1 | Sluice | gRPC | 500 |"), "| 500 |", "generator lag p99 column")
}

func TestFmtRatio(t *testing.T) {
	tests := []struct {
		num, den float64
		want     string
	}{
		{43.2, 1, "43×"},
		{7.9, 1, "7.90×"},
		{0.24, 1, "0.24×"},
		{0.00027, 1, "0.00027×"},
		{1, 0, "n/a"},
		{0, 1, "n/a"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			require.Equal(t, tt.want, fmtRatio(tt.num, tt.den))
		})
	}
}

func TestRenderMarkdownWithoutPeer(t *testing.T) {
	rep := &report{
		Cfg:     config{Model: "m", Workers: 8, Rate: 500, StartupRuns: 1},
		Batch1:  []measured{{T: &target{Row: "Sluice", Transport: "gRPC", Batch: 1}, Closed: cell(10, time.Second, time.Millisecond)}},
		Startup: []time.Duration{3 * time.Second},
	}
	md := renderMarkdown(rep)
	require.Contains(t, lineWith(t, md, "| 1 | Sluice | gRPC |"), "| n/a | n/a |")
	require.Contains(t, lineWith(t, md, "| 1/1 |"), "misses")
}

func lineWith(t *testing.T, md, prefix string) string {
	t.Helper()
	for l := range strings.Lines(md) {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	require.Failf(t, "no line", "no line starts with %q in:\n%s", prefix, md)
	return ""
}
