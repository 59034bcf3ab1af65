package infer

// Sender receives the responses of one request to a decoupled model
// (Triton's model_transaction_policy { decoupled: true }), which may
// answer a request with any number of responses, zero included, and
// marks the last with the final flag. Each call carries one response
// (outputs, or the error the model answered with) or, with outputs and
// err both nil and final set, only the end of the responses. The
// executor calls it from one goroutine at a time per request, in the
// order the model sent them, and calls it with final set exactly once,
// last, unless it fails the request as a whole (then it does not call it
// again). The outputs become the receiver's. A non-nil return tells the
// executor that nobody waits for more responses to this request; it
// drops the rest.
type Sender func(outputs []Tensor, err error, final bool) error
