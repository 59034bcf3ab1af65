package httpapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/kservewire"
	"github.com/sluice-ml/sluice/internal/shm"
)

// Protocol parameters that steer the edge itself. They are taken out of
// the parameters passed on to the model.
const (
	paramBinaryDataSize   = "binary_data_size"
	paramBinaryData       = "binary_data"
	paramBinaryDataOutput = "binary_data_output"
)

// inferBody is a decoded v2 inference request plus the protocol choices
// that do not travel in infer.Request.
type inferBody struct {
	req infer.Request
	// binarySize[i] is input i's binary_data_size, or -1 when its data
	// came as JSON.
	binarySize []int64
	// binaryOutput is the request-level binary_data_output parameter.
	binaryOutput bool
	// outputBinary[i] is requested output i's binary_data parameter:
	// -1 unset, 0 false, 1 true.
	outputBinary []int8
}

// wantsBinary reports whether the response output named name goes in the
// binary section.
func (b *inferBody) wantsBinary(name string) bool {
	for i, o := range b.req.Outputs {
		if o.Name == name && b.outputBinary[i] >= 0 {
			return b.outputBinary[i] == 1
		}
	}
	return b.binaryOutput
}

// binaryOutputs decides, for each output of resp, whether it goes in the
// binary section. Many requested outputs are looked up through a map, so
// the work stays linear. The flags go into dst's capacity when it has
// room (a caller's array on the stack), else into a new slice.
func (b *inferBody) binaryOutputs(dst []bool, outs []infer.Tensor) []bool {
	var isBinary []bool
	if cap(dst) >= len(outs) {
		isBinary = dst[:len(outs)]
	} else {
		isBinary = make([]bool, len(outs))
	}
	if len(b.req.Outputs) <= smallSet {
		for i := range outs {
			isBinary[i] = b.wantsBinary(outs[i].Name)
		}
		return isBinary
	}
	flags := make(map[string]int8, len(b.req.Outputs))
	for i, o := range b.req.Outputs {
		flags[o.Name] = b.outputBinary[i]
	}
	for i := range outs {
		f, ok := flags[outs[i].Name]
		isBinary[i] = b.binaryOutput
		if ok && f >= 0 {
			isBinary[i] = f == 1
		}
	}
	return isBinary
}

// smallSet is the size up to which name sets are scanned, not hashed.
const smallSet = 8

// nameSet finds duplicate tensor names. Small sets are scanned; larger
// ones switch to a map, so a request naming many tensors cannot make the
// check quadratic.
type nameSet struct {
	list  []string
	m     map[string]struct{}
	small [smallSet]string // list's first backing array
}

// add records name and reports false if it was already there.
func (s *nameSet) add(name string) bool {
	if s.m != nil {
		if _, dup := s.m[name]; dup {
			return false
		}
		s.m[name] = struct{}{}
		return true
	}
	if slices.Contains(s.list, name) {
		return false
	}
	if s.list == nil {
		s.list = s.small[:0]
	}
	s.list = append(s.list, name)
	if len(s.list) > smallSet {
		s.m = make(map[string]struct{}, 2*len(s.list))
		for _, n := range s.list {
			s.m[n] = struct{}{}
		}
	}
	return true
}

// decoder turns the JSON of a v2 inference request into infer types. Tensor
// data is parsed straight from the JSON text into the wire-layout bytes of
// infer.Tensor, with no intermediate values.
type decoder struct {
	s           scanner
	body        inferBody
	inputNames  nameSet
	outputNames nameSet
	// dims backs the first inputs' shapes, so that a request's shapes
	// take no allocation of their own.
	dims  [16]int64
	ndims int

	// The fields below serve a decoder that a Handler reuses across
	// requests (decoderPool); decodeInferJSON's one-off decoder leaves
	// arena nil and allocates each data buffer.

	// arena backs the inputs' data; arenaUsed bytes of it are taken and
	// arenaWant is what this request's data asked for in all, which
	// sizes the next request's arena.
	arena     []byte
	arenaUsed int
	arenaWant int
	// inputs and sizes back body.req.Inputs and body.binarySize.
	inputs [4]infer.Tensor
	sizes  [4]int64
	// names are the previous request's input names, by position: a name
	// spelled the same is reused instead of allocated again.
	names [4]string
}

