package modelrepo

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/batch"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

func TestSchedulerOptionsFromConfig(t *testing.T) {
	tests := []struct {
		name  string
		extra string
		want  batch.Options
	}{
		{"no dynamic batching", ``, batch.Options{Model: "m", Version: "1", MaxBatchSize: 8}},
		{"empty dynamic batching", `dynamic_batching { }`, batch.Options{Model: "m", Version: "1", MaxBatchSize: 8, Dynamic: true, SpinBelow: spinBelow}},
		{
			"everything",
			`dynamic_batching {
  preferred_batch_size: [ 2, 4 ]
  max_queue_delay_microseconds: 1500
  preserve_ordering: true
  priority_levels: 3
  default_priority_level: 1
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 250 allow_timeout_override: true max_queue_size: 16 }
  priority_queue_policy { key: 3 value: { max_queue_size: 2 } }
}`,
			batch.Options{
				Model: "m", Version: "1", MaxBatchSize: 8, Dynamic: true, SpinBelow: spinBelow,
				PreferredBatchSizes: []int{2, 4},
				MaxQueueDelay:       1500 * time.Microsecond,
				PreserveOrdering:    true,
				PriorityLevels:      3,
				DefaultPriority:     1,
				DefaultQueuePolicy:  batch.QueuePolicy{TimeoutAction: batch.Delay, DefaultTimeout: 250 * time.Microsecond, AllowTimeoutOverride: true, MaxQueueSize: 16},
				PriorityQueuePolicy: map[int]batch.QueuePolicy{3: {TimeoutAction: batch.Reject, MaxQueueSize: 2}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, err := modelconfig.Parse("config.pbtxt", []byte(fakeConfig(tt.extra)))
			require.NoError(t, err)
			require.Equal(t, tt.want, schedulerOptions("m", "1", cfg))
		})
	}
	t.Run("ragged inputs", func(t *testing.T) {
		cfg, _, err := modelconfig.Parse("config.pbtxt", []byte(`max_batch_size: 4
input [ { name: "A" data_type: TYPE_INT32 dims: [ -1 ] allow_ragged_batch: true }, { name: "B" data_type: TYPE_INT32 dims: [ 1 ] } ]`))
		require.NoError(t, err)
		require.Equal(t, map[string]bool{"A": true}, schedulerOptions("m", "1", cfg).RaggedInputs)
	})
	require.Equal(t, time.Duration(1<<63-1), microseconds(1<<63))
}

func TestScheduleParameters(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt": fakeConfig(`dynamic_batching { priority_levels: 2 default_priority_level: 2 }`),
		"m/1/model.fake": fakeFile(1),
	})
	h := newHarness(t, Options{Repositories: []string{repo}})
	h.start(t)
	req := func(params infer.Parameters) *infer.Request {
		return &infer.Request{Model: "m", Parameters: params, Inputs: []infer.Tensor{int32Tensor("IN", []int64{1, 4}, 1, 2, 3, 4)}}
	}
	for _, ok := range []infer.Parameters{
		{"priority": int64(1)},
		{"priority": uint64(2)},
		{"priority": int64(0), "timeout": int64(5000)},
		{"timeout": uint64(1)},
		{"other": "ignored"},
	} {
		_, err := h.m.Infer(t.Context(), req(ok))
		require.NoError(t, err, "%v", ok)
	}
	tests := []struct {
		params infer.Parameters
		reason string
		msg    string
	}{
		{infer.Parameters{"priority": "high"}, ReasonInvalidParameter, "request parameter 'priority' must be a non-negative integer, got high"},
		{infer.Parameters{"priority": int64(-1)}, ReasonInvalidParameter, "request parameter 'priority' must be a non-negative integer, got -1"},
		{infer.Parameters{"priority": 1.5}, ReasonInvalidParameter, "request parameter 'priority' must be a non-negative integer"},
		{infer.Parameters{"timeout": true}, ReasonInvalidParameter, "request parameter 'timeout' must be a non-negative integer number of microseconds, got true"},
		{infer.Parameters{"timeout": uint64(1 << 63)}, ReasonInvalidParameter, "request parameter 'timeout'"},
		{infer.Parameters{"priority": int64(3)}, batch.ReasonInvalidPriority, "priority 3 outside [1, 2] for model 'm'"},
	}
	for _, tt := range tests {
		_, err := h.m.Infer(t.Context(), req(tt.params))
		requireInferError(t, err, apierr.KindInvalid, tt.reason, tt.msg)
	}
}

