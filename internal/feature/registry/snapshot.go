package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluice-ml/sluice/internal/feature"
)

// SnapshotVersion is the registry file format's version.
const SnapshotVersion = 1

// Snapshot is the registry file: the compiled definitions as JSON, sorted
// by name so the file diffs cleanly.
type Snapshot struct {
	Version  int               `json:"version"`
	Project  string            `json:"project"`
	Entities []SnapshotEntity  `json:"entities"`
	Sources  []SnapshotSource  `json:"sources"`
	Views    []SnapshotView    `json:"feature_views"`
	Services []SnapshotService `json:"feature_services"`
	// OnDemandViews are absent from registries written before they
	// existed, which reads as none.
	OnDemandViews []SnapshotOnDemandView `json:"on_demand_feature_views,omitempty"`
}

// SnapshotEntity is an entity in the registry file.
type SnapshotEntity struct {
	Name      string            `json:"name"`
	JoinKey   string            `json:"join_key"`
	ValueType string            `json:"value_type"`
	Tags      map[string]string `json:"tags,omitempty"`
}

// SnapshotSource is a source in the registry file.
type SnapshotSource struct {
	Name                   string            `json:"name"`
	Type                   string            `json:"type"`
	Path                   string            `json:"path,omitempty"`
	S3EndpointOverride     string            `json:"s3_endpoint_override,omitempty"`
	TimestampField         string            `json:"timestamp_field,omitempty"`
	CreatedTimestampColumn string            `json:"created_timestamp_column,omitempty"`
	FieldMapping           map[string]string `json:"field_mapping,omitempty"`
	BatchSource            string            `json:"batch_source,omitempty"`
	Schema                 []SnapshotField   `json:"schema,omitempty"` // request sources
	// Stream sources.
	URL           string `json:"url,omitempty"`
	Stream        string `json:"stream,omitempty"`
	Subject       string `json:"subject,omitempty"`
	Format        string `json:"format,omitempty"`
	Consumer      string `json:"consumer,omitempty"`
	SequenceField string `json:"sequence_field,omitempty"`
}

// SnapshotField is one schema field in the registry file.
type SnapshotField struct {
	Name  string `json:"name"`
	Dtype string `json:"dtype"`
}

// SnapshotHot is a view's hot subset in the registry file.
type SnapshotHot struct {
	View string   `json:"view"`
	Keys []string `json:"keys"`
	TTL  string   `json:"ttl"`
}

// SnapshotView is a feature view in the registry file.
type SnapshotView struct {
	Name        string            `json:"name"`
	Entities    []string          `json:"entities"`
	Schema      []SnapshotField   `json:"schema"`
	TTL         string            `json:"ttl"`
	Online      bool              `json:"online"`
	Source      string            `json:"source"`
	Tags        map[string]string `json:"tags,omitempty"`
	StalePolicy string            `json:"stale_policy"`
	Hot         *SnapshotHot      `json:"hot,omitempty"`
	// Stream is set for stream feature views.
	Stream *SnapshotStream `json:"stream,omitempty"`
}

// SnapshotService is a feature service in the registry file.
type SnapshotService struct {
	Name     string            `json:"name"`
	Features []string          `json:"features"` // view:feature
	Tags     map[string]string `json:"tags,omitempty"`
}

