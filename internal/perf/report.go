package perf

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"
)

// CSVHeader returns the CSV columns: perf_analyzer's, in its order and
// with its names, so its parsers read Sluice's files. The first is
// "Concurrency" or "Request Rate"; times are in microseconds. verbose
// appends Sluice's own columns after them (as perf_analyzer's
// --verbose-csv appends its extras).
func CSVHeader(openLoop, verbose bool) []string {
	first := "Concurrency"
	if openLoop {
		first = "Request Rate"
	}
	h := []string{
		first, "Inferences/Second", "Client Send", "Network+Server Send/Recv", "Server Queue",
		"Server Compute Input", "Server Compute Infer", "Server Compute Output", "Client Recv",
		"p50 latency", "p90 latency", "p95 latency", "p99 latency",
	}
	if verbose {
		h = append(h, "Avg latency", "Batch", "Server Overhead", "Server Avg Batch",
			"Requests", "Errors", "Stable", "Server CPU per Inference", "Client CPU per Inference")
	}
	return h
}

// WriteCSV writes results as CSV with a header row (CSVHeader). Server
// columns are empty when the server has no statistics extension. Client
// Send and Client Recv are 0: requests are encoded before the clock starts
// and the answer's decoding is inside the measured latency, so that time
// is part of Network+Server Send/Recv (avg latency minus the server's
// queue and compute).
func WriteCSV(w io.Writer, results []Result, verbose bool) error {
	cw := csv.NewWriter(w)
	open := len(results) > 0 && results[0].Concurrency == 0
	if err := cw.Write(CSVHeader(open, verbose)); err != nil {
		return fmt.Errorf("write CSV: %w", err)
	}
	micros := func(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }
	for _, r := range results {
		level := strconv.Itoa(r.Concurrency)
		if open {
			level = strconv.FormatFloat(r.RequestRate, 'f', -1, 64)
		}
		row := []string{level, strconv.FormatFloat(r.Throughput, 'f', 1, 64), "0"}
		s := r.Server
		if s != nil {
			network := max(0, r.Avg-s.Queue-s.ComputeInput-s.ComputeInfer-s.ComputeOutput)
			row = append(row, micros(network), micros(s.Queue), micros(s.ComputeInput), micros(s.ComputeInfer), micros(s.ComputeOutput))
		} else {
			row = append(row, "", "", "", "", "")
		}
		row = append(row, "0", micros(r.P50), micros(r.P90), micros(r.P95), micros(r.P99))
		if verbose {
			row = append(row, micros(r.Avg), strconv.Itoa(r.Batch))
			if s != nil {
				row = append(row, micros(s.Overhead()), strconv.FormatFloat(s.AvgBatch(), 'f', 2, 64))
			} else {
				row = append(row, "", "")
			}
			serverCPU := ""
			if r.CPUMeasured {
				serverCPU = fracMicros(r.CPUPerInference(r.ServerCPU))
			}
			row = append(row, strconv.Itoa(r.Requests), strconv.Itoa(r.Errors), strconv.FormatBool(r.Stable),
				serverCPU, fracMicros(r.CPUPerInference(r.ClientCPU)))
		}
		if err := cw.Write(row); err != nil {
			return fmt.Errorf("write CSV: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write CSV: %w", err)
	}
	return nil
}

// fracMicros writes d in microseconds with one decimal.
func fracMicros(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 1, 64)
}

// WriteSummary prints results as an aligned table for people.
func WriteSummary(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	open := len(results) > 0 && results[0].Concurrency == 0
	first := "concurrency"
	if open {
		first = "rate/s"
	}
	cpu := len(results) > 0 && results[0].CPUMeasured
	cpuHead := ""
	if cpu {
		cpuHead = "server CPU µs/inf\t"
	}
	fmt.Fprintf(tw, "%s\tinfer/s\tp50 µs\tp90 µs\tp95 µs\tp99 µs\tavg µs\tqueue µs\tcompute µs\tavg batch\t%serrors\tstable\t\n", first, cpuHead)
	for _, r := range results {
		level := strconv.Itoa(r.Concurrency)
		if open {
			level = strconv.FormatFloat(r.RequestRate, 'f', -1, 64)
		}
		queue, compute, batch := "n/a", "n/a", "n/a"
		if s := r.Server; s != nil {
			queue = strconv.FormatInt(s.Queue.Microseconds(), 10)
			compute = strconv.FormatInt((s.ComputeInput + s.ComputeInfer + s.ComputeOutput).Microseconds(), 10)
			batch = strconv.FormatFloat(s.AvgBatch(), 'f', 2, 64)
		}
		stable := "yes"
		if !r.Stable {
			stable = "unstable"
		}
		cpuCell := ""
		if cpu {
			cpuCell = "n/a\t"
			if r.CPUMeasured {
				cpuCell = fracMicros(r.CPUPerInference(r.ServerCPU)) + "\t"
			}
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s%d\t%s\t\n", level, r.Throughput,
			r.P50.Microseconds(), r.P90.Microseconds(), r.P95.Microseconds(), r.P99.Microseconds(),
			r.Avg.Microseconds(), queue, compute, batch, cpuCell, r.Errors, stable)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	for _, r := range results {
		if r.FirstError != "" {
			fmt.Fprintf(w, "first error at %s: %s\n", levelName(r), r.FirstError)
		}
	}
	return nil
}

func levelName(r Result) string {
	if r.Concurrency > 0 {
		return fmt.Sprintf("concurrency %d", r.Concurrency)
	}
	return fmt.Sprintf("request rate %g/s", r.RequestRate)
}
