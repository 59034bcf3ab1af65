package grpcapi

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/modelrepo"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

type testServer struct {
	svc    *Service
	models *fakeModels
	reg    *prometheus.Registry
	conn   *grpc.ClientConn
	client pb.GRPCInferenceServiceClient
}

// startServer serves a Service over real TCP on 127.0.0.1 and returns a
// generated client connected to it.
func startServer(t *testing.T, sopts ServerOptions) *testServer {
	t.Helper()
	models := newFakeModels()
	reg := prometheus.NewRegistry()
	svc := New(models, Options{ServerVersion: "0.1.0"}, nil, reg)
	srv := NewServer(svc, sopts)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()

	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)))
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, conn.Close())
		svc.Shutdown()
		srv.Stop()
		require.NoError(t, <-served)
	})
	return &testServer{svc: svc, models: models, reg: reg, conn: conn, client: pb.NewGRPCInferenceServiceClient(conn)}
}

func ctxTimeout(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// requireStatus asserts a status error's code, ErrorInfo reason and that
// its message contains msg.
func requireStatus(t *testing.T, err error, code codes.Code, reason, msg string) {
	t.Helper()
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok, "not a status: %v", err)
	require.Equal(t, code, st.Code(), "message: %s", st.Message())
	require.Contains(t, st.Message(), msg)
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	require.NotNil(t, info, "no ErrorInfo detail")
	require.Equal(t, ErrorDomain, info.GetDomain())
	require.Equal(t, reason, info.GetReason())
}

func TestHealthAndMetadataRPCs(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	ctx := ctxTimeout(t)
	c := ts.client

	live, err := c.ServerLive(ctx, &pb.ServerLiveRequest{})
	require.NoError(t, err)
	require.True(t, live.GetLive())

	ready, err := c.ServerReady(ctx, &pb.ServerReadyRequest{})
	require.NoError(t, err)
	require.True(t, ready.GetReady())
	ts.models.ready.Store(false)
	ready, err = c.ServerReady(ctx, &pb.ServerReadyRequest{})
	require.NoError(t, err)
	require.False(t, ready.GetReady())
	ts.models.ready.Store(true)

	md, err := c.ServerMetadata(ctx, &pb.ServerMetadataRequest{})
	require.NoError(t, err)
	require.Equal(t, "sluice", md.GetName())
	require.Equal(t, "0.1.0", md.GetVersion())
	require.Equal(t, DefaultExtensions, md.GetExtensions())
	// Triton lists the same extensions on both protocols; its QA checks
	// these on gRPC too (qa/L0_server_status/server_status_test.py
	// test_basic), less cuda_shared_memory, which Sluice does not serve.
	for _, ext := range []string{"classification", "sequence", "model_repository", "schedule_policy", "model_configuration", "system_shared_memory", "binary_tensor_data", "statistics"} {
		require.Contains(t, md.GetExtensions(), ext)
	}
	require.NotContains(t, md.GetExtensions(), "cuda_shared_memory")

	t.Run("ModelReady", func(t *testing.T) {
		for _, tc := range []struct {
			name, version string
			want          bool
		}{
			{"echo", "", true},
			{"echo", "1", true},
			{"echo", "9", false},
			{"nope", "", false},
		} {
			r, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: tc.name, Version: tc.version})
			require.NoError(t, err, "%s/%s", tc.name, tc.version)
			require.Equal(t, tc.want, r.GetReady(), "%s/%s", tc.name, tc.version)
		}
		_, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: "broken"})
		requireStatus(t, err, codes.Internal, "oops", "model 'broken'")
		_, err = c.ModelReady(ctx, &pb.ModelReadyRequest{})
		requireStatus(t, err, codes.InvalidArgument, reasonMissingModelName, "model name is empty")
	})

	t.Run("ModelMetadata", func(t *testing.T) {
		m, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "echo"})
		require.NoError(t, err)
		require.Equal(t, "echo", m.GetName())
		require.Equal(t, []string{"1", "2"}, m.GetVersions())
		require.Equal(t, "onnxruntime_onnx", m.GetPlatform())
		require.Len(t, m.GetInputs(), 1)
		require.Equal(t, "INPUT0", m.GetInputs()[0].GetName())
		require.Equal(t, "INT32", m.GetInputs()[0].GetDatatype())
		require.Equal(t, []int64{-1, 16}, m.GetInputs()[0].GetShape())
		require.Equal(t, "FP32", m.GetOutputs()[0].GetDatatype())

		_, err = c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "nope"})
		requireStatus(t, err, codes.NotFound, "model_not_found", "model 'nope'")
	})

	t.Run("ModelConfig", func(t *testing.T) {
		cfg, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "echo"})
		require.NoError(t, err)
		require.Equal(t, "echo", cfg.GetConfig().GetName())
		require.Equal(t, int32(8), cfg.GetConfig().GetMaxBatchSize())
		_, err = c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "nope"})
		requireStatus(t, err, codes.NotFound, "model_not_found", "model 'nope'")
	})

	t.Run("ModelStatistics", func(t *testing.T) {
		st, err := c.ModelStatistics(ctx, &pb.ModelStatisticsRequest{})
		require.NoError(t, err)
		require.Len(t, st.GetModelStats(), 1)
		ms := st.GetModelStats()[0]
		require.Equal(t, "echo", ms.GetName())
		require.Equal(t, "1", ms.GetVersion())
		require.Equal(t, uint64(1700000000123), ms.GetLastInference())
		require.Equal(t, uint64(10), ms.GetInferenceCount())
		require.Equal(t, uint64(4), ms.GetExecutionCount())
		require.Equal(t, uint64(5000), ms.GetInferenceStats().GetSuccess().GetNs())
		require.Equal(t, uint64(10), ms.GetInferenceStats().GetQueue().GetCount())
		require.Equal(t, uint64(3000), ms.GetInferenceStats().GetComputeInfer().GetNs())
		require.Equal(t, uint64(3), ms.GetInferenceStats().GetCacheHit().GetCount())
		require.Equal(t, uint64(30), ms.GetInferenceStats().GetCacheHit().GetNs())
		require.Equal(t, uint64(7), ms.GetInferenceStats().GetCacheMiss().GetCount())
		require.Len(t, ms.GetBatchStats(), 1)
		require.Equal(t, uint64(4), ms.GetBatchStats()[0].GetBatchSize())
		require.Equal(t, uint64(2), ms.GetBatchStats()[0].GetComputeInfer().GetCount())

		_, err = c.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "nope"})
		requireStatus(t, err, codes.NotFound, "model_not_found", "model 'nope'")
	})
}

