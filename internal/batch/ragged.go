package batch

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/sluice-ml/sluice/internal/infer"
)

// BatchInputKind is what a batch input describes (Triton's BatchInput
// kinds).
type BatchInputKind uint8 //nolint:revive // exported: named after the model config's batch_input, as Triton names it

// The batch input kinds. Counts are of the source input's elements in
// each request (all its rows).
const (
	// ElementCount: one count per request, shape [requests].
	ElementCount BatchInputKind = iota
	// AccumulatedElementCount: the running sum of the counts, shape
	// [requests] (the end offset of each request in the ragged input).
	AccumulatedElementCount
	// AccumulatedElementCountWithZero: 0, then the running sums, shape
	// [requests+1].
	AccumulatedElementCountWithZero
	// MaxElementCountAsShape: a zero-filled tensor of shape [max count]:
	// the shape is the information.
	MaxElementCountAsShape
	// ItemShape: each row's shape of the source input (batch dimension
	// left out), shape [rows, rank].
	ItemShape
	// ItemShapeFlatten: the same values, shape [rows*rank].
	ItemShapeFlatten
)

// BatchInput is an input the batcher computes from the batch it formed
// and adds to the executor's inputs.
type BatchInput struct { //nolint:revive // exported: named after the model config's batch_input, as Triton names it
	Kind     BatchInputKind
	Targets  []string       // the model inputs that receive it
	DataType infer.DataType // INT32 or FP32
	Source   string         // the request input it describes
}

// BatchOutput is an output split among the batch's requests by the shape
// of a request input (Triton's BATCH_SCATTER_WITH_INPUT_SHAPE): the model
// returns the requests' parts concatenated, and each request gets as many
// elements as its Source input has, shaped like it.
type BatchOutput struct { //nolint:revive // exported: named after the model config's batch_output, as Triton names it
	Targets []string
	Source  string
}

// raggedMode reports whether batches are packed the ragged way: some
// input has allow_ragged_batch or the model takes batch inputs or gives
// batch outputs.
func (o *Options) raggedMode() bool {
	return len(o.RaggedInputs) > 0 || len(o.BatchInputs) > 0 || len(o.BatchOutputs) > 0
}

func (o *Options) validateRagged() error {
	for _, bi := range o.BatchInputs {
		if bi.Kind > ItemShapeFlatten {
			return fmt.Errorf("batch input %v: unknown kind %d", bi.Targets, bi.Kind)
		}
		if bi.DataType != infer.Int32 && bi.DataType != infer.FP32 {
			return fmt.Errorf("batch input %v: data type %s is not INT32 or FP32", bi.Targets, bi.DataType)
		}
		if len(bi.Targets) == 0 || bi.Source == "" {
			return fmt.Errorf("batch input %v: needs a target and a source input", bi.Targets)
		}
	}
	for _, bo := range o.BatchOutputs {
		if len(bo.Targets) == 0 || bo.Source == "" {
			return fmt.Errorf("batch output %v: needs a target and a source input", bo.Targets)
		}
	}
	return nil
}

// packRagged builds a ragged-mode execution's inputs: ragged inputs
// flattened into one dimension ([total elements]), the others stacked
// along the batch dimension, then the batch inputs.
func (b *Batcher) packRagged(batch []*pending, total int) ([]infer.Tensor, error) {
	head := batch[0].req
	inputs := make([]infer.Tensor, 0, len(head.Inputs)+len(b.batchInputs))
	for i := range head.Inputs {
		h := &head.Inputs[i]
		var data []byte
		elems := 0
		for _, p := range batch {
			t := &p.req.Inputs[i]
			data = append(data, t.Data...)
			n, err := t.Shape.Elements()
			if err != nil {
				return nil, err
			}
			elems += n
		}
		var shape infer.Shape
		if b.raggedInputs[h.Name] {
			shape = infer.Shape{int64(elems)}
		} else {
			shape = append(infer.Shape{int64(total)}, h.Shape[1:]...)
		}
		inputs = append(inputs, infer.Tensor{Name: h.Name, DataType: h.DataType, Shape: shape, Data: data})
	}
	for _, bi := range b.batchInputs {
		t, err := batchInputTensor(bi, batch, total)
		if err != nil {
			return nil, err
		}
		for _, target := range bi.Targets {
			t.Name = target
			inputs = append(inputs, t)
		}
	}
	return inputs, nil
}

