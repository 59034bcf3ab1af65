package registry

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"testing/fstest"

	"go.yaml.in/yaml/v3"
)

// appliedFile is the name the registry's definitions are compiled under
// when the server serves them (positions in errors point there).
const appliedFile = "registry (applied definitions)"

// FromSnapshot compiles the applied registry snap into a Repo with the
// configuration cfgData (feature_store.yaml) of the repository in dir:
// the definitions `sluice features apply` accepted, whatever the
// definition files say now. Paths resolve against dir as usual.
func FromSnapshot(ctx context.Context, dir string, cfgData []byte, snap *Snapshot) (*Repo, error) {
	defs, err := snapshotDefinitions(snap)
	if err != nil {
		return nil, err
	}
	fsys := fstest.MapFS{
		ConfigFile:            &fstest.MapFile{Data: cfgData, Mode: 0o600},
		appliedFile + ".yaml": &fstest.MapFile{Data: defs, Mode: 0o600},
	}
	r, err := load(ctx, fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("compile the applied registry: %w", err)
	}
	return r, nil
}

// snapshotDefinitions writes snap as a definitions file.
func snapshotDefinitions(snap *Snapshot) ([]byte, error) {
	type m = map[string]any
	var ents, srcs, views, streams, svcs []m
	for _, e := range snap.Entities {
		ents = append(ents, m{"name": e.Name, "join_keys": []string{e.JoinKey}, "value_type": e.ValueType, "tags": e.Tags})
	}
	for _, s := range snap.Sources {
		x := m{"name": s.Name, "type": s.Type}
		set := func(k, v string) {
			if v != "" {
				x[k] = v
			}
		}
		set("path", s.Path)
		set("s3_endpoint_override", s.S3EndpointOverride)
		set("timestamp_field", s.TimestampField)
		set("created_timestamp_column", s.CreatedTimestampColumn)
		set("batch_source", s.BatchSource)
		set("url", s.URL)
		set("stream", s.Stream)
		set("subject", s.Subject)
		set("format", s.Format)
		set("consumer", s.Consumer)
		set("sequence_field", s.SequenceField)
		if len(s.FieldMapping) > 0 {
			x["field_mapping"] = s.FieldMapping
		}
		srcs = append(srcs, x)
	}
	for _, v := range snap.Views {
		if st := v.Stream; st != nil {
			aggs := make([]m, len(st.Aggregations))
			for i, a := range st.Aggregations {
				aggs[i] = m{"name": a.Name, "function": a.Function, "time_window": a.TimeWindow}
				if a.Column != "" {
					aggs[i]["column"] = a.Column
				}
			}
			x := m{
				"name": v.Name, "entities": v.Entities, "source": v.Source, "ttl": v.TTL, "online": v.Online,
				"tile": st.Tile, "allowed_lateness": st.AllowedLateness, "late_policy": st.LatePolicy, "aggregations": aggs,
			}
			if len(v.Tags) > 0 {
				x["tags"] = v.Tags
			}
			streams = append(streams, x)
			continue
		}
		schema := make([]m, len(v.Schema))
		for i, f := range v.Schema {
			schema[i] = m{"name": f.Name, "dtype": f.Dtype}
		}
		x := m{
			"name": v.Name, "entities": v.Entities, "schema": schema, "ttl": v.TTL, "online": v.Online,
			"source": v.Source, "stale_policy": v.StalePolicy,
		}
		if len(v.Tags) > 0 {
			x["tags"] = v.Tags
		}
		if v.Hot != nil {
			x["hot"] = m{"entities": v.Hot.Keys, "ttl": v.Hot.TTL}
		}
		views = append(views, x)
	}
	for _, s := range snap.Services {
		x := m{"name": s.Name, "features": s.Features}
		if len(s.Tags) > 0 {
			x["tags"] = s.Tags
		}
		svcs = append(svcs, x)
	}
	doc := m{}
	for k, v := range map[string][]m{"entities": ents, "sources": srcs, "feature_views": views, streamSection: streams, "feature_services": svcs} {
		if len(v) > 0 {
			doc[k] = v
		}
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encode the applied registry: %w", err)
	}
	return out, nil
}

// readConfig reads dir's feature_store.yaml.
func readConfig(dir string) ([]byte, error) {
	return fs.ReadFile(os.DirFS(dir), ConfigFile)
}
