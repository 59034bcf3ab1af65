package sequence

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/batch"
	"github.com/sluice-ml/sluice/internal/infer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ms = time.Millisecond

// accExec is a Go twin of onnxgen.Accumulator (Triton's QA sequence
// models keep a running sum the same way): per row, with INT32 INPUT,
// START, READY and INPUT_STATE, state = READY ? (START ? INPUT :
// INPUT_STATE+INPUT) : INPUT_STATE, returned as OUTPUT and OUTPUT_STATE;
// CORRID (UINT64 or BYTES) is echoed as CORRID_OUT. It records what it saw.
type accExec struct {
	hold  chan struct{} // when set, Execute waits for a token
	sleep time.Duration // run time of one execution

	mu    sync.Mutex // protects calls
	calls []execCall
}

type execCall struct {
	ready []int32
	start []int32
	corr  []string
}

func (e *accExec) Execute(_ context.Context, inputs []infer.Tensor, outputs []string) ([]infer.Tensor, error) {
	if e.hold != nil {
		<-e.hold
	}
	time.Sleep(e.sleep)
	by := map[string]infer.Tensor{}
	for _, t := range inputs {
		by[t.Name] = t
	}
	n := int(by["INPUT"].Shape[0])
	i32 := func(name string, r int) int32 { return int32(binary.LittleEndian.Uint32(by[name].Data[4*r:])) }
	state := make([]byte, 4*n)
	var c execCall
	for r := range n {
		v := i32("INPUT_STATE", r)
		if i32("READY", r) != 0 {
			if i32("START", r) != 0 {
				v = i32("INPUT", r)
			} else {
				v += i32("INPUT", r)
			}
		}
		binary.LittleEndian.PutUint32(state[4*r:], uint32(v))
		c.ready = append(c.ready, i32("READY", r))
		c.start = append(c.start, i32("START", r))
	}
	corr, hasCorr := by["CORRID"]
	if hasCorr {
		if corr.DataType == infer.Bytes {
			els, err := infer.SplitBytes(corr.Data)
			if err != nil {
				return nil, err
			}
			for _, el := range els {
				c.corr = append(c.corr, string(el))
			}
		} else {
			for r := range n {
				c.corr = append(c.corr, string(rune('0'+binary.LittleEndian.Uint64(corr.Data[8*r:]))))
			}
		}
	}
	e.mu.Lock()
	e.calls = append(e.calls, c)
	e.mu.Unlock()
	outs := make([]infer.Tensor, len(outputs))
	for i, name := range outputs {
		switch name {
		case "OUTPUT", "OUTPUT_STATE":
			outs[i] = infer.Tensor{Name: name, DataType: infer.Int32, Shape: infer.Shape{int64(n), 1}, Data: append([]byte(nil), state...)}
		case "CORRID_OUT":
			outs[i] = infer.Tensor{Name: name, DataType: corr.DataType, Shape: corr.Shape.Clone(), Data: append([]byte(nil), corr.Data...)}
		default:
			return nil, errors.New("unknown output " + name)
		}
	}
	return outs, nil
}

func (e *accExec) callList() []execCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]execCall(nil), e.calls...)
}

var i32True, i32False = []byte{1, 0, 0, 0}, []byte{0, 0, 0, 0}

// accOptions configures the accumulator as Triton's QA sequence configs
// do: START and READY as INT32 controls, OUTPUT_STATE fed back into
// INPUT_STATE.
func accOptions(strategy Strategy, maxBatch int, corr infer.DataType) Options {
	o := Options{
		Model: "acc", Version: "1", Strategy: strategy, MaxBatchSize: maxBatch,
		IdleTimeout: 100 * ms,
		Controls: []Control{
			{Kind: ControlStart, Input: "START", DataType: infer.Int32, False: i32False, True: i32True},
			{Kind: ControlReady, Input: "READY", DataType: infer.Int32, False: i32False, True: i32True},
		},
		States: []State{{Input: "INPUT_STATE", Output: "OUTPUT_STATE", DataType: infer.Int32, Dims: infer.Shape{1}}},
	}
	if corr != infer.Invalid {
		o.Controls = append(o.Controls, Control{Kind: ControlCorrID, Input: "CORRID", DataType: corr})
	}
	return o
}

