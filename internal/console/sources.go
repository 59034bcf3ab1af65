package console

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/gateway/accesslog"
)

// ModelsSource lists the models a process serves.
type ModelsSource interface {
	// Models returns every model the repositories hold, sorted by name,
	// each with its known versions in ascending order. It must be safe for
	// concurrent use and return promptly.
	Models(ctx context.Context) ([]Model, error)
}

// FeaturesSource lists the feature views a process serves.
type FeaturesSource interface {
	// Views returns every feature view, sorted by name, with its
	// freshness as of now.
	Views(ctx context.Context) ([]View, error)
}

// GatewaySource describes the gateway of a process.
type GatewaySource interface {
	// Gateway returns the gateway's services, backends and readiness.
	Gateway(ctx context.Context) (*Gateway, error)
}

// ErrorsSource keeps the latest failed requests.
type ErrorsSource interface {
	// RecentErrors returns at most n entries, newest first. The slice is
	// the caller's.
	RecentErrors(n int) []accesslog.Entry
	// ErrorsSeen is how many failed requests were seen in all, including
	// those no longer kept.
	ErrorsSeen() uint64
}

// Sources are what the console shows, and how it samples metrics. A nil
// source leaves its page saying that the process does not run that part.
type Sources struct {
	Models   ModelsSource
	Features FeaturesSource
	Gateway  GatewaySource
	Errors   ErrorsSource
	// Metrics is the process's registry; the charts are derived from it.
	Metrics prometheus.Gatherer
	// SampleEvery is how often Run gathers Metrics [2s]; History is how
	// many samples the charts keep [900, half an hour at 2s].
	SampleEvery time.Duration
	History     int
	// Now is the clock [time.Now].
	Now func() time.Time
	// GrafanaURL, when set, is the base URL of the Grafana holding
	// Sluice's dashboards: the pages link to them by uid. TraceURL, when
	// set, is a tracing UI's URL of one trace with {trace_id} where the id
	// goes: failed requests link to their traces.
	GrafanaURL, TraceURL string
	// HistoryFile, when set, keeps the charts' history across restarts:
	// Run reads it at start and writes it every minute and when it stops
	// (at most History samples, a few hundred KiB).
	HistoryFile string
}

// Model is one model of the repositories.
type Model struct {
	Name     string `json:"name"`
	Platform string `json:"platform,omitempty"`
	// Reason is a failure that concerns no version, e.g. a config that
	// cannot be read; empty otherwise.
	Reason   string         `json:"reason,omitempty"`
	State    string         `json:"state,omitempty"` // with Reason, when there is no version
	Versions []ModelVersion `json:"versions"`
}

// ModelVersion is one version of a model, with its state and statistics.
type ModelVersion struct {
	Version string `json:"version"`
	// State is READY, UNAVAILABLE, LOADING, UNLOADING or UNKNOWN.
	State string `json:"state"`
	// Reason says why the version is not READY; on a READY version it is
	// empty or a warning (a reload that failed, an unreadable repository).
	Reason string `json:"reason,omitempty"`
	// Label and GitCommit are the version's provenance, when it has one.
	Label     string `json:"label,omitempty"`
	GitCommit string `json:"git_commit,omitempty"`
	// LoadedAt is when this load of the version began to serve; zero
	// when no load of it serves.
	LoadedAt time.Time `json:"loaded_at,omitzero"`
	// The statistics since the version loaded (zero unless READY).
	InferenceCount uint64    `json:"inference_count"`
	ExecutionCount uint64    `json:"execution_count"`
	Successes      uint64    `json:"successes"`
	Failures       uint64    `json:"failures"`
	LastInference  time.Time `json:"last_inference,omitzero"`
	AvgQueueMS     float64   `json:"avg_queue_ms"`
	AvgComputeMS   float64   `json:"avg_compute_ms"`
}

// Healthy reports whether the version is fine: READY without a warning,
// or simply not loaded (explicit mode) or unloaded on purpose.
func (v *ModelVersion) Healthy() bool {
	switch v.State {
	case "READY":
		return v.Reason == ""
	case "UNKNOWN", "LOADING", "UNLOADING":
		return true
	default:
		return v.Reason == "unloaded"
	}
}

