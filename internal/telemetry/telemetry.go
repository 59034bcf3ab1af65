// Package telemetry sets up what every Sluice component reports through:
// the structured logger and the Prometheus registry served on /metrics.
package telemetry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The servers' log defaults (their --log-format and --log-level).
const (
	// DefaultLogFormat is the servers' log format.
	DefaultLogFormat = "json"
	// DefaultLogLevel is the servers' log level.
	DefaultLogLevel = "info"
)

// LogOptions choose the log format and level.
type LogOptions struct {
	Format string // "json" (default) or "text"
	Level  string // "debug", "info" (default), "warn", "error"
	// LevelVar, when set, is set to Level and holds the logger's level,
	// so that it can change at run time (Triton's logging extension).
	LevelVar *slog.LevelVar
}

// NewLogger builds the process logger writing to w.
func NewLogger(w io.Writer, opts LogOptions) (*slog.Logger, error) {
	var level slog.Level
	switch strings.ToLower(opts.Level) {
	case "", "info":
		level = slog.LevelInfo
	case "debug":
		level = slog.LevelDebug
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		return nil, fmt.Errorf("unknown log level %q (want debug, info, warn or error)", opts.Level)
	}
	ho := &slog.HandlerOptions{Level: level}
	if opts.LevelVar != nil {
		opts.LevelVar.Set(level)
		ho.Level = opts.LevelVar
	}
	switch strings.ToLower(opts.Format) {
	case "", "json":
		return slog.New(traceHandler{slog.NewJSONHandler(w, ho)}), nil
	case "text":
		return slog.New(traceHandler{slog.NewTextHandler(w, ho)}), nil
	default:
		return nil, fmt.Errorf("unknown log format %q (want json or text)", opts.Format)
	}
}

// NewRegistry returns a registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// MetricsServer serves /metrics for a registry.
type MetricsServer struct {
	srv *http.Server
	ln  net.Listener
}

// NewMetricsServer listens on addr and prepares to serve reg on /metrics.
// ctx bounds only the listen itself, not the server's lifetime.
func NewMetricsServer(ctx context.Context, addr string, reg *prometheus.Registry, logger *slog.Logger) (*MetricsServer, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelError),
		EnableOpenMetrics: true,
		Registry:          reg,
	}))
	return &MetricsServer{
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second},
		ln:  ln,
	}, nil
}

// Addr returns the address the server listens on.
func (s *MetricsServer) Addr() net.Addr { return s.ln.Addr() }

// UseTLS serves over TLS with cfg; call it before Run.
func (s *MetricsServer) UseTLS(cfg *tls.Config) { s.ln = tls.NewListener(s.ln, cfg) }

// Guard puts wrap in front of the handler and bounds the request header
// block at maxHeaderBytes (0 keeps Go's 1 MiB); call it before Run. The
// wiring passes the listener's admission limits, as on every other port.
func (s *MetricsServer) Guard(wrap func(http.Handler) http.Handler, maxHeaderBytes int) {
	s.srv.Handler = wrap(s.srv.Handler)
	if maxHeaderBytes > 0 {
		s.srv.MaxHeaderBytes = maxHeaderBytes
	}
}

// Run serves until ctx is done, then shuts down within a few seconds.
func (s *MetricsServer) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve metrics: %w", err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(shutCtx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
