package python

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"unicode/utf8"

	"github.com/sluice-ml/sluice/internal/infer"
)

// The frame operations. Requests go from Sluice to the worker, answers
// come back with the request's id; log frames carry id 0.
const (
	opInit      = 1 // → worker: JSON initArgs; answered by opReady or opError
	opReady     = 2 // ← worker: JSON readyInfo
	opExecute   = 3 // → worker: requests (see frameWriter.requests)
	opResult    = 4 // ← worker: one response per request (see decodeResponses)
	opError     = 5 // ← worker: JSON workerError; the whole call failed
	opPing      = 6 // → worker: empty; answered by opPong
	opPong      = 7 // ← worker: empty
	opFinalize  = 8 // → worker: empty; the worker calls finalize(), answers opFinalized and exits
	opFinalized = 9 // ← worker: empty, or JSON workerError when finalize() raised
	opLog       = 10
	// ← worker: JSON logLine from pb_utils.Logger
	opResponse = 11 // ← worker: one response of a decoupled model (see decodeStreamed), with the execute call's id
	// ← worker: a BLS request (see decodeBLS), with an id of the
	// worker's; answered by opBLSResult with that id, or, a decoupled
	// one, by opBLSStream frames
	opBLS       = 12
	opBLSResult = 13 // → worker: the BLS request's response (see frameWriter.blsResponse)
	opMetric    = 14 // ← worker: JSON customMsg, a custom metric's change; not answered
	// → worker: one response of a decoupled BLS request (exec(decoupled=True)),
	// with the request's id (see frameWriter.blsStreamed); the last is final
	opBLSStream = 15

	// opOversize never travels: the reader makes it of an opResult frame
	// over the result limit, whose payload it skipped unread (size says
	// how large the frame was).
	opOversize = 0xff
)

// protocolVersion is the framing the embedded worker speaks; the worker
// echoes it in opReady.
const protocolVersion = 4

// headerSize is the fixed frame header: u32 frame size (header included),
// u8 op, three zero bytes, u64 id, all little-endian. Payloads start at
// offset 16, so offsets that are 8-aligned in the payload are 8-aligned in
// the frame.
const headerSize = 16

// Per-response status bytes in an opResult payload.
const (
	respOK    = 0
	respError = 1
)

// Error codes a worker sends with a per-request error: Triton's
// TritonError codes, plus codeDefault for a TritonError made without one.
const (
	codeDefault       = 0
	codeUnknown       = 1
	codeInternal      = 2
	codeNotFound      = 3
	codeInvalidArg    = 4
	codeUnavailable   = 5
	codeUnsupported   = 6
	codeAlreadyExists = 7
	codeCancelled     = 8
)

// maxDims bounds a tensor's rank on the wire (a u8 holds it anyway).
const maxDims = 64

// frame is one decoded frame. Payload aliases the buffer it was read into.
type frame struct {
	op      byte
	id      uint64
	payload []byte
	size    uint32 // the frame's size on the wire, header included
}

// readFrame reads one frame. A frame larger than limit is refused before
// anything is allocated for it.
func readFrame(r io.Reader, hdr *[headerSize]byte, limit int) (frame, error) {
	return readFrameResult(r, hdr, limit, limit)
}

// readFrameResult is readFrame where an opResult frame larger than
// resultLimit (but within limit) is skipped without being held: its
// payload is read and dropped, and an opOversize frame is returned in its
// place, so that the stream stays in step and the worker keeps serving.
func readFrameResult(r io.Reader, hdr *[headerSize]byte, limit, resultLimit int) (frame, error) {
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frame{}, err
	}
	size := binary.LittleEndian.Uint32(hdr[0:])
	if size < headerSize {
		return frame{}, fmt.Errorf("frame size %d is smaller than its header", size)
	}
	if uint64(size) > uint64(limit) {
		return frame{}, fmt.Errorf("frame of %d bytes exceeds the limit of %d", size, limit)
	}
	if hdr[5] != 0 || hdr[6] != 0 || hdr[7] != 0 {
		return frame{}, errors.New("frame header has non-zero reserved bytes")
	}
	f := frame{op: hdr[4], id: binary.LittleEndian.Uint64(hdr[8:]), size: size}
	if f.op == opResult && uint64(size) > uint64(resultLimit) {
		if _, err := io.CopyN(io.Discard, r, int64(size)-headerSize); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return frame{}, err
		}
		f.op = opOversize
		return f, nil
	}
	if n := int(size) - headerSize; n > 0 {
		f.payload = make([]byte, n)
		if _, err := io.ReadFull(r, f.payload); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return frame{}, err
		}
	}
	return f, nil
}

