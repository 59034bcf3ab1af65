package replay

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/kserve"
	"github.com/sluice-ml/sluice/internal/release/diff"
	"github.com/sluice-ml/sluice/internal/release/record"
)

var regions = []string{"eu", "us", "apac"}

// recordedOutputs converts a fake answer the way the gateway records it.
func recordedOutputs(t *testing.T, resp *infer.Response) map[string][]float64 {
	t.Helper()
	out := map[string][]float64{}
	for _, o := range resp.Outputs {
		switch o.DataType {
		case infer.FP32:
			out[o.Name] = []float64{float64(math.Float32frombits(binary.LittleEndian.Uint32(o.Data)))}
		case infer.Int64:
			out[o.Name] = []float64{float64(int64(binary.LittleEndian.Uint64(o.Data)))}
		default:
		}
	}
	return out
}

// originals builds n recorded exchanges of model parcel_eta version 1
// (primary) and 2 (shadow), their outputs computed by the fake model.
func originals(t *testing.T, n int) []*record.Record {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, uint64(n)))
	base := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	recs := make([]*record.Record, n)
	for i := range n {
		id := fmt.Sprintf("r-%05d", i)
		x := []float32{rng.Float32() * 10, rng.Float32() * 40, rng.Float32()*4 - 2, rng.Float32()}
		data := []byte("[[")
		raw := make([]byte, 0, 16)
		for j, v := range x {
			if j > 0 {
				data = append(data, ',')
			}
			data = strconv.AppendFloat(data, float64(v), 'g', -1, 32)
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
		}
		data = append(data, "]]"...)
		req := &infer.Request{ID: id, Model: "parcel_eta", Version: "1", Inputs: []infer.Tensor{
			{Name: "features", DataType: infer.FP32, Shape: infer.Shape{1, 4}, Data: raw},
		}}
		p, err := fakeAnswer(req)
		require.NoError(t, err)
		req.Version = "2"
		s, err := fakeAnswer(req)
		require.NoError(t, err)
		region := regions[i%len(regions)]
		recs[i] = &record.Record{
			Schema: record.SchemaVersion, RequestID: id, Time: base.Add(time.Duration(i) * time.Second),
			Service: "parcel-eta", ShadowKey: fmt.Sprintf("order-%d", 4000+i),
			Headers:  map[string]string{"x-request-id": id, "x-region": region},
			Request:  map[string]any{"user_id": json.Number(strconv.Itoa(i)), "base_eta": json.Number("35")},
			Features: map[string]any{"route_features__distance_km": float64(x[1])},
			Inputs:   []record.Tensor{{Name: "features", DataType: "FP32", Shape: []int64{1, 4}, Data: data}},
			Arms: map[string]record.Arm{
				record.ArmPrimary: {Model: "parcel_eta", Version: "1", Status: 200, LatencyMS: 40, Outputs: recordedOutputs(t, p), Source: "model"},
				record.ArmShadow:  {Model: "parcel_eta", Version: "2", Status: 200, LatencyMS: 41, Outputs: recordedOutputs(t, s)},
			},
		}
	}
	return recs
}

// writeRecording writes recs as a JSONL recording and returns its
// directory.
func writeRecording(t *testing.T, recs []*record.Record) string {
	t.Helper()
	dir := t.TempDir()
	sink, err := record.NewFileSink(record.FileOptions{Dir: dir}, nil)
	require.NoError(t, err)
	n, err := sink.Write(t.Context(), recs)
	require.NoError(t, err)
	require.Equal(t, len(recs), n)
	require.NoError(t, sink.Close(t.Context()))
	return dir
}

func readRecording(t *testing.T, dir string) []*record.Record {
	t.Helper()
	src, err := record.OpenFiles(dir, record.ReadOptions{})
	require.NoError(t, err)
	recs, err := record.ReadAll(t.Context(), src)
	require.NoError(t, err)
	return recs
}

func openRecording(t *testing.T, dir string) record.Source {
	t.Helper()
	src, err := record.OpenFiles(dir, record.ReadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.Close() })
	return src
}

// replayToDir replays the recording in dir against target into a new
// JSONL recording and returns its directory and the stats.
func replayToDir(t *testing.T, dir string, target Target, opts Options, reg prometheus.Registerer) (string, Stats) {
	t.Helper()
	out := t.TempDir()
	sink, err := record.NewFileSink(record.FileOptions{Dir: out, Base: "replay"}, nil)
	require.NoError(t, err)
	rp, err := New(target, opts, nil, reg)
	require.NoError(t, err)
	st, err := rp.Run(t.Context(), openRecording(t, dir), sink)
	require.NoError(t, err)
	require.NoError(t, sink.Close(t.Context()))
	return out, st
}

