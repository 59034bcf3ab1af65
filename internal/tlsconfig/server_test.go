package tlsconfig

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/tlsconfig/tlstest"
)

func TestHandshakeVerifiesServer(t *testing.T) {
	p := newPKI(t, nil, "")
	s, _ := newServer(t, p)
	addr := serve(t, s)

	t.Run("right CA", func(t *testing.T) {
		r, err := dial(t, addr, trusting(p.serverCA))
		require.NoError(t, err)
		require.Equal(t, serialOf(t, p.opts.CertFile), r.serial)
		require.Empty(t, r.identity, "plain TLS has no client identity")
	})
	t.Run("by name localhost", func(t *testing.T) {
		cfg := trusting(p.serverCA)
		cfg.ServerName = "localhost"
		_, err := dial(t, addr, cfg)
		require.NoError(t, err)
	})
	t.Run("other CA", func(t *testing.T) {
		_, err := dial(t, addr, trusting(tlstest.NewCA(t)))
		require.ErrorContains(t, err, "certificate signed by unknown authority")
	})
	t.Run("client cert not asked for", func(t *testing.T) {
		r, err := dial(t, addr, trusting(p.serverCA, issueClient(t, p.serverCA, "alice")))
		require.NoError(t, err)
		require.Empty(t, r.identity, "a certificate that was not verified gives no identity")
	})
}

func TestMutualTLSRequire(t *testing.T) {
	clients := tlstest.NewCA(t)
	for _, mode := range []string{"", ClientAuthRequire} {
		t.Run("client_auth="+mode, func(t *testing.T) {
			p := newPKI(t, clients, mode)
			s, _ := newServer(t, p)
			addr := serve(t, s)

			t.Run("no client certificate", func(t *testing.T) {
				_, err := dial(t, addr, trusting(p.serverCA))
				require.ErrorContains(t, err, "certificate required")
			})
			t.Run("certificate from another CA", func(t *testing.T) {
				_, err := dial(t, addr, trusting(p.serverCA, issueClient(t, tlstest.NewCA(t), "mallory")))
				require.ErrorContains(t, err, "unknown certificate authority")
			})
			tests := []struct {
				name string
				cn   string
				sans []string
				want string
			}{
				{name: "URI SAN", cn: "alice", sans: []string{"alice.example", "spiffe://sluice/ns/ml/sa/alice"}, want: "spiffe://sluice/ns/ml/sa/alice"},
				{name: "DNS SAN", cn: "bob", sans: []string{"bob@example.com", "bob.svc.cluster.local", "other.example"}, want: "bob.svc.cluster.local"},
				{name: "email SAN", cn: "carol", sans: []string{"carol@example.com", "10.0.0.1"}, want: "carol@example.com"},
				{name: "common name", cn: "dave", want: "dave"},
				{name: "IP SAN only: common name", cn: "erin", sans: []string{"10.0.0.2"}, want: "erin"},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					r, err := dial(t, addr, trusting(p.serverCA, issueClient(t, clients, tt.cn, tt.sans...)))
					require.NoError(t, err)
					require.Equal(t, tt.want, r.identity)
				})
			}
		})
	}
}

func TestMutualTLSRequest(t *testing.T) {
	clients := tlstest.NewCA(t)
	p := newPKI(t, clients, ClientAuthRequest)
	s, _ := newServer(t, p)
	addr := serve(t, s)

	t.Run("no client certificate", func(t *testing.T) {
		r, err := dial(t, addr, trusting(p.serverCA))
		require.NoError(t, err)
		require.Empty(t, r.identity)
	})
	t.Run("good client certificate", func(t *testing.T) {
		r, err := dial(t, addr, trusting(p.serverCA, issueClient(t, clients, "alice", "spiffe://sluice/alice")))
		require.NoError(t, err)
		require.Equal(t, "spiffe://sluice/alice", r.identity)
	})
	t.Run("certificate from another CA", func(t *testing.T) {
		_, err := dial(t, addr, trusting(p.serverCA, issueClient(t, tlstest.NewCA(t), "mallory")))
		require.ErrorContains(t, err, "unknown certificate authority")
	})
}

