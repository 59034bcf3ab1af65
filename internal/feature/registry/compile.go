package registry

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"math"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/yamlstrict"
)

// HotSuffix is appended to a view's name to name its hot subset's
// storage view.
const HotSuffix = "__hot"

// maxHotKeys bounds a hot subset (it is read first on every request and
// materialized separately, so it is meant to be small).
const maxHotKeys = 1 << 20

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// compiler turns raw definitions into a Repo, collecting every problem.
type compiler struct {
	fsys  fs.FS
	files map[string][]byte // every file read, for the digest
	errs  []Error
	repo  *Repo
	names map[string]string // name -> "kind 'name' at file:line", across kinds
}

func (c *compiler) errorf(file string, line int, obj, format string, args ...any) {
	c.errs = append(c.errs, Error{Pos: posAt(file, line), Object: obj, Msg: fmt.Sprintf(format, args...)})
}

// objReport collects the problems of one definition: each is reported at
// its line, and any of them keeps the definition out of the repository.
type objReport struct {
	c    *compiler
	file string
	obj  string
	ok   bool
}

// newReport starts the report of the definition obj in file.
func (c *compiler) newReport(file, obj string) *objReport {
	return &objReport{c: c, file: file, obj: obj, ok: true}
}

// bad reports one problem at line.
func (r *objReport) bad(line int, format string, args ...any) {
	r.c.errorf(r.file, line, r.obj, format, args...)
	r.ok = false
}

// newFeatureName checks the name of entry i of the list named list (an
// on-demand view's schema, a stream view's aggregations), which becomes
// a feature: well formed and not listed before (seen, to which it is
// added). It reports the problem at line and returns false.
func (r *objReport) newFeatureName(line int, list string, i int, name string, seen map[string]bool) bool {
	switch {
	case !nameRE.MatchString(name):
		r.bad(line, "%s[%d]: name %q may contain only letters, digits, '_', '.' and '-'", list, i, name)
		return false
	case seen[name]:
		r.bad(line, "feature '%s' is listed twice", name)
		return false
	}
	seen[name] = true
	return true
}

// claim registers a definition's name, reporting a bad or duplicate one.
// It returns false when the object should be skipped.
func (c *compiler) claim(kind, file string, n *yaml.Node, name string) bool {
	obj := fmt.Sprintf("%s '%s'", kind, name)
	switch {
	case name == "":
		c.errorf(file, n.Line, kind, "name is required")
		return false
	case !nameRE.MatchString(name):
		c.errorf(file, lineOf(n, "name"), obj, "name may contain only letters, digits, '_', '.' and '-' (at most 128, not starting with '.' or '-')")
		return false
	}
	if prev, dup := c.names[name]; dup {
		c.errorf(file, lineOf(n, "name"), obj, "name is already used by %s", prev)
		return false
	}
	c.names[name] = fmt.Sprintf("%s '%s' at %s:%d", kind, name, file, lineOf(n, "name"))
	c.repo.positions[kind+"/"+name] = posAt(file, n.Line)
	return true
}

// defined reports whether a kind of object named name was defined (it
// may still have been dropped for its own errors).
func (c *compiler) defined(kind, name string) bool {
	_, ok := c.repo.positions[kind+"/"+name]
	return ok
}

func (c *compiler) compile(d *defs) {
	c.entities(d.entities)
	c.sources(d.sources)
	c.views(d.views)
	c.streamViews(d.streams)
	c.onDemandViews(d.onDemand)
	c.services(d.services)
}

