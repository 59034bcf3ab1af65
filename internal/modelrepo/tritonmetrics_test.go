package modelrepo

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	testharness "github.com/sluice-ml/sluice/internal/testutil/harness"
)

// tritonLintExceptions are the promlint findings Triton's own metric names
// cause (docs/user_guide/metrics.md spells them so); they cannot be fixed
// without breaking the dashboards the names exist for.
var tritonLintExceptions = []string{
	`counter metrics should have "_total" suffix`,
	`metric names should not contain abbreviated units`,
	`non-histogram and non-summary metrics should not have "_count" suffix`,
}

// requireLintClean lints everything reg gathers: Sluice's families must
// be clean; the nv_* families may only have tritonLintExceptions.
func requireLintClean(t *testing.T, reg prometheus.Gatherer) {
	t.Helper()
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "nv_") && (p.Text == tritonLintExceptions[0] || p.Text == tritonLintExceptions[1] || p.Text == tritonLintExceptions[2]) {
			continue
		}
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// Triton's metrics document lists nv_inference_request_success,
// nv_inference_request_failure (label reason), nv_inference_count,
// nv_inference_exec_count, nv_inference_pending_request_count and the
// cumulative *_duration_us counters, each with the labels model and
// version. After traffic they hold what the statistics extension says.
func TestTritonMetrics(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{
		"m/config.pbtxt": fakeConfig("dynamic_batching { }"),
		"m/1/model.fake": fakeFile(1),
		"slow/config.pbtxt": strings.Replace(fakeConfig(`dynamic_batching { default_queue_policy { max_queue_size: 1 } }`),
			"max_batch_size: 8", "max_batch_size: 1", 1),
		"slow/1/model.fake": fakeFile(1, func(fm *fakeModel) { fm.ExecDelayMS = 300 }),
	})
	h := newHarness(t, Options{Repositories: []string{repo}, ControlMode: ControlExplicit, StartupModels: []string{"*"}})
	h.start(t)
	for range 2 {
		_, err := h.infer(t.Context(), "m", "")
		require.NoError(t, err)
	}
	_, err := h.m.Infer(t.Context(), &infer.Request{Model: "m", Inputs: []infer.Tensor{int32Tensor("IN", []int64{3, 4}, make([]int32, 12)...)}})
	require.NoError(t, err)
	_, err = h.m.Infer(t.Context(), &infer.Request{Model: "m"})
	require.Error(t, err)

	// slow: one request executing, one queued (the queue holds one), a
	// third rejected: Triton's REJECTED. The pending gauge counts the two
	// in the scheduler meanwhile.
	done := make(chan error, 2)
	pending := h.m.metrics.triton.pending.WithLabelValues("slow", "1")
	for i := range 2 {
		go func() { _, err := h.infer(t.Context(), "slow", ""); done <- err }()
		// In order: the first executes before the second is sent.
		testharness.WaitFor(t, 10*time.Second, time.Millisecond, "slow request in the scheduler", func() (bool, string) {
			n := testutil.ToFloat64(pending)
			return n >= float64(i+1), fmt.Sprintf("pending %v", n)
		})
	}
	require.InDelta(t, 2, testutil.ToFloat64(pending), 0)
	_, err = h.infer(t.Context(), "slow", "")
	requireInferError(t, err, apierr.KindUnavailable, "queue_full", "")
	require.NoError(t, <-done)
	require.NoError(t, <-done)

	nv := func(name string, labels ...string) float64 {
		t.Helper()
		mfs, err := h.reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		metric:
			for _, m := range mf.GetMetric() {
				got := map[string]string{}
				for _, l := range m.GetLabel() {
					got[l.GetName()] = l.GetValue()
				}
				for i := 0; i+1 < len(labels); i += 2 {
					if got[labels[i]] != labels[i+1] {
						continue metric
					}
				}
				if c := m.GetCounter(); c != nil {
					return c.GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
		t.Fatalf("no series %s%v", name, labels)
		return 0
	}
	mv := []string{"model", "m", "version", "1"}
	require.InDelta(t, 3, nv("nv_inference_request_success", mv...), 0)
	require.InDelta(t, 5, nv("nv_inference_count", mv...), 0, "batch sizes 1+1+3")
	require.InDelta(t, 3, nv("nv_inference_exec_count", mv...), 0)
	require.InDelta(t, 1, nv("nv_inference_request_failure", append(mv, "reason", "OTHER")...), 0, "a missing input")
	require.InDelta(t, 0, nv("nv_inference_pending_request_count", mv...), 0)
	require.InDelta(t, 1, nv("nv_inference_request_failure", "model", "slow", "version", "1", "reason", "REJECTED"), 0)
	require.InDelta(t, 0, nv("nv_inference_pending_request_count", "model", "slow", "version", "1"), 0)

	// The durations agree with the statistics extension (ns there, µs here).
	stats, err := h.m.Statistics(t.Context(), "m", "1")
	require.NoError(t, err)
	s := stats[0]
	for name, d := range map[string]Duration{
		"nv_inference_request_duration_us":        s.Success,
		"nv_inference_queue_duration_us":          s.Queue,
		"nv_inference_compute_input_duration_us":  s.ComputeInput,
		"nv_inference_compute_infer_duration_us":  s.ComputeInfer,
		"nv_inference_compute_output_duration_us": s.ComputeOutput,
	} {
		require.InDelta(t, float64(d.Ns)/1e3, nv(name, mv...), 0.01, name)
	}
	require.Positive(t, nv("nv_inference_request_duration_us", mv...))
	requireLintClean(t, h.reg)

	// Series go with the version.
	require.NoError(t, h.m.Unload(t.Context(), "m", UnloadOptions{}))
	n, err := testutil.GatherAndCount(h.reg, "nv_inference_request_success")
	require.NoError(t, err)
	require.Equal(t, 1, n, "only slow's series remain")
}

func TestTritonMetricsOff(t *testing.T) {
	repo := t.TempDir()
	writeFiles(t, repo, map[string]string{"m/config.pbtxt": fakeConfig(""), "m/1/model.fake": fakeFile(1)})
	h := newHarness(t, Options{Repositories: []string{repo}, DisableTritonMetrics: true})
	h.start(t)
	_, err := h.infer(t.Context(), "m", "")
	require.NoError(t, err)
	mfs, err := h.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		require.False(t, strings.HasPrefix(mf.GetName(), "nv_"), mf.GetName())
	}
}
