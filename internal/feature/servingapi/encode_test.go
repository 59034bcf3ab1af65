package servingapi

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/jsonenc"
)

// refResponse is the answer's JSON written the plain way, value by value
// with time's layouts and strconv: appendResponse's shortcuts (per-row
// timestamp reuse, per-column value loops, whole-number floats) must
// write the same bytes.
func refResponse(resp *serving.Response) string {
	var b strings.Builder
	b.WriteString(`{"metadata":{"feature_names":[`)
	for i, n := range resp.FeatureNames {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(jsonenc.AppendHTMLSafeString(nil, n))
	}
	b.WriteString(`]},"results":[`)
	for i, c := range resp.Results {
		if i > 0 {
			b.WriteByte(',')
		}
		t := resp.Types[i]
		b.WriteString(`{"values":[`)
		for j := range c.Values {
			if j > 0 {
				b.WriteByte(',')
			}
			v := &c.Values[j]
			switch {
			case !v.Null && !t.List && (t.Kind == feature.KindFloat32 || t.Kind == feature.KindFloat64):
				bits := 64
				if t.Kind == feature.KindFloat32 {
					bits = 32
				}
				s := "null"
				if !math.IsNaN(v.F64) && !math.IsInf(v.F64, 0) {
					s = strconv.FormatFloat(v.F64, 'g', -1, bits)
					if !strings.ContainsAny(s, ".e") {
						s += ".0"
					}
				}
				b.WriteString(s)
			default:
				b.Write(appendValue(nil, t, v))
			}
		}
		b.WriteString(`],"statuses":[`)
		for j, st := range c.Statuses {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"` + st.String() + `"`)
		}
		b.WriteString(`],"event_timestamps":[`)
		for j, ts := range c.EventTimestamps {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"` + refTimestamp(ts.UTC()) + `"`)
		}
		b.WriteString("]}")
	}
	b.WriteString("]}\n")
	return b.String()
}

// TestAppendResponseMatchesReference writes answers of every value type,
// nulls, NaN, -0 and whole floats, with timestamps shared by a view's
// columns and differing between views, for row counts on both sides of
// the timestamp memo's stack size.
func TestAppendResponseMatchesReference(t *testing.T) {
	types := []feature.Type{
		{Kind: feature.KindInt64},
		{Kind: feature.KindFloat32},
		{Kind: feature.KindFloat64},
		{Kind: feature.KindString},
		{Kind: feature.KindBytes},
		{Kind: feature.KindBool},
		{Kind: feature.KindUnixTimestamp},
		{Kind: feature.KindInt32},
		{Kind: feature.KindFloat32, List: true},
		{Kind: feature.KindString, List: true},
		{Kind: feature.KindFloat32},
	}
	floats := []float64{1, 0.25, math.NaN(), math.Copysign(0, -1), 0, 1e6, 999999, -3, 1.0 / 3, math.Inf(-1), 123456.5}
	for _, rows := range []int{0, 1, 3, 16, 17, 40} {
		resp := &serving.Response{FeatureNames: []string{"user_id"}, Types: []feature.Type{{Kind: feature.KindInt64}}, EntityColumns: 1}
		key := serving.Column{}
		for r := range rows {
			key.Values = append(key.Values, feature.Value{I64: int64(r)})
			key.Statuses = append(key.Statuses, serving.StatusPresent)
			key.EventTimestamps = append(key.EventTimestamps, epoch)
		}
		resp.Results = append(resp.Results, key)
		for ci, ty := range types {
			resp.FeatureNames = append(resp.FeatureNames, "f<"+strconv.Itoa(ci)+">")
			resp.Types = append(resp.Types, ty)
			var c serving.Column
			for r := range rows {
				k := r*len(types) + ci
				v := feature.Value{
					I64: int64(k*7919 - 5000), F64: floats[k%len(floats)] * float64(r+1), S: "s\"<" + strconv.Itoa(k), B: []byte{byte(k), 0xff},
					Bool: k%2 == 0, F32s: []float32{float32(k) / 4, 1}, Ss: []string{"a", strconv.Itoa(k)},
				}
				if ty.Kind == feature.KindFloat32 {
					v.F64 = float64(float32(v.F64))
				}
				if ty.Kind == feature.KindUnixTimestamp {
					v.I64 = now.Add(time.Duration(k) * time.Second).UnixNano()
				}
				st := serving.Status(k % 6) // 5 is out of range: INVALID
				if k%5 == 0 {
					v = feature.Value{Null: true}
				}
				// Columns 0-4 share each row's timestamp (one view), the
				// others have their own; some stamps have fractions.
				ts := now.Add(-time.Duration(r) * time.Minute)
				if ci > 4 {
					ts = now.Add(-time.Duration(r)*time.Hour + time.Duration(ci*r)*time.Microsecond)
				}
				if r%4 == 3 {
					ts = epoch
				}
				c.Values = append(c.Values, v)
				c.Statuses = append(c.Statuses, st)
				c.EventTimestamps = append(c.EventTimestamps, ts)
			}
			resp.Results = append(resp.Results, c)
		}
		require.Equal(t, refResponse(resp), string(appendResponse(nil, resp)), "%d rows", rows)
	}
}

// refTimestamp writes t as serving.AppendTimestamp does, by other means:
// whole seconds, then the fewest of 3, 6 or 9 fraction digits that hold
// the value, and "Z".
func refTimestamp(t time.Time) string {
	frac := fmt.Sprintf(".%09d", t.Nanosecond())
	switch {
	case t.Nanosecond() == 0:
		frac = ""
	case strings.HasSuffix(frac, "000000"):
		frac = frac[:4]
	case strings.HasSuffix(frac, "000"):
		frac = frac[:7]
	}
	return t.Format("2006-01-02T15:04:05") + frac + "Z"
}
