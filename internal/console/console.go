package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/gateway/accesslog"
)

// Prefix is the path the console is served under.
const Prefix = "/console/"

// Defaults of Sources' sampling fields.
const (
	DefaultSampleEvery = 2 * time.Second
	DefaultHistory     = 900
)

// sourceTimeout bounds one call to a source while answering a request.
const sourceTimeout = 5 * time.Second

// grafanaUID is the dashboard (deploy/grafana) each page links to.
var grafanaUID = map[string]string{
	"overview": "sluice-overview", "models": "sluice-model-server", "features": "sluice-feature-store",
	"services": "sluice-gateway", "errors": "sluice-gateway", "accuracy": "sluice-overview",
}

// maxErrors is the most errors one page or API answer lists.
const maxErrors = 200

// csp allows only this origin's scripts, styles, images and fetches: no
// inline script or style, no frames, no forms, no plugins.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// Console serves the web console. It is an http.Handler for the paths
// under Prefix; Run samples the metrics for the charts.
type Console struct {
	src     Sources
	logger  *slog.Logger
	sampler *sampler
	pages   map[string]*template.Template
	mux     *http.ServeMux
	version string // of the embedded assets, for cache busting
}

// New builds the console over src. A nil logger discards. The console
// samples the metrics whenever a chart asks and the last sample is older
// than src.SampleEvery; Run samples in the background as well, so the
// charts have history when an operator arrives.
func New(src Sources, logger *slog.Logger) *Console {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if src.SampleEvery <= 0 {
		src.SampleEvery = DefaultSampleEvery
	}
	if src.History <= 0 {
		src.History = DefaultHistory
	}
	if src.Now == nil {
		src.Now = time.Now
	}
	c := &Console{
		src: src, logger: logger.With("component", "console"),
		sampler: newSampler(src.Metrics, src.SampleEvery, src.History),
		pages:   map[string]*template.Template{},
		version: assetVersion(),
	}
	for _, name := range []string{"overview", "models", "features", "services", "errors", "accuracy"} {
		c.pages[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
	}
	assets, err := fs.Sub(assetFS, "assets")
	if err != nil {
		panic(err) // the embedded tree always has assets/
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Prefix+"{$}", c.pageOverview)
	mux.HandleFunc("GET "+Prefix+"models", c.pageModels)
	mux.HandleFunc("GET "+Prefix+"features", c.pageFeatures)
	mux.HandleFunc("GET "+Prefix+"services", c.pageServices)
	mux.HandleFunc("GET "+Prefix+"errors", c.pageErrors)
	mux.HandleFunc("GET "+Prefix+"accuracy", c.pageAccuracy)
	mux.HandleFunc("GET "+Prefix+"api/summary", c.apiSummary)
	mux.HandleFunc("GET "+Prefix+"api/models", c.apiModels)
	mux.HandleFunc("GET "+Prefix+"api/features", c.apiFeatures)
	mux.HandleFunc("GET "+Prefix+"api/services", c.apiServices)
	mux.HandleFunc("GET "+Prefix+"api/errors", c.apiErrors)
	mux.HandleFunc("GET "+Prefix+"api/series", c.apiSeries)
	mux.Handle("GET "+Prefix+"assets/", http.StripPrefix(Prefix+"assets/", cacheAssets(http.FileServerFS(assets))))
	c.mux = mux
	return c
}

// assetVersion is a short hash of the embedded assets.
func assetVersion() string {
	h := sha256.New()
	_ = fs.WalkDir(assetFS, "assets", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assetFS.ReadFile(path)
		if err != nil {
			return err
		}
		_, _ = io.WriteString(h, path)
		_, _ = h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// cacheAssets lets browsers keep the assets: their URLs carry the
// version.
func cacheAssets(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=86400")
		h.ServeHTTP(w, r)
	})
}

// ServeHTTP serves the console's pages, API and assets.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

// Run samples the metrics every SampleEvery until ctx is done; it returns
// nil then.
func (c *Console) Run(ctx context.Context) error {
	path := c.src.HistoryFile
	if path != "" {
		if err := c.sampler.load(path, c.src.Now()); err != nil {
			c.logger.Warn("console history not restored", "err", err)
		}
		defer func() {
			if err := c.sampler.save(path); err != nil {
				c.logger.Warn("console history not saved", "err", err)
			}
		}()
	}
	t := time.NewTicker(c.src.SampleEvery)
	defer t.Stop()
	lastSave := c.src.Now()
	for {
		now := c.src.Now()
		c.sampler.sampleIfDue(now)
		if path != "" && now.Sub(lastSave) >= saveEvery {
			lastSave = now
			if err := c.sampler.save(path); err != nil {
				c.logger.Warn("console history not saved", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// snapshot is what one request reads from the sources.
type snapshot struct {
	in  Inputs
	now time.Time
}

// read calls the sources the request needs.
func (c *Console) read(ctx context.Context, models, views, gateway, errs bool) snapshot {
	ctx, cancel := context.WithTimeout(ctx, sourceTimeout)
	defer cancel()
	s := snapshot{now: c.src.Now()}
	if models && c.src.Models != nil {
		s.in.HaveModels = true
		s.in.Models, s.in.ModelsErr = c.src.Models.Models(ctx)
	}
	if views && c.src.Features != nil {
		s.in.HaveViews = true
		s.in.Views, s.in.ViewsErr = c.src.Features.Views(ctx)
		c.sampler.sampleIfDue(s.now)
		hot := c.sampler.hotTotals()
		for i := range s.in.Views {
			if h := s.in.Views[i].Hot; h != nil {
				t := hot[s.in.Views[i].Name]
				h.Hits, h.Misses = t[0], t[1]
			}
		}
	}
	if gateway && c.src.Gateway != nil {
		s.in.HaveGateway = true
		s.in.Gateway, s.in.GatewayErr = c.src.Gateway.Gateway(ctx)
	}
	if errs && c.src.Errors != nil {
		s.in.Errors = c.src.Errors.RecentErrors(maxErrors)
		n := c.src.Errors.ErrorsSeen()
		s.in.ErrorsSeen = &n
	}
	for _, err := range []error{s.in.ModelsErr, s.in.ViewsErr, s.in.GatewayErr} {
		if err != nil {
			c.logger.Warn("console source failed", "err", err)
		}
	}
	return s
}

// pageData is what every page template gets.
type pageData struct {
	Title, Active string
	Prefix        string
	Version       string
	Now           time.Time
	Ready         *bool // the gateway's readiness, nil without one
	Snapshot      Inputs
	Summary       Summary
	// Errors is the errors page's list, filtered; Service the filter;
	// Groups the same failures grouped by service, status and reason.
	Errors  []accesslog.Entry
	Service string
	Groups  []ErrorGroup
	// Grafana is the dashboard this page links to ("" without
	// Sources.GrafanaURL); TraceURL is Sources.TraceURL.
	Grafana, TraceURL string
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, name, title string, s snapshot) {
	d := pageData{
		Title: title, Active: name, Prefix: Prefix, Version: c.version, Now: s.now,
		Snapshot: s.in, Summary: Summarize(s.in, s.now), Errors: s.in.Errors,
		TraceURL: c.src.TraceURL,
	}
	if base := strings.TrimRight(c.src.GrafanaURL, "/"); base != "" {
		d.Grafana = base + "/d/" + grafanaUID[name]
	}
	if s.in.Gateway != nil {
		ready := s.in.Gateway.Ready
		d.Ready = &ready
	}
	if svc := r.URL.Query().Get("service"); svc != "" && name == "errors" {
		d.Service = svc
		d.Errors = slices.DeleteFunc(slices.Clone(d.Errors), func(e accesslog.Entry) bool { return e.Service != svc })
	}
	if name == "errors" {
		d.Groups = GroupErrors(d.Errors)
	}
	var buf bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&buf, "layout", d); err != nil {
		c.logger.Error("render console page", "page", name, "err", err)
		http.Error(w, "render page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

func (c *Console) pageOverview(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "overview", "Overview", c.read(r.Context(), true, true, true, true))
}

func (c *Console) pageModels(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "models", "Models", c.read(r.Context(), true, false, true, false))
}

func (c *Console) pageFeatures(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "features", "Feature views", c.read(r.Context(), false, true, true, false))
}

func (c *Console) pageServices(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "services", "Services", c.read(r.Context(), false, false, true, false))
}

func (c *Console) pageAccuracy(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "accuracy", "Online accuracy", c.read(r.Context(), false, false, true, false))
}

func (c *Console) pageErrors(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "errors", "Recent errors", c.read(r.Context(), false, false, true, true))
}

// writeJSON answers v as JSON.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		apierr.WriteError(w, http.StatusInternalServerError, apierr.ReasonInternal, "encode answer")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// writeSourceError answers a source's failure, or its absence.
func writeSourceError(w http.ResponseWriter, what string, err error) {
	if errors.Is(err, errNotRunning) {
		apierr.WriteError(w, http.StatusNotFound, ReasonNotRunning, "this process runs no "+what)
		return
	}
	apierr.WriteError(w, http.StatusServiceUnavailable, ReasonSourceUnavailable, what+": "+err.Error())
}

var errNotRunning = errors.New("not running")

func (c *Console) apiSummary(w http.ResponseWriter, r *http.Request) {
	s := c.read(r.Context(), true, true, true, true)
	writeJSON(w, http.StatusOK, Summarize(s.in, s.now))
}

func (c *Console) apiModels(w http.ResponseWriter, r *http.Request) {
	if c.src.Models == nil {
		writeSourceError(w, "model server", errNotRunning)
		return
	}
	s := c.read(r.Context(), true, false, false, false)
	if s.in.ModelsErr != nil {
		writeSourceError(w, "models", s.in.ModelsErr)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": nonNil(s.in.Models)})
}

func (c *Console) apiFeatures(w http.ResponseWriter, r *http.Request) {
	if c.src.Features == nil {
		writeSourceError(w, "feature server", errNotRunning)
		return
	}
	s := c.read(r.Context(), false, true, false, false)
	if s.in.ViewsErr != nil {
		writeSourceError(w, "feature views", s.in.ViewsErr)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"views": nonNil(s.in.Views)})
}

func (c *Console) apiServices(w http.ResponseWriter, r *http.Request) {
	if c.src.Gateway == nil {
		writeSourceError(w, "gateway", errNotRunning)
		return
	}
	s := c.read(r.Context(), false, false, true, false)
	if s.in.GatewayErr != nil {
		writeSourceError(w, "gateway", s.in.GatewayErr)
		return
	}
	writeJSON(w, http.StatusOK, s.in.Gateway)
}

func (c *Console) apiErrors(w http.ResponseWriter, r *http.Request) {
	if c.src.Errors == nil {
		writeSourceError(w, "error log", errNotRunning)
		return
	}
	n := maxErrors
	if q := r.URL.Query().Get("n"); q != "" {
		v, err := strconv.Atoi(q)
		if err != nil || v < 0 {
			apierr.WriteError(w, http.StatusBadRequest, apierr.ReasonInvalidParameter, "n must be a count, got "+strconv.Quote(q))
			return
		}
		n = min(v, maxErrors)
	}
	writeJSON(w, http.StatusOK, map[string]any{"seen": c.src.Errors.ErrorsSeen(), "errors": c.src.Errors.RecentErrors(n)})
}

func (c *Console) apiSeries(w http.ResponseWriter, r *http.Request) {
	kind := r.URL.Query().Get("kind")
	if _, ok := columns[kind]; !ok && kind != "" {
		apierr.WriteError(w, http.StatusBadRequest, apierr.ReasonInvalidParameter,
			"kind must be one of model, service, features, view; got "+strconv.Quote(kind))
		return
	}
	c.sampler.sampleIfDue(c.src.Now())
	writeJSON(w, http.StatusOK, c.sampler.series(kind))
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return human(now.Sub(t)) + " ago"
	},
	"seconds": func(s float64) string {
		if s <= 0 {
			return "none"
		}
		return human(time.Duration(s * float64(time.Second)))
	},
	"stamp": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05Z") },
	"pct": func(f float64) string {
		return strconv.FormatFloat(f*100, 'f', 1, 64) + " %"
	},
	"ms": func(f float64) string {
		if f < 1 {
			return strconv.FormatFloat(f*1e3, 'f', 0, 64) + " µs"
		}
		return strconv.FormatFloat(f, 'f', 2, 64) + " ms"
	},
	"num": func(v any) string {
		switch x := v.(type) {
		case *uint64:
			if x == nil {
				return ""
			}
			return group(strconv.FormatUint(*x, 10))
		case uint64:
			return group(strconv.FormatUint(x, 10))
		case int:
			return group(strconv.Itoa(x))
		case int64:
			return group(strconv.FormatInt(x, 10))
		case float64:
			return group(strconv.FormatFloat(x, 'f', 0, 64))
		}
		return ""
	},
	// traceLink is a tracing UI's URL of trace id, from a URL with
	// {trace_id}; "" without either.
	"traceLink": func(tmpl, id string) string {
		if tmpl == "" || id == "" {
			return ""
		}
		return strings.ReplaceAll(tmpl, "{trace_id}", url.PathEscape(id))
	},
	"short": func(s string) string {
		if len(s) > 12 {
			return s[:12]
		}
		return s
	},
	"stateClass": func(state string) string {
		switch state {
		case "READY":
			return "ok"
		case "LOADING", "UNLOADING", "UNKNOWN":
			return "warn"
		}
		return "bad"
	},
	"freshRatio": func(age, ttl float64) float64 {
		if ttl <= 0 {
			return 0
		}
		return min(age/ttl, 1)
	},
	"httpClass": func(code int) string {
		if code >= 500 || code == 0 {
			return "bad"
		}
		return "warn"
	},
	"ratio": func(c *Count) string {
		if c == nil {
			return "—"
		}
		return strconv.Itoa(c.OK) + " / " + strconv.Itoa(c.Total)
	},
	"countClass": func(c *Count) string {
		switch {
		case c == nil:
			return ""
		case c.OK == c.Total:
			return "ok"
		case c.OK == 0:
			return "bad"
		}
		return "warn"
	},
	"deref": func(f *float64) float64 {
		if f == nil {
			return 0
		}
		return *f
	},
	"derefU": func(n *uint64) uint64 {
		if n == nil {
			return 0
		}
		return *n
	},
}

// human writes a duration the way an operator reads it: 3d4h, 2h5m, 4m10s,
// 12s, 340ms.
func human(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m" + pad(int(d%time.Minute/time.Second), "s")
	case d < 24*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h" + pad(int(d%time.Hour/time.Minute), "m")
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + "d" + pad(int(d%(24*time.Hour)/time.Hour), "h")
}

func pad(n int, unit string) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n) + unit
}

// group puts thin spaces between groups of three digits.
func group(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteRune('\u202f')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
