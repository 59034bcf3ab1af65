package infer

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
