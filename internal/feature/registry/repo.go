package registry

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/aggregate"
	"github.com/sluice-ml/sluice/internal/feature/transform"
)

// Limits on what Load reads, so a mistaken --repo (a home folder) fails
// fast instead of reading everything.
const (
	maxWalk      = 20000   // directory entries visited
	maxDefFiles  = 1000    // definition files
	maxFileBytes = 8 << 20 // bytes per file
)

// Repo is a loaded, validated feature repository. It is immutable: share
// it freely, never modify it.
type Repo struct {
	// Project is the configured project name.
	Project string
	// Dir is the repository's absolute path; relative paths in the
	// definitions are resolved against it.
	Dir string
	// Config is feature_store.yaml, with defaults applied.
	Config Config
	// Entities, Sources, Views and Services are the definitions by name.
	Entities map[string]*feature.Entity
	Sources  map[string]*feature.Source
	Views    map[string]*feature.View
	Services map[string]*feature.Service
	// RequestSources and OnDemandViews are the request sources and
	// on-demand feature views (nil maps when there are none).
	RequestSources map[string]*feature.RequestSource
	OnDemandViews  map[string]*feature.OnDemandView
	onDemand       map[string]*transform.View // compiled, by view name
	streams        map[string]*aggregate.Spec // stream feature views' tile arithmetic, by view name

	positions map[string]feature.Position // "kind/name" -> where it is defined
	files     []string                    // every file read (config, definitions, hot key files)
	digest    string                      // sha256 over files' names and contents
}

// Load reads and validates the feature repository in dir. Definition
// problems are returned all at once as Errors; other failures (dir is
// unreadable) as a wrapped error.
func Load(ctx context.Context, dir string) (*Repo, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("load feature repository %s: %w", dir, err)
	}
	return load(ctx, os.DirFS(abs), abs)
}

func load(ctx context.Context, fsys fs.FS, dir string) (*Repo, error) {
	cfgData, err := fs.ReadFile(fsys, ConfigFile)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, Errors{{Pos: posAt(ConfigFile, 0), Msg: fmt.Sprintf("no %s in %s: not a feature repository", ConfigFile, dir)}}
		}
		return nil, fmt.Errorf("load feature repository %s: %w", dir, err)
	}
	names, err := definitionFiles(ctx, fsys)
	if err != nil {
		return nil, fmt.Errorf("load feature repository %s: %w", dir, err)
	}
	c := &compiler{
		fsys:  fsys,
		files: map[string][]byte{ConfigFile: cfgData},
		names: map[string]string{},
		repo: &Repo{
			Dir:       dir,
			Entities:  map[string]*feature.Entity{},
			Sources:   map[string]*feature.Source{},
			Views:     map[string]*feature.View{},
			Services:  map[string]*feature.Service{},
			positions: map[string]feature.Position{},
		},
	}
	c.repo.Config = parseConfig(cfgData, &c.errs)
	c.repo.Project = c.repo.Config.Project
	var d defs
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("load feature repository %s: %w", dir, err)
		}
		data, err := readLimited(fsys, name)
		if err != nil {
			c.errs = append(c.errs, Error{Pos: posAt(name, 0), Msg: err.Error()})
			continue
		}
		c.files[name] = data
		parseDefinitions(name, data, &d, &c.errs)
	}
	c.compile(&d)
	if len(c.errs) > 0 {
		errs := Errors(c.errs)
		slices.SortStableFunc(errs, func(a, b Error) int {
			if a.Pos.File != b.Pos.File {
				// feature_store.yaml first, then file order
				if a.Pos.File == ConfigFile || b.Pos.File == ConfigFile {
					return boolCmp(b.Pos.File == ConfigFile, a.Pos.File == ConfigFile)
				}
				return strings.Compare(a.Pos.File, b.Pos.File)
			}
			return cmp.Compare(a.Pos.Line, b.Pos.Line)
		})
		return nil, errs
	}
	c.repo.files, c.repo.digest = digestFiles(c.files)
	return c.repo, nil
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	default:
		return -1
	}
}

