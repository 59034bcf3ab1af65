package python

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/infer"
)

// got is one call of a Sender.
type got struct {
	outs  []infer.Tensor
	err   error
	final bool
}

// collector is a Sender that records its calls and closes done at the
// final one.
type collector struct {
	mu    sync.Mutex
	calls []got
	done  chan struct{}
}

func newCollector() *collector { return &collector{done: make(chan struct{})} }

func (c *collector) send(outs []infer.Tensor, err error, final bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, got{outs, err, final})
	if final {
		close(c.done)
	}
	return nil
}

func (c *collector) wait(t *testing.T) []got {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(time.Minute):
		t.Fatal("no final response within a minute")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]got(nil), c.calls...)
}

func u32Tensor(name string, shape infer.Shape, vals ...uint32) infer.Tensor {
	t := i32Tensor(name, shape)
	t.DataType = infer.Uint32
	for _, v := range vals {
		t.Data = append(t.Data, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
	}
	return t
}

func decoupledInstance(t *testing.T, name string) *Instance {
	t.Helper()
	b, _ := testBackend(t, Options{})
	text, err := os.ReadFile(filepath.Join("testdata", "models", name, "config.pbtxt"))
	if err != nil {
		t.Fatal(err)
	}
	return loadInstances(t, b, name, modelPath(t, name), testConfig(t, name, string(text)), 1, 1)[0]
}

// A decoupled model's responses reach the request's sender as the model
// sends them, from a thread of its own after execute returned: each
// response, an error response that does not end the request, and the
// final flag once, last. Before, a decoupled model was refused at load.
func TestDecoupledResponsesFromThread(t *testing.T) {
	in := decoupledInstance(t, "repeat")
	c := newCollector()
	inputs := []infer.Tensor{
		i32Tensor("IN", infer.Shape{4}, 7, 8, -1, 9),
		u32Tensor("DELAY", infer.Shape{4}, 0, 0, 0, 0),
		u32Tensor("WAIT", infer.Shape{1}, 0),
	}
	_, errs := in.ExecuteStreams(t.Context(), [][]infer.Tensor{inputs}, [][]string{{"OUT", "IDX"}}, nil, []infer.Sender{c.send})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	calls := c.wait(t)
	var summary []string
	for _, g := range calls {
		switch {
		case g.err != nil:
			summary = append(summary, "error:"+g.err.Error())
		case g.outs != nil:
			summary = append(summary, fmt.Sprintf("%v/%v", i32s(t, g.outs[0]), g.outs[1].Data[0]))
		}
		if g.final {
			summary = append(summary, "final")
		}
	}
	want := "[[7]/0 [8]/1 error:negative value -1 at 2 [9]/3 final]"
	if fmt.Sprint(summary) != want {
		t.Errorf("responses = %v, want %s", summary, want)
	}
	if reason(calls[2].err) != ReasonModelError {
		t.Errorf("error response reason = %q, want %q", reason(calls[2].err), ReasonModelError)
	}
}

// A request with no response gets the final flag alone; requests of one
// execute call each get their own responses; a decoupled model run
// without senders (a warm-up) answers with its last response.
func TestDecoupledZeroAndManyResponses(t *testing.T) {
	in := decoupledInstance(t, "square")
	cs := []*collector{newCollector(), newCollector()}
	_, errs := in.ExecuteStreams(t.Context(),
		[][]infer.Tensor{{i32Tensor("IN", infer.Shape{1}, 0)}, {i32Tensor("IN", infer.Shape{1}, 3)}},
		[][]string{{"OUT"}, {"OUT"}}, nil, []infer.Sender{cs[0].send, cs[1].send})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if calls := cs[0].wait(t); len(calls) != 1 || calls[0].outs != nil || calls[0].err != nil || !calls[0].final {
		t.Errorf("IN=0: calls = %+v, want the final flag alone", calls)
	}
	calls := cs[1].wait(t)
	if len(calls) != 4 || !calls[3].final || calls[3].outs != nil {
		t.Fatalf("IN=3: %d calls %+v, want 3 responses and the final flag", len(calls), calls)
	}
	for _, g := range calls[:3] {
		if v := i32s(t, g.outs[0]); len(v) != 1 || v[0] != 3 || g.final {
			t.Errorf("IN=3: response %v final=%v", v, g.final)
		}
	}
	outs, err := in.Execute(t.Context(), []infer.Tensor{i32Tensor("IN", infer.Shape{1}, 2)}, []string{"OUT"})
	if err != nil || len(outs) != 1 || i32s(t, outs[0])[0] != 2 {
		t.Errorf("Execute = %v, %v; want the last response", outs, err)
	}
}

// A worker that dies while a request waits for responses ends the
// request with worker_crashed, through its sender.
func TestDecoupledWorkerDeath(t *testing.T) {
	in := decoupledInstance(t, "repeat")
	c := newCollector()
	inputs := []infer.Tensor{
		i32Tensor("IN", infer.Shape{2}, 1, 2),
		u32Tensor("DELAY", infer.Shape{2}, 0, 600_000), // the second never comes
		u32Tensor("WAIT", infer.Shape{1}, 0),
	}
	_, errs := in.ExecuteStreams(t.Context(), [][]infer.Tensor{inputs}, [][]string{{"OUT", "IDX"}}, nil, []infer.Sender{c.send})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	waitFor(t, "the first response", time.Minute, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.calls) == 1
	})
	in.current().kill()
	calls := c.wait(t)
	last := calls[len(calls)-1]
	if len(calls) != 2 || !last.final || reason(last.err) != ReasonWorkerCrashed {
		t.Errorf("calls = %+v, want one response, then worker_crashed as the final", calls)
	}
}
