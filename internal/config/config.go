package config

import (
	"github.com/sluice-ml/sluice/internal/accuracy/accuracyspec"
	"github.com/sluice-ml/sluice/internal/config/duration"
	"github.com/sluice-ml/sluice/internal/match"
	"github.com/sluice-ml/sluice/internal/release/rollout/rolloutspec"
)

// Config is the whole of a sluice.yaml. A section left out of the file is
// nil, and the component it configures is not started.
type Config struct {
	// ModelServer configures the KServe v2 / Triton-compatible model server.
	ModelServer *ModelServer `yaml:"model_server"`
	// FeatureServer configures the Feast-compatible feature server.
	FeatureServer *FeatureServer `yaml:"feature_server"`
	// Gateway configures the inference gateway in front of both.
	Gateway *Gateway `yaml:"gateway"`
	// Tracing exports OpenTelemetry spans; absent or without an endpoint,
	// tracing is off.
	Tracing *Tracing `yaml:"tracing"`
	// Security holds the operator tokens, the audit log and the memory
	// budget. Load always fills it (with defaults when absent).
	Security *Security `yaml:"security"`
	// Cluster shares state between the replicas of a fleet through NATS
	// JetStream; absent, every process keeps its own (single-process mode).
	Cluster *Cluster `yaml:"cluster"`

	src *source // where each field was written; nil for a Config built in code
}

// ConsoleLinks are the console's links out.
type ConsoleLinks struct {
	// GrafanaURL is the base URL of the Grafana that holds Sluice's
	// dashboards (deploy/grafana); the console links to them by uid.
	GrafanaURL string `yaml:"grafana_url"`
	// TraceURL is a tracing UI's URL for one trace, with {trace_id} where
	// the id goes (Jaeger: "http://jaeger:16686/trace/{trace_id}").
	TraceURL string `yaml:"trace_url"`
	// HistoryFile keeps the console charts' history across restarts
	// (relative to the config file; absent: in memory only).
	HistoryFile string `yaml:"history_file"`
}

// Tracing configures OpenTelemetry tracing.
type Tracing struct {
	// OTLPEndpoint is the OTLP/gRPC collector (host:port).
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// SampleRatio is the share of traces started here that are kept, by
	// trace id; a request with a sampled parent is always kept [0.01].
	SampleRatio float64 `yaml:"sample_ratio"`
	// ServiceName names the process in traces [OTEL_SERVICE_NAME, else sluice].
	ServiceName string `yaml:"service_name"`
	// Exporter is otlp, console or none [OTEL_TRACES_EXPORTER; otlp
	// when an endpoint is set; else none].
	Exporter string `yaml:"exporter"`
	// File is where the console exporter appends its spans (JSON)
	// [standard output].
	File string `yaml:"file"`
}

