package httpapi

import (
	"compress/gzip"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluice-ml/sluice/internal/admission"
	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelrepo"
	"github.com/sluice-ml/sluice/internal/zpool"
)

// headerLength is the binary extension's header naming the JSON part's
// length.
const headerLength = "Inference-Header-Content-Length"

// modelRequest reads what every model request (infer, generate) starts
// with: the model and version of the path, the request id header and the
// body. ok is false when the body could not be read; the error has been
// answered.
func (h *Handler) modelRequest(w http.ResponseWriter, r *http.Request) (name, version, requestID string, body []byte, ok bool) {
	name, version = r.PathValue("model"), r.PathValue("version")
	requestID = r.Header.Get("X-Request-Id")
	body, err := h.readBody(w, r)
	if err != nil {
		h.writeError(w, r, requestID, err)
		return name, version, requestID, nil, false
	}
	return name, version, requestID, body, true
}

func (h *Handler) handleInfer(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name, version, requestID, body, ok := h.modelRequest(w, r)
	if !ok {
		return
	}
	hdr := r.Header.Get(headerLength)
	var ib *inferBody
	var err error
	var pooled *decoder
	if hdr == "" {
		// A JSON-only body is copied out by the decoder (names, values,
		// parameters; errors format their own text), so its buffer can
		// serve the next request. Binary tensors alias the body: those
		// bodies are left to the collector. The decoder, with the
		// request's tensors and its data, comes from a pool and goes back
		// once the answer is written.
		pooled = h.decoders.get()
		ib, err = pooled.decodeBody(body, -1)
		h.putBody(body)
	} else {
		ib, err = h.decodeInfer(ctx, hdr, name, version, body)
	}
	if err != nil {
		h.writeError(w, r, requestID, err)
		return
	}
	if ib.req.ID != "" {
		requestID = ib.req.ID
	}
	ib.req.Model, ib.req.Version = name, version
	if h.opts.HeaderForward != nil {
		if err := forwardHeaders(ctx, &ib.req, r.Header, h.opts.HeaderForward); err != nil {
			h.writeError(w, r, requestID, err)
			return
		}
	}
	// The regions the request names stay registered until it is
	// answered, even when unregistered meanwhile, as in Triton.
	lease, err := h.opts.SharedMemory.Acquire(&ib.req)
	if err != nil {
		h.writeError(w, r, requestID, err)
		return
	}
	defer lease.Release()
	resp, err := h.models.Infer(ctx, &ib.req)
	if err == nil && resp == nil {
		err = apierr.Errorf(apierr.KindInternal, reasonInternal, "model '%s' returned no response", name)
	}
	if err == nil {
		err = lease.WriteOutputs(resp)
	}
	if err != nil {
		h.writeError(w, r, requestID, err)
		return
	}
	h.writeInferResponse(w, r, requestID, ib, resp)
	if pooled != nil {
		// The decoder goes back only here, once the model answered and
		// the answer is written: every user of the request's tensors (the
		// scheduler, which waits for a started batch even when its caller
		// leaves; the backend; the response cache, which keeps copies;
		// outputs that alias an input) is done with them. After a failure
		// the request may still be in a batch that runs on, so its
		// decoder is left to the collector.
		h.decoders.put(pooled)
	}
}

