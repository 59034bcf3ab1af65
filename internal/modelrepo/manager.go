package modelrepo

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/batch"
	"github.com/sluice-ml/sluice/internal/batch/sequence"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/objstore"
)

// ControlMode is Triton's --model-control-mode.
type ControlMode string

// The control modes.
const (
	// ControlNone loads every model at start; the load and unload API is
	// refused.
	ControlNone ControlMode = "none"
	// ControlPoll loads every model at start and rescans the repositories
	// every PollInterval; the load and unload API is refused.
	ControlPoll ControlMode = "poll"
	// ControlExplicit loads only Options.StartupModels at start, then
	// follows the load and unload API.
	ControlExplicit ControlMode = "explicit"
)

// DefaultPollInterval is the poll interval when Options.PollInterval is 0
// (Triton's --repository-poll-secs default).
const DefaultPollInterval = config.DefaultRepositoryPollInterval

// maxParallelLoads bounds how many versions load at once (Triton's
// --model-load-thread-count default).
const maxParallelLoads = 4

// Options configure a Manager.
type Options struct {
	// Repositories are the model repository folders (--model-repository,
	// may repeat), or object-storage locations in Triton's forms
	// (s3://bucket/path, s3://https://host:port/bucket/path, gs://bucket/path,
	// as://account/container/path), served from a local copy.
	Repositories []string
	// RemoteCacheDir holds the local copies of object-storage
	// repositories (--repository-cache-dir); empty means the user cache
	// folder's sluice/model-repositories.
	RemoteCacheDir string
	// RemoteCacheBytes bounds each local copy (--repository-cache-bytes);
	// a repository that holds more is refused. 0 means
	// DefaultRemoteCacheBytes.
	RemoteCacheBytes int64
	// Getenv reads credentials and emulator settings for object storage;
	// os.Getenv when nil.
	Getenv func(string) string
	// ControlMode is none (the default when empty), poll or explicit.
	ControlMode ControlMode
	// StartupModels are the models to load at start in explicit mode
	// (--load-model); "*", given alone, loads all. Other modes ignore it.
	StartupModels []string
	// PollInterval is the rescan interval in poll mode
	// (--repository-poll-secs); 0 means DefaultPollInterval.
	PollInterval time.Duration
	// StrictConfig requires config.pbtxt and turns auto-complete off
	// (--strict-model-config).
	StrictConfig bool
	// ExitOnError makes Start fail when any model fails to load
	// (--exit-on-error).
	ExitOnError bool
	// ExpectedCommits maps model names to the git commit their versions
	// must have been built from (--model-git-commit name=sha). It wins over
	// the repository pin file <repo>/<model>/expected_git_commit.
	ExpectedCommits map[string]string
	// StrictReadiness makes Ready require every model that should be
	// loaded to have a ready version (Triton's --strict-readiness; the
	// server's flag defaults to true).
	StrictReadiness bool
	// CacheSizeBytes is the size of the response cache shared by every
	// model with response_cache { enable: true } (--cache-size). 0 means
	// no cache: such models serve uncached.
	CacheSizeBytes int64
	// DisableTritonMetrics leaves out the nv_inference_* series that
	// Sluice exports under Triton's names next to its own
	// (--triton-metrics=false).
	DisableTritonMetrics bool
	// HoldSchedulerUntil is Triton's TRITONSERVER_DELAY_SCHEDULER test
	// hook: each version's batcher sends nothing until this many
	// requests are queued (batch.Options.HoldUntilQueued; the sequence
	// batcher's sequence.Options.HoldUntilQueued). 0 turns it off.
	HoldSchedulerUntil int
	// HoldBacklogUntil is TRITONSERVER_BACKLOG_DELAY_SCHEDULER: with
	// HoldSchedulerUntil, each sequence batcher also waits until this
	// many requests of backlogged sequences are queued
	// (sequence.Options.HoldUntilBacklogged).
	HoldBacklogUntil int
	// MaxOutputBytes is the most output bytes one request may get from a
	// model whose config sets no max_output_bytes parameter
	// (--max-output-bytes); larger outputs are refused with 413
	// response_too_large. 0 means DefaultMaxOutputBytes.
	MaxOutputBytes int64
}

