//go:build cgo

package onnxruntime

import (
	"context"
	"fmt"
	"sync"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/sluice-ml/sluice/internal/infer"
)

// Bounds of the preallocated tensor sets.
const (
	// maxSetBytes is the largest set (inputs and outputs together) worth
	// keeping. Larger batches run on tensors that wrap the request's own
	// memory: copying a large input costs more than wrapping it, and
	// keeping it costs memory.
	maxSetBytes = 1 << 20
	// maxPoolBytes bounds the memory one instance keeps in sets.
	maxPoolBytes = 16 << 20
)

// ioSet is one batch size's input and output tensors, created once over
// Go memory and reused: a run copies the request's inputs in and its
// outputs out, so it creates no ONNX Runtime value and lets ONNX Runtime
// allocate nothing, and its Go allocations do not grow with the batch.
type ioSet struct {
	key       int64    // batch size; -1 for a model without a variable leading dimension
	in, out   [][]byte // the tensors' bytes, in the model's input and output order
	outShapes []infer.Shape
	values    []ort.Value // over in
	outs      []ort.Value // over out
	// ro is reused from run to run; a run whose context ended may have
	// terminated it, after which it is reset (or dropped when that fails).
	ro *ort.RunOptions
	// term stops a run on ro when its context ends. It is reused while
	// it has never been called.
	term *terminator
	size int // bytes of in and out
}

// ioPool keeps an instance's sets, by batch size. Execute may run on
// several goroutines at once, so each set is taken by one run at a time.
type ioPool struct {
	// usable is decided at load: every input and output is a fixed-size
	// tensor of rank 1 or more whose dimensions are known except perhaps
	// the leading one, so a batch size gives every shape.
	usable bool

	mu     sync.Mutex // protects the fields below
	free   map[int64][]*ioSet
	bytes  int  // of every set created and not yet destroyed
	off    bool // the model's outputs did not have the predicted shapes
	closed bool
}

// poolUsable reports whether sig's shapes all follow from a batch size.
func poolUsable(sig infer.Signature) bool {
	variableIn := false
	fixed := func(specs []infer.TensorSpec, isInput bool) bool {
		for _, s := range specs {
			if s.DataType == infer.Bytes || toORTType(s.DataType) == ort.TensorElementDataTypeUndefined || len(s.Shape) == 0 {
				return false
			}
			for i, d := range s.Shape {
				if d >= 0 {
					continue
				}
				if i > 0 || (!isInput && !variableIn) {
					return false
				}
				if isInput {
					variableIn = true
				}
			}
		}
		return true
	}
	return fixed(sig.Inputs, true) && fixed(sig.Outputs, false)
}

// setKey returns the batch size that gives the shapes of inputs (in the
// model's order), or false when they do not follow the signature's one
// variable dimension.
func (in *Instance) setKey(inputs []*infer.Tensor) (int64, bool) {
	key := int64(-1)
	for i, s := range in.sig.Inputs {
		if s.Shape[0] >= 0 {
			continue
		}
		b := inputs[i].Shape[0]
		if key >= 0 && b != key {
			return 0, false
		}
		key = b
	}
	return key, true
}

// takeSet returns a set for key, creating it when none is free; nil means
// the run should use per-call tensors (sets off, too large, or the pool
// full).
func (in *Instance) takeSet(key int64) *ioSet {
	p := &in.pool
	p.mu.Lock()
	if p.off || p.closed {
		p.mu.Unlock()
		return nil
	}
	if l := p.free[key]; len(l) > 0 {
		s := l[len(l)-1]
		l[len(l)-1] = nil
		p.free[key] = l[:len(l)-1]
		p.mu.Unlock()
		return s
	}
	inShapes, outShapes, size := in.setShapes(key)
	if size > maxSetBytes || p.bytes+size > maxPoolBytes {
		p.mu.Unlock()
		return nil
	}
	p.bytes += size
	p.mu.Unlock()
	s, err := in.newSet(key, inShapes, outShapes, size)
	if err != nil {
		// ONNX Runtime refused a tensor: leave this run to the per-call
		// path, which reports such errors in full.
		p.mu.Lock()
		p.bytes -= size
		p.mu.Unlock()
		return nil
	}
	return s
}

// putSet gives a set back, or destroys it when sets are no longer used.
func (in *Instance) putSet(s *ioSet) {
	p := &in.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.off || p.closed {
		p.bytes -= s.size
		s.destroy()
		return
	}
	if p.free == nil {
		p.free = map[int64][]*ioSet{}
	}
	p.free[s.key] = append(p.free[s.key], s)
}

// dropSets destroys the free sets; with off, no set is used again.
func (in *Instance) dropSets(off bool) {
	p := &in.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	p.off = p.off || off
	p.closed = p.closed || !off
	for k, l := range p.free {
		for _, s := range l {
			p.bytes -= s.size
			s.destroy()
		}
		delete(p.free, k)
	}
}

// setShapes gives the input and output shapes of batch size key and the
// bytes they take.
func (in *Instance) setShapes(key int64) (inShapes, outShapes []infer.Shape, size int) {
	shape := func(spec infer.Shape) infer.Shape {
		s := spec.Clone()
		if s[0] < 0 {
			s[0] = key
		}
		return s
	}
	bytes := func(s infer.Shape, dt infer.DataType) int {
		n, err := s.Elements()
		if err != nil {
			return maxSetBytes + 1 // never kept
		}
		return n * dt.Size()
	}
	for _, spec := range in.sig.Inputs {
		s := shape(spec.Shape)
		inShapes = append(inShapes, s)
		size += bytes(s, spec.DataType)
	}
	for _, spec := range in.sig.Outputs {
		s := shape(spec.Shape)
		outShapes = append(outShapes, s)
		size += bytes(s, spec.DataType)
	}
	return inShapes, outShapes, size
}