func (c *compiler) entities(items []item[rawEntity]) {
	for _, it := range items {
		r, n := it.raw, it.node
		if !c.claim("entity", it.file, n, r.Name) {
			continue
		}
		obj := fmt.Sprintf("entity '%s'", r.Name)
		ok := true
		if len(r.JoinKeys) != 1 {
			c.errorf(it.file, lineOf(n, "join_keys"), obj, "join_keys must name exactly one key, got %d", len(r.JoinKeys))
			ok = false
		} else if !nameRE.MatchString(r.JoinKeys[0]) {
			c.errorf(it.file, lineOf(n, "join_keys", "0"), obj, "join key %q may contain only letters, digits, '_', '.' and '-'", r.JoinKeys[0])
			ok = false
		}
		var vt feature.Type
		if r.ValueType == "" {
			c.errorf(it.file, n.Line, obj, "value_type is required (Int32, Int64, String or Bytes)")
			ok = false
		} else {
			t, err := feature.ParseType(r.ValueType)
			switch {
			case err != nil:
				c.errorf(it.file, lineOf(n, "value_type"), obj, "value_type: %v", err)
				ok = false
			case t.List || !slices.Contains([]feature.Kind{feature.KindInt32, feature.KindInt64, feature.KindString, feature.KindBytes}, t.Kind):
				c.errorf(it.file, lineOf(n, "value_type"), obj, "value_type %s cannot be a join key (want Int32, Int64, String or Bytes)", t)
				ok = false
			}
			vt = t
		}
		if ok {
			c.repo.Entities[r.Name] = &feature.Entity{Name: r.Name, JoinKey: r.JoinKeys[0], ValueType: vt, Tags: r.Tags}
		}
	}
}

// sources compiles the data sources. Request and stream sources have
// checks of their own; push and stream sources' batch sources are checked
// once all sources are known.
func (c *compiler) sources(items []item[rawSource]) {
	pending := map[string]item[rawSource]{} // push sources whose batch source is checked once all are known
	for _, it := range items {
		r, n := it.raw, it.node
		if !c.claim("source", it.file, n, r.Name) {
			continue
		}
		obj := fmt.Sprintf("source '%s'", r.Name)
		s := &feature.Source{
			Name: r.Name, Path: r.Path, S3EndpointOverride: r.S3EndpointOverride, TimestampField: r.TimestampField,
			CreatedTimestampColumn: r.CreatedTimestampColumn, FieldMapping: r.FieldMapping, BatchSource: r.BatchSource,
		}
		rep := c.newReport(it.file, obj)
		if r.Type == "request" {
			c.requestSource(it)
			continue
		}
		if r.Type == "stream" {
			if c.streamSource(it, s) {
				c.repo.Sources[r.Name] = s
				if r.BatchSource != "" {
					pending[r.Name] = it
				}
			}
			continue
		}
		for key, set := range map[string]bool{
			"url": r.URL != "", "stream": r.Stream != "", "subject": r.Subject != "",
			"format": r.Format != "", "consumer": r.Consumer != "", "sequence_field": r.SequenceField != "",
		} {
			if set {
				rep.bad(lineOf(n, key), "%s is only for stream sources (type: stream)", key)
			}
		}
		if r.Schema != nil {
			rep.bad(lineOf(n, "schema"), "schema is only for request sources (type: request)")
		}
		c.batchOrPushSource(rep, it, s, pending)
		if rep.ok {
			c.repo.Sources[r.Name] = s
		}
	}
	c.checkBatchSources(items, pending)
}

// batchOrPushSource checks the fields of a file source (path and
// timestamp_field required) or a push source (no path of its own) and
// sets s.Kind. A push source with a batch_source is added to pending.
func (c *compiler) batchOrPushSource(rep *objReport, it item[rawSource], s *feature.Source, pending map[string]item[rawSource]) {
	r, n := it.raw, it.node
	switch r.Type {
	case "file", "":
		s.Kind = feature.SourceFile
		if r.Path == "" {
			rep.bad(n.Line, "path is required for a file source")
		}
		if r.TimestampField == "" {
			rep.bad(n.Line, "timestamp_field is required for a file source")
		}
		if r.BatchSource != "" {
			rep.bad(lineOf(n, "batch_source"), "batch_source is only for push sources")
		}
		if msg := checkRemotePath(r.Path, r.S3EndpointOverride); msg != "" {
			rep.bad(lineOf(n, "path"), "%s", msg)
		}
	case "push":
		s.Kind = feature.SourcePush
		if r.Path != "" {
			rep.bad(lineOf(n, "path"), "path is only for file sources (a push source's offline data is its batch_source)")
		}
		if r.S3EndpointOverride != "" {
			rep.bad(lineOf(n, "s3_endpoint_override"), "s3_endpoint_override is only for file sources")
		}
		if r.BatchSource != "" {
			pending[r.Name] = it
		}
	default:
		rep.bad(lineOf(n, "type"), "type %q is not supported (want file, push, stream or request)", r.Type)
	}
}

