// Package consoletest drives the web console in a real headless Chromium
// (Debian's chromium package) for the console's end-to-end tests: it loads
// a page, waits for its charts, and reports the page's text, the console
// errors it raised and a screenshot. Only tests import it.
package consoletest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluice-ml/sluice/internal/testutil/tier"
)

// Browser is one headless Chromium; each Visit opens a new tab.
type Browser struct {
	ctx context.Context // of the browser
}

// FindChromium returns the Chromium (or Chrome) executable on PATH.
func FindChromium() (string, error) {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no chromium on PATH (Debian: apt-get install -y chromium)")
}

// NewBrowser starts a headless Chromium with --headless --no-sandbox
// --disable-gpu --disable-background-networking, stopped when the test
// ends. Without Chromium the test is skipped, or fails when CI=true.
// Under -short (make test-short) it skips: browser tests are a tier
// `make test` runs.
func NewBrowser(tb testing.TB) *Browser {
	tb.Helper()
	tier.Skip(tb, "browser")
	path, err := FindChromium()
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("console browser test: %v", err)
		}
		tb.Skipf("console browser test: %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("lang", "en-US"),
		chromedp.WindowSize(1400, 900),
		chromedp.UserDataDir(tb.TempDir()),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	tb.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first Run starts the browser; it must not carry a timeout.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		tb.Fatalf("start chromium %s: %v", path, err)
	}
	return &Browser{ctx: ctx}
}

// Page is what a visit found.
type Page struct {
	// Text is the page's visible text after the charts settled.
	Text string
	// Errors are the console errors, uncaught exceptions and browser log
	// errors (failed loads, CSP violations) the page raised.
	Errors []string
	// Charts is the console script's verdict: "ready", "none" or "error".
	Charts string
	// Canvases counts the drawn charts.
	Canvases int
	// MinTickGap is the smallest distance in CSS pixels between two
	// neighbouring time-axis labels of any chart (-1 without a chart with
	// two); MaxTickLabel the longest such label, in characters.
	MinTickGap   float64
	MaxTickLabel int
	// Screenshot is a full-page PNG.
	Screenshot []byte
}

// Visit loads url in a new tab, waits until the console script has drawn
// the charts (or found none), gives late errors a moment, and returns what
// the page showed.
func (b *Browser) Visit(tb testing.TB, url string) Page {
	tb.Helper()
	tab, cancel := chromedp.NewContext(b.ctx)
	defer cancel()
	if err := chromedp.Do(tab, chromedp.EmulateViewport(1400, 900)); err != nil {
		tb.Fatalf("open a tab: %v", err)
	}
	var (
		mu   sync.Mutex // protects errs
		errs []string
	)
	messages := chromedp.Console(tab)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				mu.Lock()
				errs = append(errs, m.String()+" ("+m.URL+")")
				mu.Unlock()
			}
		}
	}()
	ctx, stop := context.WithTimeout(tab, 30*time.Second)
	defer stop()
	var p Page
	err := chromedp.Do(ctx, chromedp.Navigate(url))
	if err == nil {
		p.Charts, err = chromedp.Run(ctx, chromedp.Poll[string](`document.documentElement.dataset.charts`, chromedp.WithPollingInterval(50*time.Millisecond)))
	}
	if err == nil {
		// Let the first poll's charts paint and any late error arrive.
		time.Sleep(500 * time.Millisecond)
		p.Canvases, err = chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(".chart-card canvas").length`))
	}
	if err == nil {
		p.Text, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	}
	if err == nil {
		var ticks [2]float64
		ticks, err = chromedp.Run(ctx, chromedp.Evaluate[[2]float64](tickJS))
		p.MinTickGap, p.MaxTickLabel = ticks[0], int(ticks[1])
	}
	if err == nil {
		p.Screenshot, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	}
	if err != nil {
		tb.Fatalf("visit %s: %v", url, err)
	}
	cancel()
	<-done
	mu.Lock()
	p.Errors = errs
	mu.Unlock()
	return p
}

// tickJS measures the time axes the console script drew: the smallest gap
// between neighbouring tick labels and the longest label.
const tickJS = `(function () {
  var gap = -1, longest = 0;
  document.querySelectorAll("[data-xticks]").forEach(function (el) {
    var t = JSON.parse(el.dataset.xticks);
    for (var i = 0; i < t.length; i++) {
      longest = Math.max(longest, t[i][1].length);
      if (i > 0) {
        var d = t[i][0] - t[i-1][0];
        gap = gap < 0 ? d : Math.min(gap, d);
      }
    }
  });
  return [gap, longest];
})()`

// Check fails the test when the page raised console errors or lacks any
// of want.
func (p *Page) Check(tb testing.TB, url string, want ...string) {
	tb.Helper()
	if len(p.Errors) > 0 {
		tb.Errorf("%s: console errors:\n  %s", url, strings.Join(p.Errors, "\n  "))
	}
	for _, w := range want {
		if !strings.Contains(p.Text, w) {
			tb.Errorf("%s: page does not show %q; it shows:\n%s", url, w, p.Text)
		}
	}
}