// batchInputTensor computes one batch input.
func batchInputTensor(bi BatchInput, batch []*pending, total int) (infer.Tensor, error) {
	src := func(p *pending) (*infer.Tensor, error) {
		if t := p.req.input(bi.Source); t != nil {
			return t, nil
		}
		return nil, fmt.Errorf("batch input %v: a request has no source input '%s'", bi.Targets, bi.Source)
	}
	var vals []float64
	var shape infer.Shape
	switch bi.Kind {
	case ElementCount, AccumulatedElementCount, AccumulatedElementCountWithZero, MaxElementCountAsShape:
		if bi.Kind == AccumulatedElementCountWithZero {
			vals = append(vals, 0)
		}
		sum, most := 0, 0
		for _, p := range batch {
			t, err := src(p)
			if err != nil {
				return infer.Tensor{}, err
			}
			n, err := t.Shape.Elements()
			if err != nil {
				return infer.Tensor{}, err
			}
			sum += n
			most = max(most, n)
			if bi.Kind == ElementCount {
				vals = append(vals, float64(n))
			} else {
				vals = append(vals, float64(sum))
			}
		}
		shape = infer.Shape{int64(len(vals))}
		if bi.Kind == MaxElementCountAsShape {
			vals = make([]float64, most)
			shape = infer.Shape{int64(most)}
		}
	case ItemShape, ItemShapeFlatten:
		rank := -1
		for _, p := range batch {
			t, err := src(p)
			if err != nil {
				return infer.Tensor{}, err
			}
			if rank >= 0 && len(t.Shape)-1 != rank {
				return infer.Tensor{}, fmt.Errorf("batch input %v: source input '%s' has different ranks in one batch", bi.Targets, bi.Source)
			}
			rank = len(t.Shape) - 1
			for range max(p.bs, 1) {
				for _, d := range t.Shape[1:] {
					vals = append(vals, float64(d))
				}
			}
		}
		rank = max(rank, 0)
		shape = infer.Shape{int64(total), int64(rank)}
		if bi.Kind == ItemShapeFlatten {
			shape = infer.Shape{int64(total * rank)}
		}
	}
	data := make([]byte, 0, 4*len(vals))
	for _, v := range vals {
		if bi.DataType == infer.FP32 {
			data = binary.LittleEndian.AppendUint32(data, math.Float32bits(float32(v)))
		} else {
			data = binary.LittleEndian.AppendUint32(data, uint32(int32(v)))
		}
	}
	return infer.Tensor{DataType: bi.DataType, Shape: shape, Data: data}, nil
}

// input returns the request's input named name, or nil.
func (r *Request) input(name string) *infer.Tensor {
	for i := range r.Inputs {
		if r.Inputs[i].Name == name {
			return &r.Inputs[i]
		}
	}
	return nil
}

// splitRagged gives each request its part of every output it asked for:
// a batch output's elements by the shape of its source input, any other
// output's rows.
func (b *Batcher) splitRagged(batch []*pending, outs []infer.Tensor, names []string, total int) error {
	parts := make([][][]byte, len(outs)) // per output, per request
	shapes := make([][]infer.Shape, len(outs))
	for u := range outs {
		t := &outs[u]
		src := b.scatterSource(names[u])
		at := 0
		for _, p := range batch {
			var n int
			var shape infer.Shape
			if src != "" {
				in := p.req.input(src)
				if in == nil {
					return b.outputError("output '%s': a request has no source input '%s'", names[u], src)
				}
				shape = in.Shape.Clone()
			} else {
				if len(t.Shape) == 0 || t.Shape[0] != int64(total) {
					return b.outputError("output '%s' has shape %s, want the batch dimension %d first", names[u], t.Shape, total)
				}
				shape = append(infer.Shape{int64(p.bs)}, t.Shape[1:]...)
			}
			n, err := shape.Elements()
			if err != nil {
				return b.outputError("output '%s': %v", names[u], err)
			}
			end := at + n*t.DataType.Size()
			if t.DataType == infer.Bytes {
				var ok bool
				if end, ok = skipElements(t.Data, at, n); !ok {
					return b.outputError("output '%s' holds fewer elements than its requests need", names[u])
				}
			} else if end > len(t.Data) {
				return b.outputError("output '%s' of %d bytes holds fewer elements than its requests need", names[u], len(t.Data))
			}
			parts[u] = append(parts[u], t.Data[at:end:end])
			shapes[u] = append(shapes[u], shape)
			at = end
		}
		if at != len(t.Data) {
			return b.outputError("output '%s' holds more elements than its requests need", names[u])
		}
	}
	for k, p := range batch {
		res := make([]infer.Tensor, len(p.req.Outputs))
		for j, name := range p.req.Outputs {
			u := slices.Index(names, name)
			res[j] = infer.Tensor{Name: name, DataType: outs[u].DataType, Shape: shapes[u][k], Data: parts[u][k], Parameters: outs[u].Parameters}
		}
		p.out.Outputs = res
	}
	return nil
}

// scatterSource is the source input of a batch output named name, or "".
func (b *Batcher) scatterSource(name string) string {
	for _, bo := range b.batchOutputs {
		if slices.Contains(bo.Targets, name) {
			return bo.Source
		}
	}
	return ""
}

// unionOutputs is the union of the batch's requested outputs, in order.
func unionOutputs(batch []*pending) []string {
	var names []string
	for _, p := range batch {
		for _, o := range p.req.Outputs {
			if !slices.Contains(names, o) {
				names = append(names, o)
			}
		}
	}
	return names
}
