package match

import (
	"hash/fnv"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestHeaderMatch(t *testing.T) {
	tests := []struct {
		name string
		m    HeaderMatch
		hdr  http.Header
		want bool
	}{
		{"exact hit", HeaderMatch{Name: "x-canary", Exact: new("true")}, header("X-Canary", "true"), true},
		{"exact miss", HeaderMatch{Name: "x-canary", Exact: new("true")}, header("X-Canary", "truex"), false},
		{"exact absent", HeaderMatch{Name: "x-canary", Exact: new("")}, header(), false},
		{"exact empty value", HeaderMatch{Name: "x-canary", Exact: new("")}, header("X-Canary", ""), true},
		{"exact first value only", HeaderMatch{Name: "x-a", Exact: new("b")}, header("X-A", "a", "X-A", "b"), false},
		{"prefix hit", HeaderMatch{Name: "user-agent", Prefix: new("mobile/")}, header("User-Agent", "mobile/1.2"), true},
		{"prefix miss", HeaderMatch{Name: "user-agent", Prefix: new("mobile/")}, header("User-Agent", "web/mobile/"), false},
		{"empty prefix needs the header", HeaderMatch{Name: "x-t", Prefix: new("")}, header(), false},
		{"regex whole value", HeaderMatch{Name: "x-region", Regex: new(`eu-[a-z]+-\d`)}, header("X-Region", "eu-west-1"), true},
		{"regex is anchored", HeaderMatch{Name: "x-region", Regex: new(`eu-[a-z]+-\d`)}, header("X-Region", "xeu-west-1x"), false},
		{"regex alternation anchored", HeaderMatch{Name: "x-r", Regex: new(`a|b`)}, header("X-R", "ab"), false},
		{"regex absent", HeaderMatch{Name: "x-region", Regex: new(`.*`)}, header(), false},
		{"present true hit", HeaderMatch{Name: "x-debug", Present: new(true)}, header("X-Debug", ""), true},
		{"present true miss", HeaderMatch{Name: "x-debug", Present: new(true)}, header(), false},
		{"present false hit", HeaderMatch{Name: "x-debug", Present: new(false)}, header(), true},
		{"present false miss", HeaderMatch{Name: "x-debug", Present: new(false)}, header("x-debug", "1"), false},
		{"config name case-insensitive", HeaderMatch{Name: "X-CANARY", Exact: new("true")}, header("x-canary", "true"), true},
		{"request name case-insensitive", HeaderMatch{Name: "x-canary", Exact: new("true")}, header("X-CANARY", "true"), true},
		{"value case-sensitive", HeaderMatch{Name: "x-canary", Exact: new("true")}, header("X-Canary", "TRUE"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := tt.m.Compile()
			require.NoError(t, err)
			require.Equal(t, tt.want, h.Match(tt.hdr))
		})
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name string
		m    HeaderMatch
		want string
	}{
		{"no name", HeaderMatch{Exact: new("1")}, "header match: name is empty"},
		{"no matcher", HeaderMatch{Name: "x"}, `header "x": want exactly one of exact, prefix, regex, present; got 0`},
		{"two matchers", HeaderMatch{Name: "x", Exact: new("1"), Prefix: new("1")}, "got 2"},
		{"all matchers", HeaderMatch{Name: "x", Exact: new(""), Prefix: new(""), Regex: new(""), Present: new(false)}, "got 4"},
		{"bad regex", HeaderMatch{Name: "x", Regex: new("(")}, `header "x": compile regex: error parsing regexp`},
		// The anchors wrap the expression in a group: a stray ")" must not
		// close it and leave a half-anchored expression behind.
		{"regex escapes its group", HeaderMatch{Name: "x", Regex: new(`a)|(b`)}, "compile regex"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.m.Compile()
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	h, err := HeaderMatch{Name: "x-region", Regex: new(`us-[a-z]+-\d`)}.Compile()
	require.NoError(t, err)
	hdr := header("X-Region", "us-east-1")
	require.Zero(t, testing.AllocsPerRun(100, func() { h.Match(hdr) }))
}

func TestHashIsStable(t *testing.T) {
	// These values must never change: routes, rollouts, shadow mirroring and
	// access-log sampling decide by them on every replica.
	for s, want := range map[string]uint64{
		"a":        9413272369427828315,
		"order-7":  4135112802681129290,
		"user-é-1": 10078572949403786036,
		"r0":       3711027599084175969,
	} {
		require.Equal(t, want, Hash(s), "%q", s)
	}
	// The first stage is standard FNV-1a 64, the second MurmurHash3's fmix64.
	for _, s := range []string{"", "a", "user-1", strings.Repeat("x", 100)} {
		f := fnv.New64a()
		_, _ = f.Write([]byte(s))
		h := f.Sum64()
		h ^= h >> 33
		h *= 0xff51afd7ed558ccd
		h ^= h >> 33
		h *= 0xc4ceb9fe1a85ec53
		h ^= h >> 33
		require.Equal(t, h, Hash(s), "%q", s)
	}
}

func TestHashSpreadsShortIDs(t *testing.T) {
	// FNV-1a alone puts none of "r0".."r4999" in the lowest 1 % of its range
	// (it leaves the high bits of short ids that differ at the end alike);
	// with the finaliser about 1 % of them land there.
	under := 0
	for i := range 5000 {
		if Hash("r"+strconv.Itoa(i)) < math.MaxUint64/100 {
			under++
		}
	}
	require.InDelta(t, 50, under, 25)
}

// FuzzHeader compiles arbitrary header matches, as a sluice.yaml could
// write them: Compile must accept or reject without panicking, and a
// compiled exact or prefix match must hold for a header that carries its
// value.
func FuzzHeader(f *testing.F) {
	f.Add("x-canary", "true", `eu-[a-z]+-\d`, "eu-west-1")
	f.Add("", "", "(", "")
	f.Add("X-A", "a\x00b", `a)|(b`, "ab")
	f.Fuzz(func(t *testing.T, name, value, regex, sent string) {
		hdr := http.Header{}
		hdr.Add(name, sent)
		for _, m := range []HeaderMatch{
			{Name: name, Exact: &value},
			{Name: name, Prefix: &value},
			{Name: name, Regex: &regex},
		} {
			h, err := m.Compile()
			if err != nil {
				if name != "" && m.Regex == nil {
					t.Fatalf("Compile(%+v): %v", m, err)
				}
				continue
			}
			_ = h.Match(hdr)
		}
		if name == "" {
			return
		}
		withValue := http.Header{}
		withValue.Add(name, value+sent)
		exact, _ := HeaderMatch{Name: name, Exact: new(value + sent)}.Compile()
		prefix, _ := HeaderMatch{Name: name, Prefix: &value}.Compile()
		if !exact.Match(withValue) || !prefix.Match(withValue) {
			t.Fatalf("header %q: %q does not match its own exact value or prefix %q", name, value+sent, value)
		}
	})
}