func TestMinVersion(t *testing.T) {
	tests := []struct {
		min     string
		max     uint16
		wantErr string
	}{
		{min: "", max: tls.VersionTLS11, wantErr: "protocol version"},
		{min: "1.2", max: tls.VersionTLS11, wantErr: "protocol version"},
		{min: "1.2", max: tls.VersionTLS12},
		{min: "1.2", max: tls.VersionTLS13},
		{min: "1.3", max: tls.VersionTLS12, wantErr: "protocol version"},
		{min: "1.3", max: tls.VersionTLS13},
	}
	for _, tt := range tests {
		t.Run(tt.min+"/"+tls.VersionName(tt.max), func(t *testing.T) {
			p := newPKI(t, nil, "")
			p.opts.MinVersion = tt.min
			s, _ := newServer(t, p)
			addr := serve(t, s)
			cfg := trusting(p.serverCA)
			cfg.MinVersion = tls.VersionTLS10
			cfg.MaxVersion = tt.max
			r, err := dial(t, addr, cfg)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.max, r.version)
		})
	}
}

func TestReloadRewriteInPlace(t *testing.T) {
	oldClients, newClients := tlstest.NewCA(t), tlstest.NewCA(t)
	p := newPKI(t, oldClients, "")
	s, reg := newServer(t, p)
	runServer(t, s)
	addr := serve(t, s)

	alice := issueClient(t, oldClients, "alice")
	r, err := dial(t, addr, trusting(p.serverCA, alice))
	require.NoError(t, err)
	require.Equal(t, "alice", r.identity)
	oldSerial := r.serial

	// New server certificate from a new CA, new client CA bundle; the
	// files keep their modification time, so only their content tells.
	info, err := os.Stat(p.opts.CertFile)
	require.NoError(t, err)
	newServerCA := tlstest.NewCA(t)
	newSerial := reissue(t, p, newServerCA)
	require.NoError(t, os.WriteFile(p.opts.ClientCAFile, newClients.CertPEM(), 0o600))
	for _, f := range []string{p.opts.CertFile, p.opts.KeyFile, p.opts.ClientCAFile} {
		require.NoError(t, os.Chtimes(f, info.ModTime(), info.ModTime()))
	}

	bob := issueClient(t, newClients, "bob")
	eventually(t, "the new certificate and client CA are served", func() bool {
		r, err := dial(t, addr, trusting(newServerCA, bob))
		return err == nil && r.serial.Cmp(newSerial) == 0 && r.identity == "bob"
	})
	require.NotEqual(t, oldSerial, newSerial)
	_, err = dial(t, addr, trusting(newServerCA, alice))
	require.Error(t, err, "the old client CA is no longer trusted")
	_, err = dial(t, addr, trusting(p.serverCA, bob))
	require.ErrorContains(t, err, "unknown authority", "the old server certificate is no longer served")

	require.Equal(t, newSerial, s.Certificate().SerialNumber)
	require.GreaterOrEqual(t, testutil.ToFloat64(s.reloadsOK), 1.0)
	require.Zero(t, testutil.ToFloat64(s.reloadsErr))
	require.Equal(t, float64(s.Certificate().NotAfter.Unix()), testutil.ToFloat64(s.expiry))
	n, err := testutil.GatherAndCount(reg, "sluice_tls_reloads_total", "sluice_tls_certificate_expiry_timestamp_seconds")
	require.NoError(t, err)
	require.Equal(t, 3, n, "success and error series, one expiry series")
}

