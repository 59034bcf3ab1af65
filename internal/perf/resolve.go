package perf

import (
	"fmt"
	"math/rand/v2"

	"github.com/sluice-ml/sluice/internal/infer"
)

// ModelInfo is what the server says about a model: its inputs and outputs
// from the metadata endpoint and max_batch_size from the model
// configuration extension.
type ModelInfo struct {
	Inputs  []infer.TensorSpec
	Outputs []string
	// MaxBatchSize is the configuration's max_batch_size; -1 when the
	// server has no configuration endpoint.
	MaxBatchSize int
}

// batches reports whether the model has a batch dimension. Without a
// configuration it assumes so when every input's first dimension is
// variable.
func (m *ModelInfo) batches() bool {
	if m.MaxBatchSize >= 0 {
		return m.MaxBatchSize > 0
	}
	for _, in := range m.Inputs {
		if len(in.Shape) == 0 || in.Shape[0] != -1 {
			return false
		}
	}
	return len(m.Inputs) > 0
}

// resolveInputs builds the request inputs at the given batch size from the
// model's metadata (info, nil when the server has none) and the data
// source: a parsed request file (file) or InputRandom/InputZero. shapes
// sets variable dimensions (without the batch dimension). It returns
// notes for the user, e.g. about assumptions made.
func resolveInputs(info *ModelInfo, batch int, source string, file []infer.Tensor,
	shapes map[string]infer.Shape, rng *rand.Rand,
) ([]infer.Tensor, []string, error) {
	var notes []string
	if info == nil {
		if file == nil {
			return nil, nil, fmt.Errorf("%w: the server gave no model metadata, so input names, datatypes and shapes must come from --input-data FILE", ErrInput)
		}
		notes = append(notes, "no model metadata from the server: taking input names, datatypes and shapes from the input file, with the first dimension as the batch dimension")
		out := make([]infer.Tensor, 0, len(file))
		for _, t := range file {
			tt, err := Tile(t, batch)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, tt)
		}
		return out, notes, nil
	}
	batched := info.batches()
	if info.MaxBatchSize < 0 && batched && batch > 1 {
		notes = append(notes, "no model configuration from the server: treating the first (variable) dimension as the batch dimension")
	}
	if !batched && batch != 1 {
		return nil, nil, fmt.Errorf("%w: the model does not batch, so -b must be 1 (got %d)", ErrInput, batch)
	}
	if batched && info.MaxBatchSize > 0 && batch > info.MaxBatchSize {
		return nil, nil, fmt.Errorf("%w: batch size %d exceeds the model's max_batch_size %d", ErrInput, batch, info.MaxBatchSize)
	}
	byName := map[string]infer.Tensor{}
	for _, t := range file {
		byName[t.Name] = t
	}
	for name := range shapes {
		if !hasInput(info.Inputs, name) {
			return nil, nil, fmt.Errorf("%w: --shape names %q, which is not an input of the model", ErrInput, name)
		}
	}
	out := make([]infer.Tensor, 0, len(info.Inputs))
	for _, spec := range info.Inputs {
		dims := spec.Shape.Clone()
		if batched {
			if len(dims) == 0 {
				return nil, nil, fmt.Errorf("%w: input %q of a batching model has no batch dimension", ErrInput, spec.Name)
			}
			dims = dims[1:]
		}
		if s, ok := shapes[spec.Name]; ok {
			if !fits(s, dims) {
				return nil, nil, fmt.Errorf("%w: --shape %s:%v does not fit the model's dims %v", ErrInput, spec.Name, s, dims)
			}
			dims = s.Clone()
		}
		var (
			t   infer.Tensor
			err error
		)
		if file != nil {
			t, err = fileInput(spec, byName, dims, batched, batch)
		} else {
			t, err = generatedInput(spec, dims, batched, batch, source == InputRandom, rng)
		}
		if err != nil {
			return nil, nil, err
		}
		out = append(out, t)
	}
	return out, notes, nil
}

// fileInput takes input spec from the input file (byName): its datatype
// must match, and its shape fit dims, with or without the batch
// dimension; a batching model's input is tiled to batch.
func fileInput(spec infer.TensorSpec, byName map[string]infer.Tensor, dims infer.Shape, batched bool, batch int) (infer.Tensor, error) {
	ft, ok := byName[spec.Name]
	if !ok {
		return infer.Tensor{}, fmt.Errorf("%w: the input file has no input %q", ErrInput, spec.Name)
	}
	if ft.DataType != spec.DataType {
		return infer.Tensor{}, fmt.Errorf("%w: input %q is %s in the file but %s in the model", ErrInput, spec.Name, ft.DataType, spec.DataType)
	}
	switch {
	case !batched:
		if !fits(ft.Shape, dims) {
			return infer.Tensor{}, fmt.Errorf("%w: input %q has shape %s in the file, the model wants %v", ErrInput, spec.Name, ft.Shape, dims)
		}
		return ft, nil
	case len(ft.Shape) == len(dims)+1 && fits(ft.Shape[1:], dims):
		return Tile(ft, batch)
	case len(ft.Shape) == len(dims) && fits(ft.Shape, dims):
		one := ft
		one.Shape = append(infer.Shape{1}, ft.Shape...)
		return Tile(one, batch)
	default:
		return infer.Tensor{}, fmt.Errorf("%w: input %q has shape %s in the file, the model wants [batch]+%v", ErrInput, spec.Name, ft.Shape, dims)
	}
}

// generatedInput makes input spec's data (random or zeros) with shape
// dims, which must be concrete, after the batch dimension when batched.
func generatedInput(spec infer.TensorSpec, dims infer.Shape, batched bool, batch int, random bool, rng *rand.Rand) (infer.Tensor, error) {
	for _, d := range dims {
		if d < 0 {
			return infer.Tensor{}, fmt.Errorf("%w: input %q has variable dims %v; set them with --shape %s:D1,D2", ErrInput, spec.Name, dims, spec.Name)
		}
	}
	shape := dims
	if batched {
		shape = append(infer.Shape{int64(batch)}, dims...)
	}
	return generate(spec.Name, spec.DataType, shape, random, rng)
}

func hasInput(specs []infer.TensorSpec, name string) bool {
	for _, s := range specs {
		if s.Name == name {
			return true
		}
	}
	return false
}

// fits reports whether concrete dims match a model shape in which -1 is a
// wildcard.
func fits(dims, model infer.Shape) bool {
	if len(dims) != len(model) {
		return false
	}
	for i := range dims {
		if model[i] >= 0 && dims[i] != model[i] {
			return false
		}
	}
	return true
}