// readBody reads the whole request body, decompressing gzip or deflate
// bodies, and enforces MaxBodyBytes on the result. The buffer grows with
// the bytes that arrive; a claimed Content-Length only sizes the first
// allocation, and at most 1 MiB of it unless the process's admission
// (Options.Budget) has reserved it whole.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	limit := h.opts.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, bodyTooLarge(r, r.ContentLength, limit, false)
	}
	// MaxBytesReader tells the server to close the connection once the
	// limit is hit, but only when it gets the server's own writer.
	var rd io.Reader = r.Body
	if r.ContentLength < 0 {
		// A body of unknown length is cut at the limit; one with a
		// Content-Length (at most limit, checked above) ends there
		// already, as net/http reads no further.
		rd = http.MaxBytesReader(innermost(w), r.Body, limit)
	}
	enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding")))
	switch enc {
	case "", "identity":
		enc = ""
	case "gzip", "deflate":
		var zr io.ReadCloser
		var err error
		if enc == "gzip" {
			zr, err = gzip.NewReader(rd)
		} else {
			zr, err = zlib.NewReader(rd) // HTTP's "deflate" is the zlib format
		}
		if err != nil {
			return nil, bodyReadError(r, err, limit, enc)
		}
		defer zr.Close()
		// One byte more than the limit tells a too-large result apart
		// from one that just fits.
		rd = io.LimitReader(zr, limit+1)
	default:
		return nil, apierr.Errorf(apierr.KindUnsupported, reasonUnsupportedEncoding,
			"Content-Encoding %q is not supported (use gzip, deflate or none)", enc)
	}
	size := 512
	switch {
	case r.ContentLength > 0 && enc == "" && h.opts.Budget != nil:
		// Behind admission the declared length is already reserved in the
		// budget: one buffer of that size, not a series of doublings that
		// leave up to twice as much garbage behind.
		size = int(r.ContentLength + 1)
	case r.ContentLength > 0:
		size = int(min(r.ContentLength+1, 1<<20))
	}
	var buf []byte
	if enc == "" {
		buf = h.getBody(size)
	} else {
		// A decompressed body's growth is charged to the budget by its
		// capacity, so it starts from a fresh buffer of the claimed size.
		buf = make([]byte, 0, size)
	}
	// admission.Handler reserved the Content-Length (or charges chunked
	// wire bytes as they arrive); a decompressed buffer growing past that
	// is charged to the process budget too.
	covered := max(r.ContentLength, 0)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
			if enc != "" && int64(cap(buf)) > covered {
				if err := admission.Charge(r.Context(), int64(cap(buf))-covered); err != nil {
					return nil, bodyReadError(r, err, limit, enc)
				}
				covered = int64(cap(buf))
			}
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, bodyTooLarge(r, -1, limit, enc != "")
		}
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, bodyReadError(r, err, limit, enc)
		}
	}
}

// maxPooledBody keeps large bodies out of the pool: they are rare, and a
// pooled one would hold its memory until the collector clears the pool.
const maxPooledBody = 64 << 10

// getBody returns an empty buffer with room for size bytes, from the pool
// when a pooled one is large enough.
func (h *Handler) getBody(size int) []byte {
	if size <= maxPooledBody {
		if b, ok := h.bodies.Get().(*[]byte); ok {
			if cap(*b) >= size {
				return (*b)[:0]
			}
			h.bodies.Put(b)
		}
	}
	return make([]byte, 0, size)
}

// putBody gives a body buffer back once nothing refers to it.
func (h *Handler) putBody(b []byte) {
	if cap(b) == 0 || cap(b) > maxPooledBody {
		return
	}
	b = b[:0]
	h.bodies.Put(&b)
}

