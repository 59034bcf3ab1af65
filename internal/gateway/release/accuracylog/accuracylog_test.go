package accuracylog_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/accuracy"
	"github.com/sluice-ml/sluice/internal/accuracy/accuracyspec"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway/release"
	"github.com/sluice-ml/sluice/internal/gateway/release/accuracylog"
	"github.com/sluice-ml/sluice/internal/gateway/release/releasetest"
)

// joiner keeps what it is offered.
type joiner struct {
	preds []*accuracy.Prediction
	feats []map[string]any
}

func (j *joiner) Offer(p *accuracy.Prediction, f map[string]any) bool {
	j.preds, j.feats = append(j.preds, p), append(j.feats, f)
	return true
}

// call is the part of a release.Call that Answered uses; the rest panics.
type call struct {
	release.Call
	fields map[string]string
	answer release.Answer
}

func (c *call) Service() string            { return "eta" }
func (c *call) RequestID() string          { return "req-1" }
func (c *call) Start() time.Time           { return time.Unix(1_700_000_000, 0) }
func (c *call) Header() http.Header        { return http.Header{"X-Region": {"sa"}, "X-Other": {"no"}} }
func (c *call) ClientID() string           { return "alice" }
func (c *call) Group() (string, string)    { return "premium", "candidate" }
func (c *call) Answer() *release.Answer    { return &c.answer }
func (c *call) FeatureMap() map[string]any { return map[string]any{"user_stats__rating": 4.5} }
func (c *call) Field(name string) (string, bool) {
	v, ok := c.fields[name]
	return v, ok
}

func logged(spec accuracyspec.Service) config.Service {
	return config.Service{Name: "eta", Accuracy: &spec}
}

// TestFactory: no accuracy block or no joiner, no hook.
func TestFactory(t *testing.T) {
	h, err := accuracylog.Factory(&joiner{})(releasetest.Service{Cfg: config.Service{Name: "eta"}}, nil)
	require.NoError(t, err)
	require.Nil(t, h)
	h, err = accuracylog.Factory(nil)(releasetest.Service{Cfg: logged(accuracyspec.Service{Percent: 100})}, nil)
	require.NoError(t, err)
	require.Nil(t, h)
}

// TestAnsweredOffersThePrediction: the key field's value keys the
// prediction (the request id when the call lacks it), the slice headers
// and the features go along when asked for, and a share of 0 % logs
// nothing.
func TestAnsweredOffersThePrediction(t *testing.T) {
	j := &joiner{}
	h, err := accuracylog.Factory(j)(releasetest.Service{Cfg: logged(accuracyspec.Service{
		Percent: 100, Key: "order_id", Slices: []string{"x-region"}, Features: true,
	})}, nil)
	require.NoError(t, err)
	require.Equal(t, accuracylog.Kind, h.Kind())

	c := &call{fields: map[string]string{"order_id": "o-7"}, answer: release.Answer{
		Model: "eta", Version: "2", Route: "default",
		Outputs: []release.Output{{Name: "eta_minutes", Values: []float64{12.5}}, {Name: "empty"}},
	}}
	h.Answered(context.Background(), c)
	require.Len(t, j.preds, 1)
	require.Equal(t, &accuracy.Prediction{
		Service: "eta", Key: "o-7", RequestID: "req-1", Model: "eta", Version: "2", Route: "default",
		Group: "premium", Slices: map[string]string{"x-region": "sa"}, Outputs: map[string]float64{"eta_minutes": 12.5},
		Time: time.Unix(1_700_000_000, 0), Client: "alice",
	}, j.preds[0])
	require.Equal(t, map[string]any{"user_stats__rating": 4.5}, j.feats[0])

	h.Answered(context.Background(), &call{})
	require.Len(t, j.preds, 2)
	require.Equal(t, "req-1", j.preds[1].Key, "no key field: the request id")

	none, err := accuracylog.Factory(j)(releasetest.Service{Cfg: logged(accuracyspec.Service{Percent: 0})}, nil)
	require.NoError(t, err)
	none.Answered(context.Background(), c)
	require.Len(t, j.preds, 2, "a 0 % share logs nothing")
}
