package servingapi

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
	"github.com/sluice-ml/sluice/internal/pb/feastpb"
)

// serveGRPC serves s's gRPC edge on a loopback port and returns a client
// connection to it.
func serveGRPC(tb testing.TB, s *serving.Server, opts GRPCOptions, logger *slog.Logger, reg prometheus.Registerer) *grpc.ClientConn {
	tb.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(tb.Context(), "tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	gs := grpc.NewServer()
	feastpb.RegisterServingServiceServer(gs, NewGRPCService(s, opts, logger, reg))
	done := make(chan struct{})
	go func() { _ = gs.Serve(ln); close(done) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(tb, err)
	tb.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		<-done
	})
	return conn
}

// seedForGRPC writes rows of every value kind through the JSON API.
func seedForGRPC(t *testing.T, f *storeFixture) {
	t.Helper()
	for _, body := range []string{
		`{"feature_view_name":"user_stats","df":{"user_id":[1,2],"clicks":[7,-8],"score":[0.5,1.25],"name":["ann",null],"emb":[[1,2.5,-3],null],"event_timestamp":["2026-01-02T11:55:00.340","2026-01-02T11:56:00"]}}`,
		`{"feature_view_name":"user_flags","df":{"user_id":[1],"active":[true],"tags":[["a","b"]],"event_timestamp":["2026-01-02T11:55:00.000120"]}}`,
		`{"feature_view_name":"route_stats","df":{"route_id":["r1"],"eta":[31.5],"blob":["AAEC/w=="],"ts":["2025-01-02T11:00:00Z"]}}`,
	} {
		code, out := f.post(t, "/write-to-online-store", body)
		require.Equal(t, http.StatusOK, code, out)
	}
}

// jsonOf turns a gRPC value into what the JSON API sends for it.
func jsonOf(v *feastpb.Value) any {
	switch x := v.GetVal().(type) {
	case nil:
		return nil
	case *feastpb.Value_Int32Val:
		return float64(x.Int32Val)
	case *feastpb.Value_Int64Val:
		return float64(x.Int64Val)
	case *feastpb.Value_FloatVal:
		return float64(x.FloatVal)
	case *feastpb.Value_DoubleVal:
		return x.DoubleVal
	case *feastpb.Value_StringVal:
		return x.StringVal
	case *feastpb.Value_BytesVal:
		return base64.StdEncoding.EncodeToString(x.BytesVal)
	case *feastpb.Value_BoolVal:
		return x.BoolVal
	case *feastpb.Value_FloatListVal:
		l := []any{}
		for _, e := range x.FloatListVal.GetVal() {
			l = append(l, float64(e))
		}
		return l
	case *feastpb.Value_StringListVal:
		l := []any{}
		for _, e := range x.StringListVal.GetVal() {
			l = append(l, e)
		}
		return l
	}
	return fmt.Sprintf("unexpected %T", v.GetVal())
}