func req(id CorrID, v int32, start, end bool, outputs ...string) *Request {
	if len(outputs) == 0 {
		outputs = []string{"OUTPUT"}
	}
	return &Request{
		Inputs:  []infer.Tensor{{Name: "INPUT", DataType: infer.Int32, Shape: infer.Shape{1, 1}, Data: binary.LittleEndian.AppendUint32(nil, uint32(v))}},
		Outputs: outputs, ID: id, Start: start, End: end,
	}
}

func num(n uint64) CorrID { return CorrID{Num: n} }

// sum submits r and returns its OUTPUT value.
func sum(t *testing.T, s *Scheduler, r *Request) int32 {
	t.Helper()
	res, err := s.Submit(t.Context(), r)
	require.NoError(t, err)
	require.Equal(t, infer.Shape{1, 1}, res.Outputs[0].Shape)
	return int32(binary.LittleEndian.Uint32(res.Outputs[0].Data))
}

func reason(t *testing.T, err error) string {
	t.Helper()
	ie, ok := errors.AsType[*apierr.Error](err)
	require.True(t, ok, "error %v is not an *apierr.Error", err)
	return ie.Reason
}

func newSched(t *testing.T, o Options, execs ...batch.Executor) (*Scheduler, *Metrics) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	s, err := New(o, execs, nil, m, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close(context.Background())) })
	return s, m
}

// Interleaved sequences keep separate running sums through the implicit
// state (Triton's qa/L0_sequence_batcher test_simple_sequence with several
// correlation ids, and qa/L0_implicit_state), under both strategies.
func TestInterleavedSequencesKeepTheirOwnState(t *testing.T) {
	for _, strategy := range []Strategy{Direct, Oldest} {
		t.Run(strategy.String(), func(t *testing.T) {
			e := &accExec{}
			s, _ := newSched(t, accOptions(strategy, 4, infer.Uint64), e)
			require.Equal(t, int32(1), sum(t, s, req(num(1), 1, true, false)))
			require.Equal(t, int32(100), sum(t, s, req(num(2), 100, true, false)))
			require.Equal(t, int32(3), sum(t, s, req(num(1), 2, false, false)))
			require.Equal(t, int32(300), sum(t, s, req(num(2), 200, false, false)))
			require.Equal(t, int32(6), sum(t, s, req(num(1), 3, false, true)))
			require.Equal(t, int32(600), sum(t, s, req(num(2), 300, false, true)))
			_, err := s.Submit(t.Context(), req(num(1), 4, false, false))
			require.Equal(t, ReasonSequenceNotStarted, reason(t, err), "after END the id is free")
			require.Equal(t, int32(4), sum(t, s, req(num(1), 4, true, true)), "a new sequence starts from fresh state")
			if strategy == Direct {
				// Sequence 2 holds slot 1: its rows come second, the idle
				// slot 0 row is padding with READY false.
				calls := e.callList()
				require.Equal(t, []int32{0, 1}, calls[1].ready)
				require.Equal(t, []string{"0", "2"}, calls[1].corr, "padding rows carry correlation id 0")
			}
		})
	}
}

// Concurrent sequences on one batching instance share executions, at most
// one request of each per execution, and each still sees its own sum.
func TestConcurrentSequencesShareExecutions(t *testing.T) {
	for _, strategy := range []Strategy{Direct, Oldest} {
		t.Run(strategy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { concurrentSequences(t, strategy) })
		})
	}
}

func concurrentSequences(t *testing.T, strategy Strategy) {
	t.Helper()
	e := &accExec{sleep: ms}
	s, _ := newSched(t, accOptions(strategy, 4, infer.Invalid), e)
	const seqs, steps = 4, 5
	var wg sync.WaitGroup
	got := make([][]int32, seqs)
	for q := range seqs {
		wg.Go(func() {
			id := num(uint64(q + 1))
			for k := range steps {
				res, err := s.Submit(t.Context(), req(id, int32(q*10+1), k == 0, k == steps-1))
				if err != nil {
					t.Error(err)
					return
				}
				got[q] = append(got[q], int32(binary.LittleEndian.Uint32(res.Outputs[0].Data)))
			}
		})
	}
	wg.Wait()
	for q := range seqs {
		v := int32(q*10 + 1)
		require.Equal(t, []int32{v, 2 * v, 3 * v, 4 * v, 5 * v}, got[q], "sequence %d", q+1)
	}
	for _, c := range e.callList() {
		require.LessOrEqual(t, len(c.ready), 4)
	}
	require.Less(t, len(e.callList()), seqs*steps, "sequences shared executions")
}