// definitionFiles lists the *.yaml and *.yml files under fsys except
// feature_store.yaml, skipping hidden folders, in lexical order.
func definitionFiles(ctx context.Context, fsys fs.FS) ([]string, error) {
	var names []string
	visited := 0
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if visited++; visited > maxWalk {
			return fmt.Errorf("more than %d entries: is this a feature repository?", maxWalk)
		}
		if visited%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if d.IsDir() {
			if p != "." && strings.HasPrefix(d.Name(), ".") {
				return fs.SkipDir
			}
			return nil
		}
		ext := path.Ext(p)
		if (ext != ".yaml" && ext != ".yml") || p == ConfigFile || !d.Type().IsRegular() {
			return nil
		}
		if len(names) >= maxDefFiles {
			return fmt.Errorf("more than %d definition files", maxDefFiles)
		}
		names = append(names, p)
		return nil
	})
	slices.Sort(names)
	return names, err
}

func readLimited(fsys fs.FS, name string) ([]byte, error) {
	if st, err := fs.Stat(fsys, name); err == nil && st.Size() > maxFileBytes {
		return nil, fmt.Errorf("file is %d bytes (at most %d)", st.Size(), maxFileBytes)
	}
	return fs.ReadFile(fsys, name)
}

// digestFiles returns the sorted names and a sha256 over names and contents.
func digestFiles(files map[string][]byte) ([]string, string) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(files[n]))
		h.Write(files[n])
	}
	return names, hex.EncodeToString(h.Sum(nil))
}

// Digest is a sha256 over the repository files this Repo was loaded
// from; it changes when any of them does.
func (r *Repo) Digest() string { return r.digest }

// Position returns where an object is defined; kind is "entity",
// "source", "feature view" or "feature service".
func (r *Repo) Position(kind, name string) (feature.Position, bool) {
	p, ok := r.positions[kind+"/"+name]
	return p, ok
}

// JoinKeys returns the join key names and kinds of view, in the view's
// entity order, or nil when there is no such view.
func (r *Repo) JoinKeys(view string) ([]string, []feature.Kind) {
	v := r.Views[view]
	if v == nil {
		return r.onDemandJoinKeys(view)
	}
	names := make([]string, len(v.Entities))
	kinds := make([]feature.Kind, len(v.Entities))
	for i, e := range v.Entities {
		ent := r.Entities[e]
		names[i], kinds[i] = ent.JoinKey, ent.ValueType.Kind
	}
	return names, kinds
}

// Path resolves a path from the definitions (a source's path, the
// registry, the embedded store) against the repository.
func (r *Repo) Path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(r.Dir, filepath.FromSlash(p))
}

// ResolveFeatures turns a request's features ("view:feature" refs) or a
// feature service name (exactly one of them) into feature refs, grouped
// by view in order of first appearance, each listing its features
// explicitly. Duplicate refs are dropped. Errors are *apierr.Error with
// Kind KindInvalid and reason unknown_feature_view, unknown_feature,
// unknown_feature_service, invalid_feature_ref or no_features, naming
// what was asked for.
func (r *Repo) ResolveFeatures(refs []string, service string) ([]feature.FeatureRef, error) {
	switch {
	case service != "" && len(refs) > 0:
		return nil, apierr.Errorf(apierr.KindInvalid, ReasonInvalidFeatureRef, "give features or feature_service '%s', not both", service)
	case service != "":
		s := r.Services[service]
		if s == nil {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonUnknownFeatureService, "feature service '%s' is not defined (feature services: %s)", service, keyList(r.Services))
		}
		out := make([]feature.FeatureRef, len(s.Features))
		for i, fr := range s.Features {
			out[i] = feature.FeatureRef{View: fr.View, Features: slices.Clone(fr.Features)}
		}
		return out, nil
	case len(refs) == 0:
		return nil, apierr.Errorf(apierr.KindInvalid, ReasonNoFeatures, "no features requested (give features as view:feature or a feature_service)")
	}
	var out []feature.FeatureRef
	seen := make(map[string]bool, len(refs))
	for _, ref := range refs {
		view, feat, ok := strings.Cut(ref, ":")
		if !ok || view == "" || feat == "" {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonInvalidFeatureRef, "feature ref %q: want view:feature", ref)
		}
		v := r.Views[view]
		if v == nil {
			v = r.onDemandAsView(view)
		}
		if v == nil {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonUnknownFeatureView, "feature view '%s' (in %q) is not defined (feature views: %s)", view, ref, keyList(r.Views))
		}
		if !slices.ContainsFunc(v.Schema, func(f feature.Field) bool { return f.Name == feat }) {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonUnknownFeature, "feature view '%s' has no feature '%s' (features: %s)", view, feat, schemaList(v.Schema))
		}
		if seen[ref] {
			continue
		}
		seen[ref] = true
		out = addRef(out, view, feat)
	}
	return out, nil
}
