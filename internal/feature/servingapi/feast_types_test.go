package servingapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
)

// feastValueType is the Feast ValueType a Python value read from our JSON
// is given by Feast's remote online store: remote.py passes each PRESENT
// value to python_values_to_proto_values(…, ValueType.UNKNOWN), which
// infers the type from the Python value (type_map.py,
// python_type_to_feast_value_type): int → INT64, float → DOUBLE, str →
// STRING, bool → BOOL, a list → its elements' common type + "_LIST"
// (mixed element types raise "List value type … is inconsistent"; an
// empty list raises "Couldn't infer value type from empty value").
//
// Python's json types a number by its spelling: one with '.', 'e' or 'E'
// is a float, any other an int. pyValue keeps that distinction.
type pyValue struct {
	kind string // "int", "float", "str", "bool", "list", "null"
	num  float64
	str  string
	b    bool
	list []pyValue
}

// pyDecode parses JSON the way Python's json.loads types it.
func pyDecode(t *testing.T, raw json.RawMessage) pyValue {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v))
	return toPy(t, v)
}

func toPy(t *testing.T, v any) pyValue {
	t.Helper()
	switch x := v.(type) {
	case nil:
		return pyValue{kind: "null"}
	case bool:
		return pyValue{kind: "bool", b: x}
	case string:
		return pyValue{kind: "str", str: x}
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		require.NoError(t, err)
		if bytes.ContainsAny([]byte(x), ".eE") {
			return pyValue{kind: "float", num: f}
		}
		return pyValue{kind: "int", num: f}
	case []any:
		out := pyValue{kind: "list"}
		for _, e := range x {
			out.list = append(out.list, toPy(t, e))
		}
		return out
	}
	t.Fatalf("unexpected JSON value %T", v)
	return pyValue{}
}

// feastInfer is python_type_to_feast_value_type for one value, or the
// error Feast raises.
func feastInfer(v pyValue) (string, error) {
	scalar := map[string]string{"int": "INT64", "float": "DOUBLE", "str": "STRING", "bool": "BOOL"}
	if v.kind != "list" {
		if s, ok := scalar[v.kind]; ok {
			return s, nil
		}
		return "", fmt.Errorf("value of kind %s cannot be converted into Feast value type", v.kind)
	}
	common := ""
	for _, e := range v.list {
		if e.kind == "list" {
			return "", fmt.Errorf("array types can only be one level deep")
		}
		cur, err := feastInfer(e)
		if err != nil {
			return "", err
		}
		if common != "" && common != cur {
			return "", fmt.Errorf("List value type for field is inconsistent. %s different from %s", common, cur)
		}
		common = cur
	}
	if common == "" {
		return "", fmt.Errorf("couldn't infer value type from empty value")
	}
	return common + "_LIST", nil
}

// TestFeastRemoteReadsEveryValueType writes one value of every value type
// (and the float values that used to come out as integers: whole
// numbers, zero, negative zero, large ones) the way GET
// /get-online-features does, reads the answer with the rules of Feast's
// remote online store, and checks that each value gets a Feast type its
// feature's type accepts and reads back equal. Before whole floats were
// written with ".0", Float32 1 read as INT64 and [1.5, 1] raised
// "inconsistent".
func TestFeastRemoteReadsEveryValueType(t *testing.T) {
	ts := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f32 := feature.Type{Kind: feature.KindFloat32}
	f64 := feature.Type{Kind: feature.KindFloat64}
	cases := []struct {
		name string
		t    feature.Type
		v    feature.Value
		want string // the Feast type
		eq   func(t *testing.T, p pyValue)
	}{
		{"int32", feature.Type{Kind: feature.KindInt32}, feature.Value{I64: 7}, "INT64", wantNum(7)},
		{"int64", feature.Type{Kind: feature.KindInt64}, feature.Value{I64: -1 << 40}, "INT64", wantNum(-1 << 40)},
		{"float32 whole", f32, feature.Value{F64: 1}, "DOUBLE", wantNum(1)},
		{"float32 zero", f32, feature.Value{F64: 0}, "DOUBLE", wantNum(0)},
		{"float32 negative zero", f32, feature.Value{F64: math.Copysign(0, -1)}, "DOUBLE", wantNum(0)},
		{"float32 fraction", f32, feature.Value{F64: float64(float32(0.1))}, "DOUBLE", wantNum32(0.1)},
		{"float32 2^24", f32, feature.Value{F64: 1 << 24}, "DOUBLE", wantNum(1 << 24)},
		{"float32 large", f32, feature.Value{F64: float64(float32(3e38))}, "DOUBLE", wantNum32(3e38)},
		{"float64 whole", f64, feature.Value{F64: 100000}, "DOUBLE", wantNum(100000)},
		{"float64 negative whole", f64, feature.Value{F64: -42}, "DOUBLE", wantNum(-42)},
		{"float64 1e15", f64, feature.Value{F64: 1e15}, "DOUBLE", wantNum(1e15)},
		{"float64 1e21", f64, feature.Value{F64: 1e21}, "DOUBLE", wantNum(1e21)},
		{"float64 tiny", f64, feature.Value{F64: 5e-324}, "DOUBLE", wantNum(5e-324)},
		{"float64 fraction", f64, feature.Value{F64: 97.4}, "DOUBLE", wantNum(97.4)},
		{"string", feature.Type{Kind: feature.KindString}, feature.Value{S: "a\"<b>"}, "STRING", wantStr("a\"<b>")},
		{"bytes", feature.Type{Kind: feature.KindBytes}, feature.Value{B: []byte{0, 1, 255}}, "STRING", wantStr(base64.StdEncoding.EncodeToString([]byte{0, 1, 255}))},
		{"bool", feature.Type{Kind: feature.KindBool}, feature.Value{Bool: true}, "BOOL", func(t *testing.T, p pyValue) {
			t.Helper()
			require.True(t, p.b)
		}},
		{"unix timestamp", feature.Type{Kind: feature.KindUnixTimestamp}, feature.Value{I64: ts.UnixNano()}, "INT64", wantNum(float64(ts.Unix()))},
		{"int32 list", feature.Type{Kind: feature.KindInt32, List: true}, feature.Value{I64s: []int64{1, -2, 3}}, "INT64_LIST", wantNums(1, -2, 3)},
		{"int64 list", feature.Type{Kind: feature.KindInt64, List: true}, feature.Value{I64s: []int64{1 << 50}}, "INT64_LIST", wantNums(1 << 50)},
		{"float32 list mixed", feature.Type{Kind: feature.KindFloat32, List: true}, feature.Value{F32s: []float32{1.5, 1, 0, -3}}, "DOUBLE_LIST", wantNums(1.5, 1, 0, -3)},
		{"float32 list whole", feature.Type{Kind: feature.KindFloat32, List: true}, feature.Value{F32s: []float32{2, 4}}, "DOUBLE_LIST", wantNums(2, 4)},
		{"float64 list mixed", feature.Type{Kind: feature.KindFloat64, List: true}, feature.Value{F64s: []float64{0.25, 1e6, 7}}, "DOUBLE_LIST", wantNums(0.25, 1e6, 7)},
		{"string list", feature.Type{Kind: feature.KindString, List: true}, feature.Value{Ss: []string{"x", "y"}}, "STRING_LIST", nil},
		{"bytes list", feature.Type{Kind: feature.KindBytes, List: true}, feature.Value{Ss: []string{"\x00\x01"}}, "STRING_LIST", nil},
		{"bool list", feature.Type{Kind: feature.KindBool, List: true}, feature.Value{Bools: []bool{true, false}}, "BOOL_LIST", nil},
	}
	resp := &serving.Response{}
	for _, c := range cases {
		resp.FeatureNames = append(resp.FeatureNames, "v:"+c.name)
		resp.Types = append(resp.Types, c.t)
		resp.Results = append(resp.Results, serving.Column{
			Values: []feature.Value{c.v}, Statuses: []serving.Status{serving.StatusPresent}, EventTimestamps: []time.Time{ts},
		})
	}
	var doc struct {
		Results []struct {
			Values []json.RawMessage `json:"values"`
		} `json:"results"`
	}
	body := appendResponse(nil, resp)
	require.NoError(t, json.Unmarshal(body, &doc))
	require.Len(t, doc.Results, len(cases))
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw := doc.Results[i].Values[0]
			p := pyDecode(t, raw)
			got, err := feastInfer(p)
			require.NoError(t, err, "Feast's remote store cannot read %s", raw)
			require.Equal(t, c.want, got, "Feast reads %s as %s", raw, got)
			if c.eq != nil {
				c.eq(t, p)
			}
		})
	}
}

