package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"

	"github.com/sluice-ml/sluice/internal/admission"
	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/jsonenc"
	"github.com/sluice-ml/sluice/internal/modelrepo"
	"github.com/sluice-ml/sluice/internal/shm"
	"github.com/sluice-ml/sluice/internal/telemetry"
	"github.com/sluice-ml/sluice/internal/tritonsettings"
)

// DefaultMaxBodyBytes is the request body limit when Options leaves it 0.
const DefaultMaxBodyBytes = 64 << 20

// implementedExtensions are the protocol extensions this package
// implements, as listed in the server metadata by default. "sequence" is
// listed as Triton lists it: the sequence_id, sequence_start and
// sequence_end parameters reach the sequence batcher. cuda_shared_memory is
// not listed: every call of it is refused (no GPU).
func implementedExtensions() []string {
	return []string{"classification", "sequence", "system_shared_memory", "model_repository", "model_configuration", "statistics", "binary_tensor_data", "schedule_policy", "parameters"}
}

// Options configure a Handler. The zero value is usable.
type Options struct {
	// MaxBodyBytes bounds a request body, after decompression. Larger
	// bodies are answered 400 body_too_large, as Triton answers them. Default
	// DefaultMaxBodyBytes (64 MiB).
	MaxBodyBytes int64
	// ServerName is the name in the server metadata. Default "sluice".
	ServerName string
	// ServerVersion is the version in the server metadata.
	ServerVersion string
	// Extensions are listed in the server metadata. Default: the ones
	// this package implements (model_repository, model_configuration,
	// statistics, binary_tensor_data, parameters); set it only to
	// advertise fewer.
	Extensions []string
	// SharedMemory holds the system shared-memory regions clients
	// register; nil: a private registry (one per Handler).
	SharedMemory *shm.Registry
	// Settings back Triton's logging and trace extensions (/v2/logging,
	// /v2/trace/setting); nil: those endpoints are not served.
	Settings *tritonsettings.Settings
	// HeaderForward, when set, forwards the inference request headers
	// whose (lower-case) names it matches as string request parameters
	// named by the header (Triton's --http-header-forward-pattern). A
	// parameter the body sets wins.
	HeaderForward *regexp.Regexp
	// CompressMinBytes is the smallest inference response body compressed
	// for a client that accepts gzip or deflate; smaller ones go out as
	// they are. 0: zpool.DefaultMinBytes (1 KiB); negative: never.
	CompressMinBytes int
	// Budget is the process's in-flight byte budget: every inference
	// response is charged to it (its outputs and their encoding) before it
	// is built, and refused with 503 overloaded when it cannot be, or 413
	// response_too_large when it never could. nil: responses are not
	// charged.
	Budget *admission.Budget
}

// Handler serves the KServe v2 HTTP protocol and Triton's HTTP extensions
// on top of a modelrepo.Models implementation. It is an http.Handler and
// is safe for concurrent use.
type Handler struct {
	models  modelrepo.Models
	opts    Options
	logger  *slog.Logger
	metrics *metrics
	mux     *http.ServeMux
	// serverMeta is the server metadata response, fixed at construction.
	serverMeta []byte
	// bufs pools response buffers; entries are *[]byte.
	bufs sync.Pool
	// bodies pools request body buffers of JSON-only inference requests,
	// which nothing refers to once decoded; entries are *[]byte.
	bodies sync.Pool
	// decoders pools the decoders of JSON-only inference requests, with
	// the request's tensors and the arena their data is parsed into.
	decoders decoderPool
}

// New builds a Handler serving models. A nil logger discards; a nil
// registerer leaves the metrics unregistered.
func New(models modelrepo.Models, opts Options, logger *slog.Logger, reg prometheus.Registerer) *Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.ServerName == "" {
		opts.ServerName = "sluice"
	}
	if opts.Extensions == nil {
		opts.Extensions = implementedExtensions()
		if opts.Settings != nil {
			opts.Extensions = append(opts.Extensions, "logging", "trace")
		}
	}
	if opts.SharedMemory == nil {
		opts.SharedMemory = shm.New(shm.Options{MaxRequestBytes: opts.MaxBodyBytes})
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{
		models:  models,
		opts:    opts,
		logger:  logger.With("component", "httpapi"),
		metrics: newMetrics(reg),
		mux:     http.NewServeMux(),
	}
	meta := []byte(`{"name":`)
	meta = jsonenc.AppendString(meta, opts.ServerName)
	meta = append(meta, `,"version":`...)
	meta = jsonenc.AppendString(meta, opts.ServerVersion)
	meta = append(meta, `,"extensions":[`...)
	for i, e := range opts.Extensions {
		if i > 0 {
			meta = append(meta, ',')
		}
		meta = jsonenc.AppendString(meta, e)
	}
	meta = append(meta, "]}"...)
	h.serverMeta = meta
	h.routes()
	return h
}