func TestReloadCorruptKeepsServing(t *testing.T) {
	p := newPKI(t, nil, "")
	s, _ := newServer(t, p)
	runServer(t, s)
	addr := serve(t, s)
	oldSerial := serialOf(t, p.opts.CertFile)
	good, err := os.ReadFile(p.opts.CertFile)
	require.NoError(t, err)

	// A half-written certificate: the PEM block is cut short.
	require.NoError(t, os.WriteFile(p.opts.CertFile, good[:len(good)/2], 0o600))
	eventually(t, "the corrupt file is counted", func() bool { return testutil.ToFloat64(s.reloadsErr) == 1 })
	r, err := dial(t, addr, trusting(p.serverCA))
	require.NoError(t, err)
	require.Equal(t, oldSerial, r.serial, "the previous certificate is still served")

	err = s.Reload()
	require.ErrorContains(t, err, "parse cert_file "+p.opts.CertFile)
	require.ErrorContains(t, err, "truncated")
	require.Equal(t, 2.0, testutil.ToFloat64(s.reloadsErr), "an explicit Reload reports at once")

	// Repaired: served at the next poll.
	newSerial := reissue(t, p, p.serverCA)
	eventually(t, "the repaired files are served", func() bool {
		r, err := dial(t, addr, trusting(p.serverCA))
		return err == nil && r.serial.Cmp(newSerial) == 0
	})
}

func TestReloadErrors(t *testing.T) {
	tests := []struct {
		name    string
		mangle  func(t *testing.T, p *pki)
		wantErr string
	}{
		{
			name: "key of another certificate",
			mangle: func(t *testing.T, p *pki) {
				t.Helper()
				certPEM, _ := p.serverCA.Issue(t, "server")
				require.NoError(t, os.WriteFile(p.opts.CertFile, certPEM, 0o600))
			},
			wantErr: "does not match cert_file",
		},
		{
			name: "key file removed",
			mangle: func(t *testing.T, p *pki) {
				t.Helper()
				require.NoError(t, os.Remove(p.opts.KeyFile))
			},
			wantErr: "read key_file: open ",
		},
		{
			name: "empty client CA bundle",
			mangle: func(t *testing.T, p *pki) {
				t.Helper()
				require.NoError(t, os.WriteFile(p.opts.ClientCAFile, nil, 0o600))
			},
			wantErr: "parse client_ca_file",
		},
		{
			name: "garbage key",
			mangle: func(t *testing.T, p *pki) {
				t.Helper()
				require.NoError(t, os.WriteFile(p.opts.KeyFile, []byte("not a key"), 0o600))
			},
			wantErr: "parse key_file",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPKI(t, tlstest.NewCA(t), "")
			s, _ := newServer(t, p)
			before := s.Certificate().SerialNumber
			tt.mangle(t, p)
			err := s.Reload()
			require.ErrorContains(t, err, tt.wantErr)
			require.Equal(t, before, s.Certificate().SerialNumber)
			require.Equal(t, 1.0, testutil.ToFloat64(s.reloadsErr))
			require.Zero(t, testutil.ToFloat64(s.reloadsOK))
		})
	}
}

// TestReloadSymlinkSwap lays the files out like a Kubernetes secret volume
// (tls.crt -> ..data/tls.crt, ..data -> ..<timestamp>) and updates them the
// way the kubelet does: a new timestamped directory, then an atomic rename
// of a new ..data symlink over the old one.
func TestReloadSymlinkSwap(t *testing.T) {
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	version := func(name string) {
		t.Helper()
		vdir := filepath.Join(dir, name)
		require.NoError(t, os.Mkdir(vdir, 0o700))
		certPEM, keyPEM := ca.Issue(t, "server")
		require.NoError(t, os.WriteFile(filepath.Join(vdir, "tls.crt"), certPEM, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(vdir, "tls.key"), keyPEM, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(vdir, "ca.crt"), ca.CertPEM(), 0o600))
		tmp := filepath.Join(dir, "..data_tmp")
		require.NoError(t, os.Symlink(name, tmp))
		require.NoError(t, os.Rename(tmp, filepath.Join(dir, "..data")))
	}
	version("..2026_01_01_00_00_00.1")
	for _, f := range []string{"tls.crt", "tls.key", "ca.crt"} {
		require.NoError(t, os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)))
	}
	p := &pki{dir: dir, serverCA: ca, opts: ServerOptions{
		CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"), ClientCAFile: filepath.Join(dir, "ca.crt"),
	}}
	s, _ := newServer(t, p)
	runServer(t, s)
	addr := serve(t, s)
	alice := issueClient(t, ca, "alice")
	r, err := dial(t, addr, trusting(ca, alice))
	require.NoError(t, err)
	first := r.serial

	version("..2026_01_01_00_10_00.2")
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "..2026_01_01_00_00_00.1")))
	want := serialOf(t, p.opts.CertFile)
	require.NotEqual(t, first, want)
	eventually(t, "the swapped-in certificate is served", func() bool {
		r, err := dial(t, addr, trusting(ca, alice))
		return err == nil && r.serial.Cmp(want) == 0
	})
	require.Zero(t, testutil.ToFloat64(s.reloadsErr))
}

