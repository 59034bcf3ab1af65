package gateway_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/infer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The fakes below stand in for the model server (LocalModels), remote
// KServe v2 model servers (RemoteModels) and the feature server
// (FeatureReader), so the tests drive the real HTTP edge of the gateway
// with nothing but in-process state.

// Interface guards: the fakes must keep satisfying what gateway.New takes.
var (
	_ gateway.LocalModels   = (*fakeModel)(nil)
	_ gateway.RemoteModels  = (*fakeRemote)(nil)
	_ gateway.FeatureReader = (*fakeFeatures)(nil)
)

// fakeModel is an in-process model server. By default it answers
// eta_prediction = the sum of every input element (FP32) and
// confidence_score = conf, and echoes the requested version ("1" when
// none). fn, when set, replaces that.
type fakeModel struct {
	conf  atomic.Value // float64
	calls atomic.Int64
	fn    atomic.Pointer[func(context.Context, *infer.Request) (*infer.Response, error)]

	mu   sync.Mutex
	reqs []*infer.Request // the last requests received, in order
}

func newFakeModel() *fakeModel {
	m := &fakeModel{}
	m.conf.Store(0.9)
	return m
}

// setFn replaces the model's behaviour.
func (m *fakeModel) setFn(fn func(context.Context, *infer.Request) (*infer.Response, error)) {
	m.fn.Store(&fn)
}

func (m *fakeModel) Infer(ctx context.Context, req *infer.Request) (*infer.Response, error) {
	m.calls.Add(1)
	m.mu.Lock()
	if len(m.reqs) >= 256 { // bounded for fuzzing and load loops
		m.reqs = slices.Delete(m.reqs, 0, 128)
	}
	m.reqs = append(m.reqs, cloneRequest(req))
	m.mu.Unlock()
	if fn := m.fn.Load(); fn != nil {
		return (*fn)(ctx, req)
	}
	return sumResponse(req, m.conf.Load().(float64)), nil
}

func (m *fakeModel) ModelReady(context.Context, string, string) error { return nil }

// last returns the last request the model received.
func (m *fakeModel) last(t *testing.T) *infer.Request {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	require.NotEmpty(t, m.reqs, "the model received no request")
	return m.reqs[len(m.reqs)-1]
}

func cloneRequest(r *infer.Request) *infer.Request {
	c := *r
	c.Inputs = slices.Clone(r.Inputs)
	for i := range c.Inputs {
		c.Inputs[i].Data = slices.Clone(r.Inputs[i].Data)
		c.Inputs[i].Shape = slices.Clone(r.Inputs[i].Shape)
	}
	c.Outputs = slices.Clone(r.Outputs)
	if r.Parameters != nil {
		c.Parameters = maps.Clone(r.Parameters)
	}
	return &c
}

// sumResponse is the default model: eta_prediction is the sum of every
// input element, confidence_score is conf.
func sumResponse(req *infer.Request, conf float64) *infer.Response {
	sum := 0.0
	for i := range req.Inputs {
		for _, x := range tensorFloats(&req.Inputs[i]) {
			sum += x
		}
	}
	v := req.Version
	if v == "" {
		v = "1"
	}
	return &infer.Response{
		ID: req.ID, Model: req.Model, Version: v,
		Outputs: []infer.Tensor{fp32Tensor("eta_prediction", sum), fp32Tensor("confidence_score", conf)},
	}
}

func fp32Tensor(name string, x float64) infer.Tensor {
	d := make([]byte, 4)
	binary.LittleEndian.PutUint32(d, math.Float32bits(float32(x)))
	return infer.Tensor{Name: name, DataType: infer.FP32, Shape: infer.Shape{1, 1}, Data: d}
}