// The gRPC answer is the JSON answer, value for value: names, values,
// statuses and event timestamps, on the real online stores.
func TestGRPCReadsWhatJSONReads(t *testing.T) {
	for name, open := range schemaStores() {
		t.Run(name, func(t *testing.T) {
			f := newStoreFixture(t, open(t))
			seedForGRPC(t, f)
			client := feastpb.NewServingServiceClient(serveGRPC(t, f.srv, GRPCOptions{Version: "test-1"}, nil, nil))

			info, err := client.GetFeastServingInfo(t.Context(), &feastpb.GetFeastServingInfoRequest{})
			require.NoError(t, err)
			require.Equal(t, "test-1", info.GetVersion())

			users := func(ids ...int64) *feastpb.RepeatedValue {
				rv := &feastpb.RepeatedValue{}
				for _, id := range ids {
					rv.Val = append(rv.Val, &feastpb.Value{Val: &feastpb.Value_Int64Val{Int64Val: id}})
				}
				return rv
			}
			routes := &feastpb.RepeatedValue{Val: []*feastpb.Value{
				{Val: &feastpb.Value_StringVal{StringVal: "r1"}}, {Val: &feastpb.Value_StringVal{StringVal: "r1"}}, {Val: &feastpb.Value_StringVal{StringVal: "zz"}},
			}}
			cases := []struct {
				name string
				json string
				req  *feastpb.GetOnlineFeaturesRequest
			}{
				{
					"features",
					`{"features":["user_stats:clicks","user_stats:score","user_stats:name","user_stats:emb","user_flags:active","user_flags:tags"],"entities":{"user_id":[1,2,3]}}`,
					&feastpb.GetOnlineFeaturesRequest{
						Kind:     &feastpb.GetOnlineFeaturesRequest_Features{Features: &feastpb.FeatureList{Val: []string{"user_stats:clicks", "user_stats:score", "user_stats:name", "user_stats:emb", "user_flags:active", "user_flags:tags"}}},
						Entities: map[string]*feastpb.RepeatedValue{"user_id": users(1, 2, 3)},
					},
				},
				{
					"feature service, full names",
					`{"feature_service":"eta_svc","entities":{"user_id":[1,2,3],"route_id":["r1","r1","zz"]},"full_feature_names":true}`,
					&feastpb.GetOnlineFeaturesRequest{
						Kind:             &feastpb.GetOnlineFeaturesRequest_FeatureService{FeatureService: "eta_svc"},
						Entities:         map[string]*feastpb.RepeatedValue{"user_id": users(1, 2, 3), "route_id": routes},
						FullFeatureNames: true,
					},
				},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					want := f.read(t, tc.json)
					got, err := client.GetOnlineFeatures(t.Context(), tc.req)
					require.NoError(t, err)
					require.Equal(t, want.Metadata.FeatureNames, got.GetMetadata().GetFeatureNames().GetVal())
					require.Len(t, got.GetResults(), len(want.Results))
					for i, col := range got.GetResults() {
						var vals []any
						for _, v := range col.GetValues() {
							vals = append(vals, jsonOf(v))
						}
						require.Equal(t, want.Results[i].Values, vals, "column %s", want.Metadata.FeatureNames[i])
						var sts, tss []string
						for _, st := range col.GetStatuses() {
							sts = append(sts, st.String())
						}
						for _, ts := range col.GetEventTimestamps() {
							tss = append(tss, string(serving.AppendTimestamp(nil, ts.AsTime())))
						}
						require.Equal(t, want.Results[i].Statuses, sts)
						require.Equal(t, want.Results[i].EventTimestamps, tss)
					}
				})
			}
		})
	}
}

// rawCodec sends and receives bytes as they are, so that a test can speak
// the wire format by hand.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// A Feast client's bytes: the request is encoded by hand with the method
// path and field numbers of Feast's protos (feast/serving/
// ServingService.proto: GetOnlineFeaturesRequest features = 2 (FeatureList
// val = 1), entities = 3 (map<string, RepeatedValue>); feast/types/
// Value.proto: RepeatedValue val = 1, Value int64_val = 4), and the answer
// is decoded by hand too (metadata = 1 with feature_names = 1; results =
// 2 with values = 1, statuses = 2, event_timestamps = 3; Value
// double_val = 5), so the test does not lean on the generated code.
func TestGRPCFeastWireFormat(t *testing.T) {
	f := newStoreFixture(t, schemaStores()["embedded"](t))
	seedForGRPC(t, f)
	conn := serveGRPC(t, f.srv, GRPCOptions{}, nil, nil)

	var req []byte
	var list []byte
	list = protowire.AppendTag(list, 1, protowire.BytesType)
	list = protowire.AppendString(list, "user_stats:score")
	req = protowire.AppendTag(req, 2, protowire.BytesType)
	req = protowire.AppendBytes(req, list)
	var rv []byte
	for _, id := range []uint64{1, 3} {
		var v []byte
		v = protowire.AppendTag(v, 4, protowire.VarintType)
		v = protowire.AppendVarint(v, id)
		rv = protowire.AppendTag(rv, 1, protowire.BytesType)
		rv = protowire.AppendBytes(rv, v)
	}
	var entry []byte
	entry = protowire.AppendTag(entry, 1, protowire.BytesType)
	entry = protowire.AppendString(entry, "user_id")
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	entry = protowire.AppendBytes(entry, rv)
	req = protowire.AppendTag(req, 3, protowire.BytesType)
	req = protowire.AppendBytes(req, entry)

	var resp []byte
	require.NoError(t, conn.Invoke(t.Context(), "/feast.serving.ServingService/GetOnlineFeatures", &req, &resp, grpc.ForceCodec(rawCodec{})))

	fields := func(b []byte) map[protowire.Number][][]byte {
		out := map[protowire.Number][][]byte{}
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b)
			require.Positive(t, n)
			b = b[n:]
			switch typ {
			case protowire.BytesType:
				v, m := protowire.ConsumeBytes(b)
				require.Positive(t, m)
				out[num] = append(out[num], v)
				b = b[m:]
			case protowire.VarintType:
				v, m := protowire.ConsumeVarint(b)
				require.Positive(t, m)
				out[num] = append(out[num], protowire.AppendVarint(nil, v))
				b = b[m:]
			case protowire.Fixed64Type:
				v, m := protowire.ConsumeFixed64(b)
				require.Positive(t, m)
				out[num] = append(out[num], protowire.AppendFixed64(nil, v))
				b = b[m:]
			default:
				t.Fatalf("field %d has wire type %d", num, typ)
			}
		}
		return out
	}
	top := fields(resp)
	names := fields(fields(top[1][0])[1][0])[1]
	require.Equal(t, "user_id", string(names[0]))
	require.Equal(t, "score", string(names[1]))
	require.Len(t, top[2], 2)
	score := fields(top[2][1])
	require.Len(t, score[1], 2)
	// score is Float32: float_val = 6, a fixed32.
	v := score[1][0]
	num, typ, n := protowire.ConsumeTag(v)
	require.Equal(t, protowire.Number(6), num)
	require.Equal(t, protowire.Fixed32Type, typ)
	bits, _ := protowire.ConsumeFixed32(v[n:])
	require.Equal(t, uint32(0x3f000000), bits) // 0.5
	require.Empty(t, score[1][1], "NOT_FOUND is an empty Value")
	// statuses = 2, packed: PRESENT (1), NOT_FOUND (3).
	require.Equal(t, [][]byte{{1, 3}}, score[2])
	// event_timestamps = 3: Timestamp seconds = 1, nanos = 2.
	require.Len(t, score[3], 2)
	ts := fields(score[3][0])
	sec, _ := protowire.ConsumeVarint(ts[1][0])
	nanos, _ := protowire.ConsumeVarint(ts[2][0])
	require.Equal(t, uint64(now.Add(-5*time.Minute+340*time.Millisecond).Unix()), sec)
	require.Equal(t, uint64(340e6), nanos)
}