// TestPollReportsSettledFailuresOnce runs Run on a fake clock: a broken
// pair is reported only after it stayed unchanged for one interval, then
// never again; a writer that finishes within an interval raises nothing.
func TestPollReportsSettledFailuresOnce(t *testing.T) {
	p := newPKI(t, nil, "")
	s, _ := newServer(t, p)
	goodCert, err := os.ReadFile(p.opts.CertFile)
	require.NoError(t, err)
	synctest.Test(t, func(t *testing.T) {
		s.Interval = time.Second
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		// The test wakes 1 ms after each poll.
		time.Sleep(time.Millisecond)
		synctest.Wait()
		tick := func() {
			time.Sleep(time.Second)
			synctest.Wait()
		}

		// A writer caught between the certificate and the key.
		newCert, newKey := p.serverCA.Issue(t, "server")
		require.NoError(t, os.WriteFile(p.opts.CertFile, newCert, 0o600))
		tick()
		require.Zero(t, testutil.ToFloat64(s.reloadsErr), "one poll of a mismatched pair is not reported")
		require.NoError(t, os.WriteFile(p.opts.KeyFile, newKey, 0o600))
		tick()
		require.Equal(t, 1.0, testutil.ToFloat64(s.reloadsOK))
		require.Zero(t, testutil.ToFloat64(s.reloadsErr))

		// A file left broken: reported once.
		require.NoError(t, os.WriteFile(p.opts.CertFile, []byte("-----BEGIN CERTIFICATE-----\nAAAA"), 0o600))
		tick()
		require.Zero(t, testutil.ToFloat64(s.reloadsErr))
		for range 5 {
			tick()
		}
		require.Equal(t, 1.0, testutil.ToFloat64(s.reloadsErr))

		// Back to an older good version: served again.
		require.NoError(t, os.WriteFile(p.opts.CertFile, goodCert, 0o600))
		tick()
		require.Equal(t, 1.0, testutil.ToFloat64(s.reloadsErr), "the old certificate with the new key is broken too")
		tick()
		require.Equal(t, 2.0, testutil.ToFloat64(s.reloadsErr))
		require.NoError(t, os.WriteFile(p.opts.CertFile, newCert, 0o600))
		tick()
		require.Equal(t, 1.0, testutil.ToFloat64(s.reloadsOK), "the served content again: nothing to reload")
		require.Equal(t, serialOf(t, p.opts.CertFile), s.Certificate().SerialNumber)

		cancel()
		require.NoError(t, <-done)
	})
}

// TestResumptionAfterCARotation checks that a TLS session authenticated
// by a client CA that was since removed cannot be resumed.
func TestResumptionAfterCARotation(t *testing.T) {
	oldClients := tlstest.NewCA(t)
	p := newPKI(t, oldClients, "")
	s, _ := newServer(t, p)
	addr := serve(t, s)

	cfg := trusting(p.serverCA, issueClient(t, oldClients, "alice"))
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	r, err := dial(t, addr, cfg)
	require.NoError(t, err)
	require.False(t, r.resumed)
	r, err = dial(t, addr, cfg)
	require.NoError(t, err)
	require.True(t, r.resumed, "the session is resumed while the CA is trusted")
	require.Equal(t, "alice", r.identity, "a resumed session keeps its identity")

	require.NoError(t, os.WriteFile(p.opts.ClientCAFile, tlstest.NewCA(t).CertPEM(), 0o600))
	require.NoError(t, s.Reload())
	_, err = dial(t, addr, cfg)
	require.Error(t, err, "neither resumption nor a full handshake may succeed")
}

