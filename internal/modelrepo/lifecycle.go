package modelrepo

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// modelSource says where one load of a model reads from.
type modelSource struct {
	repo     string                   // repository of the model folder; "" for file overrides only
	dir      string                   // folder holding config.pbtxt and the version folders
	pinDir   string                   // the repository's model folder, for expected_git_commit
	override *inferencepb.ModelConfig // replaces config.pbtxt when set
	fp       fingerprint              // content of dir; computed by the load when empty
	dupErr   error                    // the name is in more than one repository
}

// key identifies what a poll saw of the source.
func (s modelSource) key() string {
	k := s.dir + "\x00" + s.fp.model
	if s.dupErr != nil {
		k += "\x00" + s.dupErr.Error()
	}
	return k
}

// duplicateReason is the index reason of a model in more than one
// repository: Triton's words, which its clients compare whole
// (qa/L0_lifecycle/lifecycle_test.py test_model_repository_index); the
// repositories are in the log and the load error.
const duplicateReason = "model appears in two or more repositories"

// plan is what one load of a model decided before loading versions.
type plan struct {
	name         string
	src          modelSource
	base         *inferencepb.ModelConfig // parsed, defaults applied, not auto-completed
	cfgSrc       *modelconfig.Source
	autoComplete bool
	be           backend.Backend
	platform     string
	versions     []int64 // to load, ascending
	missing      []int64 // named by a specific policy, not on disk
	expected     string  // git commit the versions must have; "" = any
	keyPrefix    string
	ensemble     bool // the model runs other models; be is nil
}

// key is the content key of one version under this plan.
func (p *plan) key(v int64) string {
	return p.keyPrefix + ":" + p.src.fp.versions[v]
}

// plan reads a model's config, picks its backend and the versions to load.
func (m *Manager) plan(name string, src modelSource) (*plan, *loadError) {
	fail := func(cause string, err error) (*plan, *loadError) {
		return nil, newLoadError(name, 0, cause, err)
	}
	if src.dupErr != nil {
		return fail(causeDuplicate, src.dupErr)
	}
	if src.fp.model == "" {
		fp, err := m.fingerprint(src)
		if err != nil {
			return fail(causeUnreadable, err)
		}
		src.fp = fp
	}
	p := &plan{name: name, src: src, autoComplete: !m.opts.StrictConfig}
	if err := m.readConfig(p); err != nil {
		return fail(causeConfig, err)
	}
	if n := p.base.GetName(); n != "" && n != name {
		return fail(causeConfig, modelconfig.Error{
			Pos: p.cfgSrc.Pos("name"),
			Msg: fmt.Sprintf("name '%s' does not match the model folder '%s'", n, name),
		})
	}
	modelconfig.ApplyDefaults(p.base, name)
	if p.base.GetResponseCache().GetEnable() && p.base.GetModelTransactionPolicy().GetDecoupled() {
		// Triton's words: qa/L0_response_cache test.sh greps for them.
		return fail(causeConfig, fmt.Errorf("response cache does not currently support model '%s' with 'decoupled' transaction policy", name))
	}

	avail, err := versionDirs(src.dir)
	if err != nil {
		return fail(causeUnreadable, err)
	}
	for _, note := range ignoredVersionDirs(src.dir) {
		m.logger.Warn("folder is not a version", "model", name, "detail", note)
	}
	if isEnsemble(p.base) {
		if p.base.GetModelTransactionPolicy().GetDecoupled() {
			// As Triton, which sets an ensemble's policy from its steps:
			// an ensemble is decoupled when it runs a decoupled step.
			m.logger.Info("model_transaction_policy { decoupled: true } of an ensemble is ignored: an ensemble is decoupled when it runs a decoupled step", "model", name)
			p.base.ModelTransactionPolicy = nil
		}
		p.ensemble = true
		p.platform = platformEnsemble
		if len(avail) == 0 {
			// An ensemble has no files of its own; Triton still wants an
			// empty version folder, Sluice takes its absence as version 1.
			avail = []int64{1}
		}
		p.versions, p.missing = selectVersions(p.base.GetVersionPolicy(), avail)
		p.keyPrefix = m.planKey(p)
		return p, nil
	}
	be, err := pickBackend(m.backends, m.opts.StrictConfig, p.base, src.dir, avail)
	if err != nil {
		return fail(causeBackend, err)
	}
	if err := m.applyBackend(p, be); err != nil {
		return fail(causeConfig, err)
	}

	p.versions, p.missing = selectVersions(p.base.GetVersionPolicy(), avail)
	if len(p.versions) == 0 && len(p.missing) == 0 {
		return fail(causeNoVersions, fmt.Errorf("no version folder in %s (version folders are named 1, 2, ...)", src.dir))
	}

	p.expected = m.opts.ExpectedCommits[name]
	if p.expected == "" {
		pin, err := readPin(src.pinDir)
		if err != nil {
			return fail(causeConfig, err)
		}
		p.expected = pin
	}

	p.keyPrefix = m.planKey(p)
	return p, nil
}

