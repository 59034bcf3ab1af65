package modelrepo

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/infer"
)

// fakeModel is the content of a model.fake file: it drives the fake
// backend's signature and behaviour.
type fakeModel struct {
	Inputs      []fakeTensor `json:"inputs"`
	Outputs     []fakeTensor `json:"outputs"`
	Add         int32        `json:"add"`           // every INT32 output is the first input plus Add
	LoadDelayMS int          `json:"load_delay_ms"` // each instance takes this long to load
	LoadError   string       `json:"load_error"`    // instance creation fails
	ExecError   string       `json:"exec_error"`    // every execution fails (so warm-up does)
	ExecDelayMS int          `json:"exec_delay_ms"` // each execution takes this long
	Gate        string       `json:"gate"`          // each execution waits for fakeGate(Gate) to open
}

// fakeGates are the gates fake models wait on, by name.
var fakeGates sync.Map // string -> chan struct{}

// fakeGate returns the gate called name; closing it lets the executions
// waiting on it go on.
func fakeGate(name string) chan struct{} {
	g, _ := fakeGates.LoadOrStore(name, make(chan struct{}))
	return g.(chan struct{})
}

type fakeTensor struct {
	Name     string  `json:"name"`
	DataType string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// fakeFile returns a model.fake with one INT32 input IN and output OUT of
// shape [-1,4], adding add.
func fakeFile(add int32, edit ...func(*fakeModel)) string {
	fm := fakeModel{
		Inputs:  []fakeTensor{{Name: "IN", DataType: "INT32", Shape: []int64{-1, 4}}},
		Outputs: []fakeTensor{{Name: "OUT", DataType: "INT32", Shape: []int64{-1, 4}}},
		Add:     add,
	}
	for _, e := range edit {
		e(&fm)
	}
	b, err := json.Marshal(fm)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// fakeBackend is a hand-written backend for lifecycle tests.
type fakeBackend struct {
	loads      atomic.Int64 // instances created
	closes     atomic.Int64 // instances closed
	executions atomic.Int64
	violations atomic.Int64 // Execute on a closed instance, or Close twice
}

func (b *fakeBackend) Name() string            { return "fake" }
func (b *fakeBackend) DefaultFilename() string { return "model.fake" }

func readFake(path string) (fakeModel, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return fakeModel{}, err
	}
	var fm fakeModel
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fm); err != nil {
		return fakeModel{}, fmt.Errorf("not a fake model: %w", err)
	}
	if len(fm.Inputs) == 0 || len(fm.Outputs) == 0 {
		return fakeModel{}, errors.New("not a fake model: no inputs or outputs")
	}
	return fm, nil
}

func (b *fakeBackend) Signature(_ context.Context, path string) (infer.Signature, error) {
	fm, err := readFake(path)
	if err != nil {
		return infer.Signature{}, err
	}
	spec := func(ts []fakeTensor) []infer.TensorSpec {
		var out []infer.TensorSpec
		for _, t := range ts {
			dt, _ := infer.ParseDataType(t.DataType)
			out = append(out, infer.TensorSpec{Name: t.Name, DataType: dt, Shape: t.Shape})
		}
		return out
	}
	return infer.Signature{Inputs: spec(fm.Inputs), Outputs: spec(fm.Outputs)}, nil
}

