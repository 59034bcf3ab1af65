package batch

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
)

const ms = time.Millisecond

func TestNoWaitWhenBatchIsFullOrPreferred(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		n    int // requests submitted at t=0, one after the other
	}{
		{name: "max batch reached", opts: Options{Dynamic: true, MaxBatchSize: 4, MaxQueueDelay: 100 * ms}, n: 4},
		{name: "preferred size reached", opts: Options{Dynamic: true, MaxBatchSize: 8, PreferredBatchSizes: []int{3}, MaxQueueDelay: 100 * ms}, n: 3},
		{name: "zero delay never waits", opts: Options{Dynamic: true, MaxBatchSize: 8}, n: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newFakeExec()
				h := newHarness(t, tt.opts, e)
				var chs []<-chan outcome
				var want []int64
				for i := range tt.n {
					chs = append(chs, h.submit(t.Context(), request(int64(i+1), 1)))
					want = append(want, int64(i+1))
				}
				for i, ch := range chs {
					o := ok(t, ch, int64(i+1), 1)
					require.Zero(t, o.at, "request %d waited", i+1)
					require.Equal(t, tt.n, o.res.ExecBatch)
				}
				require.Equal(t, [][]int64{want}, e.batches())
				h.close()
			})
		})
	}
}

func TestUnderFullBatchWaitsDelayFromOldest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFakeExec()
		h := newHarness(t, Options{Dynamic: true, MaxBatchSize: 8, MaxQueueDelay: 10 * ms}, e)
		a := h.submit(t.Context(), request(1, 1))
		h.sleepUntil(6 * ms)
		b := h.submit(t.Context(), request(2, 2))
		h.sleepUntil(10*ms - time.Nanosecond)
		require.Empty(t, e.batches(), "batch sent before the oldest request waited MaxQueueDelay")
		require.True(t, waiting(a))
		h.sleepUntil(10 * ms)
		require.Equal(t, [][]int64{{1, 2}}, e.batches())
		require.Equal(t, 10*ms, e.callList()[0].at, "the delay runs from the oldest request, not the newest")
		oa, ob := ok(t, a, 1, 1), ok(t, b, 2, 2)
		require.Equal(t, 10*ms, oa.res.QueueTime)
		require.Equal(t, 4*ms, ob.res.QueueTime)
		require.Equal(t, 3, oa.res.ExecBatch)
		h.close()
	})
}

func TestPreferredSizeWinsOverLargerBatch(t *testing.T) {
	t.Run("arrivals with delay", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newFakeExec()
			h := newHarness(t, Options{Dynamic: true, MaxBatchSize: 8, PreferredBatchSizes: []int{4}, MaxQueueDelay: 10 * ms}, e)
			var chs []<-chan outcome
			for i := range 6 {
				chs = append(chs, h.submit(t.Context(), request(int64(i+1), 1)))
			}
			h.sleepUntil(10 * ms)
			for i, ch := range chs {
				ok(t, ch, int64(i+1), 1)
			}
			calls := e.callList()
			require.Len(t, calls, 2)
			require.Equal(t, []int64{1, 2, 3, 4}, calls[0].ids)
			require.Zero(t, calls[0].at, "a preferred batch goes at once")
			require.Equal(t, []int64{5, 6}, calls[1].ids)
			require.Equal(t, 10*ms, calls[1].at)
			h.close()
		})
	})
	t.Run("six queued behind a busy instance", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newFakeExec()
			e.hold = make(chan struct{})
			h := newHarness(t, Options{Dynamic: true, MaxBatchSize: 8, PreferredBatchSizes: []int{4}}, e)
			plug := h.submit(t.Context(), request(100, 1))
			var chs []<-chan outcome
			for i := range 6 {
				chs = append(chs, h.submit(t.Context(), request(int64(i+1), 1)))
			}
			close(e.hold)
			ok(t, plug, 100, 1)
			for i, ch := range chs {
				ok(t, ch, int64(i+1), 1)
			}
			require.Equal(t, [][]int64{{100}, {1, 2, 3, 4}, {5, 6}}, e.batches())
			h.close()
		})
	})
	t.Run("no preferred size: largest available up to max", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newFakeExec()
			e.hold = make(chan struct{})
			h := newHarness(t, Options{Dynamic: true, MaxBatchSize: 4}, e)
			plug := h.submit(t.Context(), request(100, 1))
			sizes := []int{1, 2, 2, 3, 1} // 1+2 fit in 4, the next 2 does not
			var chs []<-chan outcome
			for i, bs := range sizes {
				chs = append(chs, h.submit(t.Context(), request(int64(i+1), bs)))
			}
			close(e.hold)
			ok(t, plug, 100, 1)
			for i, ch := range chs {
				ok(t, ch, int64(i+1), sizes[i])
			}
			require.Equal(t, [][]int64{{100}, {1, 2}, {3}, {4, 5}}, e.batches(),
				"requests are packed whole, in order, never past max_batch_size")
			h.close()
		})
	})
}

func TestDifferentShapesDoNotShareABatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFakeExec()
		e.hold = make(chan struct{})
		h := newHarness(t, Options{Dynamic: true, MaxBatchSize: 8, RaggedInputs: map[string]bool{"id": true}}, e)
		plug := h.submit(t.Context(), request(100, 1))
		withExtra := func(id int64, dim int64) *Request {
			r := request(id, 1)
			r.Inputs = append(r.Inputs, infer.Tensor{Name: "z", DataType: infer.Uint8, Shape: infer.Shape{1, dim}, Data: make([]byte, dim)})
			return r
		}
		chs := []<-chan outcome{
			h.submit(t.Context(), withExtra(1, 2)),
			h.submit(t.Context(), withExtra(2, 2)),
			h.submit(t.Context(), withExtra(3, 5)),
			h.submit(t.Context(), withExtra(4, 2)),
		}
		close(e.hold)
		ok(t, plug, 100, 1)
		for i, ch := range chs {
			ok(t, ch, int64(i+1), 1)
		}
		require.Equal(t, [][]int64{{100}, {1, 2}, {3}, {4}}, e.batches())
		h.close()
	})
}

func TestPriorityOrder(t *testing.T) {
	prio := func(id int64, p int) *Request {
		r := request(id, 1)
		r.Priority = p
		return r
	}
	t.Run("alone", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newFakeExec()
			e.hold = make(chan struct{})
			// Three levels; priority 0 takes the middle one.
			h := newHarness(t, Options{PriorityLevels: 3}, e)
			plug := h.submit(t.Context(), prio(100, 1))
			chs := []<-chan outcome{
				h.submit(t.Context(), prio(21, 2)),
				h.submit(t.Context(), prio(11, 1)),
				h.submit(t.Context(), prio(31, 3)),
				h.submit(t.Context(), prio(22, 0)),
				h.submit(t.Context(), prio(12, 1)),
			}
			close(e.hold)
			ok(t, plug, 100, 1)
			for _, ch := range chs {
				o := <-ch
				require.NoError(t, o.err)
			}
			require.Equal(t, [][]int64{{100}, {11}, {12}, {21}, {22}, {31}}, e.batches())
			h.close()
		})
	})
	t.Run("batched", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newFakeExec()
			e.hold = make(chan struct{})
			h := newHarness(t, Options{Dynamic: true, MaxBatchSize: 8, PriorityLevels: 2, DefaultPriority: 2}, e)
			plug := h.submit(t.Context(), prio(100, 1))
			ids := []int64{21, 11, 22, 12}
			var chs []<-chan outcome
			for _, id := range ids {
				chs = append(chs, h.submit(t.Context(), prio(id, int(id/10))))
			}
			close(e.hold)
			ok(t, plug, 100, 1)
			for i, ch := range chs {
				ok(t, ch, ids[i], 1)
			}
			require.Equal(t, [][]int64{{100}, {11, 12, 21, 22}}, e.batches())
			h.close()
		})
	})
	t.Run("out of range", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newFakeExec()
			h := newHarness(t, Options{PriorityLevels: 2}, e)
			for _, p := range []int{3, -1} {
				_, err := h.b.Submit(t.Context(), prio(1, p))
				ie, isInfer := errors.AsType[*apierr.Error](err)
				require.True(t, isInfer)
				require.Equal(t, ReasonInvalidPriority, ie.Reason)
				require.Equal(t, apierr.KindInvalid, ie.Kind)
			}
			require.Empty(t, e.batches())
			h.close()
		})
	})
	t.Run("ignored without levels", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, Options{}, newFakeExec())
			ok(t, h.submit(t.Context(), prio(1, 7)), 1, 1)
			h.close()
		})
	})
}

func TestQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		m := NewMetrics(reg)
		e := newFakeExec()
		e.hold = make(chan struct{})
		b, err := New(Options{
			Model: "m", Version: "1", PriorityLevels: 2, DefaultPriority: 2,
			DefaultQueuePolicy:  QueuePolicy{MaxQueueSize: 2},
			PriorityQueuePolicy: map[int]QueuePolicy{1: {MaxQueueSize: 1}},
		}, []Executor{e}, nil, m, nil)
		require.NoError(t, err)
		h := &harness{t: t, start: time.Now(), b: b}
		plug := h.submit(t.Context(), request(100, 1)) // executing, not queued
		var accepted []<-chan outcome
		accepted = append(accepted, h.submit(t.Context(), request(1, 1)), h.submit(t.Context(), request(2, 1)))
		full := h.submit(t.Context(), request(3, 1))
		o := failed(t, full, ReasonQueueFull)
		require.Zero(t, o.at, "a full queue rejects at once")
		require.Equal(t, apierr.KindUnavailable, asInfer(t, o.err).Kind)
		// Triton's words (qa/L0_simple_ensemble EnsembleStepMaxQueueSizeTest).
		require.ErrorContains(t, o.err, "Exceeds maximum queue size")

		hi := request(4, 1)
		hi.Priority = 1
		accepted = append(accepted, h.submit(t.Context(), hi))
		hi2 := request(5, 1)
		hi2.Priority = 1
		failed(t, h.submit(t.Context(), hi2), ReasonQueueFull)

		require.InDelta(t, 3, testutil.ToFloat64(m.pending.WithLabelValues("m", "1")), 0)
		require.InDelta(t, 2, testutil.ToFloat64(m.rejections.WithLabelValues("m", "1", ReasonQueueFull)), 0)
		close(e.hold)
		ok(t, plug, 100, 1)
		for _, ch := range accepted {
			require.NoError(t, (<-ch).err)
		}
		require.Equal(t, [][]int64{{100}, {4}, {1}, {2}}, e.batches())
		require.InDelta(t, 0, testutil.ToFloat64(m.pending.WithLabelValues("m", "1")), 0)
		h.close()
	})
}