// readConfig sets p.base (and p.cfgSrc) from the model's config.pbtxt,
// the override given for it, or, when there is no file and the config is
// not strict, an empty config to auto-complete.
func (m *Manager) readConfig(p *plan) error {
	src := p.src
	cfgPath := filepath.Join(src.dir, configFile)
	switch data, err := os.ReadFile(cfgPath); {
	case src.override != nil:
		p.base = proto.CloneOf(src.override)
	case errors.Is(err, fs.ErrNotExist):
		if m.opts.StrictConfig {
			// Triton's words first: its QA greps the log for them.
			return fmt.Errorf("failed to open text file for read %s: No such file or directory (config.pbtxt is required with --strict-model-config)", cfgPath)
		}
		p.base = &inferencepb.ModelConfig{}
	case err != nil:
		return err
	default:
		cfg, cs, err := modelconfig.Parse(cfgPath, data)
		if err != nil {
			return configErr(err)
		}
		p.base, p.cfgSrc = cfg, cs
	}
	return nil
}

// applyBackend sets the plan's backend and platform and completes the
// config with them: the backend always and, with auto-complete, the
// platform and the model file name. A decoupled model needs a backend
// that can stream.
func (m *Manager) applyBackend(p *plan, be backend.Backend) error {
	p.be = be
	if p.base.GetModelTransactionPolicy().GetDecoupled() {
		// Refused, not ignored, where the backend cannot stream: a
		// client of a decoupled model waits for any number of responses
		// and the final flag.
		if d, ok := be.(backend.Decoupler); !ok || !d.Decoupled() {
			return modelconfig.Error{
				Pos: p.cfgSrc.Pos("model_transaction_policy.decoupled"),
				Msg: fmt.Sprintf("model_transaction_policy { decoupled: true } is not supported by the %s backend: it answers a request with exactly one response (only Python models may be decoupled)", be.Name()),
			}
		}
	}
	if p.base.GetBackend() == "" && p.base.GetPlatform() == "" {
		p.base.Backend = be.Name()
	}
	p.platform = p.base.GetPlatform()
	if p.platform == "" {
		p.platform = m.backends.Platform(be.Name())
	}
	if p.platform == "" {
		p.platform = be.Name()
	}
	// The config API shows the configuration the model runs with, as
	// Triton's does: the resolved backend always and, with auto-complete,
	// the platform and the model file name too.
	if p.base.GetBackend() == "" {
		p.base.Backend = be.Name()
	}
	// With the backend known, instance groups without a count get the
	// backend's default (2 for ONNX Runtime on CPU, as Triton).
	modelconfig.ApplyDefaults(p.base, p.name)
	if p.autoComplete {
		if pl := m.backends.Platform(be.Name()); p.base.GetPlatform() == "" && pl != "" {
			p.base.Platform = pl
		}
		if p.base.GetDefaultModelFilename() == "" {
			p.base.DefaultModelFilename = be.DefaultFilename()
		}
	}
	return nil
}

