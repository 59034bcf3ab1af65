package grpcapi

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/shm"
)

func strParam(s string) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: s}}
}

func intParam(n int64) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: n}}
}

// Triton's system shared-memory extension over gRPC
// (docs/protocol/extension_shared_memory.md; modelled on
// qa/L0_shared_memory/shared_memory_test.py): register, status, infer
// with one input from a region next to a raw input, the output written
// to a region, unregister.
func TestSharedMemoryGRPC(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	ctx := ctxTimeout(t)
	name := fmt.Sprintf("sluice-grpcapi-%d-%s", os.Getpid(), filepath.Base(t.TempDir()))
	path := filepath.Join(shm.Dir, name)
	region := make([]byte, 64)
	for i := range 4 {
		binary.LittleEndian.PutUint32(region[4*i:], uint32(100+i))
	}
	require.NoError(t, os.WriteFile(path, region, 0o600))
	t.Cleanup(func() { _ = os.Remove(path) })

	_, err := ts.client.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "in", Key: "/" + name, ByteSize: 16})
	require.NoError(t, err)
	_, err = ts.client.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "out", Key: "/" + name, Offset: 32, ByteSize: 32})
	require.NoError(t, err)
	_, err = ts.client.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "in", Key: "/" + name, ByteSize: 16})
	requireStatus(t, err, codes.FailedPrecondition, reasonSharedMemoryExists, "shared memory region 'in' already in manager")
	st, err := ts.client.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{})
	require.NoError(t, err)
	require.Len(t, st.GetRegions(), 2)
	require.Equal(t, uint64(32), st.GetRegions()["out"].GetOffset())
	_, err = ts.client.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{Name: "nope"})
	requireStatus(t, err, codes.NotFound, reasonSharedMemoryNotFound, "'nope'")

	raw1 := binary.LittleEndian.AppendUint32(nil, 7)
	resp, err := ts.client.ModelInfer(ctx, &pb.ModelInferRequest{
		ModelName: "echo",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 4}, Parameters: map[string]*pb.InferParameter{
				shm.ParamRegion: strParam("in"), shm.ParamByteSize: intParam(16),
			}},
			{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 1}},
		},
		RawInputContents: [][]byte{raw1}, // for INPUT1 only: INPUT0 is in the region
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{
			{Name: "OUTPUT0", Parameters: map[string]*pb.InferParameter{shm.ParamRegion: strParam("out"), shm.ParamByteSize: intParam(16), shm.ParamOffset: intParam(16)}},
			{Name: "OUTPUT1"},
		},
	})
	require.NoError(t, err)
	require.Len(t, resp.GetOutputs(), 2)
	o0 := resp.GetOutputs()[0]
	require.Equal(t, "out", o0.GetParameters()[shm.ParamRegion].GetStringParam())
	require.Equal(t, int64(16), o0.GetParameters()[shm.ParamByteSize].GetInt64Param())
	require.Empty(t, resp.GetRawOutputContents()[0], "the output is in the region, not the answer")
	require.Equal(t, raw1, resp.GetRawOutputContents()[1])
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, region[0:16], got[32+16:32+32])

	_, err = ts.client.ModelInfer(ctx, &pb.ModelInferRequest{
		ModelName: "echo",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 8}, Parameters: map[string]*pb.InferParameter{
			shm.ParamRegion: strParam("in"), shm.ParamByteSize: intParam(32),
		}}},
	})
	requireStatus(t, err, codes.InvalidArgument, shm.ReasonInvalid, "input 'INPUT0': Invalid offset + byte size for shared memory region: 'in'")

	_, err = ts.client.SystemSharedMemoryUnregister(ctx, &pb.SystemSharedMemoryUnregisterRequest{Name: "in"})
	require.NoError(t, err)
	_, err = ts.client.SystemSharedMemoryUnregister(ctx, &pb.SystemSharedMemoryUnregisterRequest{})
	require.NoError(t, err)
	st, err = ts.client.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{})
	require.NoError(t, err)
	require.Empty(t, st.GetRegions())
}