func TestQueueTimeoutReject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		m := NewMetrics(reg)
		e := newFakeExec()
		e.hold = make(chan struct{})
		b, err := New(Options{Model: "m", Version: "1", DefaultQueuePolicy: QueuePolicy{DefaultTimeout: 5 * ms}},
			[]Executor{e}, nil, m, nil)
		require.NoError(t, err)
		h := &harness{t: t, start: time.Now(), b: b}
		plug := h.submit(t.Context(), request(100, 1))
		h.sleepUntil(1 * ms)
		r := h.submit(t.Context(), request(1, 1))
		keep := h.submit(t.Context(), request(2, 1))
		h.sleepUntil(6*ms - time.Nanosecond)
		require.True(t, waiting(r))
		h.sleepUntil(6 * ms)
		o := failed(t, r, ReasonQueueTimeout)
		require.Equal(t, 6*ms, o.at, "answered when its time in queue reached the timeout")
		require.Equal(t, apierr.KindUnavailable, asInfer(t, o.err).Kind)
		// Triton's words, whole, as qa/L0_batcher queue_timeout_test.py
		// test_default_queue_policy_timeout_prompt_response compares them.
		require.Equal(t, "Request timeout expired", asInfer(t, o.err).Msg)
		failed(t, keep, ReasonQueueTimeout)
		close(e.hold)
		ok(t, plug, 100, 1)
		require.Equal(t, [][]int64{{100}}, e.batches(), "timed-out requests never execute")
		require.InDelta(t, 2, testutil.ToFloat64(m.rejections.WithLabelValues("m", "1", ReasonQueueTimeout)), 0)
		h.close()
	})
}

func TestQueueTimeoutDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFakeExec()
		e.hold = make(chan struct{})
		h := newHarness(t, Options{
			PriorityLevels: 2, DefaultPriority: 1,
			DefaultQueuePolicy: QueuePolicy{TimeoutAction: Delay, DefaultTimeout: 5 * ms},
		}, e)
		plug := h.submit(t.Context(), request(100, 1))
		a := h.submit(t.Context(), request(1, 1))
		low := request(9, 1)
		low.Priority = 2
		l := h.submit(t.Context(), low)
		h.sleepUntil(6 * ms) // request 1 has timed out
		b := h.submit(t.Context(), request(2, 1))
		c := h.submit(t.Context(), request(3, 1))
		require.True(t, waiting(a), "a Delay request stays queued")
		close(e.hold)
		ok(t, plug, 100, 1)
		ok(t, a, 1, 1)
		ok(t, b, 2, 1)
		ok(t, c, 3, 1)
		ok(t, l, 9, 1)
		require.Equal(t, [][]int64{{100}, {2}, {3}, {1}, {9}}, e.batches(),
			"a timed-out Delay request runs after the live requests of its level, before lower levels")
		h.close()
	})
}

func TestTimeoutOverrideOnlyLowers(t *testing.T) {
	never := time.Duration(-1)
	tests := []struct {
		name     string
		policy   QueuePolicy
		override time.Duration
		want     time.Duration // when the request times out; -1 = never
	}{
		{name: "larger override ignored", policy: QueuePolicy{DefaultTimeout: 10 * ms, AllowTimeoutOverride: true}, override: 20 * ms, want: 10 * ms},
		{name: "smaller override applies", policy: QueuePolicy{DefaultTimeout: 10 * ms, AllowTimeoutOverride: true}, override: 3 * ms, want: 3 * ms},
		{name: "override not allowed", policy: QueuePolicy{DefaultTimeout: 10 * ms}, override: 3 * ms, want: 10 * ms},
		{name: "no default, override allowed", policy: QueuePolicy{AllowTimeoutOverride: true}, override: 4 * ms, want: 4 * ms},
		{name: "no default, override not allowed", policy: QueuePolicy{}, override: 4 * ms, want: never},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newFakeExec()
				e.hold = make(chan struct{})
				h := newHarness(t, Options{DefaultQueuePolicy: tt.policy}, e)
				plug := h.submit(t.Context(), request(100, 1))
				req := request(1, 1)
				req.Timeout = tt.override
				r := h.submit(t.Context(), req)
				h.sleepUntil(50 * ms)
				if tt.want == never {
					require.True(t, waiting(r))
					close(e.hold)
					ok(t, r, 1, 1)
				} else {
					o := failed(t, r, ReasonQueueTimeout)
					require.Equal(t, tt.want, o.at)
					close(e.hold)
				}
				ok(t, plug, 100, 1)
				h.close()
			})
		})
	}
}

