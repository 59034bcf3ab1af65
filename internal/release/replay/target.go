package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/kserve"
	"github.com/sluice-ml/sluice/internal/release/record"
)

// Target answers recorded requests: a KServe v2 endpoint (gRPC or HTTP)
// or a Sluice inference service.
type Target interface {
	// Replay sends rec's request and returns the answer as an arm. A
	// failed call is an answer too: the arm's Status and Reason say what
	// went wrong. Replay returns an error only when ctx ended before the
	// call finished, together with an arm naming the model and version
	// it called (the Replayer records a call whose own deadline passed as
	// a 504 and drops one stopped by the end of the replay). The Replayer
	// sets the arm's LatencyMS. Replay is called concurrently and must
	// not modify rec.
	Replay(ctx context.Context, rec *record.Record) (record.Arm, error)
}

// Reasons of the arms a replay produces itself.
const (
	// ReasonNoInputs: the record holds no model inputs to send to a
	// KServe endpoint (for example, its primary request failed before
	// the model call).
	ReasonNoInputs = "replay_no_inputs"
	// ReasonNoModel: neither the target nor the record's primary arm
	// names a model.
	ReasonNoModel = "replay_no_model"
	// ReasonBadInput: a recorded input cannot be converted to a tensor.
	ReasonBadInput = "replay_bad_input"
)

// DefaultMaxResponseBytes bounds the body of an HTTP answer.
const DefaultMaxResponseBytes = 64 << 20

// Model names the model a KServe target sends requests to. Empty fields
// are taken from each record's primary arm.
type Model struct {
	Name    string
	Version string
}

func (m Model) pick(rec *record.Record) (name, version string) {
	name, version = m.Name, m.Version
	if name == "" {
		p := rec.Arms[record.ArmPrimary]
		name = p.Model
		if version == "" {
			version = p.Version
		}
	}
	return name, version
}

// failed returns an error arm.
func failed(model, version string, status int, reason string) record.Arm {
	return record.Arm{Model: model, Version: version, Status: status, Reason: reason}
}

// sendable returns the error arm explaining why rec cannot be sent to a
// KServe endpoint, or nil when it can.
func sendable(rec *record.Record, model, version string) *record.Arm {
	var a record.Arm
	switch {
	case model == "":
		a = failed(model, version, http.StatusBadRequest, ReasonNoModel)
	case len(rec.Inputs) == 0:
		a = failed(model, version, http.StatusBadRequest, ReasonNoInputs)
	default:
		return nil
	}
	return &a
}

// inputs converts rec's inputs, or returns the error arm explaining why
// they cannot be sent.
func inputs(rec *record.Record, model, version string) ([]infer.Tensor, *record.Arm) {
	if bad := sendable(rec, model, version); bad != nil {
		return nil, bad
	}
	out := make([]infer.Tensor, len(rec.Inputs))
	for i := range rec.Inputs {
		t, err := toInferTensor(&rec.Inputs[i])
		if err != nil {
			a := failed(model, version, http.StatusBadRequest, ReasonBadInput)
			return nil, &a
		}
		out[i] = t
	}
	return out, nil
}

// GRPCTarget sends each record's model inputs to a KServe v2 gRPC
// endpoint (a Sluice model server, Triton) with a kserve.Client.
type GRPCTarget struct {
	client *kserve.Client
	addr   string
	model  Model
}

// NewGRPCTarget returns a target calling the model server at addr
// (host:port). The caller owns client.
func NewGRPCTarget(client *kserve.Client, addr string, model Model) *GRPCTarget {
	return &GRPCTarget{client: client, addr: addr, model: model}
}

// Replay implements Target.
func (g *GRPCTarget) Replay(ctx context.Context, rec *record.Record) (record.Arm, error) {
	name, version := g.model.pick(rec)
	ins, bad := inputs(rec, name, version)
	if bad != nil {
		return *bad, nil
	}
	resp, err := g.client.Infer(ctx, g.addr, &infer.Request{ID: rec.RequestID, Model: name, Version: version, Inputs: ins})
	if err != nil {
		if ctx.Err() != nil || ownDeadline(ctx, err) {
			return failed(name, version, http.StatusGatewayTimeout, kserve.ReasonTimeout), context.Cause(ctx)
		}
		status, reason := apierr.HTTPStatus(err)
		return failed(name, version, status, reason), nil
	}
	a := record.Arm{Model: name, Version: version, Status: http.StatusOK, Outputs: outputMap(resp.Outputs)}
	if resp.Version != "" {
		a.Version = resp.Version
	}
	return a, nil
}

// HTTPOptions configure the HTTP targets.
type HTTPOptions struct {
	// Client sends the requests. Default: a client without a timeout (the
	// Replayer bounds each call).
	Client *http.Client
	// Header is added to every request, e.g. an Authorization header.
	Header http.Header
	// MaxResponseBytes bounds an answer's body. Default
	// DefaultMaxResponseBytes.
	MaxResponseBytes int64
}

