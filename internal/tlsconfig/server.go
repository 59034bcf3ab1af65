package tlsconfig

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultInterval is how often [Server.Run] polls the files by default.
const DefaultInterval = time.Second

// nextProtos are offered by ALPN on every listener: HTTP/2 (also gRPC)
// first, then HTTP/1.1.
var nextProtos = []string{"h2", "http/1.1"}

// Server holds the TLS material of one listener and serves the newest good
// version of it to each new handshake. It is safe for concurrent use.
type Server struct {
	// Interval is how often Run polls the files; zero means
	// DefaultInterval. Set it before Run starts.
	Interval time.Duration

	name       string
	opts       ServerOptions
	clientAuth tls.ClientAuthType
	minVersion uint16
	logger     *slog.Logger
	reloadsOK  prometheus.Counter
	reloadsErr prometheus.Counter
	expiry     prometheus.Gauge

	cur atomic.Pointer[material] // never nil after NewServer

	mu sync.Mutex // serializes loads; protects pending and failed
	// pending is the content of a poll that failed to load, not yet
	// reported: a writer may still be half-way through the files.
	pending *fileSums
	// failed is the content last reported as bad; it is not reported again.
	failed *fileSums
}

// material is one loaded version of the files.
type material struct {
	cert   tls.Certificate
	config *tls.Config // what GetConfigForClient hands to handshakes
	sums   fileSums
}

// fileSums identifies the content of the files (or the error reading them).
type fileSums struct{ cert, key, ca [sha256.Size]byte }

// contents is one consistent read of the files.
type contents struct {
	cert, key, ca []byte
	sums          fileSums
}

// NewServer validates o and loads its files; the error names the file at
// fault. name is the listener's name in logs and metrics ("gateway",
// "admin", "models_http", ...). A nil logger discards logs; a nil m keeps
// the metrics unregistered.
func NewServer(name string, o ServerOptions, logger *slog.Logger, m *Metrics) (*Server, error) {
	if !o.Enabled() {
		return nil, fmt.Errorf("load tls for %s: tls is off (no cert_file)", name)
	}
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("load tls for %s: %w", name, err)
	}
	minVersion, _ := o.TLSMinVersion() // checked by Validate
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	s := &Server{
		name:       name,
		opts:       o,
		clientAuth: o.ClientAuthType(),
		minVersion: minVersion,
		logger:     logger.With("component", "tlsconfig", "listener", name),
		reloadsOK:  m.reloads.WithLabelValues(name, "success"),
		reloadsErr: m.reloads.WithLabelValues(name, "error"),
		expiry:     m.expiry.WithLabelValues(name),
	}
	c, err := s.read()
	if err != nil {
		return nil, fmt.Errorf("load tls for %s: %w", name, err)
	}
	mat, err := s.build(c)
	if err != nil {
		return nil, fmt.Errorf("load tls for %s: %w", name, err)
	}
	s.install(mat)
	return s, nil
}

// Config returns a TLS configuration for http.Server.TLSConfig,
// tls.NewListener or grpc's credentials.NewTLS. Each call returns a new
// Config the caller may keep; every handshake on it is served, through
// GetConfigForClient, the material loaded last (certificate chain, client
// CA pool), so reloads apply to new connections without a restart.
// Because of that, only the session ticket settings of the returned Config
// are honoured; its certificate, client auth, version and ALPN fields are
// informational (NextProtos is always "h2", "http/1.1").
func (s *Server) Config() *tls.Config {
	return &tls.Config{
		MinVersion: s.minVersion,
		NextProtos: append([]string(nil), nextProtos...),
		ClientAuth: s.clientAuth,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load().config, nil
		},
		// Unused by handshakes (GetConfigForClient wins), but callers that
		// check for a certificate, like http.Server.ServeTLS, see one.
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return &s.cur.Load().cert, nil
		},
	}
}

// Listener wraps ln so that its connections are TLS with [Server.Config].
func (s *Server) Listener(ln net.Listener) net.Listener {
	return tls.NewListener(ln, s.Config())
}

// Certificate returns the leaf certificate served now.
func (s *Server) Certificate() *x509.Certificate { return s.cur.Load().cert.Leaf }

// Reload re-reads the files now and serves them to new handshakes. When a
// file cannot be read or parsed, or the key does not match the
// certificate, it keeps the material it had, logs a warning, counts
// result="error" and returns the error.
func (s *Server) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.read()
	if err == nil {
		var mat *material
		if mat, err = s.build(c); err == nil {
			s.swap(mat)
			return nil
		}
	}
	s.reportFailure(errorSums(c, err), err)
	return err
}

