package yamlstrict

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type inner struct {
	Name  string            `yaml:"name"`
	Tags  map[string]string `yaml:"tags"`
	Skip  string            `yaml:"-"`
	Count int
}

// Embedded is inlined into outer.
type Embedded struct {
	Extra string `yaml:"extra"`
}

type outer struct {
	Items    []inner          `yaml:"items"`
	One      *inner           `yaml:"one"`
	ByName   map[string]inner `yaml:"by_name"`
	Raw      yaml.Node        `yaml:"raw"`
	Embedded `yaml:",inline"`
	Limit    int `yaml:"limit"`
}

// record is a Walker whose hooks write what they see, one line each.
func record(w *Walker) *[]string {
	var got []string
	w.Unknown = func(k *yaml.Node, t reflect.Type, path string) {
		got = append(got, fmt.Sprintf("%d:%d unknown %s in %s", k.Line, k.Column, path, t.Name()))
	}
	w.Mismatch = func(n *yaml.Node, t reflect.Type, path string) {
		got = append(got, fmt.Sprintf("%d:%d mismatch %s (%s)", n.Line, n.Column, path, t.Kind()))
	}
	w.Limit = func(n *yaml.Node, path string) {
		got = append(got, fmt.Sprintf("%d:%d limit %s", n.Line, n.Column, path))
	}
	return &got
}

func root(t *testing.T, src string) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatalf("yaml: %v", err)
	}
	return doc.Content[0]
}

func TestWalk(t *testing.T) {
	tests := []struct {
		name  string
		w     Walker
		src   string
		want  []string
		items []string // paths Item saw, when set
	}{
		{
			name: "known keys everywhere",
			src:  "items: [{name: a, tags: {x: y}, count: 1}]\none: {name: b}\nby_name: {k: {name: c}}\nraw: {anything: [1]}\nextra: e\nlimit: 3\n",
			items: []string{
				"items", "items[0]", "items[0].name", "items[0].tags", "items[0].tags.x", "items[0].count",
				"one", "one.name", "by_name", "by_name.k", "by_name.k.name", "raw", "extra", "limit",
			},
		},
		{
			name: "unknown keys with their paths",
			src:  "items: [{nam: a}]\none: {name: b, skip: s}\nby_name: {k: {colour: red}}\nlimt: 3\n",
			want: []string{
				"1:10 unknown items[0].nam in inner",
				"2:16 unknown one.skip in inner",
				"3:15 unknown by_name.k.colour in inner",
				"4:1 unknown limt in outer",
			},
		},
		{
			name: "lists and mappings where they do not belong",
			src:  "items: {name: a}\none: [a]\nlimit: {x: 1}\n",
			want: []string{"1:8 mismatch items (slice)", "2:6 mismatch one (struct)", "3:8 mismatch limit (int)"},
		},
		{
			name: "merge keys are keys unless asked for",
			src:  "one: {<<: {name: a}}\n",
			want: []string{"1:7 unknown one.<< in inner"},
		},
		{
			name: "merged mappings are checked",
			w:    Walker{MergeKeys: true},
			src:  "base: &b {name: a, bad: 1}\none: {<<: [*b, {name: c, worse: 2}]}\n",
			want: []string{"1:1 unknown base in outer", "1:20 unknown one.bad in inner", "2:26 unknown one.worse in inner"},
		},
		{
			name: "aliases are followed at every use",
			src:  "one: &o {name: a, nope: 1}\nitems: [*o, *o]\n",
			want: []string{"1:19 unknown one.nope in inner", "1:19 unknown items[0].nope in inner", "1:19 unknown items[1].nope in inner"},
		},
		{
			name: "once checks a shared mapping once",
			w:    Walker{Once: true},
			src:  "one: &o {name: a, nope: 1}\nitems: [*o, *o]\n",
			want: []string{"1:19 unknown one.nope in inner"},
		},
		{
			name: "depth bound",
			w:    Walker{MaxDepth: 2},
			src:  "items: [{name: a}]\n",
			want: []string{"1:16 limit items[0].name"},
		},
		{
			name: "node bound reports once",
			w:    Walker{MaxNodes: 3},
			src:  "items: [{name: a}, {name: b}]\n",
			want: []string{"1:16 limit items[0].name"}, // the 4th node: the value a
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := tt.w
			got := record(&w)
			var items []string
			w.Item = func(path string, _ *yaml.Node) { items = append(items, path) }
			w.Walk(root(t, tt.src), reflect.TypeFor[outer](), "")
			if !slices.Equal(*got, tt.want) {
				t.Fatalf("got\n%s\nwant\n%s", strings.Join(*got, "\n"), strings.Join(tt.want, "\n"))
			}
			if tt.items != nil && !slices.Equal(items, tt.items) {
				t.Fatalf("items = %q, want %q", items, tt.items)
			}
		})
	}
}

