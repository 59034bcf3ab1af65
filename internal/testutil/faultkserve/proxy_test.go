package faultkserve

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/grpcapi"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// startUpstream serves fake models with the real grpcapi server on
// 127.0.0.1 and returns its address.
func startUpstream(t *testing.T) (string, *fakeModels) {
	t.Helper()
	models := &fakeModels{}
	svc := grpcapi.New(models, grpcapi.Options{ServerVersion: "0.0.1"}, nil, nil)
	srv := grpcapi.NewServer(svc, grpcapi.ServerOptions{})
	var lc net.ListenConfig
	lis, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		svc.Shutdown()
		srv.Stop()
		require.NoError(t, <-served)
	})
	return lis.Addr().String(), models
}

// startProxy starts a Proxy in front of upstream and a client connected to
// the proxy; both are closed when the test ends.
func startProxy(t *testing.T, upstream string) (*Proxy, pb.GRPCInferenceServiceClient) {
	t.Helper()
	p, err := New(upstream)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	conn, err := grpc.NewClient(p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, conn.Close()) })
	return p, pb.NewGRPCInferenceServiceClient(conn)
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// echoRequest asks model "echo" to echo the int32 pair (a, b).
func echoRequest(a, b int32) *pb.ModelInferRequest {
	raw := binary.LittleEndian.AppendUint32(nil, uint32(a))
	raw = binary.LittleEndian.AppendUint32(raw, uint32(b))
	return &pb.ModelInferRequest{
		ModelName: "echo",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 2}},
		},
		RawInputContents: [][]byte{raw},
	}
}

func requireEcho(t *testing.T, resp *pb.ModelInferResponse, err error, a, b int32) {
	t.Helper()
	require.NoError(t, err)
	require.Equal(t, "echo", resp.GetModelName())
	require.Len(t, resp.GetRawOutputContents(), 1)
	raw := resp.GetRawOutputContents()[0]
	require.Len(t, raw, 8)
	require.Equal(t, []int32{a, b}, []int32{
		int32(binary.LittleEndian.Uint32(raw)), int32(binary.LittleEndian.Uint32(raw[4:])),
	})
}

func requireCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok, "not a status: %v", err)
	require.Equal(t, want, st.Code(), "message: %s", st.Message())
}

func requireCounters(t *testing.T, p *Proxy, calls, failed, forwarded int64) {
	t.Helper()
	require.Equal(t, [3]int64{calls, failed, forwarded}, [3]int64{p.Calls(), p.Failed(), p.Forwarded()},
		"[calls failed forwarded]")
}

func TestForwardsEveryCall(t *testing.T) {
	addr, models := startUpstream(t)
	p, c := startProxy(t, addr)
	ctx := ctxTimeout(t, 10*time.Second)

	live, err := c.ServerLive(ctx, &pb.ServerLiveRequest{})
	require.NoError(t, err)
	require.True(t, live.GetLive())
	ready, err := c.ServerReady(ctx, &pb.ServerReadyRequest{})
	require.NoError(t, err)
	require.True(t, ready.GetReady())
	mready, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: "echo"})
	require.NoError(t, err)
	require.True(t, mready.GetReady())
	smd, err := c.ServerMetadata(ctx, &pb.ServerMetadataRequest{})
	require.NoError(t, err)
	require.Equal(t, "sluice", smd.GetName())
	require.Equal(t, "0.0.1", smd.GetVersion())
	mmd, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "echo"})
	require.NoError(t, err)
	require.Equal(t, "onnxruntime_onnx", mmd.GetPlatform())
	require.Equal(t, []int64{-1, 2}, mmd.GetInputs()[0].GetShape())
	cfg, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "echo"})
	require.NoError(t, err)
	require.Equal(t, int32(4), cfg.GetConfig().GetMaxBatchSize())
	idx, err := c.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{})
	require.NoError(t, err)
	require.Len(t, idx.GetModels(), 1)
	require.Equal(t, "READY", idx.GetModels()[0].GetState())
	requireCounters(t, p, 0, 0, 0) // only ModelInfer counts

	resp, err := c.ModelInfer(ctx, echoRequest(7, -3))
	requireEcho(t, resp, err, 7, -3)
	requireCounters(t, p, 1, 0, 1)
	require.Equal(t, int64(1), models.infers.Load())
	stats, err := c.ModelStatistics(ctx, &pb.ModelStatisticsRequest{})
	require.NoError(t, err)
	require.Equal(t, uint64(1), stats.GetModelStats()[0].GetInferenceCount())

	t.Run("upstream errors pass through with their details", func(t *testing.T) {
		req := echoRequest(1, 2)
		req.ModelName = "missing"
		_, err := c.ModelInfer(ctx, req)
		requireCode(t, err, codes.NotFound)
		st, _ := status.FromError(err)
		require.Contains(t, st.Message(), "model 'missing'")
		var reason string
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				reason = info.GetReason()
			}
		}
		require.Equal(t, "model_not_found", reason)
		requireCounters(t, p, 2, 0, 2) // an upstream error is not an injected one

		_, err = c.ModelReady(ctx, &pb.ModelReadyRequest{})
		requireCode(t, err, codes.InvalidArgument)
	})

	t.Run("the rest of the service is unimplemented", func(t *testing.T) {
		_, err := c.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "echo"})
		requireCode(t, err, codes.Unimplemented)
	})
}

