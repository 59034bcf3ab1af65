// Package yamlstrict checks a YAML node tree against the Go type it is
// about to be decoded into: every mapping key must name a field of the
// struct it lands in (yaml's KnownFields, but with the key's position and
// field path, and every problem at once), and hooks see each scalar, key
// and list item on the way, with its path.
//
// sluice.yaml (package config) and the feature repository's files
// (feature/registry) both walk with it; each phrases its own messages and
// positions in the hooks. It imports only the standard library and yaml.
package yamlstrict

import (
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

var (
	nodeType        = reflect.TypeFor[yaml.Node]()
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
)

// Walker walks a node tree alongside a Go type. Set the bounds and the
// hooks it needs, then call Walk; a nil hook is skipped. A Walker is for
// one document at a time and not safe for concurrent use.
type Walker struct {
	// MaxNodes bounds the nodes one Walk visits, an alias counted each
	// time it is followed, so that an alias bomb cannot make the walk run
	// for ever; 0 means no bound.
	MaxNodes int
	// MaxDepth bounds the nesting walked, an alias counting as one level;
	// 0 means no bound.
	MaxDepth int
	// Once checks each mapping decoded into a struct once, however many
	// aliases or merge keys lead to it (positions and scalars are then
	// seen for the first path only).
	Once bool
	// MergeKeys checks the mappings that a "<<" key merges into a struct
	// against that struct; without it "<<" is a key like any other.
	MergeKeys bool

	// Scalar is called for every scalar node with the type it is decoded
	// into (pointers removed) and its field path. It may rewrite n.Value
	// and n.Tag (expanding variables, say) before the decode.
	Scalar func(n *yaml.Node, t reflect.Type, path string)
	// Item is called for every known field's key, every key of a map and
	// every list item, with the path it starts; for positions.
	Item func(path string, n *yaml.Node)
	// Unknown is called for a mapping key that struct type t does not
	// declare; path is where the key would be.
	Unknown func(key *yaml.Node, t reflect.Type, path string)
	// Mismatch is called for a list or mapping whose type wants something
	// else.
	Mismatch func(n *yaml.Node, t reflect.Type, path string)
	// Limit is called for the first node past MaxNodes and for each node
	// one level past MaxDepth; the walk goes no further there.
	Limit func(n *yaml.Node, path string)
	// Stop, when set, is asked before each node: true ends the walk (for
	// example once enough problems are reported).
	Stop func() bool

	visited int
	seen    map[*yaml.Node]bool
}

// Walk checks n, decoded into t, at field path path ("" for the root).
func (w *Walker) Walk(n *yaml.Node, t reflect.Type, path string) {
	w.walk(n, t, path, 0)
}

func (w *Walker) walk(n *yaml.Node, t reflect.Type, path string, depth int) {
	if n == nil || w.Stop != nil && w.Stop() {
		return
	}
	w.visited++
	tooMany := w.MaxNodes > 0 && w.visited > w.MaxNodes
	tooDeep := w.MaxDepth > 0 && depth > w.MaxDepth
	if tooMany || tooDeep {
		if w.Limit != nil && (tooMany && w.visited == w.MaxNodes+1 || tooDeep && depth == w.MaxDepth+1) {
			w.Limit(n, path)
		}
		return
	}
	if n.Kind == yaml.AliasNode {
		w.walk(n.Alias, t, path, depth+1)
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case n.Kind == yaml.ScalarNode:
		if w.Scalar != nil {
			w.Scalar(n, t, path)
		}
	case t == nodeType: // kept as a node; its reader checks it
	case n.Kind == yaml.SequenceNode:
		w.sequence(n, t, path, depth)
	case n.Kind == yaml.MappingNode:
		w.mapping(n, t, path, depth)
	default: // documents and dangling aliases carry no value
	}
}

func (w *Walker) sequence(n *yaml.Node, t reflect.Type, path string, depth int) {
	if t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
		w.mismatch(n, t, path)
		return
	}
	for i, item := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		w.item(p, item)
		w.walk(item, t.Elem(), p, depth+1)
	}
}

func (w *Walker) mapping(n *yaml.Node, t reflect.Type, path string, depth int) {
	switch {
	case t.Kind() == reflect.Map:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := Join(path, k.Value)
			w.item(p, k)
			w.walk(v, t.Elem(), p, depth+1)
		}
	case t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(unmarshalerType):
		w.object(n, t, path, depth)
	default:
		w.mismatch(n, t, path)
	}
}

// object checks the keys of mapping n against struct t.
func (w *Walker) object(n *yaml.Node, t reflect.Type, path string, depth int) {
	if w.Once {
		if w.seen[n] {
			return
		}
		if w.seen == nil {
			w.seen = map[*yaml.Node]bool{}
		}
		w.seen[n] = true
	}
	fields := Fields(t)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := Join(path, k.Value)
		if w.MergeKeys && k.Value == "<<" {
			w.merged(v, t, path, depth)
			continue
		}
		f, ok := lookup(fields, k.Value)
		if !ok {
			if w.Unknown != nil {
				w.Unknown(k, t, p)
			}
			continue
		}
		w.item(p, k)
		w.walk(v, f.Type, p, depth+1)
	}
}

// merged checks what a "<<" key merges: one mapping or a list of them.
func (w *Walker) merged(v *yaml.Node, t reflect.Type, path string, depth int) {
	v = Resolve(v)
	if v != nil && v.Kind == yaml.SequenceNode {
		for _, m := range v.Content {
			w.walk(Resolve(m), t, path, depth+1)
		}
		return
	}
	w.walk(v, t, path, depth+1)
}

func (w *Walker) item(path string, n *yaml.Node) {
	if w.Item != nil {
		w.Item(path, n)
	}
}

func (w *Walker) mismatch(n *yaml.Node, t reflect.Type, path string) {
	if w.Mismatch != nil {
		w.Mismatch(n, t, path)
	}
}

// Field is one key a struct accepts.
type Field struct {
	// Name is the key as YAML spells it.
	Name string
	// Type is the field's Go type.
	Type reflect.Type
}

// Fields lists the keys struct t accepts, in declaration order, as yaml
// decodes them: the tag's name, else the lower-cased field name;
// ",inline" structs flattened; "-" and unexported fields left out.
func Fields(t reflect.Type) []Field {
	return appendFields(nil, t)
}

func appendFields(out []Field, t reflect.Type) []Field {
	for f := range t.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if strings.Contains(opts, "inline") && f.Type.Kind() == reflect.Struct {
			out = appendFields(out, f.Type)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out = append(out, Field{Name: name, Type: f.Type})
	}
	return out
}

// Names returns the names of fields, in order.
func Names(fields []Field) []string {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.Name
	}
	return names
}

func lookup(fields []Field, name string) (Field, bool) {
	for _, f := range fields {
		if f.Name == name {
			return f, true
		}
	}
	return Field{}, false
}

// Join appends key to a field path: "a.b" + "c" is "a.b.c".
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Resolve follows aliases to the node they name (bounded: yaml refuses
// alias cycles).
func Resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 32; i++ {
		n = n.Alias
	}
	return n
}

// Suggest returns the field closest to key when key is a likely typo of
// it (at most two edits away, and fewer edits than key has bytes), else "".
// Among equally close fields the first in byte order wins.
func Suggest(key string, fields []Field) string {
	best, bestD := "", 3
	for _, f := range fields {
		if d := editDistance(key, f.Name); d < bestD || (d == bestD && best != "" && f.Name < best) {
			best, bestD = f.Name, d
		}
	}
	if bestD > 2 || bestD >= len(key) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