// decodeInferJSON decodes the JSON part of an inference request. Inputs
// that declare binary_data_size are left without Data; attachBinary fills
// them.
func decodeInferJSON(js []byte) (*inferBody, error) {
	d := &decoder{}
	return d.decode(js)
}

// decode decodes js with d, which is new or was reset.
func (d *decoder) decode(js []byte) (*inferBody, error) {
	d.s = scanner{buf: js}
	var seen [4]bool
	err := d.s.readObject(1, func(key []byte) error {
		switch string(key) {
		case "id":
			if err := once(&seen[0], "id", theRequest); err != nil {
				return err
			}
			if ok, err := d.s.is('"'); !ok {
				if err != nil {
					return err
				}
				return invalidf(reasonInvalidRequest, `"id" must be a string`)
			}
			id, err := d.s.readString()
			d.body.req.ID = id
			return err
		case "parameters":
			if err := once(&seen[1], "parameters", theRequest); err != nil {
				return err
			}
			return d.readRequestParams()
		case "inputs":
			if err := once(&seen[2], "inputs", theRequest); err != nil {
				return err
			}
			return d.readInputs()
		case "outputs":
			if err := once(&seen[3], "outputs", theRequest); err != nil {
				return err
			}
			return d.readOutputs()
		default:
			return d.s.skipValue(1)
		}
	})
	if err != nil {
		return nil, err
	}
	if err := d.s.atEnd(); err != nil {
		return nil, err
	}
	if !seen[2] {
		return nil, invalidf(reasonInvalidRequest, `request has no "inputs"`)
	}
	return &d.body, nil
}

// once fails when a member appears twice in one object, which would
// otherwise silently merge or replace data. where names the object; it is
// only called on error, so the common path builds no strings.
func once(seen *bool, key string, where func() string) error {
	if *seen {
		return invalidf(reasonInvalidRequest, "%s has %q more than once", where(), key)
	}
	*seen = true
	return nil
}

func theRequest() string { return "the request" }

func (d *decoder) readRequestParams() error {
	params, err := d.readParams("request")
	if err != nil {
		return err
	}
	if v, ok := params[paramBinaryDataOutput]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return invalidf(reasonInvalidParameter, "request parameter %q must be a bool, got %v", paramBinaryDataOutput, v)
		}
		d.body.binaryOutput = b
		delete(params, paramBinaryDataOutput)
	}
	if len(params) > 0 {
		d.body.req.Parameters = params
	}
	return nil
}

// readParams reads a parameters object whose values are strings, numbers
// or bools. where names the owner in errors ("request", "input 'x'").
func (d *decoder) readParams(where string) (infer.Parameters, error) {
	if ok, err := d.s.is('{'); !ok {
		if err != nil {
			return nil, err
		}
		return nil, invalidf(reasonInvalidParameter, "%s: \"parameters\" must be an object", where)
	}
	params := infer.Parameters{}
	err := d.s.readObject(2, func(key []byte) error {
		k := string(key)
		if _, dup := params[k]; dup {
			return invalidf(reasonInvalidParameter, "%s: parameter %q appears more than once", where, k)
		}
		v, err := d.readParamValue(where, k)
		if err != nil {
			return err
		}
		params[k] = v
		return nil
	})
	return params, err
}

// readParamValue reads one parameter value: a string, a bool, or a number
// kept as int64 when it is an integer that fits, uint64 when only that
// fits, and float64 otherwise.
func (d *decoder) readParamValue(where, key string) (any, error) {
	switch c := d.s.peek(); {
	case c == '"':
		return d.s.readString()
	case c == 't' || c == 'f':
		lit, err := d.s.readLiteral()
		return lit == 't', err
	case c == '-' || (c >= '0' && c <= '9'):
		tok, integer, err := d.s.readNumber()
		if err != nil {
			return nil, err
		}
		if integer {
			if v, err := strconv.ParseInt(string(tok), 10, 64); err == nil {
				return v, nil
			}
			if v, err := strconv.ParseUint(string(tok), 10, 64); err == nil {
				return v, nil
			}
		}
		v, err := strconv.ParseFloat(string(tok), 64)
		if err != nil {
			return nil, invalidf(reasonInvalidParameter, "%s: parameter %q: %s is out of range", where, key, tok)
		}
		return v, nil
	case c == 0:
		return nil, d.s.unexpected("a value")
	default:
		return nil, invalidf(reasonInvalidParameter, "%s: parameter %q must be a string, number or bool", where, key)
	}
}