func TestRequestsThatCannotRun(t *testing.T) {
	e := &accExec{}
	s, _ := newSched(t, accOptions(Direct, 2, infer.Uint64), e)
	_, err := s.Submit(t.Context(), req(CorrID{}, 1, true, false))
	require.Equal(t, ReasonMissingCorrelationID, reason(t, err))
	_, err = s.Submit(t.Context(), req(num(5), 1, false, false))
	require.Equal(t, ReasonSequenceNotStarted, reason(t, err))
	_, err = s.Submit(t.Context(), req(CorrID{Str: "abc"}, 1, true, false))
	require.Equal(t, ReasonInvalidCorrelationID, reason(t, err), "a UINT64 CORRID control takes no string ids")
	r := req(num(5), 1, true, false)
	r.Inputs[0].Shape = infer.Shape{2, 1}
	r.Inputs[0].Data = make([]byte, 8)
	_, err = s.Submit(t.Context(), r)
	require.Equal(t, ReasonSequenceBatchSize, reason(t, err))
	require.ErrorContains(t, err, "must specify batch-size 1 due to requirements of sequence batcher")
	_, err = s.Submit(t.Context(), req(CorrID{Str: string(make([]byte, MaxStringIDBytes+1))}, 1, true, false))
	require.Equal(t, ReasonInvalidCorrelationID, reason(t, err), "string ids are bounded")
	require.Empty(t, e.callList())
}

// String correlation ids reach a BYTES CORRID control; numbers reach it
// as decimal digits (Triton's CONTROL_SEQUENCE_CORRID with TYPE_STRING).
func TestStringCorrelationIDs(t *testing.T) {
	e := &accExec{}
	s, _ := newSched(t, accOptions(Oldest, 2, infer.Bytes), e)
	require.Equal(t, int32(7), sum(t, s, req(CorrID{Str: "user-a"}, 7, true, false)))
	require.Equal(t, int32(9), sum(t, s, req(CorrID{Str: "user-b"}, 9, true, false)))
	require.Equal(t, int32(8), sum(t, s, req(CorrID{Str: "user-a"}, 1, false, true)))
	require.Equal(t, int32(5), sum(t, s, req(num(42), 5, true, true)))
	var ids []string
	for _, c := range e.callList() {
		ids = append(ids, c.corr...)
	}
	require.Equal(t, []string{"user-a", "user-b", "user-a", "42"}, ids)
}

// A sequence that receives nothing for max_sequence_idle_microseconds
// loses its slot; its next request without START is refused, and a
// sequence waiting in the backlog takes the slot (Triton's
// qa/L0_sequence_batcher test_backlog_sequence_timeout idea).
func TestIdleTimeoutFreesTheSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := &accExec{}
		o := accOptions(Direct, 0, infer.Invalid) // one slot: no batch dimension
		s, m := newSched(t, o, e)
		one := func(id uint64, v int32, start bool) (*batch.Result, error) {
			r := req(num(id), v, start, false)
			r.Inputs[0].Shape = infer.Shape{1}
			return s.Submit(t.Context(), r)
		}
		_, err := one(1, 5, true)
		require.NoError(t, err)
		waiting := make(chan error, 1)
		go func() { _, err := one(2, 1, true); waiting <- err }()
		synctest.Wait()
		inSlots, backlog := s.Active()
		require.Equal(t, 1, inSlots)
		require.Equal(t, 1, backlog, "the second sequence waits for the only slot")
		time.Sleep(100*ms - time.Nanosecond)
		synctest.Wait()
		require.Empty(t, waiting)
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		require.NoError(t, <-waiting, "sequence 1 went idle: sequence 2 got its slot")
		_, err = one(1, 5, false)
		require.Equal(t, ReasonSequenceNotStarted, reason(t, err))
		require.InDelta(t, 1, testutil.ToFloat64(m.idleReleased.WithLabelValues("acc", "1")), 0)
		require.InDelta(t, 2, testutil.ToFloat64(m.started.WithLabelValues("acc", "1")), 0)
		require.InDelta(t, 1, testutil.ToFloat64(m.active.WithLabelValues("acc", "1")), 0)
	})
}

func TestBacklogIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := accOptions(Oldest, 1, infer.Invalid)
		o.MaxCandidates, o.MaxBacklog = 1, 1
		s, _ := newSched(t, o, &accExec{})
		require.Equal(t, int32(1), sum(t, s, req(num(1), 1, true, false)))
		go func() { _, _ = s.Submit(t.Context(), req(num(2), 1, true, false)) }()
		synctest.Wait()
		_, err := s.Submit(t.Context(), req(num(3), 1, true, false))
		require.Equal(t, batch.ReasonQueueFull, reason(t, err))
		require.Equal(t, int32(2), sum(t, s, req(num(1), 1, false, true)), "sequence 1 ends: 2 takes the slot")
		synctest.Wait()
	})
}

// A START on an active id ends that sequence and starts afresh.
func TestStartAgainResetsState(t *testing.T) {
	s, _ := newSched(t, accOptions(Direct, 2, infer.Invalid), &accExec{})
	require.Equal(t, int32(10), sum(t, s, req(num(1), 10, true, false)))
	require.Equal(t, int32(30), sum(t, s, req(num(1), 20, false, false)))
	require.Equal(t, int32(1), sum(t, s, req(num(1), 1, true, false)))
	require.Equal(t, int32(3), sum(t, s, req(num(1), 2, false, false)))
}

// A START under an id whose sequence never ended queues in that
// sequence's slot, behind its requests, as in Triton
// (qa/L0_sequence_batcher test_backlog_same_correlation_id_no_end, run
// with TRITONSERVER_DELAY_SCHEDULER=16: the new sequence's requests count
// among the slots' queued requests, none goes to the backlog).
func TestStartAgainKeepsTheSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := &accExec{}
		o := accOptions(Direct, 2, infer.Invalid)
		o.HoldUntilQueued = 4
		s, _ := newSched(t, o, e)
		got := make([]int32, 4)
		var wg sync.WaitGroup
		for i, r := range []*Request{
			req(num(1), 10, true, false), req(num(1), 20, false, false),
			req(num(2), 5, true, false), req(num(1), 1, true, false),
		} {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * ms) // in this order
				res, err := s.Submit(t.Context(), r)
				if err != nil {
					t.Error(err)
					return
				}
				got[i] = int32(binary.LittleEndian.Uint32(res.Outputs[0].Data))
			})
		}
		wg.Wait()
		require.Equal(t, []int32{10, 30, 5, 1}, got, "the second START runs after the first sequence's requests, from fresh state")
		inSlots, backlog := s.Active()
		require.Equal(t, 2, inSlots)
		require.Zero(t, backlog)
	})
}

// A queued request whose caller gives up is dropped and never runs.
func TestCancelledQueuedRequestIsDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := &accExec{hold: make(chan struct{})}
		s, _ := newSched(t, accOptions(Direct, 2, infer.Invalid), e)
		first := make(chan error, 1)
		go func() { _, err := s.Submit(t.Context(), req(num(1), 1, true, false)); first <- err }()
		synctest.Wait()
		ctx, cancel := context.WithCancel(t.Context())
		gone := make(chan error, 1)
		go func() { _, err := s.Submit(ctx, req(num(1), 100, false, false)); gone <- err }()
		synctest.Wait()
		cancel()
		require.Equal(t, batch.ReasonCanceled, reason(t, <-gone))
		e.hold <- struct{}{}
		require.NoError(t, <-first)
		close(e.hold)
		require.Equal(t, int32(3), sum(t, s, req(num(1), 2, false, true)), "the dropped 100 never entered the sum")
	})
}