func TestRepositoryRPCs(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	ctx := ctxTimeout(t)
	c := ts.client

	idx, err := c.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{})
	require.NoError(t, err)
	require.Len(t, idx.GetModels(), 2)
	require.Equal(t, "echo", idx.GetModels()[0].GetName())
	require.Equal(t, "READY", idx.GetModels()[0].GetState())
	require.Equal(t, "UNAVAILABLE", idx.GetModels()[1].GetState())
	require.Equal(t, "checksum mismatch", idx.GetModels()[1].GetReason())
	idx, err = c.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{Ready: true})
	require.NoError(t, err)
	require.Len(t, idx.GetModels(), 1)
	_, err = c.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{RepositoryName: "other"})
	requireStatus(t, err, codes.Unimplemented, reasonUnsupportedRepo, "other")

	strParam := func(s string) *pb.ModelRepositoryParameter {
		return &pb.ModelRepositoryParameter{ParameterChoice: &pb.ModelRepositoryParameter_StringParam{StringParam: s}}
	}
	bytesParam := func(b []byte) *pb.ModelRepositoryParameter {
		return &pb.ModelRepositoryParameter{ParameterChoice: &pb.ModelRepositoryParameter_BytesParam{BytesParam: b}}
	}

	t.Run("load plain", func(t *testing.T) {
		_, err := c.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "echo"})
		require.NoError(t, err)
		ts.models.mu.Lock()
		defer ts.models.mu.Unlock()
		require.Equal(t, "echo", ts.models.lastLoadTo)
		require.Nil(t, ts.models.lastLoad.Config)
		require.Empty(t, ts.models.lastLoad.Files)
	})
	t.Run("load with config and files", func(t *testing.T) {
		_, err := c.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{
			ModelName: "echo",
			Parameters: map[string]*pb.ModelRepositoryParameter{
				"config":            strParam(`{"name":"echo","platform":"onnxruntime_onnx","max_batch_size":4}`),
				"file:1/model.onnx": bytesParam([]byte("onnx bytes")),
			},
		})
		require.NoError(t, err)
		ts.models.mu.Lock()
		defer ts.models.mu.Unlock()
		require.Equal(t, int32(4), ts.models.lastLoad.Config.GetMaxBatchSize())
		require.Equal(t, map[string][]byte{"1/model.onnx": []byte("onnx bytes")}, ts.models.lastLoad.Files)
	})
	t.Run("load errors", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			req    *pb.RepositoryModelLoadRequest
			code   codes.Code
			reason string
			msg    string
		}{
			{
				"bad json", &pb.RepositoryModelLoadRequest{
					ModelName:  "echo",
					Parameters: map[string]*pb.ModelRepositoryParameter{"config": strParam(`{"name":`)},
				},
				codes.InvalidArgument, modelconfig.ReasonInvalidConfig, "failed to load 'echo': load parameter 'config'",
			},
			{
				"unknown config field", &pb.RepositoryModelLoadRequest{
					ModelName:  "echo",
					Parameters: map[string]*pb.ModelRepositoryParameter{"config": strParam(`{"no_such_field":"x"}`)},
				},
				codes.InvalidArgument, modelconfig.ReasonInvalidConfig, "no_such_field",
			},
			{
				"file without config", &pb.RepositoryModelLoadRequest{
					ModelName:  "echo",
					Parameters: map[string]*pb.ModelRepositoryParameter{"file:1/model.onnx": bytesParam([]byte{1})},
				},
				codes.InvalidArgument, modelrepo.ReasonInvalidLoadRequest, "failed to load 'echo', failed to poll from model repository: file overrides need a config override",
			},
			{
				// The HTTP edge's check: a path leaving the model folder.
				"path escapes", &pb.RepositoryModelLoadRequest{
					ModelName:  "echo",
					Parameters: map[string]*pb.ModelRepositoryParameter{"config": strParam(`{}`), "file:../x/m": bytesParam([]byte{1})},
				},
				codes.InvalidArgument, modelrepo.ReasonInvalidLoadRequest, "failed to load 'echo': file override 'file:../x/m' is not a relative path inside the model folder",
			},
			{
				"file as string", &pb.RepositoryModelLoadRequest{
					ModelName:  "echo",
					Parameters: map[string]*pb.ModelRepositoryParameter{"config": strParam(`{}`), "file:1/m": strParam("x")},
				},
				codes.InvalidArgument, modelrepo.ReasonInvalidLoadRequest, "'file:1/m' must be a bytes_param",
			},
			{
				"unknown model", &pb.RepositoryModelLoadRequest{ModelName: "nope"},
				codes.NotFound, "model_not_found", "model 'nope'",
			},
			{"no name", &pb.RepositoryModelLoadRequest{}, codes.InvalidArgument, reasonMissingModelName, "model_name"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := c.RepositoryModelLoad(ctx, tc.req)
				requireStatus(t, err, tc.code, tc.reason, tc.msg)
			})
		}
	})
	t.Run("unload", func(t *testing.T) {
		_, err := c.RepositoryModelUnload(ctx, &pb.RepositoryModelUnloadRequest{
			ModelName: "echo",
			Parameters: map[string]*pb.ModelRepositoryParameter{
				"unload_dependents": {ParameterChoice: &pb.ModelRepositoryParameter_BoolParam{BoolParam: true}},
			},
		})
		require.NoError(t, err)
		ts.models.mu.Lock()
		require.True(t, ts.models.lastUnload.UnloadDependents)
		ts.models.mu.Unlock()

		_, err = c.RepositoryModelUnload(ctx, &pb.RepositoryModelUnloadRequest{ModelName: "nope"})
		requireStatus(t, err, codes.NotFound, "model_not_found", "model 'nope'")
		_, err = c.RepositoryModelUnload(ctx, &pb.RepositoryModelUnloadRequest{
			ModelName:  "echo",
			Parameters: map[string]*pb.ModelRepositoryParameter{"unload_dependents": strParam("yes")},
		})
		requireStatus(t, err, codes.InvalidArgument, reasonInvalidParameter, "unload_dependents")
	})
}