// View is one feature view and its freshness.
type View struct {
	Name     string   `json:"name"`
	Entities []string `json:"entities"`
	Features int      `json:"features"`
	Online   bool     `json:"online"`
	Source   string   `json:"source,omitempty"`
	// TTLSeconds is the view's ttl; 0 means its data never goes stale.
	TTLSeconds float64 `json:"ttl_seconds"`
	Freshness
	// Hot is the view's hot subset, nil when it has none.
	Hot *HotSubset `json:"hot,omitempty"`
	// Stream is true for a stream feature view; StreamLagSeconds is then
	// its stream's lag (now minus the newest applied event time), -1
	// before any event.
	Stream           bool    `json:"stream,omitempty"`
	StreamLagSeconds float64 `json:"stream_lag_seconds,omitempty"`
}

// Freshness is what the online store remembers of a view's data
// (feature.ViewState) and what follows from it.
type Freshness struct {
	// Materialized is false when no materialization or push ever wrote
	// the view.
	Materialized bool      `json:"materialized"`
	LastSuccess  time.Time `json:"last_success,omitzero"`
	NewestEvent  time.Time `json:"newest_event,omitzero"`
	Watermark    time.Time `json:"watermark,omitzero"`
	// Rows is how many rows the last materialization or push wrote (an
	// incremental run writes only what changed); StoredRows how many the
	// online store holds for the view, -1 when the store cannot count.
	Rows       int64 `json:"rows"`
	StoredRows int64 `json:"stored_rows"`
	// AgeSeconds is the time since LastSuccess (0 when never materialized).
	AgeSeconds float64 `json:"age_seconds"`
	// Stale is true when reads are refused: the ttl has passed since
	// LastSuccess, or the view was never written. StaleReason says which.
	Stale       bool   `json:"stale"`
	StaleReason string `json:"stale_reason,omitempty"`
	// Error is set when the state could not be read.
	Error string `json:"error,omitempty"`
}

// HotSubset is a view's hot entity subset and its use.
type HotSubset struct {
	View       string  `json:"view"`
	Keys       int     `json:"keys"`
	TTLSeconds float64 `json:"ttl_seconds"`
	Freshness
	// Hits counts reads of hot entities answered from the hot copy and
	// Misses those that fell back to the cold view, since the process
	// started (from sluice_feature_hot_reads_total).
	Hits   float64 `json:"hits"`
	Misses float64 `json:"misses"`
}

// HitShare is Hits / (Hits + Misses), or -1 before any hot read.
func (h *HotSubset) HitShare() float64 {
	if h.Hits+h.Misses == 0 {
		return -1
	}
	return h.Hits / (h.Hits + h.Misses)
}

// Gateway is the gateway's state, as its admin API reports it.
type Gateway struct {
	Ready    bool      `json:"ready"`
	Services []Service `json:"services"`
	Backends []Backend `json:"backends"`
	// Clients are the configured API clients and their use of their rate
	// limits (the admin API's GET /ratelimit); empty when it cannot be
	// read.
	Clients []Client `json:"clients,omitempty"`
}

// Client is one configured API client and its rate limit.
type Client struct {
	ID                string  `json:"client_id"`
	RequestsPerSecond float64 `json:"requests_per_second"`
	Burst             int     `json:"burst"`
	// UsedRatio is the share of the limit used over the last minute and
	// Requests the requests admitted in it; nil without a limit.
	UsedRatio *float64 `json:"used_ratio,omitempty"`
	Requests  *float64 `json:"requests_last_minute,omitempty"`
	Scope     string   `json:"scope,omitempty"`
}

// NearLimit reports whether the client used more than 80 % of its limit
// in the last minute (what SluiceClientNearLimit alerts on over 10).
func (c Client) NearLimit() bool { return c.UsedRatio != nil && *c.UsedRatio > 0.8 }