// Direct with max_queue_delay and minimum_slot_utilization: an execution
// waits until that share of the instance's slots (all of them, active or
// not) has a request, or until its oldest request waited the delay
// (Triton's StrategyDirect; qa/L0_sequence_batcher
// test_queue_delay_half_min_util: with 4 slots and utilization 0.5, a
// request of one of two active sequences waits the delay).
func TestDirectWaitsForSlotUtilization(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := &accExec{}
		o := accOptions(Direct, 2, infer.Invalid)
		o.MaxQueueDelay, o.MinSlotUtilization = 10*ms, 1
		s, _ := newSched(t, o, e)
		start := time.Now()
		done := func(r *Request) <-chan time.Duration {
			ch := make(chan time.Duration, 1)
			go func() {
				_, err := s.Submit(t.Context(), r)
				if err != nil {
					t.Error(err)
				}
				ch <- time.Since(start)
			}()
			synctest.Wait()
			return ch
		}
		// One request in two slots: it waits the delay.
		require.Equal(t, 10*ms, <-done(req(num(1), 1, true, false)))
		b := done(req(num(2), 1, true, false))
		require.Equal(t, 20*ms, <-b, "sequence 2's START waited the delay: slot 0 had nothing")
		time.Sleep(5 * ms)
		a := done(req(num(1), 1, false, false))
		require.Empty(t, a)
		time.Sleep(2 * ms)
		c := done(req(num(2), 1, false, false))
		require.Equal(t, 27*ms, <-a, "...until both slots have a request")
		require.Equal(t, 27*ms, <-c)
		calls := e.callList()
		require.Equal(t, []int32{1, 1}, calls[len(calls)-1].ready, "both rows ran together")

		// Utilization 0.5 of two slots: one request is enough.
		o.MinSlotUtilization = 0.5
		s2, _ := newSched(t, o, &accExec{})
		start = time.Now()
		ch := make(chan time.Duration, 1)
		go func() {
			_, err := s2.Submit(t.Context(), req(num(1), 1, true, false))
			if err != nil {
				t.Error(err)
			}
			ch <- time.Since(start)
		}()
		synctest.Wait()
		require.Zero(t, <-ch)
	})
}

// Triton's TRITONSERVER_DELAY_SCHEDULER / _BACKLOG_DELAY_SCHEDULER test
// hooks (qa/L0_sequence_batcher test.sh sets them for test_full_batch:
// 12 queued; test_backlog_fill: 10 queued and 2 backlogged): nothing runs
// until the sequences in slots have HoldUntilQueued requests queued and
// the backlogged ones HoldUntilBacklogged; then full batches run as in
// qa/L0_sequence_batcher/sequence_batcher_test.py test_full_batch, which
// expects three executions of batch size 4 for four sequences of three.
func TestHoldUntilQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := &accExec{}
		o := accOptions(Direct, 4, infer.Invalid)
		o.HoldUntilQueued, o.HoldUntilBacklogged = 12, 1
		s, _ := newSched(t, o, e)
		var wg sync.WaitGroup
		// Every request from its own goroutine, a millisecond apart within
		// a sequence, so that all of them queue at once (as the test's
		// gRPC streams do).
		for q := range 4 {
			for k := range 3 {
				wg.Go(func() {
					time.Sleep(time.Duration(k) * ms) // in order within a sequence
					if _, err := s.Submit(t.Context(), req(num(uint64(q+1)), 1, k == 0, k == 2)); err != nil {
						t.Error(err)
					}
				})
			}
		}
		time.Sleep(10 * ms)
		synctest.Wait()
		require.Empty(t, e.callList(), "12 queued, but the backlog is still short of 1")
		wg.Go(func() {
			if _, err := s.Submit(t.Context(), req(num(5), 1, true, true)); err != nil {
				t.Error(err)
			}
		})
		time.Sleep(10 * ms)
		synctest.Wait()
		wg.Wait()
		calls := e.callList()
		require.Len(t, calls, 4)
		for _, c := range calls[:3] {
			require.Equal(t, []int32{1, 1, 1, 1}, c.ready, "full batches of the four sequences")
		}
		require.Equal(t, []int32{1}, calls[3].ready, "the backlogged sequence took slot 0")
	})
}