// checkBatchSources checks the batch_source of each pending push or
// stream source, once all sources are known: it must name a file source.
// A source whose batch source is bad is dropped.
func (c *compiler) checkBatchSources(items []item[rawSource], pending map[string]item[rawSource]) {
	var drop []string
	for _, it := range items {
		p, isPending := pending[it.raw.Name]
		if !isPending || c.repo.Sources[p.raw.Name] == nil {
			continue
		}
		obj := fmt.Sprintf("source '%s'", p.raw.Name)
		b := c.repo.Sources[p.raw.BatchSource]
		switch {
		case b == nil:
			c.errorf(p.file, lineOf(p.node, "batch_source"), obj, "batch_source '%s' is not defined (sources: %s)", p.raw.BatchSource, keyList(c.repo.Sources))
			drop = append(drop, p.raw.Name)
		case b.Kind != feature.SourceFile:
			kind := "push"
			if b.Kind == feature.SourceStream {
				kind = "stream"
			}
			c.errorf(p.file, lineOf(p.node, "batch_source"), obj, "batch_source '%s' is a %s source (want a file source)", p.raw.BatchSource, kind)
			drop = append(drop, p.raw.Name)
		}
	}
	for _, name := range drop {
		delete(c.repo.Sources, name)
	}
}

// views compiles the feature views: their entities, schema, ttl, source,
// stale policy and hot subset.
func (c *compiler) views(items []item[rawView]) {
	for _, it := range items {
		if c.claim("feature view", it.file, it.node, it.raw.Name) {
			c.view(it)
		}
	}
}

// view compiles one feature view and adds it to the repository unless it
// has problems.
func (c *compiler) view(it item[rawView]) {
	r, n, f := it.raw, it.node, it.file
	obj := fmt.Sprintf("feature view '%s'", r.Name)
	rep := c.newReport(f, obj)
	bad := rep.bad
	if strings.HasSuffix(r.Name, HotSuffix) {
		bad(lineOf(n, "name"), "names ending in %q are reserved for hot subsets", HotSuffix)
	}
	v := &feature.View{Name: r.Name, Entities: r.Entities, Source: r.Source, Tags: r.Tags, Online: true}
	if r.Online != nil {
		v.Online = *r.Online
	}
	joinKeys := c.viewEntities(rep, r, n)
	v.Schema = viewSchema(rep, r, n, joinKeys)
	ttl, err := parseTTL(r.TTL)
	if err != nil {
		bad(lineOf(n, "ttl"), "ttl: %v", err)
	}
	v.TTL = ttl
	c.viewSourceRef(rep, r, n)
	switch r.StalePolicy {
	case "", "withhold":
		v.StalePolicy = feature.StaleWithhold
	case "flag":
		v.StalePolicy = feature.StaleFlag
	default:
		bad(lineOf(n, "stale_policy"), "stale_policy %q is not supported (want withhold or flag)", r.StalePolicy)
	}
	if r.Hot != nil {
		hot, hotOK := c.hot(f, n, obj, r, ttl)
		rep.ok = rep.ok && hotOK
		v.Hot = hot
	}
	if rep.ok {
		c.repo.Views[r.Name] = v
	}
}

// viewEntities checks a feature view's entities (at least one, each
// defined, listed once, with a join key of its own) and returns each join
// key's entity.
func (c *compiler) viewEntities(rep *objReport, r rawView, n *yaml.Node) map[string]string {
	joinKeys := map[string]string{} // join key -> entity
	if len(r.Entities) == 0 {
		rep.bad(n.Line, "entities is required (at least one entity)")
	}
	for i, e := range r.Entities {
		ent, exists := c.repo.Entities[e]
		switch {
		case !exists && c.defined("entity", e):
			rep.ok = false // the entity is defined but broken: reported there
		case !exists:
			rep.bad(lineOf(n, "entities", strconv.Itoa(i)), "entity '%s' is not defined (entities: %s)", e, keyList(c.repo.Entities))
		case slices.Index(r.Entities, e) != i:
			rep.bad(lineOf(n, "entities", strconv.Itoa(i)), "entity '%s' is listed twice", e)
		default:
			if other, dup := joinKeys[ent.JoinKey]; dup {
				rep.bad(lineOf(n, "entities", strconv.Itoa(i)), "entities '%s' and '%s' share the join key '%s'", other, e, ent.JoinKey)
			}
			joinKeys[ent.JoinKey] = e
		}
	}
	return joinKeys
}

