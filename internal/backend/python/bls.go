package python

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/infer"
)

// ReasonBLSDeadlock is the reason of a BLS request refused because it
// would wait for a model instance that waits for it.
const ReasonBLSDeadlock = "bls_deadlock"

// SetServer gives the backend the server its models' BLS requests
// (pb_utils.InferenceRequest(...).exec()) run on.
func (b *Backend) SetServer(s backend.Server) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.server = s
}

func (b *Backend) serverOf() backend.Server {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.server
}

// blsHeader is the JSON part of an opBLS payload: what the model's
// InferenceRequest names besides its input tensors.
type blsHeader struct {
	Model         string         `json:"model_name"`
	Version       int64          `json:"model_version"` // -1: the latest ready
	Outputs       []string       `json:"requested_output_names"`
	RequestID     string         `json:"request_id"`
	CorrelationID any            `json:"correlation_id"` // 0 / "" = none
	Priority      uint64         `json:"priority"`
	Timeout       uint64         `json:"timeout"` // microseconds; 0 = none
	Parameters    map[string]any `json:"parameters"`
	// Decoupled: exec(decoupled=True); answered by opBLSStream frames,
	// one per response, the last flagged final.
	Decoupled bool `json:"decoupled"`
}

// decodeBLS reads an opBLS payload:
//
//	u32 JSON length, the blsHeader JSON, zero padding to 8,
//	u32 input count, inputs as tensors (as in requests)
func decodeBLS(payload []byte) (blsHeader, []infer.Tensor, error) {
	var h blsHeader
	d := &decoder{b: payload}
	n, err := d.u32()
	if err != nil {
		return h, nil, err
	}
	js, err := d.take(uint64(n))
	if err != nil {
		return h, nil, err
	}
	if err := json.Unmarshal(js, &h); err != nil {
		return h, nil, fmt.Errorf("request header: %w", err)
	}
	if err := d.pad(); err != nil {
		return h, nil, err
	}
	count, err := d.u32()
	if err != nil {
		return h, nil, err
	}
	if uint64(count)*12 > uint64(len(payload)-d.off) {
		return h, nil, errTruncated
	}
	ins := make([]infer.Tensor, count)
	for i := range ins {
		if ins[i], err = d.tensor(); err != nil {
			return h, nil, err
		}
	}
	if d.off != len(payload) {
		return h, nil, fmt.Errorf("%d bytes follow the last input", len(payload)-d.off)
	}
	return h, ins, nil
}

// request turns a BLS header and its inputs into a server request.
func (h *blsHeader) request(ins []infer.Tensor) *infer.Request {
	req := &infer.Request{ID: h.RequestID, Model: h.Model, Inputs: ins}
	if h.Version > 0 {
		req.Version = fmt.Sprint(h.Version)
	}
	for _, o := range h.Outputs {
		req.Outputs = append(req.Outputs, infer.RequestedOutput{Name: o})
	}
	params := infer.Parameters{}
	for k, v := range h.Parameters {
		switch x := v.(type) {
		case float64:
			if x == float64(int64(x)) {
				params[k] = int64(x)
			} else {
				params[k] = x
			}
		case string, bool:
			params[k] = x
		}
	}
	switch id := h.CorrelationID.(type) {
	case float64:
		if id != 0 {
			params["sequence_id"] = uint64(id)
		}
	case string:
		if id != "" {
			params["sequence_id"] = id
		}
	}
	if h.Priority > 0 {
		params["priority"] = int64(h.Priority)
	}
	if h.Timeout > 0 {
		params["timeout"] = int64(h.Timeout)
	}
	if len(params) > 0 {
		req.Parameters = params
	}
	return req
}

type callChainKey struct{}

// withCaller records that a request runs on behalf of a BLS call made by
// model, after the calls that led to it.
func withCaller(ctx context.Context, chain []string) context.Context {
	return context.WithValue(ctx, callChainKey{}, chain)
}

// callChain returns the models waiting, through BLS calls, for the
// request running under ctx.
func callChain(ctx context.Context) []string {
	c, _ := ctx.Value(callChainKey{}).([]string)
	return c
}