// Direct gives a new sequence the lowest free row across the instances,
// the first instance first, as Triton's sequence batcher does: two
// sequences on two instances of max_batch_size 2 run one on each
// (qa/L0_sequence_batcher/sequence_batcher_test.py test_half_batch with
// MODEL_INSTANCES=2 expects 8 executions of batch size 1).
func TestDirectSpreadsSequencesOverInstances(t *testing.T) {
	e0, e1 := &accExec{}, &accExec{}
	s, _ := newSched(t, accOptions(Direct, 2, infer.Invalid), e0, e1)
	require.Equal(t, int32(1), sum(t, s, req(num(1), 1, true, false)))
	require.Equal(t, int32(2), sum(t, s, req(num(2), 2, true, false)))
	require.Equal(t, int32(3), sum(t, s, req(num(3), 3, true, false)))
	require.Len(t, e0.callList(), 2, "sequences 1 and 3 share instance 0")
	require.Len(t, e1.callList(), 1, "sequence 2 went to instance 1")
	require.Equal(t, []int32{1}, e1.callList()[0].ready)
	require.Equal(t, []int32{0, 1}, e0.callList()[1].ready, "sequence 3 has row 1 of instance 0")
}

// batchSizes records the batch sizes the scheduler reports.
type batchSizes struct {
	mu    sync.Mutex // protects sizes
	sizes []int
}

func (b *batchSizes) Executed(n int, _, _, _ time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sizes = append(b.sizes, n)
}

// A Direct execution has a row for every slot up to the highest one
// holding a sequence, whether or not it has a request, and the
// statistics' batch size counts those padding rows, as Triton's do
// (qa/L0_sequence_batcher/sequence_batcher_test.py test_backlog_fill_no_end:
// a sequence alone in slot 2 runs in batches of 3; test_ragged_batch:
// nine batches of 4), while each request counts one inference.
func TestDirectBatchSizeCountsPadding(t *testing.T) {
	obs := &batchSizes{}
	s, err := New(accOptions(Direct, 4, infer.Invalid), []batch.Executor{&accExec{}}, obs, NewMetrics(prometheus.NewRegistry()), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close(context.Background())) })
	require.Equal(t, int32(1), sum(t, s, req(num(1), 1, true, false)))
	require.Equal(t, int32(5), sum(t, s, req(num(2), 5, true, false)))
	require.Equal(t, int32(2), sum(t, s, req(num(1), 1, false, false)))
	require.Equal(t, int32(6), sum(t, s, req(num(2), 1, false, true)))
	require.Equal(t, int32(3), sum(t, s, req(num(1), 1, false, true)))
	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Equal(t, []int{1, 2, 2, 2, 1}, obs.sizes,
		"slot 1 holds sequence 2 from its START to its END: sequence 1 runs with its row")
}

// concatExec appends each row's BYTES INPUT element to its INPUT_STATE
// element and returns the result as OUTPUT and OUTPUT_STATE.
type concatExec struct{}

func (concatExec) Execute(_ context.Context, inputs []infer.Tensor, outputs []string) ([]infer.Tensor, error) {
	by := map[string]infer.Tensor{}
	for _, t := range inputs {
		by[t.Name] = t
	}
	in, err := infer.SplitBytes(by["INPUT"].Data)
	if err != nil {
		return nil, err
	}
	st, err := infer.SplitBytes(by["INPUT_STATE"].Data)
	if err != nil {
		return nil, err
	}
	var data []byte
	for r := range in {
		data = infer.AppendBytesElement(data, append(slices.Clone(st[r]), in[r]...))
	}
	outs := make([]infer.Tensor, len(outputs))
	for i, name := range outputs {
		outs[i] = infer.Tensor{Name: name, DataType: infer.Bytes, Shape: infer.Shape{int64(len(in)), 1}, Data: data}
	}
	return outs, nil
}

