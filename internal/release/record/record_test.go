package record

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The GCS emulator's pubsub dependency (the archive tests) starts a
	// worker at init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// sample returns a complete record with both arms.
func sample(i int, t time.Time) *Record {
	return &Record{
		RequestID: "req-" + itoa(i),
		Time:      t,
		Service:   "parcel-eta",
		ShadowKey: "order-" + itoa(i),
		Headers:   map[string]string{"x-request-id": "req-" + itoa(i), "x-region": "eu"},
		Request:   map[string]any{"user_id": json.Number(itoa(i)), "base_eta": json.Number("35")},
		Features:  map[string]any{"user_stats__u_f00": 0.12, "route_features__stops": []any{1.0, 2.0}, "missing": nil},
		Inputs: []Tensor{{
			Name: "user_features", DataType: "FP32", Shape: []int64{1, 2},
			Data: json.RawMessage(`[0.12,3.2]`),
		}},
		Arms: map[string]Arm{
			ArmPrimary: {
				Model: "parcel_eta", Version: "1", Status: 200, LatencyMS: 1.9,
				Outputs: map[string][]float64{"eta_prediction": {75.99}, "confidence_score": {1}},
				Source:  "model",
			},
			ArmShadow: {
				Model: "parcel_eta", Version: "2", Status: 200, LatencyMS: 2.1,
				Outputs: map[string][]float64{"eta_prediction": {66.13}, "confidence_score": {1}},
			},
		},
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestRoundTrip(t *testing.T) {
	in := sample(7, time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.FixedZone("CEST", 2*3600)))
	b, err := Encode(in)
	require.NoError(t, err)
	require.NotContains(t, string(b), "\n")
	out, err := Decode(b)
	require.NoError(t, err)

	want := *in
	want.Schema = SchemaVersion
	want.Time = in.Time.UTC()
	require.True(t, out.Time.Equal(in.Time))
	require.Equal(t, time.UTC, out.Time.Location())
	require.Equal(t, &want, out)

	// json.Marshal / json.Unmarshal go through the same code.
	viaJSON, err := json.Marshal(in)
	require.NoError(t, err)
	require.JSONEq(t, string(b), string(viaJSON))
	var again Record
	require.NoError(t, json.Unmarshal(viaJSON, &again))
	require.Equal(t, &want, &again)
}

func TestEncodeWritesSchemaAndLeavesInputAlone(t *testing.T) {
	in := sample(1, time.Now())
	in.Headers = map[string]string{"X-Region": "eu"}
	b, err := Encode(in)
	require.NoError(t, err)
	require.Contains(t, string(b), `"schema":1`)
	require.Contains(t, string(b), `"headers":{"x-region":"eu"}`)
	require.Equal(t, 0, in.Schema)
	require.Equal(t, map[string]string{"X-Region": "eu"}, in.Headers)
}

func TestNonFiniteValues(t *testing.T) {
	in := sample(1, time.Now())
	in.Arms[ArmShadow] = Arm{
		Model: "m", Status: 200,
		Outputs: map[string][]float64{"y": {1.5, math.NaN(), math.Inf(1), math.Inf(-1)}},
	}
	in.Features = map[string]any{"f": math.NaN(), "g": []float64{1, math.Inf(1)}, "h": float32(2)}
	b, err := Encode(in)
	require.NoError(t, err)
	require.Contains(t, string(b), `"y":[1.5,null,null,null]`)
	require.Contains(t, string(b), `"f":null`)
	require.Contains(t, string(b), `"g":[1,null]`)

	out, err := Decode(b)
	require.NoError(t, err)
	y := out.Arms[ArmShadow].Outputs["y"]
	require.Len(t, y, 4)
	require.InDelta(t, 1.5, y[0], 0)
	for _, v := range y[1:] {
		require.True(t, math.IsNaN(v), "null output reads back as NaN, got %v", v)
	}
	require.Nil(t, out.Features["f"])
	require.Equal(t, []any{1.0, nil}, out.Features["g"])
	require.True(t, math.IsNaN(in.Features["f"].(float64)), "input record untouched")
}

func TestDecodeFixture(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "v1.jsonl"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	require.Len(t, lines, 2)

	r1, err := Decode([]byte(lines[0]))
	require.NoError(t, err)
	require.Equal(t, "r-1", r1.RequestID)
	require.Equal(t, "order-4711", r1.ShadowKey)
	require.Equal(t, "premium", r1.Headers["x-user-type"])
	require.Equal(t, []float64{75.99}, r1.Arms[ArmPrimary].Outputs["eta_prediction"])
	require.Equal(t, []float64{66.13}, r1.Arms[ArmShadow].Outputs["eta_prediction"])
	require.Equal(t, "model", r1.Arms[ArmPrimary].Source)
	require.InDelta(t, 0.12, r1.Features["user_stats__u_f00"], 0)
	require.JSONEq(t, `[0.12,3.2]`, string(r1.Inputs[0].Data))
	require.Equal(t, time.Date(2026, 5, 1, 10, 0, 0, 123456789, time.UTC), r1.Time)

	r2, err := Decode([]byte(lines[1]))
	require.NoError(t, err)
	// 2^53+1: exact only because request numbers decode as json.Number.
	require.Equal(t, json.Number("9007199254740993"), r2.Request["order_id"])
	require.Nil(t, r2.Features["user_stats__u_f00"])
	require.Contains(t, r2.Features, "user_stats__u_f00")
	require.Equal(t, 503, r2.Arms[ArmPrimary].Status)
	require.NotContains(t, r2.Arms, ArmShadow)

	// Re-encoding the fixture is stable.
	b, err := Encode(r1)
	require.NoError(t, err)
	require.JSONEq(t, lines[0], string(b))
}

func TestDecodeRejectsOtherVersions(t *testing.T) {
	v2, err := os.ReadFile(filepath.Join("testdata", "v2.jsonl"))
	require.NoError(t, err)
	tests := []struct {
		name    string
		data    string
		version int
	}{
		{"newer version with other types", string(v2), 2},
		{"version 0", `{"schema":0,"request_id":"a","time":"2026-01-01T00:00:00Z","service":"s","arms":{"primary":{"status":200}}}`, 0},
		{"no version", `{"request_id":"a","time":"2026-01-01T00:00:00Z","service":"s","arms":{"primary":{"status":200}}}`, 0},
		{"negative", `{"schema":-3}`, -3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(tt.data))
			var ve *VersionError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, tt.version, ve.Version)
			if tt.version != 0 {
				require.ErrorContains(t, err, "unsupported record schema version "+itoa(tt.version))
			} else {
				require.ErrorContains(t, err, "no schema version")
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(r *Record)
		wantErr string
	}{
		{"ok", func(*Record) {}, ""},
		{"no request id", func(r *Record) { r.RequestID = "" }, "no request_id"},
		{"no service", func(r *Record) { r.Service = "" }, "no service"},
		{"no time", func(r *Record) { r.Time = time.Time{} }, "no time"},
		{"year 10000", func(r *Record) { r.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "outside years"},
		{"no primary", func(r *Record) { delete(r.Arms, ArmPrimary) }, `no "primary" arm`},
		{"bad status", func(r *Record) { r.Arms[ArmShadow] = Arm{Status: 0} }, `arm "shadow": status 0`},
		{"negative latency", func(r *Record) { r.Arms[ArmShadow] = Arm{Status: 200, LatencyMS: -1} }, "latency_ms -1"},
		{"NaN latency", func(r *Record) { r.Arms[ArmShadow] = Arm{Status: 200, LatencyMS: math.NaN()} }, "latency_ms NaN"},
		{"empty output name", func(r *Record) {
			r.Arms[ArmShadow] = Arm{Status: 200, Outputs: map[string][]float64{"": {1}}}
		}, "empty name"},
		{"tensor without name", func(r *Record) { r.Inputs[0].Name = "" }, "inputs[0]: tensor has no name"},
		{"tensor without datatype", func(r *Record) { r.Inputs[0].DataType = "" }, "no datatype"},
		{"negative dim", func(r *Record) { r.Inputs[0].Shape = []int64{-1, 2} }, "negative dimension"},
		{"data not an array", func(r *Record) { r.Inputs[0].Data = json.RawMessage(`{"a":1}`) }, "not a JSON array"},
		{"schema 2", func(r *Record) { r.Schema = 2 }, "unsupported record schema version 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := sample(1, time.Now())
			tt.mutate(r)
			err := r.Validate()
			_, encErr := Encode(r)
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.NoError(t, encErr)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
			require.ErrorContains(t, encErr, tt.wantErr)
		})
	}
}

func TestDecodeRejectsMalformed(t *testing.T) {
	good, err := Encode(sample(1, time.Now()))
	require.NoError(t, err)
	tests := map[string]string{
		"empty":             ``,
		"not an object":     `[1,2]`,
		"truncated":         string(good[:len(good)-5]),
		"trailing garbage":  string(good) + `x`,
		"two objects":       string(good) + string(good),
		"arms not a map":    strings.Replace(string(good), `"arms":{`, `"arms":[{`, 1),
		"time not RFC 3339": strings.Replace(string(good), `"time":"`, `"time":"yesterday `, 1),
		"request not a map": `{"schema":1,"request_id":"a","time":"2026-01-01T00:00:00Z","service":"s","request":[1],"arms":{"primary":{"status":200}}}`,
		"output not numbers": `{"schema":1,"request_id":"a","time":"2026-01-01T00:00:00Z","service":"s",` +
			`"arms":{"primary":{"status":200,"outputs":{"y":["x"]}}}}`,
		"output null list with string": `{"schema":1,"request_id":"a","time":"2026-01-01T00:00:00Z","service":"s",` +
			`"arms":{"primary":{"status":200,"outputs":{"y":[null,"x"]}}}}`,
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			r, err := Decode([]byte(data))
			require.Error(t, err)
			require.Nil(t, r)
			var ve *VersionError
			require.False(t, errors.As(err, &ve), "a malformed v1 record is not a version problem: %v", err)
		})
	}
}

func TestSubjectToken(t *testing.T) {
	o := NATSOptions{}
	require.Equal(t, "sluice.recordings.parcel-eta", o.Subject("parcel-eta"))
	require.Equal(t, "sluice.recordings.a_b_c_d_e", o.Subject("a.b*c>d e"))
	require.Equal(t, "sluice.recordings._", o.Subject(""))
	require.Equal(t, "x.y.svc", NATSOptions{SubjectPrefix: "x.y"}.Subject("svc"))
	require.True(t, subjectMatches("sluice.recordings.>", "sluice.recordings.a"))
	require.True(t, subjectMatches(">", "a.b"))
	require.True(t, subjectMatches("sluice.*.a", "sluice.x.a"))
	require.False(t, subjectMatches("sluice.recordings.>", "sluice.recordings"))
	require.False(t, subjectMatches("sluice.recordings.a", "sluice.recordings.b"))
	require.False(t, subjectMatches("sluice.recordings", "sluice.recordings.a"))
}