// Snapshot returns the registry file contents for r.
func (r *Repo) Snapshot() *Snapshot {
	s := &Snapshot{Version: SnapshotVersion, Project: r.Project}
	for _, name := range slices.Sorted(maps.Keys(r.Entities)) {
		e := r.Entities[name]
		s.Entities = append(s.Entities, SnapshotEntity{Name: e.Name, JoinKey: e.JoinKey, ValueType: e.ValueType.String(), Tags: e.Tags})
	}
	for _, name := range slices.Sorted(maps.Keys(r.Sources)) {
		src := r.Sources[name]
		typ := "file"
		if src.Kind == feature.SourcePush {
			typ = "push"
		}
		ss := SnapshotSource{
			Name: src.Name, Type: typ, Path: src.Path, S3EndpointOverride: src.S3EndpointOverride, TimestampField: src.TimestampField,
			CreatedTimestampColumn: src.CreatedTimestampColumn, FieldMapping: src.FieldMapping, BatchSource: src.BatchSource,
		}
		if st := src.Stream; st != nil {
			ss.Type = "stream"
			ss.URL, ss.Stream, ss.Subject, ss.Format, ss.Consumer, ss.SequenceField = st.URL, st.Stream, st.Subject, st.Format, st.Consumer, st.SequenceField
		}
		s.Sources = append(s.Sources, ss)
	}
	for _, name := range slices.Sorted(maps.Keys(r.Views)) {
		v := r.Views[name]
		sv := SnapshotView{Name: v.Name, Entities: v.Entities, TTL: v.TTL.String(), Online: v.Online, Source: v.Source, Tags: v.Tags, StalePolicy: "withhold", Stream: snapshotStream(v.Stream)}
		if v.StalePolicy == feature.StaleFlag {
			sv.StalePolicy = "flag"
		}
		for _, f := range v.Schema {
			sv.Schema = append(sv.Schema, SnapshotField{Name: f.Name, Dtype: f.Type.String()})
		}
		if v.Hot != nil {
			_, kinds := r.JoinKeys(v.Name)
			h := &SnapshotHot{View: v.Hot.View, TTL: v.Hot.TTL.String()}
			for _, k := range v.Hot.Keys {
				h.Keys = append(h.Keys, formatKey(kinds[0], k))
			}
			sv.Hot = h
		}
		s.Views = append(s.Views, sv)
	}
	for _, name := range slices.Sorted(maps.Keys(r.Services)) {
		svc := r.Services[name]
		ss := SnapshotService{Name: svc.Name, Tags: svc.Tags}
		for _, fr := range svc.Features {
			for _, f := range fr.Features {
				ss.Features = append(ss.Features, fr.View+":"+f)
			}
		}
		s.Services = append(s.Services, ss)
	}
	r.snapshotOnDemand(s)
	return s
}

// ReadSnapshot reads a registry file. A missing file is an empty registry
// (nothing applied yet): it returns nil and no error.
func ReadSnapshot(path string) (*Snapshot, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read registry: %w", err)
	}
	var s Snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("read registry %s: %w", path, err)
	}
	if s.Version != SnapshotVersion {
		return nil, fmt.Errorf("read registry %s: version %d is not supported (want %d)", path, s.Version, SnapshotVersion)
	}
	return &s, nil
}

// WriteSnapshot writes s to path atomically: to a temporary file in the
// same folder, synced, then renamed over path, so readers see the old
// file or the new one, never a part.
func WriteSnapshot(path string, s *Snapshot) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode registry: %w", err)
	}
	data = append(data, '\n')
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("write registry: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write registry: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write registry: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write registry: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write registry: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write registry: %w", err)
	}
	ok = true
	return nil
}

// Op is what a plan does to one object.
type Op byte

// The plan operations, printed as their symbols.
const (
	OpAdd    Op = '+'
	OpChange Op = '~'
	OpRemove Op = '-'
)

// Change is one object that differs between the registry and the
// definitions.
type Change struct {
	Op      Op
	Kind    string   // "entity", "source", "feature view", "feature service"
	Name    string   //
	Details []string // for OpChange: what changed, e.g. "ttl: 6h0m0s → 3h0m0s"
}

