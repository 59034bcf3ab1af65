package integration_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/authz"
	"github.com/sluice-ml/sluice/internal/pb/feastpb"
)

// TestFeatureServerGRPC runs `sluice feature-server --grpc-port` with
// tokens and read_auth token: Feast's gRPC client (the method path and
// messages of feast.serving.ServingService) reads the values the JSON API
// reads, under the same credentials; /write-to-online-store needs operate
// like /push; the gRPC calls are counted on /metrics.
func TestFeatureServerGRPC(t *testing.T) {
	t.Parallel()
	const opsToken, readToken = "fs-grpc-ops-5b1e", "fs-grpc-read-77c0"
	secFile := filepath.Join(t.TempDir(), "security.yaml")
	mustWrite(t, secFile, fmt.Appendf(nil, "security:\n  tokens:\n    - {id: ops, token_sha256: %s, role: operate}\n    - {id: viewer, token_sha256: %s, role: read}\n",
		authz.HashToken(opsToken), authz.HashToken(readToken)))
	grpcPort := freePort(t)
	base, logs := startFeatureServerArgs(t, featureRepo(t, 6379), "--grpc-port", strconv.Itoa(grpcPort), "--security-config", secFile, "--read-auth", "token")
	ops := map[string]string{"Authorization": "Bearer " + opsToken}
	viewer := map[string]string{"Authorization": "Bearer " + readToken}

	// Writes need operate, /write-to-online-store as /push.
	ts := time.Now().UTC().Add(-time.Minute).Format("2006-01-02T15:04:05.000000")
	write := fmt.Appendf(nil, `{"feature_view_name":"route_features","df":{"route_id":[41,42],"distance_km":[4.5,12.25],"avg_speed_kmh":30,"traffic_index":0.5,"stops":3,
		"hour_sin":0,"hour_cos":1,"weekday_sin":0,"weekday_cos":1,"embedding":[%s,%s],"event_timestamp":[%q,%q],"created":[null,null]}}`,
		zeroList(24), zeroList(24), ts, ts)
	if code, _, b := do(t, http.MethodPost, base+"/write-to-online-store", write, viewer); code != http.StatusForbidden {
		t.Fatalf("write with a read token: %d %s, want 403", code, b)
	}
	if code, _, b := do(t, http.MethodPost, base+"/write-to-online-store", write, ops); code != http.StatusOK || strings.TrimSpace(string(b)) != "null" {
		t.Fatalf("write with the operate token: %d %s, want 200 null", code, b)
	}

	// The JSON answer.
	code, _, body := do(t, http.MethodPost, base+"/get-online-features",
		[]byte(`{"features":["route_features:distance_km","route_features:stops"],"entities":{"route_id":[41,42,43]}}`), viewer)
	if code != http.StatusOK {
		t.Fatalf("JSON read: %d %s", code, body)
	}
	var want struct {
		Metadata struct {
			FeatureNames []string `json:"feature_names"`
		} `json:"metadata"`
		Results []struct {
			Values          []any    `json:"values"`
			Statuses        []string `json:"statuses"`
			EventTimestamps []string `json:"event_timestamps"`
		} `json:"results"`
	}
	if err := json.Unmarshal(body, &want); err != nil {
		t.Fatal(err)
	}

	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", grpcPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := feastpb.NewServingServiceClient(conn)
	ids := &feastpb.RepeatedValue{}
	for _, id := range []int64{41, 42, 43} {
		ids.Val = append(ids.Val, &feastpb.Value{Val: &feastpb.Value_Int64Val{Int64Val: id}})
	}
	req := &feastpb.GetOnlineFeaturesRequest{
		Kind:     &feastpb.GetOnlineFeaturesRequest_Features{Features: &feastpb.FeatureList{Val: []string{"route_features:distance_km", "route_features:stops"}}},
		Entities: map[string]*feastpb.RepeatedValue{"route_id": ids},
	}

	// No credential, a wrong one: Unauthenticated, as the JSON API's 401.
	if _, err := client.GetOnlineFeatures(t.Context(), req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("gRPC read without a token: %v, want Unauthenticated", err)
	}
	bad := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer nope")
	if _, err := client.GetOnlineFeatures(bad, req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("gRPC read with a wrong token: %v, want Unauthenticated", err)
	}

	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+readToken)
	got, err := client.GetOnlineFeatures(ctx, req)
	if err != nil {
		t.Fatalf("gRPC read: %v", err)
	}
	if names := got.GetMetadata().GetFeatureNames().GetVal(); strings.Join(names, ",") != strings.Join(want.Metadata.FeatureNames, ",") {
		t.Fatalf("gRPC names %v, JSON names %v", names, want.Metadata.FeatureNames)
	}
	for i, col := range got.GetResults() {
		for j, v := range col.GetValues() {
			var gv any
			switch x := v.GetVal().(type) {
			case *feastpb.Value_Int64Val:
				gv = float64(x.Int64Val)
			case *feastpb.Value_Int32Val:
				gv = float64(x.Int32Val)
			case *feastpb.Value_FloatVal:
				gv = float64(x.FloatVal)
			case *feastpb.Value_DoubleVal:
				gv = x.DoubleVal
			case nil:
				gv = nil
			default:
				gv = fmt.Sprintf("%T", x)
			}
			if gv != want.Results[i].Values[j] {
				t.Errorf("%s row %d: gRPC %v, JSON %v", want.Metadata.FeatureNames[i], j, gv, want.Results[i].Values[j])
			}
			if s := col.GetStatuses()[j].String(); s != want.Results[i].Statuses[j] {
				t.Errorf("%s row %d: gRPC status %s, JSON %s", want.Metadata.FeatureNames[i], j, s, want.Results[i].Statuses[j])
			}
			gt := col.GetEventTimestamps()[j].AsTime()
			jt, err := time.Parse(time.RFC3339Nano, want.Results[i].EventTimestamps[j])
			if err != nil || !gt.Equal(jt) {
				t.Errorf("%s row %d: gRPC timestamp %s, JSON %s", want.Metadata.FeatureNames[i], j, gt, want.Results[i].EventTimestamps[j])
			}
		}
	}
	if v := got.GetResults()[1].GetValues()[1].GetFloatVal(); v != 12.25 {
		t.Errorf("route 42 distance_km over gRPC = %v, want 12.25", v)
	}
	if st := got.GetResults()[1].GetStatuses(); st[0] != feastpb.FieldStatus_PRESENT || st[2] != feastpb.FieldStatus_NOT_FOUND {
		t.Errorf("statuses %v, want PRESENT ... NOT_FOUND", st)
	}
	// An unknown feature: InvalidArgument with the JSON API's reason.
	req.Kind = &feastpb.GetOnlineFeaturesRequest_Features{Features: &feastpb.FeatureList{Val: []string{"route_features:nope"}}}
	if _, err := client.GetOnlineFeatures(ctx, req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown feature over gRPC: %v, want InvalidArgument naming it", err)
	}

	code, _, metrics := do(t, http.MethodGet, base+"/metrics", nil, viewer)
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, line := range []string{
		`sluice_feature_server_grpc_requests_total{code="OK",method="GetOnlineFeatures"} 1`,
		`sluice_feature_server_grpc_requests_total{code="InvalidArgument",method="GetOnlineFeatures"} 1`,
	} {
		if !strings.Contains(string(metrics), line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	if !strings.Contains(logs.String(), "features_grpc") {
		t.Errorf("the banner does not list the features_grpc listener:\n%s", logs)
	}
}

// zeroList is a JSON list of n zeros.
func zeroList(n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat("0,", n), ",") + "]"
}
