package serving

import (
	"context"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// This file is the port the protocol edges (package servingapi) read
// through: a request decoded from a wire format goes Plan → decode its
// entity columns with the plan's key types → Read, the steps
// GetOnlineFeatures takes for a Go Request. The edges map the errors to
// status codes; nothing here knows a protocol.

// Plan is a compiled feature selection against one registry snapshot:
// the views and fields it reads, the entity columns it takes and the
// request data its on-demand views read. Plans are immutable, cached per
// (snapshot, selection) and shared by concurrent requests. The zero Plan
// is not usable.
type Plan struct{ p *plan }

// Plan compiles (or finds cached) the plan of a feature selection against
// the current registry snapshot: features ("view:feature" references) or
// a feature service, exactly one of them set; full names the feature
// columns "view__feature". Errors are GetOnlineFeatures' selection errors
// (unknown_feature, unknown_feature_service, registry_not_loaded, ...).
func (s *Server) Plan(features []string, service string, full bool) (Plan, error) {
	p, err := s.plan(features, service, full)
	return Plan{p}, err
}

// KeyKind returns the kind of the join key name if the plan takes an
// entity column of that name.
func (p Plan) KeyKind(name string) (feature.Kind, bool) {
	ki := p.p.keyIndex(name)
	if ki < 0 {
		return 0, false
	}
	return p.p.keys[ki].kind, true
}

// RequestField returns the type of the request data field name if one of
// the plan's on-demand views reads it.
func (p Plan) RequestField(name string) (feature.Type, bool) { return p.p.requestField(name) }

// OnDemand reports whether the plan computes on-demand features, and so
// reads request data.
func (p Plan) OnDemand() bool { return p.p.od != nil }

// Read answers the plan for the entity columns (keyed by join key, typed
// as KeyKind says; request data fields, typed as RequestField says, go in
// the same map) and the optional event timestamp, as GetOnlineFeatures
// does. A column the plan does not take makes the read fail with
// unknown_entity_key. The caller owns the response and may hand it back
// with Release once it has encoded it.
func (s *Server) Read(ctx context.Context, p Plan, entities map[string][]feature.Value, eventTS *time.Time) (*Response, error) {
	return s.read(ctx, p.p, entities, eventTS)
}

// ObserveRead records, in the read metrics GetOnlineFeatures records its
// own calls in, one request an edge answered through Plan and Read: it
// started at start and ended now with err (nil when it succeeded).
func (s *Server) ObserveRead(start time.Time, err error) { s.observe(start, err) }

// Repo returns the registry snapshot new requests see, or nil when none
// is loaded.
func (s *Server) Repo() *registry.Repo { return s.repos.Current() }

// Health reports whether the server can answer reads: nil, or a
// KindUnavailable error when no registry is loaded (registry_not_loaded)
// or the online store does not answer a ping within ctx
// (online_store_unavailable).
func (s *Server) Health(ctx context.Context) error {
	if s.repos.Current() == nil {
		return unavailablef(ReasonRegistryNotLoaded, "no feature registry is loaded")
	}
	if err := s.store.Ping(ctx); err != nil {
		return &apierr.Error{Kind: apierr.KindUnavailable, Reason: ReasonStoreUnavailable, Msg: "ping online store", Err: err}
	}
	return nil
}

// ForgetStates drops the cached freshness state of views, of every view
// when views is empty, so that the next read of each reads its state from
// the store again: for a materialization run outside the server.
func (s *Server) ForgetStates(views []string) {
	for _, v := range views {
		s.forgetState(v)
	}
	if len(views) == 0 {
		s.forgetAllStates()
	}
}
