package gateway_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/embedded"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/gateway"
)

// TestOnDemandFeatureInTensor runs the chain with the real feature server
// (in process, over an embedded store): entity ids and request data in,
// the on-demand feature route_od:delay_min (distance_km ×
// route_delay_factor, computed by the feature server from the stored
// distance and the request field) into the model's input tensor.
func TestOnDemandFeatureInTensor(t *testing.T) {
	repo := loadRepo(t)
	store, err := embedded.Open(filepath.Join(t.TempDir(), "online.db"), embedded.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	v := repo.Views["route_features"]
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	ek, err := feature.AppendEntityKey(nil, []feature.Kind{feature.KindInt64}, []feature.Value{{I64: 3}})
	require.NoError(t, err)
	payload, err := feature.AppendValues(nil, v.Schema, []feature.Value{{F64: 12}})
	require.NoError(t, err)
	_, err = store.Write(t.Context(), []online.Entry{{Key: online.Key{View: v.Name, Entity: ek}, Record: feature.Record{
		EventTS: now.Add(-time.Minute).UnixNano(), Schema: feature.Fingerprint(v.Schema), Payload: payload,
	}}}, online.WriteOptions{})
	require.NoError(t, err)
	require.NoError(t, store.PutMeta(t.Context(), feature.ViewStateName(v.Name), []byte(`{"last_success":"2026-05-01T11:59:00Z"}`)))
	srv := serving.New(holderOf(repo), store, serving.Options{Now: func() time.Time { return now }}, nil, nil)

	cfg := strings.Replace(gatewayYAML(yamlOpts{
		gateway: []string{anonAllowed},
		inputs:  "[{tensor: x, datatype: FP64, missing: default, default: -1, features: [route_od:delay_min, field:base_eta]}]",
	}), "feature_service: eta\n", "feature_service: eta_od\n", 1)
	e := newEnv(t, parseConfig(t, cfg), func(o *gateway.Options) { o.Features = srv })

	res := e.post(t, `{"user_id": 7, "route_id": 3, "base_eta": 30, "route_delay_factor": 0.5}`)
	requireOK(t, res)
	require.InDelta(t, 12*0.5+30, res.Outputs["eta_minutes"], 1e-9, "the model sums its inputs: delay_min 6 + base_eta 30")

	// Without the request field the feature reads NOT_FOUND: the input's
	// missing policy applies (default -1), and the request still succeeds.
	res = e.post(t, `{"user_id": 7, "route_id": 3, "base_eta": 30}`)
	requireOK(t, res)
	require.InDelta(t, -1+30, res.Outputs["eta_minutes"], 1e-9)
}

// repoHolder hands serving a fixed repository snapshot.
type repoHolder struct{ r *registry.Repo }

func (h repoHolder) Current() *registry.Repo { return h.r }

func holderOf(r *registry.Repo) serving.RepoSource { return repoHolder{r} }
