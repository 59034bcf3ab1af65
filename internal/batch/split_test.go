package batch

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
)

// rowExec computes, row by row, from the inputs x (FP32 [N,w]) and s
// (BYTES [N,2]):
//
//	y (FP32 [N,w])  = 2x+1
//	n (INT64 [N])   = total length of the row's strings + w
//	t (BYTES [N,2]) = each string reversed, then "!"
//
// It fails when the packed inputs are not rectangular, and records the
// rows and output names of each execution.
type rowExec struct {
	hold chan struct{}

	mu   sync.Mutex // protects rows
	rows []int      // rows per execution
}

func (e *rowExec) Execute(_ context.Context, inputs []infer.Tensor, outputs []string) ([]infer.Tensor, error) {
	<-e.hold
	x, s := inputs[0], inputs[1]
	n, w := int(x.Shape[0]), int(x.Shape[1])
	if len(x.Data) != 4*n*w || s.Shape[0] != int64(n) {
		return nil, fmt.Errorf("x of shape %s holds %d bytes", x.Shape, len(x.Data))
	}
	strs, err := infer.SplitBytes(s.Data)
	if err != nil || len(strs) != 2*n {
		return nil, fmt.Errorf("s of shape %s holds %d elements: %w", s.Shape, len(strs), err)
	}
	e.mu.Lock()
	e.rows = append(e.rows, n)
	e.mu.Unlock()
	outs := make([]infer.Tensor, len(outputs))
	for i, name := range outputs {
		switch name {
		case "y":
			data := make([]byte, len(x.Data))
			for k := 0; k < len(data); k += 4 {
				v := math.Float32frombits(binary.LittleEndian.Uint32(x.Data[k:]))
				binary.LittleEndian.PutUint32(data[k:], math.Float32bits(2*v+1))
			}
			outs[i] = infer.Tensor{Name: name, DataType: infer.FP32, Shape: infer.Shape{int64(n), int64(w)}, Data: data}
		case "n":
			data := make([]byte, 8*n)
			for r := range n {
				binary.LittleEndian.PutUint64(data[8*r:], uint64(len(strs[2*r])+len(strs[2*r+1])+w))
			}
			outs[i] = infer.Tensor{Name: name, DataType: infer.Int64, Shape: infer.Shape{int64(n)}, Data: data}
		case "t":
			var data []byte
			for _, str := range strs {
				data = infer.AppendBytesElement(data, transform(str))
			}
			outs[i] = infer.Tensor{Name: name, DataType: infer.Bytes, Shape: infer.Shape{int64(n), 2}, Data: data}
		default:
			return nil, fmt.Errorf("unknown output %q", name)
		}
	}
	return outs, nil
}

func transform(s []byte) []byte {
	out := slices.Clone(s)
	slices.Reverse(out)
	return append(out, '!')
}

// randomRequest builds a request of batch size 1..5 with random data,
// width 3 (mostly) or 4, and a random non-empty subset of the outputs in
// random order.
func randomRequest(rng *rand.Rand) *Request {
	bs := 1 + rng.IntN(5)
	w := 3
	if rng.IntN(5) == 0 {
		w = 4
	}
	x := make([]byte, 4*bs*w)
	for k := 0; k < len(x); k += 4 {
		binary.LittleEndian.PutUint32(x[k:], math.Float32bits(float32(rng.IntN(2000)-1000)/8))
	}
	var s []byte
	for range 2 * bs {
		str := make([]byte, rng.IntN(7))
		for k := range str {
			str[k] = byte('a' + rng.IntN(26))
		}
		s = infer.AppendBytesElement(s, str)
	}
	outs := []string{"y", "n", "t"}
	rng.Shuffle(len(outs), func(i, j int) { outs[i], outs[j] = outs[j], outs[i] })
	outs = outs[:1+rng.IntN(3)]
	return &Request{
		Inputs: []infer.Tensor{
			{Name: "x", DataType: infer.FP32, Shape: infer.Shape{int64(bs), int64(w)}, Data: x},
			{Name: "s", DataType: infer.Bytes, Shape: infer.Shape{int64(bs), 2}, Data: s},
		},
		Outputs:   outs,
		BatchSize: bs,
	}
}

