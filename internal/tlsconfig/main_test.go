package tlsconfig

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"math/big"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
	"github.com/sluice-ml/sluice/internal/tlsconfig/tlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pki is one listener's files in a temporary directory.
type pki struct {
	dir      string
	serverCA *tlstest.CA
	opts     ServerOptions
}

// newPKI writes a server certificate issued by a fresh CA; with clientCA
// non-nil it also writes that CA as client_ca_file.
func newPKI(t *testing.T, clientCA *tlstest.CA, clientAuth string) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), serverCA: tlstest.NewCA(t)}
	p.opts.CertFile, p.opts.KeyFile = p.serverCA.WriteFiles(t, p.dir, "server")
	if clientCA != nil {
		p.opts.ClientCAFile = clientCA.WriteCAFile(t, p.dir, "clients")
	}
	p.opts.ClientAuth = clientAuth
	return p
}

// newServer builds a Server over p with a fresh registry.
func newServer(t *testing.T, p *pki) (*Server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := NewServer("test", p.opts, nil, NewMetrics(reg))
	require.NoError(t, err)
	return s, reg
}

// serve accepts TLS connections on a loopback port with s.Listener; each
// connection is answered with one line: the client's Identity.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	tln := s.Listener(ln)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				tc := c.(*tls.Conn)
				if err := tc.Handshake(); err != nil {
					return
				}
				cs := tc.ConnectionState()
				_, _ = fmt.Fprintf(c, "%s\n", Identity(&cs))
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// reply is what a client saw of one connection.
type reply struct {
	identity string   // as the server saw it
	serial   *big.Int // of the server's leaf certificate
	resumed  bool
	version  uint16
	alpn     string
}

// dial connects to addr with cfg, completes the handshake and reads the
// server's line: with TLS 1.3 a rejected client certificate shows only
// when the client reads.
func dial(t *testing.T, addr string, cfg *tls.Config) (reply, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	d := tls.Dialer{Config: cfg}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return reply{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return reply{}, err
	}
	cs := c.(*tls.Conn).ConnectionState()
	return reply{
		identity: strings.TrimSuffix(line, "\n"),
		serial:   cs.PeerCertificates[0].SerialNumber,
		resumed:  cs.DidResume,
		version:  cs.Version,
		alpn:     cs.NegotiatedProtocol,
	}, nil
}

// trusting returns a client config that trusts ca and presents cert, if
// given, whatever CAs the server asks for (a Go client given Certificates
// would withhold a certificate the server's CA list does not cover, and
// the server's own check would go untested).
func trusting(ca *tlstest.CA, cert ...tls.Certificate) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: ca.Pool()}
	if len(cert) > 0 {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert[0], nil }
	}
	return cfg
}

// issueClient issues a client certificate with exactly the SANs given.
func issueClient(t *testing.T, ca *tlstest.CA, cn string, sans ...string) tls.Certificate {
	t.Helper()
	certPEM, keyPEM := ca.IssueClient(t, cn, sans...)
	return tlstest.KeyPair(t, certPEM, keyPEM)
}

// serialOf returns the serial of the certificate in a PEM file.
func serialOf(t *testing.T, certFile string) *big.Int {
	t.Helper()
	data, err := os.ReadFile(certFile)
	require.NoError(t, err)
	certs, err := parseCertificates(data, 1)
	require.NoError(t, err)
	return certs[0].SerialNumber
}

// reissue writes a new server certificate from ca over p's files, in
// place (truncate and write, like cp).
func reissue(t *testing.T, p *pki, ca *tlstest.CA) *big.Int {
	t.Helper()
	certPEM, keyPEM := ca.Issue(t, "server")
	require.NoError(t, os.WriteFile(p.opts.CertFile, certPEM, 0o600))
	require.NoError(t, os.WriteFile(p.opts.KeyFile, keyPEM, 0o600))
	return serialOf(t, p.opts.CertFile)
}

// runServer runs s.Run until the test ends.
func runServer(t *testing.T, s *Server) {
	t.Helper()
	s.Interval = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// eventually polls cond every 10 ms for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	harness.WaitFor(t, 10*time.Second, 10*time.Millisecond, what, func() (bool, string) { return cond(), "not yet" })
}
