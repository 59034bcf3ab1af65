package registry

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Holder keeps the current Repo of a feature repository and replaces it
// when the definitions change. Readers call Current, an atomic load, so a
// request never waits on a reload; a reload that finds errors keeps the
// old Repo serving and reports them.
type Holder struct {
	dir     string
	logger  *slog.Logger
	metrics *metrics
	cur     atomic.Pointer[Repo]
	mu      sync.Mutex // protects reloads: one at a time
}

// NewHolder loads the repository in dir and returns a Holder serving it.
// A nil logger discards; a nil registerer leaves metrics unregistered.
func NewHolder(ctx context.Context, dir string, logger *slog.Logger, reg prometheus.Registerer) (*Holder, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r, err := Load(ctx, dir)
	if err != nil {
		return nil, err
	}
	h := &Holder{dir: r.Dir, logger: logger.With("component", "feature_registry"), metrics: newMetrics(reg)}
	h.cur.Store(r)
	h.metrics.loaded(time.Now())
	return h, nil
}

// Current returns the Repo now in use. It never blocks.
func (h *Holder) Current() *Repo { return h.cur.Load() }

// Reload loads the repository again and, if it is valid, swaps it in. It
// returns the Repo in use afterwards; on error that is the old one, and
// the error lists every definition problem.
func (h *Holder) Reload(ctx context.Context) (*Repo, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, err := Load(ctx, h.dir)
	if err != nil {
		h.metrics.reloads.WithLabelValues("error").Inc()
		return h.cur.Load(), fmt.Errorf("reload feature registry: %w", err)
	}
	h.cur.Store(r)
	h.metrics.reloads.WithLabelValues("ok").Inc()
	h.metrics.loaded(time.Now())
	return r, nil
}

// Watch checks the repository's files every interval and reloads when
// their contents change (by sha256, so touching a file does nothing). It
// returns nil when ctx is done. Invalid definitions are logged, once per
// distinct content, and the old Repo keeps serving.
func (h *Holder) Watch(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	failed := "" // digest of contents that failed to load
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		digest, err := h.fingerprint(ctx)
		if err != nil {
			h.logger.Warn("feature registry check failed", "err", err)
			continue
		}
		if digest == h.Current().digest || digest == failed {
			continue
		}
		r, err := h.Reload(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			failed = digest
			h.logger.Error("feature registry reload failed; keeping the previous definitions", "err", err)
			continue
		}
		failed = ""
		h.logger.Info("feature registry reloaded", "views", len(r.Views), "services", len(r.Services))
	}
}

// fingerprint hashes the files a load would read now: the config, the
// definition files and the hot key files the current Repo read.
func (h *Holder) fingerprint(ctx context.Context) (string, error) {
	fsys := os.DirFS(h.dir)
	names, err := definitionFiles(ctx, fsys)
	if err != nil {
		return "", err
	}
	files := make(map[string][]byte, len(names)+1)
	for _, n := range append(names, h.Current().files...) {
		if _, done := files[n]; done {
			continue
		}
		data, err := fs.ReadFile(fsys, n)
		if err != nil {
			// A vanished file is a change; let the load report it.
			files[n] = nil
			continue
		}
		files[n] = data
	}
	_, d := digestFiles(files)
	return d, nil
}

type metrics struct {
	reloads     *prometheus.CounterVec
	lastSuccess prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		reloads: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_feature_registry_reloads_total",
			Help: "Feature registry reloads, by result (ok, error).",
		}, []string{"result"}),
		lastSuccess: f.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_feature_registry_last_load_timestamp_seconds",
			Help: "When the feature definitions in use were loaded (Unix seconds).",
		}),
	}
}

func (m *metrics) loaded(t time.Time) { m.lastSuccess.Set(float64(t.UnixNano()) / 1e9) }
