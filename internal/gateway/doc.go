// Package gateway is Sluice's inference gateway: the edge that turns
// "entity ids in" into "features → tensors → model → answer" and keeps that
// chain healthy when parts of it are not.
//
// One pipeline serves both protocols: an edge (ServeHTTP for
// POST /v1/services/<name>:predict, RegisterGRPC for
// sluice.gateway.v1.Gateway/Predict) decodes its request into a Call and
// runs Predict, which returns a protocol-neutral Answer or an
// *apierr.Error that package apierr maps to the edge's status. pipeline.go
// holds the steps, in order:
//
//  1. authentication (auth: API keys stored hashed, or a client
//     certificate, or anonymous by IP);
//  2. rate limiting (ratelimit: per client, per IP for anonymous callers;
//     local token buckets or Redis GCRA shared by every replica, failing
//     open to the local bucket while Redis is down) → 429 with Retry-After;
//  3. decoding the request values against the service's entities and
//     request fields (read only now, so an unadmitted caller's body is
//     never read);
//  4. routing (route: ordered rules, header and entity-hash matches,
//     weighted and sticky splits between versions and backends), then the
//     release hooks' say (a rollout may pick the version and backend);
//  5. the feature read through the feature-level breaker: a service whose
//     feature reads keep finding stale views answers 503
//     feature_service_unavailable until a probe read finds them fresh;
//  6. the assembly of the model's input tensors from features and request
//     fields, with a per-input policy for missing values;
//  7. the model call through the backend's model client (in process, or
//     KServe v2 gRPC to several model servers), chosen when the
//     configuration was loaded, with least-request load balancing, outlier
//     ejection, per-try and per-route timeouts and budgeted retries that
//     never repeat an endpoint while another exists (upstream);
//  8. the business-level fallback: while a service's predictions drift
//     from their baseline, low-confidence answers come from a rule
//     (fallback) and say source "fallback_rule";
//  9. the release hooks that watch answered calls (drift, shadow), the
//     answer, and a sampled access-log line (accesslog).
//
// New starts no goroutine. RunBackground starts them all and Close stops them: see
// lifecycle.go for who waits for what.
//
// The gateway can also pass KServe v2 requests (/v2/...) through to
// model servers as a plain L7 hop with authentication and rate limits
// (Config.Proxy).
//
// Upstream connections are plaintext unless a tls block says otherwise: a
// kserve_grpc backend with one gets its own KServe client
// (Options.RemoteTLS), a kserve_http backend its own HTTP connections
// (https, through package h1, health checks included), and the Redis rate
// limiter a TLS connection (rate_limit_backend.redis.tls). A certificate that does not verify is a
// connect failure. A reload that changes such a backend builds a new
// client, re-reading the CA bundle; the old one is closed 30 s later, so
// requests in flight on it finish.
//
// The configuration is swapped atomically by Reload: requests in flight
// finish on the state they started with; upstream sets, fallback monitors
// and breakers whose configuration did not change keep their state.
package gateway