// requireReproduced checks that replayed holds, in order, one record per
// original with the original's context and exactly its primary outputs.
func requireReproduced(t *testing.T, orig, replayed []*record.Record) {
	t.Helper()
	require.Len(t, replayed, len(orig))
	for i, o := range orig {
		r := replayed[i]
		require.Equal(t, o.RequestID, r.RequestID, "record %d out of order", i)
		require.True(t, o.Time.Equal(r.Time))
		require.Equal(t, o.Service, r.Service)
		require.Equal(t, o.ShadowKey, r.ShadowKey)
		require.Equal(t, o.Headers, r.Headers)
		require.Equal(t, o.Request, r.Request)
		require.Equal(t, o.Features, r.Features)
		require.Equal(t, o.Inputs, r.Inputs)
		require.Len(t, r.Arms, 1)
		a, ok := r.Arms[record.ArmPrimary]
		require.True(t, ok)
		require.Equal(t, 200, a.Status, "reason %s", a.Reason)
		require.Equal(t, "parcel_eta", a.Model)
		require.Equal(t, "1", a.Version)
		require.Equal(t, o.Arms[record.ArmPrimary].Outputs, a.Outputs, "record %s", o.RequestID)
		require.Positive(t, a.LatencyMS)
	}
}

// joinDiff compares the primary arms of two recordings joined by
// request_id, sliced by region. The latency gate is off: a loopback
// replay's latency says nothing about the recorded one.
func joinDiff(t *testing.T, a, b string) *diff.Result {
	t.Helper()
	key, err := diff.ParseSliceKey("header:x-region")
	require.NoError(t, err)
	res, err := diff.Analyze(t.Context(), diff.Input{A: openRecording(t, a), B: openRecording(t, b), LabelA: "recorded", LabelB: "replay"},
		diff.Options{Slices: []diff.SliceKey{key}, MaxP95Regression: -1})
	require.NoError(t, err)
	return res
}

func TestReplayGRPCReproducesRecording(t *testing.T) {
	model := &fakeModel{}
	addr := startGRPC(t, model)
	client := kserve.New(kserve.Options{}, nil)
	defer client.Close()

	orig := originals(t, 300)
	dir := writeRecording(t, orig)
	orig = readRecording(t, dir) // as decoded: json.Number request fields, compact data

	var progress []Progress
	reg := prometheus.NewRegistry()
	out, st := replayToDir(t, dir, NewGRPCTarget(client, addr, Model{}), Options{
		Concurrency: 8, Total: len(orig),
		Progress: func(p Progress) { progress = append(progress, p) }, ProgressEvery: 5 * time.Millisecond,
	}, reg)

	require.Equal(t, Stats{Read: 300, Replayed: 300, Written: 300, Elapsed: st.Elapsed}, st)
	require.NotEmpty(t, progress)
	last := progress[len(progress)-1]
	require.True(t, last.Final)
	require.Equal(t, 300, last.Done)
	require.Equal(t, 300, last.Total)
	require.Zero(t, last.Errors)
	require.Positive(t, last.Rate)
	for i := 1; i < len(progress); i++ {
		require.GreaterOrEqual(t, progress[i].Done, progress[i-1].Done, "progress went backwards")
	}
	require.LessOrEqual(t, model.maxSeen.Load(), int64(8), "more calls in flight than the concurrency")
	require.Greater(t, model.maxSeen.Load(), int64(1), "calls never overlapped")
	require.InDelta(t, 300, testutil.ToFloat64(newMetrics(reg).requests.WithLabelValues("ok")), 0)

	replayed := readRecording(t, out)
	requireReproduced(t, orig, replayed)

	res := joinDiff(t, dir, out)
	require.True(t, res.Passed, "failed gates: %v", res.Failed)
	require.Equal(t, 300, res.Counts.Pairs)
	require.Equal(t, 300, res.Counts.BothOK)
	require.NotEmpty(t, res.Outputs)
	for _, o := range res.Outputs {
		require.Zero(t, o.Significant, "output %s", o.Name)
		require.Zero(t, o.MaxAbsDelta, "output %s", o.Name)
	}

	// The same replay against version 2 must fail the diff: the check
	// above can tell a reproduction from a regression.
	out2, _ := replayToDir(t, dir, NewGRPCTarget(client, addr, Model{Name: "parcel_eta", Version: "2"}), Options{Concurrency: 8}, nil)
	res = joinDiff(t, dir, out2)
	require.False(t, res.Passed)
	require.Contains(t, res.Failed, "significant_share[eta_prediction]")
	require.Equal(t, "2", readRecording(t, out2)[0].Arms[record.ArmPrimary].Version)
}