// recorder is a raw upstream that records the metadata of ModelInfer calls
// and answers with a header and a trailer.
type recorder struct {
	pb.UnimplementedGRPCInferenceServiceServer

	mu       sync.Mutex // protects md and deadline
	md       metadata.MD
	deadline time.Time
}

func (r *recorder) ModelInfer(ctx context.Context, _ *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	r.mu.Lock()
	r.md = md
	r.deadline, _ = ctx.Deadline()
	r.mu.Unlock()
	if err := grpc.SetHeader(ctx, metadata.Pairs("x-upstream", "h")); err != nil {
		return nil, err
	}
	if err := grpc.SetTrailer(ctx, metadata.Pairs("x-upstream-trailer", "t")); err != nil {
		return nil, err
	}
	return &pb.ModelInferResponse{ModelName: "recorded"}, nil
}

func TestMetadataPassesBothWays(t *testing.T) {
	rec := &recorder{}
	srv := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(srv, rec)
	var lc net.ListenConfig
	lis, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	_, c := startProxy(t, lis.Addr().String())

	ctx := metadata.AppendToOutgoingContext(ctxTimeout(t, 10*time.Second), "x-request-id", "r-1", "priority", "1")
	var header, trailer metadata.MD
	resp, err := c.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "any"}, grpc.Header(&header), grpc.Trailer(&trailer))
	require.NoError(t, err)
	require.Equal(t, "recorded", resp.GetModelName())
	require.Equal(t, []string{"h"}, header.Get("x-upstream"))
	require.Equal(t, []string{"t"}, trailer.Get("x-upstream-trailer"))

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Equal(t, []string{"r-1"}, rec.md.Get("x-request-id"))
	require.Equal(t, []string{"1"}, rec.md.Get("priority"))
	want, _ := ctx.Deadline()
	require.WithinDuration(t, want, rec.deadline, time.Second, "the caller's deadline reaches the upstream")
}

func TestErrorEvery(t *testing.T) {
	for _, code := range []codes.Code{codes.Internal, codes.Unavailable} {
		t.Run(code.String(), func(t *testing.T) {
			addr, models := startUpstream(t)
			p, c := startProxy(t, addr)
			ctx := ctxTimeout(t, 10*time.Second)

			p.SetErrorEvery(4, code)
			var failedAt []int
			for i := 1; i <= 12; i++ {
				resp, err := c.ModelInfer(ctx, echoRequest(int32(i), 0))
				if err != nil {
					requireCode(t, err, code)
					failedAt = append(failedAt, i)
					continue
				}
				requireEcho(t, resp, nil, int32(i), 0)
			}
			require.Equal(t, []int{4, 8, 12}, failedAt)
			requireCounters(t, p, 12, 3, 9)
			require.Equal(t, int64(9), models.infers.Load(), "injected failures never reach the upstream")

			// Readiness is untouched by error injection.
			ready, err := c.ServerReady(ctx, &pb.ServerReadyRequest{})
			require.NoError(t, err)
			require.True(t, ready.GetReady())

			p.SetErrorEvery(0, code)
			for i := range 5 {
				_, err := c.ModelInfer(ctx, echoRequest(int32(i), 0))
				require.NoError(t, err)
			}
			requireCounters(t, p, 17, 3, 14)
		})
	}
}

func TestErrorEveryRestartsCounting(t *testing.T) {
	addr, _ := startUpstream(t)
	p, c := startProxy(t, addr)
	ctx := ctxTimeout(t, 10*time.Second)

	p.SetErrorEvery(3, codes.Internal)
	for range 2 {
		_, err := c.ModelInfer(ctx, echoRequest(1, 1))
		require.NoError(t, err)
	}
	p.SetErrorEvery(2, codes.Unavailable) // the count restarts: call 2 from now fails
	_, err := c.ModelInfer(ctx, echoRequest(1, 1))
	require.NoError(t, err)
	_, err = c.ModelInfer(ctx, echoRequest(1, 1))
	requireCode(t, err, codes.Unavailable)
	p.ClearFaults()
	_, err = c.ModelInfer(ctx, echoRequest(1, 1))
	require.NoError(t, err)
	requireCounters(t, p, 5, 1, 4)
}

