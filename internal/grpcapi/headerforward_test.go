package grpcapi

import (
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-ml/sluice/internal/infer"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// --grpc-header-forward-pattern: the metadata it matches reaches the model
// as request parameters (modelled on qa/L0_parameters).
func TestHeaderForward(t *testing.T) {
	f := newFakeModels()
	svc := New(f, Options{HeaderForward: regexp.MustCompile(`^triton-`)}, nil, prometheus.NewRegistry())
	ctx := metadata.NewIncomingContext(ctxTimeout(t), metadata.Pairs("triton-tenant", "acme", "triton-kept", "from header", "authorization", "secret"))
	_, err := svc.ModelInfer(ctx, &pb.ModelInferRequest{
		ModelName:        "echo",
		Parameters:       map[string]*pb.InferParameter{"triton-kept": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "from request"}}},
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1}}},
		RawInputContents: [][]byte{{1, 0, 0, 0}},
	})
	require.NoError(t, err)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Equal(t, infer.Parameters{"triton-tenant": "acme", "triton-kept": "from request"}, f.lastInfer.Parameters)
}

// Under --grpc-header-forward-pattern .*, metadata named as a parameter
// Triton reserves is refused with INVALID_ARGUMENT "reserved for Triton
// usage" (qa/L0_parameters test_headers_reserved_rejected), on unary and
// streaming inference; ordinary keys still pass.
func TestHeaderForwardReservedNames(t *testing.T) {
	f := newFakeModels()
	svc := New(f, Options{HeaderForward: regexp.MustCompile(`.*`)}, nil, prometheus.NewRegistry())
	req := &pb.ModelInferRequest{
		ModelName:        "echo",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1}}},
		RawInputContents: [][]byte{{1, 0, 0, 0}},
	}
	for _, name := range []string{"sequence_id", "priority", "timeout", "headers", "binary_data_output", "triton_injected_via_header"} {
		ctx := metadata.NewIncomingContext(ctxTimeout(t), metadata.Pairs(name, "dummy-value"))
		_, err := svc.ModelInfer(ctx, req)
		requireStatus(t, err, codes.InvalidArgument, "invalid_parameter", "reserved for Triton usage")
		out := make(chan *pb.ModelStreamInferResponse, 4)
		svc.streamAnswer(ctx, req, out)
		require.Len(t, out, 1)
		require.Contains(t, (<-out).GetErrorMessage(), "reserved for Triton usage")
	}
	ctx := metadata.NewIncomingContext(ctxTimeout(t), metadata.Pairs("my_header_1", "my_value_1 "))
	_, err := svc.ModelInfer(ctx, req)
	require.NoError(t, err)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Equal(t, "my_value_1 ", f.lastInfer.Parameters["my_header_1"], "gRPC metadata keeps a value's trailing space")
}
