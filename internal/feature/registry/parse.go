package registry

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/yamlstrict"
)

// The raw YAML shapes of the definitions. checkFields rejects any key
// these do not name, so a typo ("ttll") is an error and not a silently
// ignored field.
type (
	rawEntity struct {
		Name        string            `yaml:"name"`
		JoinKeys    []string          `yaml:"join_keys"`
		ValueType   string            `yaml:"value_type"`
		Description string            `yaml:"description"`
		Tags        map[string]string `yaml:"tags"`
	}
	rawSource struct {
		Name                   string            `yaml:"name"`
		Type                   string            `yaml:"type"`
		Path                   string            `yaml:"path"`
		S3EndpointOverride     string            `yaml:"s3_endpoint_override"`
		TimestampField         string            `yaml:"timestamp_field"`
		CreatedTimestampColumn string            `yaml:"created_timestamp_column"`
		FieldMapping           map[string]string `yaml:"field_mapping"`
		BatchSource            string            `yaml:"batch_source"`
		Description            string            `yaml:"description"`
		Schema                 []rawField        `yaml:"schema"` // request sources
		// Stream sources.
		URL           string `yaml:"url"`
		Stream        string `yaml:"stream"`
		Subject       string `yaml:"subject"`
		Format        string `yaml:"format"`
		Consumer      string `yaml:"consumer"`
		SequenceField string `yaml:"sequence_field"`
	}
	rawField struct {
		Name  string `yaml:"name"`
		Dtype string `yaml:"dtype"`
	}
	rawHot struct {
		Entities     []string `yaml:"entities"`
		EntitiesFile string   `yaml:"entities_file"`
		TTL          string   `yaml:"ttl"`
	}
	rawView struct {
		Name        string            `yaml:"name"`
		Entities    []string          `yaml:"entities"`
		Schema      []rawField        `yaml:"schema"`
		TTL         string            `yaml:"ttl"`
		Online      *bool             `yaml:"online"`
		Source      string            `yaml:"source"`
		Tags        map[string]string `yaml:"tags"`
		StalePolicy string            `yaml:"stale_policy"`
		Hot         *rawHot           `yaml:"hot"`
		Description string            `yaml:"description"`
	}
	rawServiceRef struct {
		View     string   `yaml:"view"`
		Features []string `yaml:"features"`
	}
	rawService struct {
		Name        string            `yaml:"name"`
		Features    []yaml.Node       `yaml:"features"`
		Tags        map[string]string `yaml:"tags"`
		Description string            `yaml:"description"`
	}
)

// item is one decoded definition with its YAML node, kept for positions.
type item[T any] struct {
	file string
	node *yaml.Node
	raw  T
}

// defs are the raw definitions of all files, in file order.
type defs struct {
	entities []item[rawEntity]
	sources  []item[rawSource]
	views    []item[rawView]
	services []item[rawService]
	onDemand []item[rawOnDemandView]
	streams  []item[rawStreamView]
}

// The top-level keys of a definitions document, and the object kind each
// holds.
var sectionKinds = map[string]string{
	"entities":         "entity",
	"sources":          "source",
	"feature_views":    "feature view",
	"feature_services": "feature service",
	onDemandSection:    onDemandKind,
	streamSection:      streamKind,
}

// parseDefinitions decodes one definitions file into d. A file holds one
// or more YAML documents; each is a mapping of sections (entities,
// sources, feature_views, feature_services) or a list of such mappings.
func parseDefinitions(file string, data []byte, d *defs, errs *[]Error) {
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			*errs = append(*errs, yamlError(file, "", err)...)
			return
		}
		root := docRoot(&doc)
		if root == nil {
			continue
		}
		switch root.Kind {
		case yaml.SequenceNode:
			for _, m := range root.Content {
				parseSections(file, yamlstrict.Resolve(m), d, errs)
			}
		default:
			parseSections(file, root, d, errs)
		}
	}
}

func parseSections(file string, m *yaml.Node, d *defs, errs *[]Error) {
	if m.Kind != yaml.MappingNode {
		*errs = append(*errs, Error{
			Pos: posAt(file, m.Line),
			Msg: "want a mapping of entities, sources, feature_views and feature_services (or a list of them)",
		})
		return
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], yamlstrict.Resolve(m.Content[i+1])
		kind, ok := sectionKinds[k.Value]
		if !ok {
			*errs = append(*errs, Error{
				Pos: posAt(file, k.Line),
				Msg: fmt.Sprintf("unknown section %q (want entities, sources, feature_views or feature_services)", k.Value),
			})
			continue
		}
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			continue
		}
		if v.Kind != yaml.SequenceNode {
			*errs = append(*errs, Error{Pos: posAt(file, v.Line), Msg: fmt.Sprintf("%s: want a list of %s definitions", k.Value, kind)})
			continue
		}
		for idx, n := range v.Content {
			n = yamlstrict.Resolve(n)
			obj := fmt.Sprintf("%s #%d", kind, idx+1)
			if name := scalarValue(n, "name"); name != "" {
				obj = fmt.Sprintf("%s '%s'", kind, name)
			}
			switch k.Value {
			case "entities":
				decodeItem(file, obj, n, &d.entities, errs)
			case "sources":
				decodeItem(file, obj, n, &d.sources, errs)
			case "feature_views":
				decodeItem(file, obj, n, &d.views, errs)
			case "feature_services":
				decodeItem(file, obj, n, &d.services, errs)
			case onDemandSection:
				decodeItem(file, obj, n, &d.onDemand, errs)
			case streamSection:
				decodeItem(file, obj, n, &d.streams, errs)
			}
		}
	}
}