func (d *decoder) readInputs() error {
	if ok, err := d.s.is('['); !ok {
		if err != nil {
			return err
		}
		return invalidf(reasonInvalidRequest, `"inputs" must be an array`)
	}
	if d.body.req.Inputs == nil {
		if d.arena != nil {
			d.body.req.Inputs, d.body.binarySize = d.inputs[:0], d.sizes[:0]
		} else {
			d.body.req.Inputs = make([]infer.Tensor, 0, 4)
			d.body.binarySize = make([]int64, 0, 4)
		}
	}
	return d.s.readArray(2, func(i int) error {
		t, size, err := d.readInput(i)
		if err != nil {
			return err
		}
		if !d.inputNames.add(t.Name) {
			return invalidf(reasonDuplicateInput, "input '%s' appears more than once", t.Name)
		}
		d.body.req.Inputs = append(d.body.req.Inputs, t)
		d.body.binarySize = append(d.body.binarySize, size)
		return nil
	})
}

// inputState collects one input object's members, which JSON allows in any
// order.
type inputState struct {
	idx        int // position in "inputs", for errors before the name is known
	name       string
	dt         infer.DataType
	shape      infer.Shape
	params     infer.Parameters
	binarySize int64 // -1 when absent
	data       []byte
	count      int // elements parsed from "data"
	// deferredData is the offset of a "data" value that came before the
	// name or datatype; -1 if none.
	deferredData                        int
	hasName, hasDT, hasShape, hasParams bool
	seenData                            bool
}

// label names the input in errors: by name once known, else by position.
func (t *inputState) label() string {
	if t.hasName {
		return "input '" + t.name + "'"
	}
	return fmt.Sprintf("input #%d", t.idx)
}

// readInputParams reads input t's "parameters"; binary_data_size is
// taken out of them into t.binarySize.
func (d *decoder) readInputParams(t *inputState) error {
	params, err := d.readParams(t.label())
	if err != nil {
		return err
	}
	if v, ok := params[paramBinaryDataSize]; ok {
		size, ok := nonNegativeInt(v)
		if !ok {
			return invalidf(reasonInvalidParameter, "%s: %s must be a non-negative integer, got %v", t.label(), paramBinaryDataSize, v)
		}
		t.binarySize = size
		delete(params, paramBinaryDataSize)
	}
	if len(params) > 0 {
		t.params = params
	}
	return nil
}

// readInputKey reads the value of one key of input t's object.
func (d *decoder) readInputKey(t *inputState, key []byte) error {
	idx := t.idx
	switch string(key) {
	case "name":
		if err := once(&t.hasName, "name", t.label); err != nil {
			return err
		}
		if ok, err := d.s.is('"'); !ok {
			if err != nil {
				return err
			}
			return invalidf(reasonInvalidInput, `input #%d: "name" must be a string`, idx)
		}
		name, err := d.inputName(idx)
		t.name = name
		return err
	case "datatype":
		if err := once(&t.hasDT, "datatype", t.label); err != nil {
			return err
		}
		if ok, err := d.s.is('"'); !ok {
			if err != nil {
				return err
			}
			return invalidf(reasonInvalidDatatype, `%s: "datatype" must be a string`, t.label())
		}
		raw, escaped, err := d.s.readStringRaw()
		if err != nil {
			return err
		}
		if escaped {
			raw = appendUnescaped(nil, raw)
		}
		dt, ok := infer.ParseDataType(string(raw))
		if !ok {
			return invalidf(reasonInvalidDatatype, "%s: unknown datatype %q", t.label(), raw)
		}
		t.dt = dt
		return nil
	case "shape":
		if err := once(&t.hasShape, "shape", t.label); err != nil {
			return err
		}
		return d.readShape(t)
	case "parameters":
		if err := once(&t.hasParams, "parameters", t.label); err != nil {
			return err
		}
		return d.readInputParams(t)
	case "data":
		if err := once(&t.seenData, "data", t.label); err != nil {
			return err
		}
		if ok, err := d.s.is('['); !ok {
			if err != nil {
				return err
			}
			return invalidf(reasonInvalidInput, `%s: "data" must be an array`, t.label())
		}
		if !t.hasName || !t.hasDT {
			// Parse once name and datatype are known, so errors can name
			// the tensor and values go straight into the right layout.
			t.deferredData = d.s.pos
			return d.s.skipValue(3)
		}
		return d.readData(t)
	default:
		return d.s.skipValue(3)
	}
}

