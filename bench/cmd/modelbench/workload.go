package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// featureInput is one FP32 input of the workload, as rows of equal width.
type featureInput struct {
	Name  string
	Width int
	Rows  [][]float32
}

// workload is one request's worth of inputs at a fixed batch size, encoded
// once up front in every form the targets send.
type workload struct {
	Model   string
	Batch   int
	Outputs []string
	Inputs  []featureInput

	JSONBody       []byte // KServe v2 JSON request
	BinaryBody     []byte // binary-tensor extension: JSON header + raw tensors
	BinaryHeaderLn int    // Inference-Header-Content-Length
	Tensors        []infer.Tensor
	GRPC           *inferencepb.ModelInferRequest
}

// loadFeatures reads a KServe v2 JSON request body (FP32 inputs of shape
// [rows, width]) and returns its inputs row by row.
func loadFeatures(path string) ([]featureInput, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read request file: %w", err)
	}
	var body struct {
		Inputs []struct {
			Name     string    `json:"name"`
			Shape    []int     `json:"shape"`
			Datatype string    `json:"datatype"`
			Data     []float32 `json:"data"`
		} `json:"inputs"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, fmt.Errorf("decode request file %s: %w", path, err)
	}
	if len(body.Inputs) == 0 {
		return nil, fmt.Errorf("request file %s has no inputs", path)
	}
	out := make([]featureInput, 0, len(body.Inputs))
	for _, in := range body.Inputs {
		if in.Datatype != "FP32" || len(in.Shape) != 2 || in.Shape[0] < 1 || in.Shape[1] < 1 ||
			len(in.Data) != in.Shape[0]*in.Shape[1] {
			return nil, fmt.Errorf("request file %s: input %q must be FP32 [rows, width] with matching data", path, in.Name)
		}
		fi := featureInput{Name: in.Name, Width: in.Shape[1]}
		for r := range in.Shape[0] {
			fi.Rows = append(fi.Rows, in.Data[r*fi.Width:(r+1)*fi.Width])
		}
		out = append(out, fi)
	}
	return out, nil
}

// newWorkload builds a batch of the given size by cycling through the
// source rows, and encodes it for every transport.
func newWorkload(model string, outputs []string, src []featureInput, batch int) (*workload, error) {
	w := &workload{Model: model, Batch: batch, Outputs: outputs}
	for _, in := range src {
		fi := featureInput{Name: in.Name, Width: in.Width}
		for r := range batch {
			fi.Rows = append(fi.Rows, in.Rows[r%len(in.Rows)])
		}
		w.Inputs = append(w.Inputs, fi)
	}

	type jsonTensor struct {
		Name       string         `json:"name"`
		Shape      []int          `json:"shape"`
		Datatype   string         `json:"datatype"`
		Data       []float32      `json:"data,omitempty"`
		Parameters map[string]any `json:"parameters,omitempty"`
	}
	type jsonOutput struct {
		Name       string         `json:"name"`
		Parameters map[string]any `json:"parameters,omitempty"`
	}
	var jsonReq struct {
		Inputs     []jsonTensor   `json:"inputs"`
		Outputs    []jsonOutput   `json:"outputs,omitempty"`
		Parameters map[string]any `json:"parameters,omitempty"`
	}
	var binHeader = jsonReq
	var raw []byte
	w.GRPC = &inferencepb.ModelInferRequest{ModelName: model}
	for _, in := range w.Inputs {
		flat := make([]float32, 0, batch*in.Width)
		for _, row := range in.Rows {
			flat = append(flat, row...)
		}
		data := fp32Bytes(flat)
		shape := []int{batch, in.Width}
		jsonReq.Inputs = append(jsonReq.Inputs, jsonTensor{Name: in.Name, Shape: shape, Datatype: "FP32", Data: flat})
		binHeader.Inputs = append(binHeader.Inputs, jsonTensor{Name: in.Name, Shape: shape, Datatype: "FP32",
			Parameters: map[string]any{"binary_data_size": len(data)}})
		raw = append(raw, data...)
		w.Tensors = append(w.Tensors, infer.Tensor{Name: in.Name, DataType: infer.FP32,
			Shape: infer.Shape{int64(batch), int64(in.Width)}, Data: data})
		w.GRPC.Inputs = append(w.GRPC.Inputs, &inferencepb.ModelInferRequest_InferInputTensor{
			Name: in.Name, Datatype: "FP32", Shape: []int64{int64(batch), int64(in.Width)}})
		w.GRPC.RawInputContents = append(w.GRPC.RawInputContents, data)
	}
	for _, o := range outputs {
		binHeader.Outputs = append(binHeader.Outputs, jsonOutput{Name: o, Parameters: map[string]any{"binary_data": true}})
	}
	binHeader.Parameters = map[string]any{"binary_data_output": true}

	var err error
	if w.JSONBody, err = json.Marshal(jsonReq); err != nil {
		return nil, fmt.Errorf("encode JSON request: %w", err)
	}
	header, err := json.Marshal(binHeader)
	if err != nil {
		return nil, fmt.Errorf("encode binary request header: %w", err)
	}
	w.BinaryHeaderLn = len(header)
	w.BinaryBody = append(header, raw...)
	return w, nil
}

func fp32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func fp32Values(b []byte) ([]float32, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("FP32 data of %d bytes is not a multiple of 4", len(b))
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}
