package perf

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/kservewire"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// The wire protocols (perf_analyzer's -i).
const (
	ProtocolHTTP = "http"
	ProtocolGRPC = "grpc"
)

// ErrUnsupported reports a server that lacks an optional endpoint: model
// metadata, model configuration or statistics.
var ErrUnsupported = errors.New("not supported by the server")

// errStatus reports an inference answered with a non-200 HTTP status.
var errStatus = errors.New("unexpected HTTP status")

// maxMessageBytes bounds gRPC messages and HTTP control answers.
const maxMessageBytes = 256 << 20

// Duration is a count of events and their total time in nanoseconds, as in
// the statistics extension.
type Duration struct {
	Count uint64
	Ns    uint64
}

// StatsSnapshot is a model's cumulative server-side statistics at one
// moment, summed over the versions asked for.
type StatsSnapshot struct {
	InferenceCount uint64
	ExecutionCount uint64
	Success        Duration
	Queue          Duration
	ComputeInput   Duration
	ComputeInfer   Duration
	ComputeOutput  Duration
}

// sender sends one prepared inference request and reports whether it
// succeeded. It is safe for concurrent use.
type sender func(ctx context.Context) error

// client talks to one KServe v2 server.
type client interface {
	modelInfo(ctx context.Context, model, version string) (*ModelInfo, error)
	stats(ctx context.Context, model, version string) (StatsSnapshot, error)
	sender(model, version string, inputs []infer.Tensor, binary bool) (sender, error)
	close() error
}

// httpClient speaks KServe v2 over HTTP/1.1 with keep-alive connections.
type httpClient struct {
	base string
	hc   *http.Client
}

func newHTTPClient(addr string, conns int) *httpClient {
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	tr := &http.Transport{
		MaxIdleConns:        conns + 4,
		MaxIdleConnsPerHost: conns + 4,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &httpClient{base: strings.TrimRight(base, "/"), hc: &http.Client{Transport: tr}}
}

func (c *httpClient) modelPath(model, version string) string {
	p := c.base + "/v2/models/" + url.PathEscape(model)
	if version != "" {
		p += "/versions/" + url.PathEscape(version)
	}
	return p
}

// get fetches a control endpoint. A non-JSON 404/405/501 answer (a server
// without that route) is ErrUnsupported; a JSON error is the server's word
// on the model and is returned as is.
func (c *httpClient) get(ctx context.Context, u string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMessageBytes))
	if err != nil {
		return fmt.Errorf("GET %s: read answer: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		if msg, _, _ := apierr.ParseError(body); msg != "" {
			return fmt.Errorf("GET %s: %d: %s", u, resp.StatusCode, msg)
		}
		switch resp.StatusCode {
		case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
			return fmt.Errorf("GET %s: %d: %w", u, resp.StatusCode, ErrUnsupported)
		}
		return fmt.Errorf("GET %s: %d: %.200s", u, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("GET %s: decode answer: %w", u, err)
	}
	return nil
}

func (c *httpClient) modelInfo(ctx context.Context, model, version string) (*ModelInfo, error) {
	var md struct {
		Inputs []struct {
			Name     string  `json:"name"`
			Datatype string  `json:"datatype"`
			Shape    []int64 `json:"shape"`
		} `json:"inputs"`
		Outputs []struct {
			Name string `json:"name"`
		} `json:"outputs"`
	}
	if err := c.get(ctx, c.modelPath(model, version), &md); err != nil {
		return nil, err
	}
	info := &ModelInfo{MaxBatchSize: -1}
	for _, in := range md.Inputs {
		dt, ok := infer.ParseDataType(in.Datatype)
		if !ok {
			return nil, fmt.Errorf("model metadata: input %q has unknown datatype %q", in.Name, in.Datatype)
		}
		info.Inputs = append(info.Inputs, infer.TensorSpec{Name: in.Name, DataType: dt, Shape: infer.Shape(in.Shape)})
	}
	for _, o := range md.Outputs {
		info.Outputs = append(info.Outputs, o.Name)
	}
	var cfg struct {
		MaxBatchSize *int `json:"max_batch_size"`
	}
	if err := c.get(ctx, c.modelPath(model, version)+"/config", &cfg); err == nil {
		info.MaxBatchSize = 0
		if cfg.MaxBatchSize != nil {
			info.MaxBatchSize = *cfg.MaxBatchSize
		}
	}
	return info, nil
}

