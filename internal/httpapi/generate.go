package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/jsonenc"
	"github.com/sluice-ml/sluice/internal/modelrepo"
)

// Reasons of the generate extension's errors.
const (
	reasonInvalidGenerate = "invalid_generate_request"
	reasonManyResponses   = "multiple_responses"
)

// maxGenerateDepth bounds the nesting of a generate input's JSON arrays
// (a tensor's rank).
const maxGenerateDepth = 64

// handleGenerate serves Triton's generate extension: POST
// /v2/models/<m>[/versions/<v>]/generate with a JSON object whose keys
// name the model's inputs (a scalar or a nested array each; the shape is
// the nesting's, [1] for a scalar, with a batch dimension of 1 added for
// a batching model) and an optional "parameters" object (the request
// parameters), answered by one JSON object: model_name, model_version and
// each output by name (a single element as a scalar, else a flat array).
// A decoupled model must send exactly one response here; generate_stream
// takes any number.
func (h *Handler) handleGenerate(w http.ResponseWriter, r *http.Request) {
	h.generate(w, r, false)
}

// handleGenerateStream serves generate_stream: the same request, answered
// as Server-Sent Events, one "data: {...}" event per response (a decoupled
// model's responses as the model sends them), and an event {"error":
// "..."} for an error response. Errors before the first response are
// answered as on /generate.
func (h *Handler) handleGenerateStream(w http.ResponseWriter, r *http.Request) {
	h.generate(w, r, true)
}

// generate decodes a generate request and answers it as one JSON object
// or, with stream, as an event stream.
func (h *Handler) generate(w http.ResponseWriter, r *http.Request, stream bool) {
	ctx := r.Context()
	name, version, requestID, body, ok := h.modelRequest(w, r)
	if !ok {
		return
	}
	req, err := h.decodeGenerate(ctx, name, version, body)
	if err != nil {
		h.writeError(w, r, requestID, err)
		return
	}
	req.Model, req.Version = name, version
	if h.opts.HeaderForward != nil {
		if err := forwardHeaders(ctx, req, r.Header, h.opts.HeaderForward); err != nil {
			h.writeError(w, r, requestID, err)
			return
		}
	}
	st, ok := h.models.(modelrepo.Streamer)
	if !ok {
		st = unaryStreamer{h.models}
	}
	if stream {
		h.generateStream(w, r, requestID, st, req)
	} else {
		h.generateOne(w, r, requestID, st, req)
	}
}

// generateOne answers generate: the model's one response as a JSON
// object; more than one response, or none, is an error.
func (h *Handler) generateOne(w http.ResponseWriter, r *http.Request, requestID string, st modelrepo.Streamer, req *infer.Request) {
	ctx, name := r.Context(), req.Model
	var got *infer.Response
	var gotErr error
	n := 0
	err := st.InferStream(ctx, req, func(resp *infer.Response, err error, _ bool) error {
		if resp == nil && err == nil {
			return nil // the final flag alone
		}
		n++
		got, gotErr = resp, err
		return nil
	})
	switch {
	case err != nil:
	case n > 1:
		err = apierr.Errorf(apierr.KindInvalid, reasonManyResponses, "model '%s' sent %d responses to one generate request; use generate_stream", name, n)
	case n == 0:
		err = apierr.Errorf(apierr.KindInternal, reasonInternal, "model '%s' sent no response", name)
	case gotErr != nil:
		err = gotErr
	}
	if err != nil {
		h.writeError(w, r, requestID, err)
		return
	}
	js, err := appendGenerateResponse(nil, got)
	if err != nil {
		h.writeError(w, r, requestID, err)
		return
	}
	writeJSON(w, js)
}

// generateStream answers generate_stream: each response as a
// Server-Sent Event as the model sends it, an error after the first as an
// error event.
func (h *Handler) generateStream(w http.ResponseWriter, r *http.Request, requestID string, st modelrepo.Streamer, req *infer.Request) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	started := false
	err := st.InferStream(ctx, req, func(resp *infer.Response, err error, _ bool) error {
		if resp == nil && err == nil {
			return nil
		}
		var js []byte
		if err == nil {
			js, err = appendGenerateResponse(nil, resp)
		}
		if err != nil {
			js = []byte(`{"error":`)
			js = jsonenc.AppendString(js, err.Error())
			js = append(js, '}')
		}
		if !started {
			started = true
			hdr := w.Header()
			hdr.Set("Content-Type", "text/event-stream")
			hdr.Set("Cache-Control", "no-cache")
			w.WriteHeader(http.StatusOK)
		}
		if _, err := w.Write(append(append([]byte("data: "), js...), "\n\n"...)); err != nil {
			return err
		}
		return rc.Flush()
	})
	switch {
	case err == nil && !started:
		// No response at all: an empty event stream.
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
	case err != nil && !started:
		h.writeError(w, r, requestID, err)
	case err != nil && ctx.Err() == nil:
		code, _ := apierr.HTTPStatus(err)
		if code >= 500 {
			h.logger.Error("generate_stream failed", "request_id", requestID, "err", err)
		}
		js := jsonenc.AppendString([]byte(`data: {"error":`), err.Error())
		_, _ = w.Write(append(js, "}\n\n"...)) //nolint:gosec // G705: a text/event-stream of JSON events with the error escaped, not HTML
	}
}