// planKey is the part of every version's content key that the model
// folder's top level and the options decide.
func (m *Manager) planKey(p *plan) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%t\x00", p.src.dir, p.src.fp.top, p.expected, m.opts.StrictConfig)
	if p.src.override != nil {
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(p.src.override)
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// configErr keeps config problems on one error value.
func configErr(err error) error {
	if ps := problemsOf(err); len(ps) > 0 {
		return ps
	}
	return err
}

// pickBackend finds the backend named by the config, or, when the config
// names none, the only backend whose model file is in a version folder.
func pickBackend(reg *backend.Registry, strict bool, cfg *inferencepb.ModelConfig, dir string, versions []int64) (backend.Backend, error) {
	if cfg.GetBackend() != "" || cfg.GetPlatform() != "" {
		return reg.Lookup(cfg.GetBackend(), cfg.GetPlatform())
	}
	if strict {
		return nil, errors.New("config.pbtxt sets neither backend nor platform")
	}
	var matches []backend.Backend
	var names []string
	for _, b := range reg.Backends() {
		file := b.DefaultFilename()
		names = append(names, file)
		if f := cfg.GetDefaultModelFilename(); f != "" {
			if filepath.Ext(f) != filepath.Ext(file) {
				continue
			}
			file = f
		}
		for _, v := range versions {
			if _, err := os.Stat(filepath.Join(dir, strconv.FormatInt(v, 10), file)); err == nil {
				matches = append(matches, b)
				break
			}
		}
	}
	switch len(matches) {
	case 1:
		return matches[0], nil
	case 0:
		return nil, fmt.Errorf("config sets neither backend nor platform, and no version folder holds a model file a backend knows (%s)", strings.Join(names, ", "))
	default:
		var ns []string
		for _, b := range matches {
			ns = append(ns, b.Name())
		}
		return nil, fmt.Errorf("config sets neither backend nor platform, and several backends match (%s): set backend", strings.Join(ns, ", "))
	}
}

// reconcile loads what src asks for beside what serves now and swaps it in
// atomically. Versions whose content is unchanged are kept as they are,
// unless force. When any version fails, every version that served before
// keeps serving. It returns the failures, which are also recorded in the
// index, the log and the metrics.
func (m *Manager) reconcile(ctx context.Context, mdl *model, src modelSource, force bool) []*loadError {
	mdl.opMu.Lock()
	defer mdl.opMu.Unlock()
	if m.closed.Load() {
		return []*loadError{newLoadError(mdl.name, 0, causeCanceled, errors.New("server is shutting down"))}
	}
	// Loads stop when the caller gives up or the manager closes.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(m.stopCtx, cancel)()

	mdl.mu.Lock()
	mdl.phase = phaseActive
	mdl.repo = src.repo
	mdl.mu.Unlock()

	old := mdl.serving.Load()
	p, perr := m.plan(mdl.name, src)
	if perr != nil && perr.cause == causeDuplicate && !force {
		// As Triton: a model in more than one repository is an error for
		// that model, also when it served from one of them before (a poll
		// found the second copy): it stops serving until one is removed.
		// An explicit load (force) that finds the second copy fails
		// without touching what serves, as every failed load does
		// (qa/L0_lifecycle test_multiple_model_repository_control: the
		// served version stays ready).
		m.publish(mdl, &servingSet{}, map[int64]*versionStatus{}, duplicateReason)
		// Triton unloads such a model, so it does not hold strict
		// readiness back (test_multiple_model_repository_polling expects a
		// ready server); a later load or poll makes it active again.
		mdl.mu.Lock()
		mdl.phase = phaseUnloaded
		mdl.mu.Unlock()
		m.drain(ctx, old.all())
		m.metrics.loadFailures.WithLabelValues(mdl.name, perr.cause).Inc()
		m.logger.Warn("model load failed", "model", mdl.name, "reason", perr.cause, "err", perr.err)
		return []*loadError{perr}
	}
	if perr != nil {
		m.recordPlanFailure(mdl, old, src.dir, perr)
		return []*loadError{perr}
	}

	var next []*loaded
	var toLoad []int64
	for _, v := range p.versions {
		if lv := old.get(v); lv != nil && !force && lv.key == p.key(v) {
			next = append(next, lv)
			continue
		}
		toLoad = append(toLoad, v)
	}
	m.markLoading(mdl, toLoad)

	results := make([]*loaded, len(toLoad))
	errs := make([]*loadError, len(toLoad))
	replacing := old.latest() != nil
	var wg sync.WaitGroup
	for i, v := range toLoad {
		wg.Go(func() { results[i], errs[i] = m.loadVersion(ctx, p, v, replacing) })
	}
	wg.Wait()

	fails, absent := missingVersions(mdl.name, p)
	var fresh []*loaded
	for i := range toLoad {
		if errs[i] != nil {
			fails = append(fails, errs[i])
		} else {
			fresh = append(fresh, results[i])
		}
	}
	next = append(next, fresh...)
	if len(fails) > 0 {
		// A failed load never takes serving versions away.
		for _, lv := range old.all() {
			if !slices.ContainsFunc(next, func(n *loaded) bool { return n.version == lv.version }) {
				next = append(next, lv)
			}
		}
	}
	sort.Slice(next, func(i, j int) bool { return next[i].version < next[j].version })
	var retired []*loaded
	for _, lv := range old.all() {
		if !slices.Contains(next, lv) {
			retired = append(retired, lv)
		}
	}

	status := map[int64]*versionStatus{}
	for _, f := range slices.Concat(absent, fails) {
		status[f.version] = &versionStatus{reason: f.reason()}
	}
	now := time.Now()
	for _, lv := range fresh {
		lv.loadedAt = now
	}
	if !m.publish(mdl, &servingSet{versions: next}, status, "") {
		for _, lv := range fresh {
			_ = lv.shutdown()
		}
		return []*loadError{newLoadError(mdl.name, 0, causeCanceled, errors.New("server is shutting down"))}
	}
	m.reportLoads(mdl.name, p.src.dir, fresh, fails, absent)
	m.drain(ctx, retired)
	mdl.cleanTmpDirs()
	return fails
}

// missingVersions are the load errors of the versions the version policy
// names that have no folder: failures when no version is there to load,
// else (as Triton: "version 3 is specified for model 'm', but the version
// directory is not present") absent versions, which the index shows with
// their reason while the versions that exist load.
func missingVersions(name string, p *plan) (fails, absent []*loadError) {
	for _, v := range p.missing {
		e := newLoadError(name, v, causeNoVersions,
			fmt.Errorf("version %d is named by version_policy but has no folder in %s", v, p.src.dir))
		if len(p.versions) == 0 {
			fails = append(fails, e)
		} else {
			absent = append(absent, e)
		}
	}
	return fails, absent
}

// reportLoads counts and logs what a reconcile did: the versions that now
// serve, the loads that failed and the absent versions.
func (m *Manager) reportLoads(name, dir string, fresh []*loaded, fails, absent []*loadError) {
	for _, lv := range fresh {
		m.metrics.setInfo(lv.model, lv.vstr, lv.label, lv.commit, lv.loadedAt)
		m.logger.Info("model version serving", "model", lv.model, "version", lv.vstr, "version_label", lv.label)
	}
	for _, f := range fails {
		m.metrics.loadFailures.WithLabelValues(name, f.cause).Inc()
		m.logger.Warn("model load failed", "model", name, "version", f.version, "reason", f.cause, "err", f.err)
	}
	for _, a := range absent {
		m.logger.Error("version is specified for model, but the version directory is not present", "model", name, "version", a.version, "dir", dir)
	}
}

// recordPlanFailure records a load that failed before any version loaded.
// The reason goes on the versions the model would have loaded under its
// serving policy, or on the versions that serve, or on the model itself.
func (m *Manager) recordPlanFailure(mdl *model, old *servingSet, dir string, e *loadError) {
	var attempted []int64
	if lv := old.latest(); lv != nil {
		if avail, err := versionDirs(dir); err == nil {
			attempted, _ = selectVersions(lv.cfg.GetVersionPolicy(), avail)
		}
		if len(attempted) == 0 {
			for _, s := range old.all() {
				attempted = append(attempted, s.version)
			}
		}
	}
	status := map[int64]*versionStatus{}
	for _, v := range attempted {
		status[v] = &versionStatus{reason: e.reason()}
	}
	reason := ""
	if len(attempted) == 0 {
		reason = e.reason()
	}
	m.publish(mdl, nil, status, reason)
	m.metrics.loadFailures.WithLabelValues(mdl.name, e.cause).Inc()
	m.logger.Warn("model load failed", "model", mdl.name, "reason", e.cause, "err", e.err)
	mdl.cleanTmpDirs()
}

// markLoading shows versions as LOADING while they load.
func (m *Manager) markLoading(mdl *model, versions []int64) {
	set := mdl.serving.Load()
	mdl.mu.Lock()
	defer mdl.mu.Unlock()
	for _, v := range versions {
		st := mdl.status[v]
		if st == nil {
			st = &versionStatus{}
			mdl.status[v] = st
		}
		st.loading = true
		if set.get(v) == nil {
			m.metrics.setState(mdl.name, strconv.FormatInt(v, 10), StateLoading)
		}
	}
}

// publish replaces what a model serves (unless set is nil) and its index
// status, and brings the state metrics and statistics in line. It returns
// false, changing nothing, once the manager is closed.
func (m *Manager) publish(mdl *model, set *servingSet, status map[int64]*versionStatus, reason string) bool {
	mdl.mu.Lock()
	defer mdl.mu.Unlock()
	if m.closed.Load() && set != nil && len(set.versions) > 0 {
		return false
	}
	before := knownVersions(mdl.serving.Load(), mdl.status)
	if set != nil {
		// Versions new to serving share the statistics kept for their
		// number across reloads. They are not visible to requests yet.
		for _, lv := range set.versions {
			if lv.stats == nil {
				if mdl.stats[lv.version] == nil {
					mdl.stats[lv.version] = newVersionStats()
				}
				lv.stats = mdl.stats[lv.version]
			}
		}
		mdl.serving.Store(set)
	}
	cur := mdl.serving.Load()
	mdl.status = status
	mdl.reason = reason
	after := knownVersions(cur, status)
	for v := range after {
		delete(mdl.unloaded, v)
	}
	for v := range before {
		if !after[v] {
			mdl.unloaded[v] = true
			m.metrics.forgetVersion(mdl.name, strconv.FormatInt(v, 10))
			m.batchMetrics.Forget(mdl.name, strconv.FormatInt(v, 10))
			m.seqMetrics.Forget(mdl.name, strconv.FormatInt(v, 10))
			delete(mdl.stats, v)
		}
	}
	for v := range after {
		st := StateUnavailable
		if cur.get(v) != nil {
			st = StateReady
		}
		m.metrics.setState(mdl.name, strconv.FormatInt(v, 10), st)
	}
	return true
}

func knownVersions(set *servingSet, status map[int64]*versionStatus) map[int64]bool {
	out := map[int64]bool{}
	for _, lv := range set.all() {
		out[lv.version] = true
	}
	for v := range status {
		if v != 0 {
			out[v] = true
		}
	}
	return out
}

// drain retires versions, waits for their requests in flight (until ctx is
// done, then in the background) and closes their instances.
func (m *Manager) drain(ctx context.Context, retired []*loaded) {
	for _, lv := range retired {
		done := lv.retire()
		select {
		case <-done:
			m.finishUnload(lv)
		case <-ctx.Done():
			m.bg.Go(func() {
				<-done
				m.finishUnload(lv)
			})
		}
	}
}

func (m *Manager) finishUnload(lv *loaded) {
	if lv.cached {
		m.cache.drop(lv.id)
	}
	if err := lv.shutdown(); err != nil {
		m.logger.Warn("model instance close failed", "model", lv.model, "version", lv.vstr, "err", err)
	}
	m.logger.Info("model version unloaded", "model", lv.model, "version", lv.vstr)
}

// unloadModel stops serving every version of a model.
func (m *Manager) unloadModel(ctx context.Context, mdl *model) {
	mdl.opMu.Lock()
	defer mdl.opMu.Unlock()
	old := mdl.serving.Load()
	mdl.mu.Lock()
	if mdl.phase == phaseActive {
		mdl.phase = phaseUnloaded
	}
	mdl.mu.Unlock()
	m.publish(mdl, &servingSet{}, map[int64]*versionStatus{}, "")
	m.drain(ctx, old.all())
	mdl.cleanTmpDirs()
}

// removeModel unloads a model whose folder left the repository and forgets
// it.
func (m *Manager) removeModel(ctx context.Context, mdl *model) {
	m.unloadModel(ctx, mdl)
	m.dropModel(mdl)
	m.mu.Lock()
	m.removed[mdl.name] = true
	m.mu.Unlock()
	m.metrics.forgetModel(mdl.name)
	m.logger.Info("model removed from repository", "model", mdl.name)
}

// loadVersion loads, verifies and warms up one version. It holds one of
// the manager's load slots throughout.
func (m *Manager) loadVersion(ctx context.Context, p *plan, v int64, replacing bool) (*loaded, *loadError) {
	fail := func(cause string, err error) (*loaded, *loadError) {
		if ctx.Err() != nil && cause != causeCanceled {
			cause, err = causeCanceled, fmt.Errorf("load canceled: %w", err)
		}
		return nil, newLoadError(p.name, v, cause, err)
	}
	select {
	case m.loadSlots <- struct{}{}:
		defer func() { <-m.loadSlots }()
	case <-ctx.Done():
		return fail(causeCanceled, context.Cause(ctx))
	}
	if p.ensemble {
		return m.loadEnsembleVersion(p, v)
	}
	start := time.Now()
	vstr := strconv.FormatInt(v, 10)
	vdir := filepath.Join(p.src.dir, vstr)

	prov, err := readProvenance(vdir)
	if err != nil {
		return fail(causeProvenance, err)
	}
	m.logger.Info("loading model", "model", p.name, "version", vstr, "version_label", prov.Version, "git_commit", prov.GitCommit)
	if p.expected != "" && !commitMatches(p.expected, prov.GitCommit) {
		got := prov.GitCommit
		if got == "" {
			got = "none (" + provenanceFile + " names no git_commit)"
		}
		return fail(causeGitMismatch, fmt.Errorf("git commit mismatch: expected %s, version has %s", p.expected, got))
	}
	if cause, ps := verifyManifest(vdir); len(ps) > 0 {
		return fail(cause, ps)
	}

	file := p.base.GetDefaultModelFilename()
	if file == "" {
		file = p.be.DefaultFilename()
	}
	path := filepath.Join(vdir, file)
	cfg, cause, err := versionConfig(ctx, p, vdir, path)
	if err != nil {
		return fail(cause, err)
	}

	lv := m.newLoaded(p, v, cfg, prov)
	if err := lv.readLabels(); err != nil {
		return fail(causeConfig, err)
	}
	if lv.maxOutput, err = maxOutputBytes(cfg, m.maxOutputDefault()); err != nil {
		return fail(causeConfig, err)
	}
	if err := startInstances(ctx, p, lv, path); err != nil {
		return fail(causeInstance, err)
	}
	lv.health = healthReporters(lv.instances)
	if err := m.warmup(ctx, lv, vdir, replacing); err != nil {
		_ = lv.closeInstances()
		return fail(causeWarmup, err)
	}
	if err := m.startScheduler(lv); err != nil {
		_ = lv.closeInstances()
		return fail(causeConfig, err)
	}
	d := time.Since(start)
	m.metrics.loadDuration.WithLabelValues(p.name, vstr).Set(d.Seconds())
	m.logger.Info("loaded model", "model", p.name, "version", vstr, "version_label", prov.Version, "duration_seconds", d.Seconds())
	return lv, nil
}

// versionConfig is the configuration a version runs with: completed by
// the model's own code (where its backend can) and, with auto-complete,
// from the model's signature, then validated against that signature.
func versionConfig(ctx context.Context, p *plan, vdir, path string) (*inferencepb.ModelConfig, string, error) {
	base := p.base
	if cc, ok := p.be.(backend.ConfigCompleter); ok && p.autoComplete {
		// The model's own code completes the configuration first (a
		// Python model's auto_complete_config), as Triton's backends do
		// before the server's checks.
		completed, err := cc.CompleteConfig(ctx, vdir, proto.CloneOf(p.base))
		if err != nil {
			return nil, causeConfig, fmt.Errorf("auto-complete config: %w", err)
		}
		modelconfig.ApplyDefaults(completed, p.name)
		base = completed
	}
	sig, cause, err := versionSignature(ctx, p.be, base, vdir, path)
	if cause == causeUnreadable {
		err = fmt.Errorf("read model %s: %w", path, err)
	}
	if err != nil {
		return nil, cause, err
	}
	cfg := proto.CloneOf(base)
	if p.autoComplete {
		batchless := cfg.GetMaxBatchSize() == 0
		if err := modelconfig.AutoComplete(cfg, sig); err != nil {
			return nil, causeConfig, fmt.Errorf("auto-complete config: %w", err)
		}
		// As Triton's auto-complete: a max_batch_size it chose comes with
		// the dynamic batcher unless the config picked a scheduler.
		if batchless && cfg.GetMaxBatchSize() > 0 && cfg.GetSchedulingChoice() == nil {
			cfg.SchedulingChoice = &inferencepb.ModelConfig_DynamicBatching{DynamicBatching: &inferencepb.ModelDynamicBatching{}}
		}
	}
	modelconfig.ScalarsAsOne(cfg, sig)
	if ps := modelconfig.Validate(cfg, p.cfgSrc); len(ps) > 0 {
		return nil, causeConfig, ps
	}
	if ps := modelconfig.ValidateSignature(cfg, sig, p.cfgSrc); len(ps) > 0 {
		return nil, causeSignature, ps
	}
	return cfg, "", nil
}

// startInstances creates the version's instances (as many as its
// instance groups ask for), closing those made when one fails.
func startInstances(ctx context.Context, p *plan, lv *loaded, path string) error {
	cfg := lv.cfg
	count := instanceCount(cfg)
	params := map[string]string{}
	for k, pv := range cfg.GetParameters() {
		params[k] = pv.GetStringValue()
	}
	for range count {
		in, err := p.be.Load(ctx, backend.LoadOptions{
			Model: p.name, Version: lv.version, Path: path, Parameters: params, InstanceCount: count,
			Config: cfg, LoadID: lv.id, MaxOutputBytes: lv.maxOutput,
		})
		if err != nil {
			_ = lv.closeInstances()
			return fmt.Errorf("create instance: %w", err)
		}
		lv.instances = append(lv.instances, in)
	}
	return nil
}

// loadEnsembleVersion validates an ensemble version's configuration and
// step graph. Step models that are loaded now are checked against the
// graph at once; the others are checked when requests need them (an
// ensemble serves only while every step model can run).
func (m *Manager) loadEnsembleVersion(p *plan, v int64) (*loaded, *loadError) {
	cfg := proto.CloneOf(p.base)
	if ps := modelconfig.Validate(cfg, p.cfgSrc); len(ps) > 0 {
		return nil, newLoadError(p.name, v, causeConfig, ps)
	}
	e, ps := parseEnsemble(cfg, p.cfgSrc, m.modelKnown)
	if len(ps) > 0 {
		return nil, newLoadError(p.name, v, causeEnsemble, ps)
	}
	ps = e.checkTypes(cfg, p.cfgSrc, func(i int) *inferencepb.ModelConfig {
		st := e.steps[i]
		if mdl := m.lookup(st.model); mdl != nil {
			if slv, err := mdl.find(st.version); err == nil {
				return slv.cfg
			}
		}
		return nil
	})
	if len(ps) > 0 {
		return nil, newLoadError(p.name, v, causeEnsemble, ps)
	}
	lv := m.newLoaded(p, v, cfg, provenance{})
	lv.ens = e
	if err := lv.readLabels(); err != nil {
		return nil, newLoadError(p.name, v, causeConfig, err)
	}
	m.logger.Info("loaded ensemble", "model", p.name, "version", lv.vstr, "steps", len(e.steps))
	if n := cfg.GetEnsembleScheduling().GetMaxInflightRequests(); n > 0 {
		m.logger.Info(fmt.Sprintf("Ensemble model '%s' configured with max_inflight_requests: %d", p.name, n), "model", p.name, "version", lv.vstr) //nolint:sloglint // Triton's log line, which its QA greps for
	}
	return lv, nil
}

// modelKnown reports whether a model name is in a repository or was
// loaded from a load request's files.
func (m *Manager) modelKnown(name string) bool {
	return m.lookup(name) != nil || len(m.findModel(name)) > 0
}

// instanceCount is the number of instances instance_group asks for.
func instanceCount(cfg *inferencepb.ModelConfig) int {
	n := 0
	for _, g := range cfg.GetInstanceGroup() {
		n += max(int(g.GetCount()), 1)
	}
	return max(n, 1)
}

// newLoaded prepares a version for serving, instances aside.
func (m *Manager) newLoaded(p *plan, v int64, cfg *inferencepb.ModelConfig, prov provenance) *loaded {
	vstr := strconv.FormatInt(v, 10)
	cached := cfg.GetResponseCache().GetEnable() && m.cache != nil
	if cached && cfg.GetSequenceBatching() != nil {
		// An answer depends on the sequence's state, not on the inputs.
		m.logger.Warn("response_cache is ignored for a sequence_batching model", "model", p.name, "version", strconv.FormatInt(v, 10))
		cached = false
	}
	if cfg.GetResponseCache().GetEnable() && m.cache == nil {
		m.logger.Warn("response_cache is enabled but the server has no cache (--cache-size 0); responses are not cached", "model", p.name, "version", vstr)
	}
	lv := &loaded{
		id:       m.loadIDs.Add(1),
		cached:   cached,
		model:    p.name,
		version:  v,
		vstr:     vstr,
		key:      p.key(v),
		dir:      p.src.dir,
		cfg:      cfg,
		platform: p.platform,
		label:    prov.Version,
		commit:   prov.GitCommit,
		client:   modelconfig.ClientSignature(cfg),
		maxBatch: int64(cfg.GetMaxBatchSize()),
		obs:      m.metrics.observers(p.name, vstr, cached),
		drained:  make(chan struct{}),
	}
	for _, in := range cfg.GetInput() {
		spec := inputSpec{
			name:     in.GetName(),
			dtype:    modelconfig.ToInfer(in.GetDataType()),
			shape:    batchShape(lv.maxBatch, in.GetDims()),
			optional: in.GetOptional(),
		}
		if r := in.GetReshape(); r != nil {
			spec.reshape = batchShape(lv.maxBatch, r.GetShape())
		}
		lv.inputs = append(lv.inputs, spec)
	}
	for _, out := range cfg.GetOutput() {
		lv.outputs = append(lv.outputs, out.GetName())
		if out.GetReshape() != nil {
			if lv.outShapes == nil {
				lv.outShapes = map[string]infer.Shape{}
			}
			lv.outShapes[out.GetName()] = batchShape(lv.maxBatch, out.GetDims())
		}
	}
	// A value that does not parse fails the load (loadVersion); an
	// ensemble, which has no such check, takes the server's default.
	if n, err := maxOutputBytes(cfg, m.maxOutputDefault()); err == nil {
		lv.maxOutput = n
	} else {
		lv.maxOutput = m.maxOutputDefault()
	}
	return lv
}

// batchShape prefixes dims with a variable batch dimension when the model
// batches.
func batchShape(maxBatch int64, dims []int64) infer.Shape {
	if maxBatch > 0 {
		return append(infer.Shape{-1}, dims...)
	}
	return append(infer.Shape{}, dims...)
}

// warmup runs the config's model_warmup samples, or, when replacing (the
// model has a version serving that the new ones replace: a reload), one
// all-zero request at batch 1, on every instance. Only a version that
// passes its model_warmup serves. The automatic all-zero request is
// Sluice's own addition (Triton runs none): it checks a reload before
// traffic moves to it, and costs nothing on a first load, where Triton
// runs none and a client's load call waits for it (qa/L0_lifecycle
// test_grpc_load_model allows 5 s). It must never make a model Triton
// would serve unavailable, so it is skipped for models with BYTES inputs
// (empty strings are rarely valid input: a string-to-number Cast fails on
// them) and a failure of it is logged as a warning, not a load failure.
func (m *Manager) warmup(ctx context.Context, lv *loaded, vdir string, replacing bool) error {
	var samples []warmupSample
	auto := false
	if ws := lv.cfg.GetModelWarmup(); len(ws) > 0 {
		for i, w := range ws {
			name := w.GetName()
			if name == "" {
				name = "#" + strconv.Itoa(i)
			}
			ins, err := warmupInputs(lv, w, vdir)
			if err != nil {
				return fmt.Errorf("warm-up sample '%s': %w", name, err)
			}
			samples = append(samples, warmupSample{name: name, inputs: ins, count: max(int(w.GetCount()), 1)})
		}
	} else {
		if !replacing {
			return nil
		}
		if lv.decoupled() {
			// A decoupled model may answer zeros with no response at
			// all, or take its time sending them.
			m.logger.Debug("automatic warm-up skipped: the model is decoupled", "model", lv.model, "version", lv.vstr)
			return nil
		}
		if slices.ContainsFunc(lv.inputs, func(s inputSpec) bool { return s.dtype == infer.Bytes && !s.optional }) {
			m.logger.Debug("automatic warm-up skipped: the model has BYTES inputs", "model", lv.model, "version", lv.vstr)
			return nil
		}
		if len(lv.cfg.GetBatchInput()) > 0 || slices.ContainsFunc(lv.cfg.GetInput(), (*inferencepb.ModelInput).GetAllowRaggedBatch) {
			// The batcher flattens ragged inputs and adds the batch_input
			// tensors; a zero sample handed to the instance has neither
			// (qa/L0_batch_input's models warned at every load).
			m.logger.Debug("automatic warm-up skipped: the model has ragged or batch_input inputs", "model", lv.model, "version", lv.vstr)
			return nil
		}
		auto = true
		var ins []infer.Tensor
		for _, spec := range lv.inputs {
			if spec.optional {
				continue
			}
			shape := spec.shape.Clone()
			for i := range shape {
				if shape[i] < 0 {
					shape[i] = 1
				}
			}
			t, err := fillTensor(spec.name, spec.dtype, shape, false)
			if err != nil {
				m.logger.Warn("automatic warm-up skipped", "model", lv.model, "version", lv.vstr, "error", err)
				return nil
			}
			ins = append(ins, lv.modelTensor(spec, t))
		}
		samples = append(samples, warmupSample{name: "zeros", inputs: ins, count: 1})
	}
	err := runWarmup(ctx, lv, samples)
	if err != nil && auto && ctx.Err() == nil {
		m.logger.Warn("automatic warm-up failed; the version serves anyway (add model_warmup to the config to make warm-up a load condition)",
			"model", lv.model, "version", lv.vstr, "error", err)
		return nil
	}
	return err
}

// warmupSample is one warm-up request, run count times.
type warmupSample struct {
	name   string
	inputs []infer.Tensor
	count  int
}

// runWarmup executes every sample its count times on every instance.
func runWarmup(ctx context.Context, lv *loaded, samples []warmupSample) error {
	for _, in := range lv.instances {
		for _, s := range samples {
			for range s.count {
				outs, err := in.Execute(ctx, s.inputs, lv.outputs)
				if err != nil {
					return fmt.Errorf("warm-up sample '%s': %w", s.name, err)
				}
				if len(outs) > len(lv.outputs) {
					// Fewer is allowed: a model may answer a subset (Triton
					// passes it on), and a decoupled model may send none.
					return fmt.Errorf("warm-up sample '%s': model returned %d outputs, want at most %d", s.name, len(outs), len(lv.outputs))
				}
			}
		}
	}
	return nil
}

// warmupInputs builds the tensors of one model_warmup entry.
func warmupInputs(lv *loaded, w *inferencepb.ModelWarmup, vdir string) ([]infer.Tensor, error) {
	names := make([]string, 0, len(w.GetInputs()))
	for n := range w.GetInputs() {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []infer.Tensor
	for _, n := range names {
		in := w.GetInputs()[n]
		var shape infer.Shape
		if lv.maxBatch > 0 {
			shape = append(shape, int64(max(w.GetBatchSize(), 1)))
		}
		shape = append(shape, in.GetDims()...)
		dt := modelconfig.ToInfer(in.GetDataType())
		var t infer.Tensor
		switch src := in.GetInputDataType().(type) {
		case *inferencepb.ModelWarmup_Input_InputDataFile:
			rel := filepath.FromSlash(src.InputDataFile)
			if !filepath.IsLocal(rel) {
				return nil, fmt.Errorf("input '%s': input_data_file %q is outside the warmup folder", n, src.InputDataFile)
			}
			data, err := os.ReadFile(filepath.Join(vdir, "warmup", rel))
			if err != nil {
				return nil, fmt.Errorf("input '%s': %w", n, err)
			}
			t = infer.Tensor{Name: n, DataType: dt, Shape: shape, Data: data}
			if err := t.CheckSize(); err != nil {
				return nil, fmt.Errorf("input '%s': input_data_file %s: %w", n, src.InputDataFile, err)
			}
		default:
			var err error
			t, err = fillTensor(n, dt, shape, in.GetRandomData())
			if err != nil {
				return nil, fmt.Errorf("input '%s': %w", n, err)
			}
		}
		spec := inputSpec{name: n}
		for _, s := range lv.inputs {
			if s.name == n {
				spec = s
			}
		}
		out = append(out, lv.modelTensor(spec, t))
	}
	return out, nil
}

// maxWarmupElements bounds the size of a generated warm-up tensor.
const maxWarmupElements = 1 << 26

// fillTensor makes a tensor of zeros, or of random bytes.
func fillTensor(name string, dt infer.DataType, shape infer.Shape, random bool) (infer.Tensor, error) {
	n, err := shape.Elements()
	if err != nil {
		return infer.Tensor{}, err
	}
	if n > maxWarmupElements {
		return infer.Tensor{}, fmt.Errorf("shape %s is too large for a warm-up tensor", shape)
	}
	if !dt.Valid() {
		return infer.Tensor{}, fmt.Errorf("invalid data type")
	}
	var data []byte
	switch {
	case dt == infer.Bytes && random:
		b := make([]byte, n)
		_, _ = rand.Read(b) // never fails (Go 1.24+)
		for i := range n {
			data = infer.AppendBytesElement(data, b[i:i+1])
		}
	case dt == infer.Bytes:
		data = make([]byte, 4*n) // n empty strings
	default:
		data = make([]byte, n*dt.Size())
		if random {
			_, _ = rand.Read(data)
		}
	}
	return infer.Tensor{Name: name, DataType: dt, Shape: shape, Data: data}, nil
}