// checkRows verifies that res holds exactly req's rows of every output it
// asked for.
func checkRows(t *testing.T, req *Request, res *Result) {
	t.Helper()
	x, s := req.Inputs[0], req.Inputs[1]
	bs, w := req.BatchSize, int(x.Shape[1])
	strs, err := infer.SplitBytes(s.Data)
	require.NoError(t, err)
	require.Len(t, res.Outputs, len(req.Outputs))
	for j, name := range req.Outputs {
		got := res.Outputs[j]
		require.Equal(t, name, got.Name)
		switch name {
		case "y":
			require.Equal(t, infer.Shape{int64(bs), int64(w)}, got.Shape)
			want := make([]byte, len(x.Data))
			for k := 0; k < len(want); k += 4 {
				v := math.Float32frombits(binary.LittleEndian.Uint32(x.Data[k:]))
				binary.LittleEndian.PutUint32(want[k:], math.Float32bits(2*v+1))
			}
			require.Equal(t, want, got.Data)
		case "n":
			require.Equal(t, infer.Shape{int64(bs)}, got.Shape)
			want := make([]byte, 8*bs)
			for r := range bs {
				binary.LittleEndian.PutUint64(want[8*r:], uint64(len(strs[2*r])+len(strs[2*r+1])+w))
			}
			require.Equal(t, want, got.Data)
		case "t":
			require.Equal(t, infer.Shape{int64(bs), 2}, got.Shape)
			var want []byte
			for _, str := range strs {
				want = infer.AppendBytesElement(want, transform(str))
			}
			require.True(t, bytes.Equal(want, got.Data), "BYTES rows: got %q, want %q", got.Data, want)
		}
	}
}

// TestOutputsSplitBackExactly is a property test: random batch
// compositions (batch sizes, shapes, output subsets) queue behind a busy
// instance, are packed into batches, and every request must get exactly
// its own rows back.
func TestOutputsSplitBackExactly(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	rounds := 150
	if testing.Short() {
		rounds = 30
	}
	multi, mixedOutputs := 0, 0
	for round := range rounds {
		synctest.Test(t, func(t *testing.T) {
			e := &rowExec{hold: make(chan struct{})}
			b, err := New(Options{Model: "m", Version: "1", Dynamic: true, MaxBatchSize: 12}, []Executor{e}, nil, nil, nil)
			require.NoError(t, err)
			released := false
			defer func() { // let a failed round end without a deadlock
				if !released {
					close(e.hold)
				}
				_ = b.Close(context.WithoutCancel(t.Context()))
			}()
			n := 1 + rng.IntN(12)
			reqs := make([]*Request, n)
			results := make([]chan outcome, n)
			for i := range n {
				reqs[i] = randomRequest(rng)
				results[i] = make(chan outcome, 1)
				go func() {
					res, err := b.Submit(t.Context(), reqs[i])
					results[i] <- outcome{res: res, err: err}
				}()
				synctest.Wait() // keep the arrival order
			}
			close(e.hold)
			released = true
			res := make([]*Result, n)
			for i := range n {
				o := <-results[i]
				require.NoError(t, o.err, "round %d request %d", round, i)
				checkRows(t, reqs[i], o.res)
				res[i] = o.res
			}
			// Appending to one request's output must not spill into
			// another's rows.
			for _, r := range res {
				for _, o := range r.Outputs {
					_ = append(o.Data, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
				}
			}
			for i := range n {
				checkRows(t, reqs[i], res[i])
			}
			require.NoError(t, b.Close(t.Context()))
			total := 0
			for _, rows := range e.rows {
				total += rows
			}
			multi += n - len(e.rows) // fewer executions than requests: some were batched
			if len(b.slots[0].names) > 0 {
				mixedOutputs++ // the batch asked for the union of different output lists
			}
			sum := 0
			for _, r := range reqs {
				sum += r.BatchSize
			}
			require.Equal(t, sum, total, "every row executed exactly once")
		})
	}
	require.Positive(t, multi, "some batches held several requests")
	require.Positive(t, mixedOutputs, "some batches merged different output lists")
}

func TestSkipElements(t *testing.T) {
	var data []byte
	for _, s := range []string{"a", "", "bcd"} {
		data = infer.AppendBytesElement(data, []byte(s))
	}
	tests := []struct {
		at, n  int
		want   int
		wantOK bool
	}{
		{at: 0, n: 0, want: 0, wantOK: true},
		{at: 0, n: 2, want: 9, wantOK: true},
		{at: 9, n: 1, want: 16, wantOK: true},
		{at: 0, n: 4, wantOK: false},
		{at: 14, n: 1, wantOK: false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("at %d n %d", tt.at, tt.n), func(t *testing.T) {
			got, ok := skipElements(data, tt.at, tt.n)
			require.Equal(t, tt.wantOK, ok)
			if ok {
				require.Equal(t, tt.want, got)
			}
		})
	}
}