// A STRING implicit state is fed back like a numeric one and starts as
// empty strings (Triton's qa/L0_sequence_batcher with IMPLICIT_STATE=1
// runs onnx_sequence_object, whose state is TYPE_STRING).
func TestBytesState(t *testing.T) {
	o := accOptions(Direct, 2, infer.Invalid)
	o.States = []State{{Input: "INPUT_STATE", Output: "OUTPUT_STATE", DataType: infer.Bytes, Dims: infer.Shape{1}}}
	s, _ := newSched(t, o, concatExec{})
	str := func(id uint64, v string, start bool) string {
		r := req(num(id), 0, start, false)
		r.Inputs[0].DataType = infer.Bytes
		r.Inputs[0].Data = infer.AppendBytesElement(nil, []byte(v))
		res, err := s.Submit(t.Context(), r)
		require.NoError(t, err)
		els, err := infer.SplitBytes(res.Outputs[0].Data)
		require.NoError(t, err)
		require.Len(t, els, 1)
		return string(els[0])
	}
	require.Equal(t, "a", str(1, "a", true))
	require.Equal(t, "x", str(2, "x", true))
	require.Equal(t, "ab", str(1, "b", false))
	require.Equal(t, "abc", str(1, "c", false))
	require.Equal(t, "z", str(1, "z", true), "START gives it empty strings again")

	o.States[0].Initial = []byte{1, 2}
	_, err := New(o, []batch.Executor{concatExec{}}, nil, nil, nil)
	require.ErrorContains(t, err, "initial value does not hold 1 serialized strings")
}

// Issue 22 item 9: one client flooding STARTs without END must not hold a
// model's slots hostage. Four slots, a 60 s idle timeout: client A starts
// 20 sequences and never ends one. The first 4 take the slots, the next
// 12 wait, the last 4 are refused (sequence_client_limit: at most 16 per
// client by default). Client B's sequence then gets a slot as soon as A's
// idle sequences have been idle for the contended idle timeout (1 s), not
// after A's 60 s, and runs to its END while A's flood still waits.
func TestClientFloodCannotHoldSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := accOptions(Direct, 4, infer.Invalid)
		o.IdleTimeout = 60 * time.Second
		s, m := newSched(t, o, &accExec{})
		from := func(client string, r *Request) *Request { r.Client = client; return r }

		for id := range uint64(20) {
			go func() { _, _ = s.Submit(t.Context(), from("A", req(num(1000+id), 1, true, false))) }()
			synctest.Wait()
		}
		inSlots, waiting := s.Active()
		require.Equal(t, 4, inSlots)
		require.Equal(t, 12, waiting)
		_, err := s.Submit(t.Context(), from("A", req(num(2000), 1, true, false)))
		require.Equal(t, ReasonClientSequenceLimit, reason(t, err))
		ie, _ := errors.AsType[*apierr.Error](err)
		require.Equal(t, apierr.KindResourceExhausted, ie.Kind, "429 / RESOURCE_EXHAUSTED")
		require.Equal(t, 5.0, testutil.ToFloat64(m.clientRefused.WithLabelValues("acc", "1")), "A's STARTs 17 to 20 and this one")

		// A alone: its idle sequences keep their slots (no one else waits).
		time.Sleep(5 * time.Second)
		synctest.Wait()
		require.Zero(t, testutil.ToFloat64(m.contendedReleased.WithLabelValues("acc", "1")))

		begin := time.Now()
		require.Equal(t, int32(3), sum(t, s, from("B", req(num(1), 3, true, false))))
		require.Equal(t, int32(7), sum(t, s, from("B", req(num(1), 4, false, false))))
		require.Equal(t, int32(12), sum(t, s, from("B", req(num(1), 5, false, true))))
		require.LessOrEqual(t, time.Since(begin), DefaultContendedIdleTimeout, "B waited for the contended idle timeout, not A's 60 s")
		require.Equal(t, 2.0, testutil.ToFloat64(m.contendedReleased.WithLabelValues("acc", "1")), "A was cut to its fair share of 2 slots")
		_, err = s.Submit(t.Context(), from("A", req(num(1000), 1, false, false)))
		if err != nil {
			require.Equal(t, ReasonSequenceNotStarted, reason(t, err), "a released sequence needs a new START")
		}
	})
}