// Errors carry the JSON API's reason in an ErrorInfo and the code its
// status maps to; the calls are counted by method and code.
func TestGRPCErrors(t *testing.T) {
	f := newFixture(t, serving.Options{})
	client := feastpb.NewServingServiceClient(serveGRPC(t, f.srv, GRPCOptions{MaxEntityRows: 2}, f.Logger, f.Reg))
	feats := func(refs ...string) *feastpb.GetOnlineFeaturesRequest_Features {
		return &feastpb.GetOnlineFeaturesRequest_Features{Features: &feastpb.FeatureList{Val: refs}}
	}
	i64s := func(ids ...int64) *feastpb.RepeatedValue {
		rv := &feastpb.RepeatedValue{}
		for _, id := range ids {
			rv.Val = append(rv.Val, &feastpb.Value{Val: &feastpb.Value_Int64Val{Int64Val: id}})
		}
		return rv
	}
	cases := []struct {
		name   string
		req    *feastpb.GetOnlineFeaturesRequest
		code   codes.Code
		reason string
	}{
		{"unknown feature", &feastpb.GetOnlineFeaturesRequest{Kind: feats("user_stats:nope"), Entities: map[string]*feastpb.RepeatedValue{"user_id": i64s(1)}}, codes.InvalidArgument, serving.ReasonUnknownFeature},
		{"unknown service", &feastpb.GetOnlineFeaturesRequest{Kind: &feastpb.GetOnlineFeaturesRequest_FeatureService{FeatureService: "nope"}}, codes.InvalidArgument, serving.ReasonUnknownService},
		{"nothing asked", &feastpb.GetOnlineFeaturesRequest{}, codes.InvalidArgument, ""},
		{"missing key", &feastpb.GetOnlineFeaturesRequest{Kind: feats("user_stats:clicks")}, codes.InvalidArgument, serving.ReasonMissingEntityKey},
		{"unknown key", &feastpb.GetOnlineFeaturesRequest{Kind: feats("user_stats:clicks"), Entities: map[string]*feastpb.RepeatedValue{"user_id": i64s(1), "x": i64s(1)}}, codes.InvalidArgument, serving.ReasonUnknownEntityKey},
		{"string for int key", &feastpb.GetOnlineFeaturesRequest{Kind: feats("user_stats:clicks"), Entities: map[string]*feastpb.RepeatedValue{"user_id": {Val: []*feastpb.Value{{Val: &feastpb.Value_StringVal{StringVal: "1"}}}}}}, codes.InvalidArgument, serving.ReasonInvalidEntityValue},
		{"null key", &feastpb.GetOnlineFeaturesRequest{Kind: feats("user_stats:clicks"), Entities: map[string]*feastpb.RepeatedValue{"user_id": {Val: []*feastpb.Value{{}}}}}, codes.InvalidArgument, serving.ReasonInvalidEntityValue},
		{"too many rows", &feastpb.GetOnlineFeaturesRequest{Kind: feats("user_stats:clicks"), Entities: map[string]*feastpb.RepeatedValue{"user_id": i64s(1, 2, 3)}}, codes.ResourceExhausted, serving.ReasonTooManyEntityRows},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client.GetOnlineFeatures(t.Context(), tc.req)
			st, ok := status.FromError(err)
			require.True(t, ok, "%v", err)
			require.Equal(t, tc.code, st.Code(), st.Message())
			var reason string
			for _, d := range st.Details() {
				if info, ok := d.(*errdetails.ErrorInfo); ok {
					reason = info.GetReason()
				}
			}
			require.NotEmpty(t, reason)
			if tc.reason != "" {
				require.Equal(t, tc.reason, reason, st.Message())
			}
		})
	}
	// A stale view answers Unavailable feature_view_stale, as the JSON
	// API answers 503.
	f.SetState(t, "user_stats", now.Add(-2*time.Hour))
	_, err := client.GetOnlineFeatures(t.Context(), &feastpb.GetOnlineFeaturesRequest{Kind: feats("user_stats:clicks"), Entities: map[string]*feastpb.RepeatedValue{"user_id": i64s(1)}})
	require.Equal(t, codes.Unavailable, status.Code(err))

	require.Equal(t, 7.0, f.Counter(t, "sluice_feature_server_grpc_requests_total", map[string]string{"method": "GetOnlineFeatures", "code": "InvalidArgument"}))
	require.Equal(t, 1.0, f.Counter(t, "sluice_feature_server_grpc_requests_total", map[string]string{"method": "GetOnlineFeatures", "code": "ResourceExhausted"}))
	require.Equal(t, 1.0, f.Counter(t, "sluice_feature_server_grpc_requests_total", map[string]string{"method": "GetOnlineFeatures", "code": "Unavailable"}))
}

