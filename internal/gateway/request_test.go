package gateway_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/infer"
)

// seedFeatures stores every feature of user 7 and route 3.
func seedFeatures(f *fakeFeatures) {
	f.put("user_stats:trips", 7, feature.Value{I64: 12})
	f.put("user_stats:rating", 7, feature.Value{F64: 4.5})
	f.put("user_stats:premium", 7, feature.Value{Bool: true})
	f.put("user_embedding:embedding", 7, feature.Value{F32s: []float32{0.1, -0.2, 0.3, 1e-7}})
	f.put("route_features:distance_km", 3, feature.Value{F64: 12.5})
}

// newEtaEnv is a gateway serving etaService with anonymous access and the
// features of user 7 and route 3 in the store.
func newEtaEnv(t *testing.T) *testEnv {
	t.Helper()
	e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{gateway: []string{anonAllowed}})))
	seedFeatures(e.features)
	return e
}

const okBody = `{"user_id": 7, "route_id": 3, "base_eta": 30}`

func TestRequestParsing(t *testing.T) {
	e := newEtaEnv(t)
	tests := []struct {
		name   string
		body   string
		code   int
		reason string
		naming string // a substring the error message must contain
	}{
		{name: "ids as numbers", body: okBody, code: http.StatusOK},
		{name: "ids as digit strings", body: `{"user_id": "7", "route_id": "3", "base_eta": 30}`, code: http.StatusOK},
		{name: "optional fields null", body: `{"user_id": 7, "route_id": 3, "base_eta": 30, "route_delay_factor": null, "note": null}`, code: http.StatusOK},
		{name: "every field", body: `{"user_id": 7, "route_id": 3, "base_eta": 30.5, "route_delay_factor": 0.25, "express": true, "note": "fragile"}`, code: http.StatusOK},
		{name: "whitespace around the object", body: " \n\t" + okBody + "\n ", code: http.StatusOK},

		{name: "unknown field", body: `{"user_id": 7, "route_id": 3, "base_eta": 30, "colour": "red"}`, code: 400, reason: gateway.ReasonUnknownField, naming: `"colour"`},
		{name: "missing entity", body: `{"route_id": 3, "base_eta": 30}`, code: 400, reason: gateway.ReasonMissingField, naming: `"user_id"`},
		{name: "null entity", body: `{"user_id": null, "route_id": 3, "base_eta": 30}`, code: 400, reason: gateway.ReasonMissingField, naming: `"user_id"`},
		{name: "missing required field", body: `{"user_id": 7, "route_id": 3}`, code: 400, reason: gateway.ReasonMissingField, naming: `"base_eta"`},
		{name: "id not a number", body: `{"user_id": "abc", "route_id": 3, "base_eta": 30}`, code: 400, reason: gateway.ReasonInvalidField, naming: `"user_id"`},
		{name: "id with a fraction", body: `{"user_id": 7.5, "route_id": 3, "base_eta": 30}`, code: 400, reason: gateway.ReasonInvalidField, naming: `"user_id"`},
		{name: "id beyond int64", body: `{"user_id": 9223372036854775808, "route_id": 3, "base_eta": 30}`, code: 400, reason: gateway.ReasonInvalidField, naming: `"user_id"`},
		{name: "id as an object", body: `{"user_id": {"id": 7}, "route_id": 3, "base_eta": 30}`, code: 400, reason: gateway.ReasonInvalidField, naming: `"user_id"`},
		{name: "float as a string", body: `{"user_id": 7, "route_id": 3, "base_eta": "30"}`, code: 400, reason: gateway.ReasonInvalidField, naming: `"base_eta"`},
		{name: "float32 overflow", body: `{"user_id": 7, "route_id": 3, "base_eta": 1e39}`, code: 400, reason: gateway.ReasonInvalidField, naming: `"base_eta"`},
		{name: "bool as a string", body: `{"user_id": 7, "route_id": 3, "base_eta": 30, "express": "yes"}`, code: 400, reason: gateway.ReasonInvalidField, naming: `"express"`},
		{name: "string as a number", body: `{"user_id": 7, "route_id": 3, "base_eta": 30, "note": 5}`, code: 400, reason: gateway.ReasonInvalidField, naming: `"note"`},

		{name: "empty body", body: ``, code: 400, reason: gateway.ReasonInvalidJSON},
		{name: "blank body", body: " \n\t ", code: 400, reason: gateway.ReasonInvalidJSON},
		{name: "array", body: `[{"user_id": 7}]`, code: 400, reason: gateway.ReasonInvalidJSON},
		{name: "string", body: `"user_id"`, code: 400, reason: gateway.ReasonInvalidJSON},
		{name: "number", body: `7`, code: 400, reason: gateway.ReasonInvalidJSON},
		{name: "truncated", body: `{"user_id": 7, "route_id": 3,`, code: 400, reason: gateway.ReasonInvalidJSON},
		{name: "trailing data", body: okBody + ` {}`, code: 400, reason: gateway.ReasonInvalidJSON},
		{name: "not json", body: `user_id=7&route_id=3`, code: 400, reason: gateway.ReasonInvalidJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := e.post(t, tt.body)
			require.Equal(t, tt.code, res.Code, "body: %s", res.Body)
			require.NotEmpty(t, res.RequestID, "every answer carries request_id")
			require.Equal(t, res.Header.Get("X-Request-Id"), res.RequestID)
			if tt.code == http.StatusOK {
				require.Equal(t, "eta", res.Service)
				require.Equal(t, "model", res.Source)
				return
			}
			requireError(t, res, tt.code, tt.reason)
			require.Contains(t, res.Error, tt.naming)
		})
	}
}