// unaryStreamer answers InferStream with Infer, for Models that do not
// stream.
type unaryStreamer struct{ m modelrepo.Models }

func (u unaryStreamer) InferStream(ctx context.Context, req *infer.Request, send modelrepo.StreamSend) error {
	resp, err := u.m.Infer(ctx, req)
	if err != nil {
		return err
	}
	return send(resp, nil, true)
}

// decodeGenerate turns a generate request into an inference request: each
// key but "parameters" is an input of the model, its datatype the
// model's.
func (h *Handler) decodeGenerate(ctx context.Context, name, version string, body []byte) (*infer.Request, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var fields map[string]json.RawMessage
	if err := dec.Decode(&fields); err != nil || fields == nil {
		msg := "the body must be a JSON object"
		if err != nil {
			msg += ": " + err.Error()
		}
		return nil, invalidf(reasonInvalidGenerate, "%s", msg)
	}
	if dec.More() {
		return nil, invalidf(reasonInvalidGenerate, "the body holds more than one JSON value")
	}
	md, err := h.models.Metadata(ctx, name, version)
	if err != nil {
		return nil, err
	}
	cfg, err := h.models.Config(ctx, name, version)
	if err != nil {
		return nil, err
	}
	batching := cfg.GetMaxBatchSize() > 0
	type input struct {
		Name     string            `json:"name"`
		Datatype string            `json:"datatype"`
		Shape    []int64           `json:"shape"`
		Data     []json.RawMessage `json:"data"`
	}
	kreq := struct {
		Inputs     []input         `json:"inputs"`
		Parameters json.RawMessage `json:"parameters,omitempty"`
	}{Inputs: []input{}}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		v := fields[k]
		if k == "parameters" {
			kreq.Parameters = v
			continue
		}
		i := slices.IndexFunc(md.Inputs, func(s infer.TensorSpec) bool { return s.Name == k })
		if i < 0 {
			return nil, invalidf(modelrepo.ReasonUnknownInput, "input '%s' is not an input of model '%s' (a generate request's keys are the model's inputs and \"parameters\")", k, name)
		}
		spec := md.Inputs[i]
		var shape []int64
		var data []json.RawMessage
		if err := flattenJSON(v, 0, &shape, &data, true); err != nil {
			return nil, invalidf(reasonInvalidGenerate, "input '%s': %v", k, err)
		}
		if len(shape) == 0 {
			shape = []int64{1}
		}
		if batching && len(shape) == len(spec.Shape)-1 {
			shape = append([]int64{1}, shape...)
		}
		kreq.Inputs = append(kreq.Inputs, input{Name: k, Datatype: spec.DataType.String(), Shape: shape, Data: data})
	}
	js, err := json.Marshal(kreq)
	if err != nil {
		return nil, invalidf(reasonInvalidGenerate, "%v", err)
	}
	ib, err := decodeInferBody(js, -1)
	if err != nil {
		return nil, err
	}
	return &ib.req, nil
}

// flattenJSON reads a scalar or a nested array of scalars into data,
// recording the array's shape (first visit of each depth sets it; later
// arrays at that depth must agree).
func flattenJSON(v json.RawMessage, depth int, shape *[]int64, data *[]json.RawMessage, first bool) error {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || v[0] != '[' {
		if depth < len(*shape) {
			return errors.New("arrays nest unevenly")
		}
		if len(v) > 0 && (v[0] == '{' || string(v) == "null") {
			return errors.New("values must be numbers, booleans or strings")
		}
		*data = append(*data, v)
		return nil
	}
	if depth >= maxGenerateDepth {
		return errors.New("arrays nest too deep")
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(v, &elems); err != nil {
		return err
	}
	switch {
	case first && depth == len(*shape):
		*shape = append(*shape, int64(len(elems)))
	case depth >= len(*shape) || (*shape)[depth] != int64(len(elems)):
		return errors.New("arrays nest unevenly")
	}
	for i, e := range elems {
		if err := flattenJSON(e, depth+1, shape, data, first && i == 0); err != nil {
			return err
		}
	}
	return nil
}

// appendGenerateResponse appends the generate extension's JSON answer:
// model_name, model_version, and each output by name, one element as a
// scalar, more as a flat array.
func appendGenerateResponse(dst []byte, resp *infer.Response) ([]byte, error) {
	dst = append(dst, `{"model_name":`...)
	dst = jsonenc.AppendString(dst, resp.Model)
	dst = append(dst, `,"model_version":`...)
	dst = jsonenc.AppendString(dst, resp.Version)
	for i := range resp.Outputs {
		t := &resp.Outputs[i]
		dst = append(dst, ',')
		dst = jsonenc.AppendString(dst, t.Name)
		dst = append(dst, ':')
		start := len(dst)
		var err error
		dst, err = appendTensorData(dst, t)
		if err != nil {
			return nil, err
		}
		if n, err := t.Shape.Elements(); err == nil && n == 1 {
			// [x] -> x
			elem := strings.TrimSpace(string(dst[start+1 : len(dst)-1]))
			dst = append(dst[:start], elem...)
		}
	}
	return append(dst, '}'), nil
}
