package sequence

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"

	"github.com/sluice-ml/sluice/internal/batch"
	"github.com/sluice-ml/sluice/internal/infer"
)

// pack builds an execution's inputs: the requests' own inputs stacked by
// row (padding rows zero-filled), the control tensors and the implicit
// states. It returns them, the outputs to ask for and the number of rows
// holding a request.
func (s *Scheduler) pack(rows []row) ([]infer.Tensor, []string, int) {
	var first *pending
	held := 0
	for _, r := range rows {
		if r.p != nil {
			held++
			if first == nil {
				first = r.p
			}
		}
	}
	batching := s.opts.MaxBatchSize > 0
	n := len(rows)
	inputs := make([]infer.Tensor, 0, len(first.req.Inputs)+len(s.opts.Controls)+len(s.opts.States))
	for i, t0 := range first.req.Inputs {
		if !batching {
			inputs = append(inputs, t0)
			continue
		}
		var data []byte
		for _, r := range rows {
			if r.p != nil {
				data = append(data, r.p.req.Inputs[i].Data...)
				continue
			}
			data = append(data, padding(&t0)...)
		}
		shape := append(infer.Shape{int64(n)}, t0.Shape[1:]...)
		inputs = append(inputs, infer.Tensor{Name: t0.Name, DataType: t0.DataType, Shape: shape, Data: data})
	}
	ctlShape := infer.Shape{1}
	if batching {
		ctlShape = infer.Shape{int64(n), 1}
	}
	for _, c := range s.opts.Controls {
		inputs = append(inputs, infer.Tensor{Name: c.Input, DataType: c.DataType, Shape: ctlShape.Clone(), Data: controlData(c, rows)})
	}
	for k, st := range s.opts.States {
		var data []byte
		for _, r := range rows {
			data = append(data, s.stateOf(r.p, k)...)
		}
		shape := st.Dims.Clone()
		if batching {
			shape = append(infer.Shape{int64(n)}, shape...)
		}
		inputs = append(inputs, infer.Tensor{Name: st.Input, DataType: st.DataType, Shape: shape, Data: data})
	}
	return inputs, s.outputNames(rows), held
}

// controlData is control c's value for each row: its start, end or ready
// flag, or its sequence's correlation id (zero for padding rows).
func controlData(c Control, rows []row) []byte {
	var data []byte
	for _, r := range rows {
		p := r.p
		switch c.Kind {
		case ControlStart:
			data = append(data, flag(c, p != nil && p.req.Start)...)
		case ControlEnd:
			data = append(data, flag(c, p != nil && p.req.End)...)
		case ControlReady:
			data = append(data, flag(c, p != nil)...)
		case ControlCorrID:
			var id CorrID
			if p != nil {
				id = p.seq.id
			}
			data = appendCorrID(data, c.DataType, id)
		}
	}
	return data
}

// outputNames lists the outputs an execution asks for: those any of its
// requests asks for, then the state outputs, each once.
func (s *Scheduler) outputNames(rows []row) []string {
	var names []string
	for _, r := range rows {
		if r.p == nil {
			continue
		}
		for _, o := range r.p.req.Outputs {
			if !slices.Contains(names, o) {
				names = append(names, o)
			}
		}
	}
	for _, st := range s.opts.States {
		if !slices.Contains(names, st.Output) {
			names = append(names, st.Output)
		}
	}
	return names
}

// stateOf is the value of state k a row runs with: the sequence's last
// output, or the initial value at its start (zeros for padding rows).
func (s *Scheduler) stateOf(p *pending, k int) []byte {
	st := s.opts.States[k]
	if p != nil && !p.req.Start && p.seq.state != nil {
		return p.seq.state[k]
	}
	if p != nil && st.Initial != nil {
		return st.Initial
	}
	n, _ := st.Dims.Elements() // validated
	if st.DataType == infer.Bytes {
		return make([]byte, 4*n) // n empty strings
	}
	return make([]byte, n*st.DataType.Size())
}

// padding is one zero row of a request tensor of batch size 1: zero bytes
// for fixed-size types, empty strings for BYTES.
func padding(t *infer.Tensor) []byte {
	if t.DataType != infer.Bytes {
		return make([]byte, len(t.Data))
	}
	n, _ := t.Shape.Elements() // checked by the caller's validation
	return make([]byte, 4*n)
}

func flag(c Control, on bool) []byte {
	if on {
		return c.True
	}
	return c.False
}

// appendCorrID appends one correlation id element of type dt. A numeric
// id goes to BYTES as its decimal digits; a string id only ever reaches a
// BYTES control (Submit refuses it otherwise).
func appendCorrID(dst []byte, dt infer.DataType, id CorrID) []byte {
	switch dt {
	case infer.Bytes:
		s := id.Str
		if s == "" && id.Num != 0 {
			s = strconv.FormatUint(id.Num, 10)
		}
		return infer.AppendBytesElement(dst, []byte(s))
	case infer.Uint64, infer.Int64:
		return binary.LittleEndian.AppendUint64(dst, id.Num)
	default: // UINT32, INT32
		return binary.LittleEndian.AppendUint32(dst, uint32(id.Num))
	}
}

