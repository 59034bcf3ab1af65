package batch

import (
	"encoding/binary"
	"slices"
	"time"

	"github.com/sluice-ml/sluice/internal/infer"
)

// slot is one executor with its goroutine's scratch, reused from batch to
// batch so that packing and splitting allocate nothing once warm.
type slot struct {
	exec  Executor
	work  chan struct{} // one token per batch handed over in batch
	batch []*pending    // set under Batcher.mu before the token is sent

	inputs   []infer.Tensor // packed inputs
	bufs     [][]byte       // packed input data, per input
	shapes   [][]int64      // packed input shapes, per input
	names    []string       // union of the batch's outputs
	rowBytes []int          // per output: bytes per row (fixed-size types)
	rowElems []int          // per output: elements per row
	from, to []int          // per output: a request's byte range (BYTES)
}

// goroutineDone records the end of one of the batcher's goroutines.
func (b *Batcher) goroutineDone() {
	if b.running.Add(-1) == 0 {
		close(b.exited)
	}
}

// run is an executor goroutine.
func (b *Batcher) run(s *slot) {
	defer b.goroutineDone()
	for range s.work {
		b.execute(s)
		b.mu.Lock()
		if !b.stopped {
			b.idle = append(b.idle, s)
			b.dispatchLocked()
		}
		b.mu.Unlock()
	}
}

// execute runs s.batch and answers its requests.
func (b *Batcher) execute(s *slot) {
	batch := s.batch
	start := time.Now()
	// One allocation for the batch's results rather than one per request.
	results := make([]Result, len(batch))
	total := 0
	for i, p := range batch {
		total += p.bs
		q := start.Sub(p.enq)
		p.out = &results[i]
		p.out.QueueTime = q
		b.m.queue.Observe(q.Seconds())
	}
	ctx := b.execCtx
	var inputs []infer.Tensor
	var names []string
	_, keepsRequests := s.exec.(RequestExecutor)
	ragged := b.ragged && !keepsRequests
	var packErr error
	if ragged {
		// Ragged inputs flattened, batch inputs added (ragged.go); even
		// a batch of one needs them.
		if len(batch) == 1 {
			ctx = batch[0].ctx
		}
		inputs, packErr = b.packRagged(batch, total)
		names = unionOutputs(batch)
	} else if re, ok := s.exec.(RequestExecutor); ok && (len(batch) > 1 || batch[0].req.Params != nil || batch[0].req.Sender != nil) {
		// The executor keeps request boundaries and parameters
		// (requests.go); a request alone runs under its own context.
		if len(batch) == 1 {
			ctx = batch[0].ctx
		}
		b.executeRequests(ctx, re, s, start, total)
		return
	} else if len(batch) == 1 {
		// Pass the tensors through; the request's own context lets a
		// cancelled client stop the run.
		p := batch[0]
		ctx, inputs, names = p.ctx, p.req.Inputs, p.req.Outputs
	} else {
		inputs, names = s.pack(batch, total)
	}
	packed := time.Now()
	var outs []infer.Tensor
	var err error
	if packErr != nil {
		err = b.outputError("pack the batch: %v", packErr)
	} else {
		outs, err = s.exec.Execute(ctx, inputs, names)
	}
	computed := time.Now()
	switch {
	case packErr != nil:
	case err != nil:
		err = b.backendError(ctx, err)
	case len(outs) > len(names) || (len(outs) < len(names) && (!keepsRequests || len(batch) != 1)):
		// A request executor (a Python model) may answer a request alone
		// with a subset of the outputs asked for, as Triton passes the
		// subset on; the outputs carry their names (requests.go).
		err = b.outputError("executor returned %d outputs, want %d", len(outs), len(names))
	case ragged:
		err = b.splitRagged(batch, outs, names, total)
	case len(batch) == 1:
		batch[0].out.Outputs = outs
	default:
		err = b.split(s, batch, outs, names, total)
	}
	end := time.Now()
	in, inf, out := packed.Sub(start), computed.Sub(packed), end.Sub(computed)
	b.m.compute.Observe(inf.Seconds())
	b.m.batchSize.Observe(float64(total))
	if err == nil && b.obs != nil {
		b.obs.Executed(total, in, inf, out)
	}
	for _, p := range batch {
		if err != nil {
			p.out, p.err = nil, err
			continue
		}
		r := p.out
		r.InputTime, r.ComputeTime, r.OutputTime = in, inf, out
		r.ExecBatch = total
	}
	clear(s.inputs) // drop the references to this batch's data
	b.deliver(batch)
	clear(s.batch)
	s.batch = s.batch[:0]
}