// ModelServer mirrors the flags of "sluice model-server" (Triton's names).
type ModelServer struct {
	// ModelRepository lists the model repository folders (Triton layout).
	ModelRepository []string `yaml:"model_repository"`
	// Address is the address the listeners bind to. Default "127.0.0.1":
	// under serve -c only the gateway faces the network.
	Address string `yaml:"address"`
	// TLS serves the HTTP and gRPC listeners over TLS (mTLS with
	// client_ca_file).
	TLS *TLS `yaml:"tls"`
	// HTTPRestrictedAPI restricts KServe API groups on the HTTP listener,
	// Triton's --http-restricted-api: "<API>[,<API>...]:<key>=<value>".
	HTTPRestrictedAPI []string `yaml:"http_restricted_api"`
	// GRPCRestrictedProtocol is the gRPC twin, Triton's
	// --grpc-restricted-protocol.
	GRPCRestrictedProtocol []string `yaml:"grpc_restricted_protocol"`
	// AllowClientSHM lets clients register system shared-memory regions,
	// Triton's --allow-client-shm. Default false, as in Triton.
	AllowClientSHM bool `yaml:"allow_client_shm"`
	// Limits bound each request [max_body_bytes 64 MiB].
	Limits Limits `yaml:"limits"`
	// HTTPPort is the KServe v2 HTTP port. Default 8000.
	HTTPPort int `yaml:"http_port"`
	// GRPCPort is the KServe v2 gRPC port. Default 8001.
	GRPCPort int `yaml:"grpc_port"`
	// MetricsPort is the Prometheus /metrics port. Default 8002.
	MetricsPort int `yaml:"metrics_port"`
	// ControlMode is the model control mode: none, poll or explicit. Default none.
	ControlMode string `yaml:"control_mode"`
	// LoadModel names the models to load at start-up in explicit mode; "*" loads all.
	LoadModel []string `yaml:"load_model"`
	// RepositoryPollInterval is the time between repository polls in poll mode. Default 15s.
	RepositoryPollInterval Duration `yaml:"repository_poll_interval"`
	// RepositoryCacheDir holds the local copies of object-storage model
	// repositories (s3://, gs://, as://). Default: the user cache folder's
	// sluice/model-repositories.
	RepositoryCacheDir string `yaml:"repository_cache_dir"`
	// RepositoryCacheBytes is the largest object-storage repository the
	// local copy holds. Default 20 GiB.
	RepositoryCacheBytes int64 `yaml:"repository_cache_bytes"`
	// StrictModelConfig requires a complete config.pbtxt (no auto-complete).
	StrictModelConfig bool `yaml:"strict_model_config"`
	// StrictReadiness makes /v2/health/ready answer 503 while any model
	// that should be loaded has no ready version (Triton's
	// --strict-readiness). Default false under serve -c: one broken model
	// must not take a pod whose other models serve out of rotation.
	StrictReadiness *bool `yaml:"strict_readiness"`
	// BackendConfig holds backend settings: backend → setting → value.
	BackendConfig map[string]map[string]string `yaml:"backend_config"`
	// ExitOnError exits at start-up when any model fails to load
	// (--exit-on-error). Default false: the models that loaded serve.
	ExitOnError bool `yaml:"exit_on_error"`
	// ModelGitCommit is the git commit expected of each model named
	// (--model-git-commit <model>=<sha>): a version whose
	// model_config.json git_commit differs is refused.
	ModelGitCommit map[string]string `yaml:"model_git_commit"`
	// ExitTimeout is how long shutdown waits for in-flight requests
	// (--exit-timeout-secs). Default 30s; 0s, written, waits for none.
	ExitTimeout Duration `yaml:"exit_timeout"`
	// CacheSize is the bytes of the response cache shared by the models
	// with response_cache { enable: true } (--cache-size). Default 0: no
	// cache.
	CacheSize int64 `yaml:"cache_size"`
	// TritonMetrics also exports the inference metrics under Triton's
	// names, nv_inference_* (--triton-metrics). Default true.
	TritonMetrics *bool `yaml:"triton_metrics"`
	// ServerName is the name in the server metadata (--server-name).
	// Default "sluice".
	ServerName string `yaml:"server_name"`
	// ServerVersion is the version in the server metadata
	// (--server-version). Default: the build's version.
	ServerVersion string `yaml:"server_version"`
	// HTTPHeaderForwardPattern is a regular expression: the HTTP
	// inference request headers whose names match reach the model as
	// string request parameters (--http-header-forward-pattern).
	HTTPHeaderForwardPattern string `yaml:"http_header_forward_pattern"`
	// GRPCHeaderForwardPattern is its gRPC twin, over request metadata
	// keys (--grpc-header-forward-pattern).
	GRPCHeaderForwardPattern string `yaml:"grpc_header_forward_pattern"`
	// CompressMinBytes is the smallest inference response compressed for
	// a client that accepts it (--compress-min-bytes). Default 1024; -1:
	// never compress.
	CompressMinBytes int `yaml:"compress_min_bytes"`
	// MaxOutputBytes is the most output bytes one request may get from a
	// model whose config.pbtxt sets no max_output_bytes parameter
	// (--max-output-bytes). Default 64 MiB.
	MaxOutputBytes int64 `yaml:"max_output_bytes"`
}

