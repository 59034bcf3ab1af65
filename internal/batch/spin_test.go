package batch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	testharness "github.com/sluice-ml/sluice/internal/testutil/harness"
)

// These tests use the real clock: the spinner busy-waits on time.Now, which
// a synctest bubble would never advance. They assert only ordering bounds
// (never "faster than"), so a loaded machine cannot make them fail.

func TestSpinWaitStillHonoursTheDelay(t *testing.T) {
	const delay = 20 * time.Millisecond
	exec := newFakeExec()
	b, err := New(Options{
		Model: "m", Version: "1", Dynamic: true, MaxBatchSize: 8,
		MaxQueueDelay: delay, SpinBelow: 5 * time.Millisecond,
	}, []Executor{exec}, nil, nil, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close(t.Context())) }()

	res, err := b.Submit(t.Context(), request(7, 2))
	require.NoError(t, err)
	require.Equal(t, 2, res.ExecBatch)
	require.GreaterOrEqual(t, res.QueueTime, delay, "an under-full batch left before its oldest request waited the delay")
	require.Equal(t, [][]int64{{7}}, exec.batches())
}

func TestSpinWaitSendsAPreferredBatchAtOnce(t *testing.T) {
	// The whole delay is spun (SpinBelow > delay); a second request that
	// completes the preferred size must not wait for it.
	const delay = 3 * time.Second
	exec := newFakeExec()
	b, err := New(Options{
		Model: "m", Version: "1", Dynamic: true, MaxBatchSize: 8, PreferredBatchSizes: []int{2},
		MaxQueueDelay: delay, SpinBelow: 2 * delay,
	}, []Executor{exec}, nil, nil, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close(t.Context())) }()

	first := make(chan *Result, 1)
	go func() {
		res, err := b.Submit(t.Context(), request(1, 1))
		if err != nil {
			t.Error(err)
		}
		first <- res
	}()
	testharness.WaitFor(t, 10*time.Second, time.Millisecond, "the first request queued", func() (bool, string) {
		return b.pending() > 0, "nothing queued"
	})
	res, err := b.Submit(t.Context(), request(2, 1))
	require.NoError(t, err)
	require.Equal(t, 2, res.ExecBatch)
	require.Less(t, res.QueueTime, delay)
	require.Equal(t, 2, (<-first).ExecBatch)
}

// pending is the number of queued requests (for tests).
func (b *Batcher) pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.queued
}
