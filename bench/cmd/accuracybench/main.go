// Command accuracybench measures online accuracy's costs in one run and
// writes bench/results/accuracy.md:
//
//   - the cost the prediction log adds per request: the gateway's service
//     path on a canned in-process model (auth, decode, route, tensors,
//     answer), without an accuracy block and with one logging 100 % of
//     the predictions (JSONL log and bbolt pending store, as serve -c
//     wires them); the ratio of the two is the result;
//   - outcome ingestion: outcomes joined per second against pending
//     predictions in the bbolt store, in batches of 1000 (an import or a
//     batch POST) and of 1 (one POST per outcome); outcomes held (no
//     prediction yet);
//   - memory per pending prediction: Go heap and bbolt file bytes per
//     prediction waiting in the store.
//
// Run from the repository root: go run ./bench/cmd/accuracybench
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/bench/internal/machine"
	"github.com/sluice-ml/sluice/internal/accuracy"
	"github.com/sluice-ml/sluice/internal/accuracy/accuracyspec"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/release/record"
)

func main() {
	out := flag.String("out", "bench/results/accuracy.md", "the results file (- for stdout)")
	pending := flag.Int("pending", 200_000, "predictions pending in the store for the ingestion and memory rows")
	flag.Parse()
	if err := run(*out, *pending); err != nil {
		fmt.Fprintln(os.Stderr, "accuracybench:", err)
		os.Exit(1)
	}
}

const gatewayYAML = `
gateway:
  listen: 127.0.0.1:18080
  admin: 127.0.0.1:19901
  access_log: "off"
  clients:
    - {id: bench, api_key_sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}
  backends:
    - {name: local, kind: in_process}
  services:
    - name: eta
      path: POST /v1/services/eta:predict
      request_fields:
        - {name: order_id, type: string}
        - {name: base_eta, type: float32, required: true}
        - {name: distance_km, type: float32, required: true}
      inputs:
        - {tensor: features, features: ["field:base_eta", "field:distance_km"]}
      model: {name: eta_model, version: "1"}
      outputs:
        - {name: eta_minutes, from: eta_prediction}
        - {name: confidence, from: confidence_score}
      routes:
        - {name: default, route: {weighted: [{backend: local, weight: 100}]}}
`

// canned answers every request with the same response.
type canned struct{ resp *infer.Response }

func (c canned) Infer(context.Context, *infer.Request) (*infer.Response, error) { return c.resp, nil }
func (canned) ModelReady(context.Context, string, string) error                 { return nil }

func fp32(name string, v float32) infer.Tensor {
	d := make([]byte, 4)
	binary.LittleEndian.PutUint32(d, math.Float32bits(v))
	return infer.Tensor{Name: name, DataType: infer.FP32, Shape: infer.Shape{1, 1}, Data: d}
}

type row struct{ name, value, note string }

func run(out string, pending int) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "accuracybench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var rows []row

	// 1. The prediction log's cost per request: three alternating pairs of
	// runs (the machine is shared and drifts), each pair's ratio, the
	// median of the three.
	var ratios []float64
	var offNs, onNs []float64
	var offAllocs, onAllocs int64
	for range 3 {
		off, err := requestCost(dir, false)
		if err != nil {
			return err
		}
		on, err := requestCost(dir, true)
		if err != nil {
			return err
		}
		offNs, onNs = append(offNs, float64(off.NsPerOp())), append(onNs, float64(on.NsPerOp()))
		offAllocs, onAllocs = off.AllocsPerOp(), on.AllocsPerOp()
		ratios = append(ratios, float64(on.NsPerOp())/float64(off.NsPerOp()))
	}
	sort.Float64s(ratios)
	sort.Float64s(offNs)
	sort.Float64s(onNs)
	rows = append(rows,
		row{"service request, no accuracy block", fmt.Sprintf("%.2f µs/op (median of 3), %d allocs/op", offNs[1]/1e3, offAllocs), fmt.Sprintf("runs: %.1f, %.1f, %.1f µs", offNs[0]/1e3, offNs[1]/1e3, offNs[2]/1e3)},
		row{"service request, 100 % of predictions logged", fmt.Sprintf("%.2f µs/op (median of 3), %d allocs/op", onNs[1]/1e3, onAllocs), "JSONL log + bbolt pending store, worker running"},
		row{"added cost per request (logged ÷ not logged)", fmt.Sprintf("%.2fx (median; pairs %.2fx, %.2fx, %.2fx)", ratios[1], ratios[0], ratios[1], ratios[2]), "each pair measured back to back in this run"},
	)

	// 2. Ingestion and 3. memory per pending prediction.
	ing, err := ingestion(ctx, dir, pending)
	if err != nil {
		return err
	}
	rows = append(rows, ing...)

	var b bytes.Buffer
	m := machine.Read(ctx)
	fmt.Fprintf(&b, "# Online accuracy benchmark\n\n")
	fmt.Fprintf(&b, "Date: %s. Machine: %d CPUs (%s), %s memory, %s, Go %s, commit %s; load average %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), m.CPUs, m.CPUModel, m.MemTotal, m.Kernel, m.GoVersion, m.Commit, machine.LoadAvg())
	fmt.Fprintf(&b, "Command: `go run ./bench/cmd/accuracybench -pending %d`. Everything runs in one process in one run; ", pending)
	b.WriteString("the shared machine makes absolute numbers move between runs, so read the ratios.\n\n")
	b.WriteString("| measure | value | note |\n|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.name, r.value, r.note)
	}
	b.WriteString(`
How it is measured: the request rows run the gateway's HTTP service path
(API key, decode, route, tensors, a canned in-process model, the answer)
with testing.Benchmark, without and with an accuracy block logging every
prediction; the logged run includes the joiner's worker writing the
predictions to bbolt in batches and the record writer writing JSONL, on
the same CPUs. The ingestion rows call Joiner.Ingest (what POST
.../outcomes does after parsing) against predictions pending in bbolt;
"memory" is the Go heap growth and the bbolt file size per pending
prediction after they are stored (the store is on disk; the heap holds
only the joiner's bounded metric state).
`)
	if out == "-" {
		_, err = os.Stdout.Write(b.Bytes())
		return err
	}
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil { //nolint:gosec // G306: a report for people to read, like the docs it is written into
		return err
	}
	fmt.Print(b.String())
	return nil
}