// Run polls the files every Interval until ctx ends, and reloads them when
// their content changed (see the package documentation); it returns nil
// when ctx ends.
func (s *Server) Run(ctx context.Context) error {
	interval := s.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s.poll()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// poll reloads the files when their content differs from what is served.
// Content that fails to load is reported only when a second poll finds it
// unchanged, so a writer caught between the certificate and the key does
// not raise a false alarm; once reported, it is not reported again.
func (s *Server) poll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.read()
	sums := errorSums(c, err)
	if err == nil && sums == s.cur.Load().sums {
		s.pending, s.failed = nil, nil
		return
	}
	if s.failed != nil && *s.failed == sums {
		return
	}
	if err == nil {
		var mat *material
		if mat, err = s.build(c); err == nil {
			s.swap(mat)
			return
		}
	}
	if s.pending == nil || *s.pending != sums {
		s.pending = &sums
		s.logger.Debug("tls files do not load; retrying at the next poll", "err", err)
		return
	}
	s.reportFailure(sums, err)
}

// reportFailure logs and counts a failed load. s.mu is held.
func (s *Server) reportFailure(sums fileSums, err error) {
	s.pending, s.failed = nil, &sums
	s.reloadsErr.Inc()
	s.logger.Warn("tls reload failed; serving the previous certificate", "err", err,
		"serial", s.cur.Load().cert.Leaf.SerialNumber.Text(16))
}

// swap serves mat from now on. s.mu is held.
func (s *Server) swap(mat *material) {
	s.pending, s.failed = nil, nil
	s.install(mat)
	s.reloadsOK.Inc()
	leaf := mat.cert.Leaf
	s.logger.Info("tls reloaded", "subject", leaf.Subject.String(), "serial", leaf.SerialNumber.Text(16),
		"not_after", leaf.NotAfter, "client_ca", s.opts.ClientCAFile != "")
}

func (s *Server) install(mat *material) {
	s.cur.Store(mat)
	leaf := mat.cert.Leaf
	s.expiry.Set(float64(leaf.NotAfter.Unix()))
	now := time.Now()
	switch {
	case now.After(leaf.NotAfter):
		s.logger.Warn("tls certificate has expired", "serial", leaf.SerialNumber.Text(16), "not_after", leaf.NotAfter)
	case now.Before(leaf.NotBefore):
		s.logger.Warn("tls certificate is not valid yet", "serial", leaf.SerialNumber.Text(16), "not_before", leaf.NotBefore)
	}
}

// maxReadTries bounds the re-reads of read while the files keep changing.
const maxReadTries = 3

// read reads the files as one consistent version. A Kubernetes secret
// volume swaps all files at once by renaming its ..data symlink; reading
// the certificate again after the others and retrying when it changed
// keeps a swap between two reads from pairing an old file with a new one.
func (s *Server) read() (contents, error) {
	var c contents
	for range maxReadTries {
		var err error
		if c.cert, err = readPEMFile(s.opts.CertFile); err != nil {
			return contents{}, fmt.Errorf("read cert_file: %w", err)
		}
		if c.key, err = readPEMFile(s.opts.KeyFile); err != nil {
			return contents{}, fmt.Errorf("read key_file: %w", err)
		}
		if s.opts.ClientCAFile != "" {
			if c.ca, err = readPEMFile(s.opts.ClientCAFile); err != nil {
				return contents{}, fmt.Errorf("read client_ca_file: %w", err)
			}
		}
		again, err := readPEMFile(s.opts.CertFile)
		if err != nil {
			return contents{}, fmt.Errorf("read cert_file: %w", err)
		}
		c.sums = fileSums{cert: sha256.Sum256(c.cert), key: sha256.Sum256(c.key), ca: sha256.Sum256(c.ca)}
		if sha256.Sum256(again) == c.sums.cert {
			break
		}
	}
	// After maxReadTries the files still change; build checks that the
	// pair matches, and the next poll sees the settled content.
	return c, nil
}

// errorSums identifies what a poll found: the content, or the read error.
func errorSums(c contents, err error) fileSums {
	if err != nil && c.cert == nil {
		return fileSums{cert: sha256.Sum256([]byte(err.Error()))}
	}
	return c.sums
}

// build parses c into servable material; the error names the file.
func (s *Server) build(c contents) (*material, error) {
	cert, perr := parseKeyPair(c.cert, c.key)
	if perr != nil {
		return nil, perr.inFiles(s.opts.CertFile, s.opts.KeyFile)
	}
	var pool *x509.CertPool
	if s.opts.ClientCAFile != "" {
		var err error
		if pool, err = ParseCAPool(c.ca); err != nil {
			return nil, fmt.Errorf("parse client_ca_file %s: %w", s.opts.ClientCAFile, err)
		}
	}
	return &material{
		cert: cert,
		config: &tls.Config{
			MinVersion:   s.minVersion,
			Certificates: []tls.Certificate{cert},
			ClientAuth:   s.clientAuth,
			ClientCAs:    pool,
			NextProtos:   nextProtos,
		},
		sums: c.sums,
	}, nil
}