func (o *HTTPOptions) defaults() {
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
}

// post sends body to u and returns the status and the body read (bounded).
// A transport failure comes back as an error arm; an ended ctx as err,
// with a timeout arm.
func (o *HTTPOptions) post(ctx context.Context, u string, body []byte, header http.Header, model, version string) (int, []byte, *record.Arm, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		a := failed(model, version, http.StatusBadRequest, ReasonBadInput)
		return 0, nil, &a, nil
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	for k, vs := range o.Header {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := o.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			a := failed(model, version, http.StatusGatewayTimeout, kserve.ReasonTimeout)
			return 0, nil, &a, context.Cause(ctx)
		}
		a := transportFailure(err, model, version)
		return 0, nil, &a, nil
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, o.MaxResponseBytes+1))
	if err != nil {
		if ctx.Err() != nil {
			a := failed(model, version, http.StatusGatewayTimeout, kserve.ReasonTimeout)
			return 0, nil, &a, context.Cause(ctx)
		}
		a := transportFailure(err, model, version)
		return 0, nil, &a, nil
	}
	if int64(len(data)) > o.MaxResponseBytes {
		a := failed(model, version, http.StatusBadGateway, kserve.ReasonBadResponse)
		return 0, nil, &a, nil
	}
	return resp.StatusCode, data, nil, nil
}

// ownDeadline reports whether err is a DeadlineExceeded answer to the
// call's own deadline. gRPC sends the deadline to the server, whose timer
// can end the call (with its own reason, such as "queue_timeout") just
// before the client's does; such an answer arrives after the deadline.
func ownDeadline(ctx context.Context, err error) bool {
	dl, ok := ctx.Deadline()
	return ok && grpcstatus.Code(err) == codes.DeadlineExceeded && !time.Now().Before(dl)
}

func transportFailure(err error, model, version string) record.Arm {
	if errors.Is(err, context.DeadlineExceeded) {
		return failed(model, version, http.StatusGatewayTimeout, kserve.ReasonTimeout)
	}
	return failed(model, version, http.StatusServiceUnavailable, kserve.ReasonUnavailable)
}

// errorArm reads an error answer: {"error": "…", "reason": "…"}, the
// reason (apierr.ParseError) defaulting to kserve.ReasonError. Statuses outside 400–599
// (a 2xx without a usable body, a 3xx) count as 502.
func errorArm(status int, body []byte, model, version string) record.Arm {
	_, reason, _ := apierr.ParseError(body)
	if reason == "" {
		reason = kserve.ReasonError
	}
	if status < 400 || status > 599 {
		status = http.StatusBadGateway
	}
	return failed(model, version, status, reason)
}

// HTTPTarget sends each record's model inputs, as recorded (KServe v2 JSON
// tensors), to POST {base}/v2/models/{model}[/versions/{version}]/infer.
type HTTPTarget struct {
	base  string
	model Model
	opts  HTTPOptions
}

// NewHTTPTarget returns a target calling the KServe v2 HTTP server at
// baseURL (http://host:port, optionally with a path prefix).
func NewHTTPTarget(baseURL string, model Model, opts HTTPOptions) (*HTTPTarget, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("kserve http target %q: want http(s)://host:port", baseURL)
	}
	opts.defaults()
	return &HTTPTarget{base: strings.TrimRight(baseURL, "/"), model: model, opts: opts}, nil
}

// v2Request is a KServe v2 JSON inference request.
type v2Request struct {
	ID     string          `json:"id,omitempty"`
	Inputs []record.Tensor `json:"inputs"`
}

// v2Response is a KServe v2 JSON inference answer.
type v2Response struct {
	ModelName    string     `json:"model_name"`
	ModelVersion string     `json:"model_version"`
	Outputs      []v2Output `json:"outputs"`
}

type v2Output struct {
	Name     string          `json:"name"`
	DataType string          `json:"datatype"`
	Shape    []int64         `json:"shape"`
	Data     json.RawMessage `json:"data"`
}

// Replay implements Target.
func (h *HTTPTarget) Replay(ctx context.Context, rec *record.Record) (record.Arm, error) {
	name, version := h.model.pick(rec)
	if bad := sendable(rec, name, version); bad != nil {
		return *bad, nil
	}
	u := h.base + "/v2/models/" + url.PathEscape(name)
	if version != "" {
		u += "/versions/" + url.PathEscape(version)
	}
	body, err := json.Marshal(v2Request{ID: rec.RequestID, Inputs: rec.Inputs})
	if err != nil {
		return failed(name, version, http.StatusBadRequest, ReasonBadInput), nil //nolint:nilerr // an input that cannot be sent is the record's answer, not a replay error
	}
	status, data, bad, err := h.opts.post(ctx, u+"/infer", body, http.Header{"X-Request-Id": {rec.RequestID}}, name, version)
	if err != nil || bad != nil {
		return derefArm(bad), err
	}
	if status != http.StatusOK {
		return errorArm(status, data, name, version), nil
	}
	a, ok := decodeV2Response(data, name, version, int(h.opts.MaxResponseBytes))
	if !ok {
		return failed(name, version, http.StatusBadGateway, kserve.ReasonBadResponse), nil
	}
	return a, nil
}

