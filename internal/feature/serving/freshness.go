package serving

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature"
)

// stateCache keeps each view's ViewState for Options.StateCacheTTL, so a
// request does not read store metadata per view.
type stateCache struct {
	mu sync.RWMutex // protects m and gen
	m  map[string]stateEntry
	// gen counts forgets: a read of the store that began before a push
	// rewrote a view's state must not cache what it read after the push
	// dropped the entry, or reads would see the old state for a whole
	// StateCacheTTL.
	gen uint64
}

type stateEntry struct {
	st    feature.ViewState
	found bool
	at    time.Time
}

// viewState returns the view's state, from the cache when it is fresh
// enough. Reading it from the store refreshes the view's gauges.
func (s *Server) viewState(ctx context.Context, view string, now time.Time, force bool) (feature.ViewState, bool, error) {
	s.states.mu.RLock()
	gen := s.states.gen
	if !force && s.opts.StateCacheTTL > 0 {
		e, ok := s.states.m[view]
		if ok && now.Sub(e.at) < s.opts.StateCacheTTL && !now.Before(e.at) {
			s.states.mu.RUnlock()
			return e.st, e.found, nil
		}
	}
	s.states.mu.RUnlock()
	b, err := s.store.GetMeta(ctx, feature.ViewStateName(view))
	if err != nil {
		return feature.ViewState{}, false, storeError("read state of feature view '"+view+"'", err)
	}
	var e stateEntry
	e.at = now
	if b != nil {
		if err := json.Unmarshal(b, &e.st); err != nil {
			return feature.ViewState{}, false, apierr.Errorf(apierr.KindInternal, ReasonInternal, "feature view '%s': state %s: %v", view, feature.ViewStateName(view), err)
		}
		e.found = true
	}
	s.states.mu.Lock()
	if s.states.gen == gen {
		s.states.m[view] = e
	}
	s.states.mu.Unlock()
	s.setGauges(view, e, now)
	return e.st, e.found, nil
}

// forgetState drops a view's cached state (after a push rewrote it).
func (s *Server) forgetState(view string) {
	s.states.mu.Lock()
	delete(s.states.m, view)
	s.states.gen++
	s.states.mu.Unlock()
}

func (s *Server) setGauges(view string, e stateEntry, now time.Time) {
	if !e.found {
		return
	}
	if !e.st.NewestEventTS.IsZero() {
		s.metrics.dataAge.WithLabelValues(view).Set(now.Sub(e.st.NewestEventTS).Seconds())
	}
	if !e.st.LastSuccess.IsZero() {
		s.metrics.sinceMat.WithLabelValues(view).Set(now.Sub(e.st.LastSuccess).Seconds())
	}
}

// staleness says why v is stale at now, or "" when it is not: a view with
// a ttl is stale when it was never materialized or pushed, or when its last
// success is older than the ttl. A view without a ttl never goes stale.
func staleness(v *feature.View, st feature.ViewState, found bool, now time.Time) string {
	if v.TTL <= 0 {
		return ""
	}
	if !found || st.LastSuccess.IsZero() {
		return "it was never materialized or pushed"
	}
	if age := now.Sub(st.LastSuccess); age > v.TTL {
		return "its last materialization or push was " + age.Round(time.Second).String() + " ago, more than its ttl " + v.TTL.String()
	}
	return ""
}

// checkView fails a read of a stale view.
func (s *Server) checkView(ctx context.Context, v *feature.View, now time.Time) error {
	if v.TTL <= 0 {
		return nil
	}
	st, found, err := s.viewState(ctx, v.Name, now, false)
	if err != nil {
		return err
	}
	why := staleness(v, st, found, now)
	if why == "" {
		return nil
	}
	s.metrics.staleReads.WithLabelValues(v.Name).Inc()
	s.alert(v.Name, why, st, now)
	return unavailablef(ReasonViewStale, "feature view '%s' is stale: %s", v.Name, why)
}

// alert logs stale_feature_alert for view and counts it, at most once per
// AlertInterval per view.
func (s *Server) alert(view, why string, st feature.ViewState, now time.Time) {
	s.alertMu.Lock()
	last, ok := s.lastAlert[view]
	fire := !ok || now.Sub(last) >= s.opts.AlertInterval || now.Before(last)
	if fire {
		s.lastAlert[view] = now
	}
	s.alertMu.Unlock()
	if !fire {
		return
	}
	s.metrics.staleAlerts.WithLabelValues(view).Inc()
	s.logger.Warn("stale_feature_alert", "view", view, "reason", why,
		"last_success", st.LastSuccess, "newest_event_ts", st.NewestEventTS)
}

// Run refreshes every online view's freshness gauges each GaugeInterval,
// and raises stale_feature_alert for stale views even when nobody reads
// them, until ctx is done. It returns nil then. It also records each
// view's schema in the store (online.SchemaRecorder).
func (s *Server) Run(ctx context.Context) error {
	t := time.NewTicker(s.opts.GaugeInterval)
	defer t.Stop()
	for {
		s.refresh(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// refresh reads every online view's state once.
func (s *Server) refresh(ctx context.Context) {
	repo := s.repos.Current()
	if repo == nil {
		return
	}
	now := s.opts.Now()
	for _, v := range repo.Views {
		if !v.Online || ctx.Err() != nil {
			continue
		}
		// Record the view's schema, so its legacy rows (written before
		// rows carried their schema) keep the schema of the time this
		// process started, and writers elsewhere find it recorded.
		if _, err := s.schemas.Record(ctx, s.store, v.Name, v.Schema); err != nil {
			s.logger.Debug("record feature view schema", "view", v.Name, "err", err)
		}
		st, found, err := s.viewState(ctx, v.Name, now, true)
		if err != nil {
			// Freshness that cannot be measured is not freshness.
			s.metrics.fresh.WithLabelValues(v.Name).Set(0)
			s.logger.Debug("refresh feature view state", "view", v.Name, "err", err)
			continue
		}
		why := staleness(v, st, found, now)
		if why != "" {
			s.alert(v.Name, why, st, now)
		}
		fresh := 0.0
		if why == "" {
			fresh = 1
		}
		s.metrics.fresh.WithLabelValues(v.Name).Set(fresh)
	}
}

// forgetAllStates drops every cached view state.
func (s *Server) forgetAllStates() {
	s.states.mu.Lock()
	clear(s.states.m)
	s.states.gen++
	s.states.mu.Unlock()
}
