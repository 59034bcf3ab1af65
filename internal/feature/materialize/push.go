package materialize

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"
)

// pushJob is the Pushgateway job name of materialization runs.
const pushJob = "sluice_materialize"

// pushTimeout bounds one push to the Pushgateway.
const pushTimeout = 10 * time.Second

// push sends each materialized view's freshness gauges to the
// Pushgateway, one group per view (grouping key view=<name>) so a run of
// some views leaves the others' last pushed values in place. Failures are
// logged: the data is already materialized.
func (m *Materializer) push(ctx context.Context, rep Report) {
	client := &http.Client{Timeout: pushTimeout}
	for _, vr := range rep.Views {
		if vr.Err != nil || vr.Note != "" {
			continue
		}
		st, found, err := m.loadState(ctx, vr.View)
		if err != nil || !found {
			m.log.Warn("push freshness gauges", "view", vr.View, "err", err)
			continue
		}
		last := prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_feature_view_last_materialized_timestamp_seconds",
			Help: "Unix time of the feature view's last successful materialization.",
		})
		last.Set(float64(st.LastSuccess.UnixNano()) / 1e9)
		newest := prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_feature_view_newest_event_timestamp_seconds",
			Help: "Unix time of the newest event materialized into the feature view (data age is now minus this).",
		})
		if !st.NewestEventTS.IsZero() {
			newest.Set(float64(st.NewestEventTS.UnixNano()) / 1e9)
		}
		rows := prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_feature_view_last_materialized_rows",
			Help: "Rows the feature view's last successful materialization wrote.",
		})
		rows.Set(float64(st.Rows))
		pctx, cancel := context.WithTimeout(ctx, pushTimeout)
		err = push.New(m.opts.Pushgateway, pushJob).
			Client(client).
			Grouping("view", vr.View).
			Collector(last).Collector(newest).Collector(rows).
			PushContext(pctx)
		cancel()
		if err != nil {
			m.log.Warn("push freshness gauges", "view", vr.View, "pushgateway", m.opts.Pushgateway, "err", err)
		}
	}
}
