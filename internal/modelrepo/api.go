package modelrepo

import (
	"time"

	"github.com/sluice-ml/sluice/internal/infer"
)

// State is a model version's lifecycle state, named as in Triton's
// repository index.
type State string

// The lifecycle states.
const (
	StateUnknown     State = "UNKNOWN"
	StateReady       State = "READY"
	StateUnavailable State = "UNAVAILABLE"
	StateLoading     State = "LOADING"
	StateUnloading   State = "UNLOADING"
)

// TensorMeta is one input or output as clients see it in model metadata:
// the shape includes -1 for the batch dimension when the model batches.
type TensorMeta = infer.TensorSpec

// Metadata is a model's KServe v2 metadata plus Sluice's provenance.
type Metadata struct {
	Name     string
	Versions []string // ready versions, ascending
	Platform string
	Inputs   []TensorMeta
	Outputs  []TensorMeta
	// Label is the provenance version from model_config.json (e.g.
	// "2.1.0-a1b2c3d"); GitCommit likewise. Both may be empty.
	Label     string
	GitCommit string
	// LoadedAt is when the version began to serve (this load of it).
	LoadedAt time.Time
}

// IndexEntry is one row of the repository index.
type IndexEntry struct {
	Name    string
	Version string // empty for a model with no version known
	State   State
	// Reason says why the version is not READY. On a READY entry it is
	// empty, or a warning: a reload that failed (the previous load keeps
	// serving) or a repository that cannot be read.
	Reason string
	// LoadedAt is when the version began to serve; zero unless a load of
	// it serves (READY, or UNAVAILABLE with every instance down).
	LoadedAt time.Time
}

// Duration is a count of events and their total time in nanoseconds, as in
// Triton's statistics extension.
type Duration struct {
	Count uint64
	Ns    uint64
}

// BatchStats are the execution statistics of one batch size.
type BatchStats struct {
	BatchSize     uint64
	ComputeInput  Duration
	ComputeInfer  Duration
	ComputeOutput Duration
}

// ModelStats are one model version's statistics (Triton's statistics
// extension).
type ModelStats struct {
	Name           string
	Version        string
	LastInference  int64 // milliseconds since the epoch; 0 = never
	InferenceCount uint64
	ExecutionCount uint64
	Success        Duration
	Fail           Duration
	Queue          Duration
	ComputeInput   Duration
	ComputeInfer   Duration
	ComputeOutput  Duration
	// CacheHit counts the requests the response cache answered and the
	// time spent looking them up; CacheMiss the requests it could not
	// answer and the time spent looking up and inserting their responses.
	// Both stay zero for a model without response_cache.
	CacheHit   Duration
	CacheMiss  Duration
	BatchStats []BatchStats
}

// UnloadOptions are the options of a repository unload request.
type UnloadOptions struct {
	UnloadDependents bool
}
