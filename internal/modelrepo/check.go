package modelrepo

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/objstore"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// Check validates repositories offline, for `sluice repo check`: config
// parse errors, config validation, backends, version folders, model files,
// provenance files and pins, SHA256SUMS manifests, warm-up files, each
// version's real I/O signature against its config and, for backends that
// implement backend.VersionChecker, the backend's own checks of each
// version whose configuration fits (model.py, state_dicts). It reports every
// problem found, in repository, model and version order, each with the
// file and, where it has one, the line and column. It builds no instances.
// An empty result means the repositories would load.
//
// A repository given as an object-storage location is copied into a
// temporary folder first (see Options.Repositories); its problems name the
// objects by their location.
func Check(ctx context.Context, repos []string, backends *backend.Registry, strict bool) []modelconfig.Error {
	repos = slices.Clone(repos)
	var ps []modelconfig.Error
	rename := map[string]string{} // local copy -> location
	for i, r := range repos {
		if !objstore.IsURI(r) {
			continue
		}
		dir, cleanup, err := copyForCheck(ctx, r)
		if err != nil {
			ps = append(ps, modelconfig.Error{Pos: modelconfig.Position{File: r}, Msg: fmt.Sprintf("read model repository: %v", err)})
			repos[i] = ""
			continue
		}
		defer cleanup()
		repos[i] = dir
		rename[dir] = strings.TrimRight(r, "/")
	}
	repos = slices.DeleteFunc(repos, func(r string) bool { return r == "" })
	defer func() {
		for i := range ps {
			for dir, uri := range rename {
				if f := ps[i].Pos.File; f == dir || strings.HasPrefix(f, dir+string(filepath.Separator)) {
					ps[i].Pos.File = uri + filepath.ToSlash(strings.TrimPrefix(f, dir))
				}
				ps[i].Msg = strings.ReplaceAll(ps[i].Msg, dir, uri)
			}
		}
	}()
	where := map[string][]string{}
	var order []string
	for _, repo := range repos {
		names, err := listRepository(repo)
		if err != nil {
			ps = append(ps, modelconfig.Error{Pos: modelconfig.Position{File: repo}, Msg: fmt.Sprintf("read model repository: %v", err)})
			continue
		}
		if len(names) == 0 {
			ps = append(ps, modelconfig.Error{Pos: modelconfig.Position{File: repo}, Msg: "model repository holds no model folder"})
		}
		for _, n := range names {
			if where[n] == nil {
				order = append(order, n)
			}
			where[n] = append(where[n], repo)
		}
	}
	known := func(name string) bool { return where[name] != nil }
	results := make([][]*checkedModel, len(order))
	effective := map[string]*inferencepb.ModelConfig{}
	for i, name := range order {
		for _, repo := range where[name] {
			c := checkModel(ctx, filepath.Join(repo, name), name, backends, strict, known)
			results[i] = append(results[i], c)
			if effective[name] == nil {
				effective[name] = c.cfg
			}
		}
	}
	for i, name := range order {
		rs := where[name]
		if len(rs) > 1 {
			ps = append(ps, modelconfig.Error{
				Pos: modelconfig.Position{File: filepath.Join(rs[1], name)},
				Msg: fmt.Sprintf("model '%s' is in more than one model repository (%s)", name, strings.Join(rs, ", ")),
			})
		}
		for _, c := range results[i] {
			ps = append(ps, c.problems...)
			if c.ens != nil {
				// Step models are checked as their highest selected
				// version's effective configuration.
				ps = append(ps, c.ens.checkTypes(c.cfg, c.src, func(j int) *inferencepb.ModelConfig {
					return effective[c.ens.steps[j].model]
				})...)
			}
		}
	}
	return ps
}

// checkedModel is what checking one model folder found.
type checkedModel struct {
	problems modelconfig.Errors
	cfg      *inferencepb.ModelConfig // effective config; nil when it could not be read
	src      *modelconfig.Source
	ens      *ensemble // the step graph of a valid ensemble
}

// checkModel lists the problems of one model folder and returns its
// effective configuration. known says whether a model name is in the
// repositories.
func checkModel(ctx context.Context, dir, name string, backends *backend.Registry, strict bool, known func(string) bool) *checkedModel {
	c := &checkedModel{}
	c.problems, c.cfg, c.src, c.ens = checkModelFolder(ctx, dir, name, backends, strict, known)
	return c
}

// folderCheck collects the problems of one model folder, each once.
type folderCheck struct {
	ps   modelconfig.Errors
	seen map[string]bool
}

func (fc *folderCheck) add(more ...modelconfig.Error) {
	for _, p := range more {
		p.Msg = strings.TrimSpace(p.Msg)
		if k := p.Error(); !fc.seen[k] {
			fc.seen[k] = true
			fc.ps = append(fc.ps, p)
		}
	}
}

