package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/sluice-ml/sluice/bench/internal/tailbuf"
)

// freePorts asks the kernel for n distinct free 127.0.0.1 ports. The ports
// are released before they are used, so another process could take one in
// between; the caller treats a failed start as a failed run.
func freePorts(ctx context.Context, n int) ([]int, error) {
	ports := make([]int, 0, n)
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// measureStartup execs `bin serve` on free ports and returns the time from
// exec to the first 200 from /v2/health/ready. The server is then stopped
// with SIGTERM (SIGKILL after a grace period) and reaped before returning.
func measureStartup(ctx context.Context, bin string, repos []string, limit time.Duration) (time.Duration, error) {
	ports, err := freePorts(ctx, 3)
	if err != nil {
		return 0, err
	}
	args := []string{
		"serve", "--address", "127.0.0.1",
		"--http-port", strconv.Itoa(ports[0]), "--grpc-port", strconv.Itoa(ports[1]),
		"--metrics-port", strconv.Itoa(ports[2]), "--log-level", "warn",
	}
	for _, r := range repos {
		args = append(args, "--model-repository", r)
	}
	// Not CommandContext: the process must be stopped by stopProcess
	// (SIGTERM, then SIGKILL) and reaped, whatever happens to ctx.
	cmd := exec.Command(bin, args...) //nolint:gosec,noctx // bin is the operator's -sluice-bin; stopped by stopProcess below
	logs := &tailbuf.Buffer{Max: 2048}
	cmd.Stdout = logs
	cmd.Stderr = logs
	url := "http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/v2/health/ready"
	client := &http.Client{Timeout: 250 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()

	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer stopProcess(cmd, exited)

	deadline := t0.Add(limit)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, fmt.Errorf("build readiness request: %w", err)
		}
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(t0), nil
			}
		}
		select {
		case err := <-exited:
			exited <- err // let stopProcess see it
			return 0, fmt.Errorf("server exited before ready (%w): %s", err, logs.String())
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("server not ready within %s: %s", limit, logs.String())
		}
	}
}

// stopProcess ends a process this program started, by its pid: SIGTERM,
// then SIGKILL if it is still running after ten seconds.
func stopProcess(cmd *exec.Cmd, exited chan error) {
	select {
	case err := <-exited:
		exited <- err
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		_ = err // a signalled exit is expected
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		err := <-exited
		_ = err
	}
}