func TestReplayHTTPReproducesRecording(t *testing.T) {
	model := &fakeModel{noDelay: true}
	base := startHTTP(t, model)
	orig := originals(t, 60)
	dir := writeRecording(t, orig)
	orig = readRecording(t, dir)

	target, err := NewHTTPTarget(base, Model{}, HTTPOptions{})
	require.NoError(t, err)
	out, st := replayToDir(t, dir, target, Options{Concurrency: 8}, nil)
	require.Equal(t, 60, st.Written)
	require.Zero(t, st.Errors)
	requireReproduced(t, orig, readRecording(t, out))
	require.True(t, joinDiff(t, dir, out).Passed)

	// An unknown model: the server's status and reason are recorded.
	target, err = NewHTTPTarget(base+"/", Model{Name: "nope", Version: "4"}, HTTPOptions{})
	require.NoError(t, err)
	out, st = replayToDir(t, dir, target, Options{}, nil)
	require.Equal(t, 60, st.Errors)
	a := readRecording(t, out)[0].Arms[record.ArmPrimary]
	require.Equal(t, record.Arm{Model: "nope", Version: "4", Status: http.StatusNotFound, Reason: "model_not_found", LatencyMS: a.LatencyMS}, a)

	_, err = NewHTTPTarget("localhost:8000", Model{}, HTTPOptions{})
	require.ErrorContains(t, err, "want http(s)://host:port")
}

func TestReplayGRPCErrors(t *testing.T) {
	model := &fakeModel{noDelay: true}
	addr := startGRPC(t, model)
	client := kserve.New(kserve.Options{}, nil)
	defer client.Close()
	good := originals(t, 1)[0]

	noInputs := *good
	noInputs.RequestID, noInputs.Inputs = "no-inputs", nil
	badShape := *good
	badShape.RequestID = "bad-shape"
	badShape.Inputs = []record.Tensor{{Name: "features", DataType: "FP32", Shape: []int64{1, 5}, Data: good.Inputs[0].Data}}
	noModel := *good
	noModel.RequestID = "no-model"
	noModel.Arms = map[string]record.Arm{record.ArmPrimary: {Status: 503, Reason: "feature_service_unavailable"}}

	tests := []struct {
		name   string
		rec    *record.Record
		model  Model
		status int
		reason string
	}{
		{name: "ok", rec: good, status: 200},
		{name: "unknown model", rec: good, model: Model{Name: "nope"}, status: 404, reason: "model_not_found"},
		{name: "own timeout", rec: good, model: Model{Name: "slow"}, status: 504, reason: kserve.ReasonTimeout},
		{name: "no inputs", rec: &noInputs, status: 400, reason: ReasonNoInputs},
		{name: "input does not fit its shape", rec: &badShape, status: 400, reason: ReasonBadInput},
		{name: "no model", rec: &noModel, status: 400, reason: ReasonNoModel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := &memSink{}
			rp, err := New(NewGRPCTarget(client, addr, tt.model), Options{Timeout: 100 * time.Millisecond}, nil, nil)
			require.NoError(t, err)
			st, err := rp.Run(t.Context(), diff.FromRecords(tt.rec), sink)
			require.NoError(t, err)
			require.Equal(t, 1, st.Written)
			a := sink.records()[0].Arms[record.ArmPrimary]
			require.Equal(t, tt.status, a.Status)
			require.Equal(t, tt.reason, a.Reason)
			if tt.status != 200 {
				require.Equal(t, 1, st.Errors)
				require.Empty(t, a.Outputs)
			}
		})
	}
}

