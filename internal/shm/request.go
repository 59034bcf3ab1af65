package shm

import (
	"errors"
	"fmt"
	"maps"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
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

// ReasonRegionInvalid is the error reason of a request naming a region
// whose object shrank below its registered bytes.
const ReasonRegionInvalid = "shared_memory_region_invalid"

// ReasonDisabled is the error reason of register and unregister when
// client shared memory is switched off.
const ReasonDisabled = "shared_memory_disabled"

func invalid(err error) *apierr.Error {
	reason := ReasonInvalid
	if errors.Is(err, ErrRegionInvalid) {
		reason = ReasonRegionInvalid
	}
	return &apierr.Error{Kind: apierr.KindInvalid, Reason: reason, Msg: err.Error()}
}

// Lease holds the regions one request names, from reading its inputs
// until it ends: a region unregistered meanwhile stays until Release. A
// nil *Lease (a request naming no region) is ready to use.
type Lease struct {
	r    *Registry
	held map[string]*region
	outs map[string]Ref
}

// hold returns region name, held by the lease.
func (l *Lease) hold(name string) (*region, error) {
	if rg, ok := l.held[name]; ok {
		return rg, nil
	}
	rg, err := l.r.acquire(name)
	if err != nil {
		return nil, err
	}
	if l.held == nil {
		l.held = map[string]*region{}
	}
	l.held[name] = rg
	return rg, nil
}

// Release lets go of the lease's regions. It may be called more than
// once.
func (l *Lease) Release() {
	if l == nil {
		return
	}
	for name, rg := range l.held {
		l.r.release(rg)
		delete(l.held, name)
	}
}

// Acquire prepares a request's shared memory: each input that names a
// region gets its data from the region, and the requested outputs that
// name one are taken out of the request (checked to fit their regions
// now, their size against the output when written). The byte size of an
// input must be exactly what its shape needs (for BYTES: a whole number
// of length-prefixed elements). The returned lease holds the regions
// until Release; it is nil when the request names none. On error nothing
// is held.
func (r *Registry) Acquire(req *infer.Request) (*Lease, error) {
	if !namesSharedMemory(req) {
		return nil, nil // the common case, without allocating
	}
	l := &Lease{r: r}
	if err := l.readInputs(req); err != nil {
		l.Release()
		return nil, err
	}
	if err := l.takeOutputs(req); err != nil {
		l.Release()
		return nil, err
	}
	if l.held == nil {
		return nil, nil
	}
	return l, nil
}

// namesSharedMemory reports whether any input or requested output has one
// of the shared memory parameters; without them Acquire has nothing to
// check or hold.
func namesSharedMemory(req *infer.Request) bool {
	has := func(p infer.Parameters) bool {
		if len(p) == 0 {
			return false
		}
		_, region := p[ParamRegion]
		_, size := p[ParamByteSize]
		_, off := p[ParamOffset]
		return region || size || off
	}
	for i := range req.Inputs {
		if has(req.Inputs[i].Parameters) {
			return true
		}
	}
	for i := range req.Outputs {
		if has(req.Outputs[i].Parameters) {
			return true
		}
	}
	return false
}

func (l *Lease) readInputs(req *infer.Request) error {
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
		if l.r == nil {
			return invalid(errors.New("shared memory is not enabled on this server"))
		}
		if total += ref.Size; total > l.r.maxRead || total < ref.Size {
			return &apierr.Error{
				Kind: apierr.KindResourceExhausted, Reason: apierr.ReasonBodyTooLarge,
				Msg: fmt.Sprintf("%s: the request's inputs read more than %d bytes from shared memory, the most one request may carry", what, l.r.maxRead),
			}
		}
		rg, err := l.hold(ref.Region)
		if err != nil {
			return invalid(fmt.Errorf("%s: %w", what, err))
		}
		data, err := rg.read(ref.Offset, ref.Size)
		if err != nil {
			return invalid(fmt.Errorf("%s: %w", what, err))
		}
		t.Data = data
		if err := t.CheckSize(); err != nil {
			if n, nerr := t.Shape.Elements(); nerr == nil && t.DataType != infer.Bytes {
				// Triton's wordings, which clients and its QA match on
				// (L0_shared_memory test_too_big_shm, the current one
				// and the one before), then ours.
				return invalid(fmt.Errorf("%s: shared memory byte_size %d does not fit shape %s of %s: input byte size mismatch for input '%s' for model '%s'. Expected %d, got %d (unexpected total byte size %d for input '%s', expecting %d)",
					what, ref.Size, t.Shape, t.DataType, t.Name, req.Model, n*t.DataType.Size(), ref.Size, ref.Size, t.Name, n*t.DataType.Size()))
			}
			return invalid(fmt.Errorf("%s: shared memory byte_size %d does not fit shape %s of %s: %w", what, ref.Size, t.Shape, t.DataType, err))
		}
		if len(t.Parameters) == 0 {
			t.Parameters = nil
		}
	}
	return nil
}

func (l *Lease) takeOutputs(req *infer.Request) error {
	for i := range req.Outputs {
		o := &req.Outputs[i]
		what := "output '" + o.Name + "'"
		ref, ok, err := refOf(o.Parameters, what)
		if err != nil {
			return invalid(err)
		}
		if !ok {
			continue
		}
		if l.r == nil {
			return invalid(errors.New("shared memory is not enabled on this server"))
		}
		rg, err := l.hold(ref.Region)
		if err != nil {
			return invalid(fmt.Errorf("%s: %w", what, err))
		}
		if err := bounds(rg.Name, rg.ByteSize, ref.Offset, ref.Size); err != nil {
			return invalid(fmt.Errorf("%s: %w", what, err))
		}
		if len(o.Parameters) == 0 {
			o.Parameters = nil
		}
		if l.outs == nil {
			l.outs = map[string]Ref{}
		}
		l.outs[o.Name] = ref
	}
	return nil
}

// WriteOutputs writes the outputs the request sent to regions into them;
// each then carries the region's parameters (name and the bytes written)
// and no data, as Triton answers. A region whose object shrank is not
// written (ErrRegionInvalid, 400).
func (l *Lease) WriteOutputs(resp *infer.Response) error {
	if l == nil || l.outs == nil {
		return nil
	}
	for i := range resp.Outputs {
		t := &resp.Outputs[i]
		ref, ok := l.outs[t.Name]
		if !ok {
			continue
		}
		rg, err := l.hold(ref.Region)
		if err != nil {
			return invalid(fmt.Errorf("output '%s': %w", t.Name, err))
		}
		if err := rg.write(ref.Offset, ref.Size, t.Data); err != nil {
			return invalid(fmt.Errorf("output '%s': %w", t.Name, err))
		}
		p := make(infer.Parameters, len(t.Parameters)+3)
		maps.Copy(p, t.Parameters)
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