func (fc *folderCheck) at(file, format string, args ...any) {
	fc.add(modelconfig.Error{Pos: modelconfig.Position{File: file}, Msg: fmt.Sprintf(format, args...)})
}

func (fc *folderCheck) missingVersions(src *modelconfig.Source, missing []int64) {
	for _, v := range missing {
		fc.add(modelconfig.Error{Pos: src.Pos("version_policy"), Msg: fmt.Sprintf("version %d is named by version_policy but has no folder", v)})
	}
}

// readConfig reads and parses the folder's config.pbtxt; a nil config
// means the folder cannot be checked further.
func (fc *folderCheck) readConfig(cfgPath string, strict bool) (*inferencepb.ModelConfig, *modelconfig.Source) {
	switch data, err := os.ReadFile(cfgPath); {
	case errors.Is(err, fs.ErrNotExist) && strict:
		fc.at(cfgPath, "config.pbtxt is missing (required with --strict-model-config)")
		return nil, nil
	case errors.Is(err, fs.ErrNotExist):
		return &inferencepb.ModelConfig{}, nil
	case err != nil:
		fc.at(cfgPath, "%v", err)
		return nil, nil
	default:
		c, s, err := modelconfig.Parse(cfgPath, data)
		if err != nil {
			if cps := problemsOf(err); len(cps) > 0 {
				fc.add(cps...)
			} else {
				fc.at(cfgPath, "%v", err)
			}
			return nil, nil
		}
		return c, s
	}
}

func checkModelFolder(ctx context.Context, dir, name string, backends *backend.Registry, strict bool, known func(string) bool) (modelconfig.Errors, *inferencepb.ModelConfig, *modelconfig.Source, *ensemble) {
	fc := &folderCheck{seen: map[string]bool{}}
	cfgPath := filepath.Join(dir, configFile)
	cfg, src := fc.readConfig(cfgPath, strict)
	if cfg == nil {
		return fc.ps, nil, nil, nil
	}
	if n := cfg.GetName(); n != "" && n != name {
		fc.add(modelconfig.Error{Pos: src.Pos("name"), Msg: fmt.Sprintf("name '%s' does not match the model folder '%s'", n, name)})
	}
	modelconfig.ApplyDefaults(cfg, name)

	avail, err := versionDirs(dir)
	if err != nil {
		fc.at(dir, "%v", err)
		return fc.ps, nil, nil, nil
	}
	if isEnsemble(cfg) {
		if len(avail) == 0 {
			avail = []int64{1} // an ensemble needs no version folder
		}
		_, missing := selectVersions(cfg.GetVersionPolicy(), avail)
		fc.missingVersions(src, missing)
		fc.add(modelconfig.Validate(cfg, src)...)
		e, eps := parseEnsemble(cfg, src, known)
		fc.add(eps...)
		return fc.ps, cfg, src, e
	}
	versions, missing := selectVersions(cfg.GetVersionPolicy(), avail)
	fc.missingVersions(src, missing)
	if len(avail) == 0 {
		fc.at(dir, "no version folder (version folders are named 1, 2, ...)")
	}

	be, err := pickBackend(backends, strict, cfg, dir, avail)
	if err != nil {
		pos := src.Pos("backend")
		if cfg.GetBackend() == "" {
			pos = src.Pos("platform")
		}
		if pos.File == "" {
			pos.File = cfgPath
		}
		fc.add(modelconfig.Error{Pos: pos, Msg: err.Error()})
	}
	vc := versionCheck{fc: fc, cfg: cfg, src: src, cfgPath: cfgPath, be: be, autoComplete: !strict}
	vc.pin, err = readPin(dir)
	if err != nil {
		fc.at(filepath.Join(dir, pinFile), "%v", err)
	}

	validated := false
	effective := cfg
	slices.Sort(versions)
	for _, v := range versions {
		if vcfg := vc.check(ctx, dir, v); vcfg != nil {
			validated = true
			effective = vcfg
		}
	}
	if !validated && (!vc.autoComplete || len(cfg.GetInput()) > 0) {
		fc.add(modelconfig.Validate(cfg, src)...)
	}
	return fc.ps, effective, src, nil
}

// versionCheck checks the version folders of one (non-ensemble) model.
type versionCheck struct {
	fc           *folderCheck
	cfg          *inferencepb.ModelConfig
	src          *modelconfig.Source
	cfgPath      string
	be           backend.Backend // nil when none fits
	pin          string
	autoComplete bool
}