func TestReplayService(t *testing.T) {
	h := &serviceHandler{}
	srv := httptestServer(t, h)
	base := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	rec := func(id, service, user string, baseETA, dist float64) *record.Record {
		return &record.Record{
			RequestID: id, Time: base, Service: service,
			Headers: map[string]string{"x-request-id": "stale", "x-region": "eu", "x-user-type": "premium"},
			Request: map[string]any{"user_id": json.Number(user), "base_eta": baseETA, "distance": dist},
			Arms:    map[string]record.Arm{record.ArmPrimary: {Model: "parcel_eta", Version: "1", Status: 200}},
		}
	}
	recs := []*record.Record{
		rec("a", "parcel-eta", "90071992547409931", 35, 3.25),
		rec("b", "parcel-eta", "13", 35, 1),
		rec("c", "other", "7", 35, 1),
	}
	target, err := NewServiceTarget(srv+"/v1/services/{service}:predict", HTTPOptions{Header: http.Header{"Authorization": {"Bearer k"}}})
	require.NoError(t, err)
	sink := &memSink{}
	rp, err := New(target, Options{Concurrency: 2}, nil, nil)
	require.NoError(t, err)
	st, err := rp.Run(t.Context(), diff.FromRecords(recs...), sink)
	require.NoError(t, err)
	require.Equal(t, 3, st.Written)
	require.Equal(t, 2, st.Errors)

	got := sink.records()
	a := got[0].Arms[record.ArmPrimary]
	require.Equal(t, record.Arm{
		Model: "parcel_eta", Version: "3", Source: "model", Status: 200, LatencyMS: a.LatencyMS,
		Outputs: map[string][]float64{"eta_minutes": {41.5}, "scores": {1, 3.25}},
	}, a)
	require.Equal(t, 503, got[1].Arms[record.ArmPrimary].Status)
	require.Equal(t, "upstream_unavailable", got[1].Arms[record.ArmPrimary].Reason)
	require.Equal(t, 404, got[2].Arms[record.ArmPrimary].Status)
	require.Equal(t, "service_not_found", got[2].Arms[record.ArmPrimary].Reason)

	h.mu.Lock()
	defer h.mu.Unlock()
	require.Len(t, h.headers, 3)
	seen := map[string]bool{}
	for _, hd := range h.headers {
		require.Equal(t, "eu", hd.Get("X-Region"))
		require.Equal(t, "premium", hd.Get("X-User-Type"))
		require.Equal(t, "Bearer k", hd.Get("Authorization"))
		require.Equal(t, "application/json", hd.Get("Content-Type"))
		seen[hd.Get("X-Request-Id")] = true
	}
	require.Equal(t, map[string]bool{"a": true, "b": true, "c": true}, seen, "the recorded request id replaces the header's")

	_, err = NewServiceTarget("ftp://x/y", HTTPOptions{})
	require.Error(t, err)
}

func TestReplayServiceUnreachable(t *testing.T) {
	h := &serviceHandler{}
	srv := httptestServer(t, h)
	target, err := NewServiceTarget(srv+"/v1/services/parcel-eta:predict", HTTPOptions{})
	require.NoError(t, err)
	closed := closedURL(t)
	dead, err := NewServiceTarget(closed+"/v1/services/parcel-eta:predict", HTTPOptions{})
	require.NoError(t, err)
	r := &record.Record{RequestID: "x", Time: time.Now(), Service: "parcel-eta", Arms: map[string]record.Arm{record.ArmPrimary: {Status: 200}}}
	for name, tc := range map[string]struct {
		target Target
		status int
		reason string
	}{
		"no body fields": {target, 200, ""},
		"refused":        {dead, 503, kserve.ReasonUnavailable},
	} {
		t.Run(name, func(t *testing.T) {
			a, err := tc.target.Replay(t.Context(), r)
			require.NoError(t, err)
			require.Equal(t, tc.status, a.Status)
			require.Equal(t, tc.reason, a.Reason)
		})
	}
}

// funcTarget adapts a function to Target.
type funcTarget func(ctx context.Context, rec *record.Record) (record.Arm, error)

func (f funcTarget) Replay(ctx context.Context, rec *record.Record) (record.Arm, error) {
	return f(ctx, rec)
}

func synthetic(n int) []*record.Record {
	recs := make([]*record.Record, n)
	base := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	for i := range recs {
		recs[i] = &record.Record{
			RequestID: strconv.Itoa(i), Time: base.Add(time.Duration(i) * time.Millisecond), Service: "s",
			Arms: map[string]record.Arm{record.ArmPrimary: {Status: 200}},
		}
	}
	return recs
}

func seqOf(rec *record.Record) int {
	n, _ := strconv.Atoi(rec.RequestID)
	return n
}

func okArm(rec *record.Record) record.Arm {
	return record.Arm{Model: "m", Version: "1", Status: 200, Outputs: map[string][]float64{"y": {float64(seqOf(rec))}}}
}

