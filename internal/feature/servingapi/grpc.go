package servingapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/pb/feastpb"
)

// GRPCOptions configure the gRPC edge. The zero value is usable.
type GRPCOptions struct {
	// MaxEntityRows bounds the entity rows of a GetOnlineFeatures call,
	// as HandlerOptions.MaxEntityRows bounds a JSON request. Default
	// DefaultMaxEntityRows; negative means no limit.
	MaxEntityRows int
	// Version is what GetFeastServingInfo answers.
	Version string
}

// GRPCService is the feature server's gRPC edge: Feast's
// feast.serving.ServingService (GetOnlineFeatures, GetFeastServingInfo),
// answering what POST /get-online-features answers, from the same plans,
// store reads, freshness rules and error reasons. Register it on a
// grpc.Server with feastpb.RegisterServingServiceServer; the listener's
// credentials and admission bounds are the caller's server options.
type GRPCService struct {
	feastpb.UnimplementedServingServiceServer
	s       *serving.Server
	opts    GRPCOptions
	logger  *slog.Logger
	metrics *grpcMetrics
}

// NewGRPCService returns the gRPC edge of s. A nil logger discards; a nil
// registerer leaves the call metrics unregistered.
func NewGRPCService(s *serving.Server, opts GRPCOptions, logger *slog.Logger, reg prometheus.Registerer) *GRPCService {
	switch {
	case opts.MaxEntityRows == 0:
		opts.MaxEntityRows = DefaultMaxEntityRows
	case opts.MaxEntityRows < 0:
		opts.MaxEntityRows = math.MaxInt
	}
	return &GRPCService{s: s, opts: opts, logger: edgeLogger(logger), metrics: newGRPCMetrics(reg)}
}

// The method names of the request metrics.
const (
	methodGetOnlineFeatures = "GetOnlineFeatures"
	methodServingInfo       = "GetFeastServingInfo"
)

// GetFeastServingInfo answers the server's version.
func (g *GRPCService) GetFeastServingInfo(context.Context, *feastpb.GetFeastServingInfoRequest) (*feastpb.GetFeastServingInfoResponse, error) {
	start := time.Now()
	g.record(methodServingInfo, start, nil)
	return &feastpb.GetFeastServingInfoResponse{Version: g.opts.Version}, nil
}

// GetOnlineFeatures reads features of the request's entity rows.
func (g *GRPCService) GetOnlineFeatures(ctx context.Context, req *feastpb.GetOnlineFeaturesRequest) (resp *feastpb.GetOnlineFeaturesResponse, err error) {
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			g.logger.Error("grpc handler panicked", "method", methodGetOnlineFeatures, "panic", p, "stack", string(debug.Stack()))
			resp, err = nil, apierr.Errorf(apierr.KindInternal, serving.ReasonInternal, "internal error")
		}
		if err != nil {
			g.logError(err)
		}
		err = apierr.GRPCStatus(err)
		g.record(methodGetOnlineFeatures, start, err)
	}()
	r, err := g.getOnline(ctx, req)
	g.s.ObserveRead(start, err)
	if err != nil {
		return nil, err
	}
	// The message copies what it needs (the strings, byte slices and
	// lists it shares are never written again): r's memory goes back.
	out := toProtoResponse(r)
	g.s.Release(r)
	return out, nil
}

func (g *GRPCService) getOnline(ctx context.Context, req *feastpb.GetOnlineFeaturesRequest) (*serving.Response, error) {
	var (
		features []string
		service  string
	)
	switch k := req.GetKind().(type) {
	case *feastpb.GetOnlineFeaturesRequest_FeatureService:
		service = k.FeatureService
	case *feastpb.GetOnlineFeaturesRequest_Features:
		features = k.Features.GetVal()
	}
	p, err := g.s.Plan(features, service, req.GetFullFeatureNames())
	if err != nil {
		return nil, err
	}
	ents, err := fromProtoEntities(p, req.GetEntities(), g.opts.MaxEntityRows)
	if err != nil {
		return nil, err
	}
	if p.OnDemand() {
		if err := fromProtoRequest(p, req.GetEntities(), g.opts.MaxEntityRows, ents); err != nil {
			return nil, err
		}
		if err := fromProtoRequest(p, req.GetRequestContext(), g.opts.MaxEntityRows, ents); err != nil {
			return nil, err
		}
	}
	return g.s.Read(ctx, p, ents, nil)
}

// logError logs a failed call as the HTTP edge logs a failed request.
func (g *GRPCService) logError(err error) {
	code, reason := statusOf(err)
	if code >= 500 {
		g.logger.Warn("grpc request failed", "method", methodGetOnlineFeatures, "status", code, "reason", reason, "err", err)
		return
	}
	g.logger.Debug("grpc request rejected", "method", methodGetOnlineFeatures, "status", code, "reason", reason, "err", err)
}

// record counts a finished call by method and gRPC code.
func (g *GRPCService) record(method string, start time.Time, err error) {
	code := codes.OK
	if err != nil {
		code = apierr.GRPCCode(err)
	}
	g.metrics.grpcReqs.WithLabelValues(method, code.String()).Inc()
	g.metrics.grpcDur.WithLabelValues(method).Observe(time.Since(start).Seconds())
}