// Manager owns the models of the repositories: it loads, swaps, drains and
// unloads them and runs inference requests on them. Its methods are safe
// for concurrent use.
type Manager struct {
	opts      Options
	backends  *backend.Registry
	logger    *slog.Logger
	metrics   *metrics
	loadSlots chan struct{}  // one token per concurrent version load
	cache     *responseCache // nil when CacheSizeBytes is 0
	// batchMetrics are shared by the batchers of every version.
	batchMetrics *batch.Metrics
	// seqMetrics are shared by the sequence batchers of every version.
	seqMetrics *sequence.Metrics
	loadIDs    atomic.Uint64 // source of loaded.id

	// stopCtx is cancelled by Close, which aborts loads in progress.
	stopCtx context.Context
	stop    context.CancelFunc

	mu      sync.Mutex                        // protects writes to models, repoErr and removed
	models  atomic.Pointer[map[string]*model] // copied on write
	repoErr map[string]string                 // repository -> why it is unreadable
	// removed names the models a poll unloaded because their folder left
	// the repository, until a folder of that name returns: requests for
	// them answer as Triton's do for an unloaded model.
	removed map[string]bool

	// remotes are the object-storage repositories, by the folder of
	// their local copy (which stands for them in opts.Repositories).
	remotes map[string]*mirror
	// repoNames maps a repository folder to the name users gave it.
	repoNames map[string]string

	pollMu    sync.Mutex            // serializes Start and polls; protects pollState
	pollState map[string]pollRecord // model name -> what polls have seen

	started atomic.Bool
	closed  atomic.Bool
	bg      sync.WaitGroup // drains that outlived the call that retired them
}

// pollRecord is what the polls have seen of one model folder.
type pollRecord struct {
	applied string // content key last handed to a load
	pending string // content key seen by the last poll, waiting to be stable
}