// appendHeader appends a frame header; the size is patched by finish.
func appendHeader(b []byte, op byte, id uint64) []byte {
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = append(b, op, 0, 0, 0)
	return binary.LittleEndian.AppendUint64(b, id)
}

// smallFrame builds a frame whose payload is copied in.
func smallFrame(op byte, id uint64, payload []byte) []byte {
	b := make([]byte, 0, headerSize+len(payload))
	b = appendHeader(b, op, id)
	b = append(b, payload...)
	binary.LittleEndian.PutUint32(b, uint32(len(b)))
	return b
}

// inlineLimit is the tensor size up to which data is copied into the
// frame's metadata buffer instead of being written from the caller's
// buffer (an iovec costs more than copying a few hundred bytes).
const inlineLimit = 1024

// frameWriter builds one frame as metadata segments interleaved with
// borrowed tensor data, for one writev. Its buffers are reused.
type frameWriter struct {
	meta []byte
	segs []segment
	bufs net.Buffers
	size int // bytes so far, header included
}

// segment is either meta[from:to] or an external buffer.
type segment struct {
	from, to int
	ext      []byte
}

func (w *frameWriter) reset(op byte, id uint64) {
	w.meta = appendHeader(w.meta[:0], op, id)
	w.segs = w.segs[:0]
	w.size = headerSize
	w.segs = append(w.segs, segment{from: 0})
}

func (w *frameWriter) flushMeta() {
	last := &w.segs[len(w.segs)-1]
	last.to = len(w.meta)
}

func (w *frameWriter) u8(v byte) { w.meta = append(w.meta, v); w.size++ }
func (w *frameWriter) u16(v uint16) {
	w.meta = binary.LittleEndian.AppendUint16(w.meta, v)
	w.size += 2
}

func (w *frameWriter) u32(v uint32) {
	w.meta = binary.LittleEndian.AppendUint32(w.meta, v)
	w.size += 4
}

func (w *frameWriter) u64(v uint64) {
	w.meta = binary.LittleEndian.AppendUint64(w.meta, v)
	w.size += 8
}
func (w *frameWriter) bytes(b []byte) { w.meta = append(w.meta, b...); w.size += len(b) }

// pad aligns the frame to 8 bytes with zeros.
func (w *frameWriter) pad() {
	for w.size%8 != 0 {
		w.u8(0)
	}
}

// str16 writes a u16 length and the string.
func (w *frameWriter) str16(s string) error {
	if len(s) > 0xffff {
		return fmt.Errorf("name of %d bytes is too long", len(s))
	}
	w.u16(uint16(len(s)))
	w.meta = append(w.meta, s...)
	w.size += len(s)
	return nil
}

// data writes tensor bytes: copied when small, else borrowed.
func (w *frameWriter) data(b []byte) {
	if len(b) <= inlineLimit {
		w.bytes(b)
		return
	}
	w.flushMeta()
	w.segs = append(w.segs, segment{ext: b}, segment{from: len(w.meta)})
	w.size += len(b)
}

// tensor writes one tensor: name, dtype, rank, padding to 8, dims, byte
// length, data.
func (w *frameWriter) tensor(t *infer.Tensor) error {
	if err := w.str16(t.Name); err != nil {
		return err
	}
	if len(t.Shape) > maxDims {
		return fmt.Errorf("tensor '%s' has %d dimensions (at most %d)", t.Name, len(t.Shape), maxDims)
	}
	w.u8(byte(t.DataType))
	w.u8(byte(len(t.Shape)))
	w.pad()
	for _, d := range t.Shape {
		w.u64(uint64(d))
	}
	w.u64(uint64(len(t.Data)))
	w.data(t.Data)
	return nil
}

// finish patches the frame size and returns the buffers to write. It fails
// when the frame exceeds limit.
func (w *frameWriter) finish(limit int) (net.Buffers, error) {
	w.flushMeta()
	if w.size > limit {
		return nil, fmt.Errorf("%w: message of %d bytes exceeds the worker message limit of %d", errTooLarge, w.size, limit)
	}
	binary.LittleEndian.PutUint32(w.meta, uint32(w.size))
	w.bufs = w.bufs[:0]
	for _, s := range w.segs {
		switch {
		case s.ext != nil:
			w.bufs = append(w.bufs, s.ext)
		case s.to > s.from:
			w.bufs = append(w.bufs, w.meta[s.from:s.to])
		}
	}
	return w.bufs, nil
}