// FeatureServer configures the feature server.
type FeatureServer struct {
	// Repo is the feature repository folder (feature_store.yaml and definitions).
	Repo string `yaml:"repo"`
	// Address is the address the listener binds to. Default "127.0.0.1":
	// under serve -c only the gateway faces the network.
	Address string `yaml:"address"`
	// Port is the HTTP port. Default 6566 (Feast's).
	Port int `yaml:"port"`
	// GRPCPort, when set, serves Feast's gRPC serving API
	// (feast.serving.ServingService) on this port too, with the same
	// address, TLS, auth and limits. Default 0: no gRPC listener.
	GRPCPort int `yaml:"grpc_port"`
	// TLS serves the listener over TLS (mTLS with client_ca_file).
	TLS *TLS `yaml:"tls"`
	// ReadAuth says whether reads (/get-online-features) are open or need
	// a token of role read: "open" (default) or "token". Writes (/push,
	// /materialize*) always need an operate token beyond loopback.
	ReadAuth string `yaml:"read_auth"`
	// MaxEntityRows caps the entity rows of one feature request [10000].
	MaxEntityRows int `yaml:"max_entity_rows"`
	// Limits bound each request [max_body_bytes 16 MiB].
	Limits Limits `yaml:"limits"`
	// RegistryPollInterval is the time between checks of the definitions
	// and the registry for changes (sluice feature-server
	// --registry-poll-secs). Default 10s; 0s, written, disables reloading.
	RegistryPollInterval Duration `yaml:"registry_poll_interval"`
	// Aggregate runs the stream aggregators of the repository's stream
	// feature views in this process, as sluice feature-server --aggregate
	// does, against its online store. Default false. NATS being
	// unreachable never holds up or fails the start: each source retries
	// in the background and its views stay missing or stale meanwhile.
	Aggregate bool `yaml:"aggregate"`
	// ExitTimeout is how long shutdown waits for in-flight requests
	// (sluice feature-server --exit-timeout-secs). Default 30s; 0s,
	// written, waits for none.
	ExitTimeout Duration `yaml:"exit_timeout"`
}

// Gateway configures the inference gateway.
type Gateway struct {
	// Listen is the address of the public listener. Default ":8080".
	Listen string `yaml:"listen"`
	// Admin is the address of the admin API (Envoy's convention). Default
	// "127.0.0.1:9901": operators only.
	Admin string `yaml:"admin"`
	// Console links the admin port's console to the operators' other
	// tools.
	Console ConsoleLinks `yaml:"console"`
	// TLS serves the public HTTP and gRPC listeners over TLS; with
	// client_ca_file, client certificates are verified and a client's
	// tls_identity becomes its client_id.
	TLS *TLS `yaml:"tls"`
	// AdminTLS serves the admin listener over TLS.
	AdminTLS *TLS `yaml:"admin_tls"`
	// Limits bound each request on the public listeners [max_body_bytes 1 MiB].
	Limits Limits `yaml:"limits"`
	// Clients are the API clients, identified by API key.
	Clients []Client `yaml:"clients"`
	// Anonymous says whether requests without a key are served, and their limit.
	Anonymous Anonymous `yaml:"anonymous"`
	// RateLimitBackend says where token buckets live. Default local.
	RateLimitBackend RateLimitBackend `yaml:"rate_limit_backend"`
	// Services are the inference services the gateway exposes.
	Services []Service `yaml:"services"`
	// Backends are the model-serving upstreams (Envoy's clusters).
	Backends []Backend `yaml:"backends"`
	// LogSampling sets which share of requests the access log records in full.
	LogSampling LogSampling `yaml:"log_sampling"`
	// GRPC is the address of the gateway's gRPC edge
	// (sluice.gateway.v1.Gateway/Predict); empty disables it.
	GRPC string `yaml:"grpc"`
	// AccessLog is where access-log lines go: "stdout" (default), "stderr",
	// "off" or a file path (appended to).
	AccessLog string `yaml:"access_log"`
	// Recording is where shadow traffic is recorded.
	Recording Recording `yaml:"recording"`
	// DrainPeriod is how long, at shutdown, the gateway keeps serving with
	// readiness failing before it stops its listeners [2s].
	DrainPeriod Duration `yaml:"drain_period"`
	// ExitTimeout is how long, after the drain period, shutdown waits for
	// in-flight requests. Default 30s; 0s, written, waits for none.
	ExitTimeout Duration `yaml:"exit_timeout"`
	// PriorityHeaders map a request header value to a model priority; the
	// first match wins over the client's priority.
	PriorityHeaders []PriorityHeader `yaml:"priority_headers"`
	// Proxy passes KServe v2 requests (/v2/...) through to a backend, with
	// authentication and rate limits: the gateway as a plain L7 hop.
	Proxy *Proxy `yaml:"proxy"`
	// Accuracy is where logged predictions wait for their outcomes; used
	// when a service has an accuracy block (defaults apply then).
	Accuracy *accuracyspec.Gateway `yaml:"accuracy"`
}