func (d *decoder) readInput(idx int) (infer.Tensor, int64, error) {
	t := &inputState{idx: idx, binarySize: -1, deferredData: -1}
	if ok, err := d.s.is('{'); !ok {
		if err != nil {
			return infer.Tensor{}, 0, err
		}
		return infer.Tensor{}, 0, invalidf(reasonInvalidInput, "input #%d must be an object", idx)
	}
	err := d.s.readObject(3, func(key []byte) error { return d.readInputKey(t, key) })
	if err != nil {
		return infer.Tensor{}, 0, err
	}
	return d.finishInput(t)
}

// finishInput checks what an input object held once it is read, parses
// "data" that came before its name or datatype, and builds the tensor.
func (d *decoder) finishInput(t *inputState) (infer.Tensor, int64, error) {
	idx := t.idx
	switch {
	case !t.hasName:
		return infer.Tensor{}, 0, invalidf(reasonInvalidInput, `input #%d has no "name"`, idx)
	case !t.hasDT:
		return infer.Tensor{}, 0, invalidf(reasonInvalidDatatype, `%s has no "datatype"`, t.label())
	case !t.hasShape:
		return infer.Tensor{}, 0, invalidf(reasonInvalidShape, `%s has no "shape"`, t.label())
	}
	n, err := t.shape.Elements()
	if err != nil {
		return infer.Tensor{}, 0, t.shapeError(err)
	}
	if t.deferredData >= 0 {
		end := d.s.pos
		d.s.pos = t.deferredData
		if err := d.readData(t); err != nil {
			return infer.Tensor{}, 0, err
		}
		d.s.pos = end
	}
	switch {
	case t.seenData && t.binarySize >= 0:
		return infer.Tensor{}, 0, invalidf(reasonInvalidInput, `%s has both "data" and a %s parameter`, t.label(), paramBinaryDataSize)
	case !t.seenData && t.binarySize < 0 && shm.InRegion(t.params):
		// The data is in a shared-memory region (read after decoding).
	case !t.seenData && t.binarySize < 0:
		return infer.Tensor{}, 0, invalidf(reasonInvalidInput, `%s has no "data" and no %s parameter`, t.label(), paramBinaryDataSize)
	case t.seenData && t.count != n:
		return infer.Tensor{}, 0, invalidf(reasonSizeMismatch, "%s: shape %s needs %d elements, got %d", t.label(), t.shape, n, t.count)
	}
	data := t.data
	if t.seenData && data == nil {
		data = []byte{} // an empty tensor still has (empty) data
	}
	return infer.Tensor{Name: t.name, DataType: t.dt, Shape: t.shape, Data: data, Parameters: t.params}, t.binarySize, nil
}

// shapeError reports a shape whose element count Elements refused. A
// count or byte size past int64 is said in Triton's words (QA L0_http
// test_buffer_size_overflow greps for them); any other refusal (a
// negative dimension, more than infer.MaxElements) in Sluice's.
func (t *inputState) shapeError(err error) error {
	n := int64(1)
	for _, d := range t.shape {
		if d < 0 {
			return invalidf(reasonInvalidShape, "%s: %v", t.label(), err)
		}
		if d != 0 && n > math.MaxInt64/d {
			return invalidf(reasonInvalidShape, "invalid shape for input '%s': shape %s causes total element count to exceed maximum size of %d", t.name, t.shape, int64(math.MaxInt64))
		}
		n *= d
	}
	if size := int64(t.dt.Size()); t.dt != infer.Bytes && size > 1 && n > math.MaxInt64/size {
		return invalidf(reasonInvalidShape, "byte size overflow for input '%s': element count (%d) * data type size (%d) exceeds maximum allowed size (%d)", t.name, n, size, int64(math.MaxInt64))
	}
	return invalidf(reasonInvalidShape, "%s: %v", t.label(), err)
}

// nonNegativeInt accepts an integer parameter value >= 0.
func nonNegativeInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, x >= 0
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x), true
		}
	}
	return 0, false
}

