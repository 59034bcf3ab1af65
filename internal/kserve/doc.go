// Package kserve is a KServe v2 (Open Inference Protocol) gRPC client: the
// gateway uses it to call remote model servers, whether Sluice's own
// `sluice model-server` gRPC port or a Triton server, since both speak
// inference.GRPCInferenceService with Triton's field numbers.
//
// A Client keeps one HTTP/2 connection per endpoint address, opened on the
// first call and shared by all later ones; Forget closes the connection of
// an endpoint that a configuration reload removed. Calls never wait for a
// connection that is down (gRPC's WaitForReady is off): an endpoint that
// refuses connections fails the call at once, and reconnection goes on in
// the background with a short backoff, so the gateway's own health checks
// and outlier detection decide where traffic goes.
//
// Connections are plaintext HTTP/2 unless Options.TLS is set; then every
// connection of that Client is TLS (mTLS when the configuration presents
// a client certificate), so a caller that needs TLS for some endpoints
// and not others keeps one Client per TLS configuration. A server
// certificate that fails verification fails the call at once like a
// refused connection (IsConnectFailure), with the verification error in
// the message.
//
// Requests travel in raw_input_contents: infer.Tensor data already is in
// the KServe binary layout, so encoding copies no tensor bytes, and the
// per-call state (request message, response message, peer) is pooled.
// Responses may use raw_output_contents (Sluice, Triton) or typed contents
// (other KServe v2 servers); DecodeResponse accepts both and treats the
// response as untrusted input: every output's data size is checked
// against its datatype and shape, and no shape makes it allocate more than
// the data the response holds.
//
// Every error of a call is an *RPCError, which keeps two views:
//
//   - the gRPC status: status.FromError and status.Code work on it (and
//     on errors wrapping it), for retry decisions on Unavailable,
//     ResourceExhausted or DeadlineExceeded and for outcome metrics;
//   - an *apierr.Error reachable with errors.As, whose Kind follows the
//     code (apierr.KindOf, the inverse of what every Sluice gRPC edge
//     answers) and whose Reason is the one the server put in its
//     errdetails.ErrorInfo (a Sluice server always does, e.g.
//     "tensor_size_mismatch"; apierr.StatusReason reads it), or else a
//     default such as ReasonUnavailable ("upstream_unavailable") or
//     ReasonTimeout.
//
// IsConnectFailure tells a call that never reached the server because no
// connection could be established (refused, handshake failed or timed out,
// endpoint in backoff) from one that failed after a connection carried it.
// That is the difference between Envoy's connect-failure and reset retry
// conditions: only the first is always safe to retry. It is read from
// whether gRPC assigned the call a transport (grpc.Peer), not from error
// message text.
package kserve
