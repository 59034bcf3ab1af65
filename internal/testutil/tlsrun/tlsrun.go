// Package tlsrun gives tests TLS peers to connect to: a set of certificate
// files (a CA, a server and a client certificate it issued, and an
// unrelated CA) and private redis-server and nats-server processes that
// serve only TLS on free loopback ports. It is test support: nothing
// outside tests imports it.
//
// A process belongs to the test that started it: it is killed by its pid
// and waited for when the test ends (or by Stop). A missing binary fails
// the test; it never skips.
package tlsrun

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
	"github.com/sluice-ml/sluice/internal/tlsconfig/tlstest"
)

// ClientIdentity is the subject common name of Files.ClientCert.
const ClientIdentity = "sluice-client"

// Files are PEM files in a test's temporary directory.
type Files struct {
	// Dir holds the files.
	Dir string
	// CA issued the server and client certificates.
	CA *tlstest.CA
	// CAFile is CA's certificate.
	CAFile string
	// OtherCAFile is the certificate of an unrelated CA: a client trusting
	// only it fails to verify the server.
	OtherCAFile string
	// ServerCert and ServerKey are valid for 127.0.0.1, ::1 and localhost.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are a client certificate (clientAuth only)
	// whose identity is ClientIdentity.
	ClientCert, ClientKey string
}

// NewFiles makes a fresh CA and writes the files to a new temporary
// directory.
func NewFiles(tb testing.TB) *Files {
	tb.Helper()
	dir := tb.TempDir()
	ca := tlstest.NewCA(tb)
	f := &Files{Dir: dir, CA: ca, CAFile: ca.WriteCAFile(tb, dir, "ca")}
	f.OtherCAFile = tlstest.NewCA(tb).WriteCAFile(tb, dir, "other-ca")
	f.ServerCert, f.ServerKey = ca.WriteFiles(tb, dir, "server")
	certPEM, keyPEM := ca.IssueClient(tb, ClientIdentity)
	f.ClientCert, f.ClientKey = filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	for path, data := range map[string][]byte{f.ClientCert: certPEM, f.ClientKey: keyPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			tb.Fatalf("tlsrun: %v", err)
		}
	}
	return f
}

// ClientConfig returns a client configuration that trusts CA and, with
// clientCert, presents the client certificate.
func (f *Files) ClientConfig(tb testing.TB, clientCert bool) *tls.Config {
	tb.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.CA.CertPEM())
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	if clientCert {
		pair, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
		if err != nil {
			tb.Fatalf("tlsrun: client key pair: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// Server is a private server process.
type Server struct {
	// Addr is the server's 127.0.0.1:port.
	Addr string
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has been waited for
}

// Stop kills the server by its pid and waits for it to exit. It is
// idempotent.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// RedisOptions configure StartRedis.
type RedisOptions struct {
	// RequireClientCert makes the server refuse clients without a
	// certificate issued by the CA (tls-auth-clients yes).
	RequireClientCert bool
}

// StartRedis starts redis-server serving TLS only (port 0, tls-port) on a
// free 127.0.0.1 port with f's server certificate, and waits until it
// answers PING over TLS.
func StartRedis(tb testing.TB, f *Files, opts RedisOptions) *Server {
	tb.Helper()
	bin := lookPath(tb, "redis-server")
	auth := "no"
	if opts.RequireClientCert {
		auth = "yes"
	}
	port := freePort(tb)
	dir := tb.TempDir()
	s := start(tb, bin, port,
		"--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--tls-cert-file", f.ServerCert, "--tls-key-file", f.ServerKey,
		"--tls-ca-cert-file", f.CAFile, "--tls-auth-clients", auth,
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	c := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: f.ClientConfig(tb, true), MaxRetries: -1})
	defer c.Close()
	waitReady(tb, s, "redis-server", func(ctx context.Context) error { return c.Ping(ctx).Err() })
	return s
}

// NATSOptions configure StartNATS.
type NATSOptions struct {
	// RequireClientCert makes the server refuse clients without a
	// certificate issued by the CA (--tlsverify).
	RequireClientCert bool
}

// StartNATS starts nats-server with JetStream (its store in a temporary
// directory), serving TLS only on a free 127.0.0.1 port with f's server
// certificate, and waits until JetStream answers over TLS. The URL is
// "nats://" + Addr.
func StartNATS(tb testing.TB, f *Files, opts NATSOptions) *Server {
	tb.Helper()
	bin := lookPath(tb, "nats-server")
	dir := tb.TempDir()
	// -p -1: the server picks a free port and writes it to its ports file.
	args := []string{
		"-js", "-sd", dir, "-a", "127.0.0.1", "-p", "-1", "--ports_file_dir", dir,
		"-l", filepath.Join(dir, "nats.log"),
		"--tls", "--tlscert", f.ServerCert, "--tlskey", f.ServerKey,
	}
	if opts.RequireClientCert {
		args = append(args, "--tlsverify", "--tlscacert", f.CAFile)
	}
	s := start(tb, bin, 0, args...)
	waitReady(tb, s, "nats-server", func(ctx context.Context) error {
		if s.Addr == "" {
			port, err := harness.NATSPort(dir, bin, s.cmd.Process.Pid)
			if err != nil {
				return err
			}
			s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		}
		nc, err := nats.Connect("nats://"+s.Addr, nats.Secure(f.ClientConfig(tb, true)), nats.Timeout(time.Second))
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		_, err = js.AccountInfo(ctx)
		return err
	})
	return s
}

func lookPath(tb testing.TB, name string) string {
	tb.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/bin", "/usr/bin"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	tb.Fatalf("tlsrun: %s is not installed", name)
	return ""
}

// freePort returns a loopback port that was free a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("tlsrun: %v", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	return port
}

// start runs bin with args; port 0 leaves Addr for the caller to fill in
// once the server has said which port it bound.
func start(tb testing.TB, bin string, port int, args ...string) *Server {
	tb.Helper()
	cmd := exec.CommandContext(context.Background(), bin, args...)
	if err := cmd.Start(); err != nil {
		tb.Fatalf("tlsrun: start %s: %v", bin, err)
	}
	s := &Server{cmd: cmd, done: make(chan struct{})}
	if port != 0 { // 0: the caller learns the port once the server runs
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	go func() { _ = cmd.Wait(); close(s.done) }()
	tb.Cleanup(s.Stop)
	return s
}

// waitReady polls ping until it succeeds, the process exits or 15 s pass.
func waitReady(tb testing.TB, s *Server, name string, ping func(context.Context) error) {
	tb.Helper()
	harness.WaitFor(tb, 15*time.Second, 25*time.Millisecond, "tlsrun: "+name+" on "+s.Addr+" answering over TLS", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := ping(ctx)
		cancel()
		if err == nil {
			return true, ""
		}
		select {
		case <-s.done:
			tb.Fatalf("tlsrun: %s on %s exited before answering: %v", name, s.Addr, err)
		default:
		}
		return false, err.Error()
	})
}