func TestRunStopsWithContext(t *testing.T) {
	s, _ := newServer(t, newPKI(t, nil, ""))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func TestNewServerErrors(t *testing.T) {
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	cert, key := ca.WriteFiles(t, dir, "server")
	caFile := ca.WriteCAFile(t, dir, "ca")
	empty := filepath.Join(dir, "empty.pem")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	_, otherKey := ca.WriteFiles(t, dir, "other")

	tests := []struct {
		name    string
		opts    ServerOptions
		wantErr string
	}{
		{name: "off", opts: ServerOptions{}, wantErr: "tls is off"},
		{name: "invalid", opts: ServerOptions{CertFile: cert}, wantErr: "key_file: required with cert_file"},
		{name: "missing cert", opts: ServerOptions{CertFile: filepath.Join(dir, "nope.crt"), KeyFile: key}, wantErr: "read cert_file: open " + filepath.Join(dir, "nope.crt")},
		{name: "swapped", opts: ServerOptions{CertFile: key, KeyFile: cert}, wantErr: "parse cert_file " + key + ": no CERTIFICATE block, only a private key (cert and key files swapped?)"},
		{name: "key is a certificate", opts: ServerOptions{CertFile: cert, KeyFile: caFile}, wantErr: "parse key_file " + caFile + ": no PRIVATE KEY block, only certificates"},
		{name: "mismatch", opts: ServerOptions{CertFile: cert, KeyFile: otherKey}, wantErr: "key_file " + otherKey + " does not match cert_file " + cert},
		{name: "empty client CA", opts: ServerOptions{CertFile: cert, KeyFile: key, ClientCAFile: empty}, wantErr: "parse client_ca_file " + empty + ": no CERTIFICATE block found"},
		{name: "client CA is a key", opts: ServerOptions{CertFile: cert, KeyFile: key, ClientCAFile: key}, wantErr: "parse client_ca_file " + key},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewServer("gateway", tt.opts, nil, nil)
			require.ErrorContains(t, err, "load tls for gateway: ")
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestMetricsShared(t *testing.T) {
	reg := prometheus.NewRegistry()
	m1, m2 := NewMetrics(reg), NewMetrics(reg)
	p := newPKI(t, nil, "")
	_, err := NewServer("gateway", p.opts, nil, m1)
	require.NoError(t, err)
	_, err = NewServer("admin", p.opts, nil, m2)
	require.NoError(t, err)
	n, err := testutil.GatherAndCount(reg, "sluice_tls_certificate_expiry_timestamp_seconds")
	require.NoError(t, err)
	require.Equal(t, 2, n, "one expiry series per listener")
	n, err = testutil.GatherAndCount(reg, "sluice_tls_reloads_total")
	require.NoError(t, err)
	require.Equal(t, 4, n)
}

// TestHTTP serves HTTP/2 and HTTP/1.1 through Listener and through
// http.Server.ServeTLS with Config, the two ways a listener is wired.
func TestHTTP(t *testing.T) {
	clients := tlstest.NewCA(t)
	p := newPKI(t, clients, ClientAuthRequest)
	s, _ := newServer(t, p)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto+" "+HTTPIdentity(r))
	})
	for _, wiring := range []string{"Listener", "ServeTLS"} {
		t.Run(wiring, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)}
			done := make(chan error, 1)
			if wiring == "Listener" {
				go func() { done <- srv.Serve(s.Listener(ln)) }()
			} else {
				srv.TLSConfig = s.Config()
				go func() { done <- srv.ServeTLS(ln, "", "") }()
			}
			t.Cleanup(func() {
				require.NoError(t, srv.Shutdown(context.WithoutCancel(t.Context())))
				require.ErrorIs(t, <-done, http.ErrServerClosed)
			})
			for _, h2 := range []bool{true, false} {
				cfg := trusting(p.serverCA, issueClient(t, clients, "alice", "spiffe://sluice/alice"))
				tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: h2}
				if !h2 {
					tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
				}
				client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
				req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+ln.Addr().String()+"/", nil)
				require.NoError(t, err)
				resp, err := client.Do(req)
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				require.NoError(t, resp.Body.Close())
				tr.CloseIdleConnections()
				want := "HTTP/1.1 spiffe://sluice/alice"
				if h2 {
					want = "HTTP/2.0 spiffe://sluice/alice"
				}
				require.Equal(t, want, string(body))
			}
		})
	}
}

