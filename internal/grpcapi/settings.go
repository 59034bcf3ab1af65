package grpcapi

import (
	"context"
	"errors"

	"github.com/sluice-ml/sluice/internal/apierr"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/tritonsettings"
)

const reasonNoSettings = "settings_unavailable"

func (s *Service) noSettings() error {
	return toStatus(apierr.Errorf(apierr.KindUnsupported, reasonNoSettings, "this server does not expose its log and trace settings"))
}

// LogSettings implements Triton's logging extension: with no settings in
// the request it reads them, else it applies them and returns the result.
func (s *Service) LogSettings(ctx context.Context, req *pb.LogSettingsRequest) (*pb.LogSettingsResponse, error) {
	if s.opts.Settings == nil {
		return nil, s.noSettings()
	}
	got := s.opts.Settings.Log()
	if len(req.GetSettings()) > 0 {
		update := make(map[string]any, len(req.GetSettings()))
		for k, v := range req.GetSettings() {
			switch c := v.GetParameterChoice().(type) {
			case *pb.LogSettingsRequest_SettingValue_BoolParam:
				update[k] = c.BoolParam
			case *pb.LogSettingsRequest_SettingValue_Uint32Param:
				update[k] = c.Uint32Param
			case *pb.LogSettingsRequest_SettingValue_StringParam:
				update[k] = c.StringParam
			default:
				return nil, toStatus(invalidf(reasonInvalidParameter, "log setting '%s' has no value", k))
			}
		}
		var err error
		if got, err = s.opts.Settings.UpdateLog(update); err != nil {
			return nil, s.fail(ctx, "LogSettings", err)
		}
	}
	out := &pb.LogSettingsResponse{Settings: make(map[string]*pb.LogSettingsResponse_SettingValue, len(got))}
	for k, v := range got {
		sv := &pb.LogSettingsResponse_SettingValue{}
		switch x := v.(type) {
		case bool:
			sv.ParameterChoice = &pb.LogSettingsResponse_SettingValue_BoolParam{BoolParam: x}
		case uint32:
			sv.ParameterChoice = &pb.LogSettingsResponse_SettingValue_Uint32Param{Uint32Param: x}
		case string:
			sv.ParameterChoice = &pb.LogSettingsResponse_SettingValue_StringParam{StringParam: x}
		}
		out.Settings[k] = sv
	}
	return out, nil
}

// TraceSetting implements Triton's trace extension (see package
// tritonsettings for how it maps onto OpenTelemetry tracing).
func (s *Service) TraceSetting(ctx context.Context, req *pb.TraceSettingRequest) (*pb.TraceSettingResponse, error) {
	if s.opts.Settings == nil {
		return nil, s.noSettings()
	}
	if m := req.GetModelName(); m != "" {
		if _, err := s.models.Metadata(ctx, m, ""); err != nil {
			if ie, ok := errors.AsType[*apierr.Error](err); ok && ie.Kind == apierr.KindNotFound {
				return nil, s.fail(ctx, "TraceSetting", tritonsettings.UnknownModel(m))
			}
		}
	}
	got := s.opts.Settings.Trace(req.GetModelName())
	if len(req.GetSettings()) > 0 {
		update := make(map[string][]string, len(req.GetSettings()))
		for k, v := range req.GetSettings() {
			update[k] = v.GetValue()
		}
		var err error
		if got, err = s.opts.Settings.UpdateTrace(req.GetModelName(), update); err != nil {
			return nil, s.fail(ctx, "TraceSetting", err)
		}
	}
	out := &pb.TraceSettingResponse{Settings: make(map[string]*pb.TraceSettingResponse_SettingValue, len(got))}
	for k, v := range got {
		out.Settings[k] = &pb.TraceSettingResponse_SettingValue{Value: v}
	}
	return out, nil
}
