package registry

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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
//
// What serves is what `sluice features apply` accepted: once the
// repository has a registry file, the Holder serves the registry's
// definitions, and definition files that differ from it (edited, not
// applied) are reported, never served. Without a registry file (apply
// never ran) it serves the definition files, except that a reload that
// changes a feature's type is refused: such a change needs
// `sluice features apply --allow-type-change`, because the stored values
// of the feature read NOT_FOUND until the view is materialized again.
type Holder struct {
	dir     string
	logger  *slog.Logger
	metrics *metrics
	cur     atomic.Pointer[Repo]
	mu      sync.Mutex // protects reloads: one at a time, and pending
	pending []Change   // definition changes not served (not applied, or refused)
}

// NewHolder loads the repository in dir and returns a Holder serving it:
// the applied registry when there is one, else the definition files. A
// nil logger discards; a nil registerer leaves metrics unregistered.
func NewHolder(ctx context.Context, dir string, logger *slog.Logger, reg prometheus.Registerer) (*Holder, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &Holder{logger: logger.With("component", "feature_registry"), metrics: newMetrics(reg)}
	r, err := h.decide(ctx, dir, nil)
	if err != nil {
		return nil, err
	}
	h.dir = r.Dir
	h.cur.Store(r)
	h.metrics.loaded(time.Now())
	return h, nil
}

// Current returns the Repo now in use. It never blocks.
func (h *Holder) Current() *Repo { return h.cur.Load() }

// Pending returns the definition changes in the files that are not
// served: not applied to the registry, or refused. Nil when the files
// are what serves.
func (h *Holder) Pending() []Change {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pending
}

// ErrRefused is returned (wrapped) by Reload when the definition files
// changed in a way that is not served.
var ErrRefused = errors.New("definition change not served")

// Reload loads the repository again and swaps in what it should serve
// (see Holder). It returns the Repo in use afterwards; on error that is
// the old one, and the error lists every definition problem or, wrapping
// ErrRefused, why the changed definitions are not served.
func (h *Holder) Reload(ctx context.Context) (*Repo, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cur := h.cur.Load()
	r, err := h.decide(ctx, h.dir, cur)
	if err != nil {
		result := "error"
		if errors.Is(err, ErrRefused) {
			result = "refused"
		}
		h.metrics.reloads.WithLabelValues(result).Inc()
		return cur, fmt.Errorf("reload feature registry: %w", err)
	}
	if r == cur {
		return cur, nil
	}
	h.cur.Store(r)
	h.metrics.reloads.WithLabelValues("ok").Inc()
	h.metrics.loaded(time.Now())
	return r, nil
}

// decide loads the definition files and the registry and returns the
// Repo to serve: cur (unchanged), or a new one. It sets pending.
func (h *Holder) decide(ctx context.Context, dir string, cur *Repo) (*Repo, error) {
	files, err := Load(ctx, dir)
	if err != nil {
		return nil, err
	}
	snap, err := ReadSnapshot(files.Path(files.Config.Registry))
	if err != nil {
		return nil, err
	}
	fileSnap := files.Snapshot()
	if snap == nil {
		// Never applied: the files serve, but not a retype.
		if cur != nil {
			if retyped := TypeChanges(cur.Snapshot(), fileSnap); len(retyped) > 0 {
				h.setPending(Diff(cur.Snapshot(), fileSnap))
				return nil, fmt.Errorf("%w: changing the type of %s makes its stored values read NOT_FOUND until the view is re-materialized; run `sluice features apply --allow-type-change` to go ahead (the running definitions keep serving)",
					ErrRefused, strings.Join(retyped, ", "))
			}
		}
		h.setPending(nil)
		if cur != nil && cur.digest == files.digest {
			return cur, nil
		}
		return files, nil
	}
	changes := Diff(snap, fileSnap)
	if len(changes) == 0 {
		h.setPending(nil)
		if cur != nil && cur.digest == files.digest {
			return cur, nil
		}
		return files, nil // what apply accepted, with the files' positions
	}
	// The files differ from what apply accepted: serve the registry.
	h.setPending(changes)
	why := "not applied: run `sluice features plan` to see them and `sluice features apply` to serve them"
	if retyped := TypeChanges(snap, fileSnap); len(retyped) > 0 {
		why = fmt.Sprintf("not applied, and apply refuses them without --allow-type-change (type change of %s)", strings.Join(retyped, ", "))
	}
	if cur != nil && len(Diff(cur.Snapshot(), snap)) == 0 {
		return nil, fmt.Errorf("%w: the definition files differ from the applied registry in %d object(s), %s; the applied definitions keep serving", ErrRefused, len(changes), why)
	}
	cfg, err := readConfig(files.Dir)
	if err != nil {
		return nil, fmt.Errorf("load feature repository %s: %w", dir, err)
	}
	applied, err := FromSnapshot(ctx, files.Dir, cfg, snap)
	if err != nil {
		return nil, err
	}
	h.logger.Warn("serving the applied registry: the definition files differ from it", "changes", len(changes), "why", why)
	return applied, nil
}

func (h *Holder) setPending(c []Change) {
	h.pending = c
	h.metrics.pending.Set(float64(len(c)))
}

// Watch checks the repository's files (and the registry file) every
// interval and reloads when their contents change (by sha256, so
// touching a file does nothing). It returns nil when ctx is done. A
// reload that fails or is refused is logged once per distinct content,
// and the running definitions keep serving.
func (h *Holder) Watch(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	seen, _ := h.fingerprint(ctx) // what the running definitions were decided from
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
		if digest == seen {
			continue
		}
		seen = digest
		r, err := h.Reload(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, ErrRefused) {
				h.logger.Error("feature definitions changed and were refused; the running definitions keep serving", "err", err)
				continue
			}
			h.logger.Error("feature registry reload failed; keeping the previous definitions", "err", err)
			continue
		}
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
	cur := h.Current()
	files := make(map[string][]byte, len(names)+2)
	reg := cur.Config.Registry
	if reg == "" {
		reg = DefaultRegistry
	}
	extra := []string{ConfigFile, filepathToSlash(reg)}
	for _, n := range append(append(names, extra...), cur.files...) {
		if _, done := files[n]; done || n == "" {
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
	pending     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		reloads: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_feature_registry_reloads_total",
			Help: "Feature registry reloads, by result: ok, error (invalid definitions) or refused (changed definitions not served: not applied to the registry, or a type change without apply --allow-type-change).",
		}, []string{"result"}),
		pending: f.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_feature_registry_unserved_changes",
			Help: "Objects whose definitions in the files differ from what serves (not applied, or refused); 0 when the files are what serves.",
		}),
		lastSuccess: f.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_feature_registry_last_load_timestamp_seconds",
			Help: "When the feature definitions in use were loaded (Unix seconds).",
		}),
	}
}

func (m *metrics) loaded(t time.Time) { m.lastSuccess.Set(float64(t.UnixNano()) / 1e9) }

// filepathToSlash turns a configured path into an fs.FS name; an absolute
// or escaping one is left out of the fingerprint (it returns "").
func filepathToSlash(p string) string {
	p = filepath.ToSlash(filepath.Clean(p))
	if filepath.IsAbs(p) || strings.HasPrefix(p, "../") || p == ".." {
		return ""
	}
	return p
}
