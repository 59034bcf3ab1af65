package grpcapi

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/stats"

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

// A client that compresses its request is answered in the same algorithm,
// but only when the answer is at least CompressMinBytes (1 KiB by
// default); smaller answers go out uncompressed, on unary calls and on
// streams (where the first answer decides), and every answer is valid.
func TestCompressedResponsesMinSize(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	seen := &headerCompression{}
	conn, err := grpc.NewClient(ts.conn.Target(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(seen))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	client := pb.NewGRPCInferenceServiceClient(conn)
	request := func(n int) *pb.ModelInferRequest {
		raw := make([]byte, 4*n)
		for i := range raw {
			raw[i] = byte(i % 7)
		}
		return &pb.ModelInferRequest{
			ModelName:        "echo",
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, int64(n)}}},
			RawInputContents: [][]byte{raw},
		}
	}
	for _, alg := range []string{"gzip", "deflate"} {
		for _, tc := range []struct {
			n    int
			want string
		}{{4, ""}, {4096, alg}} {
			req := request(tc.n)
			resp, err := client.ModelInfer(ctxTimeout(t), req, grpc.UseCompressor(alg))
			require.NoError(t, err, alg)
			require.Equal(t, req.RawInputContents[0], resp.GetRawOutputContents()[0], alg)
			require.Equal(t, tc.want, seen.last(), "unary %s, %d values", alg, tc.n)

			stream, err := client.ModelStreamInfer(ctxTimeout(t), grpc.UseCompressor(alg))
			require.NoError(t, err)
			require.NoError(t, stream.Send(req))
			got, err := stream.Recv()
			require.NoError(t, err)
			require.Empty(t, got.GetErrorMessage())
			require.Equal(t, req.RawInputContents[0], got.GetInferResponse().GetRawOutputContents()[0])
			require.NoError(t, stream.CloseSend())
			require.Equal(t, tc.want, seen.last(), "stream %s, %d values", alg, tc.n)
		}
	}
}

// headerCompression records the compression named by the latest response
// headers a client received.
type headerCompression struct {
	mu  sync.Mutex
	alg string
}

func (h *headerCompression) last() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.alg == encoding.Identity {
		return ""
	}
	return h.alg
}

func (h *headerCompression) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return ctx
}

func (h *headerCompression) HandleRPC(_ context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InHeader); ok && in.Client {
		h.mu.Lock()
		h.alg = in.Compression
		h.mu.Unlock()
	}
}

func (h *headerCompression) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (h *headerCompression) HandleConn(context.Context, stats.ConnStats) {}
