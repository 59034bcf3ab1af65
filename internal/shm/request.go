package shm

import (
	"errors"
	"fmt"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/wire"
)

// Tensor and requested-output parameters of the extension.
const (
	ParamRegion   = "shared_memory_region"
	ParamByteSize = "shared_memory_byte_size"
	ParamOffset   = "shared_memory_offset"
)

// ReasonInvalid is the error reason of a request whose shared-memory
// parameters are wrong or name an unknown region.
const ReasonInvalid = "invalid_shared_memory"

// Ref is where one tensor lives in a region.
type Ref struct {
	Region       string
	Offset, Size uint64
}

// InRegion reports whether p names a shared-memory region.
func InRegion(p infer.Parameters) bool {
	_, ok := p[ParamRegion]
	return ok
}

// refOf reads a tensor's shared-memory parameters and removes them from p.
func refOf(p infer.Parameters, what string) (Ref, bool, error) {
	v, ok := p[ParamRegion]
	if !ok {
		for _, k := range []string{ParamByteSize, ParamOffset} {
			if _, set := p[k]; set {
				return Ref{}, false, fmt.Errorf("%s has parameter '%s' but no '%s'", what, k, ParamRegion)
			}
		}
		return Ref{}, false, nil
	}
	name, isStr := v.(string)
	if !isStr || name == "" {
		return Ref{}, false, fmt.Errorf("%s: parameter '%s' must be a non-empty string, got %v", what, ParamRegion, v)
	}
	r := Ref{Region: name}
	size, ok := p[ParamByteSize]
	if !ok {
		return Ref{}, false, fmt.Errorf("%s: parameter '%s' is required with '%s'", what, ParamByteSize, ParamRegion)
	}
	var err error
	if r.Size, err = uintParam(size); err != nil {
		return Ref{}, false, fmt.Errorf("%s: parameter '%s' %w", what, ParamByteSize, err)
	}
	if off, ok := p[ParamOffset]; ok {
		if r.Offset, err = uintParam(off); err != nil {
			return Ref{}, false, fmt.Errorf("%s: parameter '%s' %w", what, ParamOffset, err)
		}
	}
	delete(p, ParamRegion)
	delete(p, ParamByteSize)
	delete(p, ParamOffset)
	return r, true, nil
}

func uintParam(v any) (uint64, error) {
	switch x := v.(type) {
	case int64:
		if x >= 0 {
			return uint64(x), nil
		}
	case uint64:
		return x, nil
	}
	return 0, fmt.Errorf("must be a non-negative integer, got %v", v)
}

func invalid(err error) *infer.Error {
	return &infer.Error{Kind: infer.KindInvalid, Reason: ReasonInvalid, Msg: err.Error()}
}

// ReadInputs gives each input that names a region its data from the
// region. The byte size must be exactly what the input's shape needs (for
// BYTES: a whole number of length-prefixed elements).
func (r *Registry) ReadInputs(req *infer.Request) error {
	var total uint64
	for i := range req.Inputs {
		t := &req.Inputs[i]
		what := "input '" + t.Name + "'"
		ref, ok, err := refOf(t.Parameters, what)
		if err != nil {
			return invalid(err)
		}
		if !ok {
			continue
		}
		if t.Data != nil {
			return invalid(fmt.Errorf("%s has data and a shared memory region", what))
		}
		if r == nil {
			return invalid(errors.New("shared memory is not enabled on this server"))
		}
		if total += ref.Size; total > r.maxRead || total < ref.Size {
			return &infer.Error{Kind: infer.KindResourceExhausted, Reason: wire.ReasonBodyTooLarge,
				Msg: fmt.Sprintf("%s: the request's inputs read more than %d bytes from shared memory, the most one request may carry", what, r.maxRead)}
		}
		data, err := r.Read(ref.Region, ref.Offset, ref.Size)
		if err != nil {
			return invalid(fmt.Errorf("%s: %w", what, err))
		}
		t.Data = data
		if err := t.CheckSize(); err != nil {
			if n, nerr := t.Shape.Elements(); nerr == nil && t.DataType != infer.Bytes {
				// Triton's wording, which clients match on, then ours.
				return invalid(fmt.Errorf("%s: shared memory byte_size %d does not fit shape %s of %s: unexpected total byte size %d for input '%s', expecting %d",
					what, ref.Size, t.Shape, t.DataType, ref.Size, t.Name, n*t.DataType.Size()))
			}
			return invalid(fmt.Errorf("%s: shared memory byte_size %d does not fit shape %s of %s: %v", what, ref.Size, t.Shape, t.DataType, err))
		}
		if len(t.Parameters) == 0 {
			t.Parameters = nil
		}
	}
	return nil
}

// TakeOutputs removes the shared-memory parameters of the requested
// outputs and returns where each such output goes. Regions are checked
// to exist now; the size is checked against the output when written.
func (r *Registry) TakeOutputs(req *infer.Request) (map[string]Ref, error) {
	var out map[string]Ref
	for i := range req.Outputs {
		o := &req.Outputs[i]
		what := "output '" + o.Name + "'"
		ref, ok, err := refOf(o.Parameters, what)
		if err != nil {
			return nil, invalid(err)
		}
		if !ok {
			continue
		}
		if r == nil {
			return nil, invalid(errors.New("shared memory is not enabled on this server"))
		}
		if _, err := r.lookupStatus(ref); err != nil {
			return nil, invalid(fmt.Errorf("%s: %w", what, err))
		}
		if len(o.Parameters) == 0 {
			o.Parameters = nil
		}
		if out == nil {
			out = map[string]Ref{}
		}
		out[o.Name] = ref
	}
	return out, nil
}

// lookupStatus checks that ref fits a registered region.
func (r *Registry) lookupStatus(ref Ref) (Status, error) {
	rg, err := r.lookup(ref.Region, ref.Offset, ref.Size)
	if err != nil {
		return Status{}, err
	}
	defer rg.mu.RUnlock()
	return rg.Status, nil
}

// WriteOutputs writes the outputs in refs into their regions; each then
// carries the region's parameters (name and the bytes written) and no
// data, as Triton answers.
func (r *Registry) WriteOutputs(resp *infer.Response, refs map[string]Ref) error {
	for i := range resp.Outputs {
		t := &resp.Outputs[i]
		ref, ok := refs[t.Name]
		if !ok {
			continue
		}
		if err := r.Write(ref.Region, ref.Offset, ref.Size, t.Data); err != nil {
			return invalid(fmt.Errorf("output '%s': %w", t.Name, err))
		}
		p := make(infer.Parameters, len(t.Parameters)+3)
		for k, v := range t.Parameters {
			p[k] = v
		}
		p[ParamRegion] = ref.Region
		p[ParamByteSize] = int64(len(t.Data))
		if ref.Offset != 0 {
			p[ParamOffset] = int64(ref.Offset)
		}
		t.Parameters = p
		t.Data = nil
	}
	return nil
}