// CUDA shared memory as a CPU-only Triton answers it: register is not
// supported; status lists nothing and unregister succeeds, so that
// tritonclient's simple_grpc_shm_client runs.
func TestUnimplementedExtensions(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	st, err := ts.client.CudaSharedMemoryStatus(ctxTimeout(t), &pb.CudaSharedMemoryStatusRequest{})
	require.NoError(t, err)
	require.Empty(t, st.GetRegions())
	_, err = ts.client.CudaSharedMemoryStatus(ctxTimeout(t), &pb.CudaSharedMemoryStatusRequest{Name: "c"})
	requireStatus(t, err, codes.NotFound, reasonSharedMemoryNotFound, "Unable to find cuda shared memory region: 'c'")
	_, err = ts.client.CudaSharedMemoryUnregister(ctxTimeout(t), &pb.CudaSharedMemoryUnregisterRequest{})
	require.NoError(t, err)
	_, err = ts.client.CudaSharedMemoryUnregister(ctxTimeout(t), &pb.CudaSharedMemoryUnregisterRequest{Name: "c"})
	require.NoError(t, err)
	_, err = ts.client.CudaSharedMemoryRegister(ctxTimeout(t), &pb.CudaSharedMemoryRegisterRequest{Name: "c"})
	requireStatus(t, err, codes.Unimplemented, reasonCUDASharedMemory, "CUDA shared memory is not supported")
}

