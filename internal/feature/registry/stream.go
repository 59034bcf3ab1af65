package registry

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/aggregate"
)

// The definitions section of stream feature views (Feast's name) and the
// kind its errors and positions name.
const (
	streamSection = "stream_feature_views"
	streamKind    = "stream feature view"
)

// DefaultTile is a stream feature view's tile size when it names none.
const DefaultTile = time.Minute

// DefaultNATSURL is a stream source's server when it names none.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// The raw YAML shape of a stream feature view.
type (
	rawAggregation struct {
		Name       string `yaml:"name"`
		Column     string `yaml:"column"`
		Function   string `yaml:"function"`
		TimeWindow string `yaml:"time_window"`
	}
	rawStreamView struct {
		Name            string            `yaml:"name"`
		Entities        []string          `yaml:"entities"`
		Source          string            `yaml:"source"`
		Aggregations    []rawAggregation  `yaml:"aggregations"`
		Tile            string            `yaml:"tile"`
		AllowedLateness string            `yaml:"allowed_lateness"`
		LatePolicy      string            `yaml:"late_policy"`
		TTL             string            `yaml:"ttl"`
		Online          *bool             `yaml:"online"`
		Tags            map[string]string `yaml:"tags"`
		Description     string            `yaml:"description"`
	}
)

// streamSource fills s from a source of type stream; false when it has
// errors (reported).
func (c *compiler) streamSource(it item[rawSource], s *feature.Source) bool {
	r, n := it.raw, it.node
	obj := fmt.Sprintf("source '%s'", r.Name)
	ok := true
	bad := func(line int, format string, args ...any) {
		c.errorf(it.file, line, obj, format, args...)
		ok = false
	}
	s.Kind = feature.SourceStream
	if r.Path != "" {
		bad(lineOf(n, "path"), "path is only for file sources (a stream source's event log is its batch_source)")
	}
	if r.Schema != nil {
		bad(lineOf(n, "schema"), "schema is only for request sources (type: request)")
	}
	if r.Subject == "" {
		bad(n.Line, "subject is required for a stream source (the NATS subject its events are published on)")
	}
	if r.Stream == "" {
		bad(n.Line, "stream is required for a stream source (the JetStream stream that keeps the subject)")
	} else if !nameRE.MatchString(r.Stream) {
		bad(lineOf(n, "stream"), "stream %q may contain only letters, digits, '_', '.' and '-'", r.Stream)
	}
	if r.TimestampField == "" {
		bad(n.Line, "timestamp_field is required for a stream source (the event time field)")
	}
	switch r.Format {
	case "", "json":
	default:
		bad(lineOf(n, "format"), "format %q is not supported (want json)", r.Format)
	}
	if r.CreatedTimestampColumn != "" {
		bad(lineOf(n, "created_timestamp_column"), "created_timestamp_column belongs on the batch source (there it names each event's arrival time)")
	}
	consumer := r.Consumer
	if consumer == "" {
		consumer = "sluice-" + r.Name
	}
	if !nameRE.MatchString(consumer) || slices.Contains([]byte(consumer), '.') {
		bad(lineOf(n, "consumer"), "consumer %q may contain only letters, digits, '_' and '-'", consumer)
	}
	url := r.URL
	if url == "" {
		url = DefaultNATSURL
	}
	s.Stream = &feature.StreamSource{URL: url, Stream: r.Stream, Subject: r.Subject, Format: "json", Consumer: consumer, SequenceField: r.SequenceField}
	return ok
}

// streamViews compiles the stream feature views: like feature views
// they have entities, a ttl and a source (a stream source), and their
// schema is their aggregations, each Int64 (count) or Float64.
func (c *compiler) streamViews(items []item[rawStreamView]) {
	for _, it := range items {
		if c.claim(streamKind, it.file, it.node, it.raw.Name) {
			c.streamView(it)
		}
	}
}

