package stream

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/release/record/natstest"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// DialJetStream keeps trying while NATS is down — one warning, every
// failure counted — and returns the source once NATS is up.
func TestDialJetStreamRetriesUntilNATSIsUp(t *testing.T) {
	ns := natstest.Start(t)
	ns.Kill()
	src := &feature.Source{Name: "deliveries", Kind: feature.SourceStream, Stream: &feature.StreamSource{
		URL: ns.URL(), Stream: "DIAL_TEST", Subject: "dial.test", Format: "json", Consumer: "dial-test",
	}}
	reg := prometheus.NewRegistry()
	logs := &harness.SyncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	type result struct {
		js  *JetStream
		err error
	}
	done := make(chan result, 1)
	go func() {
		js, err := DialJetStream(t.Context(), src, JetStreamOptions{}, logger, reg)
		done <- result{js, err}
	}()
	failures := newMetrics(reg).connect.WithLabelValues("deliveries")
	for testutil.ToFloat64(failures) < 2 {
		select {
		case r := <-done:
			t.Fatalf("DialJetStream returned while NATS is down: %v", r.err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	require.Equal(t, 1, strings.Count(logs.String(), "stream source unreachable"), "one warning, not one per attempt:\n%s", logs)
	ns.Restart()
	r := <-done
	require.NoError(t, r.err)
	defer func() { _ = r.js.Close() }()
	_, _, err := r.js.Pending(t.Context())
	require.NoError(t, err, "the consumer exists")

	// A context that ends stops the retries with its error.
	ns.Kill()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = DialJetStream(ctx, src, JetStreamOptions{}, logger, reg)
	require.ErrorIs(t, err, context.Canceled)
}