func derefArm(a *record.Arm) record.Arm {
	if a == nil {
		return record.Arm{}
	}
	return *a
}

// decodeV2Response reads a KServe v2 JSON answer into an arm. Outputs
// whose data are strings (BYTES) are left out; binary outputs are not
// requested and not read. ok is false for a malformed answer.
func decodeV2Response(data []byte, model, version string, limit int) (record.Arm, bool) {
	var r v2Response
	if err := json.Unmarshal(data, &r); err != nil {
		return record.Arm{}, false
	}
	a := record.Arm{Model: model, Version: version, Status: http.StatusOK, Outputs: make(map[string][]float64, len(r.Outputs))}
	if r.ModelVersion != "" {
		a.Version = r.ModelVersion
	}
	for _, o := range r.Outputs {
		if o.Name == "" {
			return record.Arm{}, false
		}
		if len(o.Data) == 0 {
			continue // binary data, or none
		}
		vals, ok, err := jsonValues(o.Data, o.DataType, limit)
		if err != nil {
			return record.Arm{}, false
		}
		if ok {
			a.Outputs[o.Name] = vals
		}
	}
	return a, true
}

// ServiceTarget posts each record's request body, with its recorded
// headers, to a Sluice inference service (the gateway's
// POST /v1/services/<name>:predict) and records the service's answer: its
// model, version, source and outputs, under the service's output names.
type ServiceTarget struct {
	url  string
	opts HTTPOptions
}

// NewServiceTarget returns a target posting to rawURL. A "{service}" in
// rawURL is replaced by each record's service name, so one replay can
// cover a recording of several services.
func NewServiceTarget(rawURL string, opts HTTPOptions) (*ServiceTarget, error) {
	u, err := url.Parse(strings.ReplaceAll(rawURL, "{service}", "x"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("service target %q: want http(s)://host:port/v1/services/NAME:predict", rawURL)
	}
	opts.defaults()
	return &ServiceTarget{url: rawURL, opts: opts}, nil
}

// serviceAnswer is the gateway's answer body.
type serviceAnswer struct {
	Model   string                     `json:"model"`
	Version string                     `json:"version"`
	Source  string                     `json:"source"`
	Outputs map[string]json.RawMessage `json:"outputs"`
}

// Replay implements Target. The request id travels as x-request-id, so
// the service's own logs and recordings carry the recorded id.
func (s *ServiceTarget) Replay(ctx context.Context, rec *record.Record) (record.Arm, error) {
	primary := rec.Arms[record.ArmPrimary]
	body, err := json.Marshal(rec.Request)
	if err != nil {
		return failed(primary.Model, "", http.StatusBadRequest, ReasonBadInput), nil //nolint:nilerr // a body that cannot be sent is the record's answer, not a replay error
	}
	if rec.Request == nil {
		body = []byte("{}")
	}
	h := make(http.Header, len(rec.Headers)+1)
	for k, v := range rec.Headers {
		h.Set(k, v)
	}
	h.Set("X-Request-Id", rec.RequestID)
	u := strings.ReplaceAll(s.url, "{service}", url.PathEscape(rec.Service))
	status, data, bad, err := s.opts.post(ctx, u, body, h, "", "")
	if err != nil || bad != nil {
		return derefArm(bad), err
	}
	if status != http.StatusOK {
		return errorArm(status, data, "", ""), nil
	}
	a, ok := decodeServiceAnswer(data, int(s.opts.MaxResponseBytes))
	if !ok {
		return failed("", "", http.StatusBadGateway, kserve.ReasonBadResponse), nil
	}
	return a, nil
}

// decodeServiceAnswer reads the gateway's answer: outputs are numbers or
// (nested) arrays of numbers; null is NaN. ok is false for a malformed
// answer.
func decodeServiceAnswer(data []byte, limit int) (record.Arm, bool) {
	var ans serviceAnswer
	if err := json.Unmarshal(data, &ans); err != nil {
		return record.Arm{}, false
	}
	a := record.Arm{
		Model: ans.Model, Version: ans.Version, Source: ans.Source, Status: http.StatusOK,
		Outputs: make(map[string][]float64, len(ans.Outputs)),
	}
	for name, raw := range ans.Outputs {
		if name == "" {
			return record.Arm{}, false
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 || raw[0] != '[' {
			raw = append(append([]byte{'['}, raw...), ']')
		}
		vals, ok, err := jsonValues(raw, "", limit)
		if err != nil || !ok {
			return record.Arm{}, false
		}
		a.Outputs[name] = vals
	}
	return a, true
}