// fromProtoEntities converts a request's entity columns with the plan's
// join key types. Columns the plan does not know are kept (empty) so
// that the read reports them as unknown, as for a JSON request.
func fromProtoEntities(p serving.Plan, cols map[string]*feastpb.RepeatedValue, maxRows int) (map[string][]feature.Value, error) {
	out := make(map[string][]feature.Value, len(cols))
	for name, col := range cols {
		kind, ok := p.KeyKind(name)
		if !ok {
			out[name] = nil
			continue
		}
		vals := col.GetVal()
		if len(vals) > maxRows {
			return nil, apierr.Errorf(apierr.KindResourceExhausted, serving.ReasonTooManyEntityRows,
				"entity key '%s' has %d values: a request may read at most %d entity rows; split it into several requests", name, len(vals), maxRows)
		}
		conv := make([]feature.Value, len(vals))
		for i, v := range vals {
			var err error
			if conv[i], err = fromProtoKey(v, kind); err != nil {
				return nil, invalidf(serving.ReasonInvalidEntityValue, "entity key '%s' value %d: %s key: %v", name, i, kind, err)
			}
		}
		out[name] = conv
	}
	return out, nil
}

// fromProtoKey converts one entity key value: an Int32 or Int64 key takes
// int32_val or int64_val (within the key's range), a String key
// string_val, a Bytes key bytes_val. Anything else, an unset value and
// null_val are refused.
func fromProtoKey(v *feastpb.Value, kind feature.Kind) (feature.Value, error) {
	switch x := v.GetVal().(type) {
	case nil, *feastpb.Value_NullVal:
		return feature.Value{}, errors.New("null")
	case *feastpb.Value_Int64Val:
		if kind == feature.KindInt64 || (kind == feature.KindInt32 && x.Int64Val >= math.MinInt32 && x.Int64Val <= math.MaxInt32) {
			return feature.Value{I64: x.Int64Val}, nil
		}
		if kind == feature.KindInt32 {
			return feature.Value{}, fmt.Errorf("%d is out of Int32's range", x.Int64Val)
		}
	case *feastpb.Value_Int32Val:
		if kind == feature.KindInt32 || kind == feature.KindInt64 {
			return feature.Value{I64: int64(x.Int32Val)}, nil
		}
	case *feastpb.Value_StringVal:
		if kind == feature.KindString {
			return feature.Value{S: x.StringVal}, nil
		}
	case *feastpb.Value_BytesVal:
		if kind == feature.KindBytes {
			return feature.Value{B: x.BytesVal}, nil
		}
	}
	return feature.Value{}, fmt.Errorf("want %s, got %s", protoField(kind), valueKind(v))
}

// protoField names the Value field that carries a key of kind.
func protoField(kind feature.Kind) string {
	switch kind {
	case feature.KindInt32:
		return "int32_val"
	case feature.KindInt64:
		return "int64_val"
	case feature.KindString:
		return "string_val"
	case feature.KindBytes:
		return "bytes_val"
	default:
		return kind.String()
	}
}

// valueKind names the field set in v.
func valueKind(v *feastpb.Value) string {
	switch v.GetVal().(type) {
	case *feastpb.Value_BytesVal:
		return "bytes_val"
	case *feastpb.Value_StringVal:
		return "string_val"
	case *feastpb.Value_Int32Val:
		return "int32_val"
	case *feastpb.Value_Int64Val:
		return "int64_val"
	case *feastpb.Value_DoubleVal:
		return "double_val"
	case *feastpb.Value_FloatVal:
		return "float_val"
	case *feastpb.Value_BoolVal:
		return "bool_val"
	case *feastpb.Value_UnixTimestampVal:
		return "unix_timestamp_val"
	case nil:
		return "an unset value"
	default:
		return "a list"
	}
}

// toProtoResponse converts an answer to Feast's message: the same names,
// statuses and event timestamps as the JSON answer, values as Feast's
// Value (an empty Value for null, UnixTimestamp as whole seconds).
func toProtoResponse(r *serving.Response) *feastpb.GetOnlineFeaturesResponse {
	out := &feastpb.GetOnlineFeaturesResponse{
		Metadata: &feastpb.GetOnlineFeaturesResponseMetadata{FeatureNames: &feastpb.FeatureList{Val: r.FeatureNames}},
		Results:  make([]*feastpb.GetOnlineFeaturesResponse_FeatureVector, len(r.Results)),
	}
	for i := range r.Results {
		c := &r.Results[i]
		t := r.Types[i]
		fv := &feastpb.GetOnlineFeaturesResponse_FeatureVector{
			Values:          toProtoValues(t, c.Values),
			Statuses:        make([]feastpb.FieldStatus, len(c.Statuses)),
			EventTimestamps: make([]*timestamppb.Timestamp, len(c.EventTimestamps)),
		}
		for j, st := range c.Statuses {
			fv.Statuses[j] = feastpb.FieldStatus(st)
		}
		// One allocation for the column's timestamps, not one each.
		tss := make([]timestamppb.Timestamp, len(c.EventTimestamps))
		for j, ts := range c.EventTimestamps {
			tss[j].Seconds, tss[j].Nanos = ts.Unix(), int32(ts.Nanosecond())
			fv.EventTimestamps[j] = &tss[j]
		}
		out.Results[i] = fv
	}
	return out
}

