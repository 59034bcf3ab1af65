package grpcapi

import (
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
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
