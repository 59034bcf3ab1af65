// Package objstoretest starts real object-storage servers for tests: an
// S3-compatible server (gofakes3), the GCS emulator (fake-gcs-server) and
// Azurite (installed by scripts/setup.sh), each on 127.0.0.1. Each Server
// can be stopped and started again on the same port with its data kept,
// for outage drills. Credentials are random per server, so a test can look
// for them in logs.
package objstoretest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/sluice-ml/sluice/internal/objstore"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// Server is one running object-storage server with one bucket.
type Server struct {
	// Scheme is objstore.SchemeS3, SchemeGCS or SchemeAzure.
	Scheme string
	// Bucket is the bucket (Azure container) the server was started with.
	Bucket string
	// Env holds the variables that reach the server: credentials and
	// emulator endpoints, as NAME=value.
	Env []string
	// Secrets are the credential values in Env.
	Secrets []string

	addr    string
	account string // Azure only
	start   func(tb testing.TB)
	stop    func()
	mu      sync.Mutex // protects running
	running bool
}

// URI returns the location of prefix inside the server's bucket, in the
// form --model-repository takes.
func (s *Server) URI(prefix string) string {
	prefix = strings.Trim(prefix, "/")
	var u string
	switch s.Scheme {
	case objstore.SchemeS3:
		u = "s3://" + s.addr + "/" + s.Bucket
	case objstore.SchemeGCS:
		u = "gs://" + s.Bucket
	default:
		u = "as://" + s.account + "/" + s.Bucket
	}
	if prefix != "" {
		u += "/" + prefix
	}
	return u
}

// Getenv reads the server's Env, for objstore.Options.
func (s *Server) Getenv(name string) string {
	for _, kv := range s.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// Open opens prefix of the server's bucket.
func (s *Server) Open(tb testing.TB, prefix string) *objstore.Bucket {
	tb.Helper()
	b, err := objstore.OpenURI(tb.Context(), s.URI(prefix), objstore.Options{Getenv: s.Getenv})
	if err != nil {
		tb.Fatalf("open %s: %v", s.URI(prefix), err)
	}
	tb.Cleanup(func() { _ = b.Close() })
	return b
}

// Stop stops the server; connections to it are refused until Start.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		s.stop()
		s.running = false
	}
}

// Start starts a stopped server again on the same port, with its data.
func (s *Server) Start(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return
	}
	s.start(tb)
	s.running = true
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// freePort returns a loopback port nothing listens on now.
func freePort(tb testing.TB) string {
	tb.Helper()
	ln, err := new(net.ListenConfig).Listen(tb.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// listenLoopback listens on a loopback port the system picks.
func listenLoopback(tb testing.TB) net.Listener {
	tb.Helper()
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return ln
}

// serveHTTP serves h on ln and returns start and stop functions for
// restarts on ln's address.
func serveHTTP(tb testing.TB, ln net.Listener, h http.Handler) (start func(testing.TB), stop func()) {
	tb.Helper()
	addr := ln.Addr().String()
	var mu sync.Mutex // protects srv
	var srv *http.Server
	serve := func(ln net.Listener) {
		s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		mu.Lock()
		srv = s
		mu.Unlock()
		go func() { _ = s.Serve(ln) }()
	}
	start = func(tb testing.TB) {
		tb.Helper()
		// The port was ours a moment ago; another listener rarely takes it.
		var ln net.Listener
		harness.WaitFor(tb, time.Second, 20*time.Millisecond, "listen on "+addr+" again", func() (bool, string) {
			var err error
			ln, err = new(net.ListenConfig).Listen(context.Background(), "tcp", addr)
			return err == nil, fmt.Sprint(err)
		})
		serve(ln)
	}
	stop = func() {
		mu.Lock()
		defer mu.Unlock()
		if srv != nil {
			_ = srv.Close()
		}
	}
	serve(ln)
	tb.Cleanup(stop)
	return start, stop
}

// StartS3 starts an S3-compatible server (gofakes3, in memory) with one
// bucket. Credentials are random; the server accepts any signature, so
// tests of what the client sends them for cannot rely on refusals.
func StartS3(tb testing.TB) *Server {
	tb.Helper()
	be := s3mem.New()
	bucket := "models-" + randomHex(4)
	if err := be.CreateBucket(bucket); err != nil {
		tb.Fatal(err)
	}
	faker := gofakes3.New(be, gofakes3.WithTimeSkewLimit(0))
	ln := listenLoopback(tb)
	addr := ln.Addr().String()
	start, stop := serveHTTP(tb, ln, faker.Server())
	s := &Server{Scheme: objstore.SchemeS3, Bucket: bucket, addr: addr, start: start, stop: stop, running: true}
	key, secret, token := "AKIA"+strings.ToUpper(randomHex(8)), randomHex(20), "tok"+randomHex(16)
	s.Env = []string{
		"AWS_ACCESS_KEY_ID=" + key, "AWS_SECRET_ACCESS_KEY=" + secret, "AWS_SESSION_TOKEN=" + token, "AWS_DEFAULT_REGION=us-east-1",
		// Keep the SDK away from instance metadata and profiles.
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=" + os.DevNull, "AWS_SHARED_CREDENTIALS_FILE=" + os.DevNull,
	}
	s.Secrets = []string{key, secret, token}
	return s
}

// StartGCS starts the GCS emulator (fake-gcs-server, in memory) with one
// bucket, reached through STORAGE_EMULATOR_HOST.
func StartGCS(tb testing.TB) *Server {
	tb.Helper()
	bucket := "models-" + randomHex(4)
	// The emulator needs to know its own address for upload sessions.
	ln := listenLoopback(tb)
	addr := ln.Addr().String()
	fs, err := fakestorage.NewServerWithOptions(fakestorage.Options{NoListener: true, Scheme: "http", ExternalURL: "http://" + addr, PublicHost: addr})
	if err != nil {
		_ = ln.Close()
		tb.Fatal(err)
	}
	fs.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: bucket})
	start, stop := serveHTTP(tb, ln, fs.HTTPHandler())
	tb.Cleanup(fs.Stop)
	return &Server{
		Scheme: objstore.SchemeGCS, Bucket: bucket, addr: addr, start: start, stop: stop, running: true,
		Env: []string{"STORAGE_EMULATOR_HOST=" + addr},
	}
}

