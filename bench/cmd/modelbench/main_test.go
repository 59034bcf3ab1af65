package main

import (
	"context"
	"flag"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// fakeServeEnv makes the test binary act as a tiny `sluice serve` for the
// start-up tests: "ready" serves /v2/health/ready after a short delay,
// "crash" exits at once.
const fakeServeEnv = "MODELBENCH_FAKE_SERVE"

func TestMain(m *testing.M) {
	switch os.Getenv(fakeServeEnv) {
	case "ready":
		fakeServe()
		return
	case "crash":
		os.Stderr.WriteString("fake server: cannot load models\n")
		os.Exit(3)
	}
	goleak.VerifyTestMain(m)
}

func fakeServe() {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	port := fs.Int("http-port", 0, "")
	fs.String("address", "", "")
	fs.Int("grpc-port", 0, "")
	fs.Int("metrics-port", 0, "")
	fs.String("log-level", "", "")
	fs.String("model-repository", "", "")
	if len(os.Args) < 2 || fs.Parse(os.Args[2:]) != nil {
		os.Exit(2)
	}
	ready := time.Now().Add(100 * time.Millisecond)
	mux := http.NewServeMux()
	mux.HandleFunc("/v2/health/ready", func(w http.ResponseWriter, _ *http.Request) {
		if time.Now().Before(ready) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	srv := &http.Server{Addr: "127.0.0.1:" + strconv.Itoa(*port), Handler: mux, ReadHeaderTimeout: time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	_ = srv.ListenAndServe()
}