// serveBLS runs one BLS request a worker of model sent and answers it.
// The request runs under the context of the execute call the worker is
// busy with (its call chain: the models waiting for it); a request to a
// model in the chain, the caller included, is refused: it would wait for
// an instance that waits for it.
func (b *Backend) serveBLS(model string, w *worker, f frame) {
	h, ins, err := decodeBLS(f.payload)
	var resp *infer.Response
	if err == nil {
		chain := append(slices.Clone(callChain(w.execContext())), model)
		switch srv := b.serverOf(); {
		case slices.Contains(chain, h.Model):
			err = apierr.Errorf(apierr.KindUnavailable, ReasonBLSDeadlock,
				"BLS request from model '%s' to model '%s' refused: it would wait for itself (call chain %s)",
				model, h.Model, strings.Join(append(chain, h.Model), " -> "))
		case srv == nil:
			err = errors.New("the server takes no BLS requests")
		default:
			ctx, cancel := context.WithCancel(withCaller(context.Background(), chain))
			go func() {
				select {
				case <-w.exited:
					cancel()
				case <-ctx.Done():
				}
			}()
			if h.Decoupled {
				b.serveBLSStream(ctx, srv, w, f.id, h.request(ins))
				cancel()
				return
			}
			resp, err = srv.Infer(ctx, h.request(ins))
			cancel()
		}
	} else {
		err = fmt.Errorf("malformed BLS request: %w", err)
	}
	if err != nil && h.Decoupled {
		_ = w.sendAnswer(opBLSStream, f.id, func(fw *frameWriter) error {
			return fw.blsStreamed(nil, err, true)
		})
		return
	}
	_ = w.sendAnswer(opBLSResult, f.id, func(fw *frameWriter) error {
		return fw.blsResponse(resp, err)
	})
}

// serveBLSStream runs a decoupled BLS request (exec(decoupled=True)) and
// sends the worker each of its responses as it comes, in an opBLSStream
// frame with the request's id; the last is flagged final (a request that
// fails, before or between responses, ends with its error, final). A
// model that is not decoupled answers with its one response, final.
func (b *Backend) serveBLSStream(ctx context.Context, srv backend.Server, w *worker, id uint64, req *infer.Request) {
	ss, ok := srv.(backend.StreamServer)
	if !ok {
		_ = w.sendAnswer(opBLSStream, id, func(fw *frameWriter) error {
			return fw.blsStreamed(nil, errors.New("the server takes no decoupled BLS requests"), true)
		})
		return
	}
	final := false
	err := ss.InferStream(ctx, req, func(resp *infer.Response, rerr error, last bool) error {
		final = last
		return w.sendAnswer(opBLSStream, id, func(fw *frameWriter) error {
			return fw.blsStreamed(resp, rerr, last)
		})
	})
	if !final {
		if err == nil {
			err = errors.New("the request ended without its final response")
		}
		_ = w.sendAnswer(opBLSStream, id, func(fw *frameWriter) error {
			return fw.blsStreamed(nil, err, true)
		})
	}
}

// blsStreamed writes an opBLSStream payload: u8 final (1 on the last
// frame of the request), then a response as in opBLSResult; with neither
// a response nor an error (the final flag alone) a response without
// outputs.
func (w *frameWriter) blsStreamed(resp *infer.Response, err error, final bool) error {
	w.u8(boolByte(final))
	if resp == nil && err == nil {
		resp = &infer.Response{}
	}
	return w.blsResponse(resp, err)
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// blsResponse writes an opBLSResult payload: a response as in opResult
// (u8 status, then the outputs or the error code and message).
func (w *frameWriter) blsResponse(resp *infer.Response, err error) error {
	if err == nil && resp != nil {
		w.u8(respOK)
		w.u32(uint32(len(resp.Outputs)))
		for i := range resp.Outputs {
			if err := w.tensor(&resp.Outputs[i]); err != nil {
				return err
			}
		}
		return nil
	}
	if err == nil {
		err = errors.New("no response")
	}
	msg := err.Error()
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	w.u8(respError)
	w.u8(codeOfError(err))
	w.u32(uint32(len(msg)))
	w.bytes([]byte(msg))
	return nil
}

// codeOfError maps an error to the TritonError code a model sees.
func codeOfError(err error) byte {
	ie, ok := errors.AsType[*apierr.Error](err)
	if !ok {
		return codeInternal
	}
	switch ie.Kind {
	case apierr.KindInvalid:
		return codeInvalidArg
	case apierr.KindNotFound:
		return codeNotFound
	case apierr.KindUnavailable, apierr.KindResourceExhausted, apierr.KindTimeout:
		return codeUnavailable
	case apierr.KindUnsupported:
		return codeUnsupported
	case apierr.KindConflict:
		return codeAlreadyExists
	case apierr.KindInternal:
		return codeInternal
	default:
		return codeUnknown
	}
}