func TestScalarSeesTypeAndPath(t *testing.T) {
	var got []string
	w := Walker{Scalar: func(n *yaml.Node, ty reflect.Type, path string) {
		got = append(got, fmt.Sprintf("%s=%s (%s)", path, n.Value, ty.Kind()))
		n.Value = strings.ToUpper(n.Value) // hooks may rewrite before decoding
	}}
	n := root(t, "one: {name: a}\nlimit: 3\nitems: [{tags: {k: v}}]\n")
	w.Walk(n, reflect.TypeFor[outer](), "")
	want := []string{"one.name=a (string)", "limit=3 (int)", "items[0].tags.k=v (string)"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	var o outer
	if err := n.Decode(&o); err != nil || o.One.Name != "A" {
		t.Fatalf("decoded %+v, %v; want the rewritten value", o.One, err)
	}
}

func TestStop(t *testing.T) {
	n := 0
	w := Walker{Stop: func() bool { return n >= 2 }}
	w.Unknown = func(*yaml.Node, reflect.Type, string) { n++ }
	w.Walk(root(t, "items: [{a: 1}, {b: 2}, {c: 3}]\n"), reflect.TypeFor[outer](), "")
	if n != 2 {
		t.Fatalf("%d unknown keys reported, want the walk to stop at 2", n)
	}
}

func TestFields(t *testing.T) {
	got := Names(Fields(reflect.TypeFor[outer]()))
	want := []string{"items", "one", "by_name", "raw", "extra", "limit"}
	if !slices.Equal(got, want) {
		t.Fatalf("outer fields = %q, want %q (inline flattened, in order)", got, want)
	}
	got = Names(Fields(reflect.TypeFor[inner]()))
	want = []string{"name", "tags", "count"}
	if !slices.Equal(got, want) {
		t.Fatalf("inner fields = %q, want %q (untagged lower-cased, '-' left out)", got, want)
	}
}

func TestSuggest(t *testing.T) {
	fields := []Field{{Name: "timeout"}, {Name: "retries"}, {Name: "routes"}, {Name: "name"}}
	tests := []struct{ key, want string }{
		{"timout", "timeout"},
		{"retires", "retries"},
		{"routs", "routes"},
		{"colour", ""},
		{"nm", ""}, // two edits, but only two bytes: not a typo
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if got := Suggest(tt.key, fields); got != tt.want {
				t.Fatalf("Suggest(%q) = %q, want %q", tt.key, got, tt.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	n := root(t, "a: &x {k: v}\nb: *x\n")
	alias := n.Content[3]
	if got := Resolve(alias); got != n.Content[1] {
		t.Fatalf("Resolve(alias) = %v, want the anchored mapping", got)
	}
	if Resolve(nil) != nil {
		t.Fatal("Resolve(nil) != nil")
	}
}

// FuzzWalk walks arbitrary documents with every option on: the walk
// must end, without panicking, on anything yaml parses.
func FuzzWalk(f *testing.F) {
	for _, s := range []string{
		"items: [{name: a, tags: {x: y}}]\none: {name: b}\n",
		"a: &a [x, x]\nb: &b [*a, *a, *a]\nitems: [*b, *b]\n",
		"one: {<<: [{name: a}, {<<: {name: b}}]}\n",
		"one: [1, {2: 3}]\nlimit: {x: [y]}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var doc yaml.Node
		if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
			return
		}
		for _, w := range []Walker{{MaxNodes: 10_000, MaxDepth: 50}, {Once: true, MergeKeys: true, MaxDepth: 16}} {
			record(&w)
			w.Scalar = func(*yaml.Node, reflect.Type, string) {}
			w.Item = func(string, *yaml.Node) {}
			w.Walk(doc.Content[0], reflect.TypeFor[outer](), "")
		}
	})
}
