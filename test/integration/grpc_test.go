package integration_test

import (
	"encoding/binary"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

func dialGRPC(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestGRPC(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--model-repository", "examples/models")
	conn := dialGRPC(t, s.grpc)
	client := inferencepb.NewGRPCInferenceServiceClient(conn)
	in0, in1 := simpleInputs(t)

	t.Run("health serving", func(t *testing.T) {
		resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health = %v, want SERVING", resp.GetStatus())
		}
	})

	t.Run("raw contents", func(t *testing.T) {
		raw := func(vals []float64) []byte {
			b := make([]byte, 0, 4*len(vals))
			for _, v := range vals {
				b = binary.LittleEndian.AppendUint32(b, uint32(int32(v)))
			}
			return b
		}
		resp, err := client.ModelInfer(t.Context(), &inferencepb.ModelInferRequest{
			ModelName: "simple",
			Id:        "raw-1",
			Inputs: []*inferencepb.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}},
				{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}},
			},
			RawInputContents: [][]byte{raw(in0), raw(in1)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetId() != "raw-1" || resp.GetModelName() != "simple" || resp.GetModelVersion() != "1" {
			t.Errorf("response id/model/version = %q/%q/%q", resp.GetId(), resp.GetModelName(), resp.GetModelVersion())
		}
		outs := map[string][]float64{}
		for i, o := range resp.GetOutputs() {
			b := resp.GetRawOutputContents()[i]
			vals := make([]float64, len(b)/4)
			for j := range vals {
				vals[j] = float64(int32(binary.LittleEndian.Uint32(b[4*j:])))
			}
			outs[o.GetName()] = vals
		}
		checkSimple(t, in0, in1, func(n string) []float64 { return outs[n] })
	})

	t.Run("typed contents and output selection", func(t *testing.T) {
		ints := func(vals []float64) []int32 {
			out := make([]int32, len(vals))
			for i, v := range vals {
				out[i] = int32(v)
			}
			return out
		}
		resp, err := client.ModelInfer(t.Context(), &inferencepb.ModelInferRequest{
			ModelName: "simple",
			Inputs: []*inferencepb.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}, Contents: &inferencepb.InferTensorContents{IntContents: ints(in0)}},
				{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}, Contents: &inferencepb.InferTensorContents{IntContents: ints(in1)}},
			},
			Outputs: []*inferencepb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT1"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetOutputs()) != 1 || resp.GetOutputs()[0].GetName() != "OUTPUT1" {
			t.Fatalf("outputs = %v, want only OUTPUT1", resp.GetOutputs())
		}
		b := resp.GetRawOutputContents()[0]
		for i := range 16 {
			if got := int32(binary.LittleEndian.Uint32(b[4*i:])); float64(got) != in0[i]-in1[i] {
				t.Fatalf("OUTPUT1[%d] = %d, want %v", i, got, in0[i]-in1[i])
			}
		}
	})

	t.Run("errors carry codes", func(t *testing.T) {
		_, err := client.ModelInfer(t.Context(), &inferencepb.ModelInferRequest{ModelName: "nope"})
		if status.Code(err) != codes.NotFound {
			t.Errorf("unknown model: %v, want NotFound", err)
		}
		_, err = client.ModelInfer(t.Context(), &inferencepb.ModelInferRequest{
			ModelName: "simple",
			Inputs: []*inferencepb.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 15}, Contents: &inferencepb.InferTensorContents{IntContents: make([]int32, 15)}},
				{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}, Contents: &inferencepb.InferTensorContents{IntContents: make([]int32, 16)}},
			},
		})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "INPUT0") {
			t.Errorf("wrong shape: %v, want InvalidArgument naming INPUT0", err)
		}
	})

	t.Run("metadata config index", func(t *testing.T) {
		md, err := client.ModelMetadata(t.Context(), &inferencepb.ModelMetadataRequest{Name: "parcel_eta"})
		if err != nil {
			t.Fatal(err)
		}
		if md.GetPlatform() != "onnxruntime_onnx" || len(md.GetInputs()) != 3 {
			t.Errorf("metadata = %v", md)
		}
		cfg, err := client.ModelConfig(t.Context(), &inferencepb.ModelConfigRequest{Name: "parcel_eta"})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.GetConfig().GetMaxBatchSize() != 128 {
			t.Errorf("max_batch_size = %d, want 128", cfg.GetConfig().GetMaxBatchSize())
		}
		idx, err := client.RepositoryIndex(t.Context(), &inferencepb.RepositoryIndexRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ready := map[string]bool{}
		for _, m := range idx.GetModels() {
			if m.GetState() == "READY" {
				ready[m.GetName()] = true
			}
		}
		for _, n := range []string{"simple", "parcel_eta", "digits"} {
			if !ready[n] {
				t.Errorf("index %v: %s not READY", idx.GetModels(), n)
			}
		}
	})

	t.Run("statistics count successes", func(t *testing.T) {
		ctx := t.Context()
		stats, err := client.ModelStatistics(ctx, &inferencepb.ModelStatisticsRequest{Name: "simple"})
		if err != nil {
			t.Fatal(err)
		}
		if len(stats.GetModelStats()) == 0 || stats.GetModelStats()[0].GetInferenceStats().GetSuccess().GetCount() < 2 {
			t.Errorf("statistics after two successful inferences: %v", stats)
		}
	})
}
