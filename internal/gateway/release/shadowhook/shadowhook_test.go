package shadowhook_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway/release"
	"github.com/sluice-ml/sluice/internal/gateway/release/releasetest"
	"github.com/sluice-ml/sluice/internal/gateway/release/shadowhook"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/release/record"
)

// recorder keeps the records it is offered.
type recorder struct{ recs []*record.Record }

func (r *recorder) Offer(rec *record.Record) bool { r.recs = append(r.recs, rec); return true }
func (r *recorder) Run()                          {}
func (r *recorder) Close(context.Context) error   { return nil }

// encoder writes tensors by name only.
type encoder struct{}

func (encoder) Tensors(ts []infer.Tensor) []record.Tensor {
	out := make([]record.Tensor, len(ts))
	for i, t := range ts {
		out[i] = record.Tensor{Name: t.Name}
	}
	return out
}

func (encoder) Outputs(ts []infer.Tensor) map[string][]float64 {
	out := map[string][]float64{}
	for _, t := range ts {
		out[t.Name] = []float64{1}
	}
	return out
}

// call is the part of a release.Call that Answered uses; the rest panics.
type call struct {
	release.Call
	id string
}

func (c *call) Service() string             { return "eta" }
func (c *call) RequestID() string           { return c.id }
func (c *call) Start() time.Time            { return time.Unix(1_700_000_000, 0) }
func (c *call) Header() http.Header         { return http.Header{"X-Region": {"sa"}} }
func (c *call) Field(string) (string, bool) { return "", false }
func (c *call) Latency() time.Duration      { return 3 * time.Millisecond }
func (c *call) RequestMap() map[string]any  { return map[string]any{"distance_km": 4.2} }
func (c *call) FeatureMap() map[string]any  { return nil }
func (c *call) Answer() *release.Answer {
	return &release.Answer{Model: "eta", Version: "1", Source: "model"}
}

func (c *call) Response() *infer.Response {
	return &infer.Response{Outputs: []infer.Tensor{{Name: "eta_minutes"}}}
}

func (c *call) Request() *infer.Request { return &infer.Request{Inputs: []infer.Tensor{{Name: "x"}}} }

func shadowed(percent float64) config.Service {
	return config.Service{Name: "eta", Shadow: &config.Shadow{
		Backend: "canary", Model: "eta", Version: "2", Percent: percent, Timeout: config.Duration(time.Second),
	}}
}

// TestFactory: no shadow block, or a backend the configuration lacks, no
// hook.
func TestFactory(t *testing.T) {
	m := shadowhook.NewMirror(shadowhook.Options{Encode: encoder{}})
	f := shadowhook.Factory(m, nil)
	h, err := f(releasetest.Service{Cfg: config.Service{Name: "eta"}}, nil)
	require.NoError(t, err)
	require.Nil(t, h)
	h, err = f(releasetest.Service{Cfg: shadowed(100)}, nil)
	require.NoError(t, err)
	require.Nil(t, h, "no backend canary")
	require.NoError(t, m.Finish(context.Background(), false))
}

// TestAnsweredMirrorsAndRecordsBothArms: a call in the share is queued,
// and finishing the mirror calls the shadow once and records both arms,
// the shadow's failure included; a call outside the share is not.
func TestAnsweredMirrorsAndRecordsBothArms(t *testing.T) {
	rec := &recorder{}
	m := shadowhook.NewMirror(shadowhook.Options{Recording: config.Recording{QueueSize: 4}, Recorder: rec, Encode: encoder{}})
	var got []*infer.Request
	canary := func(_ context.Context, req *infer.Request) (*infer.Response, error) {
		got = append(got, req)
		if len(got) == 2 {
			return nil, errors.New("canary down")
		}
		return &infer.Response{Version: "2.1", Outputs: []infer.Tensor{{Name: "eta_minutes"}}}, nil
	}
	svc := releasetest.Service{Cfg: shadowed(100), Backends: map[string]release.ModelCall{"canary": canary}}
	h, err := shadowhook.Factory(m, []string{"x-region"})(svc, nil)
	require.NoError(t, err)
	require.Equal(t, shadowhook.Kind, h.Kind())
	h.Answered(context.Background(), &call{id: "r1"})
	h.Answered(context.Background(), &call{id: "r2"})
	require.Equal(t, 2, m.Queued())

	none, err := shadowhook.Factory(m, nil)(releasetest.Service{Cfg: shadowed(0), Backends: svc.Backends}, nil)
	require.NoError(t, err)
	none.Answered(context.Background(), &call{id: "r3"})
	require.Equal(t, 2, m.Queued(), "a 0 % share mirrors nothing")

	require.NoError(t, m.Finish(context.Background(), false))
	require.Len(t, got, 2)
	require.Equal(t, &infer.Request{ID: "r1", Model: "eta", Version: "2", Inputs: []infer.Tensor{{Name: "x"}}}, got[0])
	require.Len(t, rec.recs, 2)
	r := rec.recs[0]
	require.Equal(t, "r1", r.ShadowKey, "no key field: the request id")
	require.Equal(t, map[string]string{"x-region": "sa"}, r.Headers)
	require.Equal(t, map[string]any{"distance_km": 4.2}, r.Request)
	require.Equal(t, record.Arm{Model: "eta", Version: "1", Status: http.StatusOK, LatencyMS: 3, Outputs: map[string][]float64{"eta_minutes": {1}}, Source: "model"}, r.Arms[record.ArmPrimary])
	shadow := r.Arms[record.ArmShadow]
	require.Equal(t, http.StatusOK, shadow.Status)
	require.Equal(t, "2.1", shadow.Version, "the version the shadow says answered")
	require.NotEqual(t, http.StatusOK, rec.recs[1].Arms[record.ArmShadow].Status, "a failed shadow is recorded with its status")
}
