// Package ratelimit decides whether a gateway client may send one more
// request now.
//
// A client is identified by a key: its client id, or "ip:<addr>" for
// anonymous requests where anonymous access is allowed. Every key gets its own
// budget, described by a [Limit]: Rate requests per second on average with
// bursts of up to Burst requests.
//
// Three limiters share one method set, Allow(ctx, key, limit) (Decision, error):
//
//   - [Local] keeps a token bucket per key in process memory
//     (golang.org/x/time/rate). Memory is bounded: at most MaxKeys buckets are
//     kept, and the least recently used one is dropped when a new key arrives.
//     A dropped key starts again with a full bucket, which can only err on the
//     side of admitting.
//   - [Redis] shares one budget per key across all gateway replicas using the
//     generic cell rate algorithm (GCRA) in a small Lua script: one Redis key
//     per client, "<prefix>rl:<key>", holds the theoretical arrival time (TAT)
//     in microseconds of Redis server time, and expires after emission
//     interval × burst, after which an absent key means "full budget". Every
//     call of a warm limiter is bounded by a short timeout (50 ms by
//     default): a limiter must not add latency. A cold one (its first call,
//     and the first after a failure) may have to dial, run the connection
//     handshake and load the script, so it gets ConnectTimeout (500 ms by
//     default) instead of being taken for a dead Redis.
//   - [FailOpen] asks Redis and, when Redis errors or times out, decides with
//     the Local bucket instead (it fails open to the local bucket, not to
//     "allow everything"). Redis counts as down after an error that is no
//     timeout, or after DownAfterTimeouts timeouts of calls made one after
//     another (calls in flight together count once): one stall of a busy
//     machine or server does not take it down. While Redis is down it probes Redis at most once per
//     ProbeInterval (1 s by default) so a dead Redis does not add a timeout to
//     every request, and it switches back by itself after a successful probe.
//
// Both algorithms admit Burst requests at once from an idle key and then one
// request every 1/Rate seconds; a refused request's Decision.RetryAfter says
// when the next one would be admitted, and [RetryAfterHeader] formats it for
// the HTTP Retry-After header (whole seconds, at least 1).
//
// Metrics (no per-client labels, which would be unbounded):
//
//	sluice_gateway_ratelimit_decisions_total{backend="local|redis",result="allowed|limited"}
//	sluice_gateway_ratelimit_fallbacks_total   decisions made by the local bucket because Redis failed or was down
//	sluice_gateway_ratelimit_redis_up          1 while Redis answers, 0 after a failure until a probe succeeds
package ratelimit