// streamView compiles one stream feature view and adds it to the
// repository unless it has problems.
func (c *compiler) streamView(it item[rawStreamView]) {
	r, n := it.raw, it.node
	rep := c.newReport(it.file, fmt.Sprintf("%s '%s'", streamKind, r.Name))
	bad := rep.bad
	v := &feature.View{Name: r.Name, Entities: r.Entities, Source: r.Source, Tags: r.Tags, Online: true}
	if r.Online != nil {
		v.Online = *r.Online
	}
	c.streamEntities(rep, r, n)
	c.streamSourceRef(rep, r, n)
	ttl, err := parseTTL(r.TTL)
	if err != nil {
		bad(lineOf(n, "ttl"), "ttl: %v", err)
	}
	v.TTL = ttl
	sv := streamTiming(rep, r, n)
	if len(r.Aggregations) == 0 {
		bad(n.Line, "aggregations is required (at least one {name, function, column, time_window})")
	}
	streamAggregations(rep, r, n, sv, v)
	if !rep.ok {
		return
	}
	spec, err := aggregate.NewSpec(sv)
	if err != nil {
		bad(n.Line, "%v", err)
		return
	}
	v.Stream = sv
	c.repo.Views[r.Name] = v
	if c.repo.streams == nil {
		c.repo.streams = map[string]*aggregate.Spec{}
	}
	c.repo.streams[r.Name] = spec
}

// streamEntities checks a stream view's entities: at least one, each
// defined and listed once.
func (c *compiler) streamEntities(rep *objReport, r rawStreamView, n *yaml.Node) {
	if len(r.Entities) == 0 {
		rep.bad(n.Line, "entities is required (at least one entity)")
	}
	for i, e := range r.Entities {
		_, exists := c.repo.Entities[e]
		switch {
		case !exists && c.defined("entity", e):
			rep.ok = false
		case !exists:
			rep.bad(lineOf(n, "entities", strconv.Itoa(i)), "entity '%s' is not defined (entities: %s)", e, keyList(c.repo.Entities))
		case slices.Index(r.Entities, e) != i:
			rep.bad(lineOf(n, "entities", strconv.Itoa(i)), "entity '%s' is listed twice", e)
		}
	}
}

// streamSourceRef checks that a stream view's source is a defined stream
// source.
func (c *compiler) streamSourceRef(rep *objReport, r rawStreamView, n *yaml.Node) {
	src := c.repo.Sources[r.Source]
	switch {
	case r.Source == "":
		rep.bad(n.Line, "source is required (a stream source)")
	case src == nil && c.defined("source", r.Source):
		rep.ok = false
	case src == nil:
		rep.bad(lineOf(n, "source"), "source '%s' is not defined (sources: %s)", r.Source, keyList(c.repo.Sources))
	case src.Kind != feature.SourceStream:
		rep.bad(lineOf(n, "source"), "source '%s' is not a stream source (want type: stream)", r.Source)
	}
}

// streamTiming reads a stream view's tile size, allowed lateness and late
// policy, with the defaults for those not given.
func streamTiming(rep *objReport, r rawStreamView, n *yaml.Node) *feature.StreamView {
	sv := &feature.StreamView{Tile: DefaultTile, LatePolicy: "drop"}
	if r.Tile != "" {
		d, err := parseTTL(r.Tile)
		if err != nil || d <= 0 {
			rep.bad(lineOf(n, "tile"), "tile %q: want a positive duration such as 1m", r.Tile)
		} else {
			sv.Tile = d
		}
	}
	if r.AllowedLateness != "" {
		d, err := parseTTL(r.AllowedLateness)
		if err != nil {
			rep.bad(lineOf(n, "allowed_lateness"), "allowed_lateness: %v", err)
		}
		sv.AllowedLateness = d
	}
	switch r.LatePolicy {
	case "", "drop":
	default:
		rep.bad(lineOf(n, "late_policy"), "late_policy %q is not supported (want drop: late events are counted and dropped)", r.LatePolicy)
	}
	return sv
}

