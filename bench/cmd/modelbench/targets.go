package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/backend/onnxruntime"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// target is one system under test, driven through one transport.
type target struct {
	Row       string // table label
	Transport string
	Batch     int
	IsPeer    bool // the Flask reference the ratios divide by
	// Do sends one request and checks only that it succeeded.
	Do doFunc
	// Probe sends one request and decodes the first output (eta_prediction),
	// to check that every target computes the same thing.
	Probe func(ctx context.Context) ([]float32, error)
	Close func() error
}

// newHTTPClient returns a keep-alive client sized for the given concurrency.
func newHTTPClient(conns int) *http.Client {
	tr := &http.Transport{
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr}
}

func postInfer(ctx context.Context, client *http.Client, url string, body []byte, hdr http.Header) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, fmt.Errorf("build request: %w", err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("read response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("%w %d: %.200s", errStatus, resp.StatusCode, b)
	}
	return resp, b, nil
}

// jsonTarget drives a KServe v2 JSON endpoint (Sluice or the Flask peer).
func jsonTarget(row, baseURL string, w *workload, client *http.Client) *target {
	url := baseURL + "/v2/models/" + w.Model + "/infer"
	hdr := http.Header{"Content-Type": {"application/json"}}
	return &target{
		Row: row, Transport: "HTTP JSON", Batch: w.Batch,
		Do: func(ctx context.Context) error {
			_, _, err := postInfer(ctx, client, url, w.JSONBody, hdr)
			return err
		},
		Probe: func(ctx context.Context) ([]float32, error) {
			_, b, err := postInfer(ctx, client, url, w.JSONBody, hdr)
			if err != nil {
				return nil, err
			}
			var resp struct {
				Outputs []struct {
					Name string    `json:"name"`
					Data []float32 `json:"data"`
				} `json:"outputs"`
			}
			if err := json.Unmarshal(b, &resp); err != nil {
				return nil, fmt.Errorf("decode JSON response: %w", err)
			}
			for _, o := range resp.Outputs {
				if o.Name == w.Outputs[0] {
					return o.Data, nil
				}
			}
			return nil, fmt.Errorf("response has no output %q", w.Outputs[0])
		},
		Close: func() error { client.CloseIdleConnections(); return nil },
	}
}

// binaryTarget drives Sluice's binary-tensor extension, asking for binary
// outputs too.
func binaryTarget(row, baseURL string, w *workload, client *http.Client) *target {
	url := baseURL + "/v2/models/" + w.Model + "/infer"
	hdr := http.Header{
		"Content-Type":                    {"application/octet-stream"},
		"Inference-Header-Content-Length": {strconv.Itoa(w.BinaryHeaderLn)},
	}
	return &target{
		Row: row, Transport: "HTTP binary tensors", Batch: w.Batch,
		Do: func(ctx context.Context) error {
			_, _, err := postInfer(ctx, client, url, w.BinaryBody, hdr)
			return err
		},
		Probe: func(ctx context.Context) ([]float32, error) {
			resp, b, err := postInfer(ctx, client, url, w.BinaryBody, hdr)
			if err != nil {
				return nil, err
			}
			hl, err := strconv.Atoi(resp.Header.Get("Inference-Header-Content-Length"))
			if err != nil || hl < 0 || hl > len(b) {
				return nil, fmt.Errorf("bad Inference-Header-Content-Length %q", resp.Header.Get("Inference-Header-Content-Length"))
			}
			var head struct {
				Outputs []struct {
					Name       string `json:"name"`
					Parameters struct {
						BinaryDataSize int `json:"binary_data_size"`
					} `json:"parameters"`
				} `json:"outputs"`
			}
			if err := json.Unmarshal(b[:hl], &head); err != nil {
				return nil, fmt.Errorf("decode binary response header: %w", err)
			}
			rest := b[hl:]
			for _, o := range head.Outputs {
				n := o.Parameters.BinaryDataSize
				if n < 0 || n > len(rest) {
					return nil, fmt.Errorf("output %q: binary_data_size %d overruns the body", o.Name, n)
				}
				if o.Name == w.Outputs[0] {
					return fp32Values(rest[:n])
				}
				rest = rest[n:]
			}
			return nil, fmt.Errorf("response has no binary output %q", w.Outputs[0])
		},
		Close: func() error { client.CloseIdleConnections(); return nil },
	}
}

// grpcTarget drives Sluice's gRPC ModelInfer with raw_input_contents over one
// shared connection.
func grpcTarget(row, addr string, w *workload) (*target, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return nil, fmt.Errorf("dial gRPC %s: %w", addr, err)
	}
	client := inferencepb.NewGRPCInferenceServiceClient(conn)
	return &target{
		Row: row, Transport: "gRPC raw_input_contents", Batch: w.Batch,
		Do: func(ctx context.Context) error {
			_, err := client.ModelInfer(ctx, w.GRPC)
			return err
		},
		Probe: func(ctx context.Context) ([]float32, error) {
			resp, err := client.ModelInfer(ctx, w.GRPC)
			if err != nil {
				return nil, err
			}
			for i, o := range resp.GetOutputs() {
				if o.GetName() != w.Outputs[0] {
					continue
				}
				if i < len(resp.GetRawOutputContents()) {
					return fp32Values(resp.GetRawOutputContents()[i])
				}
				return o.GetContents().GetFp32Contents(), nil
			}
			return nil, fmt.Errorf("response has no output %q", w.Outputs[0])
		},
		Close: conn.Close,
	}, nil
}

// ortTarget runs the model in this process through Sluice's ONNX Runtime
// backend: one session (intra-op threads 1), shared by every worker, inputs
// built once. This is the limit no server can beat.
func ortTarget(ctx context.Context, row, libPath, modelPath string, w *workload, logger *slog.Logger) (*target, error) {
	be, err := onnxruntime.New(onnxruntime.Options{LibraryPath: libPath}, logger)
	if err != nil {
		return nil, fmt.Errorf("start onnxruntime backend: %w", err)
	}
	inst, err := be.Load(ctx, backend.LoadOptions{
		Model: w.Model, Version: 2, Path: modelPath,
		Parameters:    map[string]string{onnxruntime.ParamIntraOpThreads: "1"},
		InstanceCount: 1,
	})
	if err != nil {
		_ = be.Close()
		return nil, fmt.Errorf("load %s: %w", modelPath, err)
	}
	return &target{
		Row: row, Transport: "in-process Execute", Batch: w.Batch,
		Do: func(ctx context.Context) error {
			_, err := inst.Execute(ctx, w.Tensors, w.Outputs)
			return err
		},
		Probe: func(ctx context.Context) ([]float32, error) {
			out, err := inst.Execute(ctx, w.Tensors, w.Outputs[:1])
			if err != nil {
				return nil, err
			}
			return fp32Values(out[0].Data)
		},
		Close: func() error {
			ierr := inst.Close()
			berr := be.Close()
			if ierr != nil {
				return ierr
			}
			return berr
		},
	}, nil
}