// viewSchema checks a feature view's schema and returns its good
// features: each named once, not a join key, with a known dtype.
func viewSchema(rep *objReport, r rawView, n *yaml.Node, joinKeys map[string]string) []feature.Field {
	var schema []feature.Field
	if len(r.Schema) == 0 {
		rep.bad(n.Line, "schema is required (at least one feature)")
	}
	seen := map[string]bool{}
	for i, fd := range r.Schema {
		line := lineOf(n, "schema", strconv.Itoa(i))
		switch {
		case fd.Name == "":
			rep.bad(line, "schema[%d]: name is required", i)
			continue
		case !nameRE.MatchString(fd.Name):
			rep.bad(line, "feature %q: name may contain only letters, digits, '_', '.' and '-'", fd.Name)
			continue
		case seen[fd.Name]:
			rep.bad(line, "feature '%s' is listed twice", fd.Name)
			continue
		}
		seen[fd.Name] = true
		if ent, isKey := joinKeys[fd.Name]; isKey {
			rep.bad(line, "feature '%s' repeats the join key of entity '%s' (join keys are not features)", fd.Name, ent)
		}
		if fd.Dtype == "" {
			rep.bad(line, "feature '%s': dtype is required", fd.Name)
			continue
		}
		t, err := feature.ParseType(fd.Dtype)
		if err != nil {
			rep.bad(lineOf(n, "schema", strconv.Itoa(i), "dtype"), "feature '%s': %v", fd.Name, err)
			continue
		}
		schema = append(schema, feature.Field{Name: fd.Name, Type: t})
	}
	return schema
}

// viewSourceRef checks that a feature view's source is a defined batch
// or push source.
func (c *compiler) viewSourceRef(rep *objReport, r rawView, n *yaml.Node) {
	switch {
	case r.Source == "":
		rep.bad(n.Line, "source is required")
	case c.repo.RequestSources[r.Source] != nil:
		rep.bad(lineOf(n, "source"), "source '%s' is a request source: only on-demand feature views read request data", r.Source)
	case c.repo.Sources[r.Source] != nil && c.repo.Sources[r.Source].Kind == feature.SourceStream:
		rep.bad(lineOf(n, "source"), "source '%s' is a stream source: only stream feature views (%s) read streams", r.Source, streamSection)
	case c.repo.Sources[r.Source] == nil && !c.defined("source", r.Source):
		rep.bad(lineOf(n, "source"), "source '%s' is not defined (sources: %s)", r.Source, keyList(c.repo.Sources))
	}
}

