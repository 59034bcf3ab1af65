package kserve

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

func newClient(tb testing.TB, opts Options) *Client {
	tb.Helper()
	c := New(opts, nil)
	tb.Cleanup(func() { require.NoError(tb, c.Close()) })
	return c
}

func ctxTimeout(tb testing.TB, d time.Duration) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

func fp32Bytes(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func int64Bytes(vs ...int64) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return b
}

func bytesElems(vs ...string) []byte {
	var b []byte
	for _, v := range vs {
		b = infer.AppendBytesElement(b, []byte(v))
	}
	return b
}

// requireRPCError asserts err's gRPC code, its domain kind and reason, and
// whether it is a connect failure.
func requireRPCError(t *testing.T, err error, code codes.Code, kind apierr.Kind, reason string, connectFailure bool) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, status.Code(err), "error: %v", err)
	st, ok := status.FromError(err)
	require.True(t, ok, "status.FromError failed on %v", err)
	require.Equal(t, code, st.Code())
	ie, ok := errors.AsType[*apierr.Error](err)
	require.True(t, ok, "no *apierr.Error in %v", err)
	require.Equal(t, kind, ie.Kind, "error: %v", err)
	require.Equal(t, reason, ie.Reason, "error: %v", err)
	require.Equal(t, connectFailure, IsConnectFailure(err), "IsConnectFailure(%v)", err)
}

func TestInferRoundTrip(t *testing.T) {
	ts := startSluice(t)
	c := newClient(t, Options{})
	ctx := ctxTimeout(t, 10*time.Second)

	req := &infer.Request{
		ID:         "req-1",
		Model:      "echo",
		Parameters: infer.Parameters{"priority": int64(1)},
		Inputs: []infer.Tensor{
			{Name: "INPUT0", DataType: infer.FP32, Shape: infer.Shape{2, 3}, Data: fp32Bytes(1, 2.5, -3, 0, 1e9, float32(math.Inf(1)))},
			{Name: "INPUT1", DataType: infer.Int64, Shape: infer.Shape{3}, Data: int64Bytes(math.MinInt64, 0, math.MaxInt64)},
			{Name: "INPUT2", DataType: infer.Bytes, Shape: infer.Shape{2}, Data: bytesElems("héllo", "")},
			{Name: "INPUT3", DataType: infer.FP32, Shape: infer.Shape{0, 4}},
		},
	}
	resp, err := c.Infer(ctx, ts.addr, req)
	require.NoError(t, err)
	require.Equal(t, "req-1", resp.ID)
	require.Equal(t, "echo", resp.Model)
	require.Equal(t, "1", resp.Version)
	require.Equal(t, infer.Parameters{"echoed": true}, resp.Parameters)
	require.Len(t, resp.Outputs, len(req.Inputs))
	for i, in := range req.Inputs {
		out := resp.Outputs[i]
		require.Equal(t, fmt.Sprintf("OUTPUT%d", i), out.Name)
		require.Equal(t, in.DataType, out.DataType, out.Name)
		require.Equal(t, in.Shape, out.Shape, out.Name)
		require.Len(t, out.Data, len(in.Data), out.Name)
		if len(in.Data) > 0 {
			require.Equal(t, in.Data, out.Data, out.Name)
		}
		require.NoError(t, out.CheckSize())
	}
	elems, err := infer.SplitBytes(resp.Outputs[2].Data)
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("héllo"), {}}, elems)

	// Responses must not share memory across calls (the response message
	// is pooled): a second call must leave the first one's data intact.
	first := append([]byte(nil), resp.Outputs[0].Data...)
	req.Inputs[0].Data = fp32Bytes(9, 9, 9, 9, 9, 9)
	resp2, err := c.Infer(ctx, ts.addr, req)
	require.NoError(t, err)
	require.Equal(t, first, resp.Outputs[0].Data)
	require.Equal(t, req.Inputs[0].Data, resp2.Outputs[0].Data)
}

