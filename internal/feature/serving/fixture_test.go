package serving

import (
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
)

// now is the fixed clock of the tests.
var now = servingtest.Now

// fixture is a Server over servingtest's fake store and repository.
type fixture struct {
	*servingtest.Fixture
	srv *Server
}

func newFixture(tb testing.TB, opts Options) *fixture {
	tb.Helper()
	f := &fixture{Fixture: servingtest.NewFixture(tb, nil)}
	if opts.Now == nil {
		opts.Now = func() time.Time { return now }
	}
	f.srv = New(f.Hold, f.Store, opts, f.Logger, f.Reg)
	return f
}

func i64(n int64) feature.Value   { return feature.Value{I64: n} }
func f64(x float64) feature.Value { return feature.Value{F64: x} }
func str(s string) feature.Value  { return feature.Value{S: s} }