func (c *compiler) hot(f string, n *yaml.Node, obj string, r rawView, viewTTL time.Duration) (*feature.HotSubset, bool) {
	ok := true
	bad := func(line int, format string, args ...any) {
		c.errorf(f, line, obj, format, args...)
		ok = false
	}
	h := r.Hot
	hot := &feature.HotSubset{View: r.Name + HotSuffix}
	ttl, err := parseTTL(h.TTL)
	switch {
	case err != nil:
		bad(lineOf(n, "hot", "ttl"), "hot ttl: %v", err)
	case ttl <= 0:
		bad(lineOf(n, "hot"), "hot ttl is required and must be positive")
	case viewTTL > 0 && ttl > viewTTL:
		bad(lineOf(n, "hot", "ttl"), "hot ttl %s is longer than the view's ttl %s", ttl, viewTTL)
	}
	hot.TTL = ttl
	if len(r.Entities) != 1 {
		bad(lineOf(n, "hot"), "hot subsets need a view with exactly one entity")
		return hot, false
	}
	ent := c.repo.Entities[r.Entities[0]]
	if ent == nil {
		return hot, false // reported already
	}
	type rawKey struct {
		s    string
		line int
		file string
	}
	var keys []rawKey
	switch {
	case len(h.Entities) > 0 && h.EntitiesFile != "":
		bad(lineOf(n, "hot"), "hot: set entities or entities_file, not both")
	case len(h.Entities) > 0:
		for i, s := range h.Entities {
			keys = append(keys, rawKey{s, lineOf(n, "hot", "entities", strconv.Itoa(i)), f})
		}
	case h.EntitiesFile != "":
		name := path.Clean(strings.TrimPrefix(h.EntitiesFile, "./"))
		data, err := fs.ReadFile(c.fsys, name)
		if err != nil || !fs.ValidPath(name) {
			bad(lineOf(n, "hot", "entities_file"), "hot entities_file %q: cannot read it (want a file of keys, one a line, inside the repository)", h.EntitiesFile)
			break
		}
		c.files[name] = data
		sc := bufio.NewScanner(bytes.NewReader(data))
		for line := 1; sc.Scan(); line++ {
			s := strings.TrimSpace(sc.Text())
			if s == "" || strings.HasPrefix(s, "#") {
				continue
			}
			keys = append(keys, rawKey{s, line, name})
		}
	default:
		bad(lineOf(n, "hot"), "hot: entities or entities_file is required")
	}
	if len(keys) > maxHotKeys {
		bad(lineOf(n, "hot"), "hot subset has %d keys (at most %d)", len(keys), maxHotKeys)
		return hot, false
	}
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		val, err := ParseKey(ent.ValueType.Kind, k.s)
		if err != nil {
			c.errorf(k.file, k.line, obj, "hot key %q: %v (entity '%s' is %s)", k.s, err, ent.Name, ent.ValueType)
			ok = false
			continue
		}
		if seen[k.s] {
			continue
		}
		seen[k.s] = true
		hot.Keys = append(hot.Keys, val)
	}
	if ok && len(hot.Keys) == 0 {
		bad(lineOf(n, "hot"), "hot subset has no keys")
	}
	return hot, ok
}

func (c *compiler) services(items []item[rawService]) {
	for _, it := range items {
		r, n, f := it.raw, it.node, it.file
		if !c.claim("feature service", f, n, r.Name) {
			continue
		}
		obj := fmt.Sprintf("feature service '%s'", r.Name)
		ok := true
		if len(r.Features) == 0 {
			c.errorf(f, n.Line, obj, "features is required (view:feature, view, or {view, features})")
			continue
		}
		var refs []string
		var lines []int
		for i := range r.Features {
			fn := yamlstrict.Resolve(&r.Features[i])
			switch fn.Kind {
			case yaml.ScalarNode:
				refs = append(refs, fn.Value)
				lines = append(lines, fn.Line)
			case yaml.MappingNode:
				var sr rawServiceRef
				before := len(c.errs)
				checkFields(f, obj, fn, typeOf[rawServiceRef](), &c.errs)
				if err := fn.Decode(&sr); err != nil {
					c.errs = append(c.errs, yamlError(f, obj, err)...)
				}
				if len(c.errs) > before {
					ok = false
					continue
				}
				if sr.View == "" {
					c.errorf(f, fn.Line, obj, "features[%d]: view is required", i)
					ok = false
					continue
				}
				if len(sr.Features) == 0 {
					refs = append(refs, sr.View)
					lines = append(lines, fn.Line)
				}
				for j, ft := range sr.Features {
					refs = append(refs, sr.View+":"+ft)
					lines = append(lines, lineOf(fn, "features", strconv.Itoa(j)))
				}
			default:
				c.errorf(f, fn.Line, obj, "features[%d]: want \"view:feature\", \"view\" or {view, features}", i)
				ok = false
			}
		}
		var out []feature.FeatureRef
		seen := map[string]bool{}
		for i, ref := range refs {
			view, feat, hasFeat := strings.Cut(ref, ":")
			v := c.repo.Views[view]
			if v == nil {
				v = c.repo.onDemandAsView(view)
			}
			if v == nil {
				if c.defined("feature view", view) || c.defined(onDemandKind, view) {
					ok = false // the view is defined but broken: reported there
					continue
				}
				c.errorf(f, lines[i], obj, "feature view '%s' is not defined (feature views: %s)", view, keyList(c.repo.Views))
				ok = false
				continue
			}
			var feats []string
			if hasFeat {
				if !slices.ContainsFunc(v.Schema, func(fd feature.Field) bool { return fd.Name == feat }) {
					c.errorf(f, lines[i], obj, "feature view '%s' has no feature '%s' (features: %s)", view, feat, schemaList(v.Schema))
					ok = false
					continue
				}
				feats = []string{feat}
			} else {
				for _, fd := range v.Schema {
					feats = append(feats, fd.Name)
				}
			}
			for _, ft := range feats {
				if seen[view+":"+ft] {
					c.errorf(f, lines[i], obj, "feature '%s:%s' is listed twice", view, ft)
					ok = false
					continue
				}
				seen[view+":"+ft] = true
				out = addRef(out, view, ft)
			}
		}
		if ok {
			c.repo.Services[r.Name] = &feature.Service{Name: r.Name, Features: out, Tags: r.Tags}
		}
	}
}

