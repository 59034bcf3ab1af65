package console

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// RepoSource hands out the current feature repository snapshot;
// *registry.Holder satisfies it.
type RepoSource interface {
	Current() *registry.Repo
}

// MetaReader reads the online store's metadata documents, where the views'
// feature.ViewState lives; every online.Store satisfies it.
type MetaReader interface {
	// GetMeta returns (nil, nil) for a missing name.
	GetMeta(ctx context.Context, name string) ([]byte, error)
}

// RowCounter is a MetaReader that can also count a view's stored rows
// (the embedded store); a negative count means it cannot.
type RowCounter interface {
	CountRows(ctx context.Context, view string) (int64, error)
}

// FeaturesFromStore adapts the feature server: the views come from repos'
// current snapshot, their state from the online store's metadata, as
// serving reads it to enforce freshness. A nil now means time.Now.
func FeaturesFromStore(repos RepoSource, meta MetaReader, now func() time.Time) FeaturesSource {
	if now == nil {
		now = time.Now
	}
	return storeFeatures{repos: repos, meta: meta, now: now}
}

type storeFeatures struct {
	repos RepoSource
	meta  MetaReader
	now   func() time.Time
}

func (a storeFeatures) Views(ctx context.Context) ([]View, error) {
	repo := a.repos.Current()
	if repo == nil {
		return []View{}, nil
	}
	now := a.now()
	out := make([]View, 0, len(repo.Views))
	for _, v := range repo.Views {
		cv := View{
			Name: v.Name, Entities: slices.Clone(v.Entities), Features: len(v.Schema), Online: v.Online,
			Source: v.Source, TTLSeconds: v.TTL.Seconds(),
		}
		if v.Online {
			cv.Freshness = a.freshness(ctx, v.Name, v.TTL, now)
		}
		if v.Stream != nil {
			cv.Stream, cv.StreamLagSeconds = true, -1
			if !cv.NewestEvent.IsZero() {
				cv.StreamLagSeconds = now.Sub(cv.NewestEvent).Seconds()
			}
		}
		if h := v.Hot; h != nil {
			cv.Hot = &HotSubset{View: h.View, Keys: len(h.Keys), TTLSeconds: h.TTL.Seconds()}
			if v.Online {
				cv.Hot.Freshness = a.freshness(ctx, h.View, h.TTL, now)
			}
		}
		out = append(out, cv)
	}
	slices.SortFunc(out, func(a, b View) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// freshness reads a view's state and judges it as serving does: a view
// with a ttl is stale when it was never written or its last success is
// older than the ttl.
func (a storeFeatures) freshness(ctx context.Context, view string, ttl time.Duration, now time.Time) Freshness {
	var f Freshness
	b, err := a.meta.GetMeta(ctx, feature.ViewStateName(view))
	if err == nil && b != nil {
		var st feature.ViewState
		if err = json.Unmarshal(b, &st); err == nil {
			f.LastSuccess, f.NewestEvent, f.Watermark, f.Rows = st.LastSuccess, st.NewestEventTS, st.Watermark, st.Rows
			f.Materialized = !st.LastSuccess.IsZero()
		}
	}
	if err != nil {
		f.Error = "read state of feature view '" + view + "': " + err.Error()
		return f
	}
	f.StoredRows = -1
	if rc, ok := a.meta.(RowCounter); ok {
		if n, err := rc.CountRows(ctx, view); err == nil {
			f.StoredRows = n
		}
	}
	if f.Materialized {
		f.AgeSeconds = max(0, now.Sub(f.LastSuccess).Seconds())
	}
	switch {
	case ttl <= 0:
	case !f.Materialized:
		f.Stale, f.StaleReason = true, "never materialized or pushed"
	case now.Sub(f.LastSuccess) > ttl:
		f.Stale = true
		f.StaleReason = "last materialization or push " + now.Sub(f.LastSuccess).Round(time.Second).String() + " ago, more than its ttl " + ttl.String()
	}
	return f
}