// routes registers every endpoint. Each model route exists with and
// without /versions/{version}.
func (h *Handler) routes() {
	h.mux.HandleFunc("GET /v2/health/live", h.handleLive)
	h.mux.HandleFunc("GET /v2/health/ready", h.handleReady)
	h.mux.HandleFunc("GET /v2", h.handleServerMetadata)
	h.mux.HandleFunc("GET /v2/models/stats", h.handleStats)
	h.mux.HandleFunc("POST /v2/repository/index", h.handleIndex)
	h.mux.HandleFunc("POST /v2/repository/models/{model}/load", h.handleLoad)
	h.mux.HandleFunc("POST /v2/repository/models/{model}/unload", h.handleUnload)
	for _, base := range []string{"/v2/models/{model}", "/v2/models/{model}/versions/{version}"} {
		h.mux.HandleFunc("GET "+base, h.handleModelMetadata)
		h.mux.HandleFunc("GET "+base+"/ready", h.handleModelReady)
		h.mux.HandleFunc("GET "+base+"/config", h.handleModelConfig)
		h.mux.HandleFunc("GET "+base+"/stats", h.handleStats)
		h.mux.HandleFunc("POST "+base+"/infer", h.handleInfer)
		h.mux.HandleFunc("POST "+base+"/generate", h.handleGenerate)
		h.mux.HandleFunc("POST "+base+"/generate_stream", h.handleGenerateStream)
	}
	h.sharedMemoryRoutes()
	h.settingsRoutes()
}

// ServeHTTP routes the request, answers unknown routes and methods with
// JSON errors, turns a panic into a 500 and records the request metrics.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w, r: r}
	defer func() {
		if p := recover(); p != nil {
			if err, ok := p.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(p) // net/http's way to abort a response; let it through
			}
			h.logger.Error("handler panicked", "method", r.Method, "path", r.URL.Path,
				"request_id", r.Header.Get("X-Request-Id"), "panic", p, "stack", string(debug.Stack()))
			if !sw.wrote {
				apierr.WriteError(sw, http.StatusInternalServerError, reasonInternal, "internal error")
			}
		}
		switch {
		case sw.intercepted && sw.code == http.StatusMethodNotAllowed:
			apierr.WriteError(w, sw.code, reasonMethodNotAllowed,
				"method "+r.Method+" is not allowed for "+r.URL.Path+" (allowed: "+w.Header().Get("Allow")+")")
		case sw.intercepted:
			apierr.WriteError(w, sw.code, reasonNotFound, "no endpoint "+r.Method+" "+r.URL.Path)
		}
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		h.metrics.observe(route, sw.status(), time.Since(start))
	}()
	if r.Header.Get("Traceparent") != "" {
		r = r.WithContext(telemetry.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
	}
	h.mux.ServeHTTP(sw, r)
}

// statusWriter records the status code and replaces ServeMux's plain-text
// 404 and 405 answers (which it writes when no pattern matched) with the
// JSON error body every other error has.
type statusWriter struct {
	http.ResponseWriter
	r           *http.Request
	code        int
	wrote       bool
	intercepted bool
}

func (w *statusWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote = true
	w.code = code
	if w.r.Pattern == "" && (code == http.StatusNotFound || code == http.StatusMethodNotAllowed) {
		w.intercepted = true
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.intercepted {
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) status() int {
	if !w.wrote {
		return http.StatusOK
	}
	return w.code
}

// maxPooledBuffer keeps one huge response from pinning its buffer forever.
const maxPooledBuffer = 1 << 20

func (h *Handler) getBuf() *[]byte {
	if b, ok := h.bufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 4096)
	return &b
}

func (h *Handler) putBuf(b *[]byte) {
	if cap(*b) > maxPooledBuffer {
		return
	}
	*b = (*b)[:0]
	h.bufs.Put(b)
}

// writeJSON answers 200 with a body that is already JSON.
func writeJSON(w http.ResponseWriter, body []byte) {
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Content-Length", itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body) //nolint:gosec // G705: a JSON body sent as application/json, not HTML
}

// writeJSONValue marshals v with encoding/json (used off the inference
// path) and answers 200.
func (h *Handler) writeJSONValue(w http.ResponseWriter, r *http.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), err)
		return
	}
	writeJSON(w, b)
}