// FuzzGRPCRequest decodes arbitrary bytes as a GetOnlineFeaturesRequest,
// as the gRPC server would, and answers it: the entity values' conversion
// must never panic, and every refusal is a status with a reason.
func FuzzGRPCRequest(f *testing.F) {
	seeds := []*feastpb.GetOnlineFeaturesRequest{
		{
			Kind:     &feastpb.GetOnlineFeaturesRequest_Features{Features: &feastpb.FeatureList{Val: []string{"user_stats:clicks", "user_stats:emb"}}},
			Entities: map[string]*feastpb.RepeatedValue{"user_id": {Val: []*feastpb.Value{{Val: &feastpb.Value_Int64Val{Int64Val: 1}}, {Val: &feastpb.Value_Int32Val{Int32Val: 2}}}}},
		},
		{
			Kind: &feastpb.GetOnlineFeaturesRequest_FeatureService{FeatureService: "eta_svc"},
			Entities: map[string]*feastpb.RepeatedValue{
				"user_id":  {Val: []*feastpb.Value{{Val: &feastpb.Value_Int64Val{Int64Val: 1}}}},
				"route_id": {Val: []*feastpb.Value{{Val: &feastpb.Value_StringVal{StringVal: "r1"}}}},
			}, FullFeatureNames: true,
		},
		{
			Kind:     &feastpb.GetOnlineFeaturesRequest_Features{Features: &feastpb.FeatureList{Val: []string{"route_stats:blob"}}},
			Entities: map[string]*feastpb.RepeatedValue{"route_id": {Val: []*feastpb.Value{{Val: &feastpb.Value_BytesVal{BytesVal: []byte{1}}}, {Val: &feastpb.Value_NullVal{}}, {}}}},
		},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		require.NoError(f, err)
		f.Add(b)
	}
	fx := newFixture(f, serving.Options{})
	fx.Put(f, "user_stats", i64(1), now.Add(-(10 * time.Minute)), i64(7), f64(0.5), str("ann"), servingtest.Emb3())
	svc := NewGRPCService(fx.srv, GRPCOptions{MaxEntityRows: 100}, fx.Logger, nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		var req feastpb.GetOnlineFeaturesRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		resp, err := svc.GetOnlineFeatures(t.Context(), &req)
		if err == nil {
			if len(resp.GetResults()) != len(resp.GetMetadata().GetFeatureNames().GetVal()) {
				t.Fatalf("%d results for %d names", len(resp.GetResults()), len(resp.GetMetadata().GetFeatureNames().GetVal()))
			}
			return
		}
		st, ok := status.FromError(err)
		if !ok || st.Code() == codes.Internal || st.Code() == codes.Unknown || len(st.Details()) == 0 {
			t.Fatalf("error %v is not a status with a reason", err)
		}
	})
}