func (c *httpClient) stats(ctx context.Context, model, version string) (StatsSnapshot, error) {
	type dur struct {
		Count uint64 `json:"count"`
		Ns    uint64 `json:"ns"`
	}
	var st struct {
		ModelStats []struct {
			Name           string `json:"name"`
			Version        string `json:"version"`
			InferenceCount uint64 `json:"inference_count"`
			ExecutionCount uint64 `json:"execution_count"`
			InferenceStats struct {
				Success       dur `json:"success"`
				Queue         dur `json:"queue"`
				ComputeInput  dur `json:"compute_input"`
				ComputeInfer  dur `json:"compute_infer"`
				ComputeOutput dur `json:"compute_output"`
			} `json:"inference_stats"`
		} `json:"model_stats"`
	}
	if err := c.get(ctx, c.modelPath(model, version)+"/stats", &st); err != nil {
		return StatsSnapshot{}, err
	}
	var s StatsSnapshot
	found := false
	for _, m := range st.ModelStats {
		if m.Name != model || (version != "" && m.Version != version) {
			continue
		}
		found = true
		is := m.InferenceStats
		s.add(StatsSnapshot{
			InferenceCount: m.InferenceCount, ExecutionCount: m.ExecutionCount,
			Success: Duration(is.Success), Queue: Duration(is.Queue), ComputeInput: Duration(is.ComputeInput),
			ComputeInfer: Duration(is.ComputeInfer), ComputeOutput: Duration(is.ComputeOutput),
		})
	}
	if !found {
		return StatsSnapshot{}, fmt.Errorf("statistics have no entry for model %q: %w", model, ErrUnsupported)
	}
	return s, nil
}

func (c *httpClient) sender(model, version string, inputs []infer.Tensor, bin bool) (sender, error) {
	u := c.modelPath(model, version) + "/infer"
	var body []byte
	hdr := http.Header{}
	var err error
	if bin {
		var hl int
		body, hl, err = encodeBinary(inputs)
		hdr.Set("Content-Type", "application/octet-stream")
		hdr.Set("Inference-Header-Content-Length", strconv.Itoa(hl))
	} else {
		body, err = encodeJSON(inputs)
		hdr.Set("Content-Type", "application/json")
	}
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		return c.post(ctx, u, hdr, body)
	}, nil
}

func (c *httpClient) close() error {
	c.hc.CloseIdleConnections()
	return nil
}

type jsonInput struct {
	Name       string          `json:"name"`
	Shape      []int64         `json:"shape"`
	Datatype   string          `json:"datatype"`
	Data       json.RawMessage `json:"data,omitempty"`
	Parameters map[string]any  `json:"parameters,omitempty"`
}

// encodeJSON encodes inputs as a KServe v2 JSON request body.
func encodeJSON(inputs []infer.Tensor) ([]byte, error) {
	var req struct {
		Inputs []jsonInput `json:"inputs"`
	}
	for _, t := range inputs {
		data, err := appendJSONData(nil, t)
		if err != nil {
			return nil, err
		}
		req.Inputs = append(req.Inputs, jsonInput{Name: t.Name, Shape: t.Shape, Datatype: t.DataType.String(), Data: data})
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode JSON request: %w", err)
	}
	return b, nil
}

// encodeBinary encodes inputs with the binary-tensor extension and asks for
// binary outputs; it returns the body and the JSON header's length.
func encodeBinary(inputs []infer.Tensor) ([]byte, int, error) {
	var req struct {
		Inputs     []jsonInput    `json:"inputs"`
		Parameters map[string]any `json:"parameters"`
	}
	req.Parameters = map[string]any{"binary_data_output": true}
	size := 0
	for _, t := range inputs {
		req.Inputs = append(req.Inputs, jsonInput{
			Name: t.Name, Shape: t.Shape, Datatype: t.DataType.String(),
			Parameters: map[string]any{"binary_data_size": len(t.Data)},
		})
		size += len(t.Data)
	}
	head, err := json.Marshal(req)
	if err != nil {
		return nil, 0, fmt.Errorf("encode binary request header: %w", err)
	}
	body := make([]byte, 0, len(head)+size)
	body = append(body, head...)
	for _, t := range inputs {
		body = append(body, t.Data...)
	}
	return body, len(head), nil
}

// appendJSONData appends t's elements as a flat JSON array, in the KServe
// JSON tensor encoding the server reads (kservewire.AppendJSONData).
// FP16 and BF16 are refused: perf sends them only in binary form, so that
// what the server receives is exactly the file's bits.
func appendJSONData(dst []byte, t infer.Tensor) ([]byte, error) {
	if t.DataType == infer.FP16 || t.DataType == infer.BF16 {
		return nil, fmt.Errorf("input %q: %s has no JSON form; use --binary or -i grpc", t.Name, t.DataType)
	}
	if err := t.CheckSize(); err != nil {
		return nil, fmt.Errorf("input %q: %w", t.Name, err)
	}
	dst, err := kservewire.AppendJSONData(dst, &t)
	if err != nil {
		return nil, fmt.Errorf("input %q: %w", t.Name, err)
	}
	return dst, nil
}