// innermost unwraps response writer wrappers such as statusWriter.
func innermost(w http.ResponseWriter) http.ResponseWriter {
	for range 16 { // wrappers do not nest deeper; the bound guards a cycle
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	return w
}

// bodyTooLarge is the error of a request body over limit: 400
// body_too_large, as Triton answers it (qa/L0_http
// http_input_size_limit_test.py), with Triton's words for a raw body
// (Inference-Header-Content-Length: 0), a JSON one and a decompressed one
// (clients and its QA match on them), then how to raise the limit here.
// length is the body's size, or -1 where it is only known to be over.
func bodyTooLarge(r *http.Request, length, limit int64, decompressed bool) error {
	size := "over " + strconv.FormatInt(limit, 10)
	if length >= 0 {
		size = strconv.FormatInt(length, 10)
	}
	var msg string
	switch {
	case decompressed:
		msg = fmt.Sprintf("Decompressed data size exceeds the maximum allowed value of %d bytes.", limit)
	case strings.TrimSpace(r.Header.Get(headerLength)) == "0":
		msg = fmt.Sprintf("Raw input has a byte_size (%s bytes) that exceeds the maximum allowed value of %d bytes.", size, limit)
	default:
		msg = fmt.Sprintf("request JSON size of %s bytes exceeds the maximum allowed input size of %d bytes.", size, limit)
	}
	return apierr.Errorf(apierr.KindInvalid, reasonBodyTooLarge, "%s Use --http-max-input-size to increase the limit.", msg)
}

// AnswerBodyTooLarge answers a request whose Content-Length is over the
// KServe HTTP port's limit as the handler answers one it finds too large
// while reading: 400 body_too_large in Triton's words. It is the
// admission.TooLarge of that port.
func AnswerBodyTooLarge(w http.ResponseWriter, r *http.Request, length, limit int64) {
	err := bodyTooLarge(r, length, limit, false)
	code, reason := statusOf(err)
	apierr.WriteError(w, code, reason, err.Error())
}

// bodyReadError classifies an error met while reading (and perhaps
// decompressing, enc != "") the body.
func bodyReadError(r *http.Request, err error, limit int64, enc string) error {
	if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return bodyTooLarge(r, -1, min(mbe.Limit, limit), false) // the listener's limit may be the smaller
	}
	if errors.Is(err, admission.ErrOverloaded) {
		return &apierr.Error{Kind: apierr.KindUnavailable, Reason: reasonOverloaded, Msg: "read request body", Err: err}
	}
	if enc != "" {
		return &apierr.Error{Kind: apierr.KindInvalid, Reason: reasonInvalidRequest, Msg: "decompress request body", Err: err}
	}
	return &apierr.Error{Kind: apierr.KindInvalid, Reason: reasonInvalidRequest, Msg: "read request body", Err: err}
}

// decodeInfer splits the body by the Inference-Header-Content-Length
// header (hdr, "" when absent) and decodes it. A length of 0 is raw body
// mode, which needs the model's metadata.
func (h *Handler) decodeInfer(ctx context.Context, hdr, name, version string, body []byte) (*inferBody, error) {
	if hdr == "" {
		return decodeInferBody(body, -1)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(hdr), 10, 64)
	if err != nil || n < 0 {
		return nil, invalidf(reasonInvalidHeader, "%s %q is not a non-negative integer", headerLength, hdr)
	}
	if n > int64(len(body)) {
		return nil, invalidf(reasonInvalidHeader, "%s is %d but the body has only %d bytes", headerLength, n, len(body))
	}
	if n > 0 {
		return decodeInferBody(body, int(n))
	}
	md, err := h.models.Metadata(ctx, name, version)
	if err != nil {
		return nil, err
	}
	if md == nil {
		return nil, apierr.Errorf(apierr.KindInternal, reasonInternal, "model '%s' has no metadata", name)
	}
	cfg, err := h.models.Config(ctx, name, version)
	if err != nil {
		return nil, err
	}
	return decodeRawBody(md, cfg.GetMaxBatchSize() > 0, body)
}

// decodeInferBody decodes a request whose first headerLen bytes are JSON
// and whose remainder is binary tensor data. headerLen -1 means the whole
// body is JSON.
func decodeInferBody(body []byte, headerLen int) (*inferBody, error) {
	return new(decoder).decodeBody(body, headerLen)
}

// decodeBody is decodeInferBody with d, which is new or was reset.
func (d *decoder) decodeBody(body []byte, headerLen int) (*inferBody, error) {
	js, bin := body, []byte(nil)
	if headerLen >= 0 {
		js, bin = body[:headerLen], body[headerLen:]
	}
	ib, err := d.decode(js)
	if err != nil {
		return nil, err
	}
	if err := attachBinary(ib, bin, headerLen >= 0); err != nil {
		return nil, err
	}
	return ib, nil
}