// Client is one API client.
type Client struct {
	// ID is the client_id reported in logs and metrics; unique.
	ID string `yaml:"id"`
	// APIKeySHA256 is the hex SHA-256 of the client's API key.
	APIKeySHA256 string `yaml:"api_key_sha256"`
	// APIKey is the plain API key. It is accepted only from ${ENV} expansion;
	// Load hashes it into APIKeySHA256 and clears it, so a Config never keeps it.
	APIKey string `yaml:"api_key,omitempty"`
	// APIKeyRef is the api_key as written, before ${ENV} expansion (say
	// "${SLUICE_DEMO_API_KEY:-demo-key}"): what the startup banner shows in
	// its curl, so a shell expands it to the same key. Empty when the key
	// is given as api_key_sha256.
	APIKeyRef string `yaml:"-"`
	// RateLimit is the client's token bucket; zero requests_per_second means unlimited.
	RateLimit RateLimit `yaml:"rate_limit"`
	// Priority is the model priority the client's requests get (1 is highest; 0 = default).
	Priority int `yaml:"priority"`
	// TLSIdentity is the identity of the client's certificate (first URI
	// SAN, else DNS SAN, else email SAN, else subject CN): a request over
	// mTLS presenting it is this client, with or without an API key.
	TLSIdentity string `yaml:"tls_identity"`
}

// PriorityHeader maps "header: value" to a model priority (Triton's
// convention: 1 is the highest).
type PriorityHeader struct {
	Name     string `yaml:"name"`
	Value    string `yaml:"value"`
	Priority int    `yaml:"priority"`
}

// Proxy is the KServe v2 passthrough.
type Proxy struct {
	// Backend names a backend of kind kserve_http.
	Backend string `yaml:"backend"`
	// PathPrefix is the path prefix forwarded as is [/v2/].
	PathPrefix string `yaml:"path_prefix"`
	// Timeout bounds a request, retries included [1s].
	Timeout Duration `yaml:"timeout"`
	// Retries retries failed tries on other endpoints; nil means none.
	Retries *RetryPolicy `yaml:"retries"`
	// AllowAPIs are the Triton API groups forwarded besides the inference
	// and read ones (health, metadata, inference, model-config,
	// statistics), which always are: model-repository, shared-memory,
	// trace, logging. Any other request (and an inference that names a
	// shared-memory region, unless shared-memory is listed) is answered
	// 403 proxy_api_not_allowed. Listing a state-changing group needs an
	// operate token in security.tokens and no anonymous access; the
	// caller's X-Sluice-Token then travels for those groups only.
	AllowAPIs []string `yaml:"allow_apis"`
}

// ProxyDefaultAPIs are the Triton API groups the KServe proxy always
// forwards: inference and reads.
var ProxyDefaultAPIs = []string{"health", "metadata", "inference", "model-config", "statistics"}

// ProxyStateAPIs are the groups the proxy forwards only when allow_apis
// lists them: they change the model server's state or reach its shared
// memory.
var ProxyStateAPIs = []string{"model-repository", "shared-memory", "trace", "logging"}

// RateLimit is a token bucket.
type RateLimit struct {
	// RequestsPerSecond is the refill rate; 0 means no limit.
	RequestsPerSecond float64 `yaml:"requests_per_second"`
	// Burst is the bucket size. Default: ceil(requests_per_second), at least 1.
	Burst int `yaml:"burst"`
}

// Anonymous configures requests that carry no API key.
type Anonymous struct {
	// Allowed serves requests without a key; otherwise they get 401.
	Allowed bool `yaml:"allowed"`
	// RateLimitPerIP is the token bucket per source IP for such requests.
	RateLimitPerIP RateLimit `yaml:"rate_limit_per_ip"`
}

// RateLimitBackend says where token buckets are kept.
type RateLimitBackend struct {
	// Type is local (per process) or redis (shared, GCRA). Default local.
	Type string `yaml:"type"`
	// Redis configures the redis type.
	Redis Redis `yaml:"redis"`
}

// Redis is a Redis connection.
type Redis struct {
	// Addrs are host:port addresses; several mean a cluster.
	Addrs []string `yaml:"addrs"`
	// Username is the ACL user name.
	Username string `yaml:"username"`
	// Password is the password; a secret, so write it as ${ENV}.
	Password string `yaml:"password"`
	// DB is the database number (single node only).
	DB int `yaml:"db"`
	// KeyPrefix prefixes every key. Default "sluice:rl:".
	KeyPrefix string `yaml:"key_prefix"`
	// DialTimeout bounds connecting. Default 200ms.
	DialTimeout Duration `yaml:"dial_timeout"`
	// TLS connects over TLS.
	TLS *ClientTLS `yaml:"tls"`
}