// deliver signals the requests of an executed batch; with PreserveOrdering
// each waits for the requests submitted before it.
func (b *Batcher) deliver(batch []*pending) {
	if !b.preserve {
		for _, p := range batch {
			p.done <- struct{}{} // p now belongs to its Submit again
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range batch {
		if p.ordered {
			p.ready = true
		} else {
			p.done <- struct{}{}
		}
	}
	b.releaseLocked()
}

// pack concatenates the batch's inputs along the batch dimension into the
// slot's buffers and returns them with the union of the requested outputs.
func (s *slot) pack(batch []*pending, total int) ([]infer.Tensor, []string) {
	head := batch[0].req
	n := len(head.Inputs)
	s.inputs = resize(s.inputs, n)
	s.bufs = resize(s.bufs, n)
	s.shapes = resize(s.shapes, n)
	for i := range head.Inputs {
		need := 0
		for _, p := range batch {
			need += len(p.req.Inputs[i].Data)
		}
		buf := slices.Grow(s.bufs[i][:0], need)
		for _, p := range batch {
			buf = append(buf, p.req.Inputs[i].Data...)
		}
		s.bufs[i] = buf
		h := &head.Inputs[i]
		s.shapes[i] = append(s.shapes[i][:0], int64(total))
		s.shapes[i] = append(s.shapes[i], h.Shape[1:]...)
		shape := s.shapes[i]
		s.inputs[i] = infer.Tensor{Name: h.Name, DataType: h.DataType, Shape: shape, Data: buf}
	}
	return s.inputs, s.outputNames(batch)
}

// outputNames returns the outputs to ask the executor for. When every
// request wants the same list that list is used as is; otherwise it is
// the union, and each request's outIdx maps its outputs into it.
func (s *slot) outputNames(batch []*pending) []string {
	head := batch[0].req.Outputs
	same := true
	for _, p := range batch[1:] {
		if !slices.Equal(p.req.Outputs, head) {
			same = false
			break
		}
	}
	if same {
		return head
	}
	names := s.names[:0]
	for _, p := range batch {
		p.outIdx = p.outIdx[:0]
		for _, o := range p.req.Outputs {
			u := slices.Index(names, o)
			if u < 0 {
				u = len(names)
				names = append(names, o)
			}
			p.outIdx = append(p.outIdx, u)
		}
	}
	s.names = names
	return names
}

// split gives each request its rows of every output it asked for. The
// Data of each request's tensors is a capacity-limited sub-slice of the
// executor's buffer: nothing is copied. The requests' tensor and shape
// slices are capacity-limited windows of two per-batch allocations.
func (b *Batcher) split(s *slot, batch []*pending, outs []infer.Tensor, names []string, total int) error {
	s.rowBytes = resize(s.rowBytes, len(outs))
	s.rowElems = resize(s.rowElems, len(outs))
	s.from = resize(s.from, len(outs))
	s.to = resize(s.to, len(outs))
	for u := range outs {
		t := &outs[u]
		if len(t.Shape) == 0 || t.Shape[0] != int64(total) {
			return b.outputError("output '%s' has shape %s, want the batch dimension %d first", names[u], t.Shape, total)
		}
		elems, err := t.Shape[1:].Elements()
		if err != nil {
			return b.outputError("output '%s': %v", names[u], err)
		}
		s.rowElems[u] = elems
		s.to[u] = 0
		if t.DataType == infer.Bytes {
			continue
		}
		size := t.DataType.Size()
		if size == 0 || len(t.Data) != total*elems*size {
			return b.outputError("output '%s' of %s and shape %s holds %d bytes", names[u], t.DataType, t.Shape, len(t.Data))
		}
		s.rowBytes[u] = elems * size
	}
	// One allocation each for all the requests' tensors and shapes.
	ntensors, ndims := 0, 0
	for _, p := range batch {
		ntensors += len(p.req.Outputs)
		for j := range p.req.Outputs {
			ndims += len(outs[p.outputIndex(j)].Shape)
		}
	}
	tensors := make([]infer.Tensor, ntensors)
	shapes := make([]int64, ndims)
	row := 0
	for _, p := range batch {
		// Every BYTES output advances past this request's rows, whether
		// or not the request asked for it.
		for u := range outs {
			if outs[u].DataType != infer.Bytes {
				continue
			}
			s.from[u] = s.to[u]
			end, ok := skipElements(outs[u].Data, s.from[u], p.bs*s.rowElems[u])
			if !ok {
				return b.outputError("output '%s' holds fewer BYTES elements than its shape %s", names[u], outs[u].Shape)
			}
			s.to[u] = end
		}
		wanted := p.req.Outputs
		res := tensors[:len(wanted):len(wanted)]
		tensors = tensors[len(wanted):]
		for j, name := range wanted {
			u := p.outputIndex(j)
			t := &outs[u]
			k := len(t.Shape)
			shape := infer.Shape(shapes[:k:k])
			shapes = shapes[k:]
			copy(shape, t.Shape)
			shape[0] = int64(p.bs)
			var data []byte
			if t.DataType == infer.Bytes {
				data = t.Data[s.from[u]:s.to[u]:s.to[u]]
			} else {
				lo, hi := row*s.rowBytes[u], (row+p.bs)*s.rowBytes[u]
				data = t.Data[lo:hi:hi]
			}
			res[j] = infer.Tensor{Name: name, DataType: t.DataType, Shape: shape, Data: data, Parameters: t.Parameters}
		}
		p.out.Outputs = res
		row += p.bs
	}
	for u := range outs {
		if outs[u].DataType == infer.Bytes && s.to[u] != len(outs[u].Data) {
			return b.outputError("output '%s' holds more BYTES elements than its shape %s", names[u], outs[u].Shape)
		}
	}
	return nil
}

// outputIndex maps the request's j-th output into the batch's outputs.
func (p *pending) outputIndex(j int) int {
	if len(p.outIdx) == 0 {
		return j
	}
	return p.outIdx[j]
}

// skipElements walks n length-prefixed BYTES elements from at and returns
// where they end.
func skipElements(data []byte, at, n int) (int, bool) {
	for range n {
		if len(data)-at < 4 {
			return 0, false
		}
		l := binary.LittleEndian.Uint32(data[at:])
		at += 4
		if uint64(l) > uint64(len(data)-at) {
			return 0, false
		}
		at += int(l)
	}
	return at, true
}

// resize returns s with length n, keeping its elements (and their
// capacity) when it grows.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		s = append(s[:cap(s)], make([]T, n-cap(s))...)
	}
	return s[:n]
}