// attachBinary hands out the binary section to the inputs that declared
// binary_data_size, in input order, and checks that the sizes fit the
// shapes and add up to the section exactly. Data aliases bin.
func attachBinary(ib *inferBody, bin []byte, hasHeader bool) error {
	off := int64(0)
	for i := range ib.req.Inputs {
		size := ib.binarySize[i]
		if size < 0 {
			continue
		}
		t := &ib.req.Inputs[i]
		if !hasHeader {
			return invalidf(reasonInvalidBinarySize, "input '%s' has %s but the request has no %s header", t.Name, paramBinaryDataSize, headerLength)
		}
		n, err := t.Shape.Elements()
		if err != nil { // checked by the decoder; kept for safety
			return invalidf(reasonInvalidShape, "input '%s': %v", t.Name, err)
		}
		if t.DataType != infer.Bytes {
			if need := int64(n) * int64(t.DataType.Size()); size != need {
				return invalidf(reasonInvalidBinarySize, "input '%s': %s is %d but shape %s of %s needs %d bytes",
					t.Name, paramBinaryDataSize, size, t.Shape, t.DataType, need)
			}
		}
		if rest := int64(len(bin)) - off; size > rest {
			return invalidf(reasonInvalidBinarySize, "input '%s': %s is %d but only %d bytes of binary data remain",
				t.Name, paramBinaryDataSize, size, rest)
		}
		t.Data = bin[off : off+size : off+size]
		off += size
		if t.DataType == infer.Bytes {
			count, err := infer.CountBytesElements(t.Data)
			if err != nil {
				return invalidf(reasonInvalidBinarySize, "input '%s': %v", t.Name, err)
			}
			if count != n {
				return invalidf(reasonInvalidBinarySize, "input '%s': binary data holds %d BYTES elements but shape %s needs %d",
					t.Name, count, t.Shape, n)
			}
		}
	}
	if off != int64(len(bin)) {
		return invalidf(reasonInvalidBinarySize, "the body has %d bytes of binary data after the JSON header, but the inputs' %s values add up to %d",
			len(bin), paramBinaryDataSize, off)
	}
	return nil
}

// decodeRawBody builds the request of raw body mode: the whole body is the
// model's only input, at batch 1 for a batching model, and every output is
// binary. At most one variable dimension is allowed; its size follows from
// the body.
func decodeRawBody(md *modelrepo.Metadata, batching bool, body []byte) (*inferBody, error) {
	if len(md.Inputs) != 1 {
		// Triton's wording first: clients match on it.
		return nil, invalidf(reasonRawInput, "Raw request must only have 1 input (found 1) to be deduced but got %d inputs in '%s' model: a raw binary body (%s: 0) needs a model with exactly one input",
			len(md.Inputs), md.Name, headerLength)
	}
	spec := md.Inputs[0]
	if !spec.DataType.Valid() {
		return nil, apierr.Errorf(apierr.KindInternal, reasonInternal, "input '%s' of model '%s' has no valid datatype", spec.Name, md.Name)
	}
	shape := spec.Shape.Clone()
	if batching && len(shape) > 0 {
		shape[0] = 1
	}
	if spec.DataType == infer.Bytes {
		return rawBytesBody(spec, shape, body)
	}
	variable, known := -1, int64(1)
	for i, d := range shape {
		switch {
		case d < 0 && variable >= 0:
			return nil, invalidf(reasonRawInput, "The shape of the raw input '%s' can not be deduced because there are more than one variable-sized dimension: input '%s' has shape %s with more than one variable dimension; send a JSON header to give its shape",
				spec.Name, spec.Name, spec.Shape)
		case d < 0:
			variable = i
		default:
			known *= d
			if known > infer.MaxElements {
				return nil, invalidf(reasonInvalidShape, "input '%s': shape %s holds too many elements", spec.Name, spec.Shape)
			}
		}
	}
	if variable >= 0 {
		var total int64
		if spec.DataType == infer.Bytes {
			n, err := infer.CountBytesElements(body)
			if err != nil {
				return nil, invalidf(reasonInvalidBinarySize, "input '%s': %v", spec.Name, err)
			}
			total = int64(n)
		} else {
			size := int64(spec.DataType.Size())
			if int64(len(body))%size != 0 {
				return nil, invalidf(reasonInvalidBinarySize, "input '%s': raw body of %d bytes is not a whole number of %s elements",
					spec.Name, len(body), spec.DataType)
			}
			total = int64(len(body)) / size
		}
		switch {
		case known == 0 && total == 0:
			shape[variable] = 0
		case known == 0 || total%known != 0:
			return nil, invalidf(reasonInvalidBinarySize, "input '%s': %d elements in the raw body do not fit shape %s", spec.Name, total, spec.Shape)
		default:
			shape[variable] = total / known
		}
	}
	t := infer.Tensor{Name: spec.Name, DataType: spec.DataType, Shape: shape, Data: body}
	if err := t.CheckSize(); err != nil {
		return nil, invalidf(reasonInvalidBinarySize, "input '%s': raw body of %d bytes does not fit shape %s: %v", spec.Name, len(body), shape, err)
	}
	return &inferBody{
		req:          infer.Request{Inputs: []infer.Tensor{t}},
		binarySize:   []int64{int64(len(body))},
		binaryOutput: true,
	}, nil
}