func TestCancelledRequestsAreSkipped(t *testing.T) {
	for _, preserve := range []bool{false, true} {
		name := "unordered"
		if preserve {
			name = "preserve ordering"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newFakeExec()
				e.hold = make(chan struct{})
				h := newHarness(t, Options{Dynamic: true, MaxBatchSize: 8, PreserveOrdering: preserve}, e)
				plug := h.submit(t.Context(), request(100, 1))
				cctx, cancel := context.WithCancel(t.Context())
				dctx, dcancel := context.WithTimeout(t.Context(), 3*ms)
				defer dcancel()
				c := h.submit(cctx, request(1, 1))
				d := h.submit(dctx, request(2, 1))
				live := h.submit(t.Context(), request(3, 1))
				h.sleepUntil(1 * ms)
				cancel()
				synctest.Wait()
				o := failed(t, c, ReasonCanceled)
				require.Equal(t, 1*ms, o.at, "Submit returns as soon as its context ends, even while queued")
				h.sleepUntil(3 * ms)
				o = failed(t, d, ReasonDeadlineExceeded)
				require.Equal(t, 3*ms, o.at)
				require.Equal(t, apierr.KindTimeout, asInfer(t, o.err).Kind)

				_, err := h.b.Submit(cctx, request(4, 1))
				require.Equal(t, ReasonCanceled, asInfer(t, err).Reason, "a request whose context already ended is refused")

				close(e.hold)
				ok(t, plug, 100, 1)
				ok(t, live, 3, 1)
				require.Equal(t, [][]int64{{100}, {3}}, e.batches(), "the executor never sees cancelled requests")
				h.close()
			})
		})
	}
}

func TestExecutorsRunConcurrently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var execs []Executor
		var fakes []*fakeExec
		for range 3 {
			e := newFakeExec()
			e.sleep = func([]int64) time.Duration { return 10 * ms }
			fakes = append(fakes, e)
			execs = append(execs, e)
		}
		h := newHarness(t, Options{}, execs...)
		var chs []<-chan outcome
		for i := range 7 {
			chs = append(chs, h.submit(t.Context(), request(int64(i+1), 1)))
		}
		var ends []time.Duration
		for i, ch := range chs {
			ends = append(ends, ok(t, ch, int64(i+1), 1).at)
		}
		require.Equal(t, []time.Duration{10 * ms, 10 * ms, 10 * ms, 20 * ms, 20 * ms, 20 * ms, 30 * ms}, ends,
			"three instances run three batches at once; the rest wait in the queue")
		total := 0
		for _, e := range fakes {
			require.LessOrEqual(t, e.maxActive, 1, "an executor runs one batch at a time")
			total += len(e.calls)
		}
		require.Equal(t, 7, total)
		h.close()
	})
}

func TestPreserveOrdering(t *testing.T) {
	for _, preserve := range []bool{false, true} {
		t.Run(map[bool]string{false: "off", true: "on"}[preserve], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				slow := func(ids []int64) time.Duration {
					if ids[0] == 1 {
						return 10 * ms
					}
					return 1 * ms
				}
				e1, e2 := newFakeExec(), newFakeExec()
				e1.sleep, e2.sleep = slow, slow
				h := newHarness(t, Options{PreserveOrdering: preserve}, e1, e2)
				first := h.submit(t.Context(), request(1, 1))
				second := h.submit(t.Context(), request(2, 1))
				o2 := ok(t, second, 2, 1)
				o1 := ok(t, first, 1, 1)
				require.Equal(t, 10*ms, o1.at)
				if preserve {
					require.Equal(t, 10*ms, o2.at, "the later request is released after the earlier one")
				} else {
					require.Equal(t, 1*ms, o2.at)
				}
				h.close()
			})
		})
	}
	t.Run("cancelled caller does not hold later results", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e1, e2 := newFakeExec(), newFakeExec()
			slow := func(ids []int64) time.Duration {
				if ids[0] == 1 {
					return 10 * ms
				}
				return 1 * ms
			}
			e1.sleep, e2.sleep = slow, slow
			h := newHarness(t, Options{PreserveOrdering: true}, e1, e2)
			ctx, cancel := context.WithCancel(t.Context())
			first := h.submit(ctx, request(1, 1))
			second := h.submit(t.Context(), request(2, 1))
			h.sleepUntil(2 * ms)
			require.True(t, waiting(second), "held behind the first request")
			cancel()
			synctest.Wait()
			o2 := ok(t, second, 2, 1)
			require.Equal(t, 2*ms, o2.at, "released once the earlier caller gave up")
			o1 := <-first
			require.Equal(t, 10*ms, o1.at, "a started request's Submit waits for its execution")
			h.close()
		})
	})
	t.Run("held answer returned when the caller gives up", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newFakeExec()
			e.sleep = func([]int64) time.Duration { return 10 * ms }
			h := newHarness(t, Options{PreserveOrdering: true, DefaultQueuePolicy: QueuePolicy{DefaultTimeout: 2 * ms}}, e)
			plug := h.submit(t.Context(), request(100, 1))
			ctx, cancel := context.WithCancel(t.Context())
			r := h.submit(ctx, request(1, 1))
			h.sleepUntil(3 * ms)
			require.True(t, waiting(r), "its queue_timeout answer is held behind the earlier request")
			cancel()
			synctest.Wait()
			o := failed(t, r, ReasonQueueTimeout)
			require.Equal(t, 3*ms, o.at)
			ok(t, plug, 100, 1)
			h.close()
		})
	})
}