func (d *decoder) readShape(t *inputState) error {
	notInts := func() error {
		return invalidf(reasonInvalidShape, `%s: "shape" must be an array of integers`, t.label())
	}
	if ok, err := d.s.is('['); !ok {
		if err != nil {
			return err
		}
		return notInts()
	}
	d.s.pos++
	shape := infer.Shape(d.dims[d.ndims:d.ndims])
	if d.s.peek() == ']' {
		d.s.pos++
		t.shape = d.keepShape(shape)
		return nil
	}
	for {
		if ok, err := d.s.is('-'); !ok {
			if err != nil {
				return err
			}
			if c := d.s.peek(); c < '0' || c > '9' {
				return notInts()
			}
		}
		tok, integer, err := d.s.readNumber()
		if err != nil {
			return err
		}
		v, perr := strconv.ParseInt(string(tok), 10, 64)
		if !integer || perr != nil {
			return invalidf(reasonInvalidShape, `%s: shape dimension %s is not an integer`, t.label(), tok)
		}
		if v < 0 {
			return invalidf(reasonInvalidShape, `%s: shape dimension %d is negative`, t.label(), v)
		}
		shape = append(shape, v)
		switch d.s.peek() {
		case ',':
			d.s.pos++
		case ']':
			d.s.pos++
			t.shape = d.keepShape(shape)
			return nil
		default:
			return d.s.unexpected("',' or ']' after a shape dimension")
		}
	}
}

// keepShape ends a shape read into dims: it is capped, so that appending
// to it cannot overwrite the next input's, and the rest of dims is left to
// the next input. A shape that outgrew dims was moved by append and takes
// none of it.
func (d *decoder) keepShape(shape infer.Shape) infer.Shape {
	if n := len(shape); n <= len(d.dims)-d.ndims {
		d.ndims += n
	}
	return slices.Clip(shape)
}

// readData parses a "data" array, flat or nested, into t.data in the wire
// layout of t.dt. Nesting must be regular: all scalars at one depth and
// sibling arrays of equal length. The element count is checked against the
// shape by the caller.
func (d *decoder) readData(t *inputState) error {
	s := &d.s
	// Size the buffer from the shape, but never beyond what the remaining
	// text could possibly hold (each element takes at least two bytes), so a
	// claimed shape cannot make us allocate more than the body justifies.
	limit := (len(s.buf)-s.pos)/2 + 1
	n := -1
	if t.hasShape {
		if e, err := t.shape.Elements(); err == nil {
			n = e
		}
	}
	capElems := min(limit, 1024)
	if n >= 0 {
		capElems = min(n, limit)
	}
	size := t.dt.Size()
	if t.dt == infer.Bytes {
		size = 8 // a guess: prefix plus a few bytes
	}
	out := d.dataBuffer(capElems * size)

	// counts[d] is the number of values so far in the open array at depth
	// d; want[d] is one more than the length every array at depth d must
	// have (0 = not yet known).
	var counts, want [maxDepth]int
	leafDepth, maxOpened := -1, 1
	count := 0
	s.pos++ // the '[' checked by the caller
	depth := 1
	justOpened := true
	for depth > 0 {
		c := s.peek()
		if c == '[' {
			if leafDepth >= 0 && depth >= leafDepth {
				return invalidf(reasonRaggedData, "%s: element %d: nested arrays mix numbers and arrays at one level", t.label(), count)
			}
			if depth+1 >= len(counts) {
				// As Triton: at most maxDepth-1 arrays deep.
				return s.depthError()
			}
			s.pos++
			depth++
			maxOpened = max(maxOpened, depth)
			counts[depth] = 0 //nolint:gosec // G602: depth < len(counts), checked just above
			justOpened = true
			continue
		}
		if c != ']' || !justOpened {
			if leafDepth < 0 {
				if depth < maxOpened {
					return invalidf(reasonRaggedData, "%s: element %d: nested arrays mix numbers and arrays at one level", t.label(), count)
				}
				leafDepth = depth
			} else if depth != leafDepth {
				return invalidf(reasonRaggedData, "%s: element %d: nested arrays mix numbers and arrays at one level", t.label(), count)
			}
			if n >= 0 && count >= n {
				// More values than the shape holds: stop rather than parse
				// (and store) the rest of an oversized array.
				return invalidf(reasonSizeMismatch, "%s: shape %s needs %d elements, got more", t.label(), t.shape, n)
			}
			var k int
			var err error
			if out, k, err = d.appendScalars(out, t, count, n); err != nil {
				return err
			}
			count += k
			counts[depth] += k
			c = s.peek()
		}
		justOpened = false
		// After a value or a closed array: ',' or one or more ']'.
		for {
			if c == ',' {
				s.pos++
				if s.peek() == ']' {
					return s.unexpected("a value after ','")
				}
				break
			}
			if c != ']' {
				return s.unexpected("',' or ']' after an array element")
			}
			s.pos++
			switch w := want[depth]; {
			case w == 0:
				want[depth] = counts[depth] + 1
			case w != counts[depth]+1:
				return invalidf(reasonRaggedData, "%s: nested arrays at depth %d have lengths %d and %d", t.label(), depth, w-1, counts[depth])
			}
			depth--
			if depth == 0 {
				break
			}
			counts[depth]++
			c = s.peek()
		}
	}
	t.data = out
	t.count = count
	return nil
}