func TestRequestDigitStringIDsReadTheSameEntity(t *testing.T) {
	e := newEtaEnv(t)
	for _, body := range []string{okBody, `{"user_id": "7", "route_id": "3", "base_eta": 30}`} {
		requireOK(t, e.post(t, body))
		fr := e.features.lastRequest()
		require.Equal(t, int64(7), fr.Entities["user_id"][0].I64, "body %s", body)
		require.Equal(t, int64(3), fr.Entities["route_id"][0].I64, "body %s", body)
	}
}

func TestRequestID(t *testing.T) {
	e := newEtaEnv(t)
	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)

	t.Run("sane id is echoed", func(t *testing.T) {
		for _, body := range []string{okBody, `{}`} { // an answer and an error
			res := e.post(t, body, "X-Request-Id", "trace-abc_123/4")
			require.Equal(t, "trace-abc_123/4", res.RequestID, "body: %s", res.Body)
			require.Equal(t, "trace-abc_123/4", res.Header.Get("X-Request-Id"))
		}
	})
	t.Run("none gets a random one", func(t *testing.T) {
		a, b := e.post(t, okBody), e.post(t, okBody)
		require.Regexp(t, hex32, a.RequestID)
		require.Regexp(t, hex32, b.RequestID)
		require.NotEqual(t, a.RequestID, b.RequestID)
	})
	for name, id := range map[string]string{
		"too long":      strings.Repeat("a", 200),
		"space":         "has space",
		"control":       "a\x01b",
		"non-ascii":     "réquest",
		"json breaking": "a\"}\n{",
	} {
		t.Run("replaced when "+name, func(t *testing.T) {
			res := e.post(t, okBody, "X-Request-Id", id)
			requireOK(t, res)
			require.Regexp(t, hex32, res.RequestID)
			require.Equal(t, res.RequestID, res.Header.Get("X-Request-Id"))
		})
	}
}

func TestRequestBodyTooLarge(t *testing.T) {
	cfg := parseConfig(t, gatewayYAML(yamlOpts{gateway: []string{anonAllowed}}))
	e := newEnv(t, cfg, func(o *gateway.Options) { o.MaxBodyBytes = 64 })
	seedFeatures(e.features)

	body := `{"user_id": 7, "route_id": 3, "base_eta": 30}` // 45 bytes
	requireOK(t, e.post(t, body))
	big := `{"user_id": 7, "route_id": 3, "base_eta": 30, "note": "` + strings.Repeat("x", 100) + `"}`
	res := e.post(t, big)
	requireError(t, res, http.StatusRequestEntityTooLarge, gateway.ReasonBodyTooLarge)
	require.NotEmpty(t, res.RequestID)
	require.Equal(t, int64(1), e.model.calls.Load(), "an oversized body must not reach the model")
}