// toProtoValues converts a column of type t. Scalars take two
// allocations for the whole column (the Values and their oneof
// wrappers), not two per value: a 100-row answer of 50 features has
// 5,000 values.
func toProtoValues(t feature.Type, vals []feature.Value) []*feastpb.Value {
	out := make([]*feastpb.Value, len(vals))
	slab := make([]feastpb.Value, len(vals))
	for j := range vals {
		out[j] = &slab[j]
	}
	if t.List {
		for j := range vals {
			if !vals[j].Null {
				slab[j].Val = toProtoValue(t, &vals[j]).Val
			}
		}
		return out
	}
	switch t.Kind {
	case feature.KindInt64:
		w := make([]feastpb.Value_Int64Val, len(vals))
		for j := range vals {
			if !vals[j].Null {
				w[j].Int64Val = vals[j].I64
				slab[j].Val = &w[j]
			}
		}
	case feature.KindFloat32:
		w := make([]feastpb.Value_FloatVal, len(vals))
		for j := range vals {
			if !vals[j].Null {
				w[j].FloatVal = float32(vals[j].F64)
				slab[j].Val = &w[j]
			}
		}
	case feature.KindFloat64:
		w := make([]feastpb.Value_DoubleVal, len(vals))
		for j := range vals {
			if !vals[j].Null {
				w[j].DoubleVal = vals[j].F64
				slab[j].Val = &w[j]
			}
		}
	default:
		for j := range vals {
			if !vals[j].Null {
				slab[j].Val = toProtoValue(t, &vals[j]).Val
			}
		}
	}
	return out
}

// toProtoValue converts one value of type t.
func toProtoValue(t feature.Type, v *feature.Value) *feastpb.Value {
	if v.Null {
		return &feastpb.Value{}
	}
	if !t.List {
		switch t.Kind {
		case feature.KindInt32:
			return &feastpb.Value{Val: &feastpb.Value_Int32Val{Int32Val: int32(v.I64)}}
		case feature.KindInt64:
			return &feastpb.Value{Val: &feastpb.Value_Int64Val{Int64Val: v.I64}}
		case feature.KindFloat32:
			return &feastpb.Value{Val: &feastpb.Value_FloatVal{FloatVal: float32(v.F64)}}
		case feature.KindFloat64:
			return &feastpb.Value{Val: &feastpb.Value_DoubleVal{DoubleVal: v.F64}}
		case feature.KindString:
			return &feastpb.Value{Val: &feastpb.Value_StringVal{StringVal: v.S}}
		case feature.KindBytes:
			return &feastpb.Value{Val: &feastpb.Value_BytesVal{BytesVal: v.B}}
		case feature.KindBool:
			return &feastpb.Value{Val: &feastpb.Value_BoolVal{BoolVal: v.Bool}}
		case feature.KindUnixTimestamp:
			return &feastpb.Value{Val: &feastpb.Value_UnixTimestampVal{UnixTimestampVal: time.Unix(0, v.I64).Unix()}}
		default:
			return &feastpb.Value{}
		}
	}
	switch t.Kind {
	case feature.KindInt32:
		l := make([]int32, len(v.I64s))
		for i, x := range v.I64s {
			l[i] = int32(x)
		}
		return &feastpb.Value{Val: &feastpb.Value_Int32ListVal{Int32ListVal: &feastpb.Int32List{Val: l}}}
	case feature.KindInt64:
		return &feastpb.Value{Val: &feastpb.Value_Int64ListVal{Int64ListVal: &feastpb.Int64List{Val: v.I64s}}}
	case feature.KindFloat32:
		return &feastpb.Value{Val: &feastpb.Value_FloatListVal{FloatListVal: &feastpb.FloatList{Val: v.F32s}}}
	case feature.KindFloat64:
		return &feastpb.Value{Val: &feastpb.Value_DoubleListVal{DoubleListVal: &feastpb.DoubleList{Val: v.F64s}}}
	case feature.KindString:
		return &feastpb.Value{Val: &feastpb.Value_StringListVal{StringListVal: &feastpb.StringList{Val: v.Ss}}}
	case feature.KindBytes:
		l := make([][]byte, len(v.Ss))
		for i, x := range v.Ss {
			l[i] = []byte(x)
		}
		return &feastpb.Value{Val: &feastpb.Value_BytesListVal{BytesListVal: &feastpb.BytesList{Val: l}}}
	case feature.KindBool:
		return &feastpb.Value{Val: &feastpb.Value_BoolListVal{BoolListVal: &feastpb.BoolList{Val: v.Bools}}}
	default:
		return &feastpb.Value{}
	}
}
