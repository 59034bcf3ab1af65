package servingapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/pb/feastpb"
)

// BenchmarkEdges reads 50 Float32 features of 1 and of 100 entities
// through each edge over loopback TCP: POST /get-online-features (JSON)
// and Feast's gRPC GetOnlineFeatures (protobuf). The client's encoding and
// decoding count, as a client pays them.
func BenchmarkEdges(b *testing.B) {
	srv, refs, _ := wideServer(b)
	var lc net.ListenConfig
	ln, err := lc.Listen(b.Context(), "tcp", "127.0.0.1:0")
	require.NoError(b, err)
	hs := &http.Server{Handler: NewHandler(srv, HandlerOptions{}, nil, nil)}
	go func() { _ = hs.Serve(ln) }()
	b.Cleanup(func() { _ = hs.Close() })
	client := feastpb.NewServingServiceClient(serveGRPC(b, srv, GRPCOptions{}, nil, nil))
	hc := &http.Client{}

	for _, rows := range []int{1, 100} {
		ids := make([]int64, rows)
		rv := &feastpb.RepeatedValue{}
		for i := range ids {
			ids[i] = int64(i * 7 % 1000)
			rv.Val = append(rv.Val, &feastpb.Value{Val: &feastpb.Value_Int64Val{Int64Val: ids[i]}})
		}
		body, err := json.Marshal(map[string]any{"features": refs, "entities": map[string]any{"user_id": ids}})
		require.NoError(b, err)
		req := &feastpb.GetOnlineFeaturesRequest{
			Kind:     &feastpb.GetOnlineFeaturesRequest_Features{Features: &feastpb.FeatureList{Val: refs}},
			Entities: map[string]*feastpb.RepeatedValue{"user_id": rv},
		}
		b.Run(fmt.Sprintf("http_json/rows=%d", rows), func(b *testing.B) {
			url := "http://" + ln.Addr().String() + "/get-online-features"
			b.ReportAllocs()
			for b.Loop() {
				resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				var out struct {
					Results []struct {
						Values   []any    `json:"values"`
						Statuses []string `json:"statuses"`
					} `json:"results"`
				}
				err = json.NewDecoder(resp.Body).Decode(&out)
				_ = resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || len(out.Results) != 51 || !strings.EqualFold(out.Results[50].Statuses[0], "PRESENT") {
					b.Fatalf("status %d, %d columns, err %v", resp.StatusCode, len(out.Results), err)
				}
			}
		})
		b.Run(fmt.Sprintf("grpc/rows=%d", rows), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				out, err := client.GetOnlineFeatures(b.Context(), req)
				if err != nil || len(out.GetResults()) != 51 || out.GetResults()[50].GetStatuses()[0] != feastpb.FieldStatus_PRESENT {
					b.Fatalf("%v", err)
				}
			}
		})
	}
}
