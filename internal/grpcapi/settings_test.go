package grpcapi

import (
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/telemetry"
	"github.com/sluice-ml/sluice/internal/tritonsettings"
)

// LogSettings and TraceSetting as Triton's logging and trace extensions
// define them (qa/L0_logging, qa/L0_trace).
func TestSettingsGRPC(t *testing.T) {
	var lv slog.LevelVar
	svc := New(newFakeModels(), Options{Settings: tritonsettings.New(&lv, "json", telemetry.NewSampling(0.01))}, nil, prometheus.NewRegistry())
	ctx := ctxTimeout(t)

	got, err := svc.LogSettings(ctx, &pb.LogSettingsRequest{})
	require.NoError(t, err)
	require.True(t, got.GetSettings()["log_info"].GetBoolParam())
	got, err = svc.LogSettings(ctx, &pb.LogSettingsRequest{Settings: map[string]*pb.LogSettingsRequest_SettingValue{
		"log_info":    {ParameterChoice: &pb.LogSettingsRequest_SettingValue_BoolParam{BoolParam: false}},
		"log_warning": {ParameterChoice: &pb.LogSettingsRequest_SettingValue_BoolParam{BoolParam: true}},
	}})
	require.NoError(t, err)
	require.False(t, got.GetSettings()["log_info"].GetBoolParam())
	require.Equal(t, slog.LevelWarn, lv.Level())
	_, err = svc.LogSettings(ctx, &pb.LogSettingsRequest{Settings: map[string]*pb.LogSettingsRequest_SettingValue{
		"log_file": {ParameterChoice: &pb.LogSettingsRequest_SettingValue_StringParam{StringParam: "x.log"}},
	}})
	requireStatus(t, err, codes.Unimplemented, tritonsettings.ReasonUnsupported, "cannot change at run time")

	tr, err := svc.TraceSetting(ctx, &pb.TraceSettingRequest{})
	require.NoError(t, err)
	require.Equal(t, []string{"OFF"}, tr.GetSettings()["trace_level"].GetValue())
	_, err = svc.TraceSetting(ctx, &pb.TraceSettingRequest{ModelName: "nope"})
	requireStatus(t, err, codes.NotFound, "model_not_found", "nope")
	_, err = svc.TraceSetting(ctx, &pb.TraceSettingRequest{Settings: map[string]*pb.TraceSettingRequest_SettingValue{"trace_level": {Value: []string{"TIMESTAMPS"}}}})
	requireStatus(t, err, codes.Unimplemented, tritonsettings.ReasonUnsupported, "cannot turn tracing on: no exporter is configured")

	bare := New(newFakeModels(), Options{}, nil, nil)
	_, err = bare.LogSettings(ctx, &pb.LogSettingsRequest{})
	require.Equal(t, codes.Unimplemented, status.Code(err))
}
