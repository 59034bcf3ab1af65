// Package apierr is Sluice's one error vocabulary: the domain error every
// component raises (Error, made with Errorf: a Kind and a snake_case
// reason code), the table of every reason code (Codes), how an error
// becomes an HTTP status and a gRPC status, how a gRPC status read by a
// client becomes an Error again, and the JSON error body every HTTP edge
// writes, {"error": "...", "reason": "snake_case"}. It also holds the
// reason codes more than one edge produces; each component keeps the
// constants of the codes only it raises.
//
// Every edge uses it: the model server (httpapi, grpcapi), the feature
// server (feature/servingapi), the gateway, admission and authz, and the
// clients that read these answers (kserve, release/replay, perf); so do
// the components that raise errors without speaking a protocol (modelrepo,
// batch, backends, the feature registry). It sits on the ground floor of
// the import graph: it imports scrub and jsonenc and nothing else of
// Sluice, so no component needs the tensor package (infer) or another
// component's edge to speak the vocabulary.
//
// # The table
//
// Codes has one row a code: the reason, the HTTP statuses and gRPC codes
// it is answered with, and a one-line meaning. Its tests read the
// module's source and fail when a Reason constant is not a row, a row is
// declared by no constant or used nowhere, a reason reaches an error as a
// string literal, a status fixed in the source is not the row's, or the
// error tables of the docs disagree with it. docs/errors.md is generated
// from it:
//
//	go test ./internal/apierr -run TestErrorsPageAgrees -update
//
// # The mapping
//
//	apierr.Kind            HTTP                         gRPC
//	KindInvalid           400 Bad Request              InvalidArgument
//	KindUnsupported       400 Bad Request              Unimplemented
//	KindNotFound          404 Not Found                NotFound
//	KindConflict          409 Conflict                 FailedPrecondition
//	KindUnauthenticated   401 Unauthorized             Unauthenticated
//	KindPermissionDenied  403 Forbidden                PermissionDenied
//	KindResourceExhausted 413, 503 or 429 (see below)  ResourceExhausted
//	KindUnavailable       503 Service Unavailable      Unavailable
//	KindTimeout           504 Gateway Timeout          DeadlineExceeded
//	KindInternal          500 Internal Server Error    Internal
//
// KindResourceExhausted splits over HTTP by what ran out. The request's
// own size (ReasonBodyTooLarge, ReasonTooManyEntityRows) and a response
// too large to build (ReasonResponseTooLarge) are 413: the client must
// ask for less (the KServe HTTP port answers a body over its limit 400
// instead, as Triton does: httpapi builds that error as KindInvalid). The
// process's in-flight budget
// (ReasonOverloaded) is 503 with Retry-After: 1, as Envoy's overload
// manager answers: the refusal is about this moment, not the request.
// Anything else (a rate limit, a full queue) is 429. Over gRPC all three
// are ResourceExhausted, which is what admission's interceptors answer.
//
// Errors that are not an *apierr.Error map as follows: an
// *http.MaxBytesError is 413 / ResourceExhausted "body_too_large";
// context.DeadlineExceeded is 504 / DeadlineExceeded "deadline_exceeded";
// context.Canceled is 400 / Canceled "canceled" (400 rather than nginx's
// private 499, which proxies do not know; the client has usually gone);
// an error already carrying a gRPC status keeps it over gRPC; anything
// else is 500 / Internal "internal". An *apierr.Error without a reason
// gets "internal".
//
// Server-side failures (HTTP 5xx; gRPC Internal, Unavailable, Unknown and
// DataLoss) are scrubbed of addresses and absolute paths (package scrub)
// before they leave the process; the edge's log line keeps the detail.
//
// # Where an edge's answer changed
//
// Before this package the feature server had its own map, which
// disagreed with the model server's on three points. It now follows the
// one above:
//
//   - KindUnsupported was 501 there and 400 here. 400 is kept: every
//     KindUnsupported error Sluice raises is about one request (an
//     unsupported parameter, content encoding, datatype or control
//     action) that the client can change, which is a 400 in KServe's
//     and Feast's clients; 501 is heuristically cacheable (RFC 9110
//     §15.6.2) and means the server lacks the functionality for any
//     request. An endpoint a server does not provide at all (the feature
//     server's /materialize without a materializer, the gateway's admin
//     reload without a gateway) is answered 501 by its edge directly
//     with WriteError, not through a Kind. Over gRPC the kind is
//     Unimplemented, as Triton answers.
//   - KindUnauthenticated and KindPermissionDenied were 500 there; they
//     are 401 and 403 everywhere.
//   - Its error bodies escaped <, > and & as \u003c, \u003e and \u0026;
//     like every other edge's they no longer do (the body is JSON sent
//     with nosniff, never HTML). A JSON client decodes the same string.
//
// Over gRPC, context.Canceled's reason was "request_canceled" at the
// model server and "canceled" over HTTP; it is "canceled" on both.
//
// # Clients
//
// FromGRPC turns a status a client received into an *apierr.Error: the
// Kind from the code (KindOf, the inverse of the table above, with the
// codes Sluice never sends folded in: Canceled and Aborted are
// KindUnavailable, AlreadyExists is KindConflict, OutOfRange is
// KindInvalid, Unknown and DataLoss are KindInternal) and the Reason from
// the status's ErrorInfo detail (StatusReason; Sluice sends one in domain
// ErrorDomain, Triton never does), else a reason named after the code.
// FromGRPC(GRPCStatus(err)) keeps err's Kind and Reason.
package apierr