func TestInferErrors(t *testing.T) {
	ts := startSluice(t)
	plainUnavailable := startTritonish(t, &tritonish{err: status.Error(codes.Unavailable, "model is loading")})
	plainInvalid := startTritonish(t, &tritonish{err: status.Error(codes.InvalidArgument, "unexpected shape for input 'x'")})
	oddReason := startTritonish(t, &tritonish{err: func() error {
		st, err := status.New(codes.ResourceExhausted, "queue full").
			WithDetails(&errdetails.ErrorInfo{Reason: "QUEUE_FULL", Domain: "triton"})
		require.NoError(t, err)
		return st.Err()
	}()})
	hostileReason := startTritonish(t, &tritonish{err: func() error {
		st, err := status.New(codes.Internal, "boom").
			WithDetails(&errdetails.ErrorInfo{Reason: "<script>alert(1)</script>"})
		require.NoError(t, err)
		return st.Err()
	}()})
	c := newClient(t, Options{})

	tests := []struct {
		name   string
		addr   string
		req    *infer.Request
		code   codes.Code
		kind   apierr.Kind
		reason string
	}{
		{
			name: "server reason for a size mismatch survives",
			addr: ts.addr,
			req: &infer.Request{Model: "echo", Inputs: []infer.Tensor{
				{Name: "INPUT0", DataType: infer.FP32, Shape: infer.Shape{2, 2}, Data: make([]byte, 15)},
			}},
			code: codes.InvalidArgument, kind: apierr.KindInvalid, reason: "tensor_size_mismatch",
		},
		{
			name: "server reason for an unavailable model survives",
			addr: ts.addr,
			req:  &infer.Request{Model: "down"},
			code: codes.Unavailable, kind: apierr.KindUnavailable, reason: "model_not_ready",
		},
		{
			name: "unknown model",
			addr: ts.addr,
			req:  &infer.Request{Model: "nope"},
			code: codes.NotFound, kind: apierr.KindNotFound, reason: "model_not_found",
		},
		{
			name: "unavailable without a reason",
			addr: plainUnavailable,
			req:  &infer.Request{Model: "m"},
			code: codes.Unavailable, kind: apierr.KindUnavailable, reason: ReasonUnavailable,
		},
		{
			name: "invalid argument without a reason",
			addr: plainInvalid,
			req:  &infer.Request{Model: "m"},
			code: codes.InvalidArgument, kind: apierr.KindInvalid, reason: ReasonInvalid,
		},
		{
			name: "foreign reason is lower-cased",
			addr: oddReason,
			req:  &infer.Request{Model: "m"},
			code: codes.ResourceExhausted, kind: apierr.KindResourceExhausted, reason: "queue_full",
		},
		{
			name: "hostile reason is replaced",
			addr: hostileReason,
			req:  &infer.Request{Model: "m"},
			code: codes.Internal, kind: apierr.KindInternal, reason: ReasonError,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Infer(ctxTimeout(t, 10*time.Second), tt.addr, tt.req)
			requireRPCError(t, err, tt.code, tt.kind, tt.reason, false)
			rpcErr, ok := errors.AsType[*RPCError](err)
			require.True(t, ok)
			require.Equal(t, tt.addr, rpcErr.Addr)
			require.Equal(t, "ModelInfer", rpcErr.Method)
			require.Contains(t, err.Error(), tt.addr, "the message names the endpoint")

			// Wrapping keeps both views.
			wrapped := fmt.Errorf("call model: %w", err)
			require.Equal(t, tt.code, status.Code(wrapped))
			ie, ok := errors.AsType[*apierr.Error](wrapped)
			require.True(t, ok)
			require.Equal(t, tt.reason, ie.Reason)
		})
	}
}

func TestInferDeadline(t *testing.T) {
	ts := startSluice(t)
	c := newClient(t, Options{})
	// Connect first, so the deadline below runs out on a carried call.
	_, err := c.ServerReady(ctxTimeout(t, 10*time.Second), ts.addr)
	require.NoError(t, err)

	_, err = c.Infer(ctxTimeout(t, 100*time.Millisecond), ts.addr, &infer.Request{Model: "hang"})
	// Either side may notice the deadline first: the client (no reason,
	// so ReasonTimeout) or the Sluice server (its own deadline_exceeded).
	reason := ReasonTimeout
	if ie, ok := errors.AsType[*apierr.Error](err); ok && ie.Reason == "deadline_exceeded" {
		reason = "deadline_exceeded"
	}
	requireRPCError(t, err, codes.DeadlineExceeded, apierr.KindTimeout, reason, false)

	// A context that is already done is not a connect failure either.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Infer(ctx, ts.addr, &infer.Request{Model: "echo"})
	requireRPCError(t, err, codes.Canceled, apierr.KindUnavailable, ReasonCanceled, false)
}

// closedPort returns a 127.0.0.1 address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	return addr
}

func TestConnectFailure(t *testing.T) {
	c := newClient(t, Options{})
	addr := closedPort(t)

	// A call that waited for the endpoint would end with DeadlineExceeded
	// after 5s; failing fast ends with Unavailable.
	_, err := c.Infer(ctxTimeout(t, 5*time.Second), addr, &infer.Request{Model: "echo"})
	requireRPCError(t, err, codes.Unavailable, apierr.KindUnavailable, ReasonUnavailable, true)

	// The endpoint is now in backoff: calls still fail fast.
	_, err = c.ServerReady(ctxTimeout(t, 5*time.Second), addr)
	requireRPCError(t, err, codes.Unavailable, apierr.KindUnavailable, ReasonUnavailable, true)

	require.False(t, IsConnectFailure(nil))
	require.False(t, IsConnectFailure(errors.New("plain")))
	require.False(t, IsConnectFailure(status.Error(codes.Unavailable, "not ours")))
}