func TestRequestRoutesAndMethods(t *testing.T) {
	e := newEtaEnv(t)
	requireError(t, call(t, e.g, http.MethodGet, etaPath, ""), http.StatusMethodNotAllowed, gateway.ReasonMethodNotAllowed)
	requireError(t, call(t, e.g, http.MethodPost, "/v1/services/nope:predict", okBody), http.StatusNotFound, gateway.ReasonNotFound)
	res := call(t, e.g, http.MethodGet, "/ready", "")
	require.Equal(t, http.StatusOK, res.Code)
	e.g.SetDraining()
	requireError(t, call(t, e.g, http.MethodGet, "/ready", ""), http.StatusServiceUnavailable, gateway.ReasonDraining)
	requireOK(t, e.post(t, okBody)) // draining still serves
}

// Little-endian encodings of expected tensor contents.
func f32s(xs ...float32) []byte {
	b := make([]byte, 0, 4*len(xs))
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func f64s(xs ...float64) []byte {
	b := make([]byte, 0, 8*len(xs))
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b
}

func i32s(xs ...int32) []byte {
	b := make([]byte, 0, 4*len(xs))
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint32(b, uint32(x))
	}
	return b
}

func i64s(xs ...int64) []byte {
	b := make([]byte, 0, 8*len(xs))
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

func TestTensorAssembly(t *testing.T) {
	e := newEtaEnv(t)
	res := e.post(t, `{"user_id": 7, "route_id": 3, "base_eta": 30.5, "route_delay_factor": 0.25, "express": true, "note": "x"}`)
	requireOK(t, res)

	// The feature read: the service's features in input order, keyed by
	// the request's entities.
	fr := e.features.lastRequest()
	require.Equal(t, []string{"user_stats:trips", "user_stats:rating", "user_stats:premium", "user_embedding:embedding", "route_features:distance_km"}, fr.Features)
	require.Len(t, fr.Entities, 2)
	require.Equal(t, int64(7), fr.Entities["user_id"][0].I64)
	require.Equal(t, int64(3), fr.Entities["route_id"][0].I64)

	req := e.model.last(t)
	require.Equal(t, "eta_model", req.Model)
	require.Equal(t, "1", req.Version)
	require.Equal(t, res.RequestID, req.ID)
	require.Equal(t, []infer.RequestedOutput{{Name: "confidence_score"}, {Name: "eta_prediction"}}, req.Outputs)
	require.Len(t, req.Inputs, 3)

	user := req.Input("user")
	require.NotNil(t, user)
	require.Equal(t, infer.FP32, user.DataType)
	require.Equal(t, infer.Shape{1, 7}, user.Shape)
	require.Equal(t, f32s(12, 4.5, 1, 0.1, -0.2, 0.3, 1e-7), user.Data, "trips, rating, premium, then the 4-float embedding bit for bit")

	route := req.Input("route")
	require.NotNil(t, route)
	require.Equal(t, infer.FP64, route.DataType)
	require.Equal(t, infer.Shape{1, 3}, route.Shape)
	require.Equal(t, f64s(12.5, 30.5, 0.25), route.Data)

	flags := req.Input("flags")
	require.NotNil(t, flags)
	require.Equal(t, infer.Int32, flags.DataType)
	require.Equal(t, infer.Shape{1, 2}, flags.Shape)
	require.Equal(t, i32s(1, 3), flags.Data)

	// The answer maps the model's outputs.
	want := 12 + 4.5 + 1 + float64(float32(0.1)) + float64(float32(-0.2)) + float64(float32(0.3)) + float64(float32(1e-7)) +
		12.5 + 30.5 + 0.25 + 1 + 3
	require.InDelta(t, want, res.Outputs["eta_minutes"], 1e-3)
	require.InDelta(t, 0.9, res.Outputs["confidence"], 1e-6)
	require.Equal(t, "1", res.Version)
	require.Equal(t, "default", res.Route)
	require.Equal(t, "eta_model", res.Model)
	require.Equal(t, "1", res.Header.Get("X-Sluice-Version"))
	require.Equal(t, "default", res.Header.Get("X-Sluice-Route"))
}

func TestTensorFieldsOnly(t *testing.T) {
	cfg := parseConfig(t, gatewayYAML(yamlOpts{
		plain: true, gateway: []string{anonAllowed},
		inputs: "[{tensor: x, datatype: INT64, features: [field:user_id, field:base_eta]}, {tensor: y, datatype: FP32, features: [field:base_eta, field:user_id]}]",
	}))
	e := newEnv(t, cfg, func(o *gateway.Options) { o.Features, o.FeatureRepo = nil, nil })
	requireOK(t, e.post(t, `{"user_id": "123456789012", "base_eta": 42.75}`))
	req := e.model.last(t)
	require.Equal(t, i64s(123456789012, 42), req.Input("x").Data, "INT64 truncates the float field")
	require.Equal(t, f32s(42.75, 123456789012), req.Input("y").Data)
}

// Issue 22 item 3: a feature whose stored value reads NOT_FOUND for a
// schema reason (retyped, not re-materialized) was fed to the model as
// zeros under missing: zero. By default it now fails the request with
// 503 feature_unreadable naming input, feature, entity and reason;
// unreadable: missing applies the input's missing policy instead.
func TestUnreadableFeaturePolicy(t *testing.T) {
	inputs := func(unreadable string) string {
		return "[{tensor: a, missing: zero" + unreadable + ", features: [user_stats:trips, route_features:distance_km]}]"
	}
	t.Run("fail by default", func(t *testing.T) {
		e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{gateway: []string{anonAllowed}, inputs: inputs("")})))
		e.features.put("user_stats:trips", 8, feature.Value{I64: 3, F64: 3})
		e.features.unreadable = map[string]string{"route_features:distance_km": "retyped"}
		res := e.post(t, `{"user_id": 8, "route_id": 3, "base_eta": 30}`)
		requireError(t, res, http.StatusServiceUnavailable, gateway.ReasonFeatureUnreadable)
		for _, s := range []string{`"a"`, "route_features:distance_km", "route_id=3", "retyped"} {
			require.Contains(t, res.Error, s)
		}
		require.Zero(t, e.model.calls.Load(), "no zeros fed to the model")
	})
	t.Run("missing applies the missing policy", func(t *testing.T) {
		e := newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{gateway: []string{anonAllowed}, inputs: inputs(", unreadable: missing")})))
		e.features.put("user_stats:trips", 8, feature.Value{I64: 3, F64: 3})
		e.features.unreadable = map[string]string{"route_features:distance_km": "retyped"}
		requireOK(t, e.post(t, `{"user_id": 8, "route_id": 3, "base_eta": 30}`))
		require.Equal(t, f32s(3, 0), e.model.last(t).Input("a").Data)
	})
}

