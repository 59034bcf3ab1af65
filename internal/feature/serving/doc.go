// Package serving answers online feature reads: Feast's GetOnlineFeatures,
// as a Go API the gateway calls in-process and as Feast-shaped HTTP
// endpoints (/get-online-features, /push, /materialize, /health,
// /metrics) that Feast's own HTTP client can talk to.
//
// Requests never touch the registry: a request's features compile once
// into a plan, cached per (repository snapshot, feature list), and a
// registry swap only changes which snapshot new requests see. A request
// reads every (view, entity) row it needs in one store round trip.
//
// Freshness is enforced rather than reported only: a value older than its
// view's ttl comes back OUTSIDE_MAX_AGE (withheld by default), a view whose
// last materialization or push is older than its ttl fails reads with 503
// feature_view_stale, and a request carrying an event timestamp is refused
// when a feature it would get is from that request's future.
//
// Features of on-demand views are computed per request from the stored
// features they read and the request's data, by the expressions the
// registry snapshot compiled (package transform); bad request data gives
// a value's status, never an error.
package serving