func TestConnectFailureHandshakeTimeout(t *testing.T) {
	// A peer that accepts TCP connections but never speaks HTTP/2.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex // protects conns
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		require.NoError(t, lis.Close())
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})

	c := newClient(t, Options{DialTimeout: 200 * time.Millisecond})
	_, err = c.Infer(ctxTimeout(t, 5*time.Second), lis.Addr().String(), &infer.Request{Model: "echo"})
	requireRPCError(t, err, codes.Unavailable, apierr.KindUnavailable, ReasonUnavailable, true)
}

func TestResetIsNotConnectFailure(t *testing.T) {
	ts := startSluice(t)
	c := newClient(t, Options{})
	errc := make(chan error, 1)
	go func() {
		_, err := c.Infer(ctxTimeout(t, 10*time.Second), ts.addr, &infer.Request{Model: "hang"})
		errc <- err
	}()
	<-ts.models.hanging
	ts.srv.Stop() // drops the connection under the call
	err := <-errc
	require.Error(t, err)
	require.Equal(t, codes.Unavailable, status.Code(err), "error: %v", err)
	require.False(t, IsConnectFailure(err), "a call a connection carried is a reset, not a connect failure: %v", err)

	// With the server gone for good, new calls are connect failures.
	_, err = c.Infer(ctxTimeout(t, 5*time.Second), ts.addr, &infer.Request{Model: "echo"})
	requireRPCError(t, err, codes.Unavailable, apierr.KindUnavailable, ReasonUnavailable, true)
}

func TestReadinessAndMetadata(t *testing.T) {
	ts := startSluice(t)
	odd := startTritonish(t, &tritonish{})
	c := newClient(t, Options{})
	ctx := ctxTimeout(t, 10*time.Second)

	ready, err := c.ServerReady(ctx, ts.addr)
	require.NoError(t, err)
	require.True(t, ready)
	ts.models.ready.Store(false)
	ready, err = c.ServerReady(ctx, ts.addr)
	require.NoError(t, err)
	require.False(t, ready)

	_, err = c.ServerReady(ctx, odd)
	requireRPCError(t, err, codes.Unavailable, apierr.KindUnavailable, ReasonUnavailable, false)

	for _, tc := range []struct {
		model, version string
		want           bool
	}{
		{"echo", "", true},
		{"echo", "1", true},
		{"echo", "9", false},
		{"nope", "", false},
	} {
		got, err := c.ModelReady(ctx, ts.addr, tc.model, tc.version)
		require.NoError(t, err, "%s/%s", tc.model, tc.version)
		require.Equal(t, tc.want, got, "%s/%s", tc.model, tc.version)
	}
	_, err = c.ModelReady(ctx, ts.addr, "", "")
	requireRPCError(t, err, codes.InvalidArgument, apierr.KindInvalid, "missing_model_name", false)

	md, err := c.ModelMetadata(ctx, ts.addr, "echo", "")
	require.NoError(t, err)
	require.Equal(t, &Metadata{
		Name:     "echo",
		Versions: []string{"1", "2"},
		Platform: "onnxruntime_onnx",
		Inputs:   []infer.TensorSpec{{Name: "INPUT0", DataType: infer.FP32, Shape: infer.Shape{-1, 8}}},
		Outputs:  []infer.TensorSpec{{Name: "OUTPUT0", DataType: infer.Int64, Shape: infer.Shape{-1, 1}}},
	}, md)

	_, err = c.ModelMetadata(ctx, ts.addr, "nope", "")
	requireRPCError(t, err, codes.NotFound, apierr.KindNotFound, "model_not_found", false)

	_, err = c.ModelMetadata(ctx, odd, "odd", "")
	requireRPCError(t, err, codes.Internal, apierr.KindInternal, ReasonBadResponse, false)
	require.Contains(t, err.Error(), "TYPE_FP32")
}