func TestReplayOrderIsDeterministic(t *testing.T) {
	// Early records take longest, so calls finish far out of order.
	const n = 120
	target := funcTarget(func(ctx context.Context, rec *record.Record) (record.Arm, error) {
		d := time.Duration((n-seqOf(rec))%9) * time.Millisecond
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return record.Arm{}, ctx.Err()
		}
		return okArm(rec), nil
	})
	var runs [2][]string
	for i := range runs {
		sink := &memSink{}
		rp, err := New(target, Options{Concurrency: 8}, nil, nil)
		require.NoError(t, err)
		st, err := rp.Run(t.Context(), diff.FromRecords(synthetic(n)...), sink)
		require.NoError(t, err)
		require.Equal(t, n, st.Written)
		for j, r := range sink.records() {
			require.Equal(t, strconv.Itoa(j), r.RequestID)
			require.Equal(t, []float64{float64(j)}, r.Arms[record.ArmPrimary].Outputs["y"])
			runs[i] = append(runs[i], r.RequestID)
		}
	}
	require.Equal(t, runs[0], runs[1])
}

func TestReplayRateAndConcurrency(t *testing.T) {
	t.Run("rate spaces call starts", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			var starts []time.Duration
			t0 := time.Now()
			target := funcTarget(func(_ context.Context, rec *record.Record) (record.Arm, error) {
				mu.Lock()
				starts = append(starts, time.Since(t0))
				mu.Unlock()
				return okArm(rec), nil
			})
			rp, err := New(target, Options{Rate: 10, Concurrency: 8}, nil, nil)
			require.NoError(t, err)
			st, err := rp.Run(t.Context(), diff.FromRecords(synthetic(21)...), &memSink{})
			require.NoError(t, err)
			require.Equal(t, 21, st.Written)
			// 21 calls at 10/s: the first at once, the last 2 s later.
			require.InDelta(t, 2.0, st.Elapsed.Seconds(), 0.01)
			slices.Sort(starts)
			for i := 1; i < len(starts); i++ {
				require.GreaterOrEqual(t, starts[i]-starts[i-1], 99*time.Millisecond, "calls %d and %d", i-1, i)
			}
		})
	})
	t.Run("concurrency bounds calls in flight", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var inFlight, most atomic.Int64
			target := funcTarget(func(_ context.Context, rec *record.Record) (record.Arm, error) {
				n := inFlight.Add(1)
				if n > most.Load() {
					most.Store(n)
				}
				time.Sleep(time.Second)
				inFlight.Add(-1)
				return okArm(rec), nil
			})
			rp, err := New(target, Options{Concurrency: 4}, nil, nil)
			require.NoError(t, err)
			st, err := rp.Run(t.Context(), diff.FromRecords(synthetic(20)...), &memSink{})
			require.NoError(t, err)
			require.Equal(t, 20, st.Written)
			require.Equal(t, int64(4), most.Load())
			require.Equal(t, 5*time.Second, st.Elapsed.Round(time.Millisecond))
		})
	})
	t.Run("real clock", func(t *testing.T) {
		// Against a real server for 400 ms at 40/s: about 17 calls. The
		// bounds are wide; only a limiter that does not limit fails.
		model := &fakeModel{noDelay: true}
		addr := startGRPC(t, model)
		client := kserve.New(kserve.Options{}, nil)
		defer client.Close()
		dir := writeRecording(t, originals(t, 400))
		ctx, cancel := context.WithTimeout(t.Context(), 400*time.Millisecond)
		defer cancel()
		sink := &memSink{}
		rp, err := New(NewGRPCTarget(client, addr, Model{}), Options{Rate: 40, Concurrency: 8}, nil, nil)
		require.NoError(t, err)
		st, err := rp.Run(ctx, openRecording(t, dir), sink)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.LessOrEqual(t, st.Replayed, 28)
		require.GreaterOrEqual(t, st.Replayed, 1)
		require.LessOrEqual(t, model.calls.Load(), int64(28))
		require.Equal(t, st.Replayed, st.Written)
		require.Equal(t, st.Read, st.Replayed+st.Aborted)
		for i, r := range sink.records() {
			require.Equal(t, fmt.Sprintf("r-%05d", i), r.RequestID)
		}
	})
}

