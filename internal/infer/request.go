package infer

import (
	"strings"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// Parameters are request, tensor or response parameters. Values are one of
// string, bool, int64, uint64 or float64.
type Parameters map[string]any

// RequestedOutput names an output the client wants back.
type RequestedOutput struct {
	Name       string
	Parameters Parameters
}

// Request is one inference request, independent of the protocol it came in.
type Request struct {
	ID         string
	Model      string
	Version    string // empty means the server picks (latest ready)
	Inputs     []Tensor
	Outputs    []RequestedOutput // empty means all outputs
	Parameters Parameters
}

// Input returns the input named name, or nil.
func (r *Request) Input(name string) *Tensor {
	for i := range r.Inputs {
		if r.Inputs[i].Name == name {
			return &r.Inputs[i]
		}
	}
	return nil
}

// Response is the answer to a Request.
type Response struct {
	ID         string
	Model      string
	Version    string
	Outputs    []Tensor
	Parameters Parameters
}

// reservedParameters are the request parameter names Triton keeps for
// itself (its parameters extension): a client sets them only through the
// protocol fields that mean them, never as custom parameters.
var reservedParameters = map[string]bool{
	"sequence_id": true, "sequence_start": true, "sequence_end": true,
	"priority": true, "timeout": true, "headers": true, "binary_data_output": true,
}

// ReservedParameter reports whether a request parameter name is one Triton
// reserves: the names above and every name starting with "triton_". A
// header forwarded as a parameter may not take such a name
// (qa/L0_parameters test_headers_reserved_rejected).
func ReservedParameter(name string) bool {
	return reservedParameters[name] || strings.HasPrefix(name, "triton_")
}

// ReservedHeaderError refuses a forwarded header (HTTP header or gRPC
// metadata key) that names a reserved parameter, with Triton's phrase
// "reserved for Triton usage", which its QA matches; 400 /
// INVALID_ARGUMENT, reason invalid_parameter.
func ReservedHeaderError(key string) *apierr.Error {
	return apierr.Errorf(apierr.KindInvalid, apierr.ReasonInvalidParameter, "header '%s': parameter keys starting with 'triton_', and the names sequence_id, sequence_start, sequence_end, priority, timeout, headers and binary_data_output, are reserved for Triton usage and cannot be forwarded as parameters", key)
}
