package httpapi

import (
	"net/http"
	"time"
)

// Server timeouts used when ServerOptions leaves them 0.
const (
	// DefaultReadHeaderTimeout bounds how long a client may take to send
	// the request headers (slowloris protection).
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading a whole request, body included:
	// a 64 MiB body must arrive at about 1 MiB/s or faster.
	DefaultReadTimeout = 60 * time.Second
	// DefaultIdleTimeout is how long a keep-alive connection may sit idle.
	DefaultIdleTimeout = 120 * time.Second
	// DefaultMaxHeaderBytes bounds the request header size.
	DefaultMaxHeaderBytes = 1 << 20
)

// ServerOptions configure NewServer. A zero duration takes the default; a
// negative one turns that timeout off.
type ServerOptions struct {
	// Addr is the listen address for ListenAndServe; callers that pass
	// their own listener to Serve can leave it empty.
	Addr string
	// ReadHeaderTimeout default DefaultReadHeaderTimeout (10s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout default DefaultReadTimeout (60s).
	ReadTimeout time.Duration
	// WriteTimeout bounds the time from the end of reading the request
	// headers to the end of the response. It is off by default, because an
	// inference may legitimately queue and run for long; per-request
	// deadlines belong to the scheduler's timeout parameter.
	WriteTimeout time.Duration
	// IdleTimeout default DefaultIdleTimeout (120s).
	IdleTimeout time.Duration
	// MaxHeaderBytes default DefaultMaxHeaderBytes (1 MiB); <= 0 takes
	// the default.
	MaxHeaderBytes int
}

// NewServer wraps h in an http.Server with the timeouts of opts, so that no
// client can hold a connection or a worker indefinitely.
func NewServer(h http.Handler, opts ServerOptions) *http.Server {
	pick := func(v, def time.Duration) time.Duration {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	maxHeader := opts.MaxHeaderBytes
	if maxHeader <= 0 {
		maxHeader = DefaultMaxHeaderBytes
	}
	return &http.Server{
		Addr:              opts.Addr,
		Handler:           recordedHeads(h),
		ConnContext:       connContext,
		ReadHeaderTimeout: pick(opts.ReadHeaderTimeout, DefaultReadHeaderTimeout),
		ReadTimeout:       pick(opts.ReadTimeout, DefaultReadTimeout),
		WriteTimeout:      pick(opts.WriteTimeout, 0),
		IdleTimeout:       pick(opts.IdleTimeout, DefaultIdleTimeout),
		MaxHeaderBytes:    maxHeader,
	}
}