func TestMissingFeaturePolicies(t *testing.T) {
	t.Run("fail names input, feature and entity", func(t *testing.T) {
		e := newEtaEnv(t)
		res := e.post(t, `{"user_id": 8, "route_id": 3, "base_eta": 30}`)
		requireError(t, res, http.StatusNotFound, gateway.ReasonMissingFeature)
		for _, s := range []string{`"user"`, "user_stats:trips", "user_id=8", "NOT_FOUND"} {
			require.Contains(t, res.Error, s)
		}
		require.Zero(t, e.model.calls.Load(), "the model must not be called without its inputs")
	})
	t.Run("fail on a null value", func(t *testing.T) {
		e := newEtaEnv(t)
		e.features.put("user_stats:rating", 7, feature.Value{Null: true})
		res := e.post(t, okBody)
		requireError(t, res, http.StatusNotFound, gateway.ReasonMissingFeature)
		require.Contains(t, res.Error, "user_stats:rating")
		require.Contains(t, res.Error, "NULL_VALUE")
	})
	t.Run("default and zero", func(t *testing.T) {
		e := newEtaEnv(t)
		// Route 4 has no features; route_delay_factor and express are absent.
		requireOK(t, e.post(t, `{"user_id": 7, "route_id": 4, "base_eta": 30}`))
		req := e.model.last(t)
		require.Equal(t, f64s(-1, 30, -1), req.Input("route").Data, "missing: default fills -1 for the feature and the field")
		require.Equal(t, i32s(0, 4), req.Input("flags").Data, "missing: zero fills 0")
	})
	t.Run("default and zero fill a whole embedding", func(t *testing.T) {
		cfg := parseConfig(t, gatewayYAML(yamlOpts{
			gateway: []string{anonAllowed},
			inputs: "[{tensor: a, missing: zero, features: [user_stats:trips, user_embedding:embedding]}," +
				" {tensor: b, missing: default, default: 2.5, features: [user_embedding:embedding, route_features:distance_km]}]",
		}))
		e := newEnv(t, cfg)
		e.features.put("route_features:distance_km", 3, feature.Value{F64: 12.5})
		requireOK(t, e.post(t, `{"user_id": 8, "route_id": 3, "base_eta": 30}`))
		req := e.model.last(t)
		require.Equal(t, f32s(0, 0, 0, 0, 0), req.Input("a").Data)
		require.Equal(t, f32s(2.5, 2.5, 2.5, 2.5, 12.5), req.Input("b").Data)
	})
	t.Run("fail on a missing request field", func(t *testing.T) {
		cfg := parseConfig(t, gatewayYAML(yamlOpts{
			gateway: []string{anonAllowed},
			inputs:  "[{tensor: a, features: [field:base_eta, field:route_delay_factor]}]",
		}))
		e := newEnv(t, cfg)
		res := e.post(t, okBody)
		requireError(t, res, http.StatusNotFound, gateway.ReasonMissingFeature)
		require.Contains(t, res.Error, `"a"`)
		require.Contains(t, res.Error, "field:route_delay_factor")
	})
}

