package kservewire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
)

func number(t *testing.T, lit string) Number {
	t.Helper()
	n, err := ParseNumber([]byte(lit))
	require.NoError(t, err, lit)
	return n
}

func TestAppendNumber(t *testing.T) {
	le := binary.LittleEndian
	for _, tc := range []struct {
		dt      infer.DataType
		lit     string
		want    []byte
		wantErr error
	}{
		{dt: infer.FP32, lit: "0.30000001192092896", want: le.AppendUint32(nil, math.Float32bits(0.3))},
		{dt: infer.FP32, lit: "-1.5e-3", want: le.AppendUint32(nil, math.Float32bits(-1.5e-3))},
		{dt: infer.FP32, lit: "1e39", wantErr: ErrOutOfRange},
		{dt: infer.FP64, lit: "0.1", want: le.AppendUint64(nil, math.Float64bits(0.1))},
		{dt: infer.FP64, lit: "1e400", wantErr: ErrOutOfRange},
		{dt: infer.FP16, lit: "65504", want: le.AppendUint16(nil, 0x7bff)},
		{dt: infer.FP16, lit: "65520", wantErr: ErrOutOfRange}, // rounds to infinity
		{dt: infer.BF16, lit: "1", want: le.AppendUint16(nil, 0x3f80)},
		{dt: infer.Int8, lit: "-128", want: []byte{0x80}},
		{dt: infer.Int8, lit: "128", wantErr: ErrOutOfRange},
		{dt: infer.Int32, lit: "3.0", want: le.AppendUint32(nil, 3)},
		{dt: infer.Int32, lit: "1e3", want: le.AppendUint32(nil, 1000)},
		{dt: infer.Int32, lit: "1.5", wantErr: ErrNotInteger},
		{dt: infer.Int64, lit: "9007199254740993", want: le.AppendUint64(nil, 9007199254740993)},
		{dt: infer.Int64, lit: "-9223372036854775808", want: le.AppendUint64(nil, 1<<63)},
		{dt: infer.Int64, lit: "9223372036854775808", wantErr: ErrOutOfRange},
		{dt: infer.Uint64, lit: "18446744073709551615", want: le.AppendUint64(nil, math.MaxUint64)},
		{dt: infer.Uint64, lit: "18446744073709551616", wantErr: ErrOutOfRange},
		{dt: infer.Uint8, lit: "-0", want: []byte{0}},
		{dt: infer.Uint8, lit: "-1", wantErr: ErrOutOfRange},
		{dt: infer.Uint16, lit: "6.5536e4", wantErr: ErrOutOfRange},
		{dt: infer.Bool, lit: "1", wantErr: ErrNotNumeric},
		{dt: infer.Bytes, lit: "1", wantErr: ErrNotNumeric},
	} {
		t.Run(tc.dt.String()+" "+tc.lit, func(t *testing.T) {
			n := number(t, tc.lit)
			got, err := AppendNumber([]byte{0xaa}, tc.dt, &n)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, append([]byte{0xaa}, tc.want...), got)
		})
	}
}

func TestScanNumber(t *testing.T) {
	for _, tc := range []struct {
		text    string
		lit     string
		integer bool
		want    string // SyntaxError.Want, "" when the literal is fine
	}{
		{text: "12,", lit: "12", integer: true},
		{text: "-0.5]", lit: "-0.5"},
		{text: "1E+2 ", lit: "1E+2"},
		{text: "007", lit: "0", integer: true}, // JSON: the literal is "0"; the caller sees what follows
		{text: "-x", want: "a digit"},
		{text: "1.e3", want: "a digit after the decimal point"},
		{text: "1e", want: "a digit in the exponent"},
	} {
		t.Run(tc.text, func(t *testing.T) {
			n, end, err := ScanNumber([]byte(tc.text), 0)
			if tc.want != "" {
				se, ok := errors.AsType[*SyntaxError](err)
				require.True(t, ok, "%v", err)
				require.Equal(t, tc.want, se.Want)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.lit, string(n.Lit))
			require.Equal(t, len(tc.lit), end)
			require.Equal(t, tc.integer, n.Integer)
		})
	}
	_, err := ParseNumber([]byte("1 "))
	require.Error(t, err, "ParseNumber takes exactly one literal")
}