// New builds a Manager. Nothing is read or loaded until Start. A nil
// logger discards logs; a nil registerer registers no metrics.
func New(opts Options, backends *backend.Registry, logger *slog.Logger, reg prometheus.Registerer) (*Manager, error) {
	if backends == nil {
		return nil, errors.New("no backend registry")
	}
	if len(opts.Repositories) == 0 {
		return nil, errors.New("no model repository given")
	}
	switch opts.ControlMode {
	case "":
		opts.ControlMode = ControlNone
	case ControlNone, ControlPoll, ControlExplicit:
	default:
		return nil, fmt.Errorf("unknown model control mode %q (want none, poll or explicit)", opts.ControlMode)
	}
	if slices.Contains(opts.StartupModels, "*") && len(opts.StartupModels) > 1 {
		return nil, errors.New(`--load-model=* must be the only --load-model`)
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.CacheSizeBytes < 0 {
		return nil, fmt.Errorf("cache size %d bytes is negative", opts.CacheSizeBytes)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.RemoteCacheBytes == 0 {
		opts.RemoteCacheBytes = DefaultRemoteCacheBytes
	}
	// As in Triton, a repository named twice is one repository, not two
	// holding the same models.
	var repos []string
	remotes := map[string]*mirror{}
	names := map[string]string{}
	for _, r := range opts.Repositories {
		name := r
		if objstore.IsURI(r) {
			mr, err := openMirror(r, opts, logger)
			if err != nil {
				for _, o := range remotes {
					_ = o.close()
				}
				return nil, err
			}
			if remotes[mr.tree] != nil {
				_ = mr.close()
				continue
			}
			remotes[mr.tree] = mr
			r = mr.tree
		} else {
			r = filepath.Clean(r)
			name = r
		}
		if !slices.Contains(repos, r) {
			repos = append(repos, r)
			names[r] = name
		}
	}
	opts.Repositories = repos
	opts.StartupModels = slices.Clone(opts.StartupModels)
	commits := make(map[string]string, len(opts.ExpectedCommits))
	maps.Copy(commits, opts.ExpectedCommits)
	opts.ExpectedCommits = commits
	stopCtx, stop := context.WithCancel(context.Background())
	m := &Manager{
		opts:         opts,
		backends:     backends,
		logger:       logger.With("component", "modelrepo"),
		metrics:      newMetrics(reg, !opts.DisableTritonMetrics),
		batchMetrics: batch.NewMetrics(reg),
		seqMetrics:   sequence.NewMetrics(reg),
		loadSlots:    make(chan struct{}, maxParallelLoads),
		stopCtx:      stopCtx,
		stop:         stop,
		repoErr:      map[string]string{},
		removed:      map[string]bool{},
		pollState:    map[string]pollRecord{},
		remotes:      remotes,
		repoNames:    names,
	}
	m.models.Store(&map[string]*model{})
	if opts.CacheSizeBytes > 0 {
		m.cache = newResponseCache(opts.CacheSizeBytes, m.metrics.cacheBytes, m.metrics.cacheEvictions)
	}
	if len(opts.StartupModels) > 0 && opts.ControlMode != ControlExplicit {
		// As in Triton, --load-model only takes effect in explicit mode.
		m.logger.Warn("models to load at start are ignored outside explicit mode", "models", opts.StartupModels, "mode", string(opts.ControlMode))
	}
	// Backends whose models call back into the server (a Python
	// model's BLS requests) get the manager to call.
	for _, be := range backends.Backends() {
		if c, ok := be.(backend.Caller); ok {
			c.SetServer(m)
		}
	}
	return m, nil
}

// scanRepositories syncs each remote repository and lists every
// repository's models, with the repositories each is found in, in the
// repositories' order.
func (m *Manager) scanRepositories(ctx context.Context) (map[string][]string, error) {
	found := map[string][]string{}
	for _, repo := range m.opts.Repositories {
		if _, err := m.syncRemote(ctx, repo); err != nil {
			m.repoDown(repo, err)
			return nil, fmt.Errorf("read model repository: %w", err)
		}
		names, err := listRepository(repo)
		if err != nil {
			m.repoDown(repo, err)
			return nil, fmt.Errorf("read model repository: %w", err)
		}
		m.repoUp(repo)
		for _, n := range names {
			found[n] = append(found[n], repo)
		}
	}
	return found, nil
}

// startupModels lists the models to load at start: all that were found,
// unless the control mode is explicit and the startup models do not say
// "*"; then those of them that were found, with an error for each that
// was not.
func (m *Manager) startupModels(found map[string][]string) ([]string, []error) {
	var want []string
	var errs []error
	if m.opts.ControlMode != ControlExplicit || slices.Contains(m.opts.StartupModels, "*") {
		for n := range found {
			want = append(want, n)
		}
		return want, nil
	}
	for _, n := range m.opts.StartupModels {
		if _, ok := found[n]; !ok {
			m.logger.Warn("model to load at start not found", "model", n, "repositories", m.opts.Repositories)
			errs = append(errs, fmt.Errorf("model '%s' not found in any model repository", n))
			continue
		}
		want = append(want, n)
	}
	return want, errs
}

// nextRound splits the models pending a load into those that can load
// now (round) and those waiting for a step model still pending (rest);
// when every one waits (ensembles naming each other), all load now.
func nextRound(pending []string, deps map[string][]string) (round, rest []string) {
	for _, name := range pending {
		waits := slices.ContainsFunc(deps[name], func(d string) bool { return d != name && slices.Contains(pending, d) })
		if waits {
			rest = append(rest, name)
		} else {
			round = append(round, name)
		}
	}
	if len(round) == 0 {
		return rest, nil
	}
	return round, rest
}

// Start scans the repositories and loads the models the control mode asks
// for, in parallel. A model that fails to load is marked UNAVAILABLE with
// its reason and does not stop the others. Start returns an error when a
// repository cannot be read, or, with ExitOnError, when any model failed.
func (m *Manager) Start(ctx context.Context) error {
	m.pollMu.Lock()
	defer m.pollMu.Unlock()
	if m.closed.Load() {
		return errors.New("model repository is closed")
	}
	found, err := m.scanRepositories(ctx)
	if err != nil {
		return err
	}
	want, errs := m.startupModels(found)
	sort.Strings(want)
	want = slices.Compact(want)
	deps := map[string][]string{} // ensemble -> the models its steps run
	for i := 0; i < len(want); i++ {
		name := want[i]
		steps, ok := ensembleSteps(filepath.Join(found[name][0], name))
		if !ok {
			continue
		}
		deps[name] = steps
		if m.opts.ControlMode != ControlExplicit {
			continue
		}
		// As in Triton, loading an ensemble loads the models it runs.
		for _, st := range steps {
			if _, ok := found[st]; ok && !slices.Contains(want, st) {
				want = append(want, st)
			}
		}
	}

	var mu sync.Mutex // protects errs
	// Models load in rounds: a model waits for the models its steps run,
	// so that an ensemble's graph is checked against loaded step models.
	// A round where nothing can start (ensembles naming each other) loads
	// what is left.
	pending := want
	for len(pending) > 0 {
		round, rest := nextRound(pending, deps)
		var wg sync.WaitGroup
		for _, name := range round {
			mdl := m.ensureModel(name)
			src := m.sourceFor(name, found[name])
			wg.Go(func() {
				key := ""
				if fp, err := m.fingerprint(src); err == nil {
					src.fp = fp
					key = src.key()
				}
				fails := m.reconcile(ctx, mdl, src, false)
				mu.Lock()
				defer mu.Unlock()
				m.pollState[name] = pollRecord{applied: key}
				for _, f := range fails {
					errs = append(errs, f)
				}
			})
		}
		wg.Wait()
		pending = rest
	}
	m.started.Store(true)
	if m.opts.ExitOnError && len(errs) > 0 {
		return fmt.Errorf("load models: %w", errors.Join(errs...))
	}
	return nil
}

// Run rescans the repositories every PollInterval in poll mode, until ctx
// is done. In the other modes it only waits for ctx. It returns nil.
func (m *Manager) Run(ctx context.Context) error {
	if m.opts.ControlMode != ControlPoll {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(m.opts.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			m.pollOnce(ctx)
		}
	}
}

// Poll rescans the repositories now, as a poll tick does (SIGHUP asks for
// it). Outside poll mode it does nothing: the repository changes only
// through the repository API there.
func (m *Manager) Poll(ctx context.Context) error {
	if m.opts.ControlMode == ControlPoll {
		m.pollOnce(ctx)
	}
	return nil
}

// pollOnce rescans every repository and loads what changed. A model folder
// whose content changed loads once two consecutive polls see the same
// content; new folders load, removed folders unload. A repository that
// cannot be read gives no information: its models are left as they are.
// pollOnce returns when the loads it started are done.
func (m *Manager) pollOnce(ctx context.Context) {
	m.pollMu.Lock()
	defer m.pollMu.Unlock()
	if m.closed.Load() {
		return
	}
	found := map[string][]string{}
	readable := map[string]bool{}
	settled := map[string]bool{} // remote model folders that held still
	for _, repo := range m.opts.Repositories {
		changed, err := m.syncRemote(ctx, repo)
		if err != nil {
			m.repoDown(repo, err)
			continue
		}
		for _, n := range changed {
			settled[n] = true
		}
		names, err := listRepository(repo)
		if err != nil {
			m.repoDown(repo, err)
			continue
		}
		m.repoUp(repo)
		readable[repo] = true
		for _, n := range names {
			found[n] = append(found[n], repo)
		}
	}

	var wg sync.WaitGroup
	for name, repos := range found {
		src := m.sourceFor(name, repos)
		fp, err := m.fingerprint(src)
		if err != nil {
			// Probably changing under us; the next poll will tell.
			m.logger.Debug("model folder not fingerprinted", "model", name, "err", err)
			continue
		}
		src.fp = fp
		key := src.key()
		rec := m.pollState[name]
		if settled[name] && m.remotes[src.repo] != nil {
			// The copy of a remote folder changes only once its listing
			// held still: no need to wait for a second poll.
			rec.pending = key
		}
		switch {
		case key == rec.applied:
			rec.pending = ""
		case key != rec.pending:
			rec.pending = key // changed: wait until it is stable
		default:
			rec = pollRecord{applied: key}
			mdl := m.ensureModel(name)
			wg.Go(func() { m.reconcile(ctx, mdl, src, false) })
		}
		m.pollState[name] = rec
	}
	for name, mdl := range *m.models.Load() {
		if _, ok := found[name]; ok {
			continue
		}
		mdl.mu.Lock()
		repo := mdl.repo
		mdl.mu.Unlock()
		if repo == "" || !readable[repo] {
			continue // unreadable now: no information, keep serving
		}
		delete(m.pollState, name)
		wg.Go(func() { m.removeModel(ctx, mdl) })
	}
	wg.Wait()
}

// repoDown records that a repository could not be read.
func (m *Manager) repoDown(repo string, err error) {
	name := m.repoName(repo)
	m.metrics.repoUp.WithLabelValues(name).Set(0)
	m.metrics.repoErrors.WithLabelValues(name).Inc()
	m.mu.Lock()
	first := m.repoErr[repo] == ""
	m.repoErr[repo] = err.Error()
	m.mu.Unlock()
	if first {
		m.logger.Warn("model repository unreadable; its models keep serving", "repository", name, "err", err)
	}
}

// repoUp records that a repository was read.
func (m *Manager) repoUp(repo string) {
	name := m.repoName(repo)
	m.metrics.repoUp.WithLabelValues(name).Set(1)
	m.mu.Lock()
	was := m.repoErr[repo]
	delete(m.repoErr, repo)
	m.mu.Unlock()
	if was != "" {
		m.logger.Info("model repository readable again", "repository", name)
	}
}

// repoName returns the name users gave a repository: its object-storage
// location for a remote one, else its folder.
func (m *Manager) repoName(repo string) string {
	if n := m.repoNames[repo]; n != "" {
		return n
	}
	return repo
}

// sourceFor describes where a model found in repos loads from.
func (m *Manager) sourceFor(name string, repos []string) modelSource {
	src := modelSource{repo: repos[0], dir: filepath.Join(repos[0], name)}
	src.pinDir = src.dir
	if len(repos) > 1 {
		shown := make([]string, len(repos))
		for i, r := range repos {
			shown[i] = m.repoName(r)
		}
		src.dupErr = fmt.Errorf("model '%s' is in more than one model repository (%s); remove all but one", name, strings.Join(shown, ", "))
	}
	return src
}

// lookup returns the model named name, or nil.
func (m *Manager) lookup(name string) *model {
	return (*m.models.Load())[name]
}

// ensureModel returns the model named name, creating it if needed.
func (m *Manager) ensureModel(name string) *model {
	if mdl := m.lookup(name); mdl != nil {
		return mdl
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := *m.models.Load()
	if mdl := cur[name]; mdl != nil {
		return mdl
	}
	next := make(map[string]*model, len(cur)+1)
	maps.Copy(next, cur)
	mdl := newModel(name)
	next[name] = mdl
	m.models.Store(&next)
	delete(m.removed, name)
	return mdl
}

// dropModel forgets a model entirely.
func (m *Manager) dropModel(mdl *model) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := *m.models.Load()
	if cur[mdl.name] != mdl {
		return
	}
	next := make(map[string]*model, len(cur))
	for k, v := range cur {
		if k != mdl.name {
			next[k] = v
		}
	}
	m.models.Store(&next)
}

// sortedModels returns the models sorted by name.
func (m *Manager) sortedModels() []*model {
	cur := *m.models.Load()
	out := make([]*model, 0, len(cur))
	for _, mdl := range cur {
		out = append(out, mdl)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// Live reports whether the server is live: true until Close.
func (m *Manager) Live() bool { return !m.closed.Load() }

// Ready reports whether the server is ready: Start has finished, Close has
// not begun and, with StrictReadiness, every model that should be loaded
// has at least one ready version.
func (m *Manager) Ready() bool {
	if !m.started.Load() || m.closed.Load() {
		return false
	}
	if !m.opts.StrictReadiness {
		return true
	}
	for _, mdl := range *m.models.Load() {
		mdl.mu.Lock()
		active := mdl.phase == phaseActive
		mdl.mu.Unlock()
		if active && !m.servable(mdl) {
			return false
		}
	}
	return true
}

// servable reports whether a model has a version that can serve now.
func (m *Manager) servable(mdl *model) bool {
	for _, lv := range mdl.serving.Load().all() {
		if lv.ens == nil || m.ensembleReason(lv, 0) == "" {
			return true
		}
	}
	return false
}

// ensembleSteps reads a model folder's config and, when the model is an
// ensemble, returns the models its steps run. A config that cannot be
// read is left for the load to report.
func ensembleSteps(dir string) ([]string, bool) {
	data, err := os.ReadFile(filepath.Join(dir, configFile))
	if err != nil {
		return nil, false
	}
	cfg, _, err := modelconfig.Parse(configFile, data)
	if err != nil || !isEnsemble(cfg) {
		return nil, false
	}
	return stepModels(cfg), true
}

// Load loads or reloads a model (explicit mode only). The new versions
// load beside what serves now and are swapped in atomically, so a reload
// never drops a request. opts.Config replaces config.pbtxt; opts.Files
// replace the model folder's files (and need opts.Config). A failed load
// leaves what served before serving and returns why. Loading an ensemble
// first loads the models its steps run that are not loaded (as Triton
// does); one that fails leaves the ensemble UNAVAILABLE and is returned.
func (m *Manager) Load(ctx context.Context, name string, opts LoadOptions) error {
	if err := m.controlAllowed(); err != nil {
		return err
	}
	return m.load(ctx, name, opts, map[string]bool{})
}

// load is Load; visiting holds the ensembles whose step models are being
// loaded, so that ensembles naming each other end.
func (m *Manager) load(ctx context.Context, name string, opts LoadOptions, visiting map[string]bool) error {
	if err := checkModelName(name); err != nil {
		return err
	}
	if err := opts.Check(name); err != nil {
		return err
	}
	// As Triton does, a load reads the repositories again; a remote one
	// that cannot be read loads from its local copy.
	for repo := range m.remotes {
		if _, err := m.syncRemote(ctx, repo); err != nil {
			m.repoDown(repo, err)
		}
	}
	repos := m.findModel(name)
	if len(repos) == 0 && len(opts.Files) == 0 {
		return apierr.Errorf(apierr.KindNotFound, ReasonModelNotFound, "failed to load '%s', failed to poll from model repository: model '%s' not found in any model repository", name, name)
	}
	var src modelSource
	if len(repos) > 0 {
		src = m.sourceFor(name, repos)
	}
	src.override = opts.Config
	var steps []string
	if opts.Config != nil && isEnsemble(opts.Config) {
		steps = stepModels(opts.Config)
	} else if opts.Config == nil && len(repos) > 0 {
		steps, _ = ensembleSteps(src.dir)
	}
	var depErr *apierr.Error
	visiting[name] = true
	for _, st := range steps {
		if visiting[st] || st == name {
			continue
		}
		if dep := m.lookup(st); dep != nil && m.active(dep) {
			continue
		}
		if len(m.findModel(st)) == 0 {
			continue // the ensemble's load says the step model is unknown
		}
		if err := m.load(ctx, st, LoadOptions{}, visiting); err != nil && depErr == nil {
			depErr = apierr.Errorf(apierr.KindInvalid, ReasonLoadFailed, "load model '%s': step model '%s' did not load: %s", name, st, oneLine(err.Error()))
		}
	}
	mdl := m.ensureModel(name)
	if len(opts.Files) > 0 {
		dir, err := writeOverrideFiles(name, opts.Files)
		if err != nil {
			return apierr.Errorf(apierr.KindInvalid, ReasonInvalidLoadRequest, "failed to load '%s': %v", name, err)
		}
		mdl.addTmpDir(dir)
		src.dir, src.dupErr = dir, nil
	}
	if fails := m.reconcile(ctx, mdl, src, true); len(fails) > 0 {
		e := fails[0].clientError()
		for _, f := range fails[1:] {
			e.Msg += "; " + oneLine(f.Error())
		}
		e.Msg = m.showRemotePaths(e.Msg)
		return e
	}
	if depErr != nil {
		return depErr
	}
	return nil
}

// active reports whether a model should be loaded and has something
// serving.
func (m *Manager) active(mdl *model) bool {
	mdl.mu.Lock()
	phase := mdl.phase
	mdl.mu.Unlock()
	return phase == phaseActive && mdl.serving.Load().latest() != nil
}

// Unload unloads every version of a model (explicit mode only), after the
// requests in flight on them finish (bounded by ctx; past it, they finish
// in the background). With UnloadDependents, unloading an ensemble also
// unloads the models its steps run, except those another loaded ensemble
// still runs (Triton's unload_dependents).
func (m *Manager) Unload(ctx context.Context, name string, opts UnloadOptions) error {
	if err := m.controlAllowed(); err != nil {
		return err
	}
	return m.unload(ctx, name, opts, map[string]bool{})
}

// unload is Unload; done holds the models already unloaded by this call.
func (m *Manager) unload(ctx context.Context, name string, opts UnloadOptions, done map[string]bool) error {
	done[name] = true
	mdl := m.lookup(name)
	if mdl == nil {
		// Never loaded, known or not: nothing to do, and Triton answers
		// success for that too (qa/L0_lifecycle unloads models that are
		// not in any repository).
		return nil
	}
	var steps []string
	for _, lv := range mdl.serving.Load().all() {
		if lv.ens != nil {
			for _, st := range stepModels(lv.cfg) {
				if !slices.Contains(steps, st) {
					steps = append(steps, st)
				}
			}
		}
	}
	m.unloadModel(ctx, mdl)
	if !opts.UnloadDependents {
		return nil
	}
	var errs []error
	for _, st := range steps {
		if done[st] || m.lookup(st) == nil || m.usedByEnsemble(st) {
			continue
		}
		if err := m.unload(ctx, st, opts, done); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// usedByEnsemble reports whether a serving ensemble runs the model.
func (m *Manager) usedByEnsemble(name string) bool {
	for _, mdl := range *m.models.Load() {
		for _, lv := range mdl.serving.Load().all() {
			if lv.ens != nil && slices.Contains(stepModels(lv.cfg), name) {
				return true
			}
		}
	}
	return false
}

// controlAllowed refuses the load and unload API outside explicit mode.
func (m *Manager) controlAllowed() error {
	if m.closed.Load() {
		return apierr.Errorf(apierr.KindUnavailable, ReasonShuttingDown, "server is shutting down")
	}
	switch m.opts.ControlMode {
	case ControlExplicit:
		return nil
	case ControlPoll:
		return apierr.Errorf(apierr.KindUnsupported, ReasonControlDisabled, "explicit model load / unload is not allowed if polling is enabled")
	default:
		// Triton answers with its polling words in mode none too, and its
		// QA looks for them (qa/L0_http python_http_aio_test.py
		// test_load_model, test_unload_model): ours, then Triton's.
		return apierr.Errorf(apierr.KindUnsupported, ReasonControlDisabled, "explicit model load / unload is not allowed in model control mode 'none' (Triton: explicit model load / unload is not allowed if polling is enabled)")
	}
}

// checkModelName rejects names that are not a single folder name.
func checkModelName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return apierr.Errorf(apierr.KindInvalid, ReasonInvalidLoadRequest, "invalid model name %q", name)
	}
	return nil
}

// findModel returns the readable repositories holding a folder named name.
func (m *Manager) findModel(name string) []string {
	if checkModelName(name) != nil {
		return nil
	}
	var repos []string
	for _, repo := range m.opts.Repositories {
		if fi, err := os.Stat(filepath.Join(repo, name)); err == nil && fi.IsDir() {
			repos = append(repos, repo)
		}
	}
	return repos
}

// writeOverrideFiles lays out a load request's files as a model folder in
// a new temporary folder.
func writeOverrideFiles(name string, files map[string][]byte) (string, error) {
	for rel := range files {
		if !filepath.IsLocal(filepath.FromSlash(rel)) || strings.Contains(rel, `\`) {
			return "", fmt.Errorf("file override 'file:%s' is not a relative path inside the model folder", shortName(rel))
		}
	}
	dir, err := os.MkdirTemp("", "sluice-model-"+name+"-")
	if err != nil {
		return "", fmt.Errorf("create folder for file overrides: %w", err)
	}
	// The client's words, never the server's folder: an error names the
	// file as the request did (a too-long name would otherwise show the
	// temporary path in the answer).
	fail := func(rel string, err error) (string, error) {
		_ = os.RemoveAll(dir)
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			err = pe.Err
		}
		return "", fmt.Errorf("write file override 'file:%s': %w", shortName(rel), err)
	}
	for rel, data := range files {
		path := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return fail(rel, err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return fail(rel, err)
		}
	}
	return dir, nil
}

// Close unloads every model, letting requests in flight finish first, and
// cancels loads in progress. It waits at most until ctx is done; requests
// still running then finish in the background before their instances
// close.
func (m *Manager) Close(ctx context.Context) error {
	if !m.closed.CompareAndSwap(false, true) {
		return nil
	}
	m.stop()
	for _, mdl := range m.sortedModels() {
		m.unloadModel(ctx, mdl)
	}
	for _, mr := range m.remotes {
		_ = mr.close()
	}
	done := make(chan struct{})
	go func() {
		m.bg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close model repository: requests still in flight: %w", context.Cause(ctx))
	}
}
