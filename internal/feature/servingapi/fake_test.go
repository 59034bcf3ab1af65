package servingapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/goleak"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// now is the fixed clock of the tests.
var now = servingtest.Now

// epoch is the event timestamp of entity columns and missing values.
var epoch = time.Unix(0, 0).UTC()

// fixture is a Server over servingtest's fake store and repository, and
// its HTTP edge.
type fixture struct {
	*servingtest.Fixture
	srv *serving.Server
	h   *Handler
}

func newFixture(tb testing.TB, opts serving.Options) *fixture {
	tb.Helper()
	f := &fixture{Fixture: servingtest.NewFixture(tb, nil)}
	if opts.Now == nil {
		opts.Now = func() time.Time { return now }
	}
	f.srv = serving.New(f.Hold, f.Store, opts, f.Logger, f.Reg)
	f.h = NewHandler(f.srv, HandlerOptions{MaxBodyBytes: 1 << 16, Metrics: promhttp.HandlerFor(f.Reg, promhttp.HandlerOpts{})}, f.Logger, f.Reg)
	return f
}

// post sends body to path and returns the status and decoded body.
func (f *fixture) post(tb testing.TB, path, body string) (int, []byte) {
	tb.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

func i64(n int64) feature.Value   { return feature.Value{I64: n} }
func f64(x float64) feature.Value { return feature.Value{F64: x} }
func str(s string) feature.Value  { return feature.Value{S: s} }
func null() feature.Value         { return feature.Value{Null: true} }
