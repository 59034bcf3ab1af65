package grpcapi

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// Triton's clients may compress messages with deflate or gzip
// (tritonclient.grpc compression_algorithm); both round-trip.
func TestCompressedMessages(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	for _, alg := range []string{"deflate", "gzip"} {
		raw := make([]byte, 4096) // compressible
		resp, err := ts.client.ModelInfer(ctxTimeout(t), &pb.ModelInferRequest{
			ModelName:        "echo",
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 1024}}},
			RawInputContents: [][]byte{raw},
		}, grpc.UseCompressor(alg))
		require.NoError(t, err, alg)
		require.Equal(t, raw, resp.GetRawOutputContents()[0], alg)
	}
}
