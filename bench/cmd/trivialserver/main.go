// Command trivialserver is the benchmark's floor for a Go HTTP server: it
// reads each KServe v2 inference request's body and answers a fixed JSON
// body, doing no other work. At a fixed request rate its CPU per request
// is what a Go net/http server spends on being woken for each request
// (netpoller, scheduler, threads), which bench/run.sh reports next to the
// model server's. It answers POST /v2/models/{model}/infer and GET
// /v2/health/ready; anything else is 404.
package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// answer is a KServe v2 response about the size of parcel_eta's.
const answer = `{"model_name":"parcel_eta","model_version":"2","id":"","outputs":[` +
	`{"name":"eta_prediction","datatype":"FP32","shape":[1,1],"data":[4.25]},` +
	`{"name":"confidence_score","datatype":"FP32","shape":[1,1],"data":[0.875]}]}`

func main() {
	addr := flag.String("listen", "127.0.0.1:0", "HOST:PORT to listen on")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v2/models/{model}/infer", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, io.LimitReader(r.Body, 64<<20)); err != nil {
			http.Error(w, `{"error":"read body"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	})
	mux.HandleFunc("GET /v2/health/ready", func(http.ResponseWriter, *http.Request) {})
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := serve(srv, logger); err != nil {
		logger.Error("trivial server stopped", "err", err)
		os.Exit(1)
	}
}

// serve runs srv until SIGINT or SIGTERM, then shuts it down.
func serve(srv *http.Server, logger *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Error("trivial server shutdown", "err", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