// Service is one inference service: request → features → model → answer.
type Service struct {
	// Name is the service name; unique.
	Name string `yaml:"name"`
	// Path is "METHOD /path", e.g. "POST /v1/services/parcel-eta:predict".
	Path string `yaml:"path"`
	// Entities are the entity keys a request carries.
	Entities []Entity `yaml:"entities"`
	// RequestFields are the other values a request carries.
	RequestFields []RequestField `yaml:"request_fields"`
	// FeatureService is the feature service to read features from.
	FeatureService string `yaml:"feature_service"`
	// Inputs say how each model input tensor is assembled.
	Inputs []Input `yaml:"inputs"`
	// Model is the model to call (the routes pick backend and version).
	Model Model `yaml:"model"`
	// Outputs map model outputs to fields of the JSON answer.
	Outputs []Output `yaml:"outputs"`
	// Routes are tried in order; the first match wins.
	Routes []Route `yaml:"routes"`
	// Fallback is the business-level fallback; nil means none.
	Fallback *Fallback `yaml:"fallback"`
	// Shadow mirrors a share of the service's requests to a shadow model
	// version and records both answers.
	Shadow *Shadow `yaml:"shadow"`
	// Rollout moves traffic from a stable to a candidate version stage by
	// stage, rolling back when a gate fails.
	Rollout *rolloutspec.Config `yaml:"rollout"`
	// Drift watches the service's live inputs and outputs against a
	// reference distribution.
	Drift *Drift `yaml:"drift"`
	// Accuracy logs a share of the service's predictions and joins them to
	// the outcomes posted later: online error per version and slice.
	Accuracy *accuracyspec.Service `yaml:"accuracy"`
	// Example is a sample request body, printed by "sluice serve" as a
	// ready-to-paste curl command.
	Example map[string]any `yaml:"example"`
	// FeatureBreaker stops reading features (503 feature_service_unavailable)
	// while the feature service keeps reporting stale views.
	FeatureBreaker FeatureBreaker `yaml:"feature_breaker"`
}

// Drift is a service's input and output drift detection.
type Drift struct {
	// Reference is a reference file (training-data statistics; see
	// docs/release-safety.md); relative to the config file. Empty: the
	// first RecordFor of live traffic becomes the reference.
	Reference string `yaml:"reference"`
	// RecordFor is how long live traffic is recorded as the reference when
	// there is no file [1h].
	RecordFor Duration `yaml:"record_for"`
	// Features lists the "view:feature" inputs watched; empty: every
	// scalar numeric feature the service reads.
	Features []string `yaml:"features"`
	// Outputs lists the model outputs watched; empty: the mapped outputs.
	Outputs []string `yaml:"outputs"`
	// Window is the span of the live window [1h], kept in 6 buckets.
	Window Duration `yaml:"window"`
	// Interval is how often the statistics are computed [30s].
	Interval Duration `yaml:"interval"`
	// PSIThreshold flags a variable whose PSI reaches it [0.25].
	PSIThreshold float64 `yaml:"psi_threshold"`
	// KSAlpha flags a variable whose KS p-value falls below it [0.01].
	KSAlpha float64 `yaml:"ks_alpha"`
	// FeedFallback also triggers the service's fallback while its watched
	// output (fallback.output) drifts.
	FeedFallback bool `yaml:"feed_fallback"`
}

// Shadow is a service's shadow traffic.
type Shadow struct {
	// Backend serves the shadow model; default the first route's backend.
	Backend string `yaml:"backend"`
	// Model is the shadow model; default the service's model.
	Model string `yaml:"model"`
	// Version is the shadow model version; required.
	Version string `yaml:"version"`
	// Percent of requests mirrored [1], chosen by hash of Key so every
	// replica and every replay mirrors the same requests.
	Percent float64 `yaml:"percent"`
	// Key names the request field (or entity join key) whose value is
	// hashed; empty or absent from a request: the request id.
	Key string `yaml:"key"`
	// Timeout bounds one shadow call [1s].
	Timeout Duration `yaml:"timeout"`
}

