package integration_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/release/diff"
	"github.com/sluice-ml/sluice/internal/release/record"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// findChromium returns the headless browser's path. Without one the test
// is skipped, or fails under CI=true, where scripts/setup.sh installs
// Debian's chromium.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found; install it (apt-get install chromium) to check the HTML report in a browser")
	return ""
}

// regionalRecords are a shadow recording in which version 2 is worse
// for region eu only.
func regionalRecords(n int) []*record.Record {
	rng := rand.New(rand.NewPCG(11, 12))
	regions := []string{"eu", "us", "apac"}
	base := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	recs := make([]*record.Record, n)
	for i := range n {
		region := regions[i%len(regions)]
		dist := 1 + rng.Float64()*9
		eta := 12 + 4*dist + rng.NormFloat64()
		shadow := eta + rng.NormFloat64()*0.01
		if region == "eu" {
			shadow += 6 + rng.Float64()*3
		}
		id := fmt.Sprintf("r-%05d", i)
		recs[i] = &record.Record{
			RequestID: id, Time: base.Add(time.Duration(i) * time.Second), Service: "parcel-eta",
			Headers:  map[string]string{"x-request-id": id, "x-region": region, "x-user-type": "premium"},
			Request:  map[string]any{"user_id": i, "base_eta": 35},
			Features: map[string]any{"route_features__distance_km": math.Round(dist*100) / 100},
			Arms: map[string]record.Arm{
				record.ArmPrimary: {
					Model: "parcel_eta", Version: "1", Status: 200, LatencyMS: 2 + rng.Float64(),
					Outputs: map[string][]float64{"eta_prediction": {eta}, "confidence_score": {0.9}},
				},
				record.ArmShadow: {
					Model: "parcel_eta", Version: "2", Status: 200, LatencyMS: 2 + rng.Float64(),
					Outputs: map[string][]float64{"eta_prediction": {shadow}, "confidence_score": {0.9}},
				},
			},
		}
	}
	return recs
}

// pageCheck is what the report page shows, as read from its DOM.
type pageCheck struct {
	Verdict    string   `json:"verdict"`
	Gates      bool     `json:"gates"`
	Slices     bool     `json:"slices"`
	Plots      int      `json:"plots"`
	Loaded     int      `json:"loaded"`
	FailedRows []string `json:"failedRows"`
}

const pageCheckJS = `(() => {
	const plots = Array.from(document.querySelectorAll('img.plot'));
	const verdict = document.querySelector('#verdict');
	return {
		verdict: verdict ? verdict.textContent : '',
		gates: document.querySelector('#gates') !== null,
		slices: document.querySelector('#slices') !== null,
		plots: plots.length,
		loaded: plots.filter(i => i.complete && i.naturalWidth > 0).length,
		failedRows: Array.from(document.querySelectorAll('#slices tr.failed td:first-child')).map(td => td.textContent),
	};
})()`

// clippedTextJS lays every plot's SVG out inline (off screen) and returns
// each text (title, tick label, legend) whose box reaches past the SVG's
// edges: in the <img> the browser cuts it off. The fonts are the
// browser's, which is what a reader sees.
const clippedTextJS = `(() => {
	const out = [];
	const box = document.createElement('div');
	box.style.cssText = 'position:absolute;left:-20000px;top:0';
	document.body.appendChild(box);
	for (const img of document.querySelectorAll('img.plot')) {
		const b64 = img.src.split(',')[1];
		const xml = new TextDecoder().decode(Uint8Array.from(atob(b64), c => c.charCodeAt(0)));
		const svg = document.importNode(new DOMParser().parseFromString(xml, 'image/svg+xml').documentElement, true);
		box.replaceChildren(svg);
		const r = svg.getBoundingClientRect();
		for (const t of svg.querySelectorAll('text')) {
			const q = t.getBoundingClientRect();
			if (q.width === 0) continue;
			if (q.left < r.left - 0.5 || q.right > r.right + 0.5 || q.top < r.top - 0.5 || q.bottom > r.bottom + 0.5) {
				out.push((img.alt || img.title || 'plot') + ': ' + t.textContent);
			}
		}
	}
	box.remove();
	return out;
})()`

// consoleLog collects a tab's console messages (console API calls,
// uncaught exceptions and browser log entries such as failed images).
type consoleLog struct {
	mu   sync.Mutex // protects msgs
	msgs []chromedp.ConsoleMessage
	done chan struct{}
}

func watchConsole(ctx context.Context) *consoleLog {
	c := &consoleLog{done: make(chan struct{})}
	msgs := chromedp.Console(ctx)
	go func() {
		defer close(c.done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			c.mu.Lock()
			c.msgs = append(c.msgs, m)
			c.mu.Unlock()
		}
	}()
	return c
}