// requestCost benchmarks the service path with or without the prediction
// log.
func requestCost(dir string, logged bool) (testing.BenchmarkResult, error) {
	yaml := gatewayYAML
	if logged {
		yaml = strings.Replace(yaml, "      routes:\n", "      accuracy:\n        key: order_id\n        slices: [x-region]\n        outputs: [{name: eta_minutes, observed: actual_minutes}]\n      routes:\n", 1)
		yaml += fmt.Sprintf("  accuracy:\n    path: %s\n    log: {dir: %s}\n    queue_size: 100000\n", filepath.Join(dir, fmt.Sprint("req-", time.Now().UnixNano()), "pending.db"), filepath.Join(dir, "log"))
	}
	cfg, err := config.Parse("bench.yaml", []byte(yaml), nil)
	if err != nil {
		return testing.BenchmarkResult{}, err
	}
	resp := &infer.Response{Model: "eta_model", Version: "1", Outputs: []infer.Tensor{fp32("eta_prediction", 42.5), fp32("confidence_score", 0.9)}}
	opts := gateway.Options{Models: canned{resp}}
	var joiner *accuracy.Joiner
	var writer *record.Writer
	if logged {
		ac := cfg.Gateway.Accuracy
		store, err := accuracy.OpenBolt(ac.Path, ac.MaxPending, nil)
		if err != nil {
			return testing.BenchmarkResult{}, err
		}
		sink, err := record.NewFileSink(record.FileOptions{Dir: ac.Log.Dir, Base: "predictions"}, nil)
		if err != nil {
			return testing.BenchmarkResult{}, err
		}
		writer = record.NewWriter(sink, record.WriterOptions{QueueSize: ac.QueueSize}, nil, nil)
		joiner = accuracy.New(store, accuracy.Options{Lookback: ac.Lookback.Std(), QueueSize: ac.QueueSize, Log: writer}, nil, nil)
		opts.Accuracy = joiner
	}
	g, err := gateway.New(cfg, opts, nil, nil)
	if err != nil {
		return testing.BenchmarkResult{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { _ = g.RunBackground(ctx); close(runDone) }()
	var joinDone chan struct{}
	if joiner != nil {
		joinDone = make(chan struct{})
		go func() { _ = joiner.Run(ctx); close(joinDone) }()
	}
	i := 0
	res := testing.Benchmark(func(b *testing.B) {
		b.Helper()
		b.ReportAllocs()
		w := httptest.NewRecorder()
		for b.Loop() {
			i++
			body := fmt.Sprintf(`{"order_id":"o-%d","base_eta":30,"distance_km":12.5}`, i)
			r := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/v1/services/eta:predict", strings.NewReader(body))
			r.Header.Set("Authorization", "Bearer test")
			r.Header.Set("X-Region", []string{"eu", "us", "sa"}[i%3])
			w.Body.Reset()
			g.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
	})
	cancel()
	<-runDone
	closeCtx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	err = g.Close(closeCtx)
	if joiner != nil {
		err = joinErr(err, joiner.Close(closeCtx))
		<-joinDone
		err = joinErr(err, writer.Close(closeCtx))
	}
	return res, err
}

func joinErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// ingestion measures joins per second and memory per pending prediction.
func ingestion(ctx context.Context, dir string, n int) ([]row, error) {
	spec := accuracyspec.Service{Key: "order_id", Slices: []string{"x-region"}, Outputs: []accuracyspec.Output{{Name: "eta_minutes", Observed: "actual_minutes"}}}
	spec.ApplyDefaults()
	path := filepath.Join(dir, "ingest", "pending.db")
	store, err := accuracy.OpenBolt(path, 10*n, nil)
	if err != nil {
		return nil, err
	}
	j := accuracy.New(store, accuracy.Options{Lookback: 14 * 24 * time.Hour, QueueSize: n}, nil, nil)
	j.SetServices([]accuracy.Service{{Name: "eta", Spec: spec}})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = j.Run(runCtx); close(done) }()
	defer func() {
		cancel()
		_ = j.Close(context.Background())
		<-done
	}()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	now := time.Now()
	start := time.Now()
	for i := range n {
		p := &accuracy.Prediction{
			Service: "eta", Key: fmt.Sprintf("o-%08d", i), RequestID: fmt.Sprintf("r-%08d", i), Model: "eta_model", Version: fmt.Sprint(1 + i%2),
			Route: "default", Slices: map[string]string{"x-region": []string{"eu", "us", "sa"}[i%3]}, Outputs: map[string]float64{"eta_minutes": 30 + float64(i%20), "confidence": 0.9},
			Time: now,
		}
		for !j.Offer(p, nil) {
			time.Sleep(time.Millisecond) // the queue is full: let the worker catch up
		}
	}
	if err := j.Flush(ctx); err != nil {
		return nil, err
	}
	storeTime := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	heapPer := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n)
	rows := []row{
		{"predictions stored", fmt.Sprintf("%.0f /s", float64(n)/storeTime.Seconds()), fmt.Sprintf("%d predictions offered, batched by the worker into bbolt", n)},
		{"memory per pending prediction: Go heap", fmt.Sprintf("%.0f bytes", max(heapPer, 0)), "after GC, with the predictions stored"},
		{"memory per pending prediction: bbolt file", fmt.Sprintf("%.0f bytes", float64(st.Size())/float64(n)), "on disk, mapped; the page cache holds what is read"},
	}
	// Joins, in batches of 1000 and of 1.
	mk := func(from, to int) []accuracy.Outcome {
		outs := make([]accuracy.Outcome, 0, to-from)
		for i := from; i < to; i++ {
			outs = append(outs, accuracy.Outcome{Service: "eta", Key: fmt.Sprintf("o-%08d", i), Values: map[string]float64{"actual_minutes": 33}, Time: now})
		}
		return outs
	}
	half := n / 2
	start = time.Now()
	for from := 0; from < half; from += 1000 {
		if _, err := j.Ingest(ctx, mk(from, min(from+1000, half))); err != nil {
			return nil, err
		}
	}
	batch := time.Since(start)
	singles := min(n-half, 5000)
	start = time.Now()
	for i := half; i < half+singles; i++ {
		if _, err := j.Ingest(ctx, mk(i, i+1)); err != nil {
			return nil, err
		}
	}
	single := time.Since(start)
	held := 5000
	start = time.Now()
	for from := 0; from < held; from += 1000 {
		outs := mk(from, from+1000)
		for k := range outs {
			outs[k].Key = "unknown-" + outs[k].Key
		}
		if _, err := j.Ingest(ctx, outs); err != nil {
			return nil, err
		}
	}
	heldT := time.Since(start)
	rows = append(rows,
		row{"outcomes joined, batches of 1000", fmt.Sprintf("%.0f /s", float64(half)/batch.Seconds()), fmt.Sprintf("%d outcomes against %d pending predictions", half, n)},
		row{"outcomes joined, one per call", fmt.Sprintf("%.0f /s", float64(singles)/single.Seconds()), fmt.Sprintf("%d outcomes; each call is one bbolt transaction (fsync)", singles)},
		row{"batch over single", fmt.Sprintf("%.1fx", (float64(half)/batch.Seconds())/(float64(singles)/single.Seconds())), "ratio within this run: post outcomes in batches"},
		row{"outcomes held (no prediction yet), batches of 1000", fmt.Sprintf("%.0f /s", float64(held)/heldT.Seconds()), ""},
	)
	return rows, nil
}