func TestReplayCancelWritesWhatFinished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Record 3 hangs; the others answer at once.
		target := funcTarget(func(ctx context.Context, rec *record.Record) (record.Arm, error) {
			if seqOf(rec) == 3 {
				<-ctx.Done()
				return record.Arm{Model: "m", Status: 504}, ctx.Err()
			}
			return okArm(rec), nil
		})
		ctx, cancel := context.WithCancel(t.Context())
		var final Progress
		rp, err := New(target, Options{Concurrency: 4, Timeout: time.Hour, Progress: func(p Progress) { final = p }}, nil, nil)
		require.NoError(t, err)
		sink := &memSink{}
		type result struct {
			st  Stats
			err error
		}
		done := make(chan result, 1)
		go func() {
			st, err := rp.Run(ctx, diff.FromRecords(synthetic(10)...), sink)
			done <- result{st, err}
		}()
		synctest.Wait() // every call but record 3's has finished
		var ids []string
		for _, r := range sink.records() {
			ids = append(ids, r.RequestID)
		}
		require.Equal(t, []string{"0", "1", "2"}, ids, "only the records before the hanging one may be written")
		cancel()
		res := <-done
		require.ErrorIs(t, res.err, context.Canceled)
		require.Equal(t, 9, res.st.Written)
		require.Equal(t, 1, res.st.Aborted)
		require.Equal(t, 10, res.st.Read)
		ids = nil
		for _, r := range sink.records() {
			ids = append(ids, r.RequestID)
		}
		require.Equal(t, []string{"0", "1", "2", "4", "5", "6", "7", "8", "9"}, ids)
		require.True(t, final.Final)
		require.Equal(t, 9, final.Done)
	})
}

func TestReplayCancelStopsReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		target := funcTarget(func(ctx context.Context, rec *record.Record) (record.Arm, error) {
			select {
			case <-time.After(time.Second):
				return okArm(rec), nil
			case <-ctx.Done():
				return record.Arm{}, ctx.Err()
			}
		})
		ctx, cancel := context.WithTimeout(t.Context(), 2500*time.Millisecond)
		defer cancel()
		src := &countingSource{recs: synthetic(10_000)}
		rp, err := New(target, Options{Concurrency: 2}, nil, nil)
		require.NoError(t, err)
		sink := &memSink{}
		st, err := rp.Run(ctx, src, sink)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, 4, st.Written) // two rounds of two calls
		require.Less(t, src.next, 100, "the reader ran ahead of the calls")
		require.Equal(t, st.Read, st.Written+st.Aborted)
	})
}

// countingSource yields recs and fails with err after them, if set.
type countingSource struct {
	recs []*record.Record
	next int
	err  error
}

func (s *countingSource) Next(ctx context.Context) (*record.Record, error) {
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if s.next >= len(s.recs) {
		if s.err != nil {
			return nil, s.err
		}
		return nil, io.EOF
	}
	s.next++
	return s.recs[s.next-1], nil
}

func (s *countingSource) Close() error { return nil }

func TestReplaySourceAndSinkErrors(t *testing.T) {
	target := funcTarget(func(_ context.Context, rec *record.Record) (record.Arm, error) { return okArm(rec), nil })
	t.Run("source", func(t *testing.T) {
		bad := &record.LineError{File: "x.jsonl", Line: 6, Err: errors.New("torn")}
		sink := &memSink{}
		rp, err := New(target, Options{}, nil, nil)
		require.NoError(t, err)
		st, err := rp.Run(t.Context(), &countingSource{recs: synthetic(5), err: bad}, sink)
		require.ErrorIs(t, err, bad)
		require.ErrorContains(t, err, "read recording: x.jsonl:6")
		require.Equal(t, 5, st.Written, "records before the bad line are replayed")
	})
	t.Run("sink", func(t *testing.T) {
		sink := &memSink{fail: errors.New("disk full")}
		rp, err := New(target, Options{}, nil, nil)
		require.NoError(t, err)
		st, err := rp.Run(t.Context(), &countingSource{recs: synthetic(1000)}, sink)
		require.ErrorContains(t, err, "write replay: disk full")
		require.Zero(t, st.Written)
		require.Equal(t, 1, sink.writes, "writing went on after the sink failed")
	})
}

func TestNewValidates(t *testing.T) {
	target := funcTarget(func(context.Context, *record.Record) (record.Arm, error) { return record.Arm{}, nil })
	for name, opts := range map[string]Options{
		"negative rate":        {Rate: -1},
		"NaN rate":             {Rate: math.NaN()},
		"negative concurrency": {Concurrency: -1},
		"negative timeout":     {Timeout: -time.Second},
	} {
		_, err := New(target, opts, nil, nil)
		require.Error(t, err, name)
	}
	_, err := New(nil, Options{}, nil, nil)
	require.Error(t, err)
}
