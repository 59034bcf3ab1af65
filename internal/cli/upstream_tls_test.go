package cli

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-ml/sluice/internal/config"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/release/record"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
	"github.com/sluice-ml/sluice/internal/testutil/tlsrun"
	"github.com/sluice-ml/sluice/internal/tlsconfig"
)

// tlsModelServer is a KServe v2 gRPC server for model eta_model (input x
// FP32 [-1, 2]; outputs eta_prediction and confidence_score) that answers
// 42 and 0.9, served over mTLS with f's certificates.
type tlsModelServer struct {
	pb.UnimplementedGRPCInferenceServiceServer

	mu  sync.Mutex // protects ids
	ids []string   // the client identity of each ModelInfer
}

func (s *tlsModelServer) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: true}, nil
}

func (s *tlsModelServer) ModelReady(context.Context, *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	return &pb.ModelReadyResponse{Ready: true}, nil
}

func (s *tlsModelServer) ModelMetadata(context.Context, *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	return &pb.ModelMetadataResponse{
		Name: "eta_model", Versions: []string{"1"}, Platform: "onnxruntime_onnx",
		Inputs: []*pb.ModelMetadataResponse_TensorMetadata{{Name: "x", Datatype: "FP32", Shape: []int64{-1, 2}}},
		Outputs: []*pb.ModelMetadataResponse_TensorMetadata{
			{Name: "eta_prediction", Datatype: "FP32", Shape: []int64{-1, 1}},
			{Name: "confidence_score", Datatype: "FP32", Shape: []int64{-1, 1}},
		},
	}, nil
}

func (s *tlsModelServer) ModelInfer(ctx context.Context, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	s.mu.Lock()
	s.ids = append(s.ids, tlsconfig.GRPCIdentity(ctx))
	s.mu.Unlock()
	f32 := func(x float32) []byte { return binary.LittleEndian.AppendUint32(nil, math.Float32bits(x)) }
	return &pb.ModelInferResponse{
		ModelName: req.GetModelName(), ModelVersion: "1", Id: req.GetId(),
		Outputs: []*pb.ModelInferResponse_InferOutputTensor{
			{Name: "eta_prediction", Datatype: "FP32", Shape: []int64{1, 1}},
			{Name: "confidence_score", Datatype: "FP32", Shape: []int64{1, 1}},
		},
		RawOutputContents: [][]byte{f32(42), f32(0.9)},
	}, nil
}

func startTLSModelServer(t *testing.T, f *tlsrun.Files) (string, *tlsModelServer) {
	t.Helper()
	ts, err := tlsconfig.NewServer("models_grpc", tlsconfig.ServerOptions{CertFile: f.ServerCert, KeyFile: f.ServerKey, ClientCAFile: f.CAFile}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := &tlsModelServer{}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(ts.Config())))
	pb.RegisterGRPCInferenceServiceServer(srv, m)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String(), m
}

func cliFreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// etaServiceYAML is a gateway service, eta, whose one route calls the
// backend named remote (model eta_model, input x, output eta_prediction).
const etaServiceYAML = `    - name: eta
      path: POST /v1/services/eta:predict
      entities: [{name: user, join_key: user_id}]
      request_fields: [{name: base_eta, type: float32, required: true}]
      model: {name: eta_model, version: "1"}
      inputs: [{tensor: x, features: [field:user_id, field:base_eta]}]
      outputs: [{name: eta_minutes, from: eta_prediction}]
      routes: [{name: default, timeout: 5s, route: {weighted: [{backend: remote, weight: 100}]}}]
`

