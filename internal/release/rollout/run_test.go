package rollout

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/config/duration"
)

// TestRunTicksOnItsInterval runs the controller's loop on synctest's clock:
// it promotes once min_duration has passed, at the first tick after it, and
// returns when its context ends.
func TestRunTicksOnItsInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig(t)
		cfg.Interval = duration.Duration(10 * time.Second)
		cfg.Stages[0].MinDuration = duration.Duration(time.Minute)
		c, err := New("parcel-eta", cfg, Options{}, nil, nil) // Now: the bubble's time.Now
		require.NoError(t, err)
		start := time.Now()
		for i := range 2000 {
			_, g, arm := c.Decide(attrs(i))
			c.Observe(arm, g, clean(arm, g, i))
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()

		time.Sleep(55 * time.Second)
		synctest.Wait()
		require.Equal(t, 0, c.Status().Stage, "min_duration has not passed")
		time.Sleep(10 * time.Second)
		synctest.Wait()
		st := c.Status()
		require.Equal(t, 1, st.Stage)
		require.Equal(t, start.Add(time.Minute).UTC(), st.StageSince, "promoted by the tick at 60 s")

		cancel()
		require.NoError(t, <-done)
	})
}
