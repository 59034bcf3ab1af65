package kserve

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/grpcapi"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelrepo"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// fakeModels is a hand-written modelrepo.Models. Model "echo" answers each
// input INPUTn with an output OUTPUTn holding the same tensor; "down" is
// unavailable; "hang" blocks until its caller gives up, after signalling
// on hanging; any other model is not found.
type fakeModels struct {
	ready   atomic.Bool
	hanging chan struct{}
}

func newFakeModels() *fakeModels {
	f := &fakeModels{hanging: make(chan struct{}, 16)}
	f.ready.Store(true)
	return f
}

func notFound(name string) error {
	return apierr.Errorf(apierr.KindNotFound, "model_not_found", "model '%s' is not in the repository", name)
}

func (f *fakeModels) Infer(ctx context.Context, req *infer.Request) (*infer.Response, error) {
	switch req.Model {
	case "echo":
	case "down":
		return nil, apierr.Errorf(apierr.KindUnavailable, "model_not_ready", "model 'down' is loading")
	case "hang":
		f.hanging <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	default:
		return nil, notFound(req.Model)
	}
	resp := &infer.Response{ID: req.ID, Model: req.Model, Version: "1", Parameters: infer.Parameters{"echoed": true}}
	for _, in := range req.Inputs {
		out := in
		out.Name = strings.Replace(in.Name, "INPUT", "OUTPUT", 1)
		// The request aliases the gRPC message: copy what the response keeps.
		out.Data = append([]byte(nil), in.Data...)
		out.Shape = in.Shape.Clone()
		resp.Outputs = append(resp.Outputs, out)
	}
	return resp, nil
}

func (f *fakeModels) Metadata(_ context.Context, name, _ string) (*modelrepo.Metadata, error) {
	if name != "echo" {
		return nil, notFound(name)
	}
	return &modelrepo.Metadata{
		Name:     "echo",
		Versions: []string{"1", "2"},
		Platform: "onnxruntime_onnx",
		Inputs:   []modelrepo.TensorMeta{{Name: "INPUT0", DataType: infer.FP32, Shape: infer.Shape{-1, 8}}},
		Outputs:  []modelrepo.TensorMeta{{Name: "OUTPUT0", DataType: infer.Int64, Shape: infer.Shape{-1, 1}}},
	}, nil
}

func (f *fakeModels) Config(_ context.Context, name, _ string) (*pb.ModelConfig, error) {
	return nil, notFound(name)
}

func (f *fakeModels) ModelReady(_ context.Context, name, version string) error {
	switch {
	case name == "echo" && (version == "" || version == "1"):
		return nil
	case name == "echo":
		return apierr.Errorf(apierr.KindUnavailable, "model_version_unavailable", "model 'echo' version '%s' is not ready", version)
	}
	return notFound(name)
}

func (f *fakeModels) Live() bool  { return true }
func (f *fakeModels) Ready() bool { return f.ready.Load() }

func (f *fakeModels) Index(context.Context, bool) []modelrepo.IndexEntry { return nil }

func (f *fakeModels) Load(_ context.Context, name string, _ modelrepo.LoadOptions) error {
	return notFound(name)
}

func (f *fakeModels) Unload(_ context.Context, name string, _ modelrepo.UnloadOptions) error {
	return notFound(name)
}

func (f *fakeModels) Statistics(_ context.Context, name, _ string) ([]modelrepo.ModelStats, error) {
	return nil, notFound(name)
}

var _ modelrepo.Models = (*fakeModels)(nil)

// testServer is a real grpcapi server on 127.0.0.1.
type testServer struct {
	addr   string
	models *fakeModels
	srv    *grpc.Server
}

// startSluice serves a grpcapi.Service over TCP on 127.0.0.1 until the
// test ends.
func startSluice(tb testing.TB) *testServer {
	tb.Helper()
	models := newFakeModels()
	svc := grpcapi.New(models, grpcapi.Options{}, nil, nil)
	srv := grpcapi.NewServer(svc, grpcapi.ServerOptions{})
	addr := serve(tb, srv, svc.Shutdown)
	return &testServer{addr: addr, models: models, srv: srv}
}

// serve runs srv on a fresh 127.0.0.1 port and stops it when the test
// ends, calling before first if it is not nil.
func serve(tb testing.TB, srv *grpc.Server, before func()) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	tb.Cleanup(func() {
		if before != nil {
			before()
		}
		srv.Stop()
		require.NoError(tb, <-served)
	})
	return lis.Addr().String()
}

// tritonish is a GRPCInferenceService that answers the way other KServe v2
// servers may: typed contents instead of raw ones, and error statuses
// without an ErrorInfo detail, as Triton sends them.
type tritonish struct {
	pb.UnimplementedGRPCInferenceServiceServer
	resp *pb.ModelInferResponse // answered to every ModelInfer when err is nil
	err  error
}

func (s *tritonish) ModelInfer(context.Context, *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	if s.err != nil {
		return nil, s.err
	}
	return s.resp, nil
}

func (s *tritonish) ModelMetadata(context.Context, *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	return &pb.ModelMetadataResponse{
		Name:   "odd",
		Inputs: []*pb.ModelMetadataResponse_TensorMetadata{{Name: "x", Datatype: "TYPE_FP32", Shape: []int64{1}}},
	}, nil
}

func (s *tritonish) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return nil, status.Error(codes.Unavailable, "server is shutting down")
}

// startTritonish serves s on 127.0.0.1 until the test ends.
func startTritonish(tb testing.TB, s *tritonish) string {
	tb.Helper()
	srv := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(srv, s)
	return serve(tb, srv, nil)
}
