package replay

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/grpcapi"
	"github.com/sluice-ml/sluice/internal/httpapi"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelrepo"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/release/record"
)

// fakeModel serves model "parcel_eta", a deterministic function of its
// FP32 input "features" [1,4]:
//
//	eta_prediction   = 10 + 3·x0 + 0.5·x1 − x2·x3   (version "2": ×1.1)
//	confidence_score = 1 / (1 + |x2|)
//	route_class      = INT64 ⌊x0⌋
//	label            = BYTES "eta" (records leave it out)
//
// Each call sleeps a few milliseconds chosen by the request id, so calls
// finish out of order. Model "slow" answers only when its context ends;
// every other name is not found.
type fakeModel struct {
	calls    atomic.Int64
	inFlight atomic.Int64
	maxSeen  atomic.Int64
	noDelay  bool
}

func (f *fakeModel) Infer(ctx context.Context, req *infer.Request) (*infer.Response, error) {
	f.calls.Add(1)
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		m := f.maxSeen.Load()
		if n <= m || f.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	switch req.Model {
	case "parcel_eta":
	case "slow":
		<-ctx.Done()
		return nil, apierr.Errorf(apierr.KindTimeout, "queue_timeout", "model 'slow' timed out")
	default:
		return nil, apierr.Errorf(apierr.KindNotFound, "model_not_found", "model '%s' is not in the repository", req.Model)
	}
	if !f.noDelay {
		h := fnv.New32a()
		_, _ = h.Write([]byte(req.ID))
		select {
		case <-time.After(time.Duration(h.Sum32()%4) * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return fakeAnswer(req)
}

// fakeAnswer computes the model's answer.
func fakeAnswer(req *infer.Request) (*infer.Response, error) {
	in := req.Input("features")
	if in == nil || in.DataType != infer.FP32 || len(in.Data) != 16 {
		return nil, apierr.Errorf(apierr.KindInvalid, "invalid_input", "want input 'features' FP32 [1,4]")
	}
	x := make([]float32, 4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(in.Data[4*i:]))
	}
	eta := 10 + 3*x[0] + 0.5*x[1] - x[2]*x[3]
	if req.Version == "2" {
		eta *= 1.1
	}
	conf := 1 / (1 + float32(math.Abs(float64(x[2]))))
	f32 := func(v float32) []byte { return binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)) }
	version := req.Version
	if version == "" {
		version = "1"
	}
	return &infer.Response{ID: req.ID, Model: req.Model, Version: version, Outputs: []infer.Tensor{
		{Name: "eta_prediction", DataType: infer.FP32, Shape: infer.Shape{1, 1}, Data: f32(eta)},
		{Name: "confidence_score", DataType: infer.FP32, Shape: infer.Shape{1, 1}, Data: f32(conf)},
		{Name: "route_class", DataType: infer.Int64, Shape: infer.Shape{1, 1}, Data: binary.LittleEndian.AppendUint64(nil, uint64(int64(math.Floor(float64(x[0])))))},
		{Name: "label", DataType: infer.Bytes, Shape: infer.Shape{1}, Data: infer.AppendBytesElement(nil, []byte("eta"))},
	}}, nil
}

func (f *fakeModel) Metadata(context.Context, string, string) (*modelrepo.Metadata, error) {
	return &modelrepo.Metadata{Name: "parcel_eta", Versions: []string{"1", "2"}}, nil
}

func (f *fakeModel) Config(context.Context, string, string) (*inferencepb.ModelConfig, error) {
	return &inferencepb.ModelConfig{Name: "parcel_eta"}, nil
}
func (f *fakeModel) ModelReady(context.Context, string, string) error { return nil }
func (f *fakeModel) Live() bool                                       { return true }
func (f *fakeModel) Ready() bool                                      { return true }
func (f *fakeModel) Index(context.Context, bool) []modelrepo.IndexEntry {
	return []modelrepo.IndexEntry{{Name: "parcel_eta", Version: "1", State: modelrepo.StateReady}}
}
func (f *fakeModel) Load(context.Context, string, modelrepo.LoadOptions) error     { return nil }
func (f *fakeModel) Unload(context.Context, string, modelrepo.UnloadOptions) error { return nil }
func (f *fakeModel) Statistics(context.Context, string, string) ([]modelrepo.ModelStats, error) {
	return nil, nil
}

// startGRPC serves f on a loopback gRPC port and returns its address.
func startGRPC(t *testing.T, f *fakeModel) string {
	t.Helper()
	svc := grpcapi.New(f, grpcapi.Options{}, nil, nil)
	srv := grpcapi.NewServer(svc, grpcapi.ServerOptions{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		svc.Shutdown()
		srv.Stop()
		require.NoError(t, <-served)
	})
	return lis.Addr().String()
}

// startHTTP serves f over the KServe v2 HTTP protocol and returns its URL.
func startHTTP(t *testing.T, f *fakeModel) string {
	t.Helper()
	srv := httptest.NewServer(httpapi.New(f, httpapi.Options{}, nil, nil))
	t.Cleanup(srv.Close)
	return srv.URL
}

// memSink is a record.Sink that keeps records in memory.
type memSink struct {
	mu     sync.Mutex // protects recs, writes and fail
	recs   []*record.Record
	writes int
	fail   error
}

func (s *memSink) Write(_ context.Context, recs []*record.Record) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	if s.fail != nil {
		return 0, s.fail
	}
	s.recs = append(s.recs, recs...)
	return len(recs), nil
}

func (s *memSink) Close(context.Context) error { return nil }

func (s *memSink) records() []*record.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*record.Record(nil), s.recs...)
}

// serviceHandler fakes a Sluice inference service: it answers
// POST /v1/services/<name>:predict like the gateway, from the request
// fields base_eta and distance, and records the headers it saw.
type serviceHandler struct {
	mu      sync.Mutex // protects headers
	headers []http.Header
}

func (s *serviceHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.headers = append(s.headers, r.Header.Clone())
	s.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/v1/services/parcel-eta:predict" {
		http.Error(w, `{"error":"no such service","reason":"service_not_found"}`, http.StatusNotFound)
		return
	}
	var body struct {
		UserID   json.Number `json:"user_id"`
		BaseETA  float64     `json:"base_eta"`
		Distance float64     `json:"distance"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, `{"error":"bad body","reason":"invalid_request"}`, http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if body.UserID == "13" {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":"model down","reason":"upstream_unavailable"}`))
		return
	}
	eta := body.BaseETA + 2*body.Distance
	fmt.Fprintf(w, `{"request_id":%q,"service":"parcel-eta","route":"default","model":"parcel_eta","version":"3","source":"model","outputs":{"eta_minutes":%s,"scores":[1,%s]}}`+"\n",
		r.Header.Get("X-Request-Id"), strconv.FormatFloat(eta, 'g', -1, 64), strconv.FormatFloat(body.Distance, 'g', -1, 64))
}

// httptestServer serves h on loopback and returns its URL.
func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// closedURL returns the URL of a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	return "http://" + addr
}
