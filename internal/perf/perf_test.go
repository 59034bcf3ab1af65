package perf

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// fakeModel is the state of a fake KServe v2 server: one model "m" with
// one FP32 input "x" of shape [-1, 2] and max_batch_size 8. Every request
// is charged a fixed 100 µs queue and 300 µs compute_infer in its
// statistics, so the server split is known exactly.
type fakeModel struct {
	requests   atomic.Uint64
	inferences atomic.Uint64
	lastBody   atomic.Value // []byte
	fail       atomic.Bool
}

const (
	fakeQueueNs   = 100_000
	fakeComputeNs = 300_000
)

func (f *fakeModel) record(batch uint64) {
	f.requests.Add(1)
	f.inferences.Add(batch)
}

// newFakeHTTP serves the fake model over HTTP. With peer set it behaves
// like the Flask peer: inference only, no metadata, config or statistics.
func newFakeHTTP(t *testing.T, f *fakeModel, peer bool) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	if !peer {
		mux.HandleFunc("GET /v2/models/m", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, `{"name":"m","versions":["1"],"platform":"fake",
				"inputs":[{"name":"x","datatype":"FP32","shape":[-1,2]}],
				"outputs":[{"name":"y","datatype":"FP32","shape":[-1,1]}]}`)
		})
		mux.HandleFunc("GET /v2/models/m/config", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, `{"name":"m","max_batch_size":8}`)
		})
		mux.HandleFunc("GET /v2/models/m/stats", func(w http.ResponseWriter, _ *http.Request) {
			n := f.requests.Load()
			fmt.Fprintf(w, `{"model_stats":[{"name":"m","version":"1","inference_count":%d,"execution_count":%d,
				"inference_stats":{"success":{"count":%d,"ns":%d},"queue":{"count":%d,"ns":%d},
				"compute_input":{"count":%d,"ns":0},"compute_infer":{"count":%d,"ns":%d},"compute_output":{"count":%d,"ns":0}}}]}`,
				f.inferences.Load(), n, n, n*(fakeQueueNs+fakeComputeNs+50_000), n, n*fakeQueueNs, n, n, n*fakeComputeNs, n)
		})
		mux.HandleFunc("GET /v2/models/nope", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":"model 'nope' not found"}`)
		})
	}
	mux.HandleFunc("POST /v2/models/m/infer", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.lastBody.Store(body)
		if f.fail.Load() {
			http.Error(w, `{"error":"boom"}`, http.StatusInternalServerError)
			return
		}
		head := body
		if hl := r.Header.Get("Inference-Header-Content-Length"); hl != "" {
			n, err := strconv.Atoi(hl)
			if err != nil || n > len(body) {
				http.Error(w, "bad header length", http.StatusBadRequest)
				return
			}
			head = body[:n]
		}
		var req struct {
			Inputs []struct {
				Name  string  `json:"name"`
				Shape []int64 `json:"shape"`
			} `json:"inputs"`
		}
		if err := json.Unmarshal(head, &req); err != nil || len(req.Inputs) != 1 || req.Inputs[0].Name != "x" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		f.record(uint64(req.Inputs[0].Shape[0]))
		_, _ = io.WriteString(w, `{"model_name":"m","outputs":[{"name":"y","datatype":"FP32","shape":[1,1],"data":[1]}]}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func quick(o Options) Options {
	o.MeasurementInterval = 40 * time.Millisecond
	o.MaxTrials = 4
	o.StabilityPercentage = 1e6 // the point here is the plumbing, not a quiet machine: a stalled window may hold 20× fewer requests
	return o
}

func TestRunClosedLoopHTTP(t *testing.T) {
	for _, binary := range []bool{false, true} {
		t.Run(fmt.Sprintf("binary=%v", binary), func(t *testing.T) {
			f := &fakeModel{}
			srv := newFakeHTTP(t, f, false)
			var progress bytes.Buffer
			res, err := Run(t.Context(), quick(Options{
				Model: "m", URL: srv.URL, Concurrency: []int{1, 3}, Batch: 2, Binary: binary, Progress: &progress,
			}))
			require.NoError(t, err)
			require.Len(t, res, 2)
			for i, r := range res {
				require.Equal(t, []int{1, 3}[i], r.Concurrency)
				require.Positive(t, r.Throughput)
				require.Positive(t, r.Requests)
				require.Zero(t, r.Errors)
				require.True(t, r.Stable)
				require.Equal(t, StabilityWindows, r.Windows)
				// Throughput is inferences over the three windows' time: at
				// least their nominal length, and more only by scheduling
				// delay (a busy machine stretches windows, never shrinks them).
				elapsed := float64(r.Requests*2) / r.Throughput
				require.GreaterOrEqual(t, elapsed, 3*0.040*0.95, "throughput is inferences over the three windows")
				require.Less(t, elapsed, 3*0.040*10, "throughput is inferences over the three windows")
				require.LessOrEqual(t, r.P50, r.P90)
				require.LessOrEqual(t, r.P90, r.P99)
				require.NotNil(t, r.Server)
				require.Equal(t, 100*time.Microsecond, r.Server.Queue)
				require.Equal(t, 300*time.Microsecond, r.Server.ComputeInfer)
				require.Equal(t, 50*time.Microsecond, r.Server.Overhead())
				require.InDelta(t, 2.0, r.Server.AvgBatch(), 1e-9)
				// The server-side figures come from statistics snapshots taken
				// around the windows: a count of this run's requests, never more
				// than the server ever answered. (How far the snapshots lag the
				// client's windows depends on scheduling, so no tighter bound.)
				require.Positive(t, r.Server.Requests)
				require.LessOrEqual(t, r.Server.Requests, f.requests.Load())
			}
			require.Equal(t, 6, strings.Count(progress.String(), "perf: concurrency"), progress.String())
			body, _ := f.lastBody.Load().([]byte)
			if binary {
				require.NotContains(t, string(body), `"data"`)
			} else {
				require.Contains(t, string(body), `"data":[`)
			}
		})
	}
}

func TestRunAgainstPeerWithoutMetadataOrStats(t *testing.T) {
	f := &fakeModel{}
	srv := newFakeHTTP(t, f, true)
	file := t.TempDir() + "/req.json"
	require.NoError(t, writeFile(file, `{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2,3,4]}]}`))
	var progress bytes.Buffer
	res, err := Run(t.Context(), quick(Options{
		Model: "m", URL: strings.TrimPrefix(srv.URL, "http://"),
		InputData: file, Batch: 3, Progress: &progress,
	}))
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Positive(t, res[0].Throughput)
	require.Nil(t, res[0].Server, "no statistics endpoint: no server split")
	require.Contains(t, progress.String(), "no model metadata")
	require.Contains(t, progress.String(), "server statistics unavailable")
	body, _ := f.lastBody.Load().([]byte)
	require.Contains(t, string(body), `"shape":[3,2]`)
	require.Contains(t, string(body), `"data":[1,2,3,4,1,2]`)

	var csvOut bytes.Buffer
	require.NoError(t, WriteCSV(&csvOut, res, false))
	lines := strings.Split(strings.TrimSpace(csvOut.String()), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[1], ",0,,,,,,0,", "server columns are empty")

	_, err = Run(t.Context(), quick(Options{Model: "m", URL: srv.URL}))
	require.ErrorIs(t, err, ErrInput, "random data needs metadata")
}

func writeFile(path, s string) error {
	return osWriteFile(path, []byte(s))
}

func TestRunOpenLoopPoisson(t *testing.T) {
	f := &fakeModel{}
	srv := newFakeHTTP(t, f, false)
	o := quick(Options{Model: "m", URL: srv.URL, RequestRate: []float64{400}, Distribution: Poisson})
	o.MeasurementInterval = 100 * time.Millisecond
	res, err := Run(t.Context(), o)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Zero(t, res[0].Concurrency)
	require.InDelta(t, 400, res[0].RequestRate, 0)
	require.InDelta(t, 400, res[0].Throughput, 160, "achieved rate follows the offered rate")
	var csvOut bytes.Buffer
	require.NoError(t, WriteCSV(&csvOut, res, false))
	require.True(t, strings.HasPrefix(csvOut.String(), "Request Rate,Inferences/Second,"))
}

func TestRunCountWindows(t *testing.T) {
	f := &fakeModel{}
	srv := newFakeHTTP(t, f, false)
	o := quick(Options{Model: "m", URL: srv.URL, MeasurementMode: CountWindows, MeasurementRequestCount: 30})
	o.MeasurementInterval = time.Second
	res, err := Run(t.Context(), o)
	require.NoError(t, err)
	require.GreaterOrEqual(t, res[0].Requests+res[0].Errors, 3*30)
}

func TestRunReportsErrorsAndUnknownModels(t *testing.T) {
	f := &fakeModel{}
	srv := newFakeHTTP(t, f, false)
	_, err := Run(t.Context(), quick(Options{Model: "nope", URL: srv.URL}))
	require.ErrorContains(t, err, "model 'nope' not found")

	f.fail.Store(true)
	_, err = Run(t.Context(), quick(Options{Model: "m", URL: srv.URL}))
	require.ErrorContains(t, err, "first inference request")
	require.ErrorContains(t, err, "500")
}

func TestRunStopsOnCancel(t *testing.T) {
	f := &fakeModel{}
	srv := newFakeHTTP(t, f, false)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(150*time.Millisecond, cancel)
	begin := time.Now()
	res, err := Run(ctx, Options{
		Model: "m", URL: srv.URL, Concurrency: []int{2, 4},
		MeasurementInterval: 10 * time.Second, MaxTrials: 10,
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, res)
	require.Less(t, time.Since(begin), 5*time.Second, "a cancelled run stops at once")
}

func TestRunUnstableAfterMaxTrials(t *testing.T) {
	f := &fakeModel{}
	srv := newFakeHTTP(t, f, false)
	o := quick(Options{Model: "m", URL: srv.URL})
	o.StabilityPercentage = 1e-9 // no real windows agree this closely
	res, err := Run(t.Context(), o)
	require.NoError(t, err)
	require.False(t, res[0].Stable)
	require.Equal(t, 4, res[0].Windows)
	var sum bytes.Buffer
	require.NoError(t, WriteSummary(&sum, res))
	require.Contains(t, sum.String(), "unstable")
}

func TestOptionsValidation(t *testing.T) {
	bad := []Options{
		{},
		{Model: "m", Protocol: "udp"},
		{Model: "m", Concurrency: []int{1}, RequestRate: []float64{1}},
		{Model: "m", Protocol: ProtocolGRPC, Binary: true},
		{Model: "m", MaxTrials: 2},
		{Model: "m", Percentile: 101},
		{Model: "m", MeasurementMode: "forever"},
		{Model: "m", Distribution: "bursty"},
	}
	for i, o := range bad {
		_, err := withDefaults(o)
		require.Error(t, err, "case %d", i)
	}
	o, err := withDefaults(Options{Model: "m", Protocol: ProtocolGRPC})
	require.NoError(t, err)
	require.Equal(t, "localhost:8001", o.URL)
	require.Equal(t, []int{1}, o.Concurrency)
	require.Equal(t, 5*time.Second, o.MeasurementInterval)
	require.InDelta(t, 10, o.StabilityPercentage, 0)
}

// fakeGRPC is the fake model over gRPC.
type fakeGRPC struct {
	pb.UnimplementedGRPCInferenceServiceServer
	f *fakeModel
}

func (g *fakeGRPC) ModelMetadata(context.Context, *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	return &pb.ModelMetadataResponse{Name: "m", Inputs: []*pb.ModelMetadataResponse_TensorMetadata{
		{Name: "x", Datatype: "FP32", Shape: []int64{-1, 2}},
	}}, nil
}

func (g *fakeGRPC) ModelConfig(context.Context, *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	return &pb.ModelConfigResponse{Config: &pb.ModelConfig{Name: "m", MaxBatchSize: 8}}, nil
}

func (g *fakeGRPC) ModelInfer(_ context.Context, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	if len(req.GetRawInputContents()) != 1 || len(req.GetRawInputContents()[0]) != 4*2*int(req.GetInputs()[0].GetShape()[0]) {
		return nil, fmt.Errorf("bad raw input")
	}
	g.f.record(uint64(req.GetInputs()[0].GetShape()[0]))
	return &pb.ModelInferResponse{ModelName: "m"}, nil
}

func (g *fakeGRPC) ModelStatistics(context.Context, *pb.ModelStatisticsRequest) (*pb.ModelStatisticsResponse, error) {
	n := g.f.requests.Load()
	return &pb.ModelStatisticsResponse{ModelStats: []*pb.ModelStatistics{{
		Name: "m", Version: "1", InferenceCount: g.f.inferences.Load(), ExecutionCount: n,
		InferenceStats: &pb.InferStatistics{
			Success:      &pb.StatisticDuration{Count: n, Ns: n * 500_000},
			Queue:        &pb.StatisticDuration{Count: n, Ns: n * fakeQueueNs},
			ComputeInfer: &pb.StatisticDuration{Count: n, Ns: n * fakeComputeNs},
		},
	}}}, nil
}

func TestRunGRPC(t *testing.T) {
	f := &fakeModel{}
	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(gs, &fakeGRPC{f: f})
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })
	t.Cleanup(func() { gs.Stop(); wg.Wait() })

	res, err := Run(t.Context(), quick(Options{
		Model: "m", URL: lis.Addr().String(), Protocol: ProtocolGRPC,
		Concurrency: []int{2}, Batch: 4, InputData: InputZero,
	}))
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Positive(t, res[0].Throughput)
	require.NotNil(t, res[0].Server)
	require.Equal(t, 100*time.Microsecond, res[0].Server.Queue)
	require.InDelta(t, 4.0, res[0].Server.AvgBatch(), 1e-9)
}
