package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/console"
)

// accuracyGateway is a GatewaySource with one service's online accuracy.
type accuracyGateway struct{}

func (accuracyGateway) Gateway(context.Context) (*console.Gateway, error) {
	return &console.Gateway{Ready: true, Services: []console.Service{{
		Name: "parcel-eta", Path: "POST /v1/services/parcel-eta:predict", Model: "parcel_eta", Routes: []console.Route{},
		AccuracyWindow: "1h0m0s",
		Accuracy: []console.AccuracySeries{
			{Version: "1", Output: "eta_minutes", Slice: "all", Pairs: 1200, Metrics: map[string]float64{"mae": 4.25, "rmse": 5.5, "bias": -0.75, "mape": 0.091}, Offline: map[string]float64{"mae": 4.2}},
			{Version: "2", Output: "eta_minutes", Slice: "x-region=sa", Pairs: 80, Metrics: map[string]float64{"mae": 13.5, "bias": 12.25}},
		},
	}}}, nil
}

func TestAccuracyPage(t *testing.T) {
	c := console.New(console.Sources{Gateway: accuracyGateway{}}, nil)
	srv := httptest.NewServer(c)
	defer srv.Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+console.Prefix+"accuracy", nil)
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	body := string(b)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	for _, want := range []string{
		"Online accuracy", "parcel-eta", "window 1h0m0s", `id="accuracy-parcel-eta"`,
		"<td>x-region=sa</td>", "13.5", "12.2", "-0.75", "9.1 %", "mae 4.2", `aria-current="page">Accuracy`,
	} {
		require.Contains(t, body, want)
	}
	require.NotContains(t, body, "style=", "no inline style")
}
