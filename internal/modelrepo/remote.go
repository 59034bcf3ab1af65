package modelrepo

import (
	"bytes"
	"context"
	"crypto/md5" //nolint:gosec // checks transfers against the store's own MD5, not a security use
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/objstore"
)

// DefaultRemoteCacheBytes bounds the local copies of remote repositories
// when Options.RemoteCacheBytes is 0.
const DefaultRemoteCacheBytes = config.DefaultRepositoryCacheBytes

// objMeta is what a listing says of one object.
type objMeta struct {
	Size    int64  `json:"size"`
	Version string `json:"version"`
	MD5     []byte `json:"md5,omitempty"`
}

// mirror keeps a local copy of a model repository held in object storage.
// The copy only ever shows, per model folder, a listing that held still:
// changed objects are downloaded to a staging folder and verified against
// the store's size and MD5, the folder is listed again, and only when both
// listings agree (or the folder has not changed since the previous sync)
// are the new files moved into the copy. A folder still being uploaded is
// left as it was until an upload settles.
type mirror struct {
	uri      string // the repository as the user wrote it
	bucket   *objstore.Bucket
	root     string // <cache>/<hash of uri>
	tree     string // root/tree: the copy the manager reads
	staging  string // root/staging: downloaded objects not yet in the tree
	maxBytes int64
	settle   time.Duration // least time between the two listings of a changed folder
	poll     time.Duration // back-off base
	logger   *slog.Logger
	// beforeRelist, when set, runs between the two listings (tests).
	beforeRelist func()

	mu      sync.Mutex         // serializes syncs; protects the fields below
	prev    map[string]objMeta // the previous sync's listing
	nextTry time.Time          // no listing before this, after failures
	lastErr error

	// pubMu protects published; it is written only under mu.
	pubMu     sync.RWMutex
	published map[string]objMeta // key -> what the tree holds

	stateMu   sync.Mutex // protects fails and downSince
	fails     int        // consecutive failed syncs
	downSince time.Time  // first failure of the current outage
}

// newMirror opens the bucket of uri and the local copy under cacheDir,
// reusing what an earlier process left there.
func newMirror(ctx context.Context, uri, cacheDir string, maxBytes int64, poll time.Duration, getenv func(string) string, logger *slog.Logger) (*mirror, error) {
	b, err := objstore.OpenURI(ctx, uri, objstore.Options{Getenv: getenv})
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(b.Location().String()))
	root := filepath.Join(cacheDir, hex.EncodeToString(sum[:8]))
	mr := &mirror{
		uri: uri, bucket: b, root: root,
		tree: filepath.Join(root, "tree"), staging: filepath.Join(root, "staging"),
		maxBytes: maxBytes, settle: time.Second, poll: poll, logger: logger,
		published: map[string]objMeta{},
	}
	for _, d := range []string{mr.tree, mr.staging} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			_ = b.Close()
			return nil, fmt.Errorf("create cache folder for %s: %w", uri, err)
		}
	}
	mr.loadManifest()
	return mr, nil
}

// manifestPath is where the published listing is kept between processes.
func (mr *mirror) manifestPath() string { return filepath.Join(mr.root, "published.json") }

// loadManifest reads what an earlier process published, keeping only the
// entries whose file is still there with the right size; anything else in
// the tree is removed by the first sync.
func (mr *mirror) loadManifest() {
	data, err := os.ReadFile(mr.manifestPath())
	if err != nil {
		return
	}
	var pub map[string]objMeta
	if json.Unmarshal(data, &pub) != nil {
		return
	}
	for k, m := range pub {
		if !safeKey(k) {
			continue
		}
		if fi, err := os.Stat(filepath.Join(mr.tree, filepath.FromSlash(k))); err == nil && fi.Mode().IsRegular() && fi.Size() == m.Size {
			mr.published[k] = m
		}
	}
}

func (mr *mirror) saveManifest() {
	mr.pubMu.RLock()
	data, err := json.Marshal(mr.published)
	mr.pubMu.RUnlock()
	if err != nil {
		return
	}
	tmp := mr.manifestPath() + ".tmp"
	if os.WriteFile(tmp, data, 0o600) == nil {
		_ = os.Rename(tmp, mr.manifestPath())
	}
}

