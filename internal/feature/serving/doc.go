// Package serving answers online feature reads and takes pushes: Feast's
// GetOnlineFeatures, push and write_to_online_store as a Go API, which the
// gateway calls in-process and the protocol edges (package servingapi:
// Feast-shaped HTTP JSON and Feast's gRPC ServingService) serve over the
// network. Errors are *apierr.Error with reason codes; this package knows
// no protocol and maps no status code.
//
// Requests never touch the registry: a request's features compile once
// into a plan, cached per (repository snapshot, feature list), and a
// registry swap only changes which snapshot new requests see. A request
// reads every (view, entity) row it needs in one store round trip.
//
// Freshness is enforced rather than reported only: a value older than its
// view's ttl comes back OUTSIDE_MAX_AGE (withheld by default), a view whose
// last materialization or push is older than its ttl fails reads with
// feature_view_stale (KindUnavailable), and a request carrying an event
// timestamp is refused when a feature it would get is from that
// request's future.
//
// Features of on-demand views are computed per request from the stored
// features they read and the request's data, by the expressions the
// registry snapshot compiled (package transform); bad request data gives
// a value's status, never an error.
package serving