// appendElement parses one scalar at the scanner's position and appends it
// to out in t.dt's wire layout.
func (d *decoder) appendElement(out []byte, t *inputState, idx int) ([]byte, error) {
	s := &d.s
	c := s.peek()
	switch t.dt {
	case infer.Bool:
		if c != 't' && c != 'f' {
			return nil, d.typeError(t, idx, c, "true or false")
		}
		lit, err := s.readLiteral()
		if err != nil {
			return nil, err
		}
		if lit == 't' {
			return append(out, 1), nil
		}
		return append(out, 0), nil
	case infer.Bytes:
		if c != '"' {
			return nil, d.typeError(t, idx, c, "a string")
		}
		raw, escaped, err := s.readStringRaw()
		if err != nil {
			return nil, err
		}
		if !escaped {
			return infer.AppendBytesElement(out, raw), nil
		}
		at := len(out)
		out = append(out, 0, 0, 0, 0)
		out = appendUnescaped(out, raw)
		binary.LittleEndian.PutUint32(out[at:], uint32(len(out)-at-4))
		return out, nil
	default:
		return d.appendNumber(out, t, idx, c)
	}
}

// appendNumber parses one number element of a numeric t.dt; c is its first
// byte. The datatype's rules (rounding, ranges, integral literals for
// integer types) are the JSON tensor encoding's, in kservewire.
func (d *decoder) appendNumber(out []byte, t *inputState, idx int, c byte) ([]byte, error) {
	if c != '-' && (c < '0' || c > '9') {
		return nil, d.typeError(t, idx, c, "a number")
	}
	n, err := d.s.readDecimal()
	if err != nil {
		return nil, err
	}
	out, err = kservewire.AppendNumber(out, t.dt, &n)
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, kservewire.ErrNotInteger):
		return nil, invalidf(reasonContentsMismatch, "%s: element %d: %s is not an integer, as %s needs", t.label(), idx, n.Lit, t.dt)
	default:
		return nil, d.rangeError(t, idx, n.Lit)
	}
}

func (d *decoder) typeError(t *inputState, idx int, c byte, want string) error {
	if !isValueStart(c) {
		return d.s.unexpected("a value")
	}
	return invalidf(reasonContentsMismatch, "%s: element %d: expected %s for %s, got %s", t.label(), idx, want, t.dt, jsonKind(c))
}

func (d *decoder) rangeError(t *inputState, idx int, tok []byte) error {
	return invalidf(reasonValueOutOfRange, "%s: element %d: %s is out of range for %s", t.label(), idx, tok, t.dt)
}

// isValueStart reports whether c can begin a JSON value.
func isValueStart(c byte) bool {
	switch c {
	case '"', 't', 'f', 'n', '{', '[', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return true
	}
	return false
}

// jsonKind names the JSON type that starts with c.
func jsonKind(c byte) string {
	switch c {
	case '"':
		return "a string"
	case 't', 'f':
		return "a bool"
	case 'n':
		return "null"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return "a number"
	}
	return quoteByte(c)
}

