package console_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/console/consoletest"
)

// TestPagesInChromium loads every page in headless Chromium over the
// in-process chain: no console errors (script failures, CSP violations,
// failed loads), the components' names shown, charts drawn from live
// metrics.
func TestPagesInChromium(t *testing.T) {
	browser := consoletest.NewBrowser(t)
	c := newChain(t)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.console.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-ran)
	})
	c.traffic(t, 30)
	time.Sleep(100 * time.Millisecond) // a few samples after the traffic

	pages := []struct {
		path   string
		want   []string
		charts bool
	}{
		{"/console/", []string{"Overview", "broken v1", "old_view", "Traffic by service"}, true},
		{"/console/models", []string{"eta_model", "broken", "UNAVAILABLE", "weights file truncated at byte 1024", "model eta_model · Throughput"}, true},
		{"/console/features", []string{"user_stats", "route_features", "signup_view", "Online feature reads · Latency", "view route_features · Hot subset"}, true},
		{"/console/services", []string{"eta", "canary", "local v1 90 %", "service eta · Latency"}, true},
		{"/console/errors", []string{"401", "invalid_api_key", "missing_field"}, false},
	}
	for _, p := range pages {
		t.Run(p.path, func(t *testing.T) {
			got := browser.Visit(t, c.http.URL+p.path)
			got.Check(t, p.path, p.want...)
			if p.charts {
				require.Equal(t, "ready", got.Charts)
				require.Positive(t, got.Canvases, "charts drawn")
			} else {
				require.Equal(t, "none", got.Charts)
			}
			require.NotEmpty(t, got.Screenshot)
			if dir := os.Getenv("SLUICE_ARTIFACTS"); dir != "" {
				name := "console-unit-" + strings.Trim(strings.ReplaceAll(p.path, "/", "-"), "-") + ".png"
				require.NoError(t, os.MkdirAll(dir, 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), got.Screenshot, 0o644))
			}
		})
	}
}