// sync waits until the marker logged last has come through, so every
// message logged before it has too (the stream keeps their order).
func (c *consoleLog) sync(ctx context.Context, t *testing.T, marker string) []chromedp.ConsoleMessage {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf("console.info(%q), true", marker)))
	require.NoError(t, err)
	var before []chromedp.ConsoleMessage
	harness.WaitFor(t, 10*time.Second, 10*time.Millisecond, fmt.Sprintf("console marker %q", marker), func() (bool, string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.IndexFunc(c.msgs, func(m chromedp.ConsoleMessage) bool { return m.Text == marker })
		if i < 0 {
			return false, fmt.Sprintf("%d other messages", len(c.msgs))
		}
		before = slices.Clone(c.msgs[:i])
		c.msgs = c.msgs[i+1:]
		return true, ""
	})
	return before
}

func problems(msgs []chromedp.ConsoleMessage) []string {
	var out []string
	for _, m := range msgs {
		if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
			out = append(out, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line+1))
		}
	}
	return out
}

func fileURL(path string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String()
}

// TestShadowReportInChromium builds a diff report with a failing region
// slice, opens report.html in headless Chromium and checks that it loads
// without console errors and shows the verdict, the gates, the slices and
// its plots. The screenshot goes where docScreenshot puts it (docs/release/).
func TestShadowReportInChromium(t *testing.T) {
	// Not parallel: with Chromium slowed down by the tests beside it,
	// chromedp once polled the report in the execution context of the page
	// before it ("Cannot find context with specified id").
	chromium := findChromium(t)

	key, err := diff.ParseSliceKey("header:x-region")
	require.NoError(t, err)
	res, err := diff.Analyze(t.Context(), diff.Input{A: diff.FromRecords(regionalRecords(600)...)},
		diff.Options{Slices: []diff.SliceKey{key}})
	require.NoError(t, err)
	require.False(t, res.Passed)
	require.Contains(t, res.Failed, "significant_share[eta_prediction]@x-region=eu")
	dir := t.TempDir()
	require.NoError(t, diff.Write(dir, res))

	// A control page with a script error and a broken image: the console
	// watch must see both, or a clean report proves nothing.
	control := filepath.Join(dir, "control.html")
	require.NoError(t, os.WriteFile(control, []byte(`<!DOCTYPE html><html><body>
<img class="plot" src="data:image/svg+xml;base64,bm90IGFuIGltYWdl">
<script>console.error("control error"); undefinedFunction();</script></body></html>`), 0o600))

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	opts := slices.Concat(chromedp.DefaultExecAllocatorOptions[:], []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.WindowSize(1280, 2000),
	})
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	tab, cancelTab := chromedp.NewContext(allocCtx)
	defer cancelTab()
	require.NoError(t, chromedp.Do(tab), "start chromium") // the tab must exist before the console watch
	console := watchConsole(tab)

	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(fileURL(control))))
	ctl, err := chromedp.Run(tab, chromedp.Evaluate[pageCheck](pageCheckJS))
	require.NoError(t, err)
	require.Zero(t, ctl.Loaded, "the control's broken image loaded")
	got := problems(console.sync(tab, t, "control-checked"))
	require.NotEmpty(t, got, "the console watch saw nothing on the control page")
	require.True(t, slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, "control error") }), "%v", got)
	require.True(t, slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, "undefinedFunction") }), "%v", got)

	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(fileURL(filepath.Join(dir, diff.HTMLFile)))))
	_, err = chromedp.Run(tab, chromedp.Poll[bool](`Array.from(document.images).every(i => i.complete)`,
		chromedp.WithPollingTimeout(30*time.Second)))
	require.NoError(t, err, "the report's images never finished loading")
	page, err := chromedp.Run(tab, chromedp.Evaluate[pageCheck](pageCheckJS))
	require.NoError(t, err)
	require.Empty(t, problems(console.sync(tab, t, "report-checked")), "console errors on the report")

	require.Contains(t, page.Verdict, "FAILED")
	require.True(t, page.Gates, "#gates missing")
	require.True(t, page.Slices, "#slices missing")
	require.GreaterOrEqual(t, page.Plots, 1, "no img.plot")
	require.Equal(t, page.Plots, page.Loaded, "plots that did not render")
	require.Contains(t, page.FailedRows, "eu", "the failing region is not marked in the slice table")
	require.NotContains(t, page.FailedRows, "us")
	clipped, err := chromedp.Run(tab, chromedp.Evaluate[[]string](clippedTextJS))
	require.NoError(t, err)
	require.Empty(t, clipped, "plot texts cut off at the plot's edge (titles, tick labels, legends)")

	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.Greater(t, len(png), 10_000, "the screenshot is suspiciously small")
	require.Equal(t, "\x89PNG", string(png[:4]))
	// The docs show the top of the page (verdict, gates, the first plots),
	// the window's 1280x2000 pixels.
	top, err := chromedp.Run(tab, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	docScreenshot(t, "release", "shadow-report.png", top)
	cancelTab()
	<-console.done
}