// Diff compares the applied registry (old, nil when none) with the
// definitions (cur) and returns the changes, by kind and then name.
func Diff(old, cur *Snapshot) []Change {
	if old == nil {
		old = &Snapshot{}
	}
	var out []Change
	out = diffKind(out, "entity", old.Entities, cur.Entities, func(e SnapshotEntity) string { return e.Name }, fieldDiff[SnapshotEntity])
	out = diffKind(out, "source", old.Sources, cur.Sources, func(s SnapshotSource) string { return s.Name }, fieldDiff[SnapshotSource])
	oldPlain, oldStream := splitStreamViews(old.Views)
	curPlain, curStream := splitStreamViews(cur.Views)
	out = diffKind(out, "feature view", oldPlain, curPlain, func(v SnapshotView) string { return v.Name }, viewDiff)
	out = diffKind(out, streamKind, oldStream, curStream, func(v SnapshotView) string { return v.Name }, streamViewDiff)
	out = diffKind(out, "feature service", old.Services, cur.Services, func(s SnapshotService) string { return s.Name }, serviceDiff)
	out = diffKind(out, onDemandKind, old.OnDemandViews, cur.OnDemandViews, func(v SnapshotOnDemandView) string { return v.Name }, onDemandDiff)
	return out
}

func diffKind[T any](out []Change, kind string, old, cur []T, name func(T) string, details func(a, b T) []string) []Change {
	om := make(map[string]T, len(old))
	for _, o := range old {
		om[name(o)] = o
	}
	nm := make(map[string]T, len(cur))
	for _, n := range cur {
		nm[name(n)] = n
	}
	names := slices.Sorted(maps.Keys(nm))
	for n := range om {
		if _, ok := nm[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		o, inOld := om[n]
		nw, inNew := nm[n]
		switch {
		case !inOld:
			out = append(out, Change{Op: OpAdd, Kind: kind, Name: n})
		case !inNew:
			out = append(out, Change{Op: OpRemove, Kind: kind, Name: n})
		default:
			if d := details(o, nw); len(d) > 0 {
				out = append(out, Change{Op: OpChange, Kind: kind, Name: n, Details: d})
			}
		}
	}
	return out
}

// fieldDiff compares two objects field by field through their JSON form.
func fieldDiff[T any](a, b T) []string {
	am, bm := jsonFields(a), jsonFields(b)
	var out []string
	for _, k := range slices.Sorted(maps.Keys(unionKeys(am, bm))) {
		if am[k] != bm[k] {
			out = append(out, fmt.Sprintf("%s: %s → %s", k, orNone(am[k]), orNone(bm[k])))
		}
	}
	return out
}

func jsonFields(v any) map[string]string {
	data, _ := json.Marshal(v)
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(data, &raw)
	out := make(map[string]string, len(raw))
	for k, r := range raw {
		out[k] = string(r)
	}
	return out
}

func unionKeys(a, b map[string]string) map[string]bool {
	u := make(map[string]bool, len(a)+len(b))
	for k := range a {
		u[k] = true
	}
	for k := range b {
		u[k] = true
	}
	return u
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// viewDiff lists what changed in a view. A schema change also says what
// it does to the values already in the online store: rows carry the
// schema they were written with and are read by feature name, so a
// reorder is harmless and a removed feature is simply no longer served,
// but an added or retyped feature has no readable value in the stored
// rows (NOT_FOUND) until the view is materialized or pushed again.
func viewDiff(a, b SnapshotView) []string {
	if a.Stream != nil || b.Stream != nil {
		return streamViewDiff(a, b)
	}
	var out []string
	old := make(map[string]string, len(a.Schema))
	for _, f := range a.Schema {
		old[f.Name] = f.Dtype
	}
	nw := make(map[string]bool, len(b.Schema))
	unavailable := false
	for _, f := range b.Schema {
		nw[f.Name] = true
		switch t, ok := old[f.Name]; {
		case !ok:
			out = append(out, fmt.Sprintf("schema: + %s %s", f.Name, f.Dtype),
				fmt.Sprintf("    %s reads NOT_FOUND for rows stored before this change until the view is re-materialized", f.Name))
			unavailable = true
		case t != f.Dtype:
			out = append(out, fmt.Sprintf("schema: ~ %s %s → %s", f.Name, t, f.Dtype),
				fmt.Sprintf("    stored %s values read NOT_FOUND until the view is re-materialized (never reinterpreted); apply needs --allow-type-change", f.Name))
			unavailable = true
		}
	}
	for _, f := range a.Schema {
		if !nw[f.Name] {
			out = append(out, fmt.Sprintf("schema: - %s %s", f.Name, f.Dtype),
				fmt.Sprintf("    %s is no longer served", f.Name))
		}
	}
	if !sameOrder(a.Schema, b.Schema, old, nw) {
		out = append(out, "schema: features reordered",
			"    harmless: stored rows are read by feature name")
	}
	if len(out) > 0 && b.Online {
		if unavailable {
			out = append(out, "online store: the values above are unavailable until the view is re-materialized or pushed to; materialization rewrites rows of the old schema even when their event time is unchanged")
		} else {
			out = append(out, "online store: stored rows stay readable; the next materialization rewrites them under the new schema")
		}
	}
	a.Schema, b.Schema = nil, nil
	return append(out, fieldDiff(a, b)...)
}

// sameOrder reports whether the features a and b share are in the same
// order in both.
func sameOrder(a, b []SnapshotField, inA map[string]string, inB map[string]bool) bool {
	var x, y []string
	for _, f := range a {
		if inB[f.Name] {
			x = append(x, f.Name)
		}
	}
	for _, f := range b {
		if _, ok := inA[f.Name]; ok {
			y = append(y, f.Name)
		}
	}
	return slices.Equal(x, y)
}

// TypeChanges lists the features whose dtype differs between the applied
// registry (old, nil when none) and the definitions (cur), as
// "view:feature Old → New", by view and feature name. Their stored online
// values read NOT_FOUND until the view is re-materialized, so apply asks
// for confirmation.
func TypeChanges(old, cur *Snapshot) []string {
	if old == nil {
		return nil
	}
	oldViews := make(map[string]SnapshotView, len(old.Views))
	for _, v := range old.Views {
		oldViews[v.Name] = v
	}
	var out []string
	for _, v := range cur.Views {
		ov, ok := oldViews[v.Name]
		if !ok {
			continue
		}
		types := make(map[string]string, len(ov.Schema))
		for _, f := range ov.Schema {
			types[f.Name] = f.Dtype
		}
		for _, f := range v.Schema {
			if t, ok := types[f.Name]; ok && t != f.Dtype {
				out = append(out, fmt.Sprintf("%s:%s %s → %s", v.Name, f.Name, t, f.Dtype))
			}
		}
	}
	slices.Sort(out)
	return out
}

func serviceDiff(a, b SnapshotService) []string {
	var out []string
	for _, f := range b.Features {
		if !slices.Contains(a.Features, f) {
			out = append(out, "features: + "+f)
		}
	}
	for _, f := range a.Features {
		if !slices.Contains(b.Features, f) {
			out = append(out, "features: - "+f)
		}
	}
	if len(out) == 0 && !slices.Equal(a.Features, b.Features) {
		out = append(out, "features: reordered")
	}
	a.Features, b.Features = nil, nil
	return append(out, fieldDiff(a, b)...)
}

// WritePlan prints changes for people, ending with a summary line.
func WritePlan(w io.Writer, changes []Change) error {
	var b strings.Builder
	var add, change, remove int
	for _, c := range changes {
		fmt.Fprintf(&b, "%c %s '%s'\n", c.Op, c.Kind, c.Name)
		for _, d := range c.Details {
			fmt.Fprintf(&b, "    %s\n", d)
		}
		switch c.Op {
		case OpAdd:
			add++
		case OpChange:
			change++
		case OpRemove:
			remove++
		}
	}
	if len(changes) == 0 {
		b.WriteString("No changes: the registry matches the definitions.\n")
	} else {
		fmt.Fprintf(&b, "\n%d to add, %d to change, %d to remove.\n", add, change, remove)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
