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

// qa/L0_trace trace_endpoint_test.py test_grpc_update_settings and
// test_grpc_clear_settings: a model's settings follow the global ones
// until set for it; an empty value clears a setting (the model's follows
// the global one again, a global one returns to its value at start); the
// trace file cannot change over the network (INVALID_ARGUMENT). The
// fake's model is echo where Triton's test uses simple.
func TestTraceSettingsGRPCPerModel(t *testing.T) {
	var lv slog.LevelVar
	sampling := telemetry.NewSampling(1)
	sampling.SetExporting(true)
	st := tritonsettings.New(&lv, "json", sampling)
	require.NoError(t, st.ConfigureTrace(tritonsettings.TraceConfig{Level: []string{"TIMESTAMPS"}, Rate: 1, File: "global_unittest.log", Mode: tritonsettings.ModeTriton}))
	svc := New(newFakeModels(), Options{Settings: st}, nil, prometheus.NewRegistry())
	ctx := ctxTimeout(t)
	call := func(model string, kv ...any) map[string][]string {
		t.Helper()
		req := &pb.TraceSettingRequest{ModelName: model, Settings: map[string]*pb.TraceSettingRequest_SettingValue{}}
		for i := 0; i < len(kv); i += 2 {
			v, _ := kv[i+1].([]string)
			req.Settings[kv[i].(string)] = &pb.TraceSettingRequest_SettingValue{Value: v}
		}
		got, err := svc.TraceSetting(ctx, req)
		require.NoError(t, err)
		out := map[string][]string{}
		for k, v := range got.GetSettings() {
			out[k] = v.GetValue()
		}
		return out
	}
	want := func(level []string, rate, freq string) map[string][]string {
		return map[string][]string{
			"trace_file": {"global_unittest.log"}, "trace_level": level, "trace_rate": {rate},
			"trace_count": {"-1"}, "log_frequency": {freq}, "trace_mode": {"triton"},
		}
	}
	_, err := svc.TraceSetting(ctx, &pb.TraceSettingRequest{ModelName: "echo", Settings: map[string]*pb.TraceSettingRequest_SettingValue{"trace_file": {Value: []string{"model.log"}}}})
	requireStatus(t, err, codes.InvalidArgument, tritonsettings.ReasonInvalid, "trace file location can not be updated through network protocol")
	require.Equal(t, want([]string{"TIMESTAMPS", "TENSORS"}, "1", "0"), call("", "trace_level", []string{"TIMESTAMPS", "TENSORS"}))
	require.Equal(t, want([]string{"TIMESTAMPS", "TENSORS"}, "1", "0"), call("echo"))
	call("", "trace_level", nil)

	call("echo", "trace_rate", []string{"12"}, "log_frequency", []string{"34"})
	call("", "trace_rate", []string{"56"}, "trace_count", []string{"78"}, "trace_level", []string{"OFF"})
	require.Equal(t, want([]string{"OFF"}, "1", "0"), call("", "trace_rate", nil, "trace_count", nil))
	require.Equal(t, want([]string{"OFF"}, "12", "34"), call("echo"))
	require.Equal(t, want([]string{"OFF"}, "1", "34"), call("echo", "trace_rate", nil, "trace_level", nil))
	require.Equal(t, want([]string{"OFF"}, "1", "0"), call(""))
	_, err = svc.TraceSetting(ctx, &pb.TraceSettingRequest{ModelName: "does-not-exist"})
	requireStatus(t, err, codes.NotFound, "model_not_found", "Request for unknown model : does-not-exist")
}