// rawBytesBody is the raw body of a BYTES input: as Triton reads it, the
// whole body is one element, without a length prefix, so the input's
// dims must hold exactly one element. A variable dimension is refused, as
// Triton refuses it (qa/L0_http test_byte_too_many_elements: dims [-1]),
// since the body cannot say how many elements it holds. shape has the
// batch dimension, if any, already set to 1.
func rawBytesBody(spec infer.TensorSpec, shape infer.Shape, body []byte) (*inferBody, error) {
	for _, d := range shape {
		if d != 1 {
			// Triton's words first: clients match on them.
			return nil, invalidf(reasonRawInput, "For BYTE datatype raw input '%s', the model must have input shape [1]: a raw binary body is one BYTES element, but input '%s' has shape %s; send a JSON header to give its shape",
				spec.Name, spec.Name, spec.Shape)
		}
	}
	if len(body) > math.MaxUint32 {
		return nil, invalidf(reasonInvalidBinarySize, "input '%s': a BYTES element is at most 4 GiB", spec.Name)
	}
	t := infer.Tensor{Name: spec.Name, DataType: infer.Bytes, Shape: shape, Data: infer.AppendBytesElement(make([]byte, 0, 4+len(body)), body)}
	return &inferBody{
		req:          infer.Request{Inputs: []infer.Tensor{t}},
		binarySize:   []int64{int64(len(body))},
		binaryOutput: true,
	}, nil
}

// writeInferResponse encodes resp, putting the outputs the client asked to
// get in binary after the JSON.
func (h *Handler) writeInferResponse(w http.ResponseWriter, r *http.Request, requestID string, ib *inferBody, resp *infer.Response) {
	if resp.ID == "" {
		resp.ID = ib.req.ID
	}
	if resp.Model == "" {
		resp.Model = ib.req.Model
	}
	var small [smallSet]bool
	isBinary := ib.binaryOutputs(small[:0], resp.Outputs)
	binBytes := 0
	for i := range resp.Outputs {
		if isBinary[i] {
			binBytes += len(resp.Outputs[i].Data)
		}
	}
	enc := ""
	if h.opts.CompressMinBytes >= 0 {
		enc = acceptedEncoding(r.Header.Get("Accept-Encoding"))
	}
	// The response is charged to the in-flight budget before it is built:
	// a model's output can be far larger than its request (issue 22).
	charge := responseBytes(resp, isBinary, enc != "")
	if err := h.opts.Budget.ReserveResponse(charge); err != nil {
		h.writeError(w, r, requestID, err)
		return
	}
	defer h.opts.Budget.Release(charge)
	bufp := h.getBuf()
	defer h.putBuf(bufp)
	js, err := appendInferResponse((*bufp)[:0], resp, isBinary)
	if err != nil {
		h.writeError(w, r, requestID, err)
		return
	}
	*bufp = js
	hdr := w.Header()
	anyBinary := false
	for _, b := range isBinary {
		anyBinary = anyBinary || b
	}
	if anyBinary {
		hdr.Set("Content-Type", "application/octet-stream")
		hdr.Set(headerLength, itoa(len(js)))
	} else {
		hdr["Content-Type"] = contentTypeJSON // canonical key, shared value: no allocation
	}
	if enc != "" && zpool.ShouldCompress(len(js)+binBytes, h.opts.CompressMinBytes) {
		h.writeCompressed(w, enc, js, resp.Outputs, isBinary)
		return
	}
	hdr.Set("Content-Length", itoa(len(js)+binBytes))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(js); err != nil {
		return // the client went away; nothing left to tell it
	}
	for i := range resp.Outputs {
		if isBinary[i] {
			if _, err := w.Write(resp.Outputs[i].Data); err != nil {
				return
			}
		}
	}
}