func TestTypedContentsOverTheWire(t *testing.T) {
	addr := startTritonish(t, &tritonish{resp: &pb.ModelInferResponse{
		ModelName: "typed",
		Outputs: []*pb.ModelInferResponse_InferOutputTensor{
			{Name: "f", Datatype: "FP32", Shape: []int64{1, 2}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1.5, -2}}},
			{Name: "s", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("ok")}}},
		},
	}})
	c := newClient(t, Options{})
	resp, err := c.Infer(ctxTimeout(t, 10*time.Second), addr, &infer.Request{Model: "typed"})
	require.NoError(t, err)
	require.Len(t, resp.Outputs, 2)
	require.Equal(t, fp32Bytes(1.5, -2), resp.Outputs[0].Data)
	require.Equal(t, bytesElems("ok"), resp.Outputs[1].Data)
}

func TestBadResponseOverTheWire(t *testing.T) {
	addr := startTritonish(t, &tritonish{resp: &pb.ModelInferResponse{
		Outputs:           []*pb.ModelInferResponse_InferOutputTensor{{Name: "f", Datatype: "FP32", Shape: []int64{1, 2}}},
		RawOutputContents: [][]byte{make([]byte, 7)},
	}})
	c := newClient(t, Options{})
	_, err := c.Infer(ctxTimeout(t, 10*time.Second), addr, &infer.Request{Model: "m"})
	requireRPCError(t, err, codes.Internal, apierr.KindInternal, ReasonBadResponse, false)
	require.ErrorIs(t, err, infer.ErrSize)
}

func TestForget(t *testing.T) {
	ts := startSluice(t)
	c := newClient(t, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	req := &infer.Request{Model: "echo", Inputs: []infer.Tensor{
		{Name: "INPUT0", DataType: infer.Int64, Shape: infer.Shape{1}, Data: int64Bytes(7)},
	}}

	_, err := c.Infer(ctx, ts.addr, req)
	require.NoError(t, err)
	c.mu.RLock()
	old := c.conns[ts.addr]
	c.mu.RUnlock()
	require.NotNil(t, old)

	// A call in flight on the forgotten connection is canceled.
	errc := make(chan error, 1)
	go func() {
		_, err := c.Infer(ctx, ts.addr, &infer.Request{Model: "hang"})
		errc <- err
	}()
	<-ts.models.hanging
	c.Forget(ts.addr)
	err = <-errc
	require.Equal(t, codes.Canceled, status.Code(err), "error: %v", err)
	require.False(t, IsConnectFailure(err))

	require.Equal(t, connectivity.Shutdown, old.GetState())
	c.mu.RLock()
	_, still := c.conns[ts.addr]
	c.mu.RUnlock()
	require.False(t, still)

	// The next call reconnects.
	resp, err := c.Infer(ctx, ts.addr, req)
	require.NoError(t, err)
	require.Equal(t, int64Bytes(7), resp.Outputs[0].Data)
	c.mu.RLock()
	fresh := c.conns[ts.addr]
	c.mu.RUnlock()
	require.NotNil(t, fresh)
	require.NotSame(t, old, fresh)

	c.Forget("127.0.0.1:1") // unknown endpoints are fine
}

func TestClose(t *testing.T) {
	ts := startSluice(t)
	c := New(Options{}, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	_, err := c.ServerReady(ctx, ts.addr)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, c.Close())

	_, err = c.ServerReady(ctx, ts.addr)
	requireRPCError(t, err, codes.Unavailable, apierr.KindUnavailable, ReasonClientClosed, false)
	_, err = c.Infer(ctx, "127.0.0.1:1", &infer.Request{Model: "echo"})
	require.Error(t, err)
	require.Equal(t, codes.Unavailable, status.Code(err))
}

func TestBadAddress(t *testing.T) {
	c := newClient(t, Options{})
	ctx := ctxTimeout(t, 5*time.Second)
	_, err := c.Infer(ctx, "", &infer.Request{Model: "echo"})
	requireRPCError(t, err, codes.Unavailable, apierr.KindUnavailable, ReasonBadAddress, false)
	_, err = c.Infer(ctx, "bogus://%%zz", &infer.Request{Model: "echo"})
	requireRPCError(t, err, codes.Unavailable, apierr.KindUnavailable, ReasonBadAddress, false)
}

func TestConcurrentCalls(t *testing.T) {
	ts := startSluice(t)
	c := newClient(t, Options{})
	ctx := ctxTimeout(t, 20*time.Second)
	const workers, calls = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				v := int64(w*calls + i)
				resp, err := c.Infer(ctx, ts.addr, &infer.Request{Model: "echo", Inputs: []infer.Tensor{
					{Name: "INPUT0", DataType: infer.Int64, Shape: infer.Shape{1}, Data: int64Bytes(v)},
				}})
				if err != nil {
					errs <- err
					return
				}
				if got := int64(binary.LittleEndian.Uint64(resp.Outputs[0].Data)); got != v {
					errs <- fmt.Errorf("worker %d call %d: got %d, want %d", w, i, got, v)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