// A client without identity ("") is not capped: in-process callers and
// tests with many sequences keep Triton's behaviour.
func TestNoClientNoCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := accOptions(Direct, 1, infer.Invalid)
		o.MaxSequencesPerClient = 1
		s, _ := newSched(t, o, &accExec{})
		require.Equal(t, int32(1), sum(t, s, req(num(1), 1, true, false)))
		go func() { _, _ = s.Submit(t.Context(), req(num(2), 1, true, false)) }()
		synctest.Wait()
		_, waiting := s.Active()
		require.Equal(t, 1, waiting, "not refused")
		r := req(num(3), 1, true, false)
		r.Client = "c"
		require.Equal(t, int32(2), sum(t, s, req(num(1), 1, false, true)), "sequence 1 ends: 2 takes the slot")
		synctest.Wait()
		go func() { _, _ = s.Submit(t.Context(), r) }()
		synctest.Wait()
		r2 := req(num(4), 1, true, false)
		r2.Client = "c"
		_, err := s.Submit(t.Context(), r2)
		require.Equal(t, ReasonClientSequenceLimit, reason(t, err), "client c may hold 1")
	})
}

// dropExec answers like accExec, less the outputs named in drop: a model
// that answers a subset of the outputs asked for.
type dropExec struct {
	acc  accExec
	mu   sync.Mutex // protects drop
	drop []string
}

func (e *dropExec) set(drop ...string) {
	e.mu.Lock()
	e.drop = drop
	e.mu.Unlock()
}

func (e *dropExec) Execute(ctx context.Context, inputs []infer.Tensor, outputs []string) ([]infer.Tensor, error) {
	outs, err := e.acc.Execute(ctx, inputs, outputs)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.DeleteFunc(outs, func(t infer.Tensor) bool { return slices.Contains(e.drop, t.Name) }), nil
}

// A model may answer with a subset of the outputs asked for, as Triton's
// backends may: Triton's qa/L0_implicit_state test_no_update (a backend
// that never calls StateUpdate: the state stays what it was) and
// test_implicit_state_single_buffer (a backend that answers no output:
// the request succeeds with none).
func TestSubsetOfOutputsKeepsState(t *testing.T) {
	for _, strategy := range []Strategy{Direct, Oldest} {
		t.Run(strategy.String(), func(t *testing.T) {
			e := &dropExec{}
			s, _ := newSched(t, accOptions(strategy, 4, infer.Invalid), e)
			require.Equal(t, int32(5), sum(t, s, req(num(1), 5, true, false)))

			e.set("OUTPUT_STATE")
			require.Equal(t, int32(7), sum(t, s, req(num(1), 2, false, false)), "OUTPUT is the model's: 5+2")
			e.set()
			require.Equal(t, int32(6), sum(t, s, req(num(1), 1, false, false)), "the state stayed 5: no state output replaced it")

			e.set("OUTPUT")
			res, err := s.Submit(t.Context(), req(num(1), 4, false, false))
			require.NoError(t, err)
			require.Empty(t, res.Outputs, "an output the model left out is left out of the answer")
			e.set()
			require.Equal(t, int32(11), sum(t, s, req(num(1), 1, false, true)), "the state output of the answer without OUTPUT counted: 6+4+1")

			e.set("OUTPUT_STATE")
			require.Equal(t, int32(3), sum(t, s, req(num(2), 3, true, false)), "a start without a state output")
			e.set()
			require.Equal(t, int32(1), sum(t, s, req(num(2), 1, false, true)), "runs on from the initial state (zeros)")
		})
	}
}

// A model answering an output nobody asked for is an error, not a silent
// mix-up.
func TestUnaskedOutputIsAnError(t *testing.T) {
	e := &unaskedExec{}
	s, _ := newSched(t, accOptions(Oldest, 4, infer.Invalid), e)
	_, err := s.Submit(t.Context(), req(num(1), 1, true, true))
	require.ErrorContains(t, err, "model returned output 'EXTRA', which was not asked for")
}

type unaskedExec struct{ acc accExec }

func (e *unaskedExec) Execute(ctx context.Context, inputs []infer.Tensor, outputs []string) ([]infer.Tensor, error) {
	outs, err := e.acc.Execute(ctx, inputs, outputs)
	if err != nil {
		return nil, err
	}
	return append(outs, infer.Tensor{Name: "EXTRA", DataType: infer.Int32, Shape: infer.Shape{1, 1}, Data: make([]byte, 4)}), nil
}
