package console_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/console"
	"github.com/sluice-ml/sluice/internal/console/consoletest"
)

// TestPagesInChromium loads every page in headless Chromium over the
// in-process chain: no console errors (script failures, CSP violations,
// failed loads), the components' names shown, charts drawn from live
// metrics.
func TestPagesInChromium(t *testing.T) {
	browser := consoletest.NewBrowser(t)
	c := newChain(t)
	c.run(t)
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
		{"/console/services", []string{"eta", "canary", "local v1 90 %", "service eta · Latency", "Clients", "partner", "10.0 %"}, true},
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

// TestChartAxesReadable loads twenty minutes of history (the history file
// a restarted console reads) and checks in Chromium that the charts' time
// axes carry several labels that never touch: with a few seconds of live
// samples an axis has one label, and overlap cannot show.
func TestChartAxesReadable(t *testing.T) {
	browser := consoletest.NewBrowser(t)
	history := filepath.Join(t.TempDir(), "history.json")
	now := time.Now()
	type frame struct {
		T int64                  `json:"t"`
		P map[string][8]*float64 `json:"p"`
	}
	var frames []frame
	for at := now.Add(-20 * time.Minute); at.Before(now); at = at.Add(2 * time.Second) {
		rps, p50, p99 := 40.0, 0.004, 0.012
		frames = append(frames, frame{T: at.Unix(), P: map[string][8]*float64{
			"service/eta":     {&rps, nil, nil, &p50, &p99},
			"model/eta_model": {&rps, nil, nil, &p50, &p99},
		}})
	}
	b, err := json.Marshal(map[string]any{"version": 1, "frames": frames})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(history, b, 0o600))

	c := newChain(t, func(s *console.Sources) {
		s.HistoryFile = history
		s.SampleEvery = 2 * time.Second // 900 frames: a 30-minute span keeps the file's 20
	})
	c.run(t)
	c.traffic(t, 5)

	for _, path := range []string{"/console/", "/console/services", "/console/models"} {
		t.Run(path, func(t *testing.T) {
			got := browser.Visit(t, c.http.URL+path)
			got.Check(t, path)
			require.Equal(t, "ready", got.Charts)
			require.GreaterOrEqual(t, got.MinTickGap, 0.0, "a chart over twenty minutes has at least two time labels")
			// At most HH:MM:SS, about 7 px a character, and a gap.
			require.GreaterOrEqual(t, got.MinTickGap, float64(got.MaxTickLabel)*7+8,
				"time-axis labels of %d characters only %.0f px apart: they overlap", got.MaxTickLabel, got.MinTickGap)
		})
	}
}