// AzuriteBinary finds azurite-blob: $AZURITE_BLOB, then the copy
// scripts/setup.sh installs under the user cache folder, then $PATH.
func AzuriteBinary() (string, error) {
	if p := os.Getenv("AZURITE_BLOB"); p != "" {
		return p, nil
	}
	if cache, err := os.UserCacheDir(); err == nil {
		p := filepath.Join(cache, "sluice", "azurite-"+AzuriteVersion, "node_modules", ".bin", "azurite-blob")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("azurite-blob"); err == nil {
		return p, nil
	}
	return "", errors.New("azurite-blob not found: run make deps (scripts/setup.sh installs Azurite from npm)")
}

// AzuriteVersion is the Azurite release scripts/setup.sh installs.
const AzuriteVersion = "3.37.0"

// StartAzurite starts Azurite's blob service with a random account and
// key and one container, keeping its data in a temporary folder so that a
// restart finds it.
func StartAzurite(tb testing.TB) *Server {
	tb.Helper()
	bin, err := AzuriteBinary()
	if err != nil {
		tb.Fatal(err)
	}
	account := "acct" + randomHex(4)
	keyBytes := make([]byte, 32)
	_, _ = rand.Read(keyBytes)
	key := base64.StdEncoding.EncodeToString(keyBytes)
	dir := tb.TempDir()
	addr := freePort(tb)
	host, port, _ := net.SplitHostPort(addr)
	var mu sync.Mutex
	var cmd *exec.Cmd
	start := func(tb testing.TB) {
		tb.Helper()
		// Not the test's context: stop (an interrupt) ends the process,
		// and a restarted one outlives the call that started it.
		c := exec.CommandContext(context.Background(), bin, "--blobHost", host, "--blobPort", port, "--location", dir, "--skipApiVersionCheck", "--silent", "--disableTelemetry")
		c.Env = append(os.Environ(), "AZURITE_ACCOUNTS="+account+":"+key)
		c.Stdout, c.Stderr = nil, nil
		if err := c.Start(); err != nil {
			tb.Fatalf("start azurite: %v", err)
		}
		mu.Lock()
		cmd = c
		mu.Unlock()
		// On failure the cleanup's stop ends the process.
		harness.WaitFor(tb, 30*time.Second, 50*time.Millisecond, "azurite listening on "+addr, func() (bool, string) {
			d := net.Dialer{Timeout: 200 * time.Millisecond}
			conn, err := d.DialContext(context.Background(), "tcp", addr)
			if err != nil {
				return false, err.Error()
			}
			_ = conn.Close()
			return true, ""
		})
	}
	stop := func() {
		mu.Lock()
		defer mu.Unlock()
		if cmd != nil {
			// An interrupt lets Azurite save its metadata (containers
			// included) so that a restart finds them; a kill can lose
			// what it has not saved yet.
			_ = cmd.Process.Signal(os.Interrupt)
			waited := make(chan struct{})
			go func() { _ = cmd.Wait(); close(waited) }()
			select {
			case <-waited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-waited
			}
			cmd = nil
		}
	}
	tb.Cleanup(stop)
	start(tb)
	s := &Server{
		Scheme: objstore.SchemeAzure, Bucket: "models" + randomHex(4), addr: addr, account: account, start: start, stop: stop, running: true,
		Env:     []string{"AZURE_STORAGE_ACCOUNT=" + account, "AZURE_STORAGE_KEY=" + key, "AZURE_STORAGE_IS_LOCAL_EMULATOR=true", "AZURE_STORAGE_DOMAIN=" + addr},
		Secrets: []string{key},
	}
	createContainer(tb, s)
	return s
}

// createContainer creates the server's Azure container.
func createContainer(tb testing.TB, s *Server) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cred, err := container.NewSharedKeyCredential(s.account, s.Getenv("AZURE_STORAGE_KEY"))
	if err != nil {
		tb.Fatal(err)
	}
	c, err := container.NewClientWithSharedKeyCredential("http://"+s.addr+"/"+s.account+"/"+s.Bucket, cred, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := c.Create(ctx, nil); err != nil {
		tb.Fatalf("create azurite container: %v", err)
	}
}

// Upload copies a local folder into the bucket under prefix.
func Upload(tb testing.TB, b *objstore.Bucket, dir, prefix string) {
	tb.Helper()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		data, err := os.ReadFile(p) //nolint:gosec // G122: a test's own fixture folder, uploaded to a test server
		if err != nil {
			return err
		}
		return b.WriteAll(context.Background(), strings.TrimPrefix(prefix+"/"+filepath.ToSlash(rel), "/"), data)
	})
	if err != nil {
		tb.Fatalf("upload %s: %v", dir, err)
	}
}

// Store names one kind of server and starts it.
type Store struct {
	Name  string
	Start func(testing.TB) *Server
}

// Stores are the three kinds, for tests that run against each.
var Stores = []Store{
	{"s3", StartS3},
	{"gcs", StartGCS},
	{"azure", StartAzurite},
}

// Setenv sets the server's Env in the test's environment (t.Setenv), for
// code that reads credentials and emulator hosts from it.
func (s *Server) Setenv(t *testing.T) {
	t.Helper()
	for _, kv := range s.Env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}