func TestErrorRate(t *testing.T) {
	addr, models := startUpstream(t)
	p, c := startProxy(t, addr)
	ctx := ctxTimeout(t, 20*time.Second)

	count := func(n int, code codes.Code) (failed int) {
		for range n {
			if _, err := c.ModelInfer(ctx, echoRequest(1, 2)); err != nil {
				requireCode(t, err, code)
				failed++
			}
		}
		return failed
	}

	p.SetErrorRate(1, codes.Internal)
	require.Equal(t, 20, count(20, codes.Internal))
	require.Zero(t, models.infers.Load())

	// 400 draws at 0.5: the mean is 200 and σ = 10, so [100, 300] is ±10σ.
	p.SetErrorRate(0.5, codes.Unavailable)
	got := count(400, codes.Unavailable)
	require.GreaterOrEqual(t, got, 100)
	require.LessOrEqual(t, got, 300)

	p.SetErrorRate(0, codes.Internal)
	require.Zero(t, count(20, codes.Internal))
	requireCounters(t, p, 440, int64(20+got), int64(420-got))
	require.Equal(t, int64(420-got), models.infers.Load())
}

func TestHang(t *testing.T) {
	addr, models := startUpstream(t)
	p, c := startProxy(t, addr)
	ctx := ctxTimeout(t, 10*time.Second)

	p.SetHang(true)
	p.SetErrorEvery(1, codes.Internal) // a hang takes precedence
	hctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.ModelInfer(hctx, echoRequest(1, 2))
	requireCode(t, err, codes.DeadlineExceeded)
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)

	// The hung server still looks healthy.
	rctx, rcancel := context.WithTimeout(ctx, time.Second)
	defer rcancel()
	ready, err := c.ServerReady(rctx, &pb.ServerReadyRequest{})
	require.NoError(t, err)
	require.True(t, ready.GetReady())
	mready, err := c.ModelReady(rctx, &pb.ModelReadyRequest{Name: "echo"})
	require.NoError(t, err)
	require.True(t, mready.GetReady())

	// Wait for the proxy side of the hung call to see its deadline.
	require.Eventually(t, func() bool { return p.Failed() == 1 }, 5*time.Second, 5*time.Millisecond)
	requireCounters(t, p, 1, 1, 0)
	require.Zero(t, models.infers.Load())

	p.ClearFaults()
	resp, err := c.ModelInfer(ctx, echoRequest(3, 4))
	requireEcho(t, resp, err, 3, 4)
	requireCounters(t, p, 2, 1, 1)
}

// hangOne starts a ModelInfer without a deadline against a hanging proxy
// and waits until the proxy holds it; the call's error arrives on the
// returned channel.
func hangOne(t *testing.T, p *Proxy, c pb.GRPCInferenceServiceClient) <-chan error {
	t.Helper()
	before := p.Calls()
	errc := make(chan error, 1)
	go func() {
		_, err := c.ModelInfer(t.Context(), echoRequest(1, 2))
		errc <- err
	}()
	require.Eventually(t, func() bool { return p.Calls() == before+1 }, 5*time.Second, 5*time.Millisecond)
	select {
	case err := <-errc:
		t.Fatalf("call returned while it should hang: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	return errc
}

func TestHungCallEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(*Proxy)
	}{
		{"on Stop", (*Proxy).Stop},
		{"on Close", (*Proxy).Close},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := startUpstream(t)
			p, c := startProxy(t, addr)
			p.SetHang(true)
			errc := hangOne(t, p, c)
			tc.end(p)
			select {
			case err := <-errc:
				requireCode(t, err, codes.Unavailable)
			case <-time.After(5 * time.Second):
				t.Fatal("hung call still running 5s after the proxy stopped")
			}
			require.Eventually(t, func() bool { return p.Failed() == 1 }, 5*time.Second, 5*time.Millisecond)
			requireCounters(t, p, 1, 1, 0)
		})
	}
}

