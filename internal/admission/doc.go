// Package admission bounds the memory that requests can make a Sluice
// process hold, on every listener: per-request body limits (chunked bodies
// included), limits on header size and count, and one in-flight byte
// budget per process that every listener shares. Over the budget a request
// is refused (HTTP 503 "overloaded" with Retry-After: 1, gRPC
// ResourceExhausted "overloaded"); memory never grows to make room.
//
// # The model
//
// A process makes one Budget and passes it, with each listener's Limits,
// to Handler (HTTP) or GRPCServerOptions (gRPC). A request's bytes are
// charged to the budget while it is served and released when its handler
// returns:
//
//   - a body with a Content-Length is reserved whole before any byte is
//     read: a request that cannot be served is refused before it costs
//     anything, and one that is admitted cannot fail half-way for lack of
//     budget;
//   - a body of unknown length (chunked, or HTTP/2 without content-length)
//     is charged chunk by chunk as the handler reads it; the read that
//     would pass the per-request limit or the budget fails with
//     ErrBodyTooLarge or ErrOverloaded, and the handler's body reader
//     answers 413 (400 on the KServe HTTP port, as Triton) or 503;
//   - what a handler holds beyond the wire bytes is charged with Charge:
//     httpapi charges a gzip or deflate body's decompressed buffer where it
//     outgrows the bytes already counted, since a small compressed body
//     can inflate up to the endpoint's own decompressed limit;
//   - a gRPC message is charged its proto.Size while its call runs (a
//     stream's latest message until the next).
//
// The budget never waits: TryAcquire succeeds or the request is refused.
// Queueing bytes would only move the memory somewhere else.
//
// The last eighth of the budget is a reserve for small requests: a
// request that declares at most SmallBytes (1 MiB) may take it; a larger
// one, a chunk of a body of unknown length and Charge's growth may not.
// Clients streaming large or chunked bodies on any port therefore hold at
// most seven eighths of the budget and are refused past that, while the
// ordinary few-KiB requests of every port keep being admitted (the
// hostile-load test in test/integration checks this against the real
// binary). A listener's body limit over SmallBytes must fit in those seven
// eighths (Limits.Validate).
//
// # Defaults and why
//
//   - DefaultBudgetBytes, 256 MiB: at least the largest body limit (the
//     KServe edges accept 64 MiB), so one maximal request always fits, and
//     three of them at once beside the 32 MiB reserve, or thousands of the
//     few-KiB requests that make up ordinary traffic. The budget counts
//     wire bytes; the buffers holding them and Go's collector make the
//     process's peak a multiple: docs/security.md states the measured
//     bound, RSS at rest plus 4× the budget (1 GiB), well within a 2 GiB
//     container, where unbounded reads measured 1.6 to 2.2 GB.
//   - DefaultMaxHeaderBytes, 64 KiB: Go's own default is 1 MiB per
//     connection before any handler runs. Real headers are bearer tokens
//     (a JWT is 1 to 8 KiB), trace context (W3C baggage is capped at
//     8 KiB), cookies (4 KiB each in browsers). Envoy's default
//     max_request_headers_kb is 60 and nginx's large_client_header_buffers
//     4×8 KiB, so whatever a proxy in front forwards still fits.
//   - DefaultMaxHeaderCount, 100: the default of Apache's
//     LimitRequestFields and Envoy's max_headers_count. Go's server parses
//     any number of fields within MaxHeaderBytes into a map; the count
//     bounds that map and the per-request work on it.
//   - DefaultMaxConcurrentStreams, 250 per gRPC connection: the value
//     net/http's HTTP/2 server uses. gRPC's own default is unlimited.
//
// # What is bounded, and what is not
//
// Bounded: each request body's wire bytes (Limits.MaxBodyBytes), all
// bodies in flight together (the Budget), httpapi's decompressed bodies
// (its own limit per request, and the budget through Charge), the header
// block (MaxHeaderBytes, which the wiring copies to http.Server) and the
// number of header fields, each gRPC message (MaxRecvMsgSize), gRPC
// messages being handled together (the budget) and streams per gRPC
// connection.
//
// Not bounded here:
//
//   - gRPC reads a message into memory before any interceptor sees it, so
//     the budget is charged after the read; the tap refuses new streams
//     once less than 64 KiB of the budget is free, so under overload new
//     messages are refused before they are read, but an accepted stream's
//     message is read (at most MaxRecvMsgSize) before it can be refused.
//   - A Content-Length reservation holds budget while the body trickles
//     in; the server's ReadTimeout bounds how long.
//   - Memory derived from a request (decoded tensors, parsed feature
//     requests, model outputs, responses) is not counted: each endpoint's
//     own limits bound its amplification. The budget bounds its input.
//   - Connections themselves (a few KiB of buffers each) and HTTP/2
//     flow-control buffers, bounded by the server's settings and the
//     process's file descriptor limit.
//   - A chunked and compressed body is charged twice, wire bytes and
//     decompressed buffer: conservative, and rare.
//
// Handler's hot path, a small request with a Content-Length and no
// Content-Encoding, does not allocate (see admission_bench_test.go).
package admission