// split gives each request its rows of the outputs it asked for and
// returns each row's new implicit states. A model may answer with a subset
// of the outputs asked for, as Triton's backends may (a Python model
// returns what it returns; qa/L0_implicit_state
// test_implicit_state_single_buffer answers no output): an output left out
// is left out of the answers, and a state output left out keeps the state
// the row ran with, as Triton keeps a state no StateUpdate replaced
// (qa/L0_implicit_state test_no_update).
func (s *Scheduler) split(rows []row, outs []infer.Tensor, names []string, results []batch.Result) ([][][]byte, error) {
	idx, err := outputIndex(outs, names)
	if err != nil {
		return nil, err
	}
	batching := s.opts.MaxBatchSize > 0
	n := len(rows)
	perRow := make([][][]byte, len(outs)) // per output, per row
	for j := range outs {
		o := &outs[j]
		if !batching {
			perRow[j] = [][]byte{o.Data}
			continue
		}
		if len(o.Shape) == 0 || o.Shape[0] != int64(n) {
			return nil, fmt.Errorf("output '%s' has shape %s, want %d rows", o.Name, o.Shape, n)
		}
		r, err := splitRows(o, n)
		if err != nil {
			return nil, fmt.Errorf("output '%s': %w", o.Name, err)
		}
		perRow[j] = r
	}
	states := make([][][]byte, n)
	for i, r := range rows {
		if r.p == nil {
			continue
		}
		res := &results[i]
		res.Outputs = make([]infer.Tensor, 0, len(r.p.req.Outputs))
		for _, name := range r.p.req.Outputs {
			j, ok := idx[name]
			if !ok {
				continue
			}
			o := &outs[j]
			shape := o.Shape.Clone()
			if batching {
				shape[0] = 1
			}
			res.Outputs = append(res.Outputs, infer.Tensor{Name: name, DataType: o.DataType, Shape: shape, Data: perRow[j][i]})
		}
		if len(s.opts.States) == 0 {
			continue
		}
		states[i] = make([][]byte, len(s.opts.States))
		for k, st := range s.opts.States {
			j, ok := idx[st.Output]
			if !ok {
				states[i][k] = slices.Clone(s.stateOf(r.p, k))
				continue
			}
			want, _ := st.Dims.Elements()
			b := perRow[j][i]
			if outs[j].DataType != st.DataType || !holds(b, st.DataType, want) {
				return nil, fmt.Errorf("state output '%s': %d bytes of %s per sequence, state '%s' needs %s %s", st.Output, len(b), outs[j].DataType, st.Input, st.DataType, st.Dims)
			}
			states[i][k] = slices.Clone(b)
		}
	}
	return states, nil
}

// outputIndex maps each name asked for to the position of its output in
// outs. Outputs are matched by name; a backend that names none answers
// every name, in order.
func outputIndex(outs []infer.Tensor, names []string) (map[string]int, error) {
	idx := make(map[string]int, len(outs))
	unnamed := len(outs) > 0
	for _, o := range outs {
		if o.Name != "" {
			unnamed = false
			break
		}
	}
	if unnamed {
		if len(outs) != len(names) {
			return nil, fmt.Errorf("model returned %d outputs, want %d", len(outs), len(names))
		}
		for j, name := range names {
			idx[name] = j
		}
		return idx, nil
	}
	for j, o := range outs {
		if !slices.Contains(names, o.Name) {
			return nil, fmt.Errorf("model returned output '%s', which was not asked for", o.Name)
		}
		if _, dup := idx[o.Name]; dup {
			return nil, fmt.Errorf("model returned output '%s' twice", o.Name)
		}
		idx[o.Name] = j
	}
	return idx, nil
}

// holds reports whether b (wire layout) is n elements of dt.
func holds(b []byte, dt infer.DataType, n int) bool {
	if dt != infer.Bytes {
		return len(b) == n*dt.Size()
	}
	els, err := infer.SplitBytes(b)
	return err == nil && len(els) == n
}

// splitRows cuts a tensor with n rows into n capacity-limited slices.
func splitRows(t *infer.Tensor, n int) ([][]byte, error) {
	out := make([][]byte, n)
	if t.DataType != infer.Bytes {
		if n == 0 || len(t.Data)%n != 0 {
			return nil, fmt.Errorf("%d bytes do not split into %d rows", len(t.Data), n)
		}
		w := len(t.Data) / n
		for i := range n {
			out[i] = t.Data[i*w : (i+1)*w : (i+1)*w]
		}
		return out, nil
	}
	elems, err := t.Shape.Elements()
	if err != nil || n == 0 || elems%n != 0 {
		return nil, fmt.Errorf("shape %s does not split into %d rows", t.Shape, n)
	}
	per := elems / n
	b := t.Data
	at := 0
	for i := range n {
		from := at
		for range per {
			if len(b)-at < 4 {
				return nil, infer.ErrSize
			}
			l := int(binary.LittleEndian.Uint32(b[at:]))
			if l > len(b)-at-4 {
				return nil, infer.ErrSize
			}
			at += 4 + l
		}
		out[i] = b[from:at:at]
	}
	return out, nil
}
