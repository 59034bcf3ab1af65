package feature

import "time"

// Entity is a feature store entity: something features describe (a user,
// a package), identified by one join key.
type Entity struct {
	Name      string
	JoinKey   string
	ValueType Type // a scalar: Int32, Int64, String or Bytes
	Tags      map[string]string
}

// Field is one column of a feature view's schema.
type Field struct {
	Name string
	Type Type
}

// SourceKind says where a view's rows come from.
type SourceKind uint8

// The source kinds.
const (
	SourceFile   SourceKind = iota + 1 // Parquet file(s)
	SourcePush                         // rows pushed over the API; BatchSource backs it offline
	SourceStream                       // events read from a NATS JetStream subject; BatchSource is its event log offline
)

// Source is a data source: a Parquet file (or folder of files) with an
// event timestamp column, or a push source.
type Source struct {
	Name                   string
	Kind                   SourceKind
	Path                   string            // file sources: a .parquet file or a folder of them, relative paths resolved against the repository
	S3EndpointOverride     string            // file sources at s3://: the S3-compatible endpoint (Feast's s3_endpoint_override)
	TimestampField         string            // event timestamp column
	CreatedTimestampColumn string            // optional tie-breaker column
	FieldMapping           map[string]string // source column -> feature/join key name
	BatchSource            string            // push and stream sources: the file source that backs it offline (optional)
	Stream                 *StreamSource     // stream sources only
}

// StreamSource is where a stream source's events come from: a NATS
// JetStream stream and subject carrying one JSON object per event, with
// the event time in the source's TimestampField and the entities' join
// keys and the aggregated columns as fields.
type StreamSource struct {
	URL     string // NATS server URL (default nats://127.0.0.1:4222)
	Stream  string // JetStream stream name
	Subject string // subject (or wildcard) the events are published on
	Format  string // "json"
	// Consumer is the durable consumer's name; every aggregator process
	// of the source binds to it, so they share the events.
	Consumer string
	// SequenceField is the batch source's column holding each event's
	// stream sequence number (the tie-breaker of last and the identity
	// that makes a replay idempotent); empty: the row's position.
	SequenceField string
}

// Aggregation is one feature of a stream feature view: Function over
// Column in the last Window (Feast's Aggregation).
type Aggregation struct {
	Name     string
	Column   string // empty for count: count the events
	Function string // count, sum, mean, min, max, last, stddev
	Window   time.Duration
}

// StreamView is what makes a view a stream feature view: its features
// are window aggregations over a stream source's events, kept as time
// tiles in the online store and combined at read time.
type StreamView struct {
	Tile            time.Duration // tile size; every window is a multiple of it
	AllowedLateness time.Duration // an event older than its arrival minus this is late
	LatePolicy      string        // "drop" (counted)
	Aggregations    []Aggregation // Schema[i] is Aggregations[i]
}

// StalePolicy says what an online read does with a value older than the
// view's TTL.
type StalePolicy uint8

// The stale-value policies.
const (
	StaleWithhold StalePolicy = iota // OUTSIDE_MAX_AGE with a null value (the default)
	StaleFlag                        // OUTSIDE_MAX_AGE with the value
)

// HotSubset is a view's hot entity subset: a few entities (e.g. top users)
// materialized separately with a shorter TTL and read first.
type HotSubset struct {
	// View is the name of the hot copy's storage view ("<view>__hot").
	View string
	// Keys are the hot entities' join key values, as written in the
	// definition (or loaded from a file named there).
	Keys []Value
	TTL  time.Duration
}

// View is a feature view: a set of features of the same entities, from
// one source, with a TTL that Sluice enforces online.
type View struct {
	Name        string
	Entities    []string // entity names, in key order
	Schema      []Field  // features only (join keys and timestamps excluded)
	TTL         time.Duration
	Online      bool
	Source      string
	Tags        map[string]string
	StalePolicy StalePolicy
	Hot         *HotSubset // nil when the view has no hot subset
	// Stream is set for stream feature views: Schema lists their
	// aggregation features, computed from tiles, never stored as rows.
	Stream *StreamView
}

// FeatureRef names some features of one view.
type FeatureRef struct { //nolint:revive // exported: the name is part of the package API used by registry, serving and offline; renaming is out of scope
	View     string
	Features []string // empty means all of the view's features
}

// Service is a feature service: a named set of features a model reads.
type Service struct {
	Name     string
	Features []FeatureRef
	Tags     map[string]string
}

// Position locates a definition in the repository's files.
type Position struct {
	File string
	Line int
}

// ViewState is what Sluice remembers about a view's data, kept as JSON in
// the online store's metadata under ViewStateName(view): materialization
// writes it, pushes refresh it, and serving reads it to enforce freshness.
type ViewState struct {
	// Watermark is the end of the last successful materialization window
	// (clamped to the time it ran), where the next incremental run starts.
	Watermark time.Time `json:"watermark"`
	// LastSuccess is when the last materialization or push that wrote the
	// view succeeded.
	LastSuccess time.Time `json:"last_success"`
	// NewestEventTS is the newest event timestamp written to the view.
	NewestEventTS time.Time `json:"newest_event_ts"`
	// Rows is how many rows the last run wrote.
	Rows int64 `json:"rows"`
	// Schema is the id (SchemaID.String) of the schema the last
	// materialization wrote rows with; empty before rows carried their
	// schema. An incremental run under another schema re-reads the
	// view's whole window, so rows of the old schema are rewritten.
	Schema string `json:"schema,omitempty"`
}

// ViewStateName is the metadata name of a view's ViewState.
func ViewStateName(view string) string { return "view_state/" + view }