// safeKey reports whether an object key can be a file of the copy.
func safeKey(k string) bool {
	return k != "" && !strings.Contains(k, `\`) && filepath.IsLocal(filepath.FromSlash(k)) && !strings.Contains(k, "//")
}

// modelOf returns the model folder an object key belongs to.
func modelOf(k string) string {
	m, _, ok := strings.Cut(k, "/")
	if !ok {
		return ""
	}
	return m
}

// sync brings the copy up to date and returns the model folders whose
// files changed in it. On an error the copy is left as it was; syncs in
// the following back-off period fail at once with the same error.
func (mr *mirror) sync(ctx context.Context) ([]string, error) {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if now := time.Now(); now.Before(mr.nextTry) {
		return nil, mr.lastErr
	}
	changed, err := mr.syncLocked(ctx)
	mr.stateMu.Lock()
	defer mr.stateMu.Unlock()
	if err != nil {
		if mr.fails == 0 {
			mr.downSince = time.Now()
		}
		mr.fails++
		delay := mr.poll << min(mr.fails-1, 3) // up to 8 poll intervals
		mr.nextTry = time.Now().Add(delay)
		mr.lastErr = err
		return nil, err
	}
	mr.fails, mr.nextTry, mr.lastErr = 0, time.Time{}, nil
	return changed, nil
}

// list returns every object of the repository.
func (mr *mirror) list(ctx context.Context) (map[string]objMeta, error) {
	lctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out := map[string]objMeta{}
	err := mr.bucket.List(lctx, "", func(o objstore.Object) error {
		if len(out) >= maxFingerprintFiles*4 {
			return fmt.Errorf("repository %s holds more than %d objects", mr.uri, maxFingerprintFiles*4)
		}
		out[o.Key] = objMeta{Size: o.Size, Version: o.Version, MD5: o.MD5}
		return nil
	})
	return out, err
}

// byModel splits a listing by model folder, skipping objects outside
// model folders and keys that cannot be files.
func byModel(l map[string]objMeta) map[string]map[string]objMeta {
	out := map[string]map[string]objMeta{}
	for k, m := range l {
		mdl := modelOf(k)
		if mdl == "" || strings.HasPrefix(mdl, ".") || !safeKey(k) {
			continue
		}
		if out[mdl] == nil {
			out[mdl] = map[string]objMeta{}
		}
		out[mdl][k] = m
	}
	return out
}

func sameMeta(a, b objMeta) bool {
	return a.Size == b.Size && a.Version == b.Version && bytes.Equal(a.MD5, b.MD5)
}

func sameListing(a, b map[string]objMeta) bool {
	return maps.EqualFunc(a, b, sameMeta)
}

// syncLocked brings the local copy up to date with the bucket: it fetches
// the changed model folders and publishes those that held still, and
// returns their names.
func (mr *mirror) syncLocked(ctx context.Context) ([]string, error) {
	started := time.Now()
	first, err := mr.list(ctx)
	if err != nil {
		return nil, err
	}
	var total int64
	for _, m := range first {
		total += m.Size
	}
	if mr.maxBytes > 0 && total > mr.maxBytes {
		return nil, fmt.Errorf("repository %s holds %d bytes; the local cache is bounded at %d (--repository-cache-bytes)", mr.uri, total, mr.maxBytes)
	}
	now := byModel(first)
	before := byModel(mr.published)
	prev := byModel(mr.prev)
	mr.prev = first

	// Which folders changed, and fetch what they need.
	changed := changedModels(now, before)
	if len(changed) == 0 {
		mr.cleanStaging(first)
		return nil, nil
	}
	var ready, unsettled []string
	for _, name := range changed {
		ok, err := mr.fetch(ctx, now[name])
		if err != nil {
			return nil, err
		}
		if !ok {
			unsettled = append(unsettled, name) // an object changed or vanished under us
			continue
		}
		ready = append(ready, name)
	}
	// A folder whose listing equals the previous sync's has held still
	// for a poll interval; any other is listed once more.
	if ready, unsettled, err = mr.relist(ctx, started, now, prev, ready, unsettled); err != nil {
		return nil, err
	}
	for _, name := range ready {
		if err := mr.publish(name, now[name], before[name]); err != nil {
			return nil, err
		}
	}
	if len(unsettled) > 0 {
		mr.logger.Info("model folder still changing in object storage; waiting for it to settle", "repository", mr.uri, "models", unsettled)
	}
	mr.saveManifest()
	mr.cleanStaging(first)
	return ready, nil
}

// changedModels lists, sorted, the model folders whose listing differs
// between before and now, or that are gone now.
func changedModels(now, before map[string]map[string]objMeta) []string {
	var changed []string
	for name := range now {
		if !sameListing(now[name], before[name]) {
			changed = append(changed, name)
		}
	}
	for name := range before {
		if now[name] == nil {
			changed = append(changed, name)
		}
	}
	slices.Sort(changed)
	return changed
}

// relist lists once more, after the settle time since the sync started,
// the ready folders whose listing differs from the previous sync's (prev):
// a folder that changed again in between moves from ready to unsettled.
func (mr *mirror) relist(ctx context.Context, started time.Time, now, prev map[string]map[string]objMeta,
	ready, unsettled []string,
) ([]string, []string, error) {
	var again []string
	for _, name := range ready {
		if now[name] == nil || sameListing(now[name], prev[name]) {
			continue
		}
		again = append(again, name)
	}
	if len(again) > 0 {
		if wait := mr.settle - time.Since(started); wait > 0 {
			select {
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-time.After(wait):
			}
		}
		if mr.beforeRelist != nil {
			mr.beforeRelist()
		}
		second, err := mr.list(ctx)
		if err != nil {
			return nil, nil, err
		}
		after := byModel(second)
		for _, name := range again {
			if !sameListing(now[name], after[name]) {
				ready = slices.DeleteFunc(ready, func(n string) bool { return n == name })
				unsettled = append(unsettled, name)
			}
		}
		mr.prev = second
	}
	return ready, unsettled, nil
}

// stagingName is the staging file of one object version.
func (mr *mirror) stagingName(key string, m objMeta) string {
	h := sha256.Sum256([]byte(key + "\x00" + m.Version + "\x00" + fmt.Sprint(m.Size)))
	return filepath.Join(mr.staging, hex.EncodeToString(h[:16]))
}

// fetch downloads the objects of a folder listing that the copy does not
// hold yet. ok is false when an object vanished or did not match its
// listing (it is being replaced); err is a failure of the store.
func (mr *mirror) fetch(ctx context.Context, objs map[string]objMeta) (ok bool, err error) {
	keys := slices.Sorted(maps.Keys(objs))
	for _, k := range keys {
		m := objs[k]
		if p, have := mr.published[k]; have && sameMeta(p, m) {
			continue
		}
		dst := mr.stagingName(k, m)
		if fi, err := os.Stat(dst); err == nil && fi.Size() == m.Size {
			continue
		}
		good, err := mr.download(ctx, k, m, dst)
		if err != nil {
			return false, err
		}
		if !good {
			return false, nil
		}
	}
	return true, nil
}

// download copies one object to dst and checks its size and MD5.
func (mr *mirror) download(ctx context.Context, key string, m objMeta, dst string) (bool, error) {
	r, err := mr.bucket.NewReader(ctx, key, 0, -1)
	if errors.Is(err, objstore.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer r.Close()
	f, err := os.CreateTemp(mr.staging, ".part-")
	if err != nil {
		return false, fmt.Errorf("cache %s: %w", key, err)
	}
	defer func() { _ = os.Remove(f.Name()) }()
	h := md5.New() //nolint:gosec // see the import
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, m.Size+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, objstore.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if n != m.Size || (len(m.MD5) > 0 && !bytes.Equal(h.Sum(nil), m.MD5)) {
		mr.logger.Info("object changed during download; trying again at the next poll", "repository", mr.uri, "object", key)
		return false, nil
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return false, fmt.Errorf("cache %s: %w", key, err)
	}
	return true, nil
}

// publish moves a folder's downloaded objects into the copy and removes
// the files it no longer has.
func (mr *mirror) publish(name string, now, before map[string]objMeta) error {
	mr.pubMu.Lock()
	defer mr.pubMu.Unlock()
	for k, m := range now {
		if p, have := mr.published[k]; have && sameMeta(p, m) {
			continue
		}
		dst := filepath.Join(mr.tree, filepath.FromSlash(k))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return fmt.Errorf("cache %s: %w", k, err)
		}
		if err := os.Rename(mr.stagingName(k, m), dst); err != nil {
			return fmt.Errorf("cache %s: %w", k, err)
		}
		mr.published[k] = m
	}
	for k := range before {
		if _, keep := now[k]; keep {
			continue
		}
		_ = os.Remove(filepath.Join(mr.tree, filepath.FromSlash(k)))
		delete(mr.published, k)
	}
	if len(now) == 0 {
		return os.RemoveAll(filepath.Join(mr.tree, name))
	}
	removeEmptyDirs(filepath.Join(mr.tree, name))
	return nil
}

// removeEmptyDirs removes the empty folders below dir (not dir itself).
func removeEmptyDirs(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() {
			p := filepath.Join(dir, e.Name())
			removeEmptyDirs(p)
			_ = os.Remove(p) // fails when not empty
		}
	}
}

// cleanStaging removes staged objects the listing no longer has, and
// partial downloads.
func (mr *mirror) cleanStaging(listing map[string]objMeta) {
	keep := map[string]bool{}
	for k, m := range listing {
		keep[filepath.Base(mr.stagingName(k, m))] = true
	}
	entries, err := os.ReadDir(mr.staging)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !keep[e.Name()] {
			_ = os.Remove(filepath.Join(mr.staging, e.Name()))
		}
	}
}

// fingerprint describes a model folder of the copy from the published
// listing, without reading its files.
func (mr *mirror) fingerprint(name string) (fingerprint, bool) {
	mr.pubMu.RLock()
	defer mr.pubMu.RUnlock()
	var keys []string
	for k := range mr.published {
		if modelOf(k) == name {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return fingerprint{}, false
	}
	slices.Sort(keys)
	whole, top := sha256.New(), sha256.New()
	vers := map[int64]hash.Hash{}
	for _, k := range keys {
		m := mr.published[k]
		rel := strings.TrimPrefix(k, name+"/")
		line := fmt.Sprintf("f %s %d %s\n", rel, m.Size, m.Version)
		whole.Write([]byte(line))
		first, _, _ := strings.Cut(rel, "/")
		part := top
		if v, ok := versionNumber(first); ok && strings.Contains(rel, "/") {
			if vers[v] == nil {
				vers[v] = sha256.New()
			}
			part = vers[v]
		}
		part.Write([]byte(line))
	}
	fp := fingerprint{model: hex.EncodeToString(whole.Sum(nil)), top: hex.EncodeToString(top.Sum(nil)), versions: map[int64]string{}}
	for v, h := range vers {
		fp.versions[v] = hex.EncodeToString(h.Sum(nil))
	}
	return fp, true
}

// outage returns when the current run of failed syncs began and how many
// there were.
func (mr *mirror) outage() (time.Time, int) {
	mr.stateMu.Lock()
	defer mr.stateMu.Unlock()
	return mr.downSince, mr.fails
}

// close releases the bucket.
func (mr *mirror) close() error { return mr.bucket.Close() }

// openMirror opens the local copy of an object-storage repository.
func openMirror(uri string, opts Options, logger *slog.Logger) (*mirror, error) {
	dir := opts.RemoteCacheDir
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("no folder for the copies of object-storage repositories (set --repository-cache-dir): %w", err)
		}
		dir = filepath.Join(base, "sluice", "model-repositories")
	}
	poll := opts.PollInterval
	if poll <= 0 {
		poll = DefaultPollInterval
	}
	mr, err := newMirror(context.Background(), uri, dir, opts.RemoteCacheBytes, poll, opts.Getenv, logger)
	if err != nil {
		return nil, fmt.Errorf("model repository %s: %w", uri, err)
	}
	return mr, nil
}

// syncRemote updates the local copy of repo when it is an object-storage
// repository and returns the model folders that changed in it; for a
// folder it does nothing.
func (m *Manager) syncRemote(ctx context.Context, repo string) ([]string, error) {
	mr := m.remotes[repo]
	if mr == nil {
		return nil, nil
	}
	return mr.sync(ctx)
}

// fingerprint returns the content fingerprint of a model source: from
// the published listing for a remote repository's copy (no file is read),
// else by hashing the folder.
func (m *Manager) fingerprint(src modelSource) (fingerprint, error) {
	if mr := m.remotes[src.repo]; mr != nil && src.dir == filepath.Join(src.repo, filepath.Base(src.dir)) {
		if fp, ok := mr.fingerprint(filepath.Base(src.dir)); ok {
			return fp, nil
		}
	}
	return fingerprintDir(src.dir)
}

// repoWarning is the index reason of a model whose repository could not
// be read.
func (m *Manager) repoWarning(repo, err string) string {
	if mr := m.remotes[repo]; mr != nil {
		since, fails := mr.outage()
		// "stale" first: status lines cut long reasons short.
		return fmt.Sprintf("stale: repository %s unreachable since %s (%d failed polls), serving what was loaded before: %s",
			mr.uri, since.UTC().Format(time.RFC3339), fails, err)
	}
	return fmt.Sprintf("repository %s unreadable: %s; serving what was loaded before", repo, err)
}

// showRemotePaths replaces the folders of local copies in a message with
// the locations they copy, so that reasons name the object
// (s3://bucket/models/m/3/SHA256SUMS), not the cache.
func (m *Manager) showRemotePaths(msg string) string {
	for tree, mr := range m.remotes {
		if strings.Contains(msg, tree) {
			msg = strings.ReplaceAll(msg, tree, strings.TrimRight(mr.uri, "/"))
		}
	}
	return msg
}