// tensorFloats decodes a numeric tensor's elements.
func tensorFloats(t *infer.Tensor) []float64 {
	size := t.DataType.Size()
	if size == 0 {
		return nil
	}
	out := make([]float64, 0, len(t.Data)/size)
	for off := 0; off+size <= len(t.Data); off += size {
		d := t.Data[off:]
		switch t.DataType {
		case infer.FP32:
			out = append(out, float64(math.Float32frombits(binary.LittleEndian.Uint32(d))))
		case infer.FP64:
			out = append(out, math.Float64frombits(binary.LittleEndian.Uint64(d)))
		case infer.Int64:
			out = append(out, float64(int64(binary.LittleEndian.Uint64(d))))
		case infer.Int32:
			out = append(out, float64(int32(binary.LittleEndian.Uint32(d))))
		default:
			return nil
		}
	}
	return out
}

// rpcError is a failed remote call, shaped like kserve.RPCError: a gRPC
// status, the domain error (Unwrap) and whether the request never left.
type rpcError struct {
	st      *status.Status
	ie      *apierr.Error
	connect bool
}

func (e *rpcError) Error() string              { return e.ie.Error() }
func (e *rpcError) Unwrap() error              { return e.ie }
func (e *rpcError) GRPCStatus() *status.Status { return e.st }
func (e *rpcError) ConnectFailure() bool       { return e.connect }

// behaviour is what a fake remote endpoint does with a call.
type behaviour int

const (
	behaveOK          behaviour = iota
	behaveUnavailable           // UNAVAILABLE, reason upstream_unavailable (a broken transport)
	behaveInvalid               // INVALID_ARGUMENT with the server's reason invalid_input
	behaveConnectFail           // no connection: UNAVAILABLE, ConnectFailure
	behaveHang                  // wait until the call's context ends
)

// remoteCall is one call a fake remote endpoint received.
type remoteCall struct {
	addr  string
	reqID string
}

// fakeRemote is a pool of KServe v2 gRPC model servers, one behaviour per
// address (behaveOK when unset). A successful call answers like
// fakeModel's default; the call log tells which endpoints a request tried.
type fakeRemote struct {
	mu        sync.Mutex
	behave    map[string]behaviour
	ready     map[string]bool // ServerReady answer; missing means true
	calls     []remoteCall
	forgotten []string
}

func newFakeRemote() *fakeRemote {
	return &fakeRemote{behave: map[string]behaviour{}, ready: map[string]bool{}}
}

func (f *fakeRemote) set(addr string, b behaviour) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.behave[addr] = b
}

func (f *fakeRemote) setReady(addr string, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready[addr] = ok
}

func (f *fakeRemote) Infer(ctx context.Context, addr string, req *infer.Request) (*infer.Response, error) {
	f.mu.Lock()
	f.calls = append(f.calls, remoteCall{addr: addr, reqID: req.ID})
	b := f.behave[addr]
	f.mu.Unlock()
	switch b {
	case behaveUnavailable:
		return nil, &rpcError{
			st: status.New(codes.Unavailable, "connection reset"),
			ie: &apierr.Error{Kind: apierr.KindUnavailable, Reason: "upstream_unavailable", Msg: "ModelInfer " + addr + ": Unavailable: connection reset"},
		}
	case behaveInvalid:
		return nil, &rpcError{
			st: status.New(codes.InvalidArgument, "bad input"),
			ie: &apierr.Error{Kind: apierr.KindInvalid, Reason: "invalid_input", Msg: "ModelInfer " + addr + ": InvalidArgument: bad input"},
		}
	case behaveConnectFail:
		return nil, &rpcError{
			st:      status.New(codes.Unavailable, "connection refused"),
			ie:      &apierr.Error{Kind: apierr.KindUnavailable, Reason: "upstream_unavailable", Msg: "ModelInfer " + addr + ": Unavailable: connection refused"},
			connect: true,
		}
	case behaveHang:
		<-ctx.Done()
		return nil, &rpcError{
			st: status.FromContextError(ctx.Err()),
			ie: &apierr.Error{Kind: apierr.KindTimeout, Reason: "upstream_timeout", Msg: "ModelInfer " + addr + ": DeadlineExceeded"},
		}
	case behaveOK:
	}
	return sumResponse(req, 0.9), nil
}

func (f *fakeRemote) ServerReady(_ context.Context, addr string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ok, set := f.ready[addr]
	return ok || !set, nil
}

