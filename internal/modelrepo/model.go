package modelrepo

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/batch"
	"github.com/sluice-ml/sluice/internal/batch/sequence"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// phase is where a model is in its life as a whole.
type phase uint8

const (
	phaseNotLoaded phase = iota // known, never asked to load
	phaseActive                 // should be loaded
	phaseUnloaded               // unloaded by the API
)

// model is one model name and what it serves.
type model struct {
	name string

	// opMu serializes loads, reloads and unloads of this model. It is held
	// across a whole load; requests never take it.
	opMu sync.Mutex

	// serving is the immutable set of versions requests run on; nil or
	// empty when nothing serves.
	serving atomic.Pointer[servingSet]

	mu      sync.Mutex // protects the fields below
	repo    string     // repository the model folder is in; "" when none
	phase   phase
	status  map[int64]*versionStatus // versions loading or failed
	reason  string                   // a failure not tied to a version
	stats   map[int64]*versionStats  // per serving version
	tmpDirs []string                 // folders holding file overrides
	// unloaded are the versions that served and were unloaded since,
	// without a load failure to show: requests for them answer "not at
	// ready state" as Triton's do, not "not found".
	unloaded map[int64]bool
}

// versionStatus is the index state of a version beyond "serving".
type versionStatus struct {
	loading bool
	reason  string // why the last load failed; "" when it did not
}

func newModel(name string) *model {
	return &model{
		name:     name,
		status:   map[int64]*versionStatus{},
		stats:    map[int64]*versionStats{},
		unloaded: map[int64]bool{},
	}
}

func (mdl *model) addTmpDir(dir string) {
	mdl.mu.Lock()
	defer mdl.mu.Unlock()
	mdl.tmpDirs = append(mdl.tmpDirs, dir)
}

// cleanTmpDirs removes the override folders no serving version came from.
func (mdl *model) cleanTmpDirs() {
	set := mdl.serving.Load()
	mdl.mu.Lock()
	var keep, drop []string
	for _, d := range mdl.tmpDirs {
		used := false
		for _, lv := range set.all() {
			used = used || lv.dir == d
		}
		if used {
			keep = append(keep, d)
		} else {
			drop = append(drop, d)
		}
	}
	mdl.tmpDirs = keep
	mdl.mu.Unlock()
	for _, d := range drop {
		_ = os.RemoveAll(d)
	}
}

// servingSet is an immutable set of loaded versions, ascending.
type servingSet struct {
	versions []*loaded
}

func (s *servingSet) all() []*loaded {
	if s == nil {
		return nil
	}
	return s.versions
}

func (s *servingSet) get(v int64) *loaded {
	for _, lv := range s.all() {
		if lv.version == v {
			return lv
		}
	}
	return nil
}

func (s *servingSet) latest() *loaded {
	if s == nil || len(s.versions) == 0 {
		return nil
	}
	return s.versions[len(s.versions)-1]
}

// inputSpec is one config input as requests must send it.
type inputSpec struct {
	name     string
	dtype    infer.DataType
	shape    infer.Shape // what clients send: -1 leads when the model batches
	reshape  infer.Shape // what the model gets, batch dim included; nil = shape
	optional bool
}

// loaded is one loaded version of a model: its config, its instances and
// the reference count that lets it drain.
type loaded struct {
	id       uint64 // unique per load in this manager; part of cache keys
	model    string
	version  int64
	vstr     string
	key      string // content key; an unchanged key means no reload is needed
	dir      string // the model folder it was loaded from
	cfg      *inferencepb.ModelConfig
	platform string
	label    string
	commit   string
	// loadedAt is when the version began to serve: set once, before the
	// serving set that holds it is published, and never changed (a
	// reload makes a new loaded).
	loadedAt time.Time
	client   infer.Signature // as model metadata shows it
	inputs   []inputSpec
	outputs  []string // config order
	// outShapes are the shapes clients get for the outputs whose config
	// has a reshape (config dims, batch dimension included); the model
	// produces the reshape's shape.
	outShapes map[string]infer.Shape
	labels    map[string][]string // output -> label_filename lines
	maxBatch  int64               // 0 = the model does not batch
	maxOutput int64               // the most output bytes one request may get

	instances []backend.Instance
	health    []backend.HealthReporter // the instances that report their health; fixed once loaded
	batcher   *batch.Batcher           // schedules requests onto the instances; nil for ensembles and sequence models
	// priorities maps request priorities onto the batcher's levels.
	priorities priorityMap
	seq        *sequence.Scheduler // the sequence batcher of a sequence_batching model; else nil
	obs        versionObservers
	stats      *versionStats // set when the version is published
	ens        *ensemble     // nil unless the model is an ensemble
	cached     bool          // response_cache is on and the server has a cache
	// cacheTooBig is set once a response did not fit the whole cache (the
	// warning is logged once per loaded version).
	cacheTooBig atomic.Bool

	mu      sync.Mutex // protects refs and retired
	refs    int
	retired bool
	drained chan struct{} // closed once retired with no references
}