// echoInput builds a typed request for model echo.
func echoRequest(inputs ...*pb.ModelInferRequest_InferInputTensor) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{ModelName: "echo", Id: "req-1", Inputs: inputs}
}

func TestModelInferRoundTrip(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	ctx := ctxTimeout(t)

	t.Run("typed", func(t *testing.T) {
		for _, tc := range datatypeCases {
			if tc.contents == nil {
				continue
			}
			t.Run(tc.datatype, func(t *testing.T) {
				resp, err := ts.client.ModelInfer(ctx, echoRequest(&pb.ModelInferRequest_InferInputTensor{
					Name: "INPUT0", Datatype: tc.datatype, Shape: tc.shape, Contents: tc.contents,
				}))
				require.NoError(t, err)
				require.Equal(t, "req-1", resp.GetId())
				require.Equal(t, "echo", resp.GetModelName())
				require.Equal(t, "1", resp.GetModelVersion())
				require.Len(t, resp.GetOutputs(), 1)
				out := resp.GetOutputs()[0]
				require.Equal(t, "OUTPUT0", out.GetName())
				require.Equal(t, tc.datatype, out.GetDatatype())
				require.Equal(t, tc.shape, out.GetShape())
				require.Len(t, resp.GetRawOutputContents(), 1)
				require.Equal(t, tc.want, resp.GetRawOutputContents()[0])
				require.True(t, resp.GetParameters()["echoed"].GetBoolParam())
			})
		}
	})

	t.Run("raw", func(t *testing.T) {
		req := &pb.ModelInferRequest{ModelName: "echo"}
		for i, tc := range datatypeCases {
			req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{
				Name: "INPUT" + string(rune('A'+i)), Datatype: tc.datatype, Shape: tc.shape,
			})
			req.RawInputContents = append(req.RawInputContents, tc.want)
		}
		resp, err := ts.client.ModelInfer(ctx, req)
		require.NoError(t, err)
		require.Len(t, resp.GetOutputs(), len(datatypeCases))
		require.Len(t, resp.GetRawOutputContents(), len(datatypeCases))
		for i, tc := range datatypeCases {
			require.Equal(t, "OUTPUT"+string(rune('A'+i)), resp.GetOutputs()[i].GetName())
			require.Equal(t, tc.datatype, resp.GetOutputs()[i].GetDatatype())
			if len(tc.want) == 0 {
				require.Empty(t, resp.GetRawOutputContents()[i])
			} else {
				require.Equal(t, tc.want, resp.GetRawOutputContents()[i])
			}
		}
	})

	t.Run("requested outputs and parameters", func(t *testing.T) {
		req := &pb.ModelInferRequest{
			ModelName: "echo",
			Parameters: map[string]*pb.InferParameter{
				"priority": {ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 1}},
				"timeout":  {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 5000}},
			},
			Inputs: []*pb.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1}, Contents: &pb.InferTensorContents{IntContents: []int32{1}}},
				{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1}, Contents: &pb.InferTensorContents{IntContents: []int32{2}}},
			},
			Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT1"}},
		}
		resp, err := ts.client.ModelInfer(ctx, req)
		require.NoError(t, err)
		require.Len(t, resp.GetOutputs(), 1)
		require.Equal(t, "OUTPUT1", resp.GetOutputs()[0].GetName())
		require.Equal(t, le[int32](2), resp.GetRawOutputContents()[0])
		ts.models.mu.Lock()
		got := ts.models.lastInfer
		ts.models.mu.Unlock()
		require.Equal(t, infer.Parameters{"priority": uint64(1), "timeout": int64(5000)}, got.Parameters)
		require.Equal(t, []infer.RequestedOutput{{Name: "OUTPUT1"}}, got.Outputs)
	})
}