// check checks version v: its provenance and manifest, then (with a
// backend) the model file against the configuration. It returns the
// version's effective configuration, or nil when it was not validated.
func (vc *versionCheck) check(ctx context.Context, dir string, v int64) *inferencepb.ModelConfig {
	fc, cfg := vc.fc, vc.cfg
	vdir := filepath.Join(dir, strconv.FormatInt(v, 10))
	prov, err := readProvenance(vdir)
	var pp modelconfig.Error
	switch {
	case errors.As(err, &pp):
		fc.add(pp)
	case err != nil:
		fc.at(filepath.Join(vdir, provenanceFile), "%v", err)
	case vc.pin != "" && !commitMatches(vc.pin, prov.GitCommit):
		got := prov.GitCommit
		if got == "" {
			got = "none"
		}
		fc.at(filepath.Join(vdir, provenanceFile), "git commit mismatch: %s expects %s, version %d has %s", pinFile, vc.pin, v, got)
	}
	_, mps := verifyManifest(vdir)
	fc.add(mps...)
	if vc.be == nil {
		return nil
	}
	file := cfg.GetDefaultModelFilename()
	if file == "" {
		file = vc.be.DefaultFilename()
	}
	path := filepath.Join(vdir, file)
	base := cfg
	if cc, ok := vc.be.(backend.ConfigCompleter); ok && vc.autoComplete {
		// As at load: the model's auto_complete_config (which runs
		// model.py's top-level code) completes the configuration.
		completed, err := cc.CompleteConfig(ctx, vdir, proto.CloneOf(cfg))
		if err != nil {
			fc.at(vc.cfgPath, "auto-complete config: %v", err)
			return nil
		}
		modelconfig.ApplyDefaults(completed, cfg.GetName())
		base = completed
	}
	sig, cause, err := versionSignature(ctx, vc.be, base, vdir, path)
	if err != nil {
		switch {
		case cause == causeConfig:
			fc.at(vc.cfgPath, "%v", err)
		case cause == causeModelFile && errors.Is(err, fs.ErrNotExist):
			fc.at(path, "model file is missing")
		case cause == causeModelFile:
			fc.at(path, "%v", err)
		default:
			fc.at(path, "read model: %v", err)
		}
		return nil
	}
	vcfg := proto.CloneOf(base)
	if vc.autoComplete {
		if err := modelconfig.AutoComplete(vcfg, sig); err != nil {
			fc.at(vc.cfgPath, "auto-complete config from %s: %v", path, err)
			return nil
		}
	}
	vps := append(modelconfig.Validate(vcfg, vc.src), modelconfig.ValidateSignature(vcfg, sig, vc.src)...)
	fc.add(vps...)
	fc.add(checkWarmupFiles(vcfg, vdir, vc.src)...)
	// A backend's own checks (Python: model.py, state_dict keys) run
	// on a configuration that fits the model; they would only repeat
	// its problems otherwise.
	if bc, ok := vc.be.(backend.VersionChecker); ok && len(vps) == 0 {
		for _, p := range bc.CheckVersion(ctx, vdir, vcfg) {
			fc.add(modelconfig.Error{Pos: modelconfig.Position{File: p.File, Line: p.Line, Col: p.Col}, Msg: p.Msg})
		}
	}
	return vcfg
}

// checkWarmupFiles reports model_warmup input files that are missing.
func checkWarmupFiles(cfg *inferencepb.ModelConfig, vdir string, src *modelconfig.Source) modelconfig.Errors {
	var ps modelconfig.Errors
	for i, w := range cfg.GetModelWarmup() {
		for name, in := range w.GetInputs() {
			f := in.GetInputDataFile()
			if f == "" {
				continue
			}
			path := fmt.Sprintf("model_warmup[%d].inputs[%q].input_data_file", i, name)
			rel := filepath.FromSlash(f)
			if !filepath.IsLocal(rel) {
				ps = append(ps, modelconfig.Error{Pos: src.Pos(path), Msg: fmt.Sprintf("input_data_file %q is outside the warmup folder", f)})
				continue
			}
			if _, err := os.Stat(filepath.Join(vdir, "warmup", rel)); err != nil {
				ps = append(ps, modelconfig.Error{Pos: src.Pos(path), Msg: fmt.Sprintf("input_data_file: %v", err)})
			}
		}
	}
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Msg < ps[j].Msg })
	return ps
}

// copyForCheck copies an object-storage repository into a temporary
// folder and returns the folder of the copy.
func copyForCheck(ctx context.Context, uri string) (string, func(), error) {
	tmp, err := os.MkdirTemp("", "sluice-repo-check-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { _ = os.RemoveAll(tmp) }
	mr, err := newMirror(ctx, uri, tmp, 0, time.Second, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		cleanup()
		return "", nil, err
	}
	defer func() { _ = mr.close() }()
	mr.settle = 0
	if _, err := mr.sync(ctx); err != nil {
		cleanup()
		return "", nil, err
	}
	return mr.tree, cleanup, nil
}