// acquire takes a reference for one request. It fails once the version is
// retired, so a retired version's reference count can only fall.
func (lv *loaded) acquire() bool {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.retired {
		return false
	}
	lv.refs++
	return true
}

// release gives back a reference taken by acquire.
func (lv *loaded) release() {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	lv.refs--
	if lv.refs < 0 {
		panic("modelrepo: more releases than acquires")
	}
	if lv.refs == 0 && lv.retired {
		close(lv.drained)
	}
}

// retire stops new requests on the version; the returned channel closes
// when the last request in flight has finished.
func (lv *loaded) retire() <-chan struct{} {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if !lv.retired {
		lv.retired = true
		if lv.refs == 0 {
			close(lv.drained)
		}
	}
	return lv.drained
}

// closeInstances closes every instance. Call it only once drained.
func (lv *loaded) closeInstances() error {
	var errs []error
	for _, in := range lv.instances {
		if err := in.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	lv.instances = nil
	return errors.Join(errs...)
}

// versionStats are one version's statistics.
type versionStats struct {
	mu      sync.Mutex // protects s and batches
	s       ModelStats
	batches map[uint64]*BatchStats
}

func newVersionStats() *versionStats {
	return &versionStats{batches: map[uint64]*BatchStats{}}
}

func addDuration(d *Duration, t time.Duration) {
	d.Count++
	d.Ns += uint64(t.Nanoseconds())
}

// execTimes is one request's share of the execution it rode in.
type execTimes struct {
	queue, input, infer, output time.Duration
}

// success records a request a model executed: batch inferences (its batch
// size), its queue and compute times. Executions are counted apart, once
// per executed batch, by executed.
func (vs *versionStats) success(batch uint64, total time.Duration, t execTimes, now time.Time) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	vs.s.LastInference = now.UnixMilli()
	vs.s.InferenceCount += batch
	addDuration(&vs.s.Success, total)
	addDuration(&vs.s.Queue, t.queue)
	addDuration(&vs.s.ComputeInput, t.input)
	addDuration(&vs.s.ComputeInfer, t.infer)
	addDuration(&vs.s.ComputeOutput, t.output)
}

// executed records one execution of a batch of batchSize rows.
func (vs *versionStats) executed(batchSize uint64, input, infer, output time.Duration) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	vs.s.ExecutionCount++
	b := vs.batches[batchSize]
	if b == nil {
		b = &BatchStats{BatchSize: batchSize}
		vs.batches[batchSize] = b
	}
	addDuration(&b.ComputeInput, input)
	addDuration(&b.ComputeInfer, infer)
	addDuration(&b.ComputeOutput, output)
}

// ensembleSuccess records a request an ensemble served: its steps are
// counted by their own models, the ensemble counts one execution of the
// request's own batch size (at least 1), its whole run as compute time,
// as Triton reports ensembles (qa/L0_optional_input
// test_ensemble_all_inputs expects batch_stats {1: 2} after two batch-1
// requests, however the step batched them).
func (vs *versionStats) ensembleSuccess(batch uint64, total time.Duration, now time.Time) {
	vs.mu.Lock()
	vs.s.LastInference = now.UnixMilli()
	vs.s.InferenceCount += batch
	addDuration(&vs.s.Success, total)
	addDuration(&vs.s.ComputeInfer, total)
	vs.mu.Unlock()
	vs.executed(max(batch, 1), 0, total, 0)
}

// cacheHit records a request the response cache answered. As in Triton,
// it counts as a success but neither as an inference nor an execution.
func (vs *versionStats) cacheHit(total, lookup time.Duration, now time.Time) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	vs.s.LastInference = now.UnixMilli()
	addDuration(&vs.s.Success, total)
	addDuration(&vs.s.CacheHit, lookup)
}

// cacheMiss records a lookup that found nothing, with the time spent
// looking up and inserting the response.
func (vs *versionStats) cacheMiss(d time.Duration) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	addDuration(&vs.s.CacheMiss, d)
}

// fail records a failed request.
func (vs *versionStats) fail(total time.Duration) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	addDuration(&vs.s.Fail, total)
}

func (vs *versionStats) snapshot(name string, version int64) ModelStats {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	s := vs.s
	s.Name = name
	s.Version = strconv.FormatInt(version, 10)
	s.BatchStats = make([]BatchStats, 0, len(vs.batches))
	for _, b := range vs.batches {
		s.BatchStats = append(s.BatchStats, *b)
	}
	slices.SortFunc(s.BatchStats, func(a, b BatchStats) int {
		switch {
		case a.BatchSize < b.BatchSize:
			return -1
		case a.BatchSize > b.BatchSize:
			return 1
		}
		return 0
	})
	return s
}
