// Package faultkserve is a fault-injecting KServe v2 gRPC proxy for fault
// tests. A [Proxy] listens on 127.0.0.1, forwards every call it serves to a
// real upstream model server (for example `sluice model-server`) over its own
// client connection, and injects faults that a test switches at run time from
// any goroutine:
//
//   - [Proxy.SetErrorEvery] fails every nth ModelInfer call with a gRPC code,
//     deterministically; [Proxy.SetErrorRate] fails a random share of them.
//     A failed call is answered by the proxy and never reaches the upstream.
//   - [Proxy.SetHang] makes ModelInfer block until the caller gives up, the
//     proxy stops or it closes, while ServerReady and ModelReady keep
//     answering from the upstream: the server looks healthy but never
//     answers, which active health checks alone cannot see.
//   - [Proxy.Stop] (or SetDown(true)) closes the listener and every
//     connection, so dials are refused; [Proxy.Restart] listens again on the
//     same address, so a client configured with that address finds it back.
//
// Faults apply to ModelInfer only; health, metadata and the other forwarded
// calls (ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata,
// ModelConfig, ModelStatistics, RepositoryIndex) always reach the upstream
// while the proxy is up. The rest of the service (streaming, repository
// load/unload, shared memory, trace and log settings) answers Unimplemented.
// Incoming request metadata is passed on to the upstream.
//
// The counters [Proxy.Calls], [Proxy.Failed] and [Proxy.Forwarded] let a test
// assert how a client spread its traffic. Every ModelInfer call received
// counts in Calls; it then counts in Failed when the proxy answered it with
// an injected error or it ended while hung, or in Forwarded when it was sent
// to the upstream (whatever the upstream answered). A call still hanging
// counts only in Calls.
//
// A Proxy is meant for tests: it is not hardened against hostile clients.
package faultkserve