func TestModelInferErrors(t *testing.T) {
	ts := startServer(t, ServerOptions{MaxRecvMsgSize: 64 << 10})
	ctx := ctxTimeout(t)
	in := func(name, dt string, shape []int64, c *pb.InferTensorContents) *pb.ModelInferRequest_InferInputTensor {
		return &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: dt, Shape: shape, Contents: c}
	}
	ints := func(v ...int32) *pb.InferTensorContents { return &pb.InferTensorContents{IntContents: v} }

	tests := []struct {
		name   string
		req    *pb.ModelInferRequest
		code   codes.Code
		reason string
		msg    string
	}{
		{
			"wrong datatype string", echoRequest(in("INPUT0", "float32", []int64{1}, ints(1))),
			codes.InvalidArgument, reasonInvalidDatatype, `input 'INPUT0': unknown datatype "float32"`,
		},
		{
			"typed count mismatch", echoRequest(in("INPUT0", "INT32", []int64{1, 16}, ints(1, 2))),
			codes.InvalidArgument, reasonSizeMismatch, "input 'INPUT0': int_contents has 2 elements but shape [1,16] needs 16",
		},
		{
			"raw size mismatch", &pb.ModelInferRequest{
				ModelName:        "echo",
				Inputs:           []*pb.ModelInferRequest_InferInputTensor{in("INPUT0", "INT32", []int64{1, 16}, nil)},
				RawInputContents: [][]byte{make([]byte, 60)},
			},
			codes.InvalidArgument, reasonSizeMismatch, "input 'INPUT0': raw content is 60 bytes but shape [1,16] of INT32 needs 64",
		},
		{
			"raw count != inputs", &pb.ModelInferRequest{
				ModelName:        "echo",
				Inputs:           []*pb.ModelInferRequest_InferInputTensor{in("INPUT0", "INT32", []int64{1}, nil), in("INPUT1", "INT32", []int64{1}, nil)},
				RawInputContents: [][]byte{le[int32](1)},
			},
			codes.InvalidArgument, reasonRawInputCount, "input 'INPUT1': no raw content",
		},
		{
			"mixed raw and typed", &pb.ModelInferRequest{
				ModelName:        "echo",
				Inputs:           []*pb.ModelInferRequest_InferInputTensor{in("INPUT0", "INT32", []int64{1}, ints(1))},
				RawInputContents: [][]byte{le[int32](1)},
			},
			codes.InvalidArgument, reasonMixedRawAndTyped, "input 'INPUT0': has typed contents",
		},
		{
			"INT8 out of range", echoRequest(in("INPUT0", "INT8", []int64{3}, ints(1, -129, 0))),
			codes.InvalidArgument, reasonValueOutOfRange, "input 'INPUT0': element 1 value -129 is out of range for INT8",
		},
		{
			"unknown model", &pb.ModelInferRequest{ModelName: "nope", Inputs: []*pb.ModelInferRequest_InferInputTensor{in("INPUT0", "INT32", []int64{1}, ints(1))}},
			codes.NotFound, "model_not_found", "model 'nope'",
		},
		{
			"unknown output", &pb.ModelInferRequest{
				ModelName: "echo",
				Inputs:    []*pb.ModelInferRequest_InferInputTensor{in("INPUT0", "INT32", []int64{1}, ints(1))},
				Outputs:   []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT9"}},
			},
			codes.InvalidArgument, "unknown_output", "output 'OUTPUT9'",
		},
		{
			"model timeout", &pb.ModelInferRequest{ModelName: "slow"},
			codes.DeadlineExceeded, "queue_timeout", "model 'slow'",
		},
		{
			"panic", &pb.ModelInferRequest{ModelName: "panic"},
			codes.Internal, reasonInternal, "ModelInfer",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ts.client.ModelInfer(ctx, tc.req)
			requireStatus(t, err, tc.code, tc.reason, tc.msg)
		})
	}

	t.Run("oversized message", func(t *testing.T) {
		_, err := ts.client.ModelInfer(ctx, &pb.ModelInferRequest{
			ModelName:        "echo",
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{in("INPUT0", "UINT8", []int64{100 << 10}, nil)},
			RawInputContents: [][]byte{make([]byte, 100<<10)},
		})
		// gRPC refuses the message before any handler runs, so there is
		// no ErrorInfo to check.
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	})

	t.Run("metrics", func(t *testing.T) {
		const method = "/inference.GRPCInferenceService/ModelInfer"
		require.Equal(t, 1.0, testutil.ToFloat64(ts.svc.metrics.requests.WithLabelValues(method, "Internal")))
		require.Equal(t, 1.0, testutil.ToFloat64(ts.svc.metrics.requests.WithLabelValues(method, "NotFound")))
		require.Equal(t, 1.0, testutil.ToFloat64(ts.svc.metrics.requests.WithLabelValues(method, "DeadlineExceeded")))
		require.Equal(t, 7.0, testutil.ToFloat64(ts.svc.metrics.requests.WithLabelValues(method, "InvalidArgument")))
		n, err := testutil.GatherAndCount(ts.reg, "sluice_grpc_request_duration_seconds")
		require.NoError(t, err)
		require.Equal(t, 1, n, "one series: one method")
	})
}

