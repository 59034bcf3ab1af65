// Package route picks the backend and model version for one gateway
// request. It is a pure matcher: no networking, no I/O, no locks,
// and Match does not allocate.
//
// A [Table] holds a service's routes in configuration order; the first route
// whose match holds wins (Envoy's and Istio's rule). A route's match holds when
// every part of it holds:
//
//   - Header matches, by header name compared case-insensitively (Envoy's
//     rule): exact (the whole first value), prefix, regex (an RE2 expression
//     that must match the whole first value, compiled once when the table is
//     built) and present (true: the header is sent, even empty; false: it is
//     not sent).
//   - An entity hash: hash(value of Key) % Modulo < Below, where the value is
//     an entity join key or request field of the request, as a string. With
//     Modulo 100 and Below 1 about 1 % of entities match, and always the same
//     ones. A request without the value does not match.
//
// An empty match holds for every request.
//
// A matched route splits requests between weighted backends/versions whose
// weights (in percent) sum to 100. The request gets a bucket from 0 to 99 and
// the backend whose cumulative weight range holds the bucket. When the route
// has a sticky key and the request carries that value, the bucket is
// hash(value) % 100, so one key always gets the same backend and version on
// every replica and after restarts. Otherwise the bucket is random.
//
// The hash is stable and documented, so every replica agrees: 64-bit FNV-1a
// over the UTF-8 bytes of the value, followed by the 64-bit finaliser of
// MurmurHash3 (fmix64) so that small differences between ids (user-1,
// user-2, ...) spread over all buckets. See [Hash]. Sticky splits and entity
// hashes use the same hash of the same value, so they are correlated: with a
// hot/cold route "hash(user_id) % 100 < 1" ahead of a sticky 90/10 split on
// user_id, the split sees only buckets 1..99. Give the two different keys
// where that matters.
package route
