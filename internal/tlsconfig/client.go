package tlsconfig

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"sync"
	"time"
)

// clientRecheck is how often, at most, a client handshake re-reads the
// client certificate files.
const clientRecheck = time.Second

// ClientConfig builds a TLS client configuration (TLS 1.2 minimum) from
// o, reading the files now; the error names the file at fault. The CA
// bundle is read once. The client certificate is re-read lazily: a
// handshake more than a second after the last check reads the two files
// again and presents the new pair when it parses and matches; a pair that
// does not keeps the previous one in use.
func ClientConfig(o ClientOptions) (*tls.Config, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: o.ServerName,
		// Opt-in through insecure_skip_verify; Warnings reports it.
		InsecureSkipVerify: o.InsecureSkipVerify, //nolint:gosec // G402: explicit, warned-about configuration
	}
	if o.CAFile != "" {
		data, err := readPEMFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read ca_file: %w", err)
		}
		if cfg.RootCAs, err = ParseCAPool(data); err != nil {
			return nil, fmt.Errorf("parse ca_file %s: %w", o.CAFile, err)
		}
	}
	if o.CertFile != "" {
		cc := &clientCert{certFile: o.CertFile, keyFile: o.KeyFile}
		if err := cc.load(); err != nil {
			return nil, err
		}
		cc.checked = time.Now()
		cfg.GetClientCertificate = cc.get
	}
	return cfg, nil
}

// clientCert is a client certificate pair re-read lazily from its files.
type clientCert struct {
	certFile, keyFile string

	mu              sync.Mutex // protects the fields below
	cert            *tls.Certificate
	certPEM, keyPEM []byte
	checked         time.Time
}

// get is tls.Config.GetClientCertificate. The server's acceptable CAs are
// not consulted: there is one pair, and the server's verdict is clearer
// than an empty certificate.
func (c *clientCert) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.checked) >= clientRecheck {
		c.checked = time.Now()
		_ = c.loadLocked() // on error the previous pair stays in use
	}
	return c.cert, nil
}

func (c *clientCert) load() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loadLocked()
}

func (c *clientCert) loadLocked() error {
	certPEM, err := readPEMFile(c.certFile)
	if err != nil {
		return fmt.Errorf("read cert_file: %w", err)
	}
	keyPEM, err := readPEMFile(c.keyFile)
	if err != nil {
		return fmt.Errorf("read key_file: %w", err)
	}
	if c.cert != nil && bytes.Equal(certPEM, c.certPEM) && bytes.Equal(keyPEM, c.keyPEM) {
		return nil
	}
	cert, perr := parseKeyPair(certPEM, keyPEM)
	if perr != nil {
		return perr.inFiles(c.certFile, c.keyFile)
	}
	c.cert, c.certPEM, c.keyPEM = &cert, certPEM, keyPEM
	return nil
}