func TestHangEndsOnlyForLaterCalls(t *testing.T) {
	addr, _ := startUpstream(t)
	p, c := startProxy(t, addr)
	p.SetHang(true)
	errc := hangOne(t, p, c)
	p.SetHang(false)

	ctx := ctxTimeout(t, 10*time.Second)
	resp, err := c.ModelInfer(ctx, echoRequest(5, 6))
	requireEcho(t, resp, err, 5, 6)
	select {
	case err := <-errc:
		t.Fatalf("earlier hung call ended when the hang was turned off: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	requireCounters(t, p, 2, 0, 1)
	p.Stop()
	requireCode(t, <-errc, codes.Unavailable)
}

// requireRefused asserts that nothing listens on addr.
func requireRefused(t *testing.T, addr string) {
	t.Helper()
	var d net.Dialer
	conn, err := d.DialContext(t.Context(), "tcp", addr)
	if err == nil {
		conn.Close()
		t.Fatalf("dial %s: connected, want connection refused", addr)
	}
	require.True(t, errors.Is(err, syscall.ECONNREFUSED), "dial %s: %v, want connection refused", addr, err)
}

func TestStopAndRestartOnTheSameAddress(t *testing.T) {
	addr, _ := startUpstream(t)
	p, c := startProxy(t, addr)
	ctx := ctxTimeout(t, 20*time.Second)
	proxyAddr := p.Addr()

	resp, err := c.ModelInfer(ctx, echoRequest(1, 2))
	requireEcho(t, resp, err, 1, 2)
	p.SetErrorEvery(2, codes.Internal)

	p.Stop()
	p.Stop() // stopping twice is harmless
	requireRefused(t, proxyAddr)
	_, err = c.ModelInfer(ctx, echoRequest(1, 2))
	requireCode(t, err, codes.Unavailable)
	_, err = c.ServerReady(ctx, &pb.ServerReadyRequest{})
	requireCode(t, err, codes.Unavailable)
	requireCounters(t, p, 1, 0, 1) // a refused call never reaches the proxy

	require.NoError(t, p.Restart())
	require.NoError(t, p.Restart()) // restarting a running proxy is harmless
	require.Equal(t, proxyAddr, p.Addr())
	// The client reconnects by itself, after its backoff.
	ready, err := c.ServerReady(ctx, &pb.ServerReadyRequest{}, grpc.WaitForReady(true))
	require.NoError(t, err)
	require.True(t, ready.GetReady())
	resp, err = c.ModelInfer(ctx, echoRequest(3, 4))
	requireEcho(t, resp, err, 3, 4)
	_, err = c.ModelInfer(ctx, echoRequest(3, 4))
	requireCode(t, err, codes.Internal) // the fault plan survived the restart
	requireCounters(t, p, 3, 1, 2)

	t.Run("SetDown", func(t *testing.T) {
		require.NoError(t, p.SetDown(true))
		requireRefused(t, proxyAddr)
		require.NoError(t, p.SetDown(false))
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", proxyAddr)
		require.NoError(t, err)
		conn.Close()
	})

	t.Run("no restart after Close", func(t *testing.T) {
		p.Close()
		p.Close()
		requireRefused(t, proxyAddr)
		require.ErrorIs(t, p.Restart(), ErrClosed)
		require.ErrorIs(t, p.SetDown(false), ErrClosed)
	})
}

func TestConcurrentFaultChanges(t *testing.T) {
	addr, _ := startUpstream(t)
	p, c := startProxy(t, addr)
	ctx := ctxTimeout(t, 20*time.Second)

	var wg sync.WaitGroup
	const callers, perCaller = 4, 50
	for range callers {
		wg.Go(func() {
			for range perCaller {
				cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
				_, _ = c.ModelInfer(cctx, echoRequest(1, 2), grpc.WaitForReady(true))
				cancel()
			}
		})
	}
	var restartErr error // written by the flipping goroutine, read after Wait
	wg.Go(func() {
		for i := range 100 {
			switch i % 5 {
			case 0:
				p.SetErrorEvery(3, codes.Internal)
			case 1:
				p.SetErrorRate(0.5, codes.Unavailable)
			case 2:
				p.SetHang(i%2 == 0)
			case 3:
				p.Stop()
			case 4:
				if err := p.Restart(); err != nil {
					restartErr = err
					return
				}
				p.ClearFaults()
			}
		}
	})
	wg.Wait()
	require.NoError(t, restartErr)
	require.NoError(t, p.Restart())
	// Every call the proxy received ended one way or the other.
	require.Eventually(t, func() bool { return p.Failed()+p.Forwarded() == p.Calls() }, 5*time.Second, 5*time.Millisecond,
		"calls %d, failed %d, forwarded %d", p.Calls(), p.Failed(), p.Forwarded())
	require.LessOrEqual(t, p.Calls(), int64(callers*perCaller))
}