// addRef appends feature feat of view to refs, grouped by view in order
// of first appearance.
func addRef(refs []feature.FeatureRef, view, feat string) []feature.FeatureRef {
	for i := range refs {
		if refs[i].View == view {
			refs[i].Features = append(refs[i].Features, feat)
			return refs
		}
	}
	return append(refs, feature.FeatureRef{View: view, Features: []string{feat}})
}

func keyList[V any](m map[string]V) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}

func schemaList(s []feature.Field) string {
	names := make([]string, 0, len(s))
	for _, f := range s {
		names = append(names, f.Name)
	}
	if len(names) > 12 {
		return strings.Join(names[:12], ", ") + fmt.Sprintf(", … (%d in all)", len(names))
	}
	return strings.Join(names, ", ")
}

// parseTTL parses a ttl: a Go duration ("24h", "90m"), days with an
// optional duration after them ("7d", "1d12h"), or whole seconds ("86400").
// Empty means 0: the values never expire.
func parseTTL(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	if secs, err := strconv.ParseInt(s, 10, 64); err == nil {
		if secs < 0 {
			return 0, fmt.Errorf("%q is negative (want ≥ 0)", s)
		}
		if secs > math.MaxInt64/int64(time.Second) {
			return 0, fmt.Errorf("%q is too long", s)
		}
		return time.Duration(secs) * time.Second, nil
	}
	var days int64
	rest := s
	if i := strings.IndexByte(s, 'd'); i > 0 {
		d, err := strconv.ParseInt(s[:i], 10, 64)
		if err == nil {
			if d < 0 || d > math.MaxInt64/int64(24*time.Hour) {
				return 0, fmt.Errorf("%q is out of range", s)
			}
			days, rest = d, s[i+1:]
		}
	}
	var d time.Duration
	if rest != "" {
		var err error
		d, err = time.ParseDuration(rest)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration (want e.g. 6h, 7d, 1d12h or seconds)", s)
		}
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative (want ≥ 0)", s)
	}
	total := time.Duration(days) * 24 * time.Hour
	if total > math.MaxInt64-d {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return total + d, nil
}

// ParseKey parses a join key value written as text (a definition's hot
// keys, a CLI argument) as kind.
func ParseKey(kind feature.Kind, s string) (feature.Value, error) {
	switch kind {
	case feature.KindInt32:
		i, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
		if err != nil {
			return feature.Value{}, fmt.Errorf("not an Int32")
		}
		return feature.Value{I64: i}, nil
	case feature.KindInt64:
		i, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return feature.Value{}, fmt.Errorf("not an Int64")
		}
		return feature.Value{I64: i}, nil
	case feature.KindString:
		return feature.Value{S: s}, nil
	case feature.KindBytes:
		return feature.Value{B: []byte(s)}, nil
	default:
		return feature.Value{}, fmt.Errorf("%s is not a join key type", kind)
	}
}

// formatKey is ParseKey's inverse.
func formatKey(kind feature.Kind, v feature.Value) string {
	switch kind {
	case feature.KindString:
		return v.S
	case feature.KindBytes:
		return string(v.B)
	default:
		return strconv.FormatInt(v.I64, 10)
	}
}
