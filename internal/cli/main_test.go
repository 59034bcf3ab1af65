package cli

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine running: a
// start-up that fails half-way must close what it opened. OpenCensus
// (pulled in by the GCS client) starts one worker at init, for the
// process's life.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}