// Recording is where shadow exchanges are recorded.
type Recording struct {
	// Sink is jsonl (rotated files; the default), nats (JetStream) or off.
	Sink string `yaml:"sink"`
	// Dir holds the JSONL files [recordings, next to the config file].
	Dir string `yaml:"dir"`
	// MaxBytes rotates a JSONL file at this size [64 MiB].
	MaxBytes int64 `yaml:"max_bytes"`
	// MaxAge rotates a JSONL file after this long [1h].
	MaxAge Duration `yaml:"max_age"`
	// NATS is the JetStream server and stream for sink nats.
	NATS RecordingNATS `yaml:"nats"`
	// Headers are the request headers recorded (lower-case); never
	// credentials [x-request-id, x-user-type, x-region].
	Headers []string `yaml:"headers"`
	// QueueSize bounds the shadow calls and records waiting [4096]; more
	// are dropped and counted, never waited for.
	QueueSize int `yaml:"queue_size"`
	// Workers is the number of concurrent shadow calls [4].
	Workers int `yaml:"workers"`
	// Spool keeps, on local disk, the records sink nats could not publish
	// yet; they are published when the broker is back or at the next
	// start.
	Spool RecordingSpool `yaml:"spool"`
	// CloseTimeout bounds how long shutdown tries to publish (sink nats)
	// the records still queued or spooled before it leaves them in the
	// spool [5s]. JSONL writes are always finished.
	CloseTimeout Duration `yaml:"close_timeout"`
	// Archive moves sink jsonl's rotated files to object storage: each is
	// uploaded, verified there and then deleted locally; while the bucket
	// is unreachable they wait on disk.
	Archive accuracyspec.Archive `yaml:"archive"`
}

// RecordingSpool is sink nats's local disk spool.
type RecordingSpool struct {
	// Dir holds the spool's segment files [<recording.dir>/spool]. One
	// process per directory: give each replica its own.
	Dir string `yaml:"dir"`
	// MaxBytes bounds the spool's files together [1 GiB].
	MaxBytes int64 `yaml:"max_bytes"`
	// Full is what happens to a record that does not fit: drop_newest (it
	// is discarded and counted as dropped_by_policy; the gateway goes on
	// recording) or block (recording waits for room, so new records are
	// dropped at the queue instead) [drop_newest].
	Full string `yaml:"full"`
}

// RecordingNATS is the JetStream sink's server and stream.
type RecordingNATS struct {
	URL    string `yaml:"url"`
	Stream string `yaml:"stream"`
	// SubjectPrefix: records go to <prefix>.<service>; a stream created
	// here takes <prefix>.> [sluice.recordings]. Two streams on one server
	// need different prefixes.
	SubjectPrefix string `yaml:"subject_prefix"`
	// TLS connects to the server over TLS (mTLS with cert_file); a
	// tls:// URL alone means TLS with the system roots.
	TLS *ClientTLS `yaml:"tls"`
}

// FeatureBreaker is a service's feature-level circuit breaker.
type FeatureBreaker struct {
	// StaleThreshold is the number of stale-feature events within Window
	// that opens the breaker [10]; a negative value disables the breaker.
	StaleThreshold int `yaml:"stale_threshold"`
	// Window is the sliding window the events are counted in [5m].
	Window Duration `yaml:"window"`
	// ProbeInterval is how often an open breaker lets one request read
	// features to see whether they are fresh again [5s].
	ProbeInterval Duration `yaml:"probe_interval"`
}

// Entity is an entity key a request carries.
type Entity struct {
	// Name is the entity name in the feature repository, e.g. "user".
	Name string `yaml:"name"`
	// JoinKey is the request field holding the key, e.g. "user_id".
	JoinKey string `yaml:"join_key"`
	// Type is int64 or string. Default int64.
	Type string `yaml:"type"`
}

// RequestField is a non-entity value a request carries.
type RequestField struct {
	// Name is the JSON field name.
	Name string `yaml:"name"`
	// Type is float32, float64, int64, bool or string. Default float32.
	Type string `yaml:"type"`
	// Required refuses requests without the field (400).
	Required bool `yaml:"required"`
}

// Input assembles one model input tensor.
type Input struct {
	// Tensor is the model input name.
	Tensor string `yaml:"tensor"`
	// Datatype is the KServe v2 datatype, e.g. FP32. Default FP32.
	Datatype string `yaml:"datatype"`
	// Features are concatenated in order: "view:feature" reads a feature,
	// "field:NAME" a request field or entity join key.
	Features []string `yaml:"features"`
	// Missing is the policy for a missing value: fail, default or zero. Default fail.
	Missing string `yaml:"missing"`
	// Unreadable is the policy for a feature whose entity's row exists but
	// whose stored value cannot be read (NOT_FOUND for a schema reason: a
	// feature added or retyped since the row was written and not yet
	// materialized again, or a damaged row): fail (default) answers 503
	// feature_unreadable; missing applies Missing as for an absent value.
	Unreadable string `yaml:"unreadable"`
	// Default is the value used when Missing is default.
	Default *float64 `yaml:"default"`
}