func TestDescribeAndValidate(t *testing.T) {
	tests := []struct {
		name     string
		opts     ServerOptions
		describe string
		wantErr  []string // substrings; none means valid
	}{
		{name: "off", opts: ServerOptions{}, describe: "off"},
		{name: "tls", opts: ServerOptions{CertFile: "c", KeyFile: "k"}, describe: "tls"},
		{name: "tls 1.3", opts: ServerOptions{CertFile: "c", KeyFile: "k", MinVersion: "1.3"}, describe: "tls"},
		{name: "mtls default", opts: ServerOptions{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}, describe: "mtls (client cert required)"},
		{name: "mtls require", opts: ServerOptions{CertFile: "c", KeyFile: "k", ClientCAFile: "ca", ClientAuth: "require"}, describe: "mtls (client cert required)"},
		{name: "mtls request", opts: ServerOptions{CertFile: "c", KeyFile: "k", ClientCAFile: "ca", ClientAuth: "request"}, describe: "mtls (client cert optional)"},
		{name: "explicit none", opts: ServerOptions{CertFile: "c", KeyFile: "k", ClientAuth: "none"}, describe: "tls"},
		{name: "cert without key", opts: ServerOptions{CertFile: "c"}, describe: "tls", wantErr: []string{"key_file: required with cert_file"}},
		{name: "key without cert", opts: ServerOptions{KeyFile: "k"}, describe: "tls", wantErr: []string{"cert_file: required with key_file"}},
		{
			name: "options without certificate", opts: ServerOptions{ClientCAFile: "ca", MinVersion: "1.3"}, describe: "off",
			wantErr: []string{"cert_file: required with client_ca_file, min_version"},
		},
		{
			name: "require without CA", opts: ServerOptions{CertFile: "c", KeyFile: "k", ClientAuth: "require"}, describe: "tls",
			wantErr: []string{`client_auth: "require" needs client_ca_file`},
		},
		{
			name: "request without CA", opts: ServerOptions{CertFile: "c", KeyFile: "k", ClientAuth: "request"}, describe: "tls",
			wantErr: []string{`client_auth: "request" needs client_ca_file`},
		},
		{
			name: "none with CA", opts: ServerOptions{CertFile: "c", KeyFile: "k", ClientCAFile: "ca", ClientAuth: "none"}, describe: "tls",
			wantErr: []string{`client_auth: "none" contradicts client_ca_file`},
		},
		{
			name: "every problem at once", opts: ServerOptions{CertFile: "c", ClientAuth: "always", MinVersion: "1.1"}, describe: "tls",
			wantErr: []string{"key_file: required with cert_file", `client_auth: "always" unknown (want none, request or require)`, `min_version: "1.1" not supported (want "1.2" or "1.3")`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.describe, tt.opts.Describe())
			err := tt.opts.Validate()
			if len(tt.wantErr) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, want := range tt.wantErr {
				require.ErrorContains(t, err, want)
			}
			require.Len(t, strings.Split(err.Error(), "\n"), len(tt.wantErr))
		})
	}
}