func (f *fakeRemote) ModelReady(context.Context, string, string, string) (bool, error) {
	return true, nil
}

func (f *fakeRemote) Forget(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgotten = append(f.forgotten, addr)
}

// callsOf returns the endpoints request reqID was sent to, in order.
func (f *fakeRemote) callsOf(reqID string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if c.reqID == reqID {
			out = append(out, c.addr)
		}
	}
	return out
}

// callsTo counts the calls endpoint addr received.
func (f *fakeRemote) callsTo(addr string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c.addr == addr {
			n++
		}
	}
	return n
}

// fakeFeatures is the feature server over the test feature repository:
// values are kept per "view:feature" and entity id; a missing one is
// NOT_FOUND. err, when set, fails every read.
type fakeFeatures struct {
	repo  *registry.Repo
	calls atomic.Int64

	mu   sync.Mutex
	vals map[string]map[int64]feature.Value // ref → entity id → value
	// unreadable: ref → why its stored value reads NOT_FOUND (a schema
	// reason), for every entity.
	unreadable map[string]string
	err        error
	last       *serving.Request
}

func newFakeFeatures(repo *registry.Repo) *fakeFeatures {
	return &fakeFeatures{repo: repo, vals: map[string]map[int64]feature.Value{}}
}

func (f *fakeFeatures) put(ref string, id int64, v feature.Value) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.vals[ref] == nil {
		f.vals[ref] = map[int64]feature.Value{}
	}
	f.vals[ref][id] = v
}

func (f *fakeFeatures) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeFeatures) lastRequest() *serving.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

func (f *fakeFeatures) GetOnlineFeatures(ctx context.Context, req *serving.Request) (*serving.Response, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = req
	if f.err != nil {
		return nil, f.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(req.Entities))
	for k := range req.Entities {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	resp := &serving.Response{EntityColumns: len(keys)}
	for _, k := range keys {
		resp.FeatureNames = append(resp.FeatureNames, k)
		resp.Types = append(resp.Types, feature.Type{Kind: feature.KindInt64})
		resp.Results = append(resp.Results, serving.Column{
			Values: req.Entities[k], Statuses: []serving.Status{serving.StatusPresent}, EventTimestamps: []time.Time{time.Unix(0, 0)},
		})
	}
	for _, ref := range req.Features {
		view, name, _ := strings.Cut(ref, ":")
		joinKeys, _ := f.repo.JoinKeys(view)
		var typ feature.Type
		for _, fd := range f.repo.Views[view].Schema {
			if fd.Name == name {
				typ = fd.Type
			}
		}
		col := serving.Column{Values: []feature.Value{{Null: true}}, Statuses: []serving.Status{serving.StatusNotFound}, EventTimestamps: []time.Time{{}}}
		if why := f.unreadable[ref]; why != "" {
			col.Unreadable = []string{why}
		} else if ents := req.Entities[joinKeys[0]]; len(ents) == 1 {
			if v, ok := f.vals[ref][ents[0].I64]; ok {
				col = serving.Column{Values: []feature.Value{v}, Statuses: []serving.Status{serving.StatusPresent}, EventTimestamps: []time.Time{time.Unix(1, 0)}}
			}
		}
		resp.FeatureNames = append(resp.FeatureNames, view+"__"+name)
		resp.Types = append(resp.Types, typ)
		resp.Results = append(resp.Results, col)
	}
	return resp, nil
}

// staleErr is the feature server's answer while a view is stale.
func staleErr() error {
	return apierr.Errorf(apierr.KindUnavailable, serving.ReasonViewStale, "feature view \"user_stats\" is stale: last materialized 2h ago")
}

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// testEnv is a gateway wired to the fakes.
type testEnv struct {
	g        *gateway.Gateway
	model    *fakeModel
	remote   *fakeRemote
	features *fakeFeatures
	repo     *registry.Repo
	clock    *fakeClock
	reg      *prometheus.Registry
}

// loadRepo loads the test feature repository.
func loadRepo(tb testing.TB) *registry.Repo {
	tb.Helper()
	repo, err := registry.Load(context.Background(), "testdata/features")
	require.NoError(tb, err)
	return repo
}

// parseConfig parses a sluice.yaml as Load does (defaults, validation).
func parseConfig(tb testing.TB, yaml string) *config.Config {
	tb.Helper()
	env := map[string]string{"TEST_API_KEY": "key-from-env"}
	cfg, err := config.Parse("test.yaml", []byte(yaml), func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
	require.NoError(tb, err, "config:\n%s", yaml)
	return cfg
}

// newEnv builds a gateway over the fakes from cfg; mod may adjust the
// options before New.
func newEnv(tb testing.TB, cfg *config.Config, mod ...func(*gateway.Options)) *testEnv {
	tb.Helper()
	repo := loadRepo(tb)
	e := &testEnv{
		model: newFakeModel(), remote: newFakeRemote(), features: newFakeFeatures(repo),
		repo: repo, clock: newFakeClock(), reg: prometheus.NewRegistry(),
	}
	opts := gateway.Options{
		Models: e.model, Remote: e.remote, Features: e.features,
		FeatureRepo: func() *registry.Repo { return repo },
		Now:         e.clock.Now,
	}
	for _, m := range mod {
		m(&opts)
	}
	g, err := gateway.New(cfg, opts, nil, e.reg)
	require.NoError(tb, err)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(tb, g.Close(ctx))
	})
	e.g = g
	return e
}