func TestClose(t *testing.T) {
	t.Run("drains queued work", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newFakeExec()
			e.hold = make(chan struct{})
			h := newHarness(t, Options{Dynamic: true, MaxBatchSize: 2, MaxQueueDelay: time.Hour}, e)
			plug := h.submit(t.Context(), request(100, 2))
			var chs []<-chan outcome
			for i := range 3 {
				chs = append(chs, h.submit(t.Context(), request(int64(i+1), 1)))
			}
			closed := make(chan error, 1)
			go func() { closed <- h.b.Close(t.Context()) }()
			synctest.Wait()
			_, err := h.b.Submit(t.Context(), request(9, 1))
			require.Equal(t, ReasonModelUnloading, asInfer(t, err).Reason)
			require.Empty(t, closed)
			close(e.hold)
			ok(t, plug, 100, 2)
			for i, ch := range chs {
				ok(t, ch, int64(i+1), 1)
			}
			require.NoError(t, <-closed)
			require.Equal(t, [][]int64{{100}, {1, 2}, {3}}, e.batches(), "an under-full batch is not held while closing")
			require.NoError(t, h.b.Close(t.Context()), "Close is idempotent")
		})
	})
	t.Run("bounded by its context", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newFakeExec()
			e.hold = make(chan struct{})
			h := newHarness(t, Options{}, e)
			plug := h.submit(t.Context(), request(100, 1))
			queued := h.submit(t.Context(), request(1, 1))
			ctx, cancel := context.WithTimeout(t.Context(), 5*ms)
			defer cancel()
			err := h.b.Close(ctx)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Equal(t, 5*ms, h.now())
			failed(t, queued, ReasonModelUnloading)
			close(e.hold)
			ok(t, plug, 100, 1)
			require.Equal(t, [][]int64{{100}}, e.batches())
			require.NoError(t, h.b.Close(t.Context()), "a later Close waits for the executions still running")
		})
	})
}

func TestExecutorErrors(t *testing.T) {
	domain := &apierr.Error{Kind: apierr.KindInvalid, Reason: "bad_input", Msg: "bad input"}
	tests := []struct {
		name   string
		fail   error
		reason string
		kind   apierr.Kind
	}{
		{name: "domain error passes through", fail: domain, reason: "bad_input", kind: apierr.KindInvalid},
		{name: "plain error", fail: errors.New("boom"), reason: ReasonBackendError, kind: apierr.KindInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newFakeExec()
				e.fail = tt.fail
				h := newHarness(t, Options{Dynamic: true, MaxBatchSize: 4, MaxQueueDelay: ms}, e)
				a := h.submit(t.Context(), request(1, 1))
				b := h.submit(t.Context(), request(2, 1))
				for _, ch := range []<-chan outcome{a, b} {
					o := failed(t, ch, tt.reason)
					require.Equal(t, tt.kind, asInfer(t, o.err).Kind)
				}
				require.Equal(t, [][]int64{{1, 2}}, e.batches())
				h.close()
			})
		})
	}
	t.Run("outputs that do not fit the batch", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, Options{Dynamic: true, MaxBatchSize: 4, MaxQueueDelay: ms}, ExecutorFunc(
				func(_ context.Context, _ []infer.Tensor, _ []string) ([]infer.Tensor, error) {
					return []infer.Tensor{{Name: "y", DataType: infer.Int64, Shape: infer.Shape{1}, Data: make([]byte, 8)}}, nil
				}))
			a := h.submit(t.Context(), request(1, 1))
			b := h.submit(t.Context(), request(2, 1))
			failed(t, a, ReasonBackendError)
			failed(t, b, ReasonBackendError)
			h.close()
		})
	})
}

// recordingObserver keeps the batch sizes it was told about.
type recordingObserver struct{ sizes []int }

func (r *recordingObserver) Executed(n int, _, _, _ time.Duration) { r.sizes = append(r.sizes, n) }