// Service is one inference service of the gateway.
type Service struct {
	Name         string    `json:"name"`
	Path         string    `json:"path"`
	Model        string    `json:"model"`
	ModelVersion string    `json:"model_version,omitempty"`
	Routes       []Route   `json:"routes"`
	Breaker      *Breaker  `json:"breaker,omitempty"`
	Fallback     *Fallback `json:"fallback,omitempty"`
	Rollout      *Rollout  `json:"rollout,omitempty"`
	Shadow       *Shadow   `json:"shadow,omitempty"`
	// Accuracy is the service's online accuracy per version, output and
	// slice over AccuracyWindow; nil without an accuracy block.
	Accuracy       []AccuracySeries `json:"accuracy,omitempty"`
	AccuracyWindow string           `json:"accuracy_window,omitempty"`
}

// AccuracySeries is one version, output and slice of a service's online
// accuracy (the admin API's GET /accuracy).
type AccuracySeries struct {
	Version string             `json:"version"`
	Output  string             `json:"output"`
	Slice   string             `json:"slice"`
	Pairs   uint64             `json:"pairs"`
	Metrics map[string]float64 `json:"metrics"`
	Offline map[string]float64 `json:"offline,omitempty"`
}

// Route is one routing rule of a service, in match order.
type Route struct {
	Name string `json:"name"`
	// Match says which requests the route takes, "all" when it has no
	// condition.
	Match     string   `json:"match"`
	Targets   []Target `json:"targets"`
	StickyKey string   `json:"sticky_key,omitempty"`
	Timeout   string   `json:"timeout,omitempty"`
	Retries   int      `json:"retries,omitempty"`
}

// Target is one weighted share of a route.
type Target struct {
	Backend string `json:"backend"`
	// Model is set when the route names a model other than the service's.
	Model   string `json:"model,omitempty"`
	Version string `json:"version,omitempty"`
	Weight  int    `json:"weight"`
}

// Breaker is a service's feature-level breaker.
type Breaker struct {
	Open        bool      `json:"open"`
	OpenedAt    time.Time `json:"opened_at,omitzero"`
	StaleEvents int       `json:"stale_events"`
	Threshold   int       `json:"threshold"`
	Window      string    `json:"window"`
	TimesOpened int       `json:"times_opened"`
}

// Fallback is a service's business-level fallback.
type Fallback struct {
	Output    string    `json:"output"`
	Rule      string    `json:"rule"`
	Triggered bool      `json:"triggered"`
	Since     time.Time `json:"since,omitzero"`
	RecentP90 *float64  `json:"recent_p90,omitempty"`
	Lower     *float64  `json:"baseline_lower,omitempty"`
	Upper     *float64  `json:"baseline_upper,omitempty"`
	// OnUpstreamFailure: the rule also answers when the model cannot be
	// reached (fallback.on_upstream_failure).
	OnUpstreamFailure bool `json:"on_upstream_failure,omitempty"`
}

// Rollout is a service's staged rollout.
type Rollout struct {
	State      string    `json:"state"`
	Stage      int       `json:"stage"`
	StageName  string    `json:"stage_name"`
	Stages     int       `json:"stages"`
	Traffic    float64   `json:"traffic_percent"`
	StageSince time.Time `json:"stage_since,omitzero"`
	Stable     string    `json:"stable"`
	Candidate  string    `json:"candidate"`
	Reason     string    `json:"reason,omitempty"`
}

// Shadow is a service's shadow traffic.
type Shadow struct {
	Backend string  `json:"backend,omitempty"`
	Model   string  `json:"model,omitempty"`
	Version string  `json:"version"`
	Percent float64 `json:"percent"`
	Key     string  `json:"key,omitempty"`
}

// Backend is one gateway backend and its endpoints.
type Backend struct {
	Name      string     `json:"name"`
	Kind      string     `json:"kind"`
	Endpoints []Endpoint `json:"endpoints"`
}

// Endpoint is one endpoint of a backend.
type Endpoint struct {
	Addr         string    `json:"addr"`
	Healthy      bool      `json:"healthy"`
	Ejected      bool      `json:"ejected"`
	EjectedUntil time.Time `json:"ejected_until,omitzero"`
	InFlight     int       `json:"in_flight"`
	ErrorRate    float64   `json:"error_rate"`
	Recent503    int       `json:"recent_503"`
}
