package authz

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// fakeKServe answers a few RPCs with the caller its context carries.
type fakeKServe struct {
	pb.UnimplementedGRPCInferenceServiceServer
	mu     sync.Mutex // protects loaded
	loaded []string
}

func (f *fakeKServe) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: true}, nil
}

func (f *fakeKServe) ServerMetadata(ctx context.Context, _ *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	pr, ok := PrincipalFrom(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "no principal")
	}
	return &pb.ServerMetadataResponse{Name: pr.ID + "/" + pr.Via}, nil
}

func (f *fakeKServe) RepositoryModelLoad(ctx context.Context, req *pb.RepositoryModelLoadRequest) (*pb.RepositoryModelLoadResponse, error) {
	if req.GetModelName() == "missing" {
		return nil, status.Error(codes.NotFound, "no such model")
	}
	pr, _ := PrincipalFrom(ctx)
	f.mu.Lock()
	f.loaded = append(f.loaded, req.GetModelName()+" by "+pr.ID)
	f.mu.Unlock()
	return &pb.RepositoryModelLoadResponse{}, nil
}

func (f *fakeKServe) ModelStreamInfer(stream grpc.BidiStreamingServer[pb.ModelInferRequest, pb.ModelStreamInferResponse]) error {
	pr, ok := PrincipalFrom(stream.Context())
	if !ok {
		return status.Error(codes.Internal, "no principal")
	}
	return stream.Send(&pb.ModelStreamInferResponse{InferResponse: &pb.ModelInferResponse{Id: pr.ID}})
}

// syncBuffer is a bytes.Buffer the server's goroutines write while the
// test reads it.
type syncBuffer struct {
	mu  sync.Mutex // protects buf
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

func (b *syncBuffer) String() string { return string(b.Bytes()) }

// startGRPC serves fake on 127.0.0.1:0 behind p's interceptors and returns
// a client; everything stops when the test ends.
func startGRPC(t *testing.T, p *Policy, classify func(string) (string, Role), a *Auditor) (pb.GRPCInferenceServiceClient, *fakeKServe) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(p.UnaryInterceptor(classify, a)),
		grpc.ChainStreamInterceptor(p.StreamInterceptor(classify, a)),
	)
	fake := &fakeKServe{}
	pb.RegisterGRPCInferenceServiceServer(srv, fake)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
		<-done
	})
	return pb.NewGRPCInferenceServiceClient(conn), fake
}

func reasonOf(t *testing.T, err error) string {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			require.Equal(t, "sluice", info.GetDomain())
			return info.GetReason()
		}
	}
	return ""
}

func withMD(ctx context.Context, kv ...string) context.Context {
	return metadata.NewOutgoingContext(ctx, metadata.Pairs(kv...))
}

func TestUnaryInterceptor(t *testing.T) {
	var buf syncBuffer
	a := NewAuditor(&buf, nil)
	p := mustPolicy(t, PolicyOptions{
		Tokens:       testTokens(),
		Restrictions: []Restriction{{Groups: []string{GroupModelRepository}, Key: "admin-key", Value: "v"}},
	})
	client, fake := startGRPC(t, p, KServeMethodGroup, a)
	ctx := t.Context()
	restricted := []string{"triton-grpc-protocol-admin-key", "v"}
	ops := append([]string{"authorization", "Bearer " + opsSecret}, restricted...)
	viewer := append([]string{"x-sluice-token", viewerSecret}, restricted...)

	// Health needs nothing.
	live, err := client.ServerLive(ctx, &pb.ServerLiveRequest{})
	require.NoError(t, err)
	require.True(t, live.GetLive())

	// A read needs a credential here (reads are not open).
	_, err = client.ServerMetadata(ctx, &pb.ServerMetadataRequest{})
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	require.Equal(t, ReasonMissingCredential, reasonOf(t, err))
	_, err = client.ServerMetadata(withMD(ctx, "authorization", "Bearer wrong"), &pb.ServerMetadataRequest{})
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	require.Equal(t, ReasonInvalidCredential, reasonOf(t, err))
	require.NotContains(t, err.Error(), "wrong")
	md, err := client.ServerMetadata(withMD(ctx, "x-sluice-token", viewerSecret), &pb.ServerMetadataRequest{})
	require.NoError(t, err)
	require.Equal(t, "viewer/token", md.GetName())

	// Repository load: restricted group first, then the operate role.
	_, err = client.RepositoryModelLoad(withMD(ctx, "authorization", "Bearer "+opsSecret), &pb.RepositoryModelLoadRequest{ModelName: "m"})
	require.Equal(t, codes.Unavailable, status.Code(err), "Triton answers a restricted protocol with UNAVAILABLE")
	require.Equal(t, "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'", status.Convert(err).Message())
	require.Equal(t, ReasonRestrictedAPI, reasonOf(t, err))
	_, err = client.RepositoryModelLoad(withMD(ctx, restricted...), &pb.RepositoryModelLoadRequest{ModelName: "m"})
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	_, err = client.RepositoryModelLoad(withMD(ctx, viewer...), &pb.RepositoryModelLoadRequest{ModelName: "m"})
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	require.Equal(t, ReasonInsufficientRole, reasonOf(t, err))
	_, err = client.RepositoryModelLoad(withMD(ctx, append(ops, "x-request-id", "rq-7")...), &pb.RepositoryModelLoadRequest{ModelName: "m"})
	require.NoError(t, err)
	_, err = client.RepositoryModelLoad(withMD(ctx, ops...), &pb.RepositoryModelLoadRequest{ModelName: "missing"})
	require.Equal(t, codes.NotFound, status.Code(err))

	// An RPC the classifier does not know needs operate.
	_, err = client.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "m"})
	require.Equal(t, codes.Unauthenticated, status.Code(err))

	fake.mu.Lock()
	require.Equal(t, []string{"m by ops"}, fake.loaded)
	fake.mu.Unlock()

	got := lines(t, buf.Bytes())
	require.Len(t, got, 5, "every repository load is audited, denied ones included; reads are not")
	type row struct{ result, reason, who, code, target string }
	var rows []row
	for _, l := range got {
		require.Equal(t, ComponentModelsGRPC, l["component"])
		require.Equal(t, "repository.load", l["action"])
		require.Contains(t, l["source_addr"], "127.0.0.1:")
		rows = append(rows, row{l["result"].(string), l["reason"].(string), l["who"].(string), l["grpc_code"].(string), l["target"].(string)})
	}
	require.Equal(t, []row{
		{ResultDenied, ReasonRestrictedAPI, "", "Unavailable", "m"},
		{ResultDenied, ReasonMissingCredential, "", "Unauthenticated", "m"},
		{ResultDenied, ReasonInsufficientRole, "viewer", "PermissionDenied", "m"},
		{ResultOK, "", "ops", "OK", "m"},
		{ResultError, "", "ops", "NotFound", "missing"},
	}, rows)
	require.Equal(t, "rq-7", got[3]["request_id"])
	require.InDelta(t, 200, got[3]["status"], 0)
	require.InDelta(t, 404, got[4]["status"], 0)
	require.NotContains(t, buf.String(), opsSecret)
}