// execRequest is one request of an opExecute frame.
type execRequest struct {
	inputs  []infer.Tensor
	outputs []string
	params  []byte // the request parameters as a JSON object; nil = none
}

// requests writes an opExecute payload:
//
//	u32 request count
//	per request: u32 input count, u32 output count,
//	             u32 parameters length (0 = none), the parameters as a
//	             JSON object (what request.parameters() returns),
//	             per output: u16 length, name
//	             per input: tensor
//
// where a tensor is u16 name length, name, u8 data type (Triton's
// TRITONSERVER_DataType numbering, which package infer shares), u8 rank,
// zero padding to an 8-byte offset, i64 dims, u64 byte length, then the
// bytes in KServe's layout (BYTES elements carry u32 length prefixes).
func (w *frameWriter) requests(reqs []execRequest) error {
	w.u32(uint32(len(reqs)))
	for i := range reqs {
		r := &reqs[i]
		w.u32(uint32(len(r.inputs)))
		w.u32(uint32(len(r.outputs)))
		w.u32(uint32(len(r.params)))
		w.bytes(r.params)
		for _, o := range r.outputs {
			if err := w.str16(o); err != nil {
				return err
			}
		}
		for j := range r.inputs {
			if err := w.tensor(&r.inputs[j]); err != nil {
				return err
			}
		}
	}
	return nil
}

// response is one request's answer in an opResult frame: its outputs, or
// the error its InferenceResponse carried.
type response struct {
	outputs []infer.Tensor
	errCode byte
	errMsg  string
	failed  bool
}

// decoder reads a payload, tracking the offset for alignment.
type decoder struct {
	b   []byte
	off int
}

var (
	errTruncated = errors.New("payload is truncated")
	errTooLarge  = errors.New("request too large")
)

func (d *decoder) need(n int) error {
	if n < 0 || len(d.b)-d.off < n {
		return errTruncated
	}
	return nil
}

func (d *decoder) u8() (byte, error) {
	if err := d.need(1); err != nil {
		return 0, err
	}
	v := d.b[d.off]
	d.off++
	return v, nil
}

func (d *decoder) u16() (uint16, error) {
	if err := d.need(2); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint16(d.b[d.off:])
	d.off += 2
	return v, nil
}

func (d *decoder) u32() (uint32, error) {
	if err := d.need(4); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v, nil
}

func (d *decoder) u64() (uint64, error) {
	if err := d.need(8); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v, nil
}

// take returns the next n bytes without copying.
func (d *decoder) take(n uint64) ([]byte, error) {
	if n > uint64(len(d.b)-d.off) {
		return nil, errTruncated
	}
	v := d.b[d.off : d.off+int(n) : d.off+int(n)]
	d.off += int(n)
	return v, nil
}

// pad skips to the next 8-byte offset; the payload starts 8-aligned.
func (d *decoder) pad() error {
	n := (8 - d.off%8) % 8
	if err := d.need(n); err != nil {
		return err
	}
	d.off += n
	return nil
}

func (d *decoder) str16() (string, error) {
	n, err := d.u16()
	if err != nil {
		return "", err
	}
	b, err := d.take(uint64(n))
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", errors.New("name is not valid UTF-8")
	}
	return string(b), nil
}

// tensor reads one tensor and checks that its bytes agree with its type
// and shape. Data aliases the payload.
func (d *decoder) tensor() (infer.Tensor, error) {
	name, err := d.str16()
	if err != nil {
		return infer.Tensor{}, err
	}
	dt, err := d.u8()
	if err != nil {
		return infer.Tensor{}, err
	}
	rank, err := d.u8()
	if err != nil {
		return infer.Tensor{}, err
	}
	if rank > maxDims {
		return infer.Tensor{}, fmt.Errorf("tensor '%s' has %d dimensions (at most %d)", name, rank, maxDims)
	}
	if err := d.pad(); err != nil {
		return infer.Tensor{}, err
	}
	if err := d.need(8 * int(rank)); err != nil {
		return infer.Tensor{}, err
	}
	shape := make(infer.Shape, rank)
	for i := range shape {
		v, _ := d.u64() // length checked above
		shape[i] = int64(v)
		if shape[i] < 0 {
			return infer.Tensor{}, fmt.Errorf("tensor '%s' has negative dimension %d", name, shape[i])
		}
	}
	n, err := d.u64()
	if err != nil {
		return infer.Tensor{}, err
	}
	data, err := d.take(n)
	if err != nil {
		return infer.Tensor{}, err
	}
	t := infer.Tensor{Name: name, DataType: infer.DataType(dt), Shape: shape, Data: data}
	if !t.DataType.Valid() {
		return infer.Tensor{}, fmt.Errorf("tensor '%s' has unknown data type code %d", name, dt)
	}
	if err := t.CheckSize(); err != nil {
		return infer.Tensor{}, fmt.Errorf("tensor '%s': %w", name, err)
	}
	return t, nil
}