func (in *Instance) newSet(key int64, inShapes, outShapes []infer.Shape, size int) (*ioSet, error) {
	s := &ioSet{key: key, outShapes: outShapes, size: size}
	ok := false
	defer func() {
		if !ok {
			s.destroy()
		}
	}()
	for i, spec := range in.sig.Inputs {
		buf, v, err := newSetTensor(inShapes[i], spec.DataType)
		if err != nil {
			return nil, err
		}
		s.in, s.values = append(s.in, buf), append(s.values, v)
	}
	for i, spec := range in.sig.Outputs {
		buf, v, err := newSetTensor(outShapes[i], spec.DataType)
		if err != nil {
			return nil, err
		}
		s.out, s.outs = append(s.out, buf), append(s.outs, v)
	}
	ok = true
	return s, nil
}

// newSetTensor creates a tensor of shape over fresh 8-byte aligned
// memory and returns that memory, cut to the tensor's size.
func newSetTensor(shape infer.Shape, dt infer.DataType) ([]byte, ort.Value, error) {
	n, err := shape.Elements()
	if err != nil {
		return nil, nil, err
	}
	size := n * dt.Size()
	// onnxruntime_go refuses an empty buffer even for a shape without
	// elements, so there are always a few spare bytes.
	buf := asBytes(make([]uint64, max(size+7, 8)/8))
	v, err := ort.NewCustomDataTensor(ort.Shape(shape), buf, toORTType(dt))
	if err != nil {
		return nil, nil, fmt.Errorf("create %s tensor of shape %s: %w", dt, shape, err)
	}
	return buf[:size:size], v, nil
}

func (s *ioSet) destroy() {
	for _, v := range s.values {
		destroy(v)
	}
	for _, v := range s.outs {
		destroy(v)
	}
	if s.ro != nil {
		_ = s.ro.Destroy() // fails only on options that were never created
		s.ro = nil
	}
}

// executeSet runs inputs (checked, in the model's order) on s and returns
// the wanted outputs in one fresh allocation, each 8-byte aligned.
func (in *Instance) executeSet(ctx context.Context, s *ioSet, inputs []*infer.Tensor, want []int) ([]infer.Tensor, error) {
	for i, t := range inputs {
		if t.DataType == infer.Bool {
			copyBool(s.in[i], t.Data)
		} else {
			copy(s.in[i], t.Data)
		}
	}
	var err error
	if ctx.Done() == nil {
		err = in.session.Run(s.values, s.outs)
	} else {
		err = s.runCancellable(ctx, in.session)
	}
	if err != nil {
		return nil, in.runError(ctx, err)
	}
	total, dims := 0, 0
	for _, j := range want {
		total += align8(len(s.out[j]))
		dims += len(s.outShapes[j])
	}
	data := asBytes(make([]uint64, total/8))
	shapes := make([]int64, dims)
	result := make([]infer.Tensor, len(want))
	for i, j := range want {
		n := copy(data, s.out[j])
		k := len(s.outShapes[j])
		shape := infer.Shape(shapes[:k:k])
		copy(shape, s.outShapes[j])
		shapes = shapes[k:]
		spec := &in.sig.Outputs[j]
		result[i] = infer.Tensor{Name: spec.Name, DataType: spec.DataType, Shape: shape, Data: data[:n:n]}
		data = data[align8(n):]
	}
	return result, nil
}

// runCancellable runs s, asking ONNX Runtime to stop early when ctx ends.
func (s *ioSet) runCancellable(ctx context.Context, session *ort.DynamicAdvancedSession) error {
	if s.ro == nil {
		ro, err := ort.NewRunOptions()
		if err != nil {
			return fmt.Errorf("create run options: %w", err)
		}
		s.ro, s.term = ro, nil
	}
	if s.term == nil {
		s.term = newTerminator(s.ro)
	}
	t := s.term
	stop := context.AfterFunc(ctx, t.fn)
	err := session.RunWithOptions(s.values, s.outs, s.ro)
	if stop() {
		return err // t never ran: both it and the options stay as they were
	}
	// t has started: finish it so that it stops nothing later, and never
	// hand it to another run.
	s.term = nil
	if t.finish() {
		// A terminated RunOptions would stop the next run at once.
		if uerr := s.ro.UnsetTerminate(); uerr != nil {
			_ = s.ro.Destroy() // fails only on options that were never created
			s.ro = nil
		}
	}
	return err
}

// terminator stops a run when its context ends. Once finish has been
// called it does nothing, so a late call cannot stop a later run that
// reuses the same RunOptions.
type terminator struct {
	ro *ort.RunOptions
	fn func() // terminate, made once

	mu         sync.Mutex // protects the fields below
	done       bool
	terminated bool
}

func newTerminator(ro *ort.RunOptions) *terminator {
	t := &terminator{ro: ro}
	t.fn = t.terminate
	return t
}

func (t *terminator) terminate() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.done {
		// A failed Terminate leaves the run to finish on its own; the
		// caller still sees ctx's error once it returns.
		t.terminated = t.ro.Terminate() == nil
	}
}

// finish ends the terminator's run and reports whether it terminated it.
func (t *terminator) finish() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done = true
	return t.terminated
}

// copyBool copies BOOL data, turning every non-zero byte into 1 (see
// normalizeBool).
func copyBool(dst, src []byte) {
	for i, c := range src[:len(dst)] {
		if c != 0 {
			c = 1
		}
		dst[i] = c
	}
}

func align8(n int) int { return (n + 7) &^ 7 }
