package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online/connect"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// The kinds of definitions `features list` and `describe` show.
var featureKinds = []string{"entities", "sources", "views", "services"}

// listFlags are the flags `features list` and `features describe` share.
type listFlags struct {
	repo        string
	output      string
	noFreshness bool
}

func (f *listFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.repo, "repo", ".", "feature repository folder (holding feature_store.yaml)")
	cmd.Flags().StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	cmd.Flags().BoolVar(&f.noFreshness, "no-freshness", false, "do not open the online store to read each view's last update")
}

// viewFreshness is a view's state in the online store, as list and
// describe show it.
type viewFreshness struct {
	// Known is false when the state could not be read (see Error).
	Known bool `json:"known"`
	// LastUpdate is the last successful materialization or push; zero when
	// the view never had one.
	LastUpdate time.Time `json:"last_update,omitzero"`
	// NewestEvent is the newest event timestamp written.
	NewestEvent time.Time `json:"newest_event_timestamp,omitzero"`
	// Watermark is where the next incremental materialization starts.
	Watermark time.Time `json:"watermark,omitzero"`
	// Fresh is what reads see: "fresh", "stale" (last update older than
	// the ttl: reads answer 503 feature_view_stale), "never" (no update
	// yet, stale too), "no ttl" (never stale), "offline" or "unknown".
	Fresh string `json:"fresh"`
	Error string `json:"error,omitempty"`
}

// freshnessReader reads view states from the repository's online store.
type freshnessReader struct {
	get func(ctx context.Context, name string) ([]byte, error) // nil: not opened
	err error                                                  // why it was not opened
	now time.Time
}

// openFreshness opens repo's online store for reading view states. An
// embedded store whose file does not exist yet is not created: every view
// is then "never" updated. A store that cannot be opened (the feature
// server holds the embedded file, Redis is down) leaves freshness
// unknown; the caller reports why.
func openFreshness(ctx context.Context, repo *registry.Repo, skip bool) (*freshnessReader, func()) {
	fr := &freshnessReader{now: time.Now().UTC()}
	if skip {
		fr.err = errors.New("not read (--no-freshness)")
		return fr, func() {}
	}
	cfg := repo.Config.Online
	if cfg.Type == "" || cfg.Type == connect.TypeEmbedded {
		path := cfg.Path
		if path == "" {
			path = connect.DefaultPath
		}
		if !filepath.IsAbs(path) {
			path = filepath.Join(repo.Dir, path)
		}
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			fr.get = func(context.Context, string) ([]byte, error) { return nil, nil }
			return fr, func() {}
		}
	}
	store, err := connect.Open(ctx, cfg, repo.Project, repo.Dir, nil, nil)
	if err != nil {
		fr.err = err
		return fr, func() {}
	}
	fr.get = store.GetMeta
	return fr, func() { _ = store.Close() }
}

// of returns view v's freshness.
func (fr *freshnessReader) of(ctx context.Context, v *feature.View) viewFreshness {
	if !v.Online {
		return viewFreshness{Known: true, Fresh: "offline"}
	}
	if fr.get == nil {
		return viewFreshness{Fresh: "unknown", Error: fr.err.Error()}
	}
	b, err := fr.get(ctx, feature.ViewStateName(v.Name))
	if err != nil {
		return viewFreshness{Fresh: "unknown", Error: err.Error()}
	}
	var st feature.ViewState
	if b != nil {
		if err := json.Unmarshal(b, &st); err != nil {
			return viewFreshness{Fresh: "unknown", Error: fmt.Sprintf("view state: %v", err)}
		}
	}
	out := viewFreshness{Known: true, LastUpdate: st.LastSuccess, NewestEvent: st.NewestEventTS, Watermark: st.Watermark}
	switch {
	case v.TTL <= 0:
		out.Fresh = "no ttl"
	case st.LastSuccess.IsZero():
		out.Fresh = "never"
	case fr.now.Sub(st.LastSuccess) > v.TTL:
		out.Fresh = "stale"
	default:
		out.Fresh = "fresh"
	}
	return out
}