// TestStatisticsAddUpUnderBatching sends requests of batch sizes 1 to 3
// at once to a model with dynamic batching and checks Triton's
// invariants: inference_count is the sum of the requests' batch sizes and
// of batch size × executions over batch_stats, execution_count the sum of
// batch_stats' executions, and every request has its queue and compute
// times.
func TestStatisticsAddUpUnderBatching(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt": fakeConfig(`dynamic_batching { max_queue_delay_microseconds: 20000 }`),
		"m/1/model.fake": fakeFile(5, func(fm *fakeModel) { fm.ExecDelayMS = 5 }),
	})
	h := newHarness(t, Options{Repositories: []string{repo}})
	h.start(t)

	const clients = 12
	var wg sync.WaitGroup
	want := uint64(0)
	errs := make(chan error, clients)
	for i := range clients {
		n := i%3 + 1
		want += uint64(n)
		wg.Go(func() {
			vals := make([]int32, 4*n)
			for j := range vals {
				vals[j] = int32(100*i + j)
			}
			resp, err := h.m.Infer(context.Background(), &infer.Request{Model: "m", Inputs: []infer.Tensor{int32Tensor("IN", []int64{int64(n), 4}, vals...)}})
			if err == nil {
				// Each request gets back exactly its own rows.
				got := int32Values(resp.Outputs[0].Data)
				for j := range vals {
					if got[j] != vals[j]+5 {
						err = &apierr.Error{Msg: "rows mixed up between requests"}
						break
					}
				}
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	st, err := h.m.Statistics(t.Context(), "m", "1")
	require.NoError(t, err)
	s := st[0]
	require.Equal(t, want, s.InferenceCount)
	require.Equal(t, uint64(clients), s.Success.Count)
	require.Equal(t, uint64(clients), s.Queue.Count)
	require.Equal(t, uint64(clients), s.ComputeInfer.Count)
	var rows, execs uint64
	for _, b := range s.BatchStats {
		rows += b.BatchSize * b.ComputeInfer.Count
		execs += b.ComputeInfer.Count
		require.Equal(t, b.ComputeInfer.Count, b.ComputeInput.Count)
		require.Equal(t, b.ComputeInfer.Count, b.ComputeOutput.Count)
	}
	require.Equal(t, want, rows)
	require.Equal(t, s.ExecutionCount, execs)
	require.Less(t, s.ExecutionCount, uint64(clients), "requests sent together are batched")
	require.InDelta(t, float64(s.ExecutionCount), testutil.ToFloat64(h.m.metrics.executions.WithLabelValues("m", "1")), 0)
	require.InDelta(t, float64(want), testutil.ToFloat64(h.m.metrics.inferences.WithLabelValues("m", "1")), 0)
}

// A configuration with 2^64-1 priority levels loads and serves as in
// Triton (qa/L0_model_queue test_max_priority_levels: priority_levels
// 2^64-1, default_priority_level 2^32, requests at the default, at 2^32
// and at 1): the priority-1 request goes ahead of the two queued before
// it and makes a preferred batch of 4 with the first; the other runs
// alone.
func TestMaxPriorityLevels(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt": fakeConfig(`dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100000
  priority_levels: 18446744073709551615
  default_priority_level: 4294967296
}`),
		"m/1/model.fake": fakeFile(1),
	})
	h := newHarness(t, Options{Repositories: []string{repo}, HoldSchedulerUntil: 3})
	h.start(t)
	pending := func() float64 {
		mfs, err := h.reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "sluice_model_pending_requests" {
				for _, m := range mf.GetMetric() {
					return m.GetGauge().GetValue()
				}
			}
		}
		return 0
	}
	send := func(bs int64, priority uint64, errs chan<- error) {
		vals := make([]int32, 4*bs)
		r := &infer.Request{Model: "m", Inputs: []infer.Tensor{int32Tensor("IN", []int64{bs, 4}, vals...)}}
		if priority > 0 {
			r.Parameters = infer.Parameters{"priority": priority}
		}
		_, err := h.m.Infer(context.Background(), r)
		errs <- err
	}
	errs := make(chan error, 3)
	for i, s := range []struct {
		bs       int64
		priority uint64
	}{{2, 0}, {1, 1 << 32}, {2, 1}} {
		go send(s.bs, s.priority, errs)
		if i < 2 {
			require.Eventually(t, func() bool { return pending() == float64(i+1) }, 10*time.Second, time.Millisecond, "request %d queued", i)
		}
	}
	for range 3 {
		require.NoError(t, <-errs)
	}
	st, err := h.m.Statistics(t.Context(), "m", "1")
	require.NoError(t, err)
	sizes := map[uint64]uint64{}
	for _, b := range st[0].BatchStats {
		sizes[b.BatchSize] = b.ComputeInfer.Count
	}
	require.Equal(t, map[uint64]uint64{4: 1, 1: 1}, sizes, "executions by batch size")

	// The lowest level serves too; nothing lies past it.
	errs = make(chan error, 3)
	for _, p := range []uint64{1<<64 - 1, 1<<32 + 1, 5000} {
		go send(1, p, errs)
	}
	for range 3 {
		require.NoError(t, <-errs)
	}
}

// The map of many levels onto the batcher's keeps their order: anchors
// (the first levels, the default and those with a policy) keep a level of
// their own; levels between two anchors share the one after the higher.
func TestPriorityMapOrder(t *testing.T) {
	cfg, _, err := modelconfig.Parse("config.pbtxt", []byte(fakeConfig(`dynamic_batching {
  priority_levels: 18446744073709551615
  default_priority_level: 4294967296
  priority_queue_policy { key: 1099511627776 value: { max_queue_size: 2 } }
}`)))
	require.NoError(t, err)
	pm := newPriorityMap(cfg.GetDynamicBatching())
	prev := 0
	for _, p := range []uint64{1, 2, anchorLevels, anchorLevels + 1, 1 << 32, 1<<32 + 1, 1 << 40, 1<<64 - 1} {
		l := pm.level(p)
		require.Greater(t, l, prev, "level %d", p)
		require.LessOrEqual(t, l, pm.batchLevels())
		prev = l
	}
	require.Equal(t, pm.level(anchorLevels+1), pm.level(1<<32-1), "levels between two anchors share a queue")
	require.Equal(t, pm.level(1<<40+1), pm.level(1<<64-1), "so do the levels after the last anchor")
	o := schedulerOptions("m", "1", cfg)
	require.Equal(t, pm.batchLevels(), o.PriorityLevels)
	require.Equal(t, pm.level(1<<32), o.DefaultPriority)
	require.Equal(t, map[int]batch.QueuePolicy{pm.level(1 << 40): {TimeoutAction: batch.Reject, MaxQueueSize: 2}}, o.PriorityQueuePolicy)
	// Up to 65,536 levels each is the batcher's own.
	small := newPriorityMap(&inferencepb.ModelDynamicBatching{PriorityLevels: 3})
	require.Equal(t, 3, small.batchLevels())
	require.Equal(t, 2, small.level(2))
	_, ierr := small.request("m", 4)
	require.Equal(t, batch.ReasonInvalidPriority, ierr.Reason)
}