func TestModelStreamInfer(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	stream, err := ts.client.ModelStreamInfer(ctxTimeout(t))
	require.NoError(t, err)

	good := func(id string, v int32) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "echo", Id: id, Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1}, Contents: &pb.InferTensorContents{IntContents: []int32{v}}},
		}}
	}
	bad := &pb.ModelInferRequest{ModelName: "echo", Id: "b", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "INPUT0", Datatype: "INT32", Shape: []int64{2}, Contents: &pb.InferTensorContents{IntContents: []int32{1}}},
	}}
	for _, r := range []*pb.ModelInferRequest{good("a", 1), bad, good("c", 3), {ModelName: "nope", Id: "d"}} {
		require.NoError(t, stream.Send(r))
	}
	require.NoError(t, stream.CloseSend())

	var got []*pb.ModelStreamInferResponse
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		got = append(got, r)
	}
	require.Len(t, got, 4)
	require.Empty(t, got[0].GetErrorMessage())
	require.Equal(t, "a", got[0].GetInferResponse().GetId())
	require.Equal(t, le[int32](1), got[0].GetInferResponse().GetRawOutputContents()[0])
	require.Contains(t, got[1].GetErrorMessage(), "input 'INPUT0': int_contents has 1 elements but shape [2] needs 2")
	require.Equal(t, "b", got[1].GetInferResponse().GetId())
	require.Empty(t, got[2].GetErrorMessage())
	require.Equal(t, le[int32](3), got[2].GetInferResponse().GetRawOutputContents()[0])
	require.Contains(t, got[3].GetErrorMessage(), "model 'nope'")
}