// tensorOf builds an output tensor of dt from xs.
func tensorOf(name string, dt infer.DataType, data []byte) infer.Tensor {
	size := dt.Size()
	return infer.Tensor{Name: name, DataType: dt, Shape: infer.Shape{1, int64(len(data) / size)}, Data: data}
}

func TestOutputEncoding(t *testing.T) {
	tests := []struct {
		name   string
		eta    infer.Tensor
		want   string // the JSON of outputs.eta_minutes
		reason string // for an error answer
	}{
		{name: "fp32 scalar", eta: tensorOf("eta_prediction", infer.FP32, f32s(31.2)), want: `31.2`},
		{name: "fp64 scalar", eta: tensorOf("eta_prediction", infer.FP64, f64s(0.1)), want: `0.1`},
		{name: "int64", eta: tensorOf("eta_prediction", infer.Int64, i64s(-42)), want: `-42`},
		{name: "int32 array", eta: tensorOf("eta_prediction", infer.Int32, i32s(1, 2, 3)), want: `[1,2,3]`},
		{name: "fp32 array", eta: tensorOf("eta_prediction", infer.FP32, f32s(0.5, 1.25)), want: `[0.5,1.25]`},
		{name: "bool", eta: tensorOf("eta_prediction", infer.Bool, []byte{1}), want: `true`},
		{name: "not finite", eta: tensorOf("eta_prediction", infer.FP32, f32s(float32(math.Inf(1)))), want: `null`},
		{name: "fp16 cannot be written", eta: tensorOf("eta_prediction", infer.FP16, []byte{0, 0x3c}), reason: gateway.ReasonInvalidModelOutput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := parseConfig(t, gatewayYAML(yamlOpts{plain: true, gateway: []string{anonAllowed}}))
			e := newEnv(t, cfg)
			e.model.setFn(func(_ context.Context, req *infer.Request) (*infer.Response, error) {
				return &infer.Response{Model: req.Model, Outputs: []infer.Tensor{tt.eta, fp32Tensor("confidence_score", 0.25)}}, nil
			})
			r := httptest.NewRequestWithContext(context.Background(), http.MethodPost, etaPath, strings.NewReader(plainBody))
			w := httptest.NewRecorder()
			e.g.ServeHTTP(w, r)
			var body struct {
				Version string                     `json:"version"`
				Outputs map[string]json.RawMessage `json:"outputs"`
				Reason  string                     `json:"reason"`
			}
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body), "body: %s", w.Body)
			if tt.reason != "" {
				require.Equal(t, http.StatusInternalServerError, w.Code, "body: %s", w.Body)
				require.Equal(t, tt.reason, body.Reason)
				return
			}
			require.Equal(t, http.StatusOK, w.Code, "body: %s", w.Body)
			require.JSONEq(t, tt.want, string(body.Outputs["eta_minutes"]))
			require.JSONEq(t, `0.25`, string(body.Outputs["confidence"]))
			require.Equal(t, "1", body.Version, "the configured version when the model names none")
		})
	}
}