// Model names the model a service calls.
type Model struct {
	// Name is the model name.
	Name string `yaml:"name"`
	// Version is the default version; empty lets the server choose.
	Version string `yaml:"version"`
}

// Output maps one model output into the answer.
type Output struct {
	// Name is the field name in the JSON answer.
	Name string `yaml:"name"`
	// From is the model output tensor. Default: Name.
	From string `yaml:"from"`
}

// Route is one routing rule (Envoy's route, Istio's HTTPRoute).
type Route struct {
	// Name names the route in metrics and logs; unique per service.
	Name string `yaml:"name"`
	// Match says which requests the route takes; empty matches all.
	Match Match `yaml:"match"`
	// Route says where matched requests go.
	Route RouteAction `yaml:"route"`
	// Timeout bounds the whole call, retries included. Default 1s.
	Timeout Duration `yaml:"timeout"`
	// Retries is the retry policy; nil means no retries.
	Retries *RetryPolicy `yaml:"retries"`
}

// Match is a route's match; all parts must hold.
type Match struct {
	// Headers must all match.
	Headers []HeaderMatch `yaml:"headers"`
	// EntityHash matches by hash of an entity key.
	EntityHash *EntityHash `yaml:"entity_hash"`
}

// HeaderMatch matches one header; exactly one of exact, prefix, regex and
// present is set. It is the gateway's shared header match, which the rollout
// controller's groups use too.
type HeaderMatch = match.HeaderMatch

// EntityHash matches when hash(key) % modulo < below.
type EntityHash struct {
	// Key is an entity join key or request field.
	Key string `yaml:"key"`
	// Modulo is the number of buckets. Default 100.
	Modulo int `yaml:"modulo"`
	// Below is the number of buckets, from 0, that match.
	Below int `yaml:"below"`
}

// RouteAction says where matched requests go.
type RouteAction struct {
	// Weighted splits requests between backends and versions; weights sum to 100.
	Weighted []WeightedBackend `yaml:"weighted"`
	// StickyKey, when set, picks the split by hash of this request key
	// instead of at random, so one key always gets the same version.
	StickyKey string `yaml:"sticky_key"`
}

// WeightedBackend is one share of a weighted route.
type WeightedBackend struct {
	// Backend names a gateway backend.
	Backend string `yaml:"backend"`
	// Model is the model to send to; empty means the service's
	// model.name. Another model must take the same inputs and return the
	// same outputs (config check verifies it), e.g. a hot/cold pair.
	Model string `yaml:"model"`
	// Version is the model version; empty means the service's model.version.
	Version string `yaml:"version"`
	// Weight is the share in percent.
	Weight int `yaml:"weight"`
}

// RetryPolicy is Envoy's retry policy.
type RetryPolicy struct {
	// RetryOn lists the conditions that allow a retry.
	RetryOn []string `yaml:"retry_on"`
	// NumRetries is the most retries per request. Default 1.
	NumRetries int `yaml:"num_retries"`
	// PerTryTimeout bounds each try; at most the route timeout. Default: the route timeout.
	PerTryTimeout Duration `yaml:"per_try_timeout"`
	// Budget caps retries to a share of active requests.
	Budget RetryBudget `yaml:"budget"`
}

// RetryBudget is Envoy's retry budget.
type RetryBudget struct {
	// Percent of active requests that may be retries. Default 20.
	Percent float64 `yaml:"percent"`
	// MinConcurrency is the retry concurrency always allowed. Default 3.
	MinConcurrency int `yaml:"min_concurrency"`
}

// Fallback is the business-level fallback of a service.
type Fallback struct {
	// Output is the model output watched for drift. Default eta_prediction.
	Output string `yaml:"output"`
	// BaselineWindow is how often the baseline is recomputed. Default 1h.
	BaselineWindow Duration `yaml:"baseline_window"`
	// History is how many windows the rolling baseline covers. Default 24.
	History int `yaml:"history"`
	// Trigger says when the fallback turns on.
	Trigger Trigger `yaml:"trigger"`
	// Confidence says which requests get the rule's answer while triggered.
	Confidence Confidence `yaml:"confidence"`
	// Rule is the expr-lang expression over features and request fields.
	Rule string `yaml:"rule"`
	// Window is the span of recent predictions whose percentile is
	// compared with the baseline. Default 1m.
	Window Duration `yaml:"window"`
	// OnUpstreamFailure answers with the rule when the model cannot be
	// reached at all (upstream_unavailable, no_healthy_upstream,
	// upstream_timeout), with source fallback_rule and the failure as the
	// reason. Off by default: the rule is a rough estimate, and a client
	// that is not told the model is down (a 503) cannot back off, retry
	// elsewhere or page anyone; turn it on where a degraded answer is worth
	// more than an error.
	OnUpstreamFailure bool `yaml:"on_upstream_failure"`
	// BaselineFile keeps the baseline's completed windows on local disk
	// (single-process mode), so a restart starts with the baseline; with a
	// cluster section the baseline lives in JetStream instead. Empty: the
	// baseline is in memory only.
	BaselineFile string `yaml:"baseline_file"`
}