// maxMessage bounds a per-request error message kept from a worker.
const maxMessage = 64 << 10

// decodeResponses reads an opResult payload that must answer want
// requests:
//
//	u32 response count
//	per response: u8 status (respOK or respError), then
//	  respOK:    u32 tensor count, tensors (as in requests)
//	  respError: u8 error code, u32 message length, UTF-8 message
//
// Counts are checked against the bytes left before anything is allocated
// for them, so a hostile payload cannot make it allocate more than a small
// multiple of its own size.
func decodeResponses(payload []byte, want int) ([]response, error) {
	d := &decoder{b: payload}
	n, err := d.u32()
	if err != nil {
		return nil, err
	}
	if int64(n) != int64(want) {
		return nil, fmt.Errorf("worker answered %d responses for %d requests", n, want)
	}
	// Every response takes at least 5 bytes.
	if uint64(n)*5 > uint64(len(payload)) {
		return nil, errTruncated
	}
	out := make([]response, n)
	for i := range out {
		if out[i], err = d.response(len(payload)); err != nil {
			return nil, fmt.Errorf("response %d: %w", i, err)
		}
	}
	if d.off != len(payload) {
		return nil, fmt.Errorf("%d bytes follow the last response", len(payload)-d.off)
	}
	return out, nil
}

// response reads one response: u8 status (respOK or respError), then
// respOK: u32 tensor count, tensors (as in requests); respError: u8 error
// code, u32 message length, UTF-8 message.
func (d *decoder) response(size int) (response, error) {
	status, err := d.u8()
	if err != nil {
		return response{}, err
	}
	switch status {
	case respOK:
		count, err := d.u32()
		if err != nil {
			return response{}, err
		}
		// A tensor takes at least 12 bytes: name length, type, rank and
		// byte length.
		if uint64(count)*12 > uint64(size-d.off) {
			return response{}, errTruncated
		}
		r := response{outputs: make([]infer.Tensor, count)}
		for j := range r.outputs {
			if r.outputs[j], err = d.tensor(); err != nil {
				return response{}, err
			}
		}
		return r, nil
	case respError:
		code, err := d.u8()
		if err != nil {
			return response{}, err
		}
		l, err := d.u32()
		if err != nil {
			return response{}, err
		}
		msg, err := d.take(uint64(l))
		if err != nil {
			return response{}, err
		}
		if len(msg) > maxMessage {
			msg = msg[:maxMessage]
		}
		return response{failed: true, errCode: code, errMsg: strings.ToValidUTF8(string(msg), "\uFFFD")}, nil
	default:
		return response{}, fmt.Errorf("unknown status %d", status)
	}
}

// Flags and kinds of an opResponse payload.
const (
	streamFinal    = 1 // flags: TRITONSERVER_RESPONSE_COMPLETE_FINAL
	streamFlagOnly = 0 // kind: no response, only the flags
	streamResponse = 1 // kind: a response follows
)

// streamed is one opResponse frame: a decoupled model's response to one
// request of an execute call, or only the final flag.
type streamed struct {
	index int // the request's index in its execute call
	final bool
	resp  *response // nil: the flag alone
}

// decodeStreamed reads an opResponse payload:
//
//	u32 request index, u8 flags (1 = final), u8 kind (0 = flags only,
//	1 = a response follows), then for kind 1 the response as in opResult
func decodeStreamed(payload []byte) (streamed, error) {
	d := &decoder{b: payload}
	idx, err := d.u32()
	if err != nil {
		return streamed{}, err
	}
	flags, err := d.u8()
	if err != nil {
		return streamed{}, err
	}
	kind, err := d.u8()
	if err != nil {
		return streamed{}, err
	}
	if flags&^streamFinal != 0 {
		return streamed{}, fmt.Errorf("unknown response flags %#x", flags)
	}
	st := streamed{index: int(idx), final: flags&streamFinal != 0}
	switch kind {
	case streamFlagOnly:
	case streamResponse:
		r, err := d.response(len(payload))
		if err != nil {
			return streamed{}, err
		}
		st.resp = &r
	default:
		return streamed{}, fmt.Errorf("unknown response kind %d", kind)
	}
	if d.off != len(payload) {
		return streamed{}, fmt.Errorf("%d bytes follow the response", len(payload)-d.off)
	}
	return st, nil
}