// decodeItem strictly decodes n into a T and appends it to out; on any
// error it reports them all and drops the item.
func decodeItem[T any](file, obj string, n *yaml.Node, out *[]item[T], errs *[]Error) {
	if n.Kind != yaml.MappingNode {
		*errs = append(*errs, Error{Pos: posAt(file, n.Line), Object: obj, Msg: "want a mapping"})
		return
	}
	before := len(*errs)
	checkFields(file, obj, n, typeOf[T](), errs)
	var raw T
	if err := n.Decode(&raw); err != nil {
		*errs = append(*errs, yamlError(file, obj, err)...)
	}
	if len(*errs) > before {
		return
	}
	*out = append(*out, item[T]{file: file, node: n, raw: raw})
}

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

// checkFields reports every mapping key under n that t (a struct with
// yaml tags) does not declare, recursing into nested structs and lists of
// them and into the mappings merge keys bring in. It is yaml's
// KnownFields, with positions and the object's name. Each mapping is
// checked once, so aliases and merge keys ("<<: [*a, *a]" nested many
// times) cost each node once instead of exponentially many times.
func checkFields(file, obj string, n *yaml.Node, t reflect.Type, errs *[]Error) {
	w := yamlstrict.Walker{
		MaxDepth:  16,
		Once:      true,
		MergeKeys: true,
		Unknown: func(k *yaml.Node, t reflect.Type, _ string) {
			*errs = append(*errs, Error{
				Pos: posAt(file, k.Line), Object: obj,
				Msg: fmt.Sprintf("unknown field %q (want one of %s)", k.Value, strings.Join(yamlstrict.Names(yamlstrict.Fields(t)), ", ")),
			})
		},
	}
	w.Walk(n, t, "")
}

// docRoot returns a document's content, or nil for an empty document.
func docRoot(doc *yaml.Node) *yaml.Node {
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil
		}
		doc = doc.Content[0]
	}
	doc = yamlstrict.Resolve(doc)
	if doc == nil || (doc.Kind == yaml.ScalarNode && doc.Tag == "!!null") {
		return nil
	}
	return doc
}

// valueNode returns the value of key in mapping n, or nil.
func valueNode(n *yaml.Node, key string) *yaml.Node {
	n = yamlstrict.Resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return yamlstrict.Resolve(n.Content[i+1])
		}
	}
	return nil
}

func scalarValue(n *yaml.Node, key string) string {
	v := valueNode(n, key)
	if v == nil || v.Kind != yaml.ScalarNode {
		return ""
	}
	return v.Value
}

// lineOf returns the line of key's value in n, or n's own line. Further
// path elements index into nested mappings (a key) or lists (a number).
func lineOf(n *yaml.Node, path ...string) int {
	n = yamlstrict.Resolve(n)
	if n == nil {
		return 0
	}
	line := n.Line
	cur := n
	for _, p := range path {
		var next *yaml.Node
		switch cur.Kind {
		case yaml.MappingNode:
			next = valueNode(cur, p)
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(p); err == nil && i >= 0 && i < len(cur.Content) {
				next = yamlstrict.Resolve(cur.Content[i])
			}
		default:
		}
		if next == nil {
			break
		}
		cur = next
		line = cur.Line
	}
	return line
}

func posAt(file string, line int) feature.Position { return feature.Position{File: file, Line: line} }

var yamlLineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// yamlError turns a yaml error into Errors with positions.
func yamlError(file, obj string, err error) []Error {
	var msgs []string
	if te, ok := errors.AsType[*yaml.TypeError](err); ok {
		msgs = te.Errors
	} else {
		msgs = []string{err.Error()}
	}
	out := make([]Error, 0, len(msgs))
	for _, m := range msgs {
		e := Error{Pos: posAt(file, 0), Object: obj, Msg: strings.TrimPrefix(m, "yaml: ")}
		if sm := yamlLineRE.FindStringSubmatch(m); sm != nil {
			e.Pos.Line, _ = strconv.Atoi(sm[1])
			e.Msg = sm[2]
		}
		out = append(out, e)
	}
	return out
}