func TestResultTimesAndObserver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFakeExec()
		e.sleep = func([]int64) time.Duration { return 7 * ms }
		obs := &recordingObserver{}
		reg := prometheus.NewPedanticRegistry()
		m := NewMetrics(reg)
		b, err := New(Options{Model: "m", Version: "3", Dynamic: true, MaxBatchSize: 8, MaxQueueDelay: 2 * ms}, []Executor{e}, obs, m, nil)
		require.NoError(t, err)
		h := &harness{t: t, start: time.Now(), b: b}
		a := h.submit(t.Context(), request(1, 3))
		b2 := h.submit(t.Context(), request(2, 2))
		oa := ok(t, a, 1, 3)
		ok(t, b2, 2, 2)
		require.Equal(t, 2*ms, oa.res.QueueTime)
		require.Equal(t, 7*ms, oa.res.ComputeTime)
		require.Equal(t, 5, oa.res.ExecBatch)
		require.Equal(t, []int{5}, obs.sizes)
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP sluice_model_batch_size Batch size of each model execution (the sum of its requests' batch dimensions).
# TYPE sluice_model_batch_size histogram
sluice_model_batch_size_bucket{model="m",version="3",le="1"} 0
sluice_model_batch_size_bucket{model="m",version="3",le="2"} 0
sluice_model_batch_size_bucket{model="m",version="3",le="4"} 0
sluice_model_batch_size_bucket{model="m",version="3",le="8"} 1
sluice_model_batch_size_bucket{model="m",version="3",le="16"} 1
sluice_model_batch_size_bucket{model="m",version="3",le="32"} 1
sluice_model_batch_size_bucket{model="m",version="3",le="64"} 1
sluice_model_batch_size_bucket{model="m",version="3",le="128"} 1
sluice_model_batch_size_bucket{model="m",version="3",le="256"} 1
sluice_model_batch_size_bucket{model="m",version="3",le="512"} 1
sluice_model_batch_size_bucket{model="m",version="3",le="1024"} 1
sluice_model_batch_size_bucket{model="m",version="3",le="+Inf"} 1
sluice_model_batch_size_sum{model="m",version="3"} 5
sluice_model_batch_size_count{model="m",version="3"} 1
`), "sluice_model_batch_size"))
		require.NoError(t, b.Close(t.Context()))
		m.Forget("m", "3")
		n, err := testutil.GatherAndCount(reg)
		require.NoError(t, err)
		require.Zero(t, n, "Forget deletes every series of the version")
	})
}

func TestNewRejectsBadOptions(t *testing.T) {
	one := []Executor{newFakeExec()}
	tests := []struct {
		name  string
		opts  Options
		execs []Executor
		want  string
	}{
		{name: "no executors", opts: Options{}, want: "no executors"},
		{name: "preferred above max", opts: Options{Dynamic: true, MaxBatchSize: 4, PreferredBatchSizes: []int{8}}, execs: one, want: "preferred batch size 8 outside [1, 4]"},
		{name: "default priority", opts: Options{PriorityLevels: 2, DefaultPriority: 3}, execs: one, want: "default priority 3 outside [1, 2]"},
		{name: "policy level", opts: Options{PriorityLevels: 2, PriorityQueuePolicy: map[int]QueuePolicy{3: {}}}, execs: one, want: "queue policy for priority level 3 outside [1, 2]"},
		{name: "negative queue size", opts: Options{DefaultQueuePolicy: QueuePolicy{MaxQueueSize: -1}}, execs: one, want: "max queue size -1 is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts, tt.execs, nil, nil, nil)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// TestConcurrentStress runs real goroutines against a real clock:
// random priorities, batch sizes, timeouts and cancellations, with and
// without PreserveOrdering. Every request that succeeds must get its own
// rows; every failure must be one of the documented reasons.
func TestConcurrentStress(t *testing.T) {
	for _, preserve := range []bool{false, true} {
		t.Run(map[bool]string{false: "unordered", true: "ordered"}[preserve], func(t *testing.T) {
			e1, e2 := newFakeExec(), newFakeExec()
			b, err := New(Options{
				Model: "m", Version: "1", Dynamic: true, MaxBatchSize: 8, PreferredBatchSizes: []int{4},
				MaxQueueDelay: 50 * time.Microsecond, PreserveOrdering: preserve, PriorityLevels: 2,
				DefaultQueuePolicy: QueuePolicy{AllowTimeoutOverride: true, MaxQueueSize: 64},
			}, []Executor{e1, e2}, nil, nil, nil)
			require.NoError(t, err)
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 8 {
				wg.Go(func() {
					for i := range 150 {
						id := int64(g*1000 + i)
						req := request(id, 1+i%3)
						req.Priority = i % 3
						if i%7 == 0 {
							req.Timeout = 20 * time.Microsecond
						}
						ctx, cancel := context.WithCancel(t.Context())
						if i%11 == 0 {
							cancel()
						} else if i%13 == 0 {
							go cancel()
						}
						res, err := b.Submit(ctx, req)
						cancel()
						if err != nil {
							ie, isInfer := errors.AsType[*apierr.Error](err)
							if !isInfer || (ie.Reason != ReasonCanceled && ie.Reason != ReasonQueueTimeout && ie.Reason != ReasonQueueFull) {
								errs <- err
								return
							}
							continue
						}
						y := res.Outputs[0]
						for r := range req.BatchSize {
							if got := int64(binary.LittleEndian.Uint64(y.Data[8*r:])); got != id*10 {
								errs <- fmt.Errorf("request %d row %d: got %d", id, r, got)
								return
							}
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			require.NoError(t, b.Close(t.Context()))
		})
	}
}

// Modelled on Triton's qa/L0_batcher (batcher_test.py
// test_multi_batch_gt_max_preferred and test_multi_batch_sum_gt_max_preferred,
// preferred sizes [2, 6]): a batch that is already past the largest
// preferred size cannot become preferred by waiting, so it goes at once; and
// when the next request would push a pending batch past it, the pending
// batch goes at once while the newcomer alone waits its delay.
func TestPastLargestPreferredSizeGoesAtOnce(t *testing.T) {
	opts := Options{Dynamic: true, MaxBatchSize: 8, PreferredBatchSizes: []int{2, 6}, MaxQueueDelay: 10 * ms}
	t.Run("gt_max_preferred", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newFakeExec()
			h := newHarness(t, opts, e)
			a := h.submit(t.Context(), request(1, 3))
			h.sleepUntil(1 * ms)
			require.True(t, waiting(a), "3 is below the largest preferred size: it waits")
			b := h.submit(t.Context(), request(2, 7))
			oa, ob := ok(t, a, 1, 3), ok(t, b, 2, 7)
			require.Equal(t, 1*ms, oa.at)
			require.Equal(t, 1*ms, ob.at, "a batch of 7 is past the largest preferred size 6")
			require.Equal(t, [][]int64{{1}, {2}}, e.batches())
			h.close()
		})
	})
	t.Run("single request past it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newFakeExec()
			h := newHarness(t, opts, e)
			o := ok(t, h.submit(t.Context(), request(1, 7)), 1, 7)
			require.Zero(t, o.at)
			h.close()
		})
	})
	t.Run("sum_gt_max_preferred", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newFakeExec()
			h := newHarness(t, opts, e)
			a := h.submit(t.Context(), request(1, 3))
			h.sleepUntil(1 * ms)
			b := h.submit(t.Context(), request(2, 4))
			oa := ok(t, a, 1, 3)
			require.Equal(t, 1*ms, oa.at, "3+4 would pass 6: the pending 3 goes at once")
			h.sleepUntil(11*ms - time.Nanosecond)
			require.True(t, waiting(b), "4 alone is below 6: it waits its own delay")
			ob := ok(t, b, 2, 4)
			require.Equal(t, 11*ms, ob.at)
			require.Equal(t, [][]int64{{1}, {2}}, e.batches())
			h.close()
		})
	})
}

// After Triton's dynamic batcher (src/dynamic_batch_scheduler.cc
// GetDynamicBatch: a preferred size is used only "if ... the queue delay
// hasn't been exceeded"), the rule qa/L0_batcher batcher_test.py
// test_multi_batch_delayed_use_max_batch relies on: once the oldest
// request of the candidate batch has waited max_queue_delay, the whole
// candidate batch goes, not just its preferred prefix.
func TestDelayExceededSendsAllPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFakeExec()
		e.hold = make(chan struct{})
		h := newHarness(t, Options{Dynamic: true, MaxBatchSize: 8, PreferredBatchSizes: []int{2, 6}, MaxQueueDelay: 10 * ms}, e)
		plug := h.submit(t.Context(), request(100, 6)) // preferred: runs at once and blocks the one executor
		var chs []<-chan outcome
		for id := range int64(3) {
			chs = append(chs, h.submit(t.Context(), request(id, 1)))
		}
		h.sleepUntil(20 * ms) // the three have waited past their delay behind the plug
		close(e.hold)
		ok(t, plug, 100, 6)
		for id, ch := range chs {
			require.Equal(t, 3, ok(t, ch, int64(id), 1).res.ExecBatch)
		}
		require.Equal(t, [][]int64{{100}, {0, 1, 2}}, e.batches(), "1+1+1 together, not the preferred 1+1 and then 1")
		h.close()
	})
}

// Modelled on Triton's qa/L0_batcher (batcher_test.py
// test_multi_batch_delayed_use_max_batch, test_multi_batch_use_best_preferred
// and test_preferred_batch_only_unaligned, run by its test.sh with
// TRITONSERVER_DELAY_SCHEDULER): with HoldUntilQueued the batcher sends
// nothing until that many requests are queued, however long they wait,
// then batches them as usual, each request's delay counted from its
// arrival; after that the hold is gone.
func TestHoldUntilQueued(t *testing.T) {
	opts := Options{Dynamic: true, MaxBatchSize: 8, PreferredBatchSizes: []int{2, 6}, MaxQueueDelay: 10 * ms}
	t.Run("delayed_use_max_batch", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newFakeExec()
			o := opts
			o.HoldUntilQueued = 3
			h := newHarness(t, o, e)
			a := h.submit(t.Context(), request(1, 3))
			b := h.submit(t.Context(), request(2, 4))
			h.sleepUntil(11 * ms)
			require.True(t, waiting(a) && waiting(b), "held although past their delay: only 2 of 3 requests queued")
			c := h.submit(t.Context(), request(3, 1))
			oa, ob, oc := ok(t, a, 1, 3), ok(t, b, 2, 4), ok(t, c, 3, 1)
			require.Equal(t, 11*ms, oa.at)
			require.Equal(t, 11*ms, ob.at)
			require.Equal(t, 11*ms, oc.at)
			require.Equal(t, 8, oc.res.ExecBatch, "past the delay, the whole batch goes: 3+4+1 = max_batch_size")
			require.Equal(t, [][]int64{{1, 2, 3}}, e.batches())
			h.close()
		})
	})
	t.Run("use_best_preferred", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newFakeExec()
			o := opts
			o.HoldUntilQueued = 3
			h := newHarness(t, o, e)
			a := h.submit(t.Context(), request(1, 1))
			b := h.submit(t.Context(), request(2, 1))
			h.sleepUntil(1 * ms)
			require.True(t, waiting(a) && waiting(b), "2 is preferred, but the hold wants 3 queued")
			c := h.submit(t.Context(), request(3, 1))
			require.Equal(t, 1*ms, ok(t, a, 1, 1).at)
			require.Equal(t, 1*ms, ok(t, b, 2, 1).at)
			h.sleepUntil(11*ms - time.Nanosecond)
			require.True(t, waiting(c), "the third waits its own delay from its arrival")
			require.Equal(t, 11*ms, ok(t, c, 3, 1).at)
			d := h.submit(t.Context(), request(4, 2))
			require.Equal(t, 11*ms, ok(t, d, 4, 2).at, "the hold is over: a preferred batch goes at once")
			require.Equal(t, [][]int64{{1, 2}, {3}, {4}}, e.batches())
			h.close()
		})
	})
	t.Run("preferred_batch_only_unaligned", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newFakeExec()
			h := newHarness(t, Options{Dynamic: true, MaxBatchSize: 8, PreferredBatchSizes: []int{4, 6}, HoldUntilQueued: 5}, e)
			var chs []<-chan outcome
			for id := range int64(5) {
				chs = append(chs, h.submit(t.Context(), request(id, 1)))
			}
			for id, ch := range chs {
				ok(t, ch, int64(id), 1)
			}
			require.Equal(t, [][]int64{{0, 1, 2, 3}, {4}}, e.batches(), "preferred 4, then the rest (max_queue_delay 0)")
			h.close()
		})
	})
	t.Run("close while held", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newFakeExec()
			o := opts
			o.HoldUntilQueued = 4
			h := newHarness(t, o, e)
			a := h.submit(t.Context(), request(1, 1))
			require.NoError(t, h.b.Close(t.Context()))
			ok(t, a, 1, 1)
		})
	})
}

// Ragged batching with batch inputs and a scattered batch output, after
// Triton's ragged-batching documentation (user_guide/ragged_batching.md)
// and qa/L0_batch_input: requests of shapes [1,3], [1,4] and [1,5] share
// one execution; the model gets INPUT as [12] and the batch inputs;
// OUT (BATCH_SCATTER_WITH_INPUT_SHAPE of INPUT) is split back by each
// request's INPUT shape.
func TestRaggedBatchWithBatchInputsAndOutput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen map[string]infer.Tensor
		exec := ExecutorFunc(func(_ context.Context, inputs []infer.Tensor, outputs []string) ([]infer.Tensor, error) {
			seen = map[string]infer.Tensor{}
			for _, in := range inputs {
				seen[in.Name] = in
			}
			// OUT = INPUT + 1, element-wise over the flattened batch.
			in := seen["INPUT"]
			out := make([]byte, len(in.Data))
			for i := 0; i < len(out); i += 4 {
				binary.LittleEndian.PutUint32(out[i:], binary.LittleEndian.Uint32(in.Data[i:])+1)
			}
			return []infer.Tensor{{Name: "OUT", DataType: infer.Int32, Shape: in.Shape.Clone(), Data: out}}, nil
		})
		h := newHarness(t, Options{
			Dynamic: true, MaxBatchSize: 4, MaxQueueDelay: 10 * ms,
			RaggedInputs: map[string]bool{"INPUT": true},
			BatchInputs: []BatchInput{
				{Kind: ElementCount, Targets: []string{"COUNT"}, DataType: infer.Int32, Source: "INPUT"},
				{Kind: AccumulatedElementCount, Targets: []string{"ACC"}, DataType: infer.Int32, Source: "INPUT"},
				{Kind: AccumulatedElementCountWithZero, Targets: []string{"ACC0"}, DataType: infer.FP32, Source: "INPUT"},
				{Kind: MaxElementCountAsShape, Targets: []string{"MAX"}, DataType: infer.Int32, Source: "INPUT"},
				{Kind: ItemShape, Targets: []string{"SHAPE"}, DataType: infer.Int32, Source: "INPUT"},
				{Kind: ItemShapeFlatten, Targets: []string{"SHAPE_FLAT"}, DataType: infer.Int32, Source: "INPUT"},
			},
			BatchOutputs: []BatchOutput{{Targets: []string{"OUT"}, Source: "INPUT"}},
		}, exec)
		ragged := func(n int, base int32) *Request {
			data := make([]byte, 4*n)
			for i := range n {
				binary.LittleEndian.PutUint32(data[4*i:], uint32(base+int32(i)))
			}
			return &Request{
				Inputs:    []infer.Tensor{{Name: "INPUT", DataType: infer.Int32, Shape: infer.Shape{1, int64(n)}, Data: data}},
				Outputs:   []string{"OUT"},
				BatchSize: 1,
			}
		}
		chs := []<-chan outcome{h.submit(t.Context(), ragged(3, 0)), h.submit(t.Context(), ragged(4, 100)), h.submit(t.Context(), ragged(5, 200))}
		h.sleepUntil(10 * ms)
		for i, ch := range chs {
			o := <-ch
			require.NoError(t, o.err)
			n := 3 + i
			require.Equal(t, infer.Shape{1, int64(n)}, o.res.Outputs[0].Shape, "request %d gets the shape of its INPUT", i)
			require.Len(t, o.res.Outputs[0].Data, 4*n)
			require.Equal(t, uint32(100*i+1), binary.LittleEndian.Uint32(o.res.Outputs[0].Data), "request %d's first element", i)
			require.Equal(t, 3, o.res.ExecBatch)
		}
		i32 := func(name string) []int32 {
			var out []int32
			d := seen[name].Data
			for i := 0; i < len(d); i += 4 {
				out = append(out, int32(binary.LittleEndian.Uint32(d[i:])))
			}
			return out
		}
		require.Equal(t, infer.Shape{12}, seen["INPUT"].Shape, "the ragged input is flattened")
		require.Equal(t, []int32{3, 4, 5}, i32("COUNT"))
		require.Equal(t, infer.Shape{3}, seen["COUNT"].Shape)
		require.Equal(t, []int32{3, 7, 12}, i32("ACC"))
		require.Equal(t, infer.Shape{4}, seen["ACC0"].Shape)
		require.Equal(t, infer.FP32, seen["ACC0"].DataType)
		require.Equal(t, infer.Shape{5}, seen["MAX"].Shape, "the largest count as the shape")
		require.Equal(t, []int32{3, 4, 5}, i32("SHAPE"))
		require.Equal(t, infer.Shape{3, 1}, seen["SHAPE"].Shape)
		require.Equal(t, infer.Shape{3}, seen["SHAPE_FLAT"].Shape)
		h.close()
	})
}