// TestJSONDataRoundTrip writes random tensors of every datatype with
// AppendJSONData and reads each element back with the decoding functions:
// the bytes must come back unchanged.
func TestJSONDataRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for dt := infer.Bool; dt <= infer.BF16; dt++ {
		if dt == infer.Bytes {
			continue // strings are jsonenc's; their escaping is tested there
		}
		t.Run(dt.String(), func(t *testing.T) {
			size := dt.Size()
			for range 300 {
				data := make([]byte, size*(1+rng.IntN(8)))
				for i := 0; i < len(data); i += size {
					for {
						for j := range size {
							data[i+j] = byte(rng.Uint32())
						}
						if dt == infer.Bool {
							data[i] &= 1
						}
						if finiteBits(dt, data[i:i+size]) {
							break
						}
					}
				}
				tn := infer.Tensor{Name: "x", DataType: dt, Shape: infer.Shape{int64(len(data) / size)}, Data: data}
				js, err := AppendJSONData(nil, &tn)
				require.NoError(t, err)
				dec := json.NewDecoder(bytes.NewReader(js))
				dec.UseNumber()
				var elems []any
				require.NoError(t, dec.Decode(&elems), "%s", js)
				var back []byte
				for _, e := range elems {
					switch v := e.(type) {
					case bool:
						if v {
							back = append(back, 1)
						} else {
							back = append(back, 0)
						}
					case json.Number:
						n := number(t, string(v))
						back, err = AppendNumber(back, dt, &n)
						require.NoError(t, err, "%s", v)
					}
				}
				require.Equal(t, data, back, "%s", js)
			}
		})
	}
}

func finiteBits(dt infer.DataType, b []byte) bool {
	le := binary.LittleEndian
	switch dt {
	case infer.FP16:
		return finite(float64(FP16ToFloat32(le.Uint16(b))))
	case infer.BF16:
		return finite(float64(BF16ToFloat32(le.Uint16(b))))
	case infer.FP32:
		return finite(float64(math.Float32frombits(le.Uint32(b))))
	case infer.FP64:
		return finite(math.Float64frombits(le.Uint64(b)))
	default:
		return true
	}
}

func TestAppendJSONDataErrors(t *testing.T) {
	le := binary.LittleEndian
	nan := infer.Tensor{DataType: infer.FP32, Shape: infer.Shape{2}, Data: le.AppendUint32(le.AppendUint32(nil, 0), math.Float32bits(float32(math.Inf(-1))))}
	_, err := AppendJSONData(nil, &nan)
	nf, ok := errors.AsType[*NonFiniteError](err)
	require.True(t, ok, "%v", err)
	require.Equal(t, 1, nf.Index)
	require.True(t, math.IsInf(nf.Value, -1))

	// qa/L0_string_io/string_client_test.py test_tf_unicode_bytes: bytes
	// that are not UTF-8 are refused, not replaced by U+FFFD.
	str := infer.Tensor{DataType: infer.Bytes, Shape: infer.Shape{2}, Data: append(append(le.AppendUint32(nil, 1), 'x'), append(le.AppendUint32(nil, 2), 0xc3, 0x28)...)}
	_, err = AppendJSONData(nil, &str)
	nu, ok := errors.AsType[*NotUTF8Error](err)
	require.True(t, ok, "%v", err)
	require.Equal(t, 1, nu.Index)

	_, err = AppendJSONData(nil, &infer.Tensor{DataType: infer.Invalid})
	require.ErrorIs(t, err, ErrNoJSONForm)

	_, err = AppendJSONParams(nil, infer.Parameters{"p": math.NaN()})
	pe, ok := errors.AsType[*NonFiniteParamError](err)
	require.True(t, ok, "%v", err)
	require.Equal(t, "p", pe.Key)

	js, err := AppendJSONParams(nil, infer.Parameters{"b": true, "a": int64(-1), "s": "x", "f": 0.5})
	require.NoError(t, err)
	require.Equal(t, `{"a":-1,"b":true,"f":0.5,"s":"x"}`, string(js))
}

// FuzzJSONNumber feeds arbitrary text to the number decoder (request
// bodies are untrusted): it must not panic, a literal it accepts as FP32
// must read exactly as strconv reads it, and the FP32 and INT64 fast paths
// (ScanFloat32, ScanInt64) must agree with it wherever they answer.
func FuzzJSONNumber(f *testing.F) {
	for _, s := range []string{"0", "-1.5e-3", "0.30000001192092896", "1e39", "18446744073709551616", "1.", "-", "-9223372036854775808", "16777217", "0.299,"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		checkFastScanners(t, text, 0)
		n, end, err := ScanNumber(text, 0)
		if err != nil {
			return
		}
		if end > len(text) || !bytes.Equal(n.Lit, text[:end]) {
			t.Fatalf("%q: literal %q ends at %d", text, n.Lit, end)
		}
		for dt := infer.Bool; dt <= infer.BF16; dt++ {
			_, _ = AppendNumber(nil, dt, &n)
		}
		got, err := AppendNumber(nil, infer.FP32, &n)
		want, werr := strconv.ParseFloat(string(n.Lit), 32)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%q: error %v, strconv %v", n.Lit, err, werr)
		}
		if err == nil && binary.LittleEndian.Uint32(got) != math.Float32bits(float32(want)) {
			t.Fatalf("%q: got %x, strconv %v", n.Lit, got, want)
		}
	})
}