// runGateway runs e's gateway (its shadow workers, access-log writer,
// health checks...) as the server command does, until the test ends.
func runGateway(tb testing.TB, e *testEnv) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.g.RunBackground(ctx) }()
	tb.Cleanup(func() {
		cancel()
		require.NoError(tb, <-done)
	})
}

// result is a decoded gateway answer: a prediction or an error.
type result struct {
	Code   int         `json:"-"`
	Header http.Header `json:"-"`
	Body   []byte      `json:"-"`

	RequestID string             `json:"request_id"`
	Service   string             `json:"service"`
	Route     string             `json:"route"`
	Model     string             `json:"model"`
	Version   string             `json:"version"`
	Source    string             `json:"source"`
	Outputs   map[string]float64 `json:"outputs"`
	Error     string             `json:"error"`
	Reason    string             `json:"reason"`
}

// call sends one request through h. hdr holds header name, value pairs;
// a "RemoteAddr" pair sets the peer address instead.
func call(tb testing.TB, h http.Handler, method, path, body string, hdr ...string) *result {
	tb.Helper()
	r := httptest.NewRequestWithContext(context.Background(), method, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "RemoteAddr" {
			r.RemoteAddr = hdr[i+1]
			continue
		}
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	res := &result{Code: w.Code, Header: w.Header(), Body: w.Body.Bytes()}
	require.Equal(tb, "application/json", w.Header().Get("Content-Type"), "body: %s", res.Body)
	require.NoError(tb, json.Unmarshal(res.Body, res), "body: %s", res.Body)
	return res
}

// post calls the eta service.
func (e *testEnv) post(tb testing.TB, body string, hdr ...string) *result {
	tb.Helper()
	return call(tb, e.g, http.MethodPost, etaPath, body, hdr...)
}

// requireOK fails unless res is a 200 answer.
func requireOK(tb testing.TB, res *result) {
	tb.Helper()
	require.Equal(tb, http.StatusOK, res.Code, "body: %s", res.Body)
}

// requireError fails unless res is an error answer with code and reason.
func requireError(tb testing.TB, res *result, code int, reason string) {
	tb.Helper()
	require.Equal(tb, code, res.Code, "body: %s", res.Body)
	require.Equal(tb, reason, res.Reason, "body: %s", res.Body)
	require.NotEmpty(tb, res.Error, "body: %s", res.Body)
}

// metricValue returns the sum of the counter or gauge series name whose
// labels include labels in reg, 0 when there is none.
func metricValue(tb testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	require.NoError(tb, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !labelsMatch(m.GetLabel(), labels) {
				continue
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

func labelsMatch(got []*dto.LabelPair, want map[string]string) bool {
	n := 0
	for _, lp := range got {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}