// contentTypeJSON is the Content-Type value of JSON answers. Header
// values are only read or replaced, never written in place, and a value
// slice of capacity one makes Header.Add copy it, so it is shared.
var contentTypeJSON = []string{"application/json"}

// acceptedEncoding picks the response compression a client accepts, as
// Triton's HTTP endpoint offers it: gzip, else deflate (zlib), else none.
// An encoding with q=0 is refused.
func acceptedEncoding(header string) string {
	if header == "" {
		return ""
	}
	accepted := map[string]bool{}
	for part := range strings.SplitSeq(header, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if q, ok := strings.CutPrefix(strings.ReplaceAll(params, " ", ""), "q="); ok {
			if f, err := strconv.ParseFloat(q, 64); err == nil && f == 0 {
				continue
			}
		}
		accepted[strings.ToLower(strings.TrimSpace(name))] = true
	}
	for _, enc := range []string{"gzip", "deflate"} {
		if accepted[enc] {
			return enc
		}
	}
	return ""
}

// writeCompressed answers with the JSON and the binary outputs compressed
// as one body; Inference-Header-Content-Length stays the length of the
// uncompressed JSON, as in Triton. The compressor and the buffer the
// compressed body is written to come from pools.
func (h *Handler) writeCompressed(w http.ResponseWriter, enc string, js []byte, outs []infer.Tensor, isBinary []bool) {
	outp := h.getBuf()
	defer h.putBuf(outp)
	out := appendWriter{b: (*outp)[:0]}
	zw := zpool.Get(enc, &out)
	_, _ = zw.Write(js) // writes to an appendWriter do not fail
	for i := range outs {
		if isBinary[i] {
			_, _ = zw.Write(outs[i].Data)
		}
	}
	_ = zw.Close()
	zpool.Put(zw)
	*outp = out.b
	hdr := w.Header()
	hdr.Set("Content-Encoding", enc)
	hdr.Add("Vary", "Accept-Encoding")
	hdr.Set("Content-Length", itoa(len(out.b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out.b)
}

// appendWriter is an io.Writer appending to a byte slice.
type appendWriter struct{ b []byte }

func (a *appendWriter) Write(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}

// forwardHeaders adds the headers whose lower-case names match re to the
// request parameters, as strings (several values joined by ","), unless
// the body set a parameter of that name. A matching header named as a
// parameter Triton reserves is refused, as Triton does. Values keep their
// trailing whitespace as Triton's do (see RecordHeads).
func forwardHeaders(ctx context.Context, req *infer.Request, hdr http.Header, re *regexp.Regexp) error {
	for name, vals := range hdr {
		key := strings.ToLower(name)
		if !re.MatchString(key) {
			continue
		}
		if infer.ReservedParameter(key) {
			return infer.ReservedHeaderError(key)
		}
		if _, set := req.Parameters[key]; set {
			continue
		}
		if req.Parameters == nil {
			req.Parameters = infer.Parameters{}
		}
		req.Parameters[key] = strings.Join(rawHeaderValues(ctx, name, vals), ",")
	}
	return nil
}