// Requests of a stream run concurrently and are answered in order; the
// requests of a sequence reach the queue in stream order, all of them
// before the first is answered. Modelled on
// qa/L0_sequence_batcher/sequence_batcher_test.py test_full_batch, whose
// streams each queue a sequence's three requests before any executes
// (TRITONSERVER_DELAY_SCHEDULER=12 over four streams).
func TestModelStreamInferPipelinesSequences(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	stream, err := ts.client.ModelStreamInfer(ctxTimeout(t))
	require.NoError(t, err)
	ids := []string{"start", "middle", "end"}
	for i, id := range ids {
		require.NoError(t, stream.Send(&pb.ModelInferRequest{
			ModelName: "gate", Id: id,
			Inputs: []*pb.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1}, Contents: &pb.InferTensorContents{IntContents: []int32{int32(i)}}},
			},
			Parameters: map[string]*pb.InferParameter{
				"sequence_id":    {ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 7}},
				"sequence_start": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: i == 0}},
				"sequence_end":   {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: i == len(ids)-1}},
			},
		}))
	}
	queued := func() []string {
		ts.models.mu.Lock()
		defer ts.models.mu.Unlock()
		return slices.Clone(ts.models.gateQueue)
	}
	require.Eventually(t, func() bool { return len(queued()) == len(ids) }, 5*time.Second, 5*time.Millisecond,
		"all three are queued before any is answered")
	require.Equal(t, ids, queued(), "in stream order")
	close(ts.models.gate)
	require.NoError(t, stream.CloseSend())
	for i, id := range ids {
		r, err := stream.Recv()
		require.NoError(t, err)
		require.Empty(t, r.GetErrorMessage())
		require.Equal(t, id, r.GetInferResponse().GetId())
		require.Equal(t, le[int32](int32(i)), r.GetInferResponse().GetRawOutputContents()[0])
	}
	_, err = stream.Recv()
	require.ErrorIs(t, err, io.EOF)
}

func TestHealthService(t *testing.T) {
	ts := startServer(t, ServerOptions{HealthPollInterval: 5 * time.Millisecond})
	ctx := ctxTimeout(t)
	hc := healthpb.NewHealthClient(ts.conn)

	for _, svcName := range []string{"", "inference.GRPCInferenceService"} {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svcName})
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, r.GetStatus(), "service %q", svcName)
	}
	_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "other.Service"})
	require.Equal(t, codes.NotFound, status.Code(err))

	watch, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	first, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, first.GetStatus())

	ts.models.ready.Store(false)
	r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, r.GetStatus())
	next, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, next.GetStatus())

	ts.models.ready.Store(true)
	next, err = watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, next.GetStatus())

	list, err := hc.List(ctx, &healthpb.HealthListRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, list.GetStatuses()["inference.GRPCInferenceService"].GetStatus())

	// Shutdown turns health off and ends Watch streams.
	ts.svc.Shutdown()
	r, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, r.GetStatus())
	next, err = watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, next.GetStatus())
	_, err = watch.Recv()
	require.ErrorIs(t, err, io.EOF)
}

// Modelled on qa/L0_client_timeout/client_non_infer_timeout_test.py: with
// Triton's TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC hook a non-inference
// call outlives a 0.1 s client deadline ("Deadline Exceeded") and answers
// within a longer one; inference is not delayed.
func TestDelayNonInfer(t *testing.T) {
	ts := startServer(t, ServerOptions{DelayNonInfer: 300 * time.Millisecond})
	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := ts.client.ServerLive(short, &pb.ServerLiveRequest{})
	require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)

	// The hook's own answer to an expired deadline uses gRPC's words, which
	// the QA test matches, should it reach the client before its timer.
	expired, cancel0 := context.WithDeadline(t.Context(), time.Now())
	defer cancel0()
	_, err = delayNonInfer(time.Minute)(expired, nil, &grpc.UnaryServerInfo{FullMethod: pb.GRPCInferenceService_ServerLive_FullMethodName},
		func(context.Context, any) (any, error) { return nil, errors.New("handled") })
	require.Equal(t, codes.DeadlineExceeded, status.Code(err))
	require.Equal(t, "Deadline Exceeded", status.Convert(err).Message())

	start := time.Now()
	live, err := ts.client.ServerLive(ctxTimeout(t), &pb.ServerLiveRequest{})
	require.NoError(t, err)
	require.True(t, live.GetLive())
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)

	infer, cancel2 := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel2()
	start = time.Now()
	_, _ = ts.client.ModelInfer(infer, &pb.ModelInferRequest{ModelName: "absent"})
	require.Less(t, time.Since(start), 300*time.Millisecond, "inference is not delayed")
}

