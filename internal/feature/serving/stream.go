package serving

import (
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/aggregate"
	"github.com/sluice-ml/sluice/internal/feature/online"
)

// combineTiles turns the stored tiles of every stream feature view's rows
// into rows of its aggregation features at time now, by the arithmetic
// historical retrieval runs (aggregate.State.Values). A row's event time
// becomes its newest event's, so ttl and stale_policy apply as to stored
// rows. Tiles that do not decode read as not found (and are logged).
func (s *Server) combineTiles(p *plan, results []online.Result, n int, now time.Time) {
	var vals []feature.Value
	for vi := range p.views {
		vp := &p.views[vi]
		if vp.stream == nil {
			continue
		}
		vals = grow(vals, vp.stream.Features())
		for r := range n {
			res := &results[vi*n+r]
			if !res.Found {
				continue
			}
			newest, found, err := aggregate.ValuesAt(res.Record.Payload, vp.stream, now.UnixNano(), vals)
			if err != nil || !found {
				if err != nil {
					s.logger.Warn("stream feature view tiles do not decode", "view", vp.view.Name, "err", err)
				}
				res.Found = false
				continue
			}
			payload, err := feature.AppendValues(nil, vp.view.Schema, vals)
			if err != nil {
				res.Found = false
				continue
			}
			res.Record = feature.Record{EventTS: newest, Schema: vp.schema, Payload: payload}
		}
	}
}