func wantNum(want float64) func(*testing.T, pyValue) {
	return func(t *testing.T, p pyValue) {
		t.Helper()
		require.Equal(t, want, p.num) //nolint:testifylint // exact: shortest round-trip spelling
	}
}

// wantNum32 compares as float32: a Float32 is written in the shortest
// spelling that reads back as the same float32.
func wantNum32(want float32) func(*testing.T, pyValue) {
	return func(t *testing.T, p pyValue) {
		t.Helper()
		require.Equal(t, want, float32(p.num)) //nolint:testifylint // exact
	}
}

func wantNums(want ...float64) func(*testing.T, pyValue) {
	return func(t *testing.T, p pyValue) {
		t.Helper()
		got := make([]float64, len(p.list))
		for i, e := range p.list {
			got[i] = e.num
		}
		require.Equal(t, want, got)
	}
}

func wantStr(want string) func(*testing.T, pyValue) {
	return func(t *testing.T, p pyValue) {
		t.Helper()
		require.Equal(t, want, p.str)
	}
}

// TestAppendFloatWholeNumbers pins the spelling of whole floats.
func TestAppendFloatWholeNumbers(t *testing.T) {
	for _, c := range []struct {
		f    float64
		bits int
		want string
	}{
		{1, 32, "1.0"},
		{0, 64, "0.0"},
		{math.Copysign(0, -1), 64, "-0.0"},
		{100000, 64, "100000.0"},
		{1e6, 64, "1e+06"},
		{1.5, 32, "1.5"},
		{math.NaN(), 64, "null"},
		{math.Inf(1), 32, "null"},
	} {
		require.Equal(t, c.want, string(appendFloat(nil, c.f, c.bits)), "%v", c.f)
	}
}

// appendFloat's whole-number shortcut writes what strconv's shortest
// form (plus ".0") writes.
func TestAppendFloatMatchesStrconv(t *testing.T) {
	ref := func(f float64, bits int) string {
		s := strconv.FormatFloat(f, 'g', -1, bits)
		if !strings.ContainsAny(s, ".e") {
			s += ".0"
		}
		return s
	}
	rng := rand.New(rand.NewPCG(3, 4))
	vals := []float64{0, 1, -1, 999999, -999999, 1e6, -1e6, 999999.5, 0.5, 1e-7, 123456.75, 16777216, 1e15, 1e21}
	for range 20000 {
		vals = append(vals, float64(rng.IntN(2_000_002)-1_000_001), (rng.Float64()-0.5)*2e6, rng.NormFloat64())
	}
	for _, f := range vals {
		for _, bits := range []int{32, 64} {
			x := f
			if bits == 32 {
				x = float64(float32(f))
			}
			require.Equal(t, ref(x, bits), string(appendFloat(nil, x, bits)), "%v (%d bits)", x, bits)
		}
	}
}