// Trigger turns the fallback on when a percentile leaves the baseline band.
type Trigger struct {
	// Percentile of the output watched. Default 90.
	Percentile float64 `yaml:"percentile"`
	// Band is the allowed distance from the baseline in percent. Default 15.
	Band float64 `yaml:"band"`
	// Duration is how long it must stay outside. Default 10m.
	Duration Duration `yaml:"duration"`
	// ClearDuration is how long it must be back inside 0.8 × band before
	// the fallback turns off. Default 1m.
	ClearDuration Duration `yaml:"clear_duration"`
}

// Confidence selects requests for the rule.
type Confidence struct {
	// Output is the model output holding the confidence. Default confidence_score.
	Output string `yaml:"output"`
	// Below is the threshold. Default 0.7.
	Below float64 `yaml:"below"`
}

// Backend is a model-serving upstream (Envoy's cluster).
type Backend struct {
	// Name is the backend name; unique.
	Name string `yaml:"name"`
	// Kind is in_process (this process's model server), kserve_grpc
	// (KServe v2 gRPC servers: Sluice or Triton) or kserve_http (KServe v2
	// HTTP servers, for the proxy only).
	Kind string `yaml:"kind"`
	// Endpoints are host:port addresses (kserve_grpc and kserve_http).
	Endpoints []string `yaml:"endpoints"`
	// LoadBalancing is least_request (P2C, Envoy LEAST_REQUEST with choice_count 2), the only policy. Default least_request.
	LoadBalancing string `yaml:"load_balancing"`
	// HealthCheck is the active health check (KServe v2 ready).
	HealthCheck HealthCheck `yaml:"health_check"`
	// OutlierDetection ejects failing endpoints.
	OutlierDetection OutlierDetection `yaml:"outlier_detection"`
	// TLS connects to the endpoints over TLS (mTLS with cert_file).
	TLS *ClientTLS `yaml:"tls"`
}

// HealthCheck is an active health check.
type HealthCheck struct {
	// Interval between checks. Default 5s.
	Interval Duration `yaml:"interval"`
	// Timeout of one check. Default 1s.
	Timeout Duration `yaml:"timeout"`
}

// OutlierDetection is Envoy's outlier detection, with the rules.
type OutlierDetection struct {
	// ErrorRatePercent of failed tries within Interval ejects an endpoint. Default 5.
	ErrorRatePercent float64 `yaml:"error_rate_percent"`
	// Interval is the rolling error-rate window. Default 10s.
	Interval Duration `yaml:"interval"`
	// MinRequestVolume is the number of tries within Interval below which
	// the error rate is not judged. Default 20.
	MinRequestVolume int `yaml:"min_request_volume"`
	// Consecutive503 is how many 503s (gRPC UNAVAILABLE) within Window eject an endpoint. Default 3.
	Consecutive503 int `yaml:"consecutive_503"`
	// Window is the sliding window of the 503 rule. Default 1m.
	Window Duration `yaml:"window"`
	// BaseEjectionTime is how long an ejection lasts (fixed). Default 30s.
	BaseEjectionTime Duration `yaml:"base_ejection_time"`
	// MaxEjectionPercent caps the share of endpoints ejected. Default 50.
	MaxEjectionPercent float64 `yaml:"max_ejection_percent"`
}

// LogSampling sets the share of requests logged in full.
type LogSampling struct {
	// SuccessPercent of successful requests, chosen by hash of the request id. Default 1.
	SuccessPercent *float64 `yaml:"success_percent"`
	// ErrorsPercent of failed requests. Default 100.
	ErrorsPercent *float64 `yaml:"errors_percent"`
}

// Duration is a time.Duration written as a Go duration string ("250ms", "1m").
// It is shared with the rollout controller's configuration.
type Duration = duration.Duration