// tlsGatewayYAML is a gateway-only sluice.yaml in f.Dir whose one service
// calls a kserve_grpc backend at addr with the tls block given (paths
// relative to f.Dir).
func tlsGatewayYAML(t *testing.T, f *tlsrun.Files, addr, tls string) string {
	t.Helper()
	doc := fmt.Sprintf(`gateway:
  listen: %q
  admin: %q
  anonymous: {allowed: true}
  services:
%s  backends: [{name: remote, kind: kserve_grpc, endpoints: [%q], tls: %s}]
`, cliFreeAddr(t), cliFreeAddr(t), etaServiceYAML, addr, tls)
	path := filepath.Join(f.Dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const relativeMTLS = "{ca_file: ca.crt, cert_file: client.crt, key_file: client.key}"

func TestConfigCheckTLSBackend(t *testing.T) {
	f := tlsrun.NewFiles(t)
	addr, _ := startTLSModelServer(t, f)
	for _, tc := range []struct {
		name, tls string
		wantErr   []string
	}{
		{name: "mtls", tls: relativeMTLS},
		{
			name: "unknown CA", tls: "{ca_file: other-ca.crt, cert_file: client.crt, key_file: client.key}",
			wantErr: []string{"warning:", "not checked", "certificate signed by unknown authority"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tlsGatewayYAML(t, f, addr, tc.tls)
			var out, errOut bytes.Buffer
			if code := Run(t.Context(), []string{"config", "check", "-c", path}, &out, &errOut); code != 0 {
				t.Fatalf("exit code %d; stderr:\n%s", code, errOut.String())
			}
			if !strings.Contains(out.String(), "sluice.yaml: ok") {
				t.Errorf("stdout = %q", out.String())
			}
			if len(tc.wantErr) == 0 && errOut.Len() > 0 {
				t.Errorf("the model's signature was checked over mTLS, yet stderr = %q", errOut.String())
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(errOut.String(), w) {
					t.Errorf("stderr = %q, want it to contain %q", errOut.String(), w)
				}
			}
		})
	}
}

func TestServeGatewayTLSBackend(t *testing.T) {
	f := tlsrun.NewFiles(t)
	addr, models := startTLSModelServer(t, f)
	path := tlsGatewayYAML(t, f, addr, relativeMTLS)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- Run(ctx, []string{"serve", "-c", path}, &out, &errOut) }()
	defer func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("serve exited %d; stderr:\n%s", code, errOut.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop within 30s")
		}
	}()

	url := "http://" + cfg.Gateway.Listen + "/v1/services/eta:predict"
	harness.WaitFor(t, 20*time.Second, 50*time.Millisecond, "the gateway answering", func() (bool, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(`{"user_id": 7, "base_eta": 30}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"eta_minutes":42`) {
				t.Fatalf("status %d, body %s", resp.StatusCode, body)
			}
			return true, ""
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited %d; stderr:\n%s", code, errOut.String())
		default:
		}
		return false, err.Error()
	})
	models.mu.Lock()
	defer models.mu.Unlock()
	if len(models.ids) != 1 || models.ids[0] != tlsrun.ClientIdentity {
		t.Errorf("model server saw client identities %q, want [%q]", models.ids, tlsrun.ClientIdentity)
	}
}

func TestRecorderNATSTLS(t *testing.T) {
	f := tlsrun.NewFiles(t)
	srv := tlsrun.StartNATS(t, f, tlsrun.NATSOptions{RequireClientCert: true})
	tlsOpts := &config.ClientTLS{CAFile: f.CAFile, CertFile: f.ClientCert, KeyFile: f.ClientKey}
	gc := &config.Gateway{
		Services: []config.Service{{Name: "eta", Shadow: &config.Shadow{Version: "2"}}},
		Recording: config.Recording{
			Sink: "nats", QueueSize: 16, CloseTimeout: config.Duration(5 * time.Second),
			NATS:  config.RecordingNATS{URL: "nats://" + srv.Addr, Stream: "SLUICE_RECORDINGS", SubjectPrefix: "sluice.recordings", TLS: tlsOpts},
			Spool: config.RecordingSpool{Dir: t.TempDir(), MaxBytes: 1 << 20, Full: "drop_newest"},
		},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	logger := slog.New(slog.DiscardHandler)
	w, err := openRecorder(ctx, gc, logger, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rec := &record.Record{RequestID: "req-1", Time: time.Now(), Service: "eta", Arms: map[string]record.Arm{
		record.ArmPrimary: {Model: "eta_model", Version: "1", Status: 200, Outputs: map[string][]float64{"eta_prediction": {42}}},
	}}
	if !w.Offer(rec) {
		t.Fatal("record refused")
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	tc, err := tlsconfig.ClientConfig(*tlsOpts)
	if err != nil {
		t.Fatal(err)
	}
	src, err := record.OpenStream(ctx, record.NATSOptions{URL: "nats://" + srv.Addr, Stream: "SLUICE_RECORDINGS", TLS: tc}, record.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := record.ReadAll(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].RequestID != "req-1" {
		t.Fatalf("stream holds %+v, want the one record", got)
	}

	t.Run("unknown CA", func(t *testing.T) {
		bad := *gc
		bad.Recording.Spool.Dir = t.TempDir()
		bad.Recording.NATS.TLS = &config.ClientTLS{CAFile: f.OtherCAFile, CertFile: f.ClientCert, KeyFile: f.ClientKey}
		_, err := openRecorder(ctx, &bad, logger, prometheus.NewRegistry())
		if err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
			t.Fatalf("err = %v, want an unknown-authority error", err)
		}
	})
}