func TestReflectionListsService(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	rc := reflectionpb.NewServerReflectionClient(ts.conn)
	stream, err := rc.ServerReflectionInfo(ctxTimeout(t))
	require.NoError(t, err)
	require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}))
	resp, err := stream.Recv()
	require.NoError(t, err)
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	require.Contains(t, names, "inference.GRPCInferenceService")
	require.Contains(t, names, "grpc.health.v1.Health")

	// The service's file descriptor resolves, including model_config.proto.
	require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "inference.ModelConfig"},
	}))
	resp, err = stream.Recv()
	require.NoError(t, err)
	require.NotEmpty(t, resp.GetFileDescriptorResponse().GetFileDescriptorProto())
	require.NoError(t, stream.CloseSend())
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		err  error
		code codes.Code
	}{
		{apierr.Errorf(apierr.KindInvalid, "x", "m"), codes.InvalidArgument},
		{apierr.Errorf(apierr.KindNotFound, "x", "m"), codes.NotFound},
		{apierr.Errorf(apierr.KindUnavailable, "x", "m"), codes.Unavailable},
		{apierr.Errorf(apierr.KindResourceExhausted, "x", "m"), codes.ResourceExhausted},
		{apierr.Errorf(apierr.KindConflict, "x", "m"), codes.FailedPrecondition},
		{apierr.Errorf(apierr.KindUnsupported, "x", "m"), codes.Unimplemented},
		{apierr.Errorf(apierr.KindTimeout, "x", "m"), codes.DeadlineExceeded},
		{apierr.Errorf(apierr.KindUnauthenticated, "x", "m"), codes.Unauthenticated},
		{apierr.Errorf(apierr.KindPermissionDenied, "x", "m"), codes.PermissionDenied},
		{apierr.Errorf(apierr.KindInternal, "x", "m"), codes.Internal},
		{apierr.Errorf(apierr.Kind(99), "x", "m"), codes.Internal},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{context.Canceled, codes.Canceled},
		{errors.New("boom"), codes.Internal},
		{nil, codes.OK},
	}
	for _, tc := range tests {
		name := "nil"
		if tc.err != nil {
			name = tc.err.Error()
		}
		t.Run(name+"/"+tc.code.String(), func(t *testing.T) {
			require.Equal(t, tc.code, CodeOf(tc.err))
			if tc.err == nil {
				require.NoError(t, toStatus(nil))
				return
			}
			require.Equal(t, tc.code, status.Code(toStatus(tc.err)))
		})
	}
	// A wrapped domain error keeps its kind and reason.
	wrapped := errors.Join(errors.New("ctx"), apierr.Errorf(apierr.KindConflict, "model_busy", "model 'm' is unloading"))
	requireStatus(t, toStatus(wrapped), codes.FailedPrecondition, "model_busy", "model 'm' is unloading")
}

// A call that carries the caller's traceparent answers with that trace in
// its header metadata (x-trace-id, and a traceparent to continue it), as
// the HTTP edge answers with X-Trace-Id; a call without one, while
// tracing is off, gets no trace to look for.
func TestModelInferReturnsTheCallersTrace(t *testing.T) {
	ts := startServer(t, ServerOptions{})
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req := echoRequest(&pb.ModelInferRequest_InferInputTensor{
		Name: "INPUT0", Datatype: "INT32", Shape: []int64{1},
		Contents: &pb.InferTensorContents{IntContents: []int32{7}},
	})
	var hdr metadata.MD
	ctx := metadata.AppendToOutgoingContext(ctxTimeout(t), "traceparent", parent)
	_, err := ts.client.ModelInfer(ctx, req, grpc.Header(&hdr))
	require.NoError(t, err)
	require.Equal(t, []string{"4bf92f3577b34da6a3ce929d0e0e4736"}, hdr.Get("x-trace-id"))
	require.Len(t, hdr.Get("traceparent"), 1)
	require.Contains(t, hdr.Get("traceparent")[0], "4bf92f3577b34da6a3ce929d0e0e4736")

	hdr = nil
	_, err = ts.client.ModelInfer(ctxTimeout(t), req, grpc.Header(&hdr))
	require.NoError(t, err)
	require.Empty(t, hdr.Get("x-trace-id"))
}