// grpcClient speaks KServe v2 over gRPC on one HTTP/2 connection.
type grpcClient struct {
	conn *grpc.ClientConn
	svc  pb.GRPCInferenceServiceClient
}

func newGRPCClient(addr string) (*grpcClient, error) {
	addr = strings.TrimPrefix(addr, "grpc://")
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes)))
	if err != nil {
		return nil, fmt.Errorf("dial gRPC %s: %w", addr, err)
	}
	return &grpcClient{conn: conn, svc: pb.NewGRPCInferenceServiceClient(conn)}, nil
}

func grpcErr(what string, err error) error {
	if status.Code(err) == codes.Unimplemented {
		return fmt.Errorf("%s: %w", what, ErrUnsupported)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func (c *grpcClient) modelInfo(ctx context.Context, model, version string) (*ModelInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	md, err := c.svc.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: model, Version: version})
	if err != nil {
		return nil, grpcErr("model metadata", err)
	}
	info := &ModelInfo{MaxBatchSize: -1}
	for _, in := range md.GetInputs() {
		dt, ok := infer.ParseDataType(in.GetDatatype())
		if !ok {
			return nil, fmt.Errorf("model metadata: input %q has unknown datatype %q", in.GetName(), in.GetDatatype())
		}
		info.Inputs = append(info.Inputs, infer.TensorSpec{Name: in.GetName(), DataType: dt, Shape: infer.Shape(in.GetShape())})
	}
	for _, o := range md.GetOutputs() {
		info.Outputs = append(info.Outputs, o.GetName())
	}
	if cfg, err := c.svc.ModelConfig(ctx, &pb.ModelConfigRequest{Name: model, Version: version}); err == nil {
		info.MaxBatchSize = int(cfg.GetConfig().GetMaxBatchSize())
	}
	return info, nil
}

func (c *grpcClient) stats(ctx context.Context, model, version string) (StatsSnapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := c.svc.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: model, Version: version})
	if err != nil {
		return StatsSnapshot{}, grpcErr("model statistics", err)
	}
	d := func(x *pb.StatisticDuration) Duration { return Duration{Count: x.GetCount(), Ns: x.GetNs()} }
	var s StatsSnapshot
	found := false
	for _, m := range resp.GetModelStats() {
		if m.GetName() != model || (version != "" && m.GetVersion() != version) {
			continue
		}
		found = true
		is := m.GetInferenceStats()
		s.add(StatsSnapshot{
			InferenceCount: m.GetInferenceCount(), ExecutionCount: m.GetExecutionCount(),
			Success: d(is.GetSuccess()), Queue: d(is.GetQueue()), ComputeInput: d(is.GetComputeInput()),
			ComputeInfer: d(is.GetComputeInfer()), ComputeOutput: d(is.GetComputeOutput()),
		})
	}
	if !found {
		return StatsSnapshot{}, fmt.Errorf("statistics have no entry for model %q: %w", model, ErrUnsupported)
	}
	return s, nil
}

func (c *grpcClient) sender(model, version string, inputs []infer.Tensor, _ bool) (sender, error) {
	req := &pb.ModelInferRequest{ModelName: model, ModelVersion: version}
	for _, t := range inputs {
		req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{
			Name: t.Name, Datatype: t.DataType.String(), Shape: t.Shape,
		})
		req.RawInputContents = append(req.RawInputContents, t.Data)
	}
	return func(ctx context.Context) error {
		_, err := c.svc.ModelInfer(ctx, req)
		return err
	}, nil
}

func (c *grpcClient) close() error { return c.conn.Close() }

func (s *StatsSnapshot) add(o StatsSnapshot) {
	s.InferenceCount += o.InferenceCount
	s.ExecutionCount += o.ExecutionCount
	for _, p := range [...]struct{ a, b *Duration }{
		{&s.Success, &o.Success},
		{&s.Queue, &o.Queue},
		{&s.ComputeInput, &o.ComputeInput},
		{&s.ComputeInfer, &o.ComputeInfer},
		{&s.ComputeOutput, &o.ComputeOutput},
	} {
		p.a.Count += p.b.Count
		p.a.Ns += p.b.Ns
	}
}

// post sends one request of the load and reads the answer to its end; a
// status other than 200 is an error (errStatus) with the body's start.
func (c *httpClient) post(ctx context.Context, u string, h http.Header, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	maps.Copy(req.Header, h)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%w %d: %s", errStatus, resp.StatusCode, bytes.TrimSpace(msg))
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	return nil
}
