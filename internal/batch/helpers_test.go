package batch

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// call is one Execute seen by fakeExec.
type call struct {
	at   time.Duration // since the test started (bubble time)
	ids  []int64       // the requests in the batch, in row order
	rows int
}

// fakeExec records the batches it runs. Requests carry their id in every
// row of the INT64 input "id" (shape [bs]); the output "y" is id*10 per
// row, computed row by row.
type fakeExec struct {
	start time.Time
	hold  chan struct{}                   // when set, Execute waits until it is closed
	sleep func(ids []int64) time.Duration // optional run time
	fail  error

	mu        sync.Mutex // protects the fields below
	calls     []call
	active    int
	maxActive int
}

func newFakeExec() *fakeExec { return &fakeExec{start: time.Now()} }

func (e *fakeExec) Execute(ctx context.Context, inputs []infer.Tensor, outputs []string) ([]infer.Tensor, error) {
	in := inputs[0]
	rows := int(in.Shape[0])
	var ids []int64
	for r := range rows {
		id := int64(binary.LittleEndian.Uint64(in.Data[8*r:]))
		if len(ids) == 0 || ids[len(ids)-1] != id {
			ids = append(ids, id)
		}
	}
	e.mu.Lock()
	e.calls = append(e.calls, call{at: time.Since(e.start), ids: ids, rows: rows})
	e.active++
	e.maxActive = max(e.maxActive, e.active)
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.active--
		e.mu.Unlock()
	}()
	if e.hold != nil {
		select {
		case <-e.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if e.sleep != nil {
		time.Sleep(e.sleep(ids))
	}
	if e.fail != nil {
		return nil, e.fail
	}
	outs := make([]infer.Tensor, len(outputs))
	for i, name := range outputs {
		data := make([]byte, 8*rows)
		for r := range rows {
			id := binary.LittleEndian.Uint64(in.Data[8*r:])
			binary.LittleEndian.PutUint64(data[8*r:], id*10)
		}
		outs[i] = infer.Tensor{Name: name, DataType: infer.Int64, Shape: infer.Shape{int64(rows)}, Data: data}
	}
	return outs, nil
}

// batches returns the request ids of each call.
func (e *fakeExec) batches() [][]int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out [][]int64
	for _, c := range e.calls {
		out = append(out, c.ids)
	}
	return out
}

func (e *fakeExec) callList() []call {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.calls)
}

// request builds a request of batch size bs whose rows all carry id.
func request(id int64, bs int) *Request {
	data := make([]byte, 8*bs)
	for r := range bs {
		binary.LittleEndian.PutUint64(data[8*r:], uint64(id))
	}
	return &Request{
		Inputs:    []infer.Tensor{{Name: "id", DataType: infer.Int64, Shape: infer.Shape{int64(bs)}, Data: data}},
		Outputs:   []string{"y"},
		BatchSize: bs,
	}
}

// outcome is what one Submit returned, and when.
type outcome struct {
	res *Result
	err error
	at  time.Duration
}

// harness runs a batcher inside a synctest bubble.
type harness struct {
	t     *testing.T
	start time.Time
	b     *Batcher
}

func newHarness(t *testing.T, opts Options, execs ...Executor) *harness {
	t.Helper()
	if opts.Model == "" {
		opts.Model, opts.Version = "m", "1"
	}
	b, err := New(opts, execs, nil, nil, nil)
	require.NoError(t, err)
	return &harness{t: t, start: time.Now(), b: b}
}

// submit starts a Submit and waits until it is queued or running.
func (h *harness) submit(ctx context.Context, req *Request) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		res, err := h.b.Submit(ctx, req)
		ch <- outcome{res: res, err: err, at: time.Since(h.start)}
	}()
	synctest.Wait()
	return ch
}

// now is the bubble time since the test started.
func (h *harness) now() time.Duration { return time.Since(h.start) }

// sleepUntil advances the bubble clock to d after the start.
func (h *harness) sleepUntil(d time.Duration) {
	time.Sleep(d - h.now())
	synctest.Wait()
}

func (h *harness) close() {
	h.t.Helper()
	require.NoError(h.t, h.b.Close(h.t.Context()))
}

// waiting reports whether the Submit behind ch has not returned yet
// (call it after synctest.Wait).
func waiting(ch <-chan outcome) bool { return len(ch) == 0 }

// ok waits for a successful outcome and checks its output y.
func ok(t *testing.T, ch <-chan outcome, id int64, bs int) outcome {
	t.Helper()
	o := <-ch
	require.NoError(t, o.err)
	require.Len(t, o.res.Outputs, 1)
	y := o.res.Outputs[0]
	require.Equal(t, infer.Shape{int64(bs)}, y.Shape)
	require.Len(t, y.Data, 8*bs)
	for r := range bs {
		require.Equal(t, uint64(id*10), binary.LittleEndian.Uint64(y.Data[8*r:]), "request %d row %d", id, r)
	}
	return o
}

// asInfer returns err as an *apierr.Error.
func asInfer(t *testing.T, err error) *apierr.Error {
	t.Helper()
	ie, isInfer := errors.AsType[*apierr.Error](err)
	require.True(t, isInfer, "error %v is not an *apierr.Error", err)
	return ie
}

// failed waits for an outcome and checks its error's reason.
func failed(t *testing.T, ch <-chan outcome, reason string) outcome {
	t.Helper()
	o := <-ch
	require.Error(t, o.err)
	require.Equal(t, reason, asInfer(t, o.err).Reason, "error %v", o.err)
	return o
}