func (b *fakeBackend) Load(ctx context.Context, opts backend.LoadOptions) (backend.Instance, error) {
	fm, err := readFake(opts.Path)
	if err != nil {
		return nil, err
	}
	if fm.LoadDelayMS > 0 {
		select {
		case <-time.After(time.Duration(fm.LoadDelayMS) * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if fm.LoadError != "" {
		return nil, errors.New(fm.LoadError)
	}
	b.loads.Add(1)
	return &fakeInstance{b: b, fm: fm}, nil
}

type fakeInstance struct {
	b      *fakeBackend
	fm     fakeModel
	closed atomic.Bool
}

func (in *fakeInstance) Execute(ctx context.Context, inputs []infer.Tensor, outputs []string) ([]infer.Tensor, error) {
	in.b.executions.Add(1)
	if in.closed.Load() {
		in.b.violations.Add(1)
		return nil, errors.New("execute on a closed instance")
	}
	if in.fm.ExecDelayMS > 0 {
		select {
		case <-time.After(time.Duration(in.fm.ExecDelayMS) * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if in.fm.Gate != "" {
		select {
		case <-fakeGate(in.fm.Gate):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if in.fm.ExecError != "" {
		return nil, errors.New(in.fm.ExecError)
	}
	if len(inputs) == 0 {
		return nil, errors.New("no inputs")
	}
	first := inputs[0]
	var out []infer.Tensor
	for _, name := range outputs {
		t := infer.Tensor{Name: name, DataType: first.DataType, Shape: first.Shape.Clone(), Data: bytes.Clone(first.Data)}
		if first.DataType == infer.Int32 {
			for i := 0; i+4 <= len(t.Data); i += 4 {
				v := int32(binary.LittleEndian.Uint32(t.Data[i:])) + in.fm.Add
				binary.LittleEndian.PutUint32(t.Data[i:], uint32(v))
			}
		}
		out = append(out, t)
	}
	return out, nil
}

func (in *fakeInstance) Close() error {
	if in.closed.Swap(true) {
		in.b.violations.Add(1)
	}
	in.b.closes.Add(1)
	return nil
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logLines decodes the JSON log lines whose msg is msg.
func (s *syncBuffer) logLines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(s.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// harness is one Manager over the fake backend, closed at test end.
type harness struct {
	m    *Manager
	fake *fakeBackend
	reg  *prometheus.Registry
	logs *syncBuffer
}

// newHarness builds a manager over the fake backend. The manager is closed
// at the end of the test, which then checks every instance was closed
// exactly once and never used after.
func newHarness(tb testing.TB, opts Options) *harness {
	tb.Helper()
	h := &harness{fake: &fakeBackend{}, reg: prometheus.NewRegistry(), logs: &syncBuffer{}}
	var reg backend.Registry
	reg.Register(h.fake, "fake_platform")
	reg.Register(fakeStreamBackend{h.fake})
	logger := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m, err := New(opts, &reg, logger, h.reg)
	require.NoError(tb, err)
	h.m = m
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(tb, m.Close(ctx))
		require.Equal(tb, h.fake.loads.Load(), h.fake.closes.Load(), "every instance created must be closed")
		require.Zero(tb, h.fake.violations.Load(), "instance used after close, or closed twice")
	})
	return h
}

func (h *harness) start(tb testing.TB) {
	tb.Helper()
	require.NoError(tb, h.m.Start(tb.Context()))
}

// infer sends IN = [1,2,3,4] (batch 1) to model/version.
func (h *harness) infer(ctx context.Context, model, version string) (*infer.Response, error) {
	return h.m.Infer(ctx, &infer.Request{ID: "r", Model: model, Version: version, Inputs: []infer.Tensor{int32Tensor("IN", []int64{1, 4}, 1, 2, 3, 4)}})
}

// servedAdd checks a response to h.infer and returns what the fake added.
func servedAdd(t *testing.T, resp *infer.Response) int32 {
	t.Helper()
	require.Len(t, resp.Outputs, 1)
	vals := int32Values(resp.Outputs[0].Data)
	require.Len(t, vals, 4)
	return vals[0] - 1
}

func int32Tensor(name string, shape []int64, vals ...int32) infer.Tensor {
	data := make([]byte, 0, 4*len(vals))
	for _, v := range vals {
		data = binary.LittleEndian.AppendUint32(data, uint32(v))
	}
	return infer.Tensor{Name: name, DataType: infer.Int32, Shape: shape, Data: data}
}

func int32Values(b []byte) []int32 {
	out := make([]int32, 0, len(b)/4)
	for i := 0; i+4 <= len(b); i += 4 {
		out = append(out, int32(binary.LittleEndian.Uint32(b[i:])))
	}
	return out
}

// writeFiles writes files (path relative to root -> content).
func writeFiles(tb testing.TB, root string, files map[string]string) {
	tb.Helper()
	for rel, content := range files {
		path := filepath.Join(root, filepath.FromSlash(rel))
		require.NoError(tb, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(tb, os.WriteFile(path, []byte(content), 0o644))
	}
}

// fakeConfig is a config.pbtxt for a fake model with IN/OUT [4].
func fakeConfig(extra string) string {
	return `backend: "fake"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 4 ] } ]
` + extra
}

// entries returns the index entries of one model as "version STATE" with
// the reason after a colon when there is one.
func entries(h *harness, name string) []string {
	var out []string
	for _, e := range h.m.Index(context.Background(), false) {
		if e.Name != name {
			continue
		}
		s := e.Version + " " + string(e.State)
		if e.Reason != "" {
			s += ": " + e.Reason
		}
		out = append(out, s)
	}
	return out
}

// requireInferError checks an error's kind and reason and that its
// message contains msg.
func requireInferError(t *testing.T, err error, kind apierr.Kind, reason, msg string) {
	t.Helper()
	var ie *apierr.Error
	require.ErrorAs(t, err, &ie)
	require.Equal(t, reason, ie.Reason, "error: %v", err)
	require.Equal(t, kind, ie.Kind, "error: %v", err)
	require.Contains(t, ie.Error(), msg)
}