func (d *decoder) readOutputs() error {
	if ok, err := d.s.is('['); !ok {
		if err != nil {
			return err
		}
		return invalidf(reasonInvalidRequest, `"outputs" must be an array`)
	}
	return d.s.readArray(2, func(i int) error {
		if ok, err := d.s.is('{'); !ok {
			if err != nil {
				return err
			}
			return invalidf(reasonInvalidRequest, "output #%d must be an object", i)
		}
		var out infer.RequestedOutput
		var hasName, hasParams bool
		bin := int8(-1)
		label := func() string {
			if hasName {
				return "output '" + out.Name + "'"
			}
			return fmt.Sprintf("output #%d", i)
		}
		err := d.s.readObject(3, func(key []byte) error {
			switch string(key) {
			case "name":
				if err := once(&hasName, "name", label); err != nil {
					return err
				}
				if ok, err := d.s.is('"'); !ok {
					if err != nil {
						return err
					}
					return invalidf(reasonInvalidRequest, `output #%d: "name" must be a string`, i)
				}
				name, err := d.s.readString()
				out.Name = name
				return err
			case "parameters":
				if err := once(&hasParams, "parameters", label); err != nil {
					return err
				}
				params, err := d.readParams(label())
				if err != nil {
					return err
				}
				out.Parameters = params
				return nil
			default:
				return d.s.skipValue(3)
			}
		})
		if err != nil {
			return err
		}
		if !hasName {
			return invalidf(reasonInvalidRequest, `output #%d has no "name"`, i)
		}
		if v, ok := out.Parameters[paramBinaryData]; ok {
			b, isBool := v.(bool)
			if !isBool {
				return invalidf(reasonInvalidParameter, "%s: parameter %q must be a bool, got %v", label(), paramBinaryData, v)
			}
			bin = 0
			if b {
				bin = 1
			}
			delete(out.Parameters, paramBinaryData)
		}
		if len(out.Parameters) == 0 {
			out.Parameters = nil
		}
		if !d.outputNames.add(out.Name) {
			// Triton's words, newer and older (QA L0_http
			// test_duplicate_output_names greps for the first).
			return invalidf(reasonDuplicateOutput, "output '%s' already exists in request (Duplicate output name '%s' is not allowed in a request)", out.Name, out.Name)
		}
		d.body.req.Outputs = append(d.body.req.Outputs, out)
		d.body.outputBinary = append(d.body.outputBinary, bin)
		return nil
	})
}

// inputName reads input idx's name. A reused decoder hands out the
// previous request's string when the bytes are the same (clients send
// the same names request after request), so the name is not allocated
// again; strings are immutable, so sharing one cannot leak anything.
func (d *decoder) inputName(idx int) (string, error) {
	if d.arena == nil || idx >= len(d.names) {
		return d.s.readString()
	}
	raw, escaped, err := d.s.readStringRaw()
	if err != nil {
		return "", err
	}
	if !escaped && d.names[idx] == string(raw) {
		return d.names[idx], nil
	}
	name := string(raw)
	if escaped {
		name = string(appendUnescaped(nil, raw))
	}
	d.names[idx] = name
	return name, nil
}

// dataBuffer returns an empty buffer with room for n bytes: a slice of
// the arena, capped so that appending past n moves it rather than write
// over the next input's data, or a new one when the arena is short.
func (d *decoder) dataBuffer(n int) []byte {
	d.arenaWant += n
	if d.arena == nil || n > cap(d.arena)-d.arenaUsed {
		return make([]byte, 0, n)
	}
	b := d.arena[d.arenaUsed : d.arenaUsed : d.arenaUsed+n]
	d.arenaUsed += n
	return b
}

// Bounds of a pooled decoder's arena: it starts at minArena bytes and
// grows to what a request's data asked for, up to maxArena; larger data
// is allocated per request.
const (
	minArena = 4 << 10
	maxArena = 256 << 10
)

// decoderPool reuses decoders, their arenas and their input tensors
// across the JSON-only inference requests of one Handler. A decoder is
// given back only once nothing refers to the request it decoded.
type decoderPool struct{ p sync.Pool }

// get returns a reset decoder with an arena. A decoder is reset when it
// is taken, not when it is given back, so that the request it decoded
// stays whole for as long as nothing else needs its memory.
func (dp *decoderPool) get() *decoder {
	d, ok := dp.p.Get().(*decoder)
	if !ok {
		return &decoder{arena: make([]byte, minArena)}
	}
	// The arena is zeroed up to what was used, so no request's data
	// outlives it there, and regrown (up to maxArena) when the last
	// request's data did not fit.
	clear(d.arena[:d.arenaUsed])
	if d.arenaWant > cap(d.arena) && d.arenaWant <= maxArena {
		d.arena = make([]byte, d.arenaWant)
	}
	*d = decoder{arena: d.arena[:cap(d.arena)], names: d.names}
	return d
}

// put keeps d for a later request; nothing may refer to the request it
// decoded any more.
func (dp *decoderPool) put(d *decoder) { dp.p.Put(d) }
