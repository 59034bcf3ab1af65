package gateway

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Quota use: how much of its rate limit each configured client used over
// the last minute, exported as sluice_gateway_client_rate_limit_used_ratio
// and shown in the admin API's /ratelimit (the console's client view).

const (
	// quotaWindow is the window the share of the limit is measured over.
	quotaWindow = time.Minute
	// quotaBuckets split the window; the share lags by at most one.
	quotaBuckets = 12
	quotaBucket  = quotaWindow / quotaBuckets
)

// quotaUse counts one client's admitted requests in a sliding window of
// quotaBuckets buckets.
type quotaUse struct {
	mu     sync.Mutex
	counts [quotaBuckets]float64
	starts [quotaBuckets]int64 // bucket start, in quotaBucket units since the epoch
}

// add counts one admitted request at now.
func (q *quotaUse) add(now time.Time) {
	slot := now.UnixNano() / int64(quotaBucket)
	i := int(slot % quotaBuckets)
	q.mu.Lock()
	if q.starts[i] != slot {
		q.starts[i], q.counts[i] = slot, 0
	}
	q.counts[i]++
	q.mu.Unlock()
}

// requests are the admitted requests in the window that ends at now.
func (q *quotaUse) requests(now time.Time) float64 {
	slot := now.UnixNano() / int64(quotaBucket)
	n := 0.0
	q.mu.Lock()
	for i := range quotaBuckets {
		if s := q.starts[i]; s > slot-quotaBuckets && s <= slot {
			n += q.counts[i]
		}
	}
	q.mu.Unlock()
	return n
}

// share is the share of a limit of rate requests per second used in the
// window that ends at now: requests / (rate × window). Above 1 a burst
// let more through than the sustained rate.
func (q *quotaUse) share(now time.Time, rate float64) float64 {
	if rate <= 0 {
		return 0
	}
	return q.requests(now) / (rate * quotaWindow.Seconds())
}

// quotaCollector exports every configured, rate-limited client's share of
// its limit. Labels are bounded: client ids come from the configuration
// (anonymous callers, limited per IP, are not exported); a client removed
// by a reload loses its series.
type quotaCollector struct {
	g    *Gateway
	desc *prometheus.Desc
}

func newQuotaCollector(g *Gateway) *quotaCollector {
	return &quotaCollector{g: g, desc: prometheus.NewDesc("sluice_gateway_client_rate_limit_used_ratio",
		"Share of each configured client's rate limit it used over the last minute: admitted requests / (requests_per_second × 60 s). scope is shared (one limit in Redis for every gateway: sum the replicas) or per_replica (a token bucket in each gateway).",
		[]string{"client_id", "scope"}, nil)}
}

func (c *quotaCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *quotaCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.g.state.Load()
	if st == nil {
		return
	}
	scope := quotaScope(st)
	now := c.g.opts.Now()
	for id, cl := range st.clients {
		if cl.use == nil || cl.limit.Rate <= 0 {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, cl.use.share(now, cl.limit.Rate), id, scope)
	}
}

// quotaScope says whether a client's limit is shared by every gateway
// (Redis) or each gateway's own.
func quotaScope(st *state) string {
	if st.cfg.RateLimitBackend.Type == "redis" {
		return "shared"
	}
	return "per_replica"
}