func newFeaturesListCmd() *cobra.Command {
	var f listFlags
	cmd := &cobra.Command{
		Use:   "list [entities|sources|views|services]",
		Short: "List the repository's entities, sources, feature views (with freshness) and feature services",
		Long: `List the definitions of a feature repository, all kinds or one.

Feature views come with their freshness, read from the online store: the last
materialization or push, the newest event timestamp written, and whether
reads see the view as fresh (last update within the ttl), stale (reads answer
503 feature_view_stale), never updated, or without a ttl. An embedded store
held open by a running feature server cannot be read at the same time:
freshness is then "unknown" with the reason.`,
		Args:      cobra.MaximumNArgs(1),
		ValidArgs: featureKinds,
		RunE: func(cmd *cobra.Command, args []string) error {
			kinds := featureKinds
			if len(args) == 1 {
				k, err := parseFeatureKind(args[0])
				if err != nil {
					return err
				}
				kinds = []string{k}
			}
			if f.output != "table" && f.output != "json" {
				return fmt.Errorf("--output %q: want table or json", f.output)
			}
			repo, err := loadFeatureRepo(cmd, f.repo, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			var fr *freshnessReader
			if slices.Contains(kinds, "views") {
				var closeStore func()
				fr, closeStore = openFreshness(cmd.Context(), repo, f.noFreshness)
				defer closeStore()
			}
			l := buildListing(cmd.Context(), repo, kinds, fr)
			if f.output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(l)
			}
			l.writeTable(cmd.OutOrStdout())
			if fr != nil && fr.err != nil && !f.noFreshness {
				fmt.Fprintf(cmd.ErrOrStderr(), "freshness unknown: %v\n", fr.err)
			}
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

// parseFeatureKind accepts a kind by its plural, singular or Feast's name
// (feature-views, feature-services, data-sources).
func parseFeatureKind(s string) (string, error) {
	switch strings.ToLower(s) {
	case "entities", "entity":
		return "entities", nil
	case "sources", "source", "data-sources", "data-source":
		return "sources", nil
	case "views", "view", "feature-views", "feature-view":
		return "views", nil
	case "services", "service", "feature-services", "feature-service":
		return "services", nil
	case "on-demand-views", "on-demand-view", "on-demand-feature-views", "on-demand-feature-view":
		return onDemandKind, nil
	}
	return "", fmt.Errorf("unknown kind %q: want one of %s", s, strings.Join(featureKinds, ", "))
}

// listing is what `features list` prints.
type listing struct {
	Project  string         `json:"project"`
	Entities []entityInfo   `json:"entities,omitempty"`
	Sources  []sourceInfo   `json:"sources,omitempty"`
	Views    []viewInfo     `json:"feature_views,omitempty"`
	Services []serviceInfo  `json:"feature_services,omitempty"`
	OnDemand []onDemandInfo `json:"on_demand_feature_views,omitempty"`
	kinds    map[string]bool
}

type entityInfo struct {
	Name      string            `json:"name"`
	JoinKey   string            `json:"join_key"`
	ValueType string            `json:"value_type"`
	Tags      map[string]string `json:"tags,omitempty"`
}

type sourceInfo struct {
	Name                   string            `json:"name"`
	Type                   string            `json:"type"`
	Path                   string            `json:"path,omitempty"`
	BatchSource            string            `json:"batch_source,omitempty"`
	TimestampField         string            `json:"timestamp_field,omitempty"`
	CreatedTimestampColumn string            `json:"created_timestamp_column,omitempty"`
	FieldMapping           map[string]string `json:"field_mapping,omitempty"`
	Schema                 []fieldInfo       `json:"schema,omitempty"` // request sources
	// Stream sources.
	URL      string `json:"url,omitempty"`
	Stream   string `json:"stream,omitempty"`
	Subject  string `json:"subject,omitempty"`
	Consumer string `json:"consumer,omitempty"`
}

type fieldInfo struct {
	Name  string `json:"name"`
	Dtype string `json:"dtype"`
}

type viewInfo struct {
	Name        string            `json:"name"`
	Entities    []string          `json:"entities"`
	Features    []fieldInfo       `json:"features"`
	TTL         string            `json:"ttl"`
	Online      bool              `json:"online"`
	Source      string            `json:"source"`
	StalePolicy string            `json:"stale_policy"`
	HotView     string            `json:"hot_view,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
	Freshness   *viewFreshness    `json:"freshness,omitempty"`
	Stream      *streamInfo       `json:"stream,omitempty"`
}

type serviceInfo struct {
	Name     string            `json:"name"`
	Features []string          `json:"features"`
	Tags     map[string]string `json:"tags,omitempty"`
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func buildListing(ctx context.Context, repo *registry.Repo, kinds []string, fr *freshnessReader) *listing {
	l := &listing{Project: repo.Project, kinds: map[string]bool{}}
	for _, k := range kinds {
		l.kinds[k] = true
	}
	if l.kinds["entities"] {
		for _, n := range sortedNames(repo.Entities) {
			l.Entities = append(l.Entities, describeEntity(repo.Entities[n]))
		}
	}
	if l.kinds["sources"] {
		for _, n := range sortedNames(repo.Sources) {
			l.Sources = append(l.Sources, describeSource(repo.Sources[n]))
		}
		for _, n := range sortedNames(repo.RequestSources) {
			l.Sources = append(l.Sources, describeRequestSource(repo.RequestSources[n]))
		}
	}
	if l.kinds["views"] {
		for _, n := range sortedNames(repo.Views) {
			l.Views = append(l.Views, describeView(ctx, repo.Views[n], fr))
		}
		for _, n := range sortedNames(repo.OnDemandViews) {
			l.OnDemand = append(l.OnDemand, describeOnDemand(repo, repo.OnDemandViews[n]))
		}
	}
	if l.kinds["services"] {
		for _, n := range sortedNames(repo.Services) {
			l.Services = append(l.Services, describeService(repo, repo.Services[n]))
		}
	}
	return l
}

func describeEntity(e *feature.Entity) entityInfo {
	return entityInfo{Name: e.Name, JoinKey: e.JoinKey, ValueType: e.ValueType.String(), Tags: e.Tags}
}

func describeSource(s *feature.Source) sourceInfo {
	kind := "file"
	if s.Kind == feature.SourcePush {
		kind = "push"
	}
	si := sourceInfo{
		Name: s.Name, Type: kind, Path: s.Path, BatchSource: s.BatchSource, TimestampField: s.TimestampField,
		CreatedTimestampColumn: s.CreatedTimestampColumn, FieldMapping: s.FieldMapping,
	}
	if st := s.Stream; st != nil {
		si.Type, si.URL, si.Stream, si.Subject, si.Consumer = "stream", st.URL, st.Stream, st.Subject, st.Consumer
	}
	return si
}

func describeView(ctx context.Context, v *feature.View, fr *freshnessReader) viewInfo {
	vi := viewInfo{Name: v.Name, Entities: v.Entities, TTL: "none", Online: v.Online, Source: v.Source, StalePolicy: "withhold", Tags: v.Tags}
	if v.TTL > 0 {
		vi.TTL = formatTTL(v.TTL)
	}
	if v.StalePolicy == feature.StaleFlag {
		vi.StalePolicy = "flag"
	}
	if v.Hot != nil {
		vi.HotView = v.Hot.View
	}
	for _, fld := range v.Schema {
		vi.Features = append(vi.Features, fieldInfo{Name: fld.Name, Dtype: fld.Type.String()})
	}
	now := time.Now().UTC()
	if fr != nil {
		st := fr.of(ctx, v)
		vi.Freshness = &st
		now = fr.now
	}
	vi.Stream = describeStream(v, vi.Freshness, now)
	return vi
}

func describeService(repo *registry.Repo, s *feature.Service) serviceInfo {
	si := serviceInfo{Name: s.Name, Tags: s.Tags}
	for _, ref := range s.Features {
		names := ref.Features
		if len(names) == 0 {
			if v := repo.Views[ref.View]; v != nil {
				for _, f := range v.Schema {
					names = append(names, f.Name)
				}
			} else if od := repo.OnDemandViews[ref.View]; od != nil {
				for _, f := range od.Schema {
					names = append(names, f.Name)
				}
			}
		}
		for _, n := range names {
			si.Features = append(si.Features, ref.View+":"+n)
		}
	}
	return si
}

// formatTTL writes a ttl in days when it is whole days ("7d"), else as Go
// writes durations ("1h30m0s" becomes "1h30m").
func formatTTL(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	s := d.String()
	s = strings.TrimSuffix(s, "0s")
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// sinceNow writes how long before now t was ("12m ago"), or "-" for zero.
func sinceNow(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "in " + (-d).Round(time.Second).String()
	case d < time.Minute:
		return d.Round(time.Second).String() + " ago"
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s") + " ago"
	default:
		return fmt.Sprintf("%dd ago", d/(24*time.Hour))
	}
}

func (l *listing) writeTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	section := func(title string) {
		fmt.Fprintf(tw, "%s\n", title)
	}
	now := time.Now().UTC()
	first := true
	gap := func() {
		if !first {
			fmt.Fprintln(tw)
		}
		first = false
	}
	if l.kinds["entities"] {
		gap()
		section("ENTITY\tJOIN KEY\tTYPE")
		for _, e := range l.Entities {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", e.Name, e.JoinKey, e.ValueType)
		}
	}
	if l.kinds["sources"] {
		gap()
		section("SOURCE\tTYPE\tPATH / BATCH SOURCE\tTIMESTAMP FIELD")
		for _, s := range l.Sources {
			where := s.Path
			if s.Type == "push" {
				where = s.BatchSource
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.Type, orDash(where), orDash(s.TimestampField))
		}
	}
	if l.kinds["views"] {
		gap()
		section("FEATURE VIEW\tENTITIES\tFEATURES\tTTL\tSOURCE\tLAST UPDATE\tNEWEST EVENT\tFRESHNESS")
		for _, v := range l.Views {
			last, newest, fresh := "-", "-", "-"
			if fs := v.Freshness; fs != nil {
				fresh = fs.Fresh
				if fs.Known {
					last, newest = sinceNow(fs.LastUpdate, now), sinceNow(fs.NewestEvent, now)
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", v.Name, strings.Join(v.Entities, ","), len(v.Features), v.TTL, v.Source, last, newest, fresh)
		}
		l.writeOnDemandTable(tw, gap)
	}
	if l.kinds["services"] {
		gap()
		section("FEATURE SERVICE\tFEATURES\tVIEWS")
		for _, s := range l.Services {
			views := []string{}
			for _, f := range s.Features {
				v, _, _ := strings.Cut(f, ":")
				if !slices.Contains(views, v) {
					views = append(views, v)
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\n", s.Name, len(s.Features), strings.Join(views, ","))
		}
	}
	_ = tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newFeaturesDescribeCmd() *cobra.Command {
	var (
		f    listFlags
		kind string
	)
	cmd := &cobra.Command{
		Use:   "describe NAME",
		Short: "Show one entity, source, feature view (with freshness) or feature service",
		Long: `Show the definition named NAME: an entity, a source, a feature view (its schema
and its freshness in the online store) or a feature service (its features).
When several kinds share the name, --kind picks one.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.output != "table" && f.output != "json" {
				return fmt.Errorf("--output %q: want table or json", f.output)
			}
			repo, err := loadFeatureRepo(cmd, f.repo, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			name := args[0]
			var found []string
			if _, ok := repo.Entities[name]; ok {
				found = append(found, "entities")
			}
			if _, ok := repo.Sources[name]; ok || repo.RequestSources[name] != nil {
				found = append(found, "sources")
			}
			if _, ok := repo.Views[name]; ok {
				found = append(found, "views")
			}
			if _, ok := repo.Services[name]; ok {
				found = append(found, "services")
			}
			if _, ok := repo.OnDemandViews[name]; ok {
				found = append(found, onDemandKind)
			}
			if kind != "" {
				k, err := parseFeatureKind(kind)
				if err != nil {
					return err
				}
				if !slices.Contains(found, k) {
					return &exitError{code: 1, err: fmt.Errorf("no %s named %q in %s", strings.TrimSuffix(k, "s"), name, f.repo)}
				}
				found = []string{k}
			}
			switch len(found) {
			case 0:
				return &exitError{code: 1, err: fmt.Errorf("nothing named %q in %s (see sluice features list)", name, f.repo)}
			case 1:
			default:
				return &exitError{code: 1, err: fmt.Errorf("%q names several definitions (%s): pick one with --kind", name, strings.Join(found, ", "))}
			}
			var obj any
			switch found[0] {
			case "entities":
				obj = describeEntity(repo.Entities[name])
			case "sources":
				if rs := repo.RequestSources[name]; rs != nil {
					obj = describeRequestSource(rs)
					break
				}
				obj = describeSource(repo.Sources[name])
			case "views":
				fr, closeStore := openFreshness(cmd.Context(), repo, f.noFreshness)
				defer closeStore()
				obj = describeView(cmd.Context(), repo.Views[name], fr)
			case "services":
				obj = describeService(repo, repo.Services[name])
			case onDemandKind:
				obj = describeOnDemand(repo, repo.OnDemandViews[name])
			}
			out := cmd.OutOrStdout()
			if f.output == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(obj)
			}
			writeDescription(out, found[0], obj)
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&kind, "kind", "", "entities, sources, views or services, when NAME is ambiguous")
	return cmd
}

// writeDescription prints one definition as "key: value" lines.
func writeDescription(w io.Writer, kind string, obj any) {
	now := time.Now().UTC()
	tags := func(m map[string]string) {
		for _, k := range sortedNames(m) {
			fmt.Fprintf(w, "  %s: %s\n", k, m[k])
		}
	}
	switch o := obj.(type) {
	case onDemandInfo:
		writeOnDemandDescription(w, o)
	case entityInfo:
		fmt.Fprintf(w, "entity: %s\njoin_key: %s\nvalue_type: %s\n", o.Name, o.JoinKey, o.ValueType)
		if len(o.Tags) > 0 {
			fmt.Fprintln(w, "tags:")
			tags(o.Tags)
		}
	case sourceInfo:
		fmt.Fprintf(w, "source: %s\ntype: %s\n", o.Name, o.Type)
		for _, kv := range [][2]string{
			{"path", o.Path},
			{"batch_source", o.BatchSource},
			{"timestamp_field", o.TimestampField},
			{"created_timestamp_column", o.CreatedTimestampColumn},
			{"url", o.URL},
			{"stream", o.Stream},
			{"subject", o.Subject},
			{"consumer", o.Consumer},
		} {
			if kv[1] != "" {
				fmt.Fprintf(w, "%s: %s\n", kv[0], kv[1])
			}
		}
		if len(o.FieldMapping) > 0 {
			fmt.Fprintln(w, "field_mapping:")
			tags(o.FieldMapping)
		}
		if len(o.Schema) > 0 {
			fmt.Fprintln(w, "schema:")
			for _, f := range o.Schema {
				fmt.Fprintf(w, "  %s: %s\n", f.Name, f.Dtype)
			}
		}
	case viewInfo:
		fmt.Fprintf(w, "feature view: %s\nentities: %s\nsource: %s\nttl: %s\nonline: %v\nstale_policy: %s\n",
			o.Name, strings.Join(o.Entities, ", "), o.Source, o.TTL, o.Online, o.StalePolicy)
		if o.HotView != "" {
			fmt.Fprintf(w, "hot view: %s\n", o.HotView)
		}
		fmt.Fprintln(w, "features:")
		for _, fld := range o.Features {
			fmt.Fprintf(w, "  %s: %s\n", fld.Name, fld.Dtype)
		}
		if fs := o.Freshness; fs != nil {
			fmt.Fprintf(w, "freshness: %s\n", fs.Fresh)
			if fs.Error != "" {
				fmt.Fprintf(w, "  error: %s\n", fs.Error)
			}
			if fs.Known && fs.Fresh != "offline" {
				stamp := func(t time.Time) string {
					if t.IsZero() {
						return "-"
					}
					return t.UTC().Format(time.RFC3339) + " (" + sinceNow(t, now) + ")"
				}
				fmt.Fprintf(w, "  last update: %s\n  newest event: %s\n  watermark: %s\n", stamp(fs.LastUpdate), stamp(fs.NewestEvent), stamp(fs.Watermark))
			}
		}
		writeStreamDescription(w, o.Stream)
		if len(o.Tags) > 0 {
			fmt.Fprintln(w, "tags:")
			tags(o.Tags)
		}
	case serviceInfo:
		fmt.Fprintf(w, "feature service: %s\nfeatures:\n", o.Name)
		for _, f := range o.Features {
			fmt.Fprintf(w, "  - %s\n", f)
		}
		if len(o.Tags) > 0 {
			fmt.Fprintln(w, "tags:")
			tags(o.Tags)
		}
	default:
		fmt.Fprintf(w, "%s: %v\n", kind, obj)
	}
}