func TestStreamInterceptor(t *testing.T) {
	p := mustPolicy(t, PolicyOptions{Tokens: testTokens()})
	client, _ := startGRPC(t, p, KServeMethodGroup, nil)
	ctx := t.Context()

	recvOne := func(ctx context.Context) (*pb.ModelStreamInferResponse, error) {
		stream, err := client.ModelStreamInfer(ctx)
		if err != nil {
			return nil, err
		}
		if err := stream.CloseSend(); err != nil {
			return nil, err
		}
		return stream.Recv()
	}
	_, err := recvOne(ctx)
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	require.Equal(t, ReasonMissingCredential, reasonOf(t, err))
	res, err := recvOne(withMD(ctx, "authorization", "Bearer "+viewerSecret))
	require.NoError(t, err)
	require.Equal(t, "viewer", res.GetInferResponse().GetId(), "the stream's context carries the principal")
}

func TestStreamInterceptorAuditsOperate(t *testing.T) {
	var buf syncBuffer
	a := NewAuditor(&buf, nil)
	p := mustPolicy(t, PolicyOptions{Tokens: testTokens()})
	// A classifier that makes streaming inference a state-changing call.
	classify := func(m string) (string, Role) {
		if m == pb.GRPCInferenceService_ModelStreamInfer_FullMethodName {
			return GroupInference, RoleOperate
		}
		return KServeMethodGroup(m)
	}
	client, _ := startGRPC(t, p, classify, a)
	for _, token := range []string{viewerSecret, opsSecret} {
		stream, err := client.ModelStreamInfer(withMD(t.Context(), "x-sluice-token", token))
		require.NoError(t, err)
		require.NoError(t, stream.CloseSend())
		_, err = stream.Recv()
		if token == viewerSecret {
			require.Equal(t, codes.PermissionDenied, status.Code(err))
			continue
		}
		require.NoError(t, err)
		// Drain to the end so the handler has returned (and audited).
		for err == nil {
			_, err = stream.Recv()
		}
	}
	// grpc-go writes a call's status after the interceptor has returned,
	// so the line is there once the client has seen the end.
	got := lines(t, buf.Bytes())
	require.Len(t, got, 2)
	require.Equal(t, "ModelStreamInfer", got[0]["action"])
	require.Equal(t, ResultDenied, got[0]["result"])
	require.Equal(t, ResultOK, got[1]["result"])
	require.Equal(t, "ops", got[1]["who"])
}

func TestGRPCError(t *testing.T) {
	require.NoError(t, GRPCError(nil))
	plain := errors.New("plain")
	require.Same(t, plain, GRPCError(plain))
	for _, tc := range []struct {
		d    *DeniedError
		code codes.Code
	}{
		{&DeniedError{Status: http.StatusUnauthorized, Reason: ReasonMissingCredential, Message: "m"}, codes.Unauthenticated},
		{&DeniedError{Status: http.StatusUnauthorized, Reason: ReasonInvalidCredential, Message: "m"}, codes.Unauthenticated},
		{&DeniedError{Status: http.StatusForbidden, Reason: ReasonInsufficientRole, Message: "m"}, codes.PermissionDenied},
		{&DeniedError{Status: http.StatusForbidden, Reason: ReasonRestrictedAPI, Message: "m"}, codes.Unavailable},
	} {
		t.Run(tc.d.Reason, func(t *testing.T) {
			err := GRPCError(tc.d)
			require.Equal(t, tc.code, status.Code(err))
			require.Equal(t, "m", status.Convert(err).Message())
			require.Equal(t, tc.d.Reason, reasonOf(t, err))
		})
	}
}