// streamAggregations checks a stream view's aggregations and adds each
// good one to sv and, as a feature, to v's schema: a unique name, a known
// function, a column unless it counts, and a positive time window that is
// a multiple of the tile size.
func streamAggregations(rep *objReport, r rawStreamView, n *yaml.Node, sv *feature.StreamView, v *feature.View) {
	seen := map[string]bool{}
	for i, a := range r.Aggregations {
		line := lineOf(n, "aggregations", strconv.Itoa(i))
		at := func(key string) int { return lineOf(n, "aggregations", strconv.Itoa(i), key) }
		if !rep.newFeatureName(line, "aggregations", i, a.Name, seen) {
			continue
		}
		fn, fok := aggregate.ParseFunc(a.Function)
		if !fok {
			rep.bad(at("function"), "feature '%s': function %q is not supported (want one of %s)", a.Name, a.Function, aggregate.Funcs)
			continue
		}
		if a.Column == "" && fn != aggregate.Count {
			rep.bad(line, "feature '%s': %s needs a column (the event field it aggregates)", a.Name, fn)
			continue
		}
		w, err := parseTTL(a.TimeWindow)
		switch {
		case err != nil || w <= 0:
			rep.bad(at("time_window"), "feature '%s': time_window %q: want a positive duration such as 10m or 1h", a.Name, a.TimeWindow)
			continue
		case w%sv.Tile != 0:
			rep.bad(at("time_window"), "feature '%s': time_window %s is not a multiple of the tile size %s", a.Name, w, sv.Tile)
			continue
		}
		sv.Aggregations = append(sv.Aggregations, feature.Aggregation{Name: a.Name, Column: a.Column, Function: fn.String(), Window: w})
		v.Schema = append(v.Schema, feature.Field{Name: a.Name, Type: fn.Type()})
	}
}

// StreamSpec returns the compiled tile arithmetic of a stream feature
// view, or nil when name is not one.
func (r *Repo) StreamSpec(name string) *aggregate.Spec { return r.streams[name] }

// SnapshotStream is what makes a feature view in the registry file a
// stream feature view.
type SnapshotStream struct {
	Tile            string                `json:"tile"`
	AllowedLateness string                `json:"allowed_lateness"`
	LatePolicy      string                `json:"late_policy"`
	Aggregations    []SnapshotAggregation `json:"aggregations"`
}

// SnapshotAggregation is one aggregation feature in the registry file.
type SnapshotAggregation struct {
	Name       string `json:"name"`
	Column     string `json:"column,omitempty"`
	Function   string `json:"function"`
	TimeWindow string `json:"time_window"`
}

func snapshotStream(v *feature.StreamView) *SnapshotStream {
	if v == nil {
		return nil
	}
	s := &SnapshotStream{Tile: v.Tile.String(), AllowedLateness: v.AllowedLateness.String(), LatePolicy: v.LatePolicy}
	for _, a := range v.Aggregations {
		s.Aggregations = append(s.Aggregations, SnapshotAggregation{Name: a.Name, Column: a.Column, Function: a.Function, TimeWindow: a.Window.String()})
	}
	return s
}

// streamViewDiff lists what changed in a stream feature view: each
// aggregation added, removed or changed, then its other fields.
func streamViewDiff(a, b SnapshotView) []string {
	var out []string
	var as, bs []SnapshotAggregation
	if a.Stream != nil {
		as = a.Stream.Aggregations
	}
	if b.Stream != nil {
		bs = b.Stream.Aggregations
	}
	old := map[string]SnapshotAggregation{}
	for _, x := range as {
		old[x.Name] = x
	}
	for _, x := range bs {
		o, had := old[x.Name]
		switch {
		case !had:
			out = append(out, fmt.Sprintf("aggregations: + %s = %s(%s) over %s", x.Name, x.Function, x.Column, x.TimeWindow))
		case o != x:
			out = append(out, fmt.Sprintf("aggregations: ~ %s = %s(%s) over %s → %s(%s) over %s", x.Name, o.Function, o.Column, o.TimeWindow, x.Function, x.Column, x.TimeWindow))
		}
		delete(old, x.Name)
	}
	for _, name := range slices.Sorted(maps.Keys(old)) {
		out = append(out, fmt.Sprintf("aggregations: - %s", name))
	}
	a.Schema, b.Schema = nil, nil
	if a.Stream != nil && b.Stream != nil {
		sa, sb := *a.Stream, *b.Stream
		sa.Aggregations, sb.Aggregations = nil, nil
		out = append(out, fieldDiff(sa, sb)...)
		a.Stream, b.Stream = nil, nil
	}
	return append(out, fieldDiff(a, b)...)
}

// splitStreamViews splits views into feature views and stream feature
// views, so plan names each by its kind.
func splitStreamViews(views []SnapshotView) (plain, streams []SnapshotView) {
	for _, v := range views {
		if v.Stream != nil {
			streams = append(streams, v)
		} else {
			plain = append(plain, v)
		}
	}
	return plain, streams
}
